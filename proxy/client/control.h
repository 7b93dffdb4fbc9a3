/* control.h - the operator's controls over this sluice (PROXY PAUSE,
 * RESUME, DRAIN, UNDRAIN, READY): their state, the requests a pause holds
 * in sluice, and what /readyz and PROXY INFO say of them. */
#ifndef SLUICE_CONTROL_H
#define SLUICE_CONTROL_H

#include <stddef.h>
#include <stdint.h>

struct client;
struct evbuffer;
struct request;
struct sv;

/* Whether a pause holds REQ (ARGV its words; VERB: one of sluice's own
 * verbs that runs on Redis: LOCK, UNLOCK, RENEW). */
int control_would_hold(const struct request *req, const struct sv *argv, int verb);

/* Hold REQ of C until the pause ends: its bytes are taken from SRC (NULL:
 * in req->raw already) and C reads no further command; the pause's end
 * gives it back through client_release_held. Returns 0, or -1 when out
 * of memory (REQ is then the caller's still). */
int control_hold(struct client *c, struct request *req, struct evbuffer *src);

/* Sentinel mode (the backend layer's hold hook, registered by main.c):
 * ON 1 holds every later write as PAUSE WRITE would; ON 0 ends that and
 * gives the held requests back, unless an operator's pause still holds
 * them. Returns how many were given back. */
int control_failover_hold(int on);

/* C is closing: the request a pause holds for it is freed. */
void control_client_closed(struct client *c);

/* The PROXY subcommands (local.c's table): each answers into OUT and logs
 * an audit line naming CALLER's user and address. */
void control_proxy_pause(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out);
void control_proxy_resume(struct client *caller, int argc, const struct sv *argv,
                          struct evbuffer *out);
void control_proxy_drain(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out);
void control_proxy_undrain(struct client *caller, int argc, const struct sv *argv,
                           struct evbuffer *out);
void control_proxy_ready(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out);
void control_proxy_node(struct client *caller, int argc, const struct sv *argv,
                        struct evbuffer *out);

/* /readyz: 0 with WHY set when a control says "not ready" (READY NO, a
 * drain), 1 otherwise (the other checks then decide). */
int control_ready(char *why, size_t len);

/* Whether a drain has closed the doors (sluice accepts no clients). */
int control_drained(void);

/* Once a tick (NOW_MS): a pause whose TIMEOUT passed ends; a drain whose
 * grace passed stops accepting and closes every client between replies. */
void control_cron(uint64_t now_ms);

/* PROXY INFO's "# Controls" lines. */
void control_write_info(struct evbuffer *out);

#endif
