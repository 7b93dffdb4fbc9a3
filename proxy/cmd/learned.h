/* learned.h - the cache of what sluice learned from Redis about commands
 * its table does not know (modules): their flags and key positions, kept
 * by name. learn.c (backend/) asks Redis and fills it; the layers that
 * place, route and check commands read it with learned_lookup. */
#ifndef SLUICE_LEARNED_H
#define SLUICE_LEARNED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct evbuffer;

/* Longer names, or names with a NUL, are no module's: not asked about. */
#define LEARN_MAX_NAME 256

struct learned_command {
    char *name;          /* lower case */
    size_t len;
    int known;           /* Redis knows it (else it answers "unknown command") */
    uint32_t flags;      /* enum command_flag bits, as COMMAND INFO gave them */
    int first_key, last_key, key_step;   /* legacy key positions (0: no keys) */
};

/* One name in the cache. While a question about it is out (pending), it
 * is never dropped: its asker holds it. */
struct learned_entry {
    struct learned_command cmd;
    int pending;                   /* COMMAND INFO is out */
    uint64_t learned_ms;           /* when the last answer came */
    TAILQ_ENTRY(learned_entry) link;
};

/* What was learned of the command named NAME (LEN bytes, any case), or
 * NULL when it must be asked first. */
const struct learned_command *learned_lookup(const char *name, size_t len);

/* The entry for NAME (LEN bytes, any case), NULL when there is none. */
struct learned_entry *learned_find(const char *name, size_t len);

/* A new entry for NAME, not pending and not known yet. When the cache is
 * full, the oldest entry not pending goes first, preferring one Redis did
 * not know. */
struct learned_entry *learned_new(const char *name, size_t len);

/* Drop E from the cache and free it. */
void learned_free(struct learned_entry *e);

/* Read COMMAND INFO's reply (LEN bytes at the head of SRC, left there)
 * into E. An answer sluice cannot read counts as a known command that may
 * block: it then takes a private connection, which is always correct,
 * only dearer. */
void learned_parse(struct learned_entry *e, struct evbuffer *src, size_t len);

/* Free every entry at exit. */
void learned_free_all(void);

#endif
