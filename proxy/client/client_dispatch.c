/* client_dispatch.c - owns what sluice does with each framed request:
 * the checks in order (protected commands, login and permissions, the
 * cluster's slot, rules), then answering it itself, holding it, or handing
 * it to client_route. It is the client layer's top: the core calls it
 * only through the hooks it registers (client_set_hooks). */
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
#include "cluster_info.h"
#include "cluster_split.h"
#include "commands.h"
#include "config.h"
#include "control.h"
#include "local.h"
#include "router.h"
#include "log.h"
#include "metrics.h"
#include "learn.h"
#include "multi.h"
#include "netio.h"
#include "pause.h"
#include "placement.h"
#include "reply.h"
#include "respframe.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "slowlog.h"
#include "throttle.h"
#include "tls.h"
#include "top.h"
#include "users.h"

/* The verbs above the client layer (LOCK, UNLOCK, RENEW: main.c
 * registers them): asked first about every command sluice answers. */
static const struct client_verbs *client_verbs;

/* REQ, answered by sluice and deferred (REQ_DEFERRED) until every earlier
 * reply was in, is at the head of C's queue: run it now. Its bytes are in
 * req->raw. */
void client_run_deferred(struct client *c, struct request *req)
{
    struct req_argv views;
    int to_resp2_pubsub = 0;

    req->flags &= ~(unsigned)REQ_DEFERRED;
    req->flags |= REQ_DONE;
    c->held_reply_bytes -= req->raw_len;   /* counted while it waited */
    c->deferred--;
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    if (request_argv_open(&views, req, req->raw) != 0)
        reply_error(req->reply, "OOM sluice is out of memory");
    else if (client_subscribed_context(c) && local_subscribed_refuses(req, req->argc, views.argv))
        reply_error(req->reply, "Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                    "PING / QUIT / RESET are allowed in this context", req->cmd->name);
    else {
        to_resp2_pubsub = client_role(req) == ROLE_HELLO &&
                          local_hello_to_resp2_subscribed(c, req->argc, views.argv);
        local_execute(c, req, req->argc, views.argv, req->reply);
    }
    request_argv_close(&views);
    /* HELLO 2 of a RESP3 subscriber that Redis would take (its reply says
     * proto 2): subscribed on, in RESP2 pub/sub, as Redis. */
    if (to_resp2_pubsub && c->resp == 2)
        client_enter_resp2_pubsub(c);
    if (client_role(req) == ROLE_HELLO && (req->flags & REQ_FRAMES_AFTER))
        client_leave_pubsub(c);
    c->held_reply_bytes += evbuffer_get_length(req->reply);
}

/* Decide where REQ runs (placement.c) and take the flags that go with it. */
static struct placement client_place(struct request *req, const struct sv *argv)
{
    struct placement p = placement_decide(req->cmd, req->argc, argv);

    req->place = (int)p.kind;
    req->flags |= p.req_flags;
    return p;
}

/* REQ's command is not known yet: it waits, with its client blocked,
 * until Redis has said what it is (learn.c). Returns -1: stop reading. */
static int client_learn(struct client *c, struct request *req, const struct sv *argv,
                        struct evbuffer *src)
{
    char name[LEARN_MAX_NAME];
    size_t len = argv[0].len;

    memcpy(name, argv[0].ptr, len);   /* the views die as the bytes move */
    if (src != NULL)
        request_take_raw(req, src);
    learn_request(c, req, name, len);
    /* Refused at once when it cannot be asked (client_release_held ran
     * inside this loop, so its own client_process_input did nothing): the
     * loop goes on with what follows. */
    return (c->flags & (CLIENT_BLOCKED | CLIENT_PAUSED | CLIENT_OVER_LIMIT)) || c->stalled != NULL ||
                   c->closing
               ? -1
               : 0;
}

/* Cluster mode: MULTI (not nested: WAS_IN_MULTI is 0) of a client whose
 * private connection, if any, holds no state (client_private_holds_state)
 * is answered here and sent later, ahead of the first command, on a
 * private connection to that command's node (client_cluster_moves). EXEC
 * or DISCARD with nothing queued is answered here too, and a MULTI nested
 * in a deferred one. REQ is in C's queue. Returns 1 when answered (its
 * bytes drained from SRC). */
static int client_cluster_defer_multi(struct client *c, struct request *req, struct evbuffer *src,
                                      int was_in_multi)
{
    enum placement_role role = client_role(req);
    const char *reply;

    if (!cluster_enabled())
        return 0;
    if (role == ROLE_MULTI && was_in_multi && (c->flags & CLIENT_MULTI_DEFERRED)) {
        reply = "-ERR MULTI calls can not be nested\r\n";   /* as Redis: no abort */
    } else if (role == ROLE_MULTI && !was_in_multi &&
               (c->private_conn == NULL || !client_private_holds_state(c))) {
        c->flags |= CLIENT_MULTI_DEFERRED;
        reply = "+OK\r\n";
    } else if (role == ROLE_EXEC && (c->flags & CLIENT_MULTI_DEFERRED) &&
               c->multi_held_count > 0 && req->on_reply != client_execabort_reply) {
        return 0;   /* MULTI and what it holds go ahead of it, to any node */
    } else if ((role == ROLE_EXEC || role == ROLE_DISCARD) && (c->flags & CLIENT_MULTI_DEFERRED)) {
        c->flags &= ~(unsigned)CLIENT_MULTI_DEFERRED;
        client_multi_held_free(c);
        if (req->on_reply == client_execabort_reply)   /* a command was refused: see track_multi */
            reply = "-EXECABORT Transaction discarded because of previous errors.\r\n";
        else
            reply = role == ROLE_EXEC ? "*0\r\n" : "+OK\r\n";
        req->on_reply = NULL;
    } else {
        return 0;
    }
    if (src != NULL)
        evbuffer_drain(src, req->raw_len);
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    evbuffer_add(req->reply, reply, strlen(reply));
    STAT_INC(total_local);
    client_complete(c, req);
    client_check_output_limit(c);
    return 1;
}

/* At most this many bytes of keyless commands wait for a deferred
 * MULTI's first key (client_cluster_hold); past it, the transaction goes
 * to the node of the command that does not fit. */
#define CLIENT_MULTI_HELD_MAX (1024 * 1024)

/* Cluster mode: REQ (in C's queue), a keyless command after a deferred
 * MULTI, would bind the transaction to whichever node it went to, and a
 * later key of another node would abort it (CROSSSLOT). So its bytes are
 * held, to be sent behind MULTI on the node of the transaction's first
 * key (or any node at EXEC), and it is answered +QUEUED now. Only what
 * Redis queues (a known command with its arity), up to
 * CLIENT_MULTI_HELD_MAX; the others go on as before. Returns 1 when held
 * (its bytes drained from SRC). */
int client_cluster_hold(struct client *c, struct request *req, struct evbuffer *src)
{
    enum placement_role role = client_role(req);
    size_t *lens, held_len = c->multi_held != NULL ? evbuffer_get_length(c->multi_held) : 0;
    int arity = req->cmd != NULL ? req->cmd->arity : 0;

    if (!cluster_enabled() || !(c->flags & CLIENT_MULTI_DEFERRED) ||
        req->slot != CLUSTER_SLOT_NONE || req->cmd == NULL ||
        (arity >= 0 ? req->argc != arity : req->argc < -arity) ||
        (role != ROLE_NONE && role != ROLE_SCRIPT && role != ROLE_SELECT) ||
        (req->flags & (REQ_PASSTHROUGH | REQ_TUNNEL | REQ_NOREPLY)) ||
        held_len + req->raw_len > CLIENT_MULTI_HELD_MAX)
        return 0;
    if (c->multi_held == NULL && (c->multi_held = evbuffer_new()) == NULL)
        return 0;
    lens = realloc(c->multi_held_lens, (size_t)(c->multi_held_count + 1) * sizeof(*lens));
    if (lens == NULL)
        return 0;
    c->multi_held_lens = lens;
    if (src != NULL)
        evbuffer_remove_buffer(src, c->multi_held, req->raw_len);
    else
        evbuffer_add_buffer(c->multi_held, req->raw);
    lens[c->multi_held_count++] = req->raw_len;
    c->multi_queued++;
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    evbuffer_add(req->reply, "+QUEUED\r\n", 9);
    STAT_INC(total_local);
    client_complete(c, req);
    client_check_output_limit(c);
    return 1;
}

/* REQ (SUBSCRIBE, UNSUBSCRIBE...) of a RESP3 client: Redis answers it
 * with one push per argument (UNSUBSCRIBE with none: one per subscription
 * it ends), and no reply, while other commands go on as usual. So it is
 * paired like any request, but completed by its pushes (client_on_push).
 * An error, or +QUEUED in MULTI, is a reply and pairs as one. */
static void client_expect_pushes(struct request *req)
{
    req->flags = (req->flags & ~(unsigned)REQ_PASSTHROUGH) | REQ_PUSHES;
    req->pushes_left = req->argc > 1 ? req->argc - 1 : -1;
}

static const char *client_cluster_session_answer(const struct client *c,
                                                 const struct request *req,
                                                 struct placement place);

/* A module's command waited to be learned before the gate could judge
 * its keys (auth.c), and, in cluster mode, before its slot was known
 * (client_cluster_check saw no keys): judge both now, PLACE being where
 * it goes. Returns 1 when REQ was refused (and answered), 0 when it goes
 * on. */
static int client_refused_after_learning(struct client *c, struct request *req,
                                         const struct sv *argv, struct evbuffer *src,
                                         struct placement place)
{
    char denied[400];
    const char *line = NULL;

    if (c->auth_checks && auth_admit(c, req->cmd, req->argc, argv, denied, sizeof(denied)) != 0) {
        line = denied;
    } else if (cluster_enabled()) {
        req->slot = cluster_request_slot(req->cmd, req->argc, argv);
        line = cluster_answer(req->cmd, req->argc, argv, req->slot);
        if (line == NULL)
            line = client_cluster_session_answer(c, req, place);
    }
    if (line == NULL)
        return 0;
    if (src != NULL)
        evbuffer_drain(src, req->raw_len);
    client_refuse(c, req, line);
    return 1;
}

/* REQ, answered by sluice, arrives inside MULTI. One that Redis would
 * queue (CLIENT SETNAME...) is sent to Redis too, to be queued there and
 * keep its slot in EXEC's reply, which multi.c then fills with sluice's
 * reply; REQ's place becomes PRIVATE. An arity error is answered now and,
 * as in Redis, aborts the transaction. */
static void client_local_in_multi(struct client *c, struct request *req, const struct sv *argv,
                                  struct evbuffer *src)
{
    switch (local_in_multi(req, req->argc, argv)) {
    case LOCAL_MULTI_ERROR:
        c->flags |= CLIENT_MULTI_DIRTY;
        break;
    case LOCAL_MULTI_QUEUE:
        if (multi_record(&c->multi, req, c->multi_queued, src) == 0)
            req->place = PLACE_PRIVATE;
        break;
    case LOCAL_MULTI_NOW:
    default:
        break;
    }
}

/* A PROXY PAUSE covers REQ: it waits in sluice (control.c) until the
 * pause ends, and C reads no further command meanwhile. What sluice
 * answers itself goes on (PROXY RESUME among it), except the lock verbs,
 * which run on Redis. Returns 1 when REQ was taken (held, or refused for
 * want of memory). */
static int client_pause_holds(struct client *c, struct request *req, const struct sv *argv,
                              struct evbuffer *src)
{
    int verb;

    if (!control_would_hold(req, argv, 1))
        return 0;   /* the common case: no pause, or a read under PAUSE WRITE */
    verb = req->place == PLACE_LOCAL && client_verbs != NULL &&
           client_verbs->wants(req, req->argc, argv);
    if ((req->place == PLACE_LOCAL && !verb) || !control_would_hold(req, argv, verb))
        return 0;
    if (control_hold(c, req, src) != 0) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse(c, req, "OOM sluice is out of memory");
    }
    return 1;
}

/* Whether REQ (ARGV) may block in Redis: a command Redis flags blocking,
 * XREAD and XREADGROUP only with BLOCK. */
static int client_may_block(const struct request *req, const struct sv *argv)
{
    if (req->cmd == NULL || !(req->cmd->flags & CMD_BLOCKING))
        return 0;
    if (strcmp(req->cmd->name, "xread") != 0 && strcmp(req->cmd->name, "xreadgroup") != 0)
        return 1;
    for (int i = 1; i < req->argc && !sv_ieq(argv[i], "streams"); i++) {
        if (sv_ieq(argv[i], "block"))
            return 1;
    }
    return 0;
}

/* Run REQ, with its arguments ARGV: answer it here, rewrite it (LOCK
 * verbs) or forward it. Its bytes are in SRC (the input buffer) or, when
 * SRC is NULL, in req->raw. Returns -1 when reading must stop (it waits,
 * the client is blocked or paused, or closing). */
int client_dispatch(struct client *c, struct request *req, const struct sv *argv,
                           struct evbuffer *src)
{
    struct backend_conn *conn;
    int was_in_multi, rc;

    /* When users are sluice's, what follows a command that may block is
     * framed once it returns (client_send): see REQ_HOLDS_INPUT. */
    if (auth_local() && client_may_block(req, argv))
        req->flags |= REQ_HOLDS_INPUT;

    if (req->place == PLACE_LEARN) {
        struct placement place = client_place(req, argv);   /* released after learning */
        if (req->place != PLACE_LEARN && client_refused_after_learning(c, req, argv, src, place))
            return c->closing ? -1 : 0;
    }
    if (req->place == PLACE_LEARN)
        return client_learn(c, req, argv, src);
    if (client_pause_holds(c, req, argv, src))
        return -1;
    if (req->place == PLACE_LOCAL && client_verbs != NULL && client_verbs->wants(req, req->argc, argv)) {
        size_t original_len = req->raw_len;   /* the rewrite replaces raw_len */
        client_enqueue(c, req);
        client_verbs->handle(c, req, req->argc, argv);
        if (src != NULL)
            evbuffer_drain(src, original_len);
        return (c->flags & (CLIENT_BLOCKED | CLIENT_PAUSED | CLIENT_OVER_LIMIT)) ||
                       c->stalled != NULL ? -1 : 0;
    }
    if ((req->place == PLACE_LOCAL || client_role(req) == ROLE_CLIENT_IDS) &&
        (c->flags & CLIENT_IN_MULTI))
        client_local_in_multi(c, req, argv, src);   /* CLIENT LIST/INFO too */
    /* Also when its reply is dropped (CLIENT REPLY OFF): what it does
     * (a name, the reply mode) must happen in order, or be refused. */
    if (req->place == PLACE_LOCAL &&
        (local_at_turn(req, req->argc, argv) ||
         (!TAILQ_EMPTY(&c->requests) &&
          (local_reads_session(req, req->argc, argv) || auth_redis_login_needed(c))) ||
         ((c->flags & CLIENT_PASSTHROUGH) && local_subscribed_refuses(req, req->argc, argv)) ||
         (client_role(req) == ROLE_HELLO &&
          local_hello_to_resp2_subscribed(c, req->argc, argv)))) {
        /* In pub/sub it runs once its fence is back, when sluice knows
         * whether Redis would still refuse it in the subscribed context. */
        /* Earlier replies may change what it reads: it runs behind them.
         * A reply made from sluice's state (a listing, counters) is built
         * at its turn too, under C's output limits, never as it is framed. */
        if (src != NULL && request_take_raw(req, src) != 0) {
            client_refuse(c, req, "OOM sluice is out of memory");
            return c->closing ? -1 : 0;
        }
        client_enqueue(c, req);
        /* Its bytes wait like a reply, and it counts as one in flight:
         * deferred commands behind a BLPOP stay bounded. */
        client_defer(c, req);
        /* What follows a CLIENT REPLY is framed under the mode it leaves,
         * and what follows a HELLO in RESP2 pub/sub maybe paired again in
         * another protocol (client_leave_pubsub): nothing is, until it has
         * run (client_flush unblocks). */
        if (client_role(req) == ROLE_CLIENT_REPLY ||
            (client_role(req) == ROLE_HELLO && (c->flags & CLIENT_PASSTHROUGH) &&
             !client_is_monitor(c)) ||
            (client_role(req) == ROLE_HELLO &&
             local_hello_to_resp2_subscribed(c, req->argc, argv))) {
            req->flags |= REQ_FRAMES_AFTER;
            client_block(c);
        }
        client_flush(c);   /* fenced meanwhile (pub/sub): it waits for its fence */
        client_check_output_limit(c);
        return (c->flags & (CLIENT_OVER_LIMIT | CLIENT_BLOCKED)) || c->closing ? -1 : 0;
    }
    if (req->place == PLACE_LOCAL) {
        req->reply = evbuffer_new();
        local_execute(c, req, req->argc, argv, req->reply);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (req->flags & REQ_NOREPLY) {
            request_free(req);
        } else {
            client_enqueue(c, req);
            client_complete(c, req);
            client_check_output_limit(c);   /* PROXY INFO from a client that never reads */
        }
        return (c->flags & (CLIENT_CLOSE_AFTER_REPLY | CLIENT_OVER_LIMIT)) || c->closing ? -1 : 0;
    }
    client_note_script_login(c, req);   /* before any path may pick its connection */
    client_note_tracking(c, req, req->argc, argv);   /* ARGV: not after clientid_translate */
    if (client_role(req) == ROLE_CLIENT_IDS &&
        clientid_translate(c, req, argv, &src) == CLIENTID_HELD)
        return -1;   /* released once Redis said its ids (client_release_held) */
    cluster_info_hook(req);   /* cluster mode: INFO says one standalone Redis */
    was_in_multi = (c->flags & CLIENT_IN_MULTI) != 0;
    client_note_session(req, req->argc, argv);
    client_track_multi(c, req, &src);
    if ((req->flags & REQ_PASSTHROUGH) && c->resp == 3 && client_role(req) != ROLE_MONITOR)
        client_expect_pushes(req);
    /* In a transaction or pub/sub Redis refuses SYNC: its error pairs. */
    if (c->flags & (CLIENT_IN_MULTI | CLIENT_PASSTHROUGH))
        req->flags &= ~(unsigned)REQ_TUNNEL;
    /* Pub/sub replies stream unpaired, and a tunnel's too: such requests
     * wait in no queue. */
    if (!(req->flags & (REQ_PASSTHROUGH | REQ_TUNNEL)) && !(c->flags & CLIENT_PASSTHROUGH))
        client_enqueue(c, req);
    /* Before a transaction or a hold may keep it: a write counts now. */
    if (client_read_from(c, req, argv) != 0 && (rc = client_replica_wait(c, req)) != 0) {
        if (rc > 0) {   /* Sentinel: a replica resyncing after a failover */
            if (src != NULL)
                request_take_raw(req, src);
            c->flags |= CLIENT_WAITS_REPLICA;
            c->stalled = req;   /* client_try_unstall sends it, or fails it */
            return -1;
        }
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_reply_error(c, req, CLIENT_NO_REPLICA_ERR);
        return c->closing || (c->flags & CLIENT_OVER_LIMIT) ? -1 : 0;
    }
    if (client_cluster_defer_multi(c, req, src, was_in_multi) || client_cluster_hold(c, req, src))
        return 0;
    if (cluster_enabled() && cluster_split_wants(req->cmd, req->slot)) {
        size_t raw_len = req->raw_len;   /* REQ may be answered, and freed, by its split */
        if (client_split_must_wait(c)) {
            if (src != NULL)
                request_take_raw(req, src);
            c->stalled = req;   /* client_try_unstall runs it */
            return -1;
        }
        if (client_split(c, req, argv, &src) != 0)
            client_reply_error(c, req, "OOM sluice is out of memory");
        if (src != NULL)
            evbuffer_drain(src, raw_len);
        return c->closing || (c->flags & CLIENT_OVER_LIMIT) ? -1 : 0;
    }
    /* Sentinel: no primary for a new private connection yet. */
    conn = client_failover_wait(c, req) != 0 ? NULL : client_route(c, req);
    if (conn == NULL ? req->retry_since_ms != 0 : client_must_wait(c, req, conn)) {
        if (src != NULL)
            request_take_raw(req, src);
        c->stalled = req;   /* client_try_unstall sends it, or fails it */
        return -1;
    }
    client_send(c, req, conn, src);
    return (c->flags & (CLIENT_PAUSED | CLIENT_OVER_LIMIT | CLIENT_BLOCKED)) ? -1 : 0;
}

/* Refuse REQ (framed, not queued), whose command cannot keep the shared
 * connections' promise, with the reason placement.c gives. Nothing is
 * sent to Redis, and no rule takes a token. */
static void client_refuse_placed(struct client *c, struct request *req, const char *why)
{
    const char *name = req->cmd != NULL ? req->cmd->name : "";
    char text[400];

    placement_refusal(text, sizeof(text), name, strlen(name), why);
    client_refuse(c, req, text);
}

/* Answer REQ (framed, not queued) with LINE, a whole reply without its
 * CRLF: an error is a refusal (client_refuse), a status goes in order. */
static void client_answer_line(struct client *c, struct request *req, const char *line)
{
    if (line[0] == '-') {
        client_refuse(c, req, line);
        return;
    }
    client_enqueue(c, req);
    req->reply = evbuffer_new();
    evbuffer_add_printf(req->reply, "%s\r\n", line);
    STAT_INC(total_local);
    client_complete(c, req);
    client_check_output_limit(c);
}

/* Cluster mode: whether REQ can be answered only by other nodes than
 * that of C's private connection: it runs in parts, or its key is
 * another node's. */
static int client_cluster_elsewhere(const struct client *c, const struct request *req)
{
    if (cluster_split_wants(req->cmd, req->slot))
        return 1;
    return c->private_conn != NULL && req->slot >= 0 &&
           router_node_for_request(req, NULL) != backend_conn_node(c->private_conn);
}

/* Cluster mode: REQ of C, whose replies stream unpaired from its private
 * connection (pub/sub, MONITOR), is for other nodes (client_cluster_elsewhere):
 * nothing could pair their replies with it in the stream, so it is
 * refused. In MONITOR and in the subscribed context with Redis's own
 * error, which its node would answer too. */
static const char *client_cluster_stream_refusal(const struct client *c,
                                                 const struct request *req)
{
    static char text[200];

    if (c->flags & CLIENT_MONITOR)
        return "-ERR Replica can't interact with the keyspace";
    if (client_subscribed_context(c)) {
        snprintf(text, sizeof(text), "-ERR Can't execute '%s': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                 req->cmd->name);
        return text;
    }
    return "-ERR sluice cluster mode: this connection is in pub/sub or MONITOR on one node, "
           "and this command is for other nodes; use another connection for it";
}

/* Cluster mode: a request whose key another node serves than the one
 * the client's session (private connection) is on cannot join it: in a
 * transaction it gets CROSSSLOT (and EXEC then aborts), as Redis Cluster
 * answers; a command needing the session (WATCH, a blocking one) is
 * refused, unless the private connection holds no session yet (or a
 * deferred MULTI waits for its first key): then it moves to the
 * command's node (client_cluster_moves). On a connection streaming
 * pub/sub or MONITOR, a command for other nodes is refused
 * (client_cluster_stream_refusal), and with CLIENT TRACKING on, a read. */
static const char *client_cluster_session_answer(const struct client *c,
                                                 const struct request *req,
                                                 struct placement place)
{
    if ((c->flags & CLIENT_PASSTHROUGH) && req->cmd != NULL && !(req->flags & REQ_PASSTHROUGH) &&
        client_cluster_elsewhere(c, req))
        return client_cluster_stream_refusal(c, req);   /* (S)SUBSCRIBE...: see below */
    /* A read elsewhere would be cached with no invalidation ever. */
    if ((c->flags & CLIENT_TRACKING) && req->cmd != NULL && (req->cmd->flags & CMD_READONLY) &&
        client_cluster_elsewhere(c, req))
        return "-ERR sluice cluster mode: this connection's CLIENT TRACKING gets invalidations "
               "from one node only, and this command reads keys of another; use another "
               "connection for it";
    if ((c->flags & CLIENT_IN_MULTI) && cluster_split_wants(req->cmd, req->slot))
        return req->slot == CLUSTER_SLOT_CROSS
                   ? "-CROSSSLOT Keys in request don't hash to the same slot"
                   : "-ERR sluice cluster mode runs this command on every primary, "
                     "which it cannot do inside a transaction";
    /* One slot per transaction, as Redis Cluster has it: a key of another
     * slot is refused when queued, even on the same node (Redis would
     * refuse the whole EXEC), so EXEC then aborts with EXECABORT. */
    if ((c->flags & CLIENT_IN_MULTI) && req->slot >= 0 && c->multi_slot >= 0 &&
        req->slot != c->multi_slot)
        return "-CROSSSLOT Keys in request don't hash to the same slot";
    if (c->private_conn == NULL || req->slot < 0 ||
        router_node_for_request(req, NULL) == backend_conn_node(c->private_conn))
        return NULL;
    if ((c->flags & CLIENT_IN_MULTI) && !client_cluster_moves(c, req))
        return "-CROSSSLOT Keys in request don't hash to the same slot";
    if (place.kind == PLACE_SHARED)
        return NULL;   /* goes to the shared connections: client_cluster_off_session */
    if (client_cluster_moves(c, req))
        return NULL;   /* the private connection moves to its node: client_route */
    return "-ERR sluice cluster mode: this connection's session is on another node than "
           "this command's key; use another connection for it";
}

/* Cluster mode: what sluice answers itself before routing (CLUSTER as a
 * standalone Redis, SELECT, CROSSSLOT, no map yet), and the slot REQ goes
 * to. Returns 1 when REQ was answered (its bytes drained from SRC). */
static int client_cluster_check(struct client *c, struct request *req, const struct sv *argv,
                                struct evbuffer *src, struct placement place)
{
    const char *line;

    if (!cluster_enabled() || place.kind == PLACE_LOCAL)
        return 0;
    req->slot = cluster_request_slot(req->cmd, req->argc, argv);
    /* Inside MULTI, SELECT is queued: the node answers it in EXEC's reply,
     * as Redis Cluster does (+OK for database 0, else its error). */
    line = (c->flags & CLIENT_IN_MULTI) && client_role(req) == ROLE_SELECT
               ? NULL
               : cluster_answer(req->cmd, req->argc, argv, req->slot);
    if (line == NULL)
        line = client_cluster_session_answer(c, req, place);
    if (line == NULL) {
        if ((c->flags & CLIENT_IN_MULTI) && req->slot >= 0 && c->multi_slot < 0)
            c->multi_slot = req->slot;
        return 0;
    }
    if (src != NULL)
        evbuffer_drain(src, req->raw_len);
    client_answer_line(c, req, line);
    return 1;
}

/* Refuse REQ (DEBUG, MODULE LOAD...) of a client that is not local, with
 * Redis's reply: Redis would take every client of sluice's for local. */
static void client_refuse_protected(struct client *c, struct request *req)
{
    int debug = req->cmd != NULL && strcmp(req->cmd->name, "debug") == 0;
    char text[320];

    snprintf(text, sizeof(text), "%s command not allowed. If the %s option is set to \"local\", "
             "you can run it from a local connection, otherwise you need to set this option in "
             "the configuration file, and then restart the server.", debug ? "DEBUG" : "MODULE",
             debug ? "enable-debug-command" : "enable-module-command");
    client_refuse(c, req, text);
}

/* The reason label of an auth_admit refusal with the error DENIED. */
static enum stats_reject client_reject_reason(const char *denied)
{
    denied += denied[0] == '-';
    if (strncmp(denied, "NOAUTH", 6) == 0)
        return STATS_REJECT_NOAUTH;
    if (strncmp(denied, "NOPERM", 6) == 0)
        return STATS_REJECT_NOPERM;
    return STATS_REJECT_REFUSED;   /* wrong arity and the like, which Redis refuses too */
}

/* Redis's words for a client that sends POST or Host: (src/server.c,
 * securityWarningCommand), with the client's address. */
#define CLIENT_SECURITY_ATTACK_FMT                                                       \
    "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: " \
    "commands to Redis. This is likely due to an attacker attempting to use Cross "       \
    "Protocol Scripting to compromise your Redis instance. Connection from %s aborted."

/* Whether ARGV[0] is "POST" or "Host:" (any case), which Redis takes for
 * HTTP sent by a web page (cross protocol scripting): it closes such a
 * client at once and runs nothing more it sent. So does sluice, before
 * any check: forwarded, they would make Redis close a shared connection,
 * failing every other client's requests on it. */
static int client_cross_protocol(struct client *c, int argc, const struct sv *argv)
{
    static uint64_t logged_ms;
    uint64_t now_ms;

    if (argc < 1 || argv[0].ptr == NULL ||
        (!sv_ieq(argv[0], "post") && !sv_ieq(argv[0], "host:")))
        return 0;
    STAT_INC(security_attacks);
    now_ms = server_now_ms();
    if (logged_ms == 0 || now_ms - logged_ms >= 1000) {   /* a flood logs once a second */
        log_warning(CLIENT_SECURITY_ATTACK_FMT, c->addr_text);
        logged_ms = now_ms;
    }
    client_abort(c);
    return 1;
}

/* Handle one framed request. Its bytes are in REQ->raw (inline commands)
 * or the first raw_len bytes of IN. Returns -1 when input processing must
 * stop (the request waits, or the client is closing). */
/* sluice_user_commands_total{user}: a request of C's user. The series is
 * found again only when C's user changed (a login, a reload), so a
 * request costs an increment. Bounded by the users there are (the users
 * file's, or Redis's own without one). */
static inline void client_count_user(struct client *c)
{
    if (c->user_commands == NULL || c->user_commands_changes != c->identity_changes) {
        c->user_commands = metrics_counter(METRIC_user_commands_total,
                                           c->user != NULL ? c->user : "default", NULL);
        c->user_commands_changes = c->identity_changes;
    }
    (*c->user_commands)++;
}

static int client_handle(struct client *c, struct request *req, struct evbuffer *in)
{
    struct evbuffer *src = req->raw != NULL ? NULL : in;
    struct throttle_decision decision;
    struct placement place;
    struct req_argv views;
    char denied[400];
    const struct sv *argv;
    const char *line;
    int rc;

    req->client = c;
    if (request_argv_open(&views, req, src != NULL ? src : req->raw) != 0) {
        request_argv_close(&views);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse(c, req, "OOM sluice is out of memory");
        return c->closing ? -1 : 0;
    }
    argv = views.argv;
    if (client_cross_protocol(c, req->argc, argv)) {
        request_argv_close(&views);
        request_free(req);   /* framed, queued nowhere */
        return -1;
    }
    req->cmd = commands_resolve(req->argc, argv);
    c->last_cmd = req->cmd;
    req->framed_us = server_pass_now_us();
    req->auth_gen = auth_users_generation;   /* the gate below judges it under these users */
    if (slowlog_enabled())
        slowlog_capture(req, argv, src != NULL ? src : req->raw);
    top_count(c, req, argv);
    client_count_user(c);
    c->commands++;
    STAT_INC(total_requests);
    req->stat_row = stats_command_row(req->cmd, req->argc > 0 ? argv[0] : (struct sv){"", 0});
    stats_count_command(req->stat_row);
    client_reply_mark(c, req);
    place = client_place(req, argv);
    /* Redis's order: protected commands, then login and permissions;
     * sluice's own refusals only for those who may run the command. */
    if ((req->flags & REQ_PROTECTED) && !c->local_peer) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_note_rejected(req, STATS_REJECT_REFUSED);
        client_refuse_protected(c, req);
        rc = c->closing ? -1 : 0;
    } else if (c->auth_checks && auth_admit(c, req->cmd, req->argc, argv, denied,
                                            sizeof(denied)) != 0) {
        /* Nothing reaches Redis, and no rule takes a token. */
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_note_rejected(req, client_reject_reason(denied));
        client_refuse(c, req, denied);
        rc = c->closing ? -1 : 0;
    } else if (users_publishes_reserved(req->cmd, req->argc, argv)) {
        /* Whoever asks, unrestricted users too: a hello there moves the
         * primary for every client (users.h). */
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_note_rejected(req, STATS_REJECT_NOPERM);
        client_refuse(c, req, USERS_ERR_NOPERM_SENTINEL);
        rc = c->closing ? -1 : 0;
    } else if (client_cluster_check(c, req, argv, src, place)) {
        rc = c->closing ? -1 : 0;
    } else if (client_failover_check(c, req, src, &line)) {
        client_answer_line(c, req, line);
        rc = c->closing ? -1 : 0;
    } else if (place.kind == PLACE_REFUSED) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_note_rejected(req, STATS_REJECT_REFUSED);
        client_refuse_placed(c, req, place.why);
        rc = c->closing ? -1 : 0;
    } else switch (throttle_admit(c, req, argv, &decision)) {
    case THROTTLE_PASS:
        rc = client_dispatch(c, req, argv, src);
        break;
    case THROTTLE_REJECT:
        top_note(c, req, argv, TOPK_REJECTED);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_note_rejected(req, STATS_REJECT_THROTTLED);
        client_refuse(c, req, decision.error);
        rc = c->closing ? -1 : 0;
        break;
    case THROTTLE_HOLD:
    default:
        if (decision.limits->verdict == LIMITER_DELAY)
            top_note(c, req, argv, TOPK_DELAYED);
        if (src != NULL)
            request_take_raw(req, src);
        client_block(c);
        throttle_hold(c, req, &decision);
        rc = 0;   /* the loop stops while blocked: it may be released already */
        break;
    }
    request_argv_close(&views);
    return rc;
}

/* The gate again, for REQ held since it passed (a reload may have taken
 * a grant away meanwhile: Redis checks a command as it runs it). Returns
 * 1 when REQ was refused (and answered). */
static int client_refused_after_hold(struct client *c, struct request *req, const struct sv *argv)
{
    char denied[400];

    if (!c->auth_checks || auth_admit(c, req->cmd, req->argc, argv, denied, sizeof(denied)) == 0)
        return 0;
    client_note_rejected(req, client_reject_reason(denied));   /* as when framed */
    client_refuse(c, req, denied);
    return 1;
}

/* Refuse REQ, held until now, with ERROR. A shared rule's refusal is a
 * refusal like a local rule's: counted in sluice_commands_rejected_total
 * {reason="throttled"} and rejected_calls, never as a failed command, and
 * in PROXY TOP as one (the request was counted as it was framed). */
static void client_refuse_held(struct client *c, struct request *req, const char *error)
{
    struct req_argv views;

    if (strncmp(error, "-THROTTLED", 10) == 0) {
        client_note_rejected(req, STATS_REJECT_THROTTLED);
        if (req->raw != NULL && request_argv_open(&views, req, req->raw) == 0)
            top_note(c, req, views.argv, TOPK_REJECTED);
        if (req->raw != NULL)
            request_argv_close(&views);
    }
    client_refuse(c, req, error);
}

static void client_dispatch_release_held(struct client *c, struct request *req,
                                         const char *error)
{
    struct req_argv views;

    client_enter(c);
    c->flags &= ~(unsigned)CLIENT_BLOCKED;
    if (error != NULL) {
        client_refuse_held(c, req, error);
    } else if (request_argv_open(&views, req, req->raw) != 0) {
        client_refuse(c, req, "OOM sluice is out of memory");
    } else if (!client_refused_after_hold(c, req, views.argv)) {
        client_dispatch(c, req, views.argv, NULL);
    }
    if (error == NULL)
        request_argv_close(&views);
    /* The held request may block the client again (a LOCK that waits). */
    if (!(c->flags & CLIENT_BLOCKED))
        client_process_input(c);
    client_leave(c);
}

void client_process_input_loop(struct client *c, struct evbuffer *in)
{
    struct request *req;

    while (c->stalled == NULL &&
           !(c->flags & (CLIENT_PAUSED | CLIENT_BLOCKED | CLIENT_CLOSE_AFTER_REPLY)) &&
           !c->closing) {
        if (c->flags & CLIENT_TUNNEL) {
            client_tunnel_input(c, in);
            return;
        }
        /* Set before each request: a login changes it only between them. */
        c->parser.must_login = (c->auth_checks && auth_required(c)) ||
                               auth_redis_login_needed(c);
        switch (reqparse_next(&c->parser, in, &req)) {
        case REQPARSE_MORE:
            if (evbuffer_get_length(in) > (size_t)client_cfg->client_query_buffer_limit) {
                STAT_INC(query_limit_disconnects);
                client_protocol_error(c, "Protocol error: client_query_buffer_limit exceeded");
            }
            return;
        case REQPARSE_SKIP:
            continue;
        case REQPARSE_ERROR:
            client_protocol_error(c, c->parser.err);
            return;
        case REQPARSE_REQUEST:
            if (client_handle(c, req, in) != 0)
                return;
        }
    }
}

/* C is closing: what the layer's upper files and the verbs hold for it. */
static void client_dispatch_closing(struct client *c)
{
    control_client_closed(c);
    top_client_closed(c);
    multi_locals_free(&c->multi);
    client_multi_held_free(c);
    client_failover_forget(c);
    client_handover_closing(c);
    if (client_verbs != NULL)
        client_verbs->client_closed(c);
    learn_client_closed(c);
}

/* Once a tick for C: a subscriber to subscribe again, a request waiting
 * for a primary (client_failover_wait) to send or fail. */
static void client_dispatch_tick(struct client *c)
{
    client_failover_cron(c);
    if (c->stalled != NULL && c->stalled->retry_since_ms != 0 && !c->closing)
        client_try_unstall(c);   /* inside client_cron's enter/leave */
}

void client_set_verbs(const struct client_verbs *verbs)
{
    client_verbs = verbs;
}

void client_module_init(struct event_base *base, const struct config *cfg)
{
    static const struct client_hooks hooks = {
        .input = client_process_input_loop,
        .unstall = client_try_unstall,
        .run_deferred = client_run_deferred,
        .closing = client_dispatch_closing,
        .release_held = client_dispatch_release_held,
        .tick = client_dispatch_tick,
        .handover_write = client_handover_write,
    };

    client_core_init(base, cfg, &hooks);
}
