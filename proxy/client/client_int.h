/* client_int.h - what the files of the client layer share among
 * themselves (client.c, client_session.c, client_route.c,
 * client_replies.c, client_dispatch.c); nothing outside proxy/client/
 * includes it. Each function's contract is above its definition. */
#ifndef SLUICE_CLIENT_INT_H
#define SLUICE_CLIENT_INT_H

#include <stddef.h>

#include "client.h"
#include "placement.h"

struct backend_conn;
struct event_base;
struct config;
struct evbuffer;
struct request;
struct sv;

extern const struct config *client_cfg;

/* What the files above client.c (the core: connections, reply order) do
 * for it; client_dispatch.c fills it in. The core calls up only through
 * it, so no file of the layer calls back into one that calls it. */
struct client_hooks {
    /* Frame and handle the requests in IN, C's input, until one waits. */
    void (*input)(struct client *c, struct evbuffer *in);
    /* Send what waited for an earlier reply (a script's, a split's). */
    void (*unstall)(struct client *c);
    /* Build REQ's reply (REQ_DEFERRED) now that its turn has come. */
    void (*run_deferred)(struct client *c, struct request *req);
    /* C is closing: let go of its transaction, locks, learning. */
    void (*closing)(struct client *c);
    /* Once a tick (client_cron), for each client: what waits for time to
     * pass (a subscriber to subscribe again after a failover). */
    void (*tick)(struct client *c);
    /* REQ, held (a rule's delay, learning, a client id lookup), goes on,
     * or is refused with ERROR when it is not NULL. */
    void (*release_held)(struct client *c, struct request *req, const char *error);
    /* C, in a hand-over (CLIENT_HANDOVER_IN or _OUT), is to be written:
     * before (WRITTEN 0: returns 1 when C's output must not be written)
     * and after (WRITTEN 1: returns 1 when C was closed). */
    int (*handover_write)(struct client *c, int written);
};

/* Start the core (client_module_init, in client_dispatch.c, calls it). */
void client_core_init(struct event_base *base, const struct config *cfg,
                      const struct client_hooks *hooks);

/* A tunnel's output (an RDB on its way): past HIGH its backend connection
 * is not read, until the client has taken it down to LOW. */
#define CLIENT_TUNNEL_HIGH (4 * 1024 * 1024)
#define CLIENT_TUNNEL_LOW (1024 * 1024)

/* Room for the longest push kind Redis sends, "tracking-redir-broken". */
#define CLIENT_PUSH_KIND_SIZE 24

/* client.c */
struct client *client_newest(void);   /* the one connected last, or NULL */
void client_read_on(struct client *c);
void client_read_off(struct client *c);
int client_fence_back(struct client *c, struct evbuffer *src, size_t len);
void client_fences_drop(struct client *c);
void client_enqueue(struct client *c, struct request *req);
void client_enter(struct client *c);
int client_leave(struct client *c);
struct evbuffer *client_output(struct client *c);
int client_readable(const struct client *c);
void client_over_limit(struct client *c);
int client_check_drained(struct client *c);
int client_check_output_limit(struct client *c);
int client_subscribed_context(const struct client *c);
void client_flush(struct client *c);
void client_complete(struct client *c, struct request *req);
void client_defer(struct client *c, struct request *req);
void client_reply_error(struct client *c, struct request *req, const char *text);

/* The reply to a read that read_from = replica sends to a replica when no
 * replica is healthy. */
#define CLIENT_NO_REPLICA_ERR "-ERR no replica available (read_from replica)"

/* Note that C sends REQ, framed with ARGV: a command that may write (the
 * table's write flag, a script or function that is not _RO, a command
 * sluice does not know) keeps C's reads on the primary for
 * replica_read_after_write_ms. Then, when C's read_from (its user's, else
 * [proxy]'s) is not primary and REQ may read from a replica, set req->node
 * to a healthy replica of its primary. Returns 0, or -1 when read_from is
 * replica and none is healthy: REQ is then to be answered with
 * CLIENT_NO_REPLICA_ERR. README "Reading from replicas". */
int client_read_from(struct client *c, struct request *req, const struct sv *argv);
/* Sentinel mode: REQ of C found no healthy replica (read_from = replica):
 * 0 when one is healthy now (req->node set), 1 while REQ may wait for one
 * (failover_retry_window from its first try: the caller stalls it with
 * CLIENT_WAITS_REPLICA), -1 when it is to get CLIENT_NO_REPLICA_ERR (the
 * window passed; at once outside Sentinel mode). */
int client_replica_wait(struct client *c, struct request *req);
void client_fail_send(struct client *c, struct request *req, const char *text);
void client_refuse(struct client *c, struct request *req, const char *text);
int client_is_monitor(const struct client *c);
void client_tunnel_start(struct client *c, struct backend_conn *conn);
void client_tunnel_input(struct client *c, struct evbuffer *in);
void client_protocol_error(struct client *c, const char *msg);
/* Close C at once, as Redis's freeClientAsync: what it sent and sluice
 * has not framed is never run, and replies not yet written are dropped
 * (those still on their way are swallowed). */
void client_abort(struct client *c);
void client_process_input(struct client *c);

/* client_handover.c */
void client_handover_closing(struct client *c);
int client_handover_write(struct client *c, int written);

/* client_session.c */
void client_reset_session(struct client *c);
void client_apply_session(struct client *c, struct request *req, int type);
void client_push_kind(struct evbuffer *src, size_t len, char *kind, long long *count);
int client_is_pubsub_message(struct evbuffer *src, size_t len);
void client_leave_pubsub(struct client *c);

/* C, subscribed in RESP3, runs HELLO 2 at its turn (nothing after it
 * framed): as Redis, its connection stays subscribed, in RESP2 pub/sub
 * mode. Its private connection is told HELLO 2 and streams from then on
 * (CLIENT_PASSTHROUGH), its subscription counts carried over. */
void client_enter_resp2_pubsub(struct client *c);
void client_note_subscriptions(struct client *c, struct evbuffer *src, size_t len);
int client_count_push(struct client *c, const char *kind, long long count);
int client_push_ends(struct client *c, struct request *head, int row);
enum placement_role client_role(const struct request *req);
void client_reply_mark(struct client *c, struct request *req);
/* REQ is refused before it ran, for REASON: counted so, never as failed. */
void client_note_rejected(struct request *req, int reason);

/* What log_connections says (client_log.c): one line when C connects,
 * one when it closes, with its user, the reason, how long, its commands
 * and bytes. */
void client_log_connected(const struct client *c);
void client_log_closed(const struct client *c);

/* The first cause of C's close (a string literal), for its close line. */
static inline void client_close_reason(struct client *c, const char *why)
{
    if (c->close_reason == NULL)
        c->close_reason = why;
}
/* REQ's reply is being queued to its client: its time and result go to
 * the per-command stats (a client's request only). */
void client_note_done(struct client *c, struct request *req);
void client_note_tracking(struct client *c, struct request *req, int argc, const struct sv *argv);
void client_note_session(struct request *req, int argc, const struct sv *argv);
void client_execabort_reply(struct request *req, struct evbuffer *src, size_t len, int type);
void client_track_multi(struct client *c, struct request *req, struct evbuffer **src);
void client_multi_held_free(struct client *c);
void client_cluster_start_multi(struct client *c);
int client_cluster_off_session(const struct client *c, const struct request *req);
int client_private_holds_state(const struct client *c);
int client_private_idle(const struct client *c);
int client_cluster_moves(const struct client *c, const struct request *req);
int client_leaves_session(const struct request *req);
void client_note_watch(struct client *c, const struct request *req);

/* client_route.c */
/* users_in_redis: REQ's login (req->login), set once before anything
 * picks its connection: its user's Redis user for a script, function or
 * SCRIPT LOAD of a restricted user, else NULL. Every connection REQ may
 * then go on is logged in as it (backend_send refuses any other). */
void client_note_script_login(const struct client *c, struct request *req);
struct backend_conn *client_route(struct client *c, struct request *req);
int client_must_wait(const struct client *c, const struct request *req, struct backend_conn *conn);
int client_split_must_wait(const struct client *c);
void client_wait_offset_reply(struct request *req, struct evbuffer *src, size_t len, int type);
void client_send(struct client *c, struct request *req, struct backend_conn *conn, struct evbuffer *src);
void client_try_unstall(struct client *c);
int client_split(struct client *c, struct request *req, const struct sv *argv, struct evbuffer **src);

/* client_dispatch.c */
void client_run_deferred(struct client *c, struct request *req);
int client_cluster_hold(struct client *c, struct request *req, struct evbuffer *src);
int client_dispatch(struct client *c, struct request *req, const struct sv *argv, struct evbuffer *src);
void client_process_input_loop(struct client *c, struct evbuffer *in);

#endif
