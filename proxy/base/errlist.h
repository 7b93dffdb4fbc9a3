/* errlist.h - a growing list of "FILE:LINE: message" lines, filled by the
 * config and rule parsers and shown by sluice -t, the log or PROXY RELOAD. */
#ifndef SLUICE_ERRLIST_H
#define SLUICE_ERRLIST_H

#include <stddef.h>

struct errlist {
    char *text;     /* NUL-terminated, one error a line; NULL when empty */
    size_t len;
    int count;
};

void errlist_add(struct errlist *errs, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A parser's setter may find several problems in one value: it writes
 * each with errlist_msg_append into its message buffer BUF (SIZE bytes,
 * cut to fit), a newline between them; errlist_add_each then adds each as
 * "FILE:LINE: KEY: message". */
void errlist_msg_append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void errlist_add_each(struct errlist *errs, const char *file, int line, const char *key,
                      const char *msgs);
/* The first line of the list, without its newline, copied into BUF. */
void errlist_first(const struct errlist *errs, char *buf, size_t size);
void errlist_free(struct errlist *errs);

#endif
