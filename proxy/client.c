/* client.c - owns client connections: reading and framing requests,
 * choosing the backend connection for each, and writing replies back in
 * request order. The one place a client connection is closed is
 * client_close().
 *
 *   socket (TLS: tls.c) -> input evbuffer -> reqparse -> request -> placement
 *      DEBUG/MODULE LOAD from a client not local -> Redis's "not allowed"
 *      -> auth (users, auth.c): -NOAUTH / -NOPERM in order, nothing sent
 *      cluster (cluster.c): slot of the keys, -CROSSSLOT; split commands
 *      refused by placement -> error in order (REPLCONF ACK; cluster: SYNC, CLIENT PAUSE)
 *      -> throttle (rules): refused -> -THROTTLED in order; delayed -> held, blocked
 *      LOCAL   -> lock verbs -> EVALSHA of lua/ scripts (lock.c)
 *              -> local (PROXY, CLIENT SETNAME, CLIENT REPLY...) -> reply now
 *      LEARN   -> held until Redis said what the command is (learn.c)
 *      SHARED  -> pool conn per protocol (unless the client has a private one;
 *                 scripts: the script conns, client_shared_conn;
 *                 around a stalled one, or what a CLIENT PAUSE holds (pause.c):
 *                 a one-shot conn, client_detour)
 *      PRIVATE -> the client's own conn;  CONTROL -> a one-shot conn (SCRIPT KILL,
 *                 CLIENT PAUSE/UNPAUSE)
 *      SYNC/PSYNC (REQ_TUNNEL) -> own conn, then a byte tunnel both ways:
 *                 input -> client_tunnel_input, backend bytes -> client_on_tunnel
 *   backend reply -> client_on_reply -> head of queue? write : hold
 *   RESP3 push    -> client_on_push  -> written as it comes (see there)
 *
 *   c->requests:  [r1 sent] [r2 done, held reply] [r3 sent] [r4 deferred] ...
 *                  ^ replies leave from the head only, in order
 *
 * A reply sluice makes itself keeps that order too: one that reads session
 * state or sluice's (CLIENT GETNAME, CLIENT LIST, PROXY INFO) is made when
 * it reaches the head and the client's output is below its limit
 * (REQ_DEFERRED, client_flush), never as framed;
 * on a connection streaming unpaired (pub/sub, MONITOR) it waits for a
 * fence sent behind the client's earlier commands (REQ_FENCED, see
 * client_fence), then runs, refused as Redis refuses it while the client
 * is in the subscribed context (client_note_subscriptions follows the
 * counts Redis's (un)subscribe replies carry). Inside MULTI such commands
 * are queued by Redis too, and multi.c fills their slots of EXEC's reply.
 *
 * Fairness: a client with client_max_inflight requests out, or more than
 * client_max_pending_bytes of replies not yet written to it, is not read
 * until that drains, so one client cannot fill the shared connections.
 */
#include "client.h"

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
#include "lock.h"
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

/* libevent reads 16 KB a callback by default: large values want more. */
#define CLIENT_MAX_SINGLE_READ (256 * 1024)
/* A tunnel's output (an RDB on its way): past HIGH its backend connection
 * is not read, until the client has taken it down to LOW. */
#define CLIENT_TUNNEL_HIGH (4 * 1024 * 1024)
#define CLIENT_TUNNEL_LOW (1024 * 1024)
/* Replies sluice builds itself (REQ_DEFERRED) are built at their turn, and
 * one flush builds no more than this: the rest waits for the client's next
 * write (client_write), so a pipeline of listings cannot hold the loop. */
#define CLIENT_TURN_BUDGET (64 * 1024)

static struct event_base *client_base;
static const struct config *client_cfg;
static struct client_list client_all = TAILQ_HEAD_INITIALIZER(client_all);
static struct client_list client_write_list = TAILQ_HEAD_INITIALIZER(client_write_list);
static int client_total;
static uint64_t client_next_id = 1;
static struct reqparse_limits client_limits;
static void client_read_cb(evutil_socket_t fd, short what, void *arg);
static void client_write_cb(evutil_socket_t fd, short what, void *arg);
static void client_read_ended(struct client *c, int eof);
static void client_process_input(struct client *c);
static int client_finished(const struct client *c);
static void client_process_input_loop(struct client *c, struct evbuffer *in);
static void client_tls_handshake(struct client *c);
static void client_tls_after_read(struct client *c, long n);
static void client_tunnel_drained(struct client *c);

/* What C's TLS session holds, read from the socket but not yet returned
 * (tls_read stopped at its limit), is not seen by the socket's read event:
 * have the read callback run again in the next pass, while C is read
 * (client_read_off's event_del cancels it). */
static inline void client_tls_more(struct client *c)
{
    if (c->ssl != NULL && c->read_on && !c->tls_handshaking && tls_buffered(c->ssl))
        event_active(c->read_ev, EV_READ, 1);
}
static void client_fence_init(void);

void client_module_init(struct event_base *base, const struct config *cfg)
{
    client_base = base;
    client_cfg = cfg;
    client_limits.max_bulk_len = cfg->proto_max_bulk_len;
    client_limits.max_multibulk_len = cfg->proto_max_multibulk_len;
    client_fence_init();
    placement_init();
}

int client_count(void)
{
    return client_total;
}

struct client *client_find(uint64_t id)
{
    struct client *c;

    TAILQ_FOREACH(c, &client_all, link) {
        if (c->id == id && !c->closing)
            return c;
    }
    return NULL;
}

struct client *client_next(struct client *prev)
{
    struct client *c = prev == NULL ? TAILQ_FIRST(&client_all) : TAILQ_NEXT(prev, link);

    while (c != NULL && c->closing)
        c = TAILQ_NEXT(c, link);
    return c;
}

/* Fill C's address texts from C->addr: "ip:port" (IPv6 unbracketed) and
 * "ip", and whether it is a local peer. */
static void client_format_addr(struct client *c)
{
    sockaddr_ip(&c->addr, c->ip_text, sizeof(c->ip_text));
    sockaddr_format(&c->addr, 0, c->addr_text, sizeof(c->addr_text));
    c->local_peer = strcmp(c->ip_text, "127.0.0.1") == 0 || strcmp(c->ip_text, "::1") == 0;
}

/* Start or stop reading C's socket. While it is not read, client_cron
 * still notices when the peer goes (client_probe_closed). */
static void client_read_on(struct client *c)
{
    if (!c->read_on) {
        c->read_on = 1;
        event_add(c->read_ev, NULL);
        client_tls_more(c);
    }
}

static void client_read_off(struct client *c)
{
    if (c->read_on) {
        c->read_on = 0;
        event_del(c->read_ev);
    }
}

void client_accept(int fd, const struct sockaddr *addr, socklen_t addrlen, int tls)
{
    static const char full[] = "-ERR max number of clients reached\r\n";
    struct client *c;
    int one = 1;

    if (client_total >= client_cfg->maxclients) {
        STAT_INC(rejected_connections);
        /* A TLS client could not read a plain error: it is just closed. */
        if (!tls && write(fd, full, sizeof(full) - 1) < 0)
            log_debug("could not tell a client about maxclients: %s", strerror(errno));
        close(fd);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || reqparse_init(&c->parser, &client_limits) != 0 ||
        (tls && (c->ssl = tls_accept_new(fd)) == NULL)) {
        if (c != NULL)
            reqparse_free(&c->parser);
        free(c);
        close(fd);
        return;
    }
    c->tls_handshaking = tls;
    c->tls_deadline_ms = server_now_ms() + (uint64_t)client_cfg->tls_handshake_timeout_ms;
    evutil_make_socket_nonblocking(fd);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    c->id = client_next_id++;
    c->resp = 2;
    auth_client_start(c);
    c->last_active_ms = server_now_ms();
    c->created_ms = c->last_active_ms;
    memcpy(&c->addr, addr, addrlen < sizeof(c->addr) ? addrlen : sizeof(c->addr));
    client_format_addr(c);
    TAILQ_INIT(&c->requests);
    TAILQ_INSERT_TAIL(&client_all, c, link);
    client_total++;
    STAT_INC(total_connections_received);
    c->input = evbuffer_new();
    c->output = evbuffer_new();
    c->read_ev = event_new(client_base, fd, EV_READ | EV_PERSIST, client_read_cb, c);
    c->write_ev = event_new(client_base, fd, EV_WRITE | EV_PERSIST, client_write_cb, c);
    client_read_on(c);
    log_debug("client %llu connected from %s", (unsigned long long)c->id, c->addr_text);
}

/* Fences. In pub/sub and MONITOR a client's replies stream unpaired from
 * its private connection: sluice does not know how many Redis still owes
 * for the commands sent before. A reply sluice writes itself then (CLIENT
 * GETNAME, QUIT's +OK, a refusal) would overtake them. So such a request
 * is queued with REQ_FENCED, and a fence goes down the private connection
 * behind what the client sent before: a command no Redis has, named with
 * a token drawn at start. Redis answers it in order, subscribed or not,
 * and for a MONITOR too, with an error naming it, and shows MONITORs
 * nothing of it (an unknown command is never fed to them). When that
 * error comes back in the stream it is dropped, and the oldest fenced
 * reply leaves in its place. No client can learn the token to make Redis
 * echo it early, and even then only its own order would suffer. */
static char client_fence_token[32];
static char client_fence_cmd[64];
static size_t client_fence_cmd_len;

static void client_fence_init(void)
{
    unsigned long long r = 0;

    if (getentropy(&r, sizeof(r)) != 0)
        r = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    snprintf(client_fence_token, sizeof(client_fence_token), "sluice-fence-%016llx", r);
    client_fence_cmd_len = (size_t)snprintf(client_fence_cmd, sizeof(client_fence_cmd),
                                            "*1\r\n$%zu\r\n%s\r\n", strlen(client_fence_token),
                                            client_fence_token);
}

/* REQ (queued for C, which streams unpaired) gets its fence. When the
 * fence cannot be sent (the connection is down), REQ goes unfenced: the
 * replies it could overtake will not come either. */
static void client_fence(struct client *c, struct request *req)
{
    struct request *fence = request_new();
    char err[256];

    if (fence == NULL || (fence->raw = evbuffer_new()) == NULL) {
        request_free(fence);
        return;
    }
    evbuffer_add(fence->raw, client_fence_cmd, client_fence_cmd_len);
    fence->raw_len = client_fence_cmd_len;
    fence->flags |= REQ_UNPAIRED;   /* backend_send frees it */
    if (backend_send(c->private_conn, fence, NULL, err, sizeof(err)) != 0) {
        request_free(fence);
        return;
    }
    req->flags |= REQ_FENCED;
    c->fences++;
}

/* Whether the LEN bytes at the head of SRC, streamed to C, are the reply
 * to C's oldest fence: then they are drained and the fenced reply may go. */
static int client_fence_back(struct client *c, struct evbuffer *src, size_t len)
{
    char head[160];
    struct request *req;

    if (len >= sizeof(head) || evbuffer_copyout(src, head, len) != (ssize_t)len ||
        head[0] != '-' || memmem(head, len, client_fence_token, strlen(client_fence_token)) == NULL)
        return 0;
    evbuffer_drain(src, len);
    c->fences--;
    TAILQ_FOREACH(req, &c->requests, client_link) {
        if (req->flags & REQ_FENCED) {
            req->flags &= ~(unsigned)REQ_FENCED;
            break;
        }
    }
    return 1;
}

/* C's fences will never come back (its private connection is gone). */
static void client_fences_drop(struct client *c)
{
    struct request *req;

    TAILQ_FOREACH(req, &c->requests, client_link)
        req->flags &= ~(unsigned)REQ_FENCED;
    c->fences = 0;
}

/* Queue REQ for its reply in C's order; while C streams unpaired, that
 * reply is sluice's own and waits for a fence. */
static void client_enqueue(struct client *c, struct request *req)
{
    req->flags |= REQ_QUEUED;
    TAILQ_INSERT_TAIL(&c->requests, req, client_link);
    if ((c->flags & CLIENT_PASSTHROUGH) && c->private_conn != NULL)
        client_fence(c, req);
}

static void client_multi_held_free(struct client *c);

/* The one place a client connection ends. Requests still waiting for a
 * backend reply stay with that backend connection, marked to have their
 * replies swallowed; everything else is freed. Inside the client's own
 * callbacks the close is deferred to their end. */
static void client_close(struct client *c)
{
    struct request *req, *orphan;

    if (c->busy > 0) {
        c->closing = 1;
        return;
    }
    /* A stalled pub/sub request waits in no queue: it is freed here. */
    orphan = c->stalled != NULL && !(c->stalled->flags & REQ_QUEUED) ? c->stalled : NULL;
    while ((req = TAILQ_FIRST(&c->requests)) != NULL) {
        TAILQ_REMOVE(&c->requests, req, client_link);
        if (req->conn != NULL && (req->flags & REQ_PAUSE_HELD)) {
            /* Held by Redis for a pause: as when a client leaves Redis, its
             * command goes with it, and so does the connection it held. */
            req->client = NULL;
            backend_close_orphan(req->conn);
        } else if (req->conn != NULL || (req->flags & REQ_DETACHED)) {
            req->client = NULL;
        } else {
            request_free(req);
        }
    }
    request_free(orphan);
    multi_locals_free(&c->multi);
    client_multi_held_free(c);
    if (c->write_listed)
        TAILQ_REMOVE(&client_write_list, c, write_link);
    lock_client_closed(c);
    throttle_client_closed(c);
    learn_client_closed(c);
    if (c->waiting_on != NULL)
        backend_unwait(c->waiting_on, c);
    if (c->private_conn != NULL)
        backend_release_private(c->private_conn);
    TAILQ_REMOVE(&client_all, c, link);
    client_total--;
    log_debug("client %llu closed", (unsigned long long)c->id);
    reqparse_free(&c->parser);
    event_free(c->read_ev);
    event_free(c->write_ev);
    evbuffer_free(c->input);
    evbuffer_free(c->output);
    tls_close(c->ssl);
    close(c->fd);
    free(c->name);
    free(c->user);
    free(c);
}

void client_kill(struct client *c, struct client *current)
{
    if (c != current) {
        client_close(c);
        return;
    }
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
}

static void client_enter(struct client *c)
{
    c->busy++;
}

/* Leave a callback; returns -1 when the client was closed meanwhile. */
static int client_leave(struct client *c)
{
    if (--c->busy == 0 && c->closing) {
        client_close(c);
        return -1;
    }
    return 0;
}

/* Have C's output written by client_write_now, at the end of this batch. */
static void client_want_write(struct client *c)
{
    if (!c->write_listed && !c->closing) {
        c->write_listed = 1;
        TAILQ_INSERT_TAIL(&client_write_list, c, write_link);
    }
}

/* C's output buffer, for adding to it. Every write to a client goes
 * through here, so whatever is added goes out at the end of the pass. */
static struct evbuffer *client_output(struct client *c)
{
    /* Like Redis, a reply is activity: C was waiting for it, not idle,
     * and client_cron may run in this pass before it is written. */
    c->last_active_ms = server_pass_now_us() / 1000;
    client_want_write(c);
    return c->output;
}

/* Whether C may be read: not while a backend it sends to is congested,
 * while it is over its limits, or once it is to close. */
static int client_readable(const struct client *c)
{
    return !(c->flags & (CLIENT_PAUSED | CLIENT_OVER_LIMIT | CLIENT_CLOSE_AFTER_REPLY)) &&
           !c->closing && !c->eof_seen;
}

static size_t client_pending_bytes(const struct client *c)
{
    return evbuffer_get_length(c->output) + c->held_reply_bytes;
}

/* Stop reading C: it has client_max_inflight requests out or more than
 * client_max_pending_bytes of replies waiting for it. What one client has
 * in flight on a shared connection stays bounded, and so does what Redis
 * buffers for sluice on its behalf. */
static void client_over_limit(struct client *c)
{
    if (c->flags & CLIENT_OVER_LIMIT)
        return;
    c->flags |= CLIENT_OVER_LIMIT;
    client_read_off(c);
}

/* C was over its limits: once it is down to half of both, read it again
 * (half, so that it does not flap at the limit). Returns -1 when C was
 * closed meanwhile. */
static int client_resume_drained(struct client *c)
{
    if (c->inflight + c->split_parts + c->deferred > client_cfg->client_max_inflight / 2 ||
        client_pending_bytes(c) > (size_t)client_cfg->client_max_pending_bytes / 2)
        return 0;
    c->flags &= ~(unsigned)CLIENT_OVER_LIMIT;
    client_enter(c);
    if (client_readable(c))
        client_read_on(c);
    client_process_input(c);
    return client_leave(c);
}

static inline int client_check_drained(struct client *c)
{
    return (c->flags & CLIENT_OVER_LIMIT) ? client_resume_drained(c) : 0;
}

/* Turn C's write event on or off (on while output waits for the socket, or
 * a TLS handshake or read does). */
static void client_write_event(struct client *c, int on)
{
    if (on && !c->write_on) {
        c->write_on = 1;
        event_add(c->write_ev, NULL);
    } else if (!on && c->write_on) {
        c->write_on = 0;
        event_del(c->write_ev);
    }
}

static void client_flush(struct client *c);
static int client_check_output_limit(struct client *c);

/* Whether the head of C's queue is a reply sluice builds itself that may
 * be built now: not fenced, and C's output below client_max_pending_bytes. */
static int client_turn_waits(const struct client *c)
{
    const struct request *req = TAILQ_FIRST(&c->requests);

    return req != NULL && (req->flags & REQ_DEFERRED) && !(req->flags & REQ_FENCED) &&
           evbuffer_get_length(c->output) < (size_t)client_cfg->client_max_pending_bytes;
}

/* C is about to be written: build the replies waiting for their turn at
 * the head of its queue, within client_flush's budget. C is taken off the
 * write list (it is written right after). Returns -1 when C was closed. */
static int client_take_turns(struct client *c)
{
    if (!client_turn_waits(c))
        return 0;
    client_enter(c);
    client_flush(c);
    if (!c->closing)
        client_check_output_limit(c);
    if (c->write_listed) {
        TAILQ_REMOVE(&client_write_list, c, write_link);
        c->write_listed = 0;
    }
    return client_leave(c);
}

/* Write C's output now, after building the replies whose turn it is. What
 * the socket does not take waits for its write event, which is on only
 * while there is such a rest, or more replies wait for their turn (built
 * in the next pass: one budget per client and pass). Closes C on a write
 * error, or when it asked to go and everything is written. */
static void client_write(struct client *c)
{
    size_t before;
    int rc;

    if (client_take_turns(c) < 0)
        return;
    before = evbuffer_get_length(c->output);
    rc = netio_write(c->output, c->fd, c->ssl);

    if (rc < 0) {
        log_debug("client %llu: write: %s", (unsigned long long)c->id, strerror(errno));
        client_close(c);
        return;
    }
    if (rc == 0 && c->ssl != NULL && tls_wants_read(c->ssl)) {
        /* TLS must read before it can write: the read callback writes
         * again (a write event now would fire at once, forever). */
        c->tls_write_wants_read = 1;
        rc = -2;
    }
    if (evbuffer_get_length(c->output) < before)
        c->last_active_ms = server_pass_now_us() / 1000;   /* Redis: a write is activity */
    client_write_event(c, rc == 0 || (rc == 1 && client_turn_waits(c)));
    if (rc == 1 && client_finished(c)) {
        client_close(c);
        return;
    }
    client_tunnel_drained(c);
    client_check_drained(c);
}

void client_write_now(void)
{
    struct client *c;

    while ((c = TAILQ_FIRST(&client_write_list)) != NULL) {
        TAILQ_REMOVE(&client_write_list, c, write_link);
        c->write_listed = 0;
        client_write(c);
    }
}

/* Close C when it is over client_output_buffer_limit, as Redis does with
 * client-output-buffer-limit: a client that does not read cannot make
 * sluice hold its replies without bound. Past client_max_pending_bytes it
 * is no longer read. Returns -1 when closed. */
static int client_check_output_limit(struct client *c)
{
    size_t pending = client_pending_bytes(c);

    if (pending > (size_t)client_cfg->client_max_pending_bytes)
        client_over_limit(c);
    if (client_cfg->client_output_buffer_limit == 0 ||
        pending <= (size_t)client_cfg->client_output_buffer_limit)
        return 0;
    client_output_overflow(c, pending);
    return -1;
}

void client_output_overflow(struct client *c, size_t bytes)
{
    log_notice("client %llu (%s) closed: %zu bytes of replies over client_output_buffer_limit",
               (unsigned long long)c->id, c->addr_text, bytes);
    STAT_INC(output_limit_disconnects);
    client_close(c);
}

/* A client whose replies are all written and who asked to go. */
static int client_finished(const struct client *c)
{
    return (c->flags & CLIENT_CLOSE_AFTER_REPLY) && TAILQ_EMPTY(&c->requests) && c->inflight == 0;
}

/* Whether C is in Redis's subscribed context, where a RESP2 connection
 * may run only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET. */
static int client_subscribed_context(const struct client *c)
{
    return (c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR) && c->resp == 2 &&
           (c->subscriptions > 0 || c->shard_subscriptions > 0);
}

/* REQ, answered by sluice and deferred (REQ_DEFERRED) until every earlier
 * reply was in, is at the head of C's queue: run it now. Its bytes are in
 * req->raw. */
static void client_run_deferred(struct client *c, struct request *req)
{
    struct req_argv views;

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
    else
        local_execute(c, req, req->argc, views.argv, req->reply);
    request_argv_close(&views);
    c->held_reply_bytes += evbuffer_get_length(req->reply);
}

static void client_try_unstall(struct client *c);

/* The length of REQ's complete reply, waiting in REQ. */
static size_t client_held_reply_len(const struct request *req)
{
    if (req->flags & REQ_REPLY_KEPT)
        return req->kept_reply_len;
    return req->reply != NULL ? evbuffer_get_length(req->reply) : 0;
}

/* Write the replies at the head of the queue that are complete. One that
 * sluice builds itself (REQ_DEFERRED) is built here, at its turn, while C's
 * output is below client_max_pending_bytes and this flush has built less
 * than CLIENT_TURN_BUDGET; otherwise it waits for C's next write. */
static void client_flush(struct client *c)
{
    struct request *req;
    int reply_mode_ran = 0;
    size_t built = 0;

    while ((req = TAILQ_FIRST(&c->requests)) != NULL && !(req->flags & REQ_FENCED) &&
           !c->closing) {
        if (req->flags & REQ_DEFERRED) {
            if (built >= CLIENT_TURN_BUDGET ||
                evbuffer_get_length(c->output) >= (size_t)client_cfg->client_max_pending_bytes)
                break;
            reply_mode_ran |= placement_role(req->cmd) == ROLE_CLIENT_REPLY;
            client_run_deferred(c, req);
            built += client_held_reply_len(req);
        }
        if (!(req->flags & REQ_DONE))
            break;
        TAILQ_REMOVE(&c->requests, req, client_link);
        c->held_reply_bytes -= client_held_reply_len(req);
        if (req->flags & REQ_NOREPLY) {
            /* CLIENT REPLY OFF/SKIP: dropped */
        } else if (req->flags & REQ_REPLY_KEPT) {
            evbuffer_add(client_output(c), req->kept, req->kept_reply_len);
        } else if (req->reply != NULL) {
            evbuffer_add_buffer(client_output(c), req->reply);
        }
        request_free(req);
    }
    if (c->closing)
        return;
    if (client_finished(c) && evbuffer_get_length(c->output) == 0)
        client_close(c);
    else if (reply_mode_ran)
        client_unblock(c);   /* blocked by client_dispatch: framing goes on */
}

/* REQ's reply is in its own buffer now: mark it and write what can go. */
static void client_complete(struct client *c, struct request *req)
{
    req->flags |= REQ_DONE;
    c->held_reply_bytes += client_held_reply_len(req);
    client_flush(c);
}

struct evbuffer *client_reply_buffer(struct client *c, struct request *req)
{
    if (req == TAILQ_FIRST(&c->requests) && req->reply == NULL &&
        !(req->flags & (REQ_NOREPLY | REQ_FENCED)))
        return client_output(c);
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    return req->reply;
}

/* REQ waits in C's queue for its turn, for sluice to build its reply
 * (client_flush): its bytes count as a reply waiting, and it counts
 * against client_max_inflight, as a request sent to Redis does. */
static void client_defer(struct client *c, struct request *req)
{
    req->flags |= REQ_DEFERRED;
    c->deferred++;
    c->held_reply_bytes += req->raw_len;
    if (c->inflight + c->split_parts + c->deferred >= client_cfg->client_max_inflight)
        client_over_limit(c);
}

int client_answer_at_turn(struct client *c, struct request *req)
{
    client_enter(c);
    client_defer(c, req);
    client_flush(c);
    if (!c->closing)
        client_check_output_limit(c);
    return client_leave(c);
}

int client_answer(struct client *c, struct request *req)
{
    int split = (req->flags & REQ_SPLIT) != 0;   /* REQ may be freed below */

    client_enter(c);
    if (split) {   /* every part is answered: no longer in flight */
        req->flags &= ~(unsigned)REQ_SPLIT;
        c->inflight--;
    }
    client_complete(c, req);
    if (client_check_output_limit(c) == 0 && split && !c->closing) {
        client_try_unstall(c);   /* what waited for the parts goes on */
        client_check_drained(c);
    }
    return client_leave(c);
}

static void client_reply_error(struct client *c, struct request *req, const char *text)
{
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    reply_error(req->reply, "%s", text);
    STAT_INC(total_error_replies);
    client_complete(c, req);
}

/* REQ (in C's queue) could not be sent: TEXT says why. A rewritten
 * request (LOCK...) hears it through its hook, which answers its client
 * and lets it go on; any other gets the error in reply order. */
static void client_fail_send(struct client *c, struct request *req, const char *text)
{
    struct evbuffer *err;

    if (placement_role(req->cmd) == ROLE_PAUSE)
        pause_note_reply(1, 0, REPLY_ERROR, 0);   /* it never reached Redis */
    if (req->on_reply == NULL) {
        client_reply_error(c, req, text);
        return;
    }
    err = evbuffer_new();
    reply_error(err, "%s", text);
    STAT_INC(total_error_replies);
    req->on_reply(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
}

/* Answer REQ (framed, not queued) with the error TEXT, in reply order;
 * nothing is sent to Redis. Under CLIENT REPLY OFF/SKIP it gets no reply. */
static void client_refuse(struct client *c, struct request *req, const char *text)
{
    if (c->flags & CLIENT_IN_MULTI)
        c->flags |= CLIENT_MULTI_DIRTY;   /* its EXEC must fail: see client_track_multi */
    client_enqueue(c, req);
    client_reply_error(c, req, text);
    client_check_output_limit(c);
}

/* RESET: back to a new connection's name, user and reply mode (the
 * "default" user, logged out where that needs a password). The protocol
 * went back to RESP2 as RESET was sent (client_send): what the client
 * pipelines after it is routed by it. */
static void client_reset_session(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_TRACKING;
    c->db = 0;
    free(c->name);
    c->name = NULL;
    auth_client_start(c);
    c->flags &= ~(unsigned)(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
}

/* Apply what a successful AUTH, HELLO or RESET changed on the session. */
static void client_apply_session(struct client *c, struct request *req, int type)
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

/* REQ, a WAIT marked by client_wait_offset_reply, has its count (LEN
 * bytes at the head of SRC): it gets an error in its place (through
 * client_on_reply). Returns 0 when out of memory: the reply goes as is. */
static int client_wait_blind_reply(struct request *req, struct evbuffer *src, size_t len)
{
    struct evbuffer *err = evbuffer_new();

    if (err == NULL)
        return 0;
    req->flags &= ~(unsigned)REQ_WAIT_BLIND;
    evbuffer_drain(src, len);
    reply_error(err, "sluice could not give WAIT this client's writes: Redis refused its "
                "SPUBLISH to __sluice__:wait (sluice's backend user needs &__sluice__:wait)");
    client_on_reply(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
    return 1;
}

void client_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = req->client;
    /* REQ may be freed below. */
    int reset = (req->flags & (REQ_RESET | REQ_LOGIN_WAIT)) != 0;

    if ((req->flags & REQ_WAIT_BLIND) && type != REPLY_ERROR &&   /* (-BUSY: as it is) */
        client_wait_blind_reply(req, src, len))
        return;
    client_enter(c);
    c->inflight--;
    client_apply_session(c, req, type);
    if (type == REPLY_ERROR)
        STAT_INC(total_error_replies);
    if (req->on_reply != NULL) {
        /* A rewritten request (LOCK...): its hook answers or resends it. */
        req->on_reply(req, src, len, type);
    } else if (req->flags & REQ_NOREPLY) {
        evbuffer_drain(src, len);   /* CLIENT REPLY OFF/SKIP */
        client_complete(c, req);
    } else if (req == TAILQ_FIRST(&c->requests)) {
        /* The common case: nothing earlier is waiting, so the bytes go
         * straight from the backend's buffer to the client's. */
        evbuffer_remove_buffer(src, client_output(c), len);
        TAILQ_REMOVE(&c->requests, req, client_link);
        request_free(req);
        client_flush(c);
    } else if (len <= sizeof(req->kept) && req->reply == NULL) {
        /* A small reply that waits for earlier ones stays in the request:
         * no buffer made and freed (in cluster mode, most of a pipeline's
         * replies come before those of an earlier request to another
         * node). The request's own bytes are not needed again. */
        evbuffer_remove(src, req->kept, len);
        req->flags = (req->flags & ~(unsigned)REQ_KEPT) | REQ_REPLY_KEPT;
        req->kept_reply_len = len;
        client_complete(c, req);
    } else {
        req->reply = evbuffer_new();
        evbuffer_remove_buffer(src, req->reply, len);
        client_complete(c, req);
    }
    if (!c->closing && client_check_output_limit(c) == 0) {
        client_try_unstall(c);
        client_check_drained(c);
    }
    if (reset && !c->closing)
        client_unblock(c);   /* blocked by client_send (RESET, a login): what follows goes on */
    client_leave(c);
}

static int client_is_monitor(const struct client *c)
{
    return (c->flags & CLIENT_MONITOR) != 0;
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
/* Room for the longest kind Redis sends, "tracking-redir-broken". */
#define CLIENT_PUSH_KIND_SIZE 24

/* The kind of the push of LEN bytes at the head of SRC (its first element,
 * ">3\r\n$9\r\nsubscribe\r\n...") into KIND (size CLIENT_PUSH_KIND_SIZE), and
 * its last element when that is an integer (a confirmation's count) into
 * *COUNT (else -1). */
static void client_push_kind(struct evbuffer *src, size_t len, char *kind, long long *count)
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
static int client_is_pubsub_message(struct evbuffer *src, size_t len)
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
static void client_note_subscriptions(struct client *c, struct evbuffer *src, size_t len)
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

void client_on_passthrough(struct client *c, struct evbuffer *src, size_t len)
{
    static const char reset_reply[] = "+RESET\r\n";
    char head[sizeof(reset_reply) - 1];
    int reset = 0;

    client_enter(c);
    if (c->fences > 0 && client_fence_back(c, src, len)) {
        client_flush(c);
        client_leave(c);
        return;
    }
    if (!client_is_monitor(c))
        client_note_subscriptions(c, src, len);
    /* In pub/sub mode only RESET answers with a status: the session is
     * back to normal, and replies pair with requests again. */
    if (len == sizeof(head) && c->private_conn != NULL && !client_is_monitor(c) &&
        c->resets_unanswered > 0 &&
        evbuffer_copyout(src, head, len) == (ssize_t)len && memcmp(head, reset_reply, len) == 0) {
        c->resets_unanswered--;
        c->flags &= ~(unsigned)CLIENT_PASSTHROUGH;
        backend_set_passthrough(c->private_conn, 0);
        backend_after_reset(c->private_conn);   /* RESET logged Redis's connection out */
        reset = 1;
        c->subscriptions = c->shard_subscriptions = 0;
        client_reset_session(c);
        throttle_client_changed(c);
    }
    if ((c->flags & CLIENT_REPLY_OFF) && !client_is_pubsub_message(src, len))
        evbuffer_drain(src, len);   /* messages still go, as from Redis 7.0 */
    else
        evbuffer_remove_buffer(src, client_output(c), len);
    if (client_check_output_limit(c) == 0 && reset)
        client_unblock(c);   /* commands after RESET go on, paired again */
    client_leave(c);
}

/* Count a confirmation of KIND with COUNT into C's subscriptions; returns
 * its row in client_push_kinds, or -1 for any other push. */
static int client_count_push(struct client *c, const char *kind, long long count)
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
static int client_push_ends(struct client *c, struct request *head, int row)
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

/* A RESP3 push goes to the client as it comes. Redis writes replies and
 * pushes of one connection in one order; every reply before this push
 * has been paired already, and the replies still in C's queue come after
 * it, so the push goes straight out (client_flush leaves no complete
 * reply at the head of the queue), ahead of anything still waiting. */
int client_on_push(struct client *c, struct request *head, struct evbuffer *src, size_t len)
{
    char kind[CLIENT_PUSH_KIND_SIZE];
    long long count;
    int row, ends;

    client_enter(c);
    client_push_kind(src, len, kind, &count);
    row = client_count_push(c, kind, count);
    ends = client_push_ends(c, head, row);
    /* Even under CLIENT REPLY OFF: Redis 7.0 still sends RESP3 pushes. */
    clientid_push(c, kind, src, len, client_output(c));
    client_check_output_limit(c);
    client_leave(c);
    return ends;
}

int client_subscribed_resp3(const struct client *c)
{
    const struct request *req;

    if (c->subs.total > 0 || c->subs.shards > 0)
        return 1;
    TAILQ_FOREACH(req, &c->requests, client_link) {
        if (req->flags & REQ_PUSHES)
            return 1;   /* confirmations still to come */
    }
    return 0;
}

/* Tunnels. A client that sent SYNC or PSYNC (REQ_TUNNEL) talks to its
 * private connection unparsed from then on, as a replica talks to its
 * primary: the RDB bulk (no CRLF after it), "\n" keepalives, then the
 * replication stream go to it; what it writes (REPLCONF ACK...) goes to
 * Redis. Either side closing closes the other: the connection's end
 * reaches client_on_private_lost, the client's end client_close. */
static void client_tunnel_start(struct client *c, struct backend_conn *conn)
{
    c->flags |= CLIENT_TUNNEL;
    backend_set_tunnel(conn);
    log_debug("client %llu: replication tunnel to its private backend connection",
              (unsigned long long)c->id);
}

void client_on_tunnel(struct client *c, struct evbuffer *src)
{
    client_enter(c);
    c->flags |= CLIENT_TUNNEL_FED;
    evbuffer_add_buffer(client_output(c), src);
    if (evbuffer_get_length(c->output) > CLIENT_TUNNEL_HIGH && c->private_conn != NULL &&
        !(c->flags & CLIENT_TUNNEL_HELD)) {
        c->flags |= CLIENT_TUNNEL_HELD;
        backend_hold_reading(c->private_conn, 1);
    }
    client_leave(c);
}

/* C's output went out: a held tunnel reads its connection again. */
static void client_tunnel_drained(struct client *c)
{
    if (!(c->flags & CLIENT_TUNNEL_HELD) || evbuffer_get_length(c->output) > CLIENT_TUNNEL_LOW)
        return;
    c->flags &= ~(unsigned)CLIENT_TUNNEL_HELD;
    if (c->private_conn != NULL)
        backend_hold_reading(c->private_conn, 0);
}

/* What C (a tunnel) wrote goes to its connection as it is; while that is
 * congested C is not read (client_resume goes on). */
static void client_tunnel_input(struct client *c, struct evbuffer *in)
{
    struct backend_conn *conn = c->private_conn;

    if (conn == NULL || backend_send_raw(conn, in) != 0) {
        evbuffer_drain(in, evbuffer_get_length(in));   /* it closes: the connection is gone */
        return;
    }
    if (backend_congested(conn) && c->waiting_on == NULL) {
        c->flags |= CLIENT_PAUSED;
        client_read_off(c);
        backend_wait(conn, c);
    }
}

static int client_private_idle(const struct client *c);

void client_on_private_lost(struct client *c)
{
    /* Cluster mode: a private connection that held nothing (blocking
     * commands and transactions that ended) is simply made again when
     * needed; what was in flight on it gets its error or is sent again. */
    if (cluster_enabled() && client_private_idle(c) && !(c->flags & CLIENT_TUNNEL)) {
        if (c->inflight_conn == c->private_conn)
            c->inflight_conn = NULL;
        c->private_conn = NULL;
        return;
    }
    /* Its session (database, transaction, subscriptions) is gone with the
     * connection; carrying on elsewhere would silently change meaning. */
    c->private_conn = NULL;
    c->inflight_conn = NULL;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
    /* A tunnel gets it only before Redis sent anything: past that, an
     * error line would land inside the RDB or the stream. */
    if ((c->flags & CLIENT_PASSTHROUGH) ||
        (c->flags & (CLIENT_TUNNEL | CLIENT_TUNNEL_FED)) == CLIENT_TUNNEL)
        reply_error(client_output(c), "backend connection lost");
    client_fences_drop(c);
    client_flush(c);
}

void client_resume(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_PAUSED;
    client_enter(c);
    if (client_readable(c))
        client_read_on(c);
    client_process_input(c);
    client_leave(c);
}

static enum placement_role client_role(const struct request *req)
{
    return placement_role(req->cmd);
}

/* CLIENT REPLY OFF/SKIP: mark REQ, just framed, when sluice drops its
 * reply (Redis still answers each one, so the pairing never depends on
 * it), and use up a SKIP, as Redis does for any command, refused or not.
 * The mode itself changes only when a CLIENT REPLY runs (local.c), never
 * for one that is refused; it runs before anything after it is framed
 * (client_dispatch). */
static void client_reply_mark(struct client *c, struct request *req)
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
static void client_note_tracking(struct client *c, struct request *req, int argc,
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
static void client_note_session(struct request *req, int argc, const struct sv *argv)
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
static void client_execabort_reply(struct request *req, struct evbuffer *src, size_t len, int type)
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
static void client_track_multi(struct client *c, struct request *req, struct evbuffer **src)
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
static void client_multi_held_free(struct client *c)
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
static void client_cluster_start_multi(struct client *c)
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
static int client_cluster_off_session(const struct client *c, const struct request *req)
{
    return cluster_enabled() && (req->place == PLACE_SHARED || req->place == PLACE_LOCAL) &&
           req->slot >= 0 &&
           !(c->flags & (CLIENT_IN_MULTI | CLIENT_PASSTHROUGH)) &&
           router_node_for_request(req, NULL) != backend_conn_node(c->private_conn);
}

/* Whether C's private connection holds state beyond a transaction. */
static int client_private_holds_state(const struct client *c)
{
    return (c->flags & (CLIENT_SESSION | CLIENT_WATCHING | CLIENT_PASSTHROUGH)) != 0;
}

/* Whether C's private connection holds no state of its session: it
 * only served blocking commands and transactions that have ended (EXEC
 * and DISCARD end WATCH too), so another connection would do as well. */
static int client_private_idle(const struct client *c)
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
static int client_cluster_moves(const struct client *c, const struct request *req)
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
static int client_leaves_session(const struct request *req)
{
    enum placement_role role = client_role(req);

    if (role == ROLE_MULTI || role == ROLE_WATCH)
        return 0;   /* until EXEC or DISCARD: CLIENT_IN_MULTI, CLIENT_WATCHING */
    return req->place == PLACE_PRIVATE && (req->cmd == NULL || !(req->cmd->flags & CMD_BLOCKING));
}

/* Follow WATCH on C's private connection, REQ being sent there: Redis
 * forgets the watched keys at UNWATCH and RESET, and at EXEC and DISCARD
 * that end a MULTI (client_track_multi). */
static void client_note_watch(struct client *c, const struct request *req)
{
    enum placement_role role = client_role(req);

    if (role == ROLE_WATCH && !(c->flags & CLIENT_IN_MULTI))
        c->flags |= CLIENT_WATCHING;
    else if (role == ROLE_RESET || (req->cmd != NULL && strcmp(req->cmd->name, "unwatch") == 0))
        c->flags &= ~(unsigned)CLIENT_WATCHING;
}

static struct backend_conn *client_conn_class(struct backend_conn *conn);

/* CONN, the shared connection REQ of C would go on, unless it is stalled
 * (a long script or slow command holds it: backend_stalled) and C has
 * nothing out on it to keep order with. Then REQ goes on a one-shot
 * connection (NULL, PLACE_CONTROL) to the same node (client_send; its
 * redirections are followed, cluster.c), where Redis answers it as it answers
 * any other connection meanwhile: -BUSY during a script, or at once
 * after it; queued behind the script it would wait for it to end. */
static struct backend_conn *client_detour(struct client *c, struct request *req,
                                          struct backend_conn *conn)
{
    static uint64_t logged_ms;
    uint64_t now_ms;

    /* A LOCAL request here is a lock verb's script (lock.c): a write. */
    if ((req->place == PLACE_SHARED || req->place == PLACE_LOCAL) && !cluster_enabled() &&
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

/* The shared connection REQ of C goes to: its node's, for C's protocol.
 * A script or function goes on the script connections, where a long one
 * holds no other command behind it: those reach Redis and get its -BUSY,
 * as on any other connection. C's next command that is not a script waits
 * for the script's reply (client_must_wait), so C's own order holds. */
static struct backend_conn *client_shared_conn(const struct client *c, const struct request *req)
{
    struct backend_node *node = router_node_for_request(req, NULL);

    if (client_role(req) == ROLE_SCRIPT)
        return backend_script_conn(node, c->id, c->resp);
    return backend_pool_conn(node, c->id, c->resp);
}

/* The backend connection REQ goes to: a shared one, or the client's
 * private one once it has one. NULL for a one-shot connection (made as
 * REQ is sent), and when a private connection is needed but
 * backend_max_connections are open already. */
static struct backend_conn *client_route(struct client *c, struct request *req)
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

/* Stand for "the shared connections" and "the script connections" in
 * c->inflight_conn: in cluster mode a client's requests may be out on the
 * shared (or the script) connections of several nodes at once (replies
 * wait in c->requests for their turn); a client switching between scripts
 * and other commands waits, since one node's two kinds of connection keep
 * no order between them. */
static char client_shared_marker, client_scripts_marker;
#define CLIENT_SHARED_CONNS ((struct backend_conn *)(void *)&client_shared_marker)
#define CLIENT_SCRIPT_CONNS ((struct backend_conn *)(void *)&client_scripts_marker)

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
static int client_must_wait(const struct client *c, const struct request *req,
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
static int client_split_must_wait(const struct client *c)
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

void client_note_parts(struct client *c, int delta)
{
    c->split_parts += delta;
    if (delta > 0 && c->inflight + c->split_parts + c->deferred >= client_cfg->client_max_inflight)
        client_over_limit(c);
}

/* Cluster mode: REQ could not be sent on CONN, a shared connection whose
 * node is down: cluster.c sends it again once the map names a reachable
 * owner (within cluster_retry_window). It counts as in flight meanwhile.
 * Returns 1 when taken (its bytes moved from SRC into req->raw). */
static int client_cluster_retry(struct client *c, struct request *req, struct backend_conn *conn,
                                struct evbuffer *src, const char *err)
{
    if (!cluster_enabled() || !backend_conn_is_shared(conn))
        return 0;
    if (src != NULL && request_take_raw(req, src) != 0)
        return 0;   /* nothing moved: the caller drains SRC */
    if (!cluster_take_unsent(req)) {
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
static void client_wait_offset_reply(struct request *req, struct evbuffer *src, size_t len,
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
static void client_send(struct client *c, struct request *req, struct backend_conn *conn,
                        struct evbuffer *src)
{
    char err[512];
    int unpaired, tunnel = (req->flags & REQ_TUNNEL) != 0;

    if (conn == NULL && req->place == PLACE_CONTROL) {
        /* In cluster mode, a detour goes to its key's node (the stalled
         * connection's): router_node_for_request, as for the shared one. */
        conn = backend_control_conn(router_node_for_request(req, NULL));
        if (conn != NULL)
            backend_use_resp(conn, c->resp);   /* its reply in the client's protocol */
    }
    if (conn == NULL) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (!(req->flags & REQ_QUEUED))
            client_enqueue(c, req);   /* SYNC, SUBSCRIBE (client_dispatch): the error pairs */
        client_fail_send(c, req, "max number of backend connections reached "
                                 "(backend_max_connections)");
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
    if (((req->flags & REQ_RESET) && !client_is_monitor(c)) ||
        ((req->flags & REQ_LOGIN_WAIT) && !unpaired))
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

static void client_try_unstall(struct client *c)
{
    struct request *req = c->stalled;
    struct backend_conn *conn;

    if (req == NULL)
        return;
    if (cluster_enabled() && cluster_split_wants(req->cmd, req->slot)) {
        if (client_split_must_wait(c))
            return;
        c->stalled = NULL;
        client_split_held(c, req);
        client_process_input(c);
        return;
    }
    conn = client_route(c, req);
    if (client_must_wait(c, req, conn))
        return;
    c->stalled = NULL;
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

void client_block(struct client *c)
{
    c->flags |= CLIENT_BLOCKED;
}

void client_unblock(struct client *c)
{
    if (!(c->flags & CLIENT_BLOCKED))
        return;
    c->flags &= ~(unsigned)CLIENT_BLOCKED;
    if (c->in_input)
        return;   /* the loop that is reading goes on by itself */
    client_enter(c);
    client_process_input(c);
    client_leave(c);
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
static int client_cluster_hold(struct client *c, struct request *req, struct evbuffer *src)
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
static int client_split(struct client *c, struct request *req, const struct sv *argv,
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

/* Run REQ, with its arguments ARGV: answer it here, rewrite it (LOCK
 * verbs) or forward it. Its bytes are in SRC (the input buffer) or, when
 * SRC is NULL, in req->raw. Returns -1 when reading must stop (it waits,
 * the client is blocked or paused, or closing). */
static int client_dispatch(struct client *c, struct request *req, const struct sv *argv,
                           struct evbuffer *src)
{
    struct backend_conn *conn;
    int was_in_multi;

    if (req->place == PLACE_LEARN) {
        struct placement place = client_place(req, argv);   /* released after learning */
        if (req->place != PLACE_LEARN && client_refused_after_learning(c, req, argv, src, place))
            return c->closing ? -1 : 0;
    }
    if (req->place == PLACE_LEARN)
        return client_learn(c, req, argv, src);
    if (req->place == PLACE_LOCAL && lock_wants(req, req->argc, argv)) {
        size_t original_len = req->raw_len;   /* the rewrite replaces raw_len */
        client_enqueue(c, req);
        lock_handle(c, req, req->argc, argv);
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
         ((c->flags & CLIENT_PASSTHROUGH) && local_subscribed_refuses(req, req->argc, argv)))) {
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
        /* What follows a CLIENT REPLY is framed under the mode it leaves:
         * nothing is, until it has run (client_flush unblocks). */
        if (client_role(req) == ROLE_CLIENT_REPLY)
            client_block(c);
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
    client_note_tracking(c, req, req->argc, argv);   /* ARGV: not after clientid_translate */
    if (client_role(req) == ROLE_CLIENT_IDS &&
        clientid_translate(c, req, argv, &src) == CLIENTID_HELD)
        return -1;   /* released once Redis said its ids (client_release_held) */
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
    conn = client_route(c, req);
    if (client_must_wait(c, req, conn)) {
        if (src != NULL)
            request_take_raw(req, src);
        c->stalled = req;
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

/* Handle one framed request. Its bytes are in REQ->raw (inline commands)
 * or the first raw_len bytes of IN. Returns -1 when input processing must
 * stop (the request waits, or the client is closing). */
static int client_handle(struct client *c, struct request *req, struct evbuffer *in)
{
    struct evbuffer *src = req->raw != NULL ? NULL : in;
    struct throttle_decision decision;
    struct placement place;
    struct req_argv views;
    char denied[400];
    const struct sv *argv;
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
    req->cmd = commands_resolve(req->argc, argv);
    c->last_cmd = req->cmd;
    STAT_INC(total_requests);
    if (req->cmd != NULL)
        stats_count_command(req->cmd->id);
    else
        stats_count_unknown();
    client_reply_mark(c, req);
    place = client_place(req, argv);
    /* Redis's order: protected commands, then login and permissions;
     * sluice's own refusals only for those who may run the command. */
    if ((req->flags & REQ_PROTECTED) && !c->local_peer) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse_protected(c, req);
        rc = c->closing ? -1 : 0;
    } else if (c->auth_checks && auth_admit(c, req->cmd, req->argc, argv, denied,
                                            sizeof(denied)) != 0) {
        /* Nothing reaches Redis, and no rule takes a token. */
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse(c, req, denied);
        rc = c->closing ? -1 : 0;
    } else if (client_cluster_check(c, req, argv, src, place)) {
        rc = c->closing ? -1 : 0;
    } else if (place.kind == PLACE_REFUSED) {
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse_placed(c, req, place.why);
        rc = c->closing ? -1 : 0;
    } else switch (throttle_admit(c, req, argv, &decision)) {
    case THROTTLE_PASS:
        rc = client_dispatch(c, req, argv, src);
        break;
    case THROTTLE_REJECT:
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        client_refuse(c, req, decision.error);
        rc = c->closing ? -1 : 0;
        break;
    case THROTTLE_HOLD:
    default:
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
    client_refuse(c, req, denied);
    return 1;
}

void client_release_held(struct client *c, struct request *req, const char *error)
{
    struct req_argv views;

    client_enter(c);
    c->flags &= ~(unsigned)CLIENT_BLOCKED;
    if (error != NULL) {
        client_refuse(c, req, error);
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

/* Answer a protocol error the way Redis does, then close once written. */
static void client_protocol_error(struct client *c, const char *msg)
{
    log_info("client %llu (%s): %s", (unsigned long long)c->id, c->addr_text, msg);
    STAT_INC(protocol_errors);
    STAT_INC(total_error_replies);
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
    if (TAILQ_EMPTY(&c->requests) && !(c->flags & CLIENT_PASSTHROUGH)) {
        reply_error(client_output(c), "%s", msg);
        return;
    }
    /* Earlier replies are pending (or, streaming unpaired, may be): the
     * error takes its place after them. */
    struct request *req = request_new();
    if (req == NULL)
        return;
    req->client = c;
    client_enqueue(c, req);
    client_reply_error(c, req, msg);
}

/* Frame and handle every complete request in the input buffer, until one
 * has to wait or the client is paused or closing. */
static void client_process_input(struct client *c)
{
    struct evbuffer *in = c->input;

    if (c->in_input)
        return;
    c->in_input = 1;
    client_process_input_loop(c, in);
    c->in_input = 0;
}

static void client_process_input_loop(struct client *c, struct evbuffer *in)
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

/* A client that is held (learning, a rule's delay) or whose request
 * waits is still read, but nothing is framed: like Redis, whatever its
 * state, it may not buffer more than client_query_buffer_limit. */
static void client_check_query_limit(struct client *c)
{
    if (evbuffer_get_length(c->input) <= (size_t)client_cfg->client_query_buffer_limit ||
        (c->flags & CLIENT_CLOSE_AFTER_REPLY) || c->closing)
        return;
    STAT_INC(query_limit_disconnects);
    client_protocol_error(c, "Protocol error: client_query_buffer_limit exceeded");
}

/* C's socket is readable: read what is there, then frame and handle it.
 * End of file and errors: client_read_ended. */
static void client_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    long n;

    (void)what;
    if (c->tls_handshaking) {
        client_tls_handshake(c);
        return;
    }
    n = netio_read(c->input, fd, c->ssl, CLIENT_MAX_SINGLE_READ);
    if (c->ssl != NULL)
        client_tls_after_read(c, n);
    if (n == -2)
        return;
    if (n <= 0) {
        if (n < 0)
            log_debug("client %llu: read: %s", (unsigned long long)c->id, strerror(errno));
        client_read_ended(c, n == 0);
        return;
    }
    c->last_active_ms = server_pass_now_us() / 1000;
    client_enter(c);
    client_process_input(c);
    client_check_query_limit(c);
    client_tls_more(c);
    client_leave(c);
}

/* C's socket takes data again after it was full (or TLS waited for it:
 * the handshake, or a read). */
static void client_write_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;

    (void)what;
    if (c->tls_handshaking) {
        client_tls_handshake(c);
        return;
    }
    if (c->tls_read_wants_write) {
        c->tls_read_wants_write = 0;
        client_enter(c);
        client_read_cb(fd, EV_READ, c);
        if (client_leave(c) < 0)
            return;
    }
    client_write(c);
}

/* Go on with C's TLS handshake; once done, read what came with it. A
 * failed handshake (plaintext sent to a TLS port, a certificate refused)
 * closes C. */
static void client_tls_handshake(struct client *c)
{
    int want_write = 0;
    int rc = tls_handshake(c->ssl, &want_write);

    if (rc < 0) {
        log_debug("client %llu (%s): TLS handshake failed", (unsigned long long)c->id,
                  c->addr_text);
        client_close(c);
        return;
    }
    client_write_event(c, rc == 0 && want_write);
    if (rc == 0)
        return;
    c->tls_handshaking = 0;
    c->last_active_ms = server_now_ms();
    client_read_cb(c->fd, EV_READ, c);
}

/* After a TLS read (N as netio_read returned): a read that waits for the
 * socket to be writable gets the write event; a write that waited for a
 * read goes again. */
static void client_tls_after_read(struct client *c, long n)
{
    if (n == -2 && tls_wants_write(c->ssl)) {
        c->tls_read_wants_write = 1;
        client_write_event(c, 1);
    }
    if (c->tls_write_wants_read && n != -2) {
        c->tls_write_wants_read = 0;
        client_want_write(c);
    }
}

/* Whether a request of C is one Redis holds for a CLIENT PAUSE. */
static int client_pause_held(const struct client *c)
{
    const struct request *req;

    if (!pause_active())
        return 0;
    TAILQ_FOREACH(req, &c->requests, client_link) {
        if (req->flags & REQ_PAUSE_HELD)
            return 1;
    }
    return 0;
}

/* Reading C's socket met end of file (EOF set) or an error. */
static void client_read_ended(struct client *c, int eof)
{
    c->eof_seen = 1;
    if (eof && c->private_conn == NULL && (!TAILQ_EMPTY(&c->requests) || c->inflight > 0) &&
        !client_pause_held(c)) {
        /* Half-closed after sending (`printf 'PING\r\n' | nc`): answer what
         * it asked, then close. A client with a session may be blocked
         * (BLPOP...), or one held by a pause, and goes at once, as it would
         * from Redis. */
        c->flags |= CLIENT_CLOSE_AFTER_REPLY;
        client_read_off(c);
        return;
    }
    client_close(c);
}

int client_pending_total(void)
{
    struct client *c;
    int total = 0;

    TAILQ_FOREACH(c, &client_all, link)
        total += c->inflight + (c->stalled != NULL);
    return total;
}

/* Whether the peer of C, whose socket sluice is not reading (its limits,
 * a congested backend, a protocol error), has gone: end of file with
 * nothing left unread, or a reset. Then it is handled as if read, and 1
 * is returned (C may be freed). */
static int client_probe_closed(struct client *c)
{
    char byte;
    ssize_t n;

    if (c->read_on || c->eof_seen || c->closing)
        return 0;
    n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
        return 0;
    log_debug("client %llu went while not read", (unsigned long long)c->id);
    if (n < 0 || (c->flags & CLIENT_CLOSE_AFTER_REPLY)) {
        client_close(c);   /* nothing can be written to it, or it was to go anyway */
        return 1;
    }
    client_read_ended(c, 1);   /* may close C */
    return 1;
}

void client_cron(uint64_t now_ms)
{
    struct client *c, *next;
    uint64_t idle_ms = (uint64_t)client_cfg->timeout_s * 1000;

    for (c = TAILQ_FIRST(&client_all); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->tls_handshaking && now_ms >= c->tls_deadline_ms) {
            /* Connected, never finished its handshake: it holds a
             * descriptor and memory, so it cannot stay. */
            log_info("client %llu (%s) closed: no TLS handshake within %lld ms",
                     (unsigned long long)c->id, c->addr_text, client_cfg->tls_handshake_timeout_ms);
            STAT_INC(tls_handshake_failures);
            client_close(c);
            continue;
        }
        if (client_probe_closed(c) || idle_ms == 0)
            continue;
        /* Like Redis: blocked and subscribed clients are not idle. */
        if (!TAILQ_EMPTY(&c->requests) || c->inflight > 0 ||
            (c->flags & (CLIENT_PASSTHROUGH | CLIENT_TUNNEL)) ||
            c->subs.total > 0 || c->subs.shards > 0)
            continue;
        if (now_ms - c->last_active_ms > idle_ms) {
            log_info("client %llu (%s) closed after %llds idle", (unsigned long long)c->id,
                     c->addr_text, (long long)client_cfg->timeout_s);
            STAT_INC(idle_timeouts);
            client_close(c);
        }
    }
}

struct backend_conn *client_private_now(struct client *c)
{
    if (!c->closing)
        c->flags |= CLIENT_SESSION;   /* Redis sends the invalidations there */
    if (c->private_conn != NULL || c->closing)
        return c->private_conn;
    c->private_conn = backend_private_conn(backend_default_node(), c);
    if (c->private_conn != NULL) {
        backend_use_resp(c->private_conn, c->resp);
        log_debug("client %llu now has a private backend connection (a tracking redirect "
                  "names it)", (unsigned long long)c->id);
    }
    return c->private_conn;
}

void client_users_changed(void)
{
    struct client *c, *next;

    for (c = TAILQ_FIRST(&client_all); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (auth_rebind(c) == 0) {
            throttle_client_changed(c);
        } else if (c->busy > 0) {
            /* The client that sent PROXY RELOAD: it gets its reply first. */
            c->flags |= CLIENT_CLOSE_AFTER_REPLY;
            client_read_off(c);
        } else {
            client_close(c);
        }
    }
}

void client_shutdown_all(void)
{
    struct client *c, *next;

    for (c = TAILQ_FIRST(&client_all); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        c->flags |= CLIENT_CLOSE_AFTER_REPLY;
        client_read_off(c);
        if (TAILQ_EMPTY(&c->requests) && c->inflight == 0)
            client_close(c);
    }
}

void client_free_all(void)
{
    struct client *c;

    while ((c = TAILQ_FIRST(&client_all)) != NULL) {
        c->busy = 0;
        client_close(c);
    }
}
