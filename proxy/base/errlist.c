/* errlist.c - owns the text of collected configuration errors. */
#include "errlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void errlist_add(struct errlist *errs, const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    char *grown;
    int n;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    n = snprintf(NULL, 0, "%s:%d: %s\n", file, line, msg);
    grown = realloc(errs->text, errs->len + (size_t)n + 1);
    if (grown == NULL)
        return;
    errs->text = grown;
    snprintf(errs->text + errs->len, (size_t)n + 1, "%s:%d: %s\n", file, line, msg);
    errs->len += (size_t)n;
    errs->count++;
}

void errlist_msg_append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strnlen(buf, size);
    va_list ap;

    if (used > 0 && used + 1 < size)
        buf[used++] = '\n';
    if (used + 1 >= size)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

void errlist_add_each(struct errlist *errs, const char *file, int line, const char *key,
                      const char *msgs)
{
    do {
        int n = (int)strcspn(msgs, "\n");

        errlist_add(errs, file, line, "%s: %.*s", key, n, msgs);
        msgs += n;
    } while (*msgs++ != '\0');
}

void errlist_first(const struct errlist *errs, char *buf, size_t size)
{
    size_t n;

    if (size == 0)
        return;
    buf[0] = '\0';
    if (errs->text == NULL)
        return;
    n = strcspn(errs->text, "\n");
    if (n >= size)
        n = size - 1;
    memcpy(buf, errs->text, n);
    buf[n] = '\0';
}

void errlist_free(struct errlist *errs)
{
    free(errs->text);
    errs->text = NULL;
    errs->len = 0;
    errs->count = 0;
}
