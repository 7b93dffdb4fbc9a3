/* lock.h - the LOCK, UNLOCK and RENEW verbs: distributed locks that sluice
 * runs as EVALSHA of its own Lua scripts (lua/lock_*.lua). */
#ifndef SLUICE_LOCK_H
#define SLUICE_LOCK_H

#include "sv.h"

struct client;
struct request;

/* Build tables (fence key tags). After scripts_init. Returns 0 or -1. */
int lock_init(void);

/* Non-zero when REQ is a LOCK, UNLOCK or RENEW. */
int lock_wants(const struct request *req, int argc, const struct sv *argv);

/* Handle REQ, already in C's reply queue; its original bytes are the
 * caller's to drop. Answers at once (bad arguments; inside MULTI, which
 * then makes EXEC fail; in pub/sub or MONITOR mode) or rewrites REQ into
 * an EVALSHA and forwards it, blocking C's further commands until it is
 * answered. */
void lock_handle(struct client *c, struct request *req, int argc, const struct sv *argv);

/* C is closing: stop its KEEP renewals and release the locks it took
 * without OWNER. */
void lock_client_closed(struct client *c);

/* Name of the fence counter of lock KEY (LEN bytes, any bytes), in the
 * same hash slot: written to OUT with a NUL when it fits in SIZE bytes.
 * Returns its length either way (as snprintf does). */
size_t lock_fence_key(const char *key, size_t len, char *out, size_t size);

/* KEEP renewals running now (sluice_lock_keep_active). */
int lock_keep_active(void);

#endif
