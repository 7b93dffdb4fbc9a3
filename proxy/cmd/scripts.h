/* scripts.h - sluice's Lua scripts (the lua folder, compiled in), their SHA1s,
 * and the EVALSHA / SCRIPT LOAD requests that run them. */
#ifndef SLUICE_SCRIPTS_H
#define SLUICE_SCRIPTS_H

#include <stddef.h>

#include "sv.h"

struct evbuffer;

struct script {
    const char *name;   /* file name without .lua */
    const char *body;
    char sha1[41];      /* lower-case hex */
    /* "EVALSHA sha1" and "EVAL body" as the first two RESP bulks of a call,
     * rendered once by scripts_init. */
    char evalsha_head[64];
    size_t evalsha_head_len;
    char *eval_head;
    size_t eval_head_len;
};

/* Compute every script's SHA1. Returns 0, or -1 when a script is missing. */
int scripts_init(void);

/* The script named NAME (e.g. "lock_acquire"); NULL if there is none. */
const struct script *scripts_find(const char *name);

/* Append "EVALSHA sha numkeys keys... args..." in RESP to OUT. */
void scripts_write_evalsha(struct evbuffer *out, const struct script *s, int numkeys,
                           const struct sv *keys, int argc, const struct sv *args);

/* The same as EVAL with the script's body (after NOSCRIPT: Redis caches
 * the script as it runs it). */
void scripts_write_eval(struct evbuffer *out, const struct script *s, int numkeys,
                        const struct sv *keys, int argc, const struct sv *args);

/* Append "SCRIPT LOAD body" in RESP to OUT. */
void scripts_write_load(struct evbuffer *out, const struct script *s);

int scripts_count(void);
const struct script *scripts_by_index(int i);

#endif
