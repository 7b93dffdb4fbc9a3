/* sentinel.h - Sentinel mode: which node is the standalone primary, as
 * a majority of the Sentinels of `sentinel =` say for `sentinel_master`
 * (sentinel_vote.h), checked with ROLE, asked again on +switch-master;
 * and what happens to requests while
 * the primary changes (README "Sentinel"). Inactive unless the config
 * names Sentinels. */
#ifndef SLUICE_SENTINEL_H
#define SLUICE_SENTINEL_H

#include <stddef.h>

struct event_base;
struct evbuffer;
struct config;
struct errlist;
struct request;

/* Sentinel mode: find the primary before sluice serves (runs BASE's loop
 * until a majority of the Sentinels name an address that ROLE confirms is
 * a primary), and
 * hand it to backend_init. Returns 0 (also outside Sentinel mode), or -1
 * with ERR: every Sentinel that answered does not know the master, or
 * none answered within failover_retry_window. */
int sentinel_start(struct event_base *base, const struct config *cfg, char *err, size_t errlen);

/* After backend_init: subscribe to +switch-master, ask again every
 * sentinel_refresh_interval, and take over requests while the primary
 * changes. */
void sentinel_run(void);
void sentinel_free(void);

/* Whether sluice runs in Sentinel mode. */
int sentinel_enabled(void);

/* REQ (its bytes in req->raw) could not be sent, the primary being down:
 * take it to send to the primary once one is up (failover_retry_window).
 * Returns 1 when taken (REQ_DETACHED meanwhile), 0 when the caller
 * answers the error. */
int sentinel_take_unsent(struct request *req);

/* sluice -t, on a config without errors: a warning into WARNS for an
 * even number of Sentinels (a majority tolerates no more down than one
 * fewer would) and for a Sentinel that cannot be reached; an error into
 * ERRS for each Sentinel that answered and does not know the master
 * (asked now, blocking: no loop runs). */
void sentinel_check(const struct config *cfg, struct errlist *errs, struct errlist *warns);

/* "# Sentinel" lines of PROXY INFO; PROXY SENTINEL's text. */
void sentinel_write_info(struct evbuffer *out);

#endif
