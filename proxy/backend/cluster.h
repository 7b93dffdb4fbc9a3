/* cluster.h - Redis Cluster mode: the slot map (which primary serves each
 * hash slot), kept fresh from CLUSTER SLOTS, and the redirections
 * (MOVED, ASK, TRYAGAIN) that sluice follows so that clients never see
 * them. Inactive unless the config names `cluster =` seeds. */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "sv.h"

struct event_base;
struct evbuffer;
struct config;
struct command;
struct backend_node;
struct backend_login;
struct request;
struct backend_conn;

#define CLUSTER_SLOT_NONE (-1)   /* the request has no keys */
#define CLUSTER_SLOT_CROSS (-2)  /* its keys hash to different slots */

/* Start cluster mode when CFG names seeds: ask them for the slot map now
 * and every cluster_refresh_interval, and follow redirections. After
 * backend_init. Nothing happens in standalone mode. */
void cluster_init(struct event_base *base, const struct config *cfg);
void cluster_free(void);

/* Whether sluice runs in cluster mode. */
int cluster_enabled(void);

/* The primary serving SLOT, or NULL when the map names none. */
struct backend_node *cluster_node_for_slot(int slot);

/* Changes so far to which node owns which slot (MOVED, a new map): a
 * client's requests sent under one version may run in another order than
 * sent when later ones go under another (client_must_wait). */
uint64_t cluster_map_version(void);

/* The slot of every key of a request for CMD (ARGC arguments ARGV):
 * the slot, CLUSTER_SLOT_NONE without keys (or CMD NULL), or
 * CLUSTER_SLOT_CROSS when keys hash to different slots. */
int cluster_request_slot(const struct command *cmd, int argc, const struct sv *argv);

/* Whether a request for CMD whose keys are in SLOT is run in parts
 * (cluster_split_wants, in the client layer, which runs them). */
typedef int cluster_split_wants_fn(const struct command *cmd, int slot);

/* Register FN once at start (main.c): cluster_answer asks it before it
 * refuses keys in several slots. None set: nothing is run in parts. */
void cluster_set_split_wants(cluster_split_wants_fn *fn);

/* What sluice itself answers, in cluster mode, to a request for CMD
 * (NULL: unknown command) with ARGC arguments ARGV before any routing:
 * a whole reply line without its CRLF ("-ERR ..." or "+OK"), or NULL when
 * the request goes on. Includes -CLUSTERDOWN while there is no slot map
 * and -CROSSSLOT (unless cluster_set_split_wants's FN runs it in parts). */
const char *cluster_answer(const struct command *cmd, int argc, const struct sv *argv,
                           int slot);

/* Whether the map names NODE the owner of any slot. */
int cluster_node_is_primary(const struct backend_node *node);

/* REQ (its bytes in req->raw) could not be sent, its node being down:
 * take it to send again later (cluster_retry_window). Returns 1 when
 * taken (REQ_DETACHED meanwhile), 0 when the caller answers the error. */
int cluster_take_unsent(struct request *req);

/* Send a request of sluice's own for SLOT (its bytes: BYTES, moved out)
 * to NODE, on the shared connection of CLIENT_ID (0: sluice's) speaking
 * RESP (2 or 3), or with LOGIN set on LOGIN's script connection (a part
 * of a users_in_redis user's SCRIPT LOAD: never as another user), as
 * backend_send_internal does (ON_REPLY, CTX, CTX_FREE);
 * but when NODE is down, or the connection later fails, it waits to be
 * sent again to SLOT's owner (cluster_retry_window) like a client's
 * request, and redirections send it on the same kind of connection. A
 * connection that fails after the bytes were written sends it again only
 * with FLAGS REQ_RERUNNABLE (it only reads); else the error is its reply.
 * Returns 0, or -1 when it could not be sent nor kept (CTX_FREE has run). */
int cluster_send_own(struct backend_node *node, const struct backend_login *login,
                     unsigned long long client_id, int resp, int slot, unsigned flags,
                     struct evbuffer *bytes,
                     void (*on_reply)(struct request *req, struct evbuffer *src, size_t len,
                                      int type),
                     void *ctx, void (*ctx_free)(struct request *req));

/* Ask for a new slot map soon (rate-limited). */
void cluster_want_refresh(void);

/* PROXY CLUSTER: the map as a bulk string (ranges -> node, node states,
 * last refresh, counters). */
void cluster_write_map(struct evbuffer *out);

#endif
