/* client_route.c - owns where a client's request goes and sending it:
 * the shared, script, private or one-shot backend connection
 * (client_route), the order kept when it must wait for earlier replies
 * (client_must_wait, client_try_unstall), and commands run in parts
 * across cluster nodes (client_split). */
#include "client.h"
#include "client_int.h"
#include "client_failover.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "clientid.h"
#include "cluster.h"
#include "sentinel.h"
#include "cluster_split.h"
#include "commands.h"
#include "config.h"
#include "local.h"
#include "router.h"
#include "log.h"
#include "learn.h"
#include "multi.h"
#include "netio.h"
#include "pause.h"
#include "placement.h"
#include "replicas.h"
#include "reply.h"
#include "respframe.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"
#include "users.h"

/* Stand for "the shared connections" and "the script connections" in
 * c->inflight_conn: in cluster mode a client's requests may be out on the
 * shared (or the script) connections of several nodes at once (replies
 * wait in c->requests for their turn); a script after other commands waits
 * for them, since one node's two kinds of connection keep no order
 * between them (other commands after a script follow it instead:
 * client_follows_script). */
static char client_shared_marker, client_scripts_marker;
#define CLIENT_SHARED_CONNS ((struct backend_conn *)(void *)&client_shared_marker)
#define CLIENT_SCRIPT_CONNS ((struct backend_conn *)(void *)&client_scripts_marker)

static struct backend_conn *client_conn_class(struct backend_conn *conn);

/* CONN, the shared connection REQ of C would go on, unless it is stalled
 * (a long script or slow command holds it: backend_stalled) and C has
 * nothing out on it to keep order with. Then REQ goes on a one-shot
 * connection (NULL, PLACE_CONTROL) to the same node (client_send; its
 * redirections are followed, cluster.c), where Redis answers it as it answers
 * any other connection meanwhile: -BUSY during a script, or at once
 * after it; queued behind the script it would wait for it to end. A
 * script of a user's Redis user (req->login) goes there logged in as that
 * user too (backend_control_conn), never as sluice's backend user. */
static struct backend_conn *client_detour(struct client *c, struct request *req,
                                          struct backend_conn *conn)
{
    static uint64_t logged_ms;
    uint64_t now_ms;

    /* A LOCAL request here is a lock verb's script (lock.c): a write. */
    if ((req->place == PLACE_SHARED || req->place == PLACE_LOCAL) &&
        pause_holds(req->place == PLACE_LOCAL ? NULL : req->cmd)) {
        /* Redis holds it for a CLIENT PAUSE: on a connection of its own,
         * that blocks only this client, as Redis would block it. */
        STAT_INC(pause_detours);
        req->place = PLACE_CONTROL;
        if (req->on_reply == NULL)   /* a hook (LOCK's) wants its reply, even late */
            req->flags |= REQ_PAUSE_HELD;
        return NULL;
    }
    if (req->place != PLACE_SHARED || !backend_stalled(conn) ||
        (c->inflight > 0 && c->inflight_conn == client_conn_class(conn)))
        return conn;
    STAT_INC(stalled_detours);
    now_ms = server_pass_now_us() / 1000;
    if (now_ms - logged_ms >= 1000) {
        log_info("a shared backend connection is stalled (a long script or slow command): "
                 "requests go around it on connections of their own");
        logged_ms = now_ms;
    }
    req->place = PLACE_CONTROL;
    return NULL;
}

/* Whether C's command REQ, not a script, follows C's scripts onto the
 * script connection: while C has requests out on the script connections
 * (one of them, or in cluster mode the class of them), REQ goes behind
 * them on its node's script connection, where Redis runs it after them,
 * as it would on C's own connection: no round trip to wait for their
 * replies (client_must_wait), and no other client behind anything that
 * was not already behind C's script. Once they are answered, C's
 * commands go on the pool connections again. sluice's lock verbs
 * (PLACE_LOCAL) keep waiting, as before. */
static int client_follows_script(const struct client *c, const struct request *req)
{
    if (c->inflight == 0 || req->place != PLACE_SHARED)
        return 0;
    if (cluster_enabled())
        return c->inflight_conn == CLIENT_SCRIPT_CONNS;
    return c->inflight_conn != NULL && backend_conn_is_shared(c->inflight_conn) &&
           backend_conn_runs_scripts(c->inflight_conn);
}

/* C's read_from: its user's, else [proxy]'s. */
static int client_read_mode(const struct client *c)
{
    int mode = c->auth_user != NULL ? users_read_from(c->auth_user) : -1;

    return mode >= 0 ? mode : client_cfg->read_from;
}

/* Whether REQ (its arguments ARGV) of C may read from a replica: a
 * read-only command on the shared connections with a key. Not on C's own
 * connection (a transaction, WATCH, pub/sub, blocking commands, tracking):
 * that is the primary's; not a script, which follows C's scripts; not a
 * keyless read (INFO, DBSIZE, SCAN, KEYS, RANDOMKEY...), which asks about
 * the server: the primary is that. */
static int client_may_read_replica(const struct client *c, const struct request *req,
                                   const struct sv *argv)
{
    int key;

    if (req->place != PLACE_SHARED || req->cmd == NULL || !(req->cmd->flags & CMD_READONLY) ||
        client_role(req) != ROLE_NONE || req->node != NULL || c->private_conn != NULL ||
        (c->flags & (CLIENT_IN_MULTI | CLIENT_MULTI_DEFERRED | CLIENT_PASSTHROUGH |
                     CLIENT_TRACKING)) ||
        client_follows_script(c, req))
        return 0;
    return commands_keys(req->cmd, req->argc, argv, &key, 1) > 0;
}

int client_replica_wait(struct client *c, struct request *req)
{
    struct backend_node *replica;
    uint64_t now = server_now_ms();

    if (!sentinel_enabled())
        return -1;
    if ((replica = replicas_pick(router_node_for_request(req, NULL), c->id)) != NULL) {
        req->node = replica;
        return 0;
    }
    if (req->retry_since_ms == 0)
        req->retry_since_ms = now;
    return now - req->retry_since_ms < (uint64_t)client_cfg->failover_retry_window_ms ? 1 : -1;
}

/* Whether REQ may write: see client_read_from. */
static int client_may_write(const struct request *req)
{
    const struct command *cmd = req->cmd;

    if (cmd == NULL || (cmd->flags & CMD_WRITE))
        return 1;
    return client_role(req) == ROLE_SCRIPT && !(cmd->flags & CMD_READONLY);
}

int client_read_from(struct client *c, struct request *req, const struct sv *argv)
{
    uint64_t now = server_pass_now_us() / 1000;   /* per request: the pass's clock */
    int mode = client_read_mode(c);
    struct backend_node *replica;

    if (client_may_write(req)) {
        c->wrote_ms = now;
        return 0;
    }
    if (mode == CONFIG_READ_PRIMARY || !client_may_read_replica(c, req, argv) ||
        (c->wrote_ms != 0 && now - c->wrote_ms < (uint64_t)client_cfg->replica_read_after_write_ms))
        return 0;
    replica = replicas_pick(router_node_for_request(req, NULL), c->id);
    if (replica == NULL)
        return mode == CONFIG_READ_REPLICA ? -1 : 0;
    req->node = replica;
    return 0;
}

/* The shared connection REQ of C goes to: its node's, for C's protocol.
 * A script or function goes on the script connections, where a long one
 * holds no other command behind it: those reach Redis and get its -BUSY,
 * as on any other connection. C's next commands that are not scripts
 * follow it there until its reply is in (client_follows_script), so C's
 * own order holds without a round trip. */
static struct backend_conn *client_shared_conn(const struct client *c, struct request *req)
{
    struct backend_node *node = router_node_for_request(req, NULL);

    /* users_in_redis: as the user's Redis user (client_note_script_login). */
    if (client_role(req) == ROLE_SCRIPT || req->login != NULL)
        return backend_login_script_conn(node, req->login, c->id, c->resp);
    if (client_follows_script(c, req)) {
        /* Where its script went: standalone, the one connection C has
         * requests out on; in cluster mode, the script connection of its
         * own key's node, of the same user as C's scripts. */
        if (!cluster_enabled())
            return c->inflight_conn;
        return backend_login_script_conn(node, auth_script_login(c), c->id, c->resp);
    }
    return backend_pool_conn(node, c->id, c->resp);
}

void client_note_script_login(const struct client *c, struct request *req)
{
    enum placement_role role = client_role(req);

    req->login = role == ROLE_SCRIPT || role == ROLE_SCRIPT_LOAD ? auth_script_login(c) : NULL;
    /* A SCRIPT LOAD on C's own connection (MULTI, session state) loads
     * there as before: loading grants nothing. Scripts never get there
     * (auth_admit refuses them). */
    if (role == ROLE_SCRIPT_LOAD &&
        (c->private_conn != NULL ||
         (c->flags & (CLIENT_IN_MULTI | CLIENT_MULTI_DEFERRED | CLIENT_PASSTHROUGH))))
        req->login = NULL;
}

/* The backend connection REQ goes to: a shared one, or the client's
 * private one once it has one. NULL for a one-shot connection (made as
 * REQ is sent), and when a private connection is needed but
 * backend_max_connections are open already. */
struct backend_conn *client_route(struct client *c, struct request *req)
{
    /* In a transaction it is queued like any other command; in pub/sub its
     * reply streams unpaired on the client's own connection, so nothing
     * would wait for it on (and free) a one-shot connection. */
    if (req->place == PLACE_CONTROL && !(c->flags & (CLIENT_IN_MULTI | CLIENT_PASSTHROUGH)))
        return NULL;
    if (client_cluster_moves(c, req) && c->inflight == 0) {
        log_debug("client %llu: its private backend connection moves to %s",
                  (unsigned long long)c->id, backend_node_name(router_node_for_request(req, NULL)));
        backend_release_private(c->private_conn);
        c->private_conn = NULL;
    }
    if (c->private_conn == NULL &&
        (req->place == PLACE_PRIVATE || (c->flags & CLIENT_MULTI_DEFERRED))) {
        c->private_conn = backend_private_conn(router_node_for_request(req, NULL), c);
        if (c->private_conn == NULL)
            return NULL;
        log_debug("client %llu now has a private backend connection", (unsigned long long)c->id);
    }
    if (c->private_conn != NULL && !client_cluster_off_session(c, req)) {
        if (!client_cluster_moves(c, req))   /* else REQ waits, and comes here again */
            client_cluster_start_multi(c);
        return c->private_conn;
    }
    return client_detour(c, req, client_shared_conn(c, req));
}

/* What c->inflight_conn records for a request sent on CONN. */
static struct backend_conn *client_conn_class(struct backend_conn *conn)
{
    if (!cluster_enabled() || conn == NULL || !backend_conn_is_shared(conn))
        return conn;
    return backend_conn_runs_scripts(conn) ? CLIENT_SCRIPT_CONNS : CLIENT_SHARED_CONNS;
}

/* Whether REQ must wait before it can be sent on CONN: replies of one
 * client come back in order only from one connection (in cluster mode:
 * from the shared connections, whose replies c->requests puts in order),
 * and a client entering pub/sub must have every earlier reply written
 * first. */
int client_must_wait(const struct client *c, const struct request *req,
                            struct backend_conn *conn)
{
    if (c->inflight > 0 && (c->inflight_conn != client_conn_class(conn) ||
                            client_cluster_moves(c, req)))
        return 1;
    /* A slot changed owner since C's requests in flight were sent: one of
     * them may be redirected, and sent again after REQ, for the same key,
     * would run after it. So none goes under the new map before they are
     * answered (map changes are rare: resharding, failover). */
    if (c->inflight > 0 && cluster_enabled() && c->inflight_map_version != cluster_map_version())
        return 1;
    return (req->flags & (REQ_PASSTHROUGH | REQ_TUNNEL)) && !(c->flags & CLIENT_PASSTHROUGH) &&
           !TAILQ_EMPTY(&c->requests);
}

/* Cluster mode: whether a command run in parts on the shared connections
 * of its nodes (cluster_split.c) must wait, as client_must_wait says for
 * one request: C has requests out elsewhere (a script, its private
 * connection), or sent under an older slot map. */
int client_split_must_wait(const struct client *c)
{
    return c->inflight > 0 && (c->inflight_conn != CLIENT_SHARED_CONNS ||
                               c->inflight_map_version != cluster_map_version());
}

/* One more request of C in flight, on connections of CLASS
 * (client_conn_class: client_must_wait's terms). */
static void client_count_inflight(struct client *c, struct backend_conn *class)
{
    c->inflight++;
    c->inflight_conn = class;
    c->inflight_map_version = cluster_map_version();
    if (c->inflight + c->split_parts + c->deferred >= client_cfg->client_max_inflight)
        client_over_limit(c);
}

/* Cluster mode: REQ could not be sent on CONN, a shared connection whose
 * node is down: cluster.c sends it again once the map names a reachable
 * owner (within cluster_retry_window). It counts as in flight meanwhile.
 * Returns 1 when taken (its bytes moved from SRC into req->raw). */
static int client_cluster_retry(struct client *c, struct request *req, struct backend_conn *conn,
                                struct evbuffer *src, const char *err)
{
    if ((!cluster_enabled() && !sentinel_enabled()) || !backend_conn_is_shared(conn))
        return 0;
    if (src != NULL && request_take_raw(req, src) != 0)
        return 0;   /* nothing moved: the caller drains SRC */
    if (!cluster_take_unsent(req) && !sentinel_take_unsent(req)) {
        STAT_INC(backend_unavailable_replies);
        client_fail_send(c, req, err);   /* its bytes are in req->raw: nothing to drain */
        return 1;
    }
    client_count_inflight(c, client_conn_class(conn));
    return 1;
}

/* REQ is sent inside MULTI: count it when Redis queues it, which is all
 * but the commands Redis 7.0 runs at once there (MULTI, WATCH, EXEC,
 * DISCARD, RESET; QUIT is sluice's). Any other command Redis does not
 * queue is an error that aborts the transaction, so the count gives each
 * queued command its place in EXEC's array whenever there is one. */
static void client_count_queued(struct client *c, const struct request *req)
{
    switch (client_role(req)) {
    case ROLE_MULTI:
    case ROLE_WATCH:
    case ROLE_EXEC:
    case ROLE_DISCARD:
    case ROLE_RESET:
        return;
    default:
        c->multi_queued++;
    }
}

/* The reply to client_wait_offset's SPUBLISH (CTX: the client's id). An
 * error (the backend user may not publish to __sluice__:wait: Redis 7's
 * users have no channels unless given) leaves the connection without the
 * client's offset: WAIT, sent right behind, would count replicas that
 * lack its writes. That WAIT (C's oldest one not answered) gets an error
 * instead of a count that claims too much. */
void client_wait_offset_reply(struct request *req, struct evbuffer *src, size_t len,
                                     int type)
{
    static int warned;
    struct client *c = client_find((uint64_t)(uintptr_t)req->ctx);
    struct request *wait;
    char text[160] = {0};

    if (type == REPLY_ERROR && c != NULL) {
        evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
        text[strcspn(text, "\r\n")] = '\0';
        if (!warned)
            log_warning("WAIT: Redis refused sluice's SPUBLISH __sluice__:wait (%s): WAIT gets "
                        "an error until sluice's backend user is given &__sluice__:wait", text + 1);
        warned = 1;
        TAILQ_FOREACH(wait, &c->requests, client_link) {
            if (client_role(wait) == ROLE_WAIT && !(wait->flags & REQ_DONE)) {
                wait->flags |= REQ_WAIT_BLIND;
                break;
            }
        }
    }
    evbuffer_drain(src, len);
    request_free(req);
}

/* WAIT counts the replicas that have the writes of its own connection
 * (Redis notes the replication offset after each command of a connection
 * that was propagated). A client's writes went on the shared connections,
 * so on its private connection WAIT would count replicas that have
 * nothing of them yet. Before it, sluice sends there an SPUBLISH to a
 * channel of its own: Redis propagates it to the replicas (standalone
 * Redis does; shard channels have no patterns, so no subscriber sees it),
 * which gives the connection the offset of everything Redis has run, the
 * client's writes included (WAIT is sent once their replies are in:
 * client_must_wait). Not inside MULTI, where it would be queued. */
static void client_wait_offset(struct client *c, const struct request *req,
                               struct backend_conn *conn)
{
    static const char spublish[] = "*3\r\n$8\r\nSPUBLISH\r\n$15\r\n__sluice__:wait\r\n$0\r\n\r\n";
    struct evbuffer *buf;

    if (client_role(req) != ROLE_WAIT || conn != c->private_conn ||
        (c->flags & (CLIENT_IN_MULTI | CLIENT_PASSTHROUGH)) || (buf = evbuffer_new()) == NULL)
        return;
    evbuffer_add(buf, spublish, sizeof(spublish) - 1);
    backend_send_internal(conn, buf, client_wait_offset_reply, (void *)(uintptr_t)c->id, NULL);
    evbuffer_free(buf);
}

/* Send REQ (already in the client's queue unless it enters or is in
 * pub/sub) on CONN, or on a new one-shot connection when CONN is NULL.
 * SRC holds its bytes, or NULL when REQ owns them. */
/* The users were reloaded since the gate passed REQ of C (it waited:
 * behind a blocking command or a script, for a pause, a hold...): judge
 * it again now, as Redis judges a command when it runs it, so a grant
 * taken away applies to what was read but not yet sent. Returns 1 when
 * REQ was refused (answered in order; its bytes drained from SRC). */
static int client_refused_at_send(struct client *c, struct request *req, struct evbuffer *src)
{
    struct evbuffer *bytes = src != NULL ? src : req->raw;
    struct req_argv views;
    char denied[400];
    int refused;

    if (req->auth_gen == 0 || req->auth_gen == auth_users_generation || !c->auth_checks ||
        bytes == NULL)
        return 0;
    req->auth_gen = auth_users_generation;
    if (request_argv_open(&views, req, bytes) != 0) {
        snprintf(denied, sizeof(denied), "OOM sluice is out of memory");
        refused = 1;
    } else {
        refused = auth_admit(c, req->cmd, req->argc, views.argv, denied, sizeof(denied)) != 0;
    }
    request_argv_close(&views);
    if (!refused)
        return 0;
    if (src != NULL)
        evbuffer_drain(src, req->raw_len);
    if (c->flags & CLIENT_IN_MULTI)
        c->flags |= CLIENT_MULTI_DIRTY;   /* its EXEC must fail, as for a refusal as framed */
    if (!(req->flags & REQ_QUEUED))
        client_enqueue(c, req);   /* SUBSCRIBE...: the error pairs */
    client_reply_error(c, req, denied);
    client_check_output_limit(c);
    return 1;
}

void client_send(struct client *c, struct request *req, struct backend_conn *conn,
                        struct evbuffer *src)
{
    char err[512];
    int unpaired, tunnel = (req->flags & REQ_TUNNEL) != 0;

    if (client_refused_at_send(c, req, src))
        return;

    if (conn == NULL && req->place == PLACE_CONTROL) {
        /* In cluster mode, a detour goes to its key's node (the stalled
         * connection's): router_node_for_request, as for the shared one. */
        conn = backend_control_conn(router_node_for_request(req, NULL), req->login);
        if (conn != NULL)
            backend_use_resp(conn, c->resp);   /* its reply in the client's protocol */
    }
    if (conn == NULL) {
        char why[512];
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (!(req->flags & REQ_QUEUED))
            client_enqueue(c, req);   /* SYNC, SUBSCRIBE (client_dispatch): the error pairs */
        if (req->login != NULL && req->login->gone)   /* its user went in a reload */
            snprintf(why, sizeof(why), BACKEND_ERR_WRONG_LOGIN, req->login->user);
        else
            snprintf(why, sizeof(why), "max number of backend connections reached "
                                       "(backend_max_connections)");
        client_fail_send(c, req, why);
        return;
    }
    if ((req->flags & REQ_PASSTHROUGH) && !(c->flags & CLIENT_PASSTHROUGH)) {
        c->flags |= CLIENT_PASSTHROUGH;
        if (client_role(req) == ROLE_MONITOR)
            c->flags |= CLIENT_MONITOR;
        backend_set_passthrough(conn, 1);
    }
    if (c->flags & CLIENT_PASSTHROUGH || tunnel)
        req->flags |= REQ_UNPAIRED;   /* a tunnel's reply is all it reads from then on */
    if (c->flags & CLIENT_IN_MULTI) {
        client_count_queued(c, req);
        req->flags |= REQ_IN_MULTI;
    }
    unpaired = (req->flags & REQ_UNPAIRED) != 0;
    if (conn == c->private_conn) {
        /* Not before SYNC: Redis refuses it while HELLO's reply is pending,
         * and the replication stream is the same bytes in either protocol. */
        if (!tunnel)
            backend_use_resp(conn, c->resp);
        if (client_leaves_session(req))
            c->flags |= CLIENT_SESSION;
        client_note_watch(c, req);
        client_failover_note(c, req, src);
        client_wait_offset(c, req, conn);
    }
    if (backend_send(conn, req, src, err, sizeof(err)) != 0) {
        if (!unpaired && client_cluster_retry(c, req, conn, src, err))
            return;
        STAT_INC(backend_unavailable_replies);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (unpaired)
            request_free(req);
        else
            client_fail_send(c, req, err);
        return;
    }
    if (tunnel)
        client_tunnel_start(c, conn);   /* REQ is freed */
    else if ((req->flags & REQ_RESET) && !unpaired) {
        /* RESET logs Redis's connection out (never leave it so) and takes
         * it back to RESP2: what the client pipelines after it too. */
        backend_after_reset(conn);
        c->resp = 2;
        memset(&c->subs, 0, sizeof(c->subs));
    }
    /* What follows RESET is judged as the user, name and protocol RESET
     * leaves, and in pub/sub must be paired with replies again: so it waits
     * until Redis has answered RESET (client_on_reply, or +RESET seen by
     * client_on_passthrough). */
    if ((req->flags & REQ_RESET) && unpaired && !client_is_monitor(c))
        c->resets_unanswered++;   /* its +RESET ends the streaming (client_on_passthrough) */
    /* A command that may block (BLPOP..., client_dispatch) when users are
     * sluice's: what follows is framed, and judged by the gate, once it has
     * returned, as Redis runs it then (a reload meanwhile may have taken a
     * grant away). */
    if (unpaired || req->on_reply != NULL || (c->flags & CLIENT_IN_MULTI))
        req->flags &= ~(unsigned)REQ_HOLDS_INPUT;   /* nothing of its own to wait for */
    if (((req->flags & REQ_RESET) && !client_is_monitor(c)) ||
        ((req->flags & (REQ_LOGIN_WAIT | REQ_HOLDS_INPUT)) && !unpaired))
        client_block(c);
    if (!unpaired)
        client_count_inflight(c, client_conn_class(conn));
    if (backend_congested(conn) && c->waiting_on == NULL) {
        c->flags |= CLIENT_PAUSED;
        client_read_off(c);
        backend_wait(conn, c);
    }
}

static void client_split_held(struct client *c, struct request *req);

void client_try_unstall(struct client *c)
{
    struct request *req = c->stalled;
    struct backend_conn *conn;
    int wait = 0;

    if (req == NULL)
        return;
    if ((c->flags & CLIENT_WAITS_REPLICA) && (wait = client_replica_wait(c, req)) > 0)
        return;
    if (c->flags & CLIENT_WAITS_REPLICA) {
        c->flags &= ~(unsigned)CLIENT_WAITS_REPLICA;
        if (wait < 0) {   /* the window passed: as without a wait */
            c->stalled = NULL;
            client_fail_send(c, req, CLIENT_NO_REPLICA_ERR);
            client_process_input(c);
            return;
        }
    }
    if (cluster_enabled() && cluster_split_wants(req->cmd, req->slot)) {
        if (client_split_must_wait(c))
            return;
        c->stalled = NULL;
        client_split_held(c, req);
        client_process_input(c);
        return;
    }
    if ((wait = client_failover_wait(c, req)) > 0)
        return;   /* Sentinel: still no primary */
    conn = wait < 0 ? NULL : client_route(c, req);
    if (wait == 0 && client_must_wait(c, req, conn))
        return;
    c->stalled = NULL;
    if (wait < 0)
        client_fail_send(c, req, CLIENT_FAILOVER_NO_PRIMARY_ERR);
    else
        client_send(c, req, conn, NULL);
    client_process_input(c);
}

void client_forward(struct client *c, struct request *req)
{
    struct backend_conn *conn = client_route(c, req);

    if (c->stalled == NULL && !client_must_wait(c, req, conn)) {
        client_send(c, req, conn, NULL);
        return;
    }
    /* Only one request can wait; a second (a LOCK retry behind a stalled
     * request cannot happen: a blocked client reads nothing). */
    if (c->stalled == NULL)
        c->stalled = req;
}

/* Split REQ by slot (cluster_split.c), which copies every argument. An
 * argument sluice left unread (over 64 KB, lying across chains: its view
 * is {NULL, len}) is read first: REQ takes its bytes from *SRC (then set
 * to NULL), makes them one run and is viewed again. Returns 0, or -1 when
 * out of memory (REQ not split). */
static int client_split_views(struct request *req, const struct sv *argv, struct evbuffer **src)
{
    struct req_argv whole;
    int unread = 0, rc;

    for (int i = 0; i < req->argc && !unread; i++)
        unread = argv[i].ptr == NULL;
    if (!unread)
        return cluster_split_run(req, req->argc, argv);
    if (*src != NULL && request_take_raw(req, *src) != 0)
        return -1;
    *src = NULL;
    if (evbuffer_pullup(req->raw, -1) == NULL)
        return -1;
    rc = request_argv_open(&whole, req, req->raw) == 0
             ? cluster_split_run(req, req->argc, whole.argv) : -1;
    request_argv_close(&whole);
    return rc;
}

/* Run REQ (in C's queue) in parts, as client_split_views. It counts as
 * one request of C in flight on the shared connections until its merged
 * reply is in (client_answer), which may be before this returns: REQ may
 * be gone then. Returns 0, or -1 when out of memory (REQ not split). */
int client_split(struct client *c, struct request *req, const struct sv *argv,
                        struct evbuffer **src)
{
    req->flags |= REQ_SPLIT;
    client_count_inflight(c, CLIENT_SHARED_CONNS);
    if (client_split_views(req, argv, src) == 0)
        return 0;
    req->flags &= ~(unsigned)REQ_SPLIT;
    c->inflight--;
    return -1;
}

/* Cluster mode: the split request REQ (its bytes in req->raw) waited for
 * C's requests out elsewhere: run it now. */
static void client_split_held(struct client *c, struct request *req)
{
    struct evbuffer *none = NULL;
    struct req_argv views;

    if (request_argv_open(&views, req, req->raw) != 0 ||
        client_split(c, req, views.argv, &none) != 0)
        client_reply_error(c, req, "OOM sluice is out of memory");
    request_argv_close(&views);
}
