/* client_session.c - owns what sluice follows of a client's session on
 * Redis's side: its login, transaction, WATCH, tracking and pub/sub
 * state, noted as requests are framed and as Redis's replies confirm
 * them. It reads replies; it never writes to a client or sends. */
#include "client.h"
#include "client_int.h"

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
#include "reply.h"
#include "respframe.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"

/* RESET: back to a new connection's name, user and reply mode (the
 * "default" user, logged out where that needs a password). The protocol
 * went back to RESP2 as RESET was sent (client_send): what the client
 * pipelines after it is routed by it. */
void client_reset_session(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_TRACKING;
    c->db = 0;
    free(c->name);
    c->name = NULL;
    auth_client_start(c);
    c->flags &= ~(unsigned)(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
}

/* Apply what a successful AUTH, HELLO or RESET changed on the session. */
void client_apply_session(struct client *c, struct request *req, int type)
{
    enum placement_role role = placement_role(req->cmd);

    if (role == ROLE_PAUSE || role == ROLE_UNPAUSE)
        pause_note_reply(role == ROLE_PAUSE, (c->flags & CLIENT_IN_MULTI) != 0, type,
                         req->pauses_before);
    if ((type == REPLY_ERROR && (req->flags & REQ_TRACKING_ON)) ||
        (type != REPLY_ERROR && (req->flags & REQ_TRACKING_OFF)))
        c->flags &= ~(unsigned)CLIENT_TRACKING;
    if (type == REPLY_ERROR)
        return;
    if (req->ok_db > 0)
        c->db = req->ok_db - 1;
    if (req->ok_user != NULL || req->ok_name != NULL || (req->flags & REQ_RESET))
        throttle_client_changed(c);
    if (req->ok_user != NULL) {
        free(c->user);
        c->user = req->ok_user;
        req->ok_user = NULL;
        auth_redis_logged_in(c);
    }
    if (req->ok_name != NULL) {
        free(c->name);
        c->name = req->ok_name;
        req->ok_name = NULL;
    }
    if (req->flags & REQ_RESET)
        client_reset_session(c);
}

/* The push kinds that confirm a (un)subscription, and the count of C's
 * that each one changes. */
static const struct {
    const char *kind;
    size_t count_off;   /* in struct client_subs */
} client_push_kinds[] = {
    {"subscribe", offsetof(struct client_subs, channels)},
    {"unsubscribe", offsetof(struct client_subs, channels)},
    {"psubscribe", offsetof(struct client_subs, patterns)},
    {"punsubscribe", offsetof(struct client_subs, patterns)},
    {"ssubscribe", offsetof(struct client_subs, shards)},
    {"sunsubscribe", offsetof(struct client_subs, shards)},
};
#define CLIENT_PUSH_KINDS (int)(sizeof(client_push_kinds) / sizeof(client_push_kinds[0]))

/* The kind of the push of LEN bytes at the head of SRC (its first element,
 * ">3\r\n$9\r\nsubscribe\r\n...") into KIND (size CLIENT_PUSH_KIND_SIZE), and
 * its last element when that is an integer (a confirmation's count) into
 * *COUNT (else -1). */
void client_push_kind(struct evbuffer *src, size_t len, char *kind, long long *count)
{
    char head[41], tail[24];
    struct evbuffer_ptr at;
    size_t n = len < sizeof(head) - 1 ? len : sizeof(head) - 1;
    size_t t = len < sizeof(tail) ? len : sizeof(tail);
    char *p, *line;
    long klen;

    kind[0] = '\0';
    *count = -1;
    evbuffer_copyout(src, head, n);
    head[n] = '\0';   /* strtol stops here at the latest */
    p = memchr(head, '\n', n);
    if (p != NULL && p + 1 < head + n && p[1] == '$') {
        klen = strtol(p + 2, &line, 10);
        if (klen > 0 && klen < CLIENT_PUSH_KIND_SIZE && line + 2 + klen <= head + n)
            snprintf(kind, CLIENT_PUSH_KIND_SIZE, "%.*s", (int)klen, line + 2);
    }
    /* The last line: after the last LF but the final one. */
    if (t < 4 || evbuffer_ptr_set(src, &at, len - t, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(src, &at, tail, t) != (ev_ssize_t)t)
        return;
    for (line = tail + t - 2; line > tail && line[-1] != '\n'; line--)
        ;
    if (line > tail && line[0] == ':')
        *count = strtoll(line + 1, NULL, 10);
}

/* Whether the pub/sub array or push of LEN bytes at the head of SRC is a
 * message or a (un)subscribe confirmation: what Redis 7.0 sends even under
 * CLIENT REPLY OFF (a PING's reply in RESP2 pub/sub, ["pong", ""], it does
 * not). */
int client_is_pubsub_message(struct evbuffer *src, size_t len)
{
    char kind[CLIENT_PUSH_KIND_SIZE];
    long long count;

    client_push_kind(src, len, kind, &count);
    for (int i = 0; i < CLIENT_PUSH_KINDS; i++) {
        if (strcmp(kind, client_push_kinds[i].kind) == 0)
            return 1;
    }
    return respframe_is_message_kind(kind, strlen(kind));
}

/* The subscription counts a (un)subscribe reply of LEN bytes at the head
 * of SRC carries ("*3 $9 subscribe $N channel :count"): while any is
 * above 0 a RESP2 connection is in Redis's subscribed context. */
void client_note_subscriptions(struct client *c, struct evbuffer *src, size_t len)
{
    static const char *const kinds[] = {"subscribe", "unsubscribe", "psubscribe",
                                        "punsubscribe", "ssubscribe", "sunsubscribe"};
    char head[32], tail[24];
    size_t tail_len = len < sizeof(tail) ? len : sizeof(tail);
    struct evbuffer_ptr at;
    char *colon;

    if (len < 16 || evbuffer_copyout(src, head, sizeof(head) < len ? sizeof(head) : len) < 16 ||
        memcmp(head, "*3\r\n$", 5) != 0)
        return;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        size_t n = strlen(kinds[i]);
        char *name = memchr(head + 5, '\n', sizeof(head) - 5);
        if (name == NULL || (size_t)(head + sizeof(head) - name - 1) < n + 2 ||
            memcmp(name + 1, kinds[i], n) != 0 || name[1 + n] != '\r')
            continue;
        evbuffer_ptr_set(src, &at, len - tail_len, EVBUFFER_PTR_SET);
        if (evbuffer_copyout_from(src, &at, tail, tail_len) != (ssize_t)tail_len)
            return;
        tail[tail_len - 2] = '\0';   /* the final CRLF */
        if ((colon = strrchr(tail, ':')) == NULL)
            return;
        if (i >= 4)   /* ssubscribe, sunsubscribe */
            c->shard_subscriptions = strtoll(colon + 1, NULL, 10);
        else
            c->subscriptions = strtoll(colon + 1, NULL, 10);
        return;
    }
}

/* A HELLO of C, streaming RESP2 pub/sub (CLIENT_PASSTHROUGH), has just run
 * at its turn. With no subscription left Redis's connection is out of the
 * subscribed context, as Redis saw the HELLO: so C leaves the streaming,
 * and its private connection switches to C's protocol now, or every reply
 * would stay RESP2 until RESET (and an invalidation redirected to C,
 * which Redis sends a RESP2 connection only while subscribed, be lost
 * before C's next command). Safe here: every reply sent before the HELLO
 * is in (its fence came back), and C framed nothing after it
 * (REQ_FRAMES_AFTER). The private connection stays C's, with what Redis
 * keeps on it (tracking, a DB). */
void client_leave_pubsub(struct client *c)
{
    if (!(c->flags & CLIENT_PASSTHROUGH) || client_is_monitor(c) || c->private_conn == NULL ||
        c->subscriptions > 0 || c->shard_subscriptions > 0 || c->resets_unanswered > 0 ||
        c->fences > 0)
        return;
    c->flags &= ~(unsigned)CLIENT_PASSTHROUGH;
    c->flags |= CLIENT_SESSION;
    backend_set_passthrough(c->private_conn, 0);
    backend_use_resp(c->private_conn, c->resp);
}

void client_enter_resp2_pubsub(struct client *c)
{
    if (c->private_conn == NULL || (c->flags & CLIENT_PASSTHROUGH))
        return;
    /* HELLO 2 first, paired with sluice's own request (its reply is
     * dropped): a push Redis sent before it streams to C (backend.c), as a
     * RESP2 array (client_on_passthrough), and so does all that follows. */
    backend_use_resp(c->private_conn, 2);
    c->subscriptions = c->subs.total;
    c->shard_subscriptions = c->subs.shards;
    memset(&c->subs, 0, sizeof(c->subs));
    c->flags |= CLIENT_PASSTHROUGH;
    backend_set_passthrough(c->private_conn, 1);
}

/* Count a confirmation of KIND with COUNT into C's subscriptions; returns
 * its row in client_push_kinds, or -1 for any other push. */
int client_count_push(struct client *c, const char *kind, long long count)
{
    for (int i = 0; i < CLIENT_PUSH_KINDS; i++) {
        long long *mine;
        if (strcmp(kind, client_push_kinds[i].kind) != 0)
            continue;
        if (count < 0)
            return i;
        mine = (long long *)((char *)&c->subs + client_push_kinds[i].count_off);
        if (mine == &c->subs.shards) {
            *mine = count;   /* the shard count is its own */
        } else {
            /* Channels and patterns share one count: the change is ours. */
            *mine += count - c->subs.total;
            if (*mine < 0)
                *mine = 0;
            c->subs.total = count;
        }
        return i;
    }
    return -1;
}

/* Whether a confirmation (row ROW) ends HEAD, a RESP3 (un)subscribe of C. */
int client_push_ends(struct client *c, struct request *head, int row)
{
    const long long *mine;

    if (head == NULL || !(head->flags & REQ_PUSHES) || row < 0 || head->cmd == NULL ||
        strcmp(head->cmd->name, client_push_kinds[row].kind) != 0)
        return 0;
    if (head->pushes_left > 0)
        return --head->pushes_left == 0;
    /* UNSUBSCRIBE with no argument: one push per subscription it ends,
     * or one when there was none. */
    mine = (const long long *)((const char *)&c->subs + client_push_kinds[row].count_off);
    return *mine == 0;
}

enum placement_role client_role(const struct request *req)
{
    return placement_role(req->cmd);
}

/* CLIENT REPLY OFF/SKIP: mark REQ, just framed, when sluice drops its
 * reply (Redis still answers each one, so the pairing never depends on
 * it), and use up a SKIP, as Redis does for any command, refused or not.
 * The mode itself changes only when a CLIENT REPLY runs (local.c), never
 * for one that is refused; it runs before anything after it is framed
 * (client_dispatch). */
void client_reply_mark(struct client *c, struct request *req)
{
    if (c->flags & (CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP))
        req->flags |= REQ_NOREPLY;
    c->flags &= ~(unsigned)CLIENT_REPLY_SKIP;
}

/* REQ logs its client in to a Redis that wants a login: until Redis has
 * answered, the client frames nothing more (client_send blocks it), so
 * what follows is judged, as by Redis, logged in or not (Redis's small
 * limits for a client that must log in, sluice's own commands). */
static void client_note_login(struct request *req)
{
    if (auth_redis_login_needed(req->client))
        req->flags |= REQ_LOGIN_WAIT;
}

/* Cluster mode: follow CLIENT TRACKING ON and OFF (REQ) of C. It counts
 * as on from when it is sent (a read pipelined behind it is judged so),
 * until Redis refuses it or OFF (or RESET) ends it. */
void client_note_tracking(struct client *c, struct request *req, int argc,
                                 const struct sv *argv)
{
    if (!cluster_enabled() || client_role(req) != ROLE_CLIENT_IDS || argc < 3 ||
        strcmp(req->cmd->name, "client|tracking") != 0)
        return;
    if (sv_ieq(argv[2], "on")) {
        c->flags |= CLIENT_TRACKING;
        req->flags |= REQ_TRACKING_ON;
    } else if (sv_ieq(argv[2], "off")) {
        req->flags |= REQ_TRACKING_OFF;
    }
}

/* Remember the user or name a HELLO or AUTH sets, to record on success. */
void client_note_session(struct request *req, int argc, const struct sv *argv)
{
    enum placement_role role = client_role(req);

    if (role == ROLE_PAUSE || role == ROLE_UNPAUSE) {
        req->pauses_before = pause_note_request(role == ROLE_PAUSE, argc, argv);
        return;
    }
    if (role == ROLE_AUTH) {
        req->ok_user = argc >= 3 ? strndup(argv[1].ptr, argv[1].len) : strdup("default");
        client_note_login(req);
        return;
    }
    if (role == ROLE_SELECT) {   /* inside MULTI it runs at EXEC: not followed there */
        char text[8];
        if (argc == 2 && argv[1].len > 0 && argv[1].len < sizeof(text) &&
            !(req->client->flags & CLIENT_IN_MULTI)) {
            memcpy(text, argv[1].ptr, argv[1].len);
            text[argv[1].len] = '\0';
            req->ok_db = atoi(text) + 1;
        }
        return;
    }
    if (role != ROLE_HELLO)
        return;
    for (int i = 2; i < argc; i++) {
        if (sv_ieq(argv[i], "auth") && i + 2 < argc) {
            free(req->ok_user);
            req->ok_user = strndup(argv[i + 1].ptr, argv[i + 1].len);
            client_note_login(req);
            i += 2;
        } else if (sv_ieq(argv[i], "setname") && i + 1 < argc) {
            free(req->ok_name);
            req->ok_name = strndup(argv[i + 1].ptr, argv[i + 1].len);
            i += 1;
        }
    }
}

/* The reply to the DISCARD sent for an EXEC that must fail. */
void client_execabort_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = request_hook_client(req, src, len);

    (void)type;
    if (c == NULL)   /* its client has gone */
        return;
    evbuffer_drain(src, len);
    reply_error(req->reply, "-EXECABORT Transaction discarded because of previous errors.");
    client_answer(c, req);
}

/* Follow MULTI ... EXEC/DISCARD/RESET. Redis never saw a command a rule
 * refused inside a transaction, so running the others would break its
 * all-or-nothing promise: as Redis does after a queuing error, that EXEC
 * becomes DISCARD and the client gets EXECABORT. *SRC is set to NULL when
 * REQ's bytes are replaced. */
void client_track_multi(struct client *c, struct request *req, struct evbuffer **src)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    enum placement_role role = client_role(req);
    struct evbuffer *bytes;
    int abort_exec;

    if (role == ROLE_MULTI) {
        if (!(c->flags & CLIENT_IN_MULTI)) {   /* a nested MULTI is an error, no more */
            multi_locals_free(&c->multi);
            c->multi_queued = 0;
            c->multi_slot = CLUSTER_SLOT_NONE;
        }
        c->flags |= CLIENT_IN_MULTI;
        return;
    }
    if (role != ROLE_EXEC && role != ROLE_DISCARD && role != ROLE_RESET)
        return;
    if (c->flags & CLIENT_IN_MULTI)   /* without MULTI, Redis keeps the watched keys */
        c->flags &= ~(unsigned)CLIENT_WATCHING;
    abort_exec = role == ROLE_EXEC && (c->flags & CLIENT_MULTI_DIRTY);
    if (role == ROLE_EXEC && !abort_exec && (c->flags & CLIENT_IN_MULTI))
        multi_hook_exec(&c->multi, req);   /* sluice's own commands run in their slots */
    multi_locals_free(&c->multi);
    c->flags &= ~(unsigned)(CLIENT_IN_MULTI | CLIENT_MULTI_DIRTY);
    if (role == ROLE_RESET) {
        c->flags &= ~(unsigned)CLIENT_MULTI_DEFERRED;
        client_multi_held_free(c);
    }
    /* Streaming unpaired (after UNSUBSCRIBE), no hook would see DISCARD's
     * reply; but the refusal's fence, a command Redis does not know, has
     * flagged the transaction, so Redis answers this EXEC with EXECABORT. */
    if (!abort_exec || (c->flags & CLIENT_PASSTHROUGH))
        return;
    bytes = evbuffer_new();
    evbuffer_add(bytes, discard, sizeof(discard) - 1);
    request_replace_raw(req, bytes, src);
    req->on_reply = client_execabort_reply;
}

/* Free the commands C's deferred MULTI held (client_cluster_hold). */
void client_multi_held_free(struct client *c)
{
    if (c->multi_held != NULL)
        evbuffer_free(c->multi_held);
    free(c->multi_held_lens);
    c->multi_held = NULL;
    c->multi_held_lens = NULL;
    c->multi_held_count = 0;
}

/* Cluster mode: the deferred MULTI goes ahead of the transaction's first
 * command, on the private connection just made for it, and the keyless
 * commands held until then (client_cluster_hold) behind it. */
void client_cluster_start_multi(struct client *c)
{
    static const char multi[] = "*1\r\n$5\r\nMULTI\r\n";
    struct evbuffer *buf;

    if (!(c->flags & CLIENT_MULTI_DEFERRED))
        return;
    c->flags &= ~(unsigned)CLIENT_MULTI_DEFERRED;
    /* Its protocol first: a HELLO behind MULTI would be queued, and its
     * reply would be one more element of EXEC's. */
    backend_use_resp(c->private_conn, c->resp);
    buf = evbuffer_new();
    evbuffer_add(buf, multi, sizeof(multi) - 1);
    backend_send_internal(c->private_conn, buf, NULL, NULL, NULL);
    /* Their +QUEUED went to the client already: Redis's are dropped. */
    for (int i = 0; i < c->multi_held_count; i++) {
        evbuffer_remove_buffer(c->multi_held, buf, c->multi_held_lens[i]);
        backend_send_internal(c->private_conn, buf, NULL, NULL, NULL);
    }
    evbuffer_free(buf);
    client_multi_held_free(c);
}

/* Cluster mode: whether REQ, of a client with a private connection, goes
 * to the shared connections instead: a plain keyed command, or a lock
 * verb's script (LOCAL, lock.c), outside a transaction or pub/sub whose
 * key another node serves. */
int client_cluster_off_session(const struct client *c, const struct request *req)
{
    return cluster_enabled() && (req->place == PLACE_SHARED || req->place == PLACE_LOCAL) &&
           req->slot >= 0 &&
           !(c->flags & (CLIENT_IN_MULTI | CLIENT_PASSTHROUGH)) &&
           router_node_for_request(req, NULL) != backend_conn_node(c->private_conn);
}

/* Whether C's private connection holds state beyond a transaction. */
int client_private_holds_state(const struct client *c)
{
    return (c->flags & (CLIENT_SESSION | CLIENT_WATCHING | CLIENT_PASSTHROUGH)) != 0;
}

/* Whether C's private connection holds no state of its session: it
 * only served blocking commands and transactions that have ended (EXEC
 * and DISCARD end WATCH too), so another connection would do as well. */
int client_private_idle(const struct client *c)
{
    return !client_private_holds_state(c) &&
           (!(c->flags & CLIENT_IN_MULTI) || (c->flags & CLIENT_MULTI_DEFERRED));
}

/* Cluster mode: whether REQ needs C's private connection on another node
 * than the one it is on, while that connection holds no session (it only
 * served blocking commands, a worker's BLPOP on one queue and then on
 * another; or ended transactions, and REQ is the first key of a new one):
 * then the client's private connection moves to REQ's node
 * (client_route), once C has nothing in flight (client_must_wait). */
int client_cluster_moves(const struct client *c, const struct request *req)
{
    if (!cluster_enabled() || c->private_conn == NULL || req->slot < 0 ||
        !client_private_idle(c))
        return 0;
    /* A deferred MULTI goes with the transaction's first key, wherever. */
    if (!(c->flags & CLIENT_MULTI_DEFERRED) &&
        (req->place != PLACE_PRIVATE || (c->flags & CLIENT_IN_MULTI)))
        return 0;
    return router_node_for_request(req, NULL) != backend_conn_node(c->private_conn);
}

/* Whether REQ, sent on its client's private connection, leaves state
 * there that another connection would not have: anything placed there
 * but a blocking command (its connection is as before once answered). */
int client_leaves_session(const struct request *req)
{
    enum placement_role role = client_role(req);

    if (role == ROLE_MULTI || role == ROLE_WATCH)
        return 0;   /* until EXEC or DISCARD: CLIENT_IN_MULTI, CLIENT_WATCHING */
    return req->place == PLACE_PRIVATE && (req->cmd == NULL || !(req->cmd->flags & CMD_BLOCKING));
}

/* Follow WATCH on C's private connection, REQ being sent there: Redis
 * forgets the watched keys at UNWATCH and RESET, and at EXEC and DISCARD
 * that end a MULTI (client_track_multi). */
void client_note_watch(struct client *c, const struct request *req)
{
    enum placement_role role = client_role(req);

    if (role == ROLE_WATCH && !(c->flags & CLIENT_IN_MULTI))
        c->flags |= CLIENT_WATCHING;
    else if (role == ROLE_RESET || (req->cmd != NULL && strcmp(req->cmd->name, "unwatch") == 0))
        c->flags &= ~(unsigned)CLIENT_WATCHING;
}
