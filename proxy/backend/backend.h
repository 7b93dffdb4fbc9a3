/* backend.h - Redis nodes and sluice's connections to them: a small shared
 * pool per node, plus private connections for clients with session state. */
#ifndef SLUICE_BACKEND_H
#define SLUICE_BACKEND_H

#include <stddef.h>

#include "request.h"

struct event_base;
struct evbuffer;
struct config;
struct client;
struct request;
struct backend_node;
struct backend_conn;

/* Start connecting the pool of the configured backend (or of each cluster
 * seed); a host name is looked up first, off the loop (resolve.h). Returns
 * 0, or -1 with a message in ERR (an address that is not "host:port"). */
int backend_init(struct event_base *base, const struct config *cfg, char *err, size_t errlen);
void backend_free_all(void);

/* The node for standalone mode (the primary; replicas reads go to are
 * nodes too, after it). In cluster mode: the first node whose first shared
 * connection is up, not a replica kept for reads (else the first node up,
 * else the first node), for keyless commands and sluice's own questions. */
struct backend_node *backend_default_node(void);

/* Sentinel mode (sentinel.c): the primary's "host:port", before
 * backend_init makes its node; and later the node that becomes the
 * default node (the primary), in place of the one before. */
void backend_primary_preset(const char *hostport);
void backend_primary_set(struct backend_node *node);

/* Take every private connection of NODE down with the error WHY (their
 * clients hear it, as when Redis closes one): their sessions were on a
 * primary that is one no more. */
void backend_node_drop_private(struct backend_node *node, const char *why);

/* Cluster mode: the node named HOSTPORT ("host:port"), made (with its
 * pool connecting, a host name's once looked up) when new. NULL when
 * HOSTPORT is not "host:port" (logged). */
struct backend_node *backend_node_get(const char *hostport);

/* Cluster mode: RETIRED 1 when NODE left the slot map: its shared
 * connections close, each once its in-flight requests are answered, and
 * do not reconnect; its spares close; private connections stay with their
 * clients. RETIRED 0 (and backend_node_get of its name) connects it again.
 * The node itself stays known (its name may come back). */
void backend_node_retire(struct backend_node *node, int retired);

/* Cluster mode: reads go to NODE, a replica: each of its shared and
 * one-shot connections says READONLY first (those up now at once). Once
 * set it stays (READONLY does nothing on a primary). Nothing in standalone
 * mode, where Redis refuses READONLY. */
void backend_node_set_readonly(struct backend_node *node);

/* NODE's failures to connect are logged at info, not as warnings: its
 * owner warns once itself (a replica read_from may use, replicas.c). A
 * connection lost is still a warning. */
void backend_node_quiet(struct backend_node *node);
int backend_node_retired(const struct backend_node *node);

/* How long a node stays out of the topology (retired: out of the slot
 * map, a replica no longer named, a primary no more) before its metric
 * series are forgotten: /metrics is then as long as the topology it
 * describes. A node in the topology but down keeps its series (0). */
#define BACKEND_FORGET_MS 10000

/* Forget the metric series of nodes out of the topology for
 * BACKEND_FORGET_MS (checked once a second; called from the tick). */
void backend_forget_departed(uint64_t now_ms);
/* IN_USE says whether a node out of the topology is still used by a
 * module that keeps its series (replicas.c): it is not forgotten then. */
void backend_forget_set_in_use(int (*in_use)(const struct backend_node *node));

/* The node after NODE (the first for NULL) in the order nodes were added;
 * NULL after the last. */
struct backend_node *backend_node_next(const struct backend_node *node);
const char *backend_node_name(const struct backend_node *node);
/* Whether NODE's first shared connection is up. */
int backend_node_up(const struct backend_node *node);
/* Whether NODE's first shared connection is up and logged in (Redis took
 * sluice's backend_password); if not 0, with the reason in WHY. */
int backend_node_ready(const struct backend_node *node, char *why, size_t len);
/* NODE's role as Redis says it: "primary", "replica" or "unknown". */
const char *backend_node_role(const struct backend_node *node);

/* The kinds of connection sluice_backend_connections counts. */
enum backend_kind { BACKEND_KIND_SHARED, BACKEND_KIND_PRIVATE, BACKEND_KIND_SCRIPT,
                    BACKEND_KIND_SPARE, BACKEND_KINDS };
/* NODE's connected connections by kind into COUNTS. */
void backend_node_connections(const struct backend_node *node, int counts[BACKEND_KINDS]);

/* CONN's node; whether CONN is a shared (pool) connection. */
struct backend_node *backend_conn_node(const struct backend_conn *conn);
int backend_conn_is_shared(const struct backend_conn *conn);
/* Whether CONN is one of the shared connections for scripts
 * (backend_script_conn). */
int backend_conn_runs_scripts(const struct backend_conn *conn);
/* Whether CONN is a one-shot connection (backend_control_conn): it holds
 * no session, and closes once its request is answered. */
int backend_conn_is_oneshot(const struct backend_conn *conn);

/* Cluster mode: FN sees every error reply (LEN bytes at the head of SRC)
 * for REQ, just taken off CONN, before it is delivered; CONN_FAILED is set
 * when the error is sluice's own because CONN went down (FN must then not
 * send on CONN). It returns 1 when it took the reply (drained SRC and now
 * owns REQ, e.g. to send it again), 0 to have it delivered as usual. */
/* What backend connections tell the client code: a reply for a client's
 * request, and what comes to a client's private connection (pushes,
 * pub/sub and MONITOR messages, tunnel bytes, its loss), and that a
 * congested connection drained. The client layer fills it in and main.c
 * registers it once, before backend_init; backend.c calls the client layer
 * only through it. */
struct backend_client_ops {
    /* A reply for REQ (whose client is set): LEN bytes at the head of SRC
     * (client_on_reply). */
    void (*on_reply)(struct request *req, struct evbuffer *src, size_t len, int type);
    /* A RESP3 push for C, HEAD first in line on its connection (or NULL);
     * 1 when it ended HEAD (client_on_push). */
    int (*on_push)(struct client *c, struct request *head, struct evbuffer *src, size_t len);
    /* A pub/sub or MONITOR message for C (client_on_passthrough). */
    void (*on_passthrough)(struct client *c, struct evbuffer *src, size_t len);
    /* Bytes of C's tunnel, all of SRC (client_on_tunnel). */
    void (*on_tunnel)(struct client *c, struct evbuffer *src);
    /* C's private connection is gone (client_on_private_lost). */
    void (*on_private_lost)(struct client *c);
    /* The connection C waited for (backend_wait) drained (client_resume). */
    void (*resume)(struct client *c);
};

/* Register OPS (copied) for every later call. */
void backend_set_client_ops(const struct backend_client_ops *ops);

typedef int backend_reply_filter_fn(struct backend_conn *conn, struct request *req,
                                    struct evbuffer *src, size_t len, int conn_failed);
void backend_set_reply_filter(backend_reply_filter_fn *fn);

/* FN sees every reply (of TYPE) a connection reads for REQ, before the
 * filter and delivery; it must not change either (Sentinel mode counts
 * the writes the primary acknowledged: sentinel_failover.c). */
typedef void backend_reply_note_fn(const struct backend_conn *conn, const struct request *req,
                                   int type);
void backend_set_reply_note(backend_reply_note_fn *fn);

/* The shared connection of NODE that requests of client CLIENT_ID, which
 * speaks RESP (2 or 3), use. RESP2 and RESP3 clients never share one. */
struct backend_conn *backend_pool_conn(struct backend_node *node, unsigned long long client_id,
                                       int resp);

/* The shared connection of NODE that scripts and functions (EVAL, FCALL...)
 * of client CLIENT_ID, speaking RESP, run on. A script may keep Redis busy
 * for long; on connections of their own it holds no other command behind
 * it, and those get -BUSY from Redis as on any other connection. */
struct backend_conn *backend_script_conn(struct backend_node *node, unsigned long long client_id,
                                         int resp);

/* A Redis user some of sluice's connections log in as instead of the
 * backend user (users_in_redis: redisusers.c owns each, for the life of
 * the process, as connections and requests point to it). */
struct backend_login {
    char user[300];
    char password[65];
    int gone;   /* its user was deleted: its connections do not connect again */
};

/* Like backend_script_conn, for connections logged in as LOGIN (NULL:
 * backend_script_conn's own). Nothing but the AUTH goes out on a new one
 * before Redis has accepted it; when Redis refuses, the connection goes
 * down with Redis's reason (its requests get it, logged) and connects
 * again later. NULL on OOM. */
struct backend_conn *backend_login_script_conn(struct backend_node *node,
                                               const struct backend_login *login,
                                               unsigned long long client_id, int resp);

/* A one-shot connection to NODE for a request that must not wait behind
 * others (SCRIPT KILL past a busy script, a request going around a
 * stalled or paused shared connection): it only authenticates, as LOGIN
 * when set (users_in_redis: nothing else goes out before Redis accepted
 * that AUTH, as on LOGIN's script connections), else as sluice's backend
 * user, and is freed once its requests are answered. NULL as for
 * backend_private_conn, and when LOGIN's user is deleted. */
struct backend_conn *backend_control_conn(struct backend_node *node,
                                          const struct backend_login *login);

/* The shared connection of NODE a request REQ, sent before, goes on
 * again (a redirection, a retry, the next primary): LOGIN's script
 * connection when req->login is set, a script connection for a client's
 * script, else the shared one of its client (or of sluice's own kind,
 * req->own_client_id and own_resp). NULL on OOM. */
struct backend_conn *backend_resend_conn(struct backend_node *node, const struct request *req);

/* Ask NODE, whose first shared connection just connected, for the limits
 * Redis holds every connection to (proto-max-bulk-len): backend_limits.c.
 * main.c's node-up hook calls it. */
void backend_limits_node_up(struct backend_node *node);

/* The largest bulk a client may send: OWN (sluice's proto_max_bulk_len),
 * or less when a node's Redis takes less (it would close the shared
 * connection the bulk goes on). */
long long backend_max_bulk_len(long long own);

/* FN(NODE) runs whenever NODE's first shared connection has connected: a
 * node that joins, or comes back after a restart. main.c registers it. */
void backend_set_node_up_hook(void (*fn)(struct backend_node *node));

/* A new private connection to NODE for OWNER. NULL when NODE has
 * backend_max_connections private connections already (or on OOM). */
struct backend_conn *backend_private_conn(struct backend_node *node, struct client *owner);

/* Authenticate CONN again with sluice's backend credentials, when there
 * are any: after a client's RESET, which logs a Redis connection out. */
void backend_reauth(struct backend_conn *conn);

/* CONN, a private connection, is to speak RESP (2 or 3) from now on:
 * queues HELLO RESP when it speaks the other (not while in RESP2 pub/sub,
 * where Redis refuses HELLO). Called before each request is sent on it. */
void backend_use_resp(struct backend_conn *conn, int resp);

/* A client's RESET was sent on CONN: Redis's connection is back to RESP2
 * and logged out; authenticate it again (backend_reauth). */
void backend_after_reset(struct backend_conn *conn);

/* CONN's client id on Redis's side: 0 while unknown. A private connection's is learned only when a command names
 * its client (clientid.c), from CLIENT LIST, which MONITOR never shows. */
long long backend_conn_redis_id(const struct backend_conn *conn);

/* Learn the Redis ids of NODE's connections from NODE's CLIENT LIST text
 * TEXT (LEN bytes), matching each line's addr= with a connection's local
 * address. */
void backend_learn_redis_ids(struct backend_node *node, const char *text, size_t len);

/* CONN, a one-shot connection, closes now when none of its requests in
 * flight has a client any more (they are freed unanswered); else nothing.
 * For a request Redis holds for a CLIENT PAUSE whose client went. */
void backend_close_orphan(struct backend_conn *conn);

/* OWNER no longer needs its private connection: close it; its in-flight
 * requests are freed (their client is gone). */
void backend_release_private(struct backend_conn *conn);

/* Send REQ on CONN: moves req->raw_len bytes from SRC (or, when SRC is
 * NULL, req->raw) to the connection and queues REQ for its reply (unless
 * REQ_UNPAIRED: then REQ is freed). In cluster mode a paired request keeps
 * its bytes in req->raw (copied out), so that it can be sent again.
 * Returns 0, or -1 when CONN is down, or REQ has a login (req->login)
 * CONN is not logged in as: then nothing moved and ERR holds the error
 * reply text. */
int backend_send(struct backend_conn *conn, struct request *req, struct evbuffer *src,
                 char *err, size_t errlen);
/* backend_send's refusal of a request whose req->login (users_in_redis)
 * is not CONN's: it would run as another Redis user. %s: the user. */
#define BACKEND_ERR_WRONG_LOGIN                                                          \
    "-NOPERM this script runs only on a backend connection logged in as %s, and none " \
    "could be had for it; try again"

/* Send a request of sluice's own: the bytes of BYTES (moved out). ON_REPLY
 * (with CTX) gets the reply, or NULL: errors are logged. CTX_FREE, when
 * set, runs whenever the request is freed (also at once on failure, and at
 * exit with the reply never come). Returns 0, or -1 when CONN is down. */
int backend_send_internal(struct backend_conn *conn, struct evbuffer *bytes,
                          request_reply_fn *on_reply, void *ctx,
                          void (*ctx_free)(struct request *req));

/* Write what this loop pass added to each backend connection, one writev
 * per connection (see netio.h). Called by the loop after each pass. */
void backend_write_now(void);

/* CONN, a private connection, has just been sent SYNC or PSYNC: once the
 * replies in flight before it are delivered, every byte it reads goes to
 * its owner unframed (the ops' on_tunnel): the RDB, keepalives, the stream. */
void backend_set_tunnel(struct backend_conn *conn);

/* Move every byte of SRC to CONN (a tunnel) as it is. Returns 0, or -1
 * when CONN is down (nothing moved). */
int backend_send_raw(struct backend_conn *conn, struct evbuffer *src);

/* HOLD 1: stop reading CONN (its tunnel's client is not reading what it
 * gets); 0: read again. */
void backend_hold_reading(struct backend_conn *conn, int hold);

/* ON: stream every later reply of CONN to its owner unpaired (pub/sub,
 * MONITOR). Off again after RESET. */
void backend_set_passthrough(struct backend_conn *conn, int on);

/* A shared connection with requests out and no reply for this long is
 * stalled: Redis is in a long script or a slow command. */
#define BACKEND_STALL_MS 100

/* Whether CONN is stalled (BACKEND_STALL_MS). Redis answers other
 * connections then as it sees fit (-BUSY during a script); requests that
 * need not keep order with CONN's go around it. */
int backend_stalled(const struct backend_conn *conn);

/* Non-zero while CONN's output is above its high watermark; then the caller
 * waits (backend_wait) and is resumed through the ops' resume. */
int backend_congested(const struct backend_conn *conn);
void backend_wait(struct backend_conn *conn, struct client *c);
void backend_unwait(struct backend_conn *conn, struct client *c);

/* 1 when Redis asked sluice's own connections to authenticate (no
 * backend_password, or a wrong one): its clients must then send AUTH. */
int backend_wants_auth(void);

/* What NODE's Redis said of itself (HELLO on a shared connection): its
 * version, mode and role; empty strings until known. */
void backend_server_hello(const struct backend_node *node, const char **version,
                          const char **mode, const char **role);

/* Append "backend_*" lines for PROXY INFO. */
void backend_write_info(struct evbuffer *out);

/* Deliver a reply for REQ: to its on_reply hook, its client, or nowhere
 * when the client is gone (then REQ is freed). */
void backend_deliver(struct request *req, struct evbuffer *src, size_t len, int type);

#endif
