/* client.c - the core of a client connection: accepting it, reading,
 * writing replies back in request order under the output limits, fences,
 * tunnels, and closing it. The one place a client connection is closed
 * is client_close(). It knows nothing of commands: framed input goes up
 * through struct client_hooks (client_dispatch.c), which the picture below
 * follows across the layer's files (README "Architecture").
 *
 *   socket (TLS: tls.c) -> input evbuffer -> reqparse -> request -> placement
 *      DEBUG/MODULE LOAD from a client not local -> Redis's "not allowed"
 *      -> auth (users, auth.c): -NOAUTH / -NOPERM in order, nothing sent
 *      cluster (cluster_request.c): slot of the keys, -CROSSSLOT; split commands
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
#include "metrics.h"
#include "learn.h"
#include "multi.h"
#include "netio.h"
#include "pause.h"
#include "placement.h"
#include "reply.h"
#include "respframe.h"
#include "server.h"
#include "slowlog.h"
#include "sockaddr.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"

/* libevent reads 16 KB a callback by default: large values want more. */
#define CLIENT_MAX_SINGLE_READ (256 * 1024)
/* Replies sluice builds itself (REQ_DEFERRED) are built at their turn, and
 * one flush builds no more than this: the rest waits for the client's next
 * write (client_write), so a pipeline of listings cannot hold the loop. */
#define CLIENT_TURN_BUDGET (64 * 1024)

static struct event_base *client_base;
const struct config *client_cfg;
static struct client_list client_all = TAILQ_HEAD_INITIALIZER(client_all);
static struct client_list client_write_list = TAILQ_HEAD_INITIALIZER(client_write_list);
static int client_total;
static uint64_t client_next_id = 1;
static struct reqparse_limits client_limits;
/* sluice_connections_received_total, input_bytes_total, output_bytes_total. */
static uint64_t *client_metric_received, *client_metric_input, *client_metric_output;
static void client_read_cb(evutil_socket_t fd, short what, void *arg);
static void client_write_cb(evutil_socket_t fd, short what, void *arg);
static void client_read_ended(struct client *c, int eof);
static int client_finished(const struct client *c);
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

static struct client_hooks client_hooks;

void client_core_init(struct event_base *base, const struct config *cfg,
                      const struct client_hooks *hooks)
{
    client_base = base;
    client_cfg = cfg;
    client_hooks = *hooks;
    client_limits.max_bulk_len = cfg->proto_max_bulk_len;
    client_limits.max_multibulk_len = cfg->proto_max_multibulk_len;
    client_fence_init();
    placement_init();
    client_metric_received = metrics_counter(METRIC_connections_received_total, NULL, NULL);
    client_metric_input = metrics_counter(METRIC_input_bytes_total, NULL, NULL);
    client_metric_output = metrics_counter(METRIC_output_bytes_total, NULL, NULL);
}

void client_config_changed(void)
{
    /* Every client's parser points at these: the new limits apply to the
     * next request each one frames. */
    client_limits.max_bulk_len = client_cfg->proto_max_bulk_len;
    client_limits.max_multibulk_len = client_cfg->proto_max_multibulk_len;
}

int client_count(void)
{
    return client_total;
}

struct client *client_newest(void)
{
    return TAILQ_LAST(&client_all, client_list);
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
void client_read_on(struct client *c)
{
    if (!c->read_on) {
        c->read_on = 1;
        event_add(c->read_ev, NULL);
        client_tls_more(c);
    }
}

void client_read_off(struct client *c)
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
        (*metrics_counter(METRIC_rejected_connections_total, "maxclients", NULL))++;
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
    (*client_metric_received)++;
    c->input = evbuffer_new();
    c->output = evbuffer_new();
    c->read_ev = event_new(client_base, fd, EV_READ | EV_PERSIST, client_read_cb, c);
    c->write_ev = event_new(client_base, fd, EV_WRITE | EV_PERSIST, client_write_cb, c);
    client_read_on(c);
    client_log_connected(c);
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
int client_fence_back(struct client *c, struct evbuffer *src, size_t len)
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
void client_fences_drop(struct client *c)
{
    struct request *req;

    TAILQ_FOREACH(req, &c->requests, client_link)
        req->flags &= ~(unsigned)REQ_FENCED;
    c->fences = 0;
}

/* Queue REQ for its reply in C's order; while C streams unpaired, that
 * reply is sluice's own and waits for a fence. */
void client_enqueue(struct client *c, struct request *req)
{
    req->flags |= REQ_QUEUED;
    TAILQ_INSERT_TAIL(&c->requests, req, client_link);
    if ((c->flags & CLIENT_PASSTHROUGH) && c->private_conn != NULL)
        client_fence(c, req);
}


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
    client_hooks.closing(c);   /* transaction, locks, a command being learned */
    if (c->write_listed)
        TAILQ_REMOVE(&client_write_list, c, write_link);
    throttle_client_closed(c);
    if (c->waiting_on != NULL)
        backend_unwait(c->waiting_on, c);
    if (c->private_conn != NULL)
        backend_release_private(c->private_conn);
    TAILQ_REMOVE(&client_all, c, link);
    client_total--;
    client_log_closed(c);
    reqparse_free(&c->parser);
    event_free(c->read_ev);
    event_free(c->write_ev);
    evbuffer_free(c->input);
    evbuffer_free(c->output);
    tls_close(c->ssl);
    if (c->flags & CLIENT_DRAINING)
        netio_discard_unread(c->fd);   /* an orderly FIN, not a reset (netio.h) */
    close(c->fd);
    free(c->name);
    free(c->user);
    free(c);
}

void client_kill(struct client *c, struct client *current)
{
    client_close_reason(c, "CLIENT KILL");
    if (c != current) {
        client_close(c);
        return;
    }
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
}

void client_abort(struct client *c)
{
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;   /* nothing more is framed meanwhile */
    client_read_off(c);
    client_close(c);   /* at the end of its callbacks when inside them */
}

void client_enter(struct client *c)
{
    c->busy++;
}

/* Leave a callback; returns -1 when the client was closed meanwhile. */
int client_leave(struct client *c)
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
struct evbuffer *client_output(struct client *c)
{
    /* Like Redis, a reply is activity: C was waiting for it, not idle,
     * and client_cron may run in this pass before it is written. */
    c->last_active_ms = server_pass_now_us() / 1000;
    client_want_write(c);
    return c->output;
}

/* Whether C may be read: not while a backend it sends to is congested,
 * while it is over its limits, or once it is to close. */
int client_readable(const struct client *c)
{
    return !(c->flags & (CLIENT_PAUSED | CLIENT_OVER_LIMIT | CLIENT_CLOSE_AFTER_REPLY |
                         CLIENT_HANDOVER_OUT | CLIENT_HANDOVER_IN)) &&
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
void client_over_limit(struct client *c)
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

int client_check_drained(struct client *c)
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
    if ((c->flags & CLIENT_HANDOVER_IN) && client_hooks.handover_write(c, 0))
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
    (*client_metric_output) += before - evbuffer_get_length(c->output);
    c->bytes_out += before - evbuffer_get_length(c->output);
    if (evbuffer_get_length(c->output) < before)
        c->last_active_ms = server_pass_now_us() / 1000;   /* Redis: a write is activity */
    client_write_event(c, rc == 0 || (rc == 1 && client_turn_waits(c)));
    if (rc == 1 && client_finished(c)) {
        client_close(c);
        return;
    }
    if ((c->flags & CLIENT_HANDOVER_OUT) && client_hooks.handover_write(c, 1))
        return;
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
int client_check_output_limit(struct client *c)
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
    client_close_reason(c, "client_output_buffer_limit");
    client_close(c);
}

/* A client whose replies are all written and who asked to go. */
static int client_finished(const struct client *c)
{
    return (c->flags & CLIENT_CLOSE_AFTER_REPLY) && TAILQ_EMPTY(&c->requests) && c->inflight == 0;
}

/* Whether C is in Redis's subscribed context, where a RESP2 connection
 * may run only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET. */
int client_subscribed_context(const struct client *c)
{
    return (c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR) && c->resp == 2 &&
           (c->subscriptions > 0 || c->shard_subscriptions > 0);
}


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
void client_flush(struct client *c)
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
            reply_mode_ran |= (req->flags & REQ_FRAMES_AFTER) != 0;
            client_hooks.run_deferred(c, req);
            built += client_held_reply_len(req);
        }
        if (!(req->flags & REQ_DONE))
            break;
        TAILQ_REMOVE(&c->requests, req, client_link);
        c->held_reply_bytes -= client_held_reply_len(req);
        client_note_done(c, req);
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
void client_complete(struct client *c, struct request *req)
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
void client_defer(struct client *c, struct request *req)
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
        client_hooks.unstall(c);   /* what waited for the parts goes on */
        client_check_drained(c);
    }
    return client_leave(c);
}

void client_reply_error(struct client *c, struct request *req, const char *text)
{
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    reply_error(req->reply, "%s", text);
    STAT_INC(total_error_replies);
    req->flags |= REQ_FAILED;
    client_complete(c, req);
}

/* REQ (in C's queue) could not be sent: TEXT says why. A rewritten
 * request (LOCK...) hears it through its hook, which answers its client
 * and lets it go on; any other gets the error in reply order. */
void client_fail_send(struct client *c, struct request *req, const char *text)
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
    req->flags |= REQ_FAILED;
    req->on_reply(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
}

/* Answer REQ (framed, not queued) with the error TEXT, in reply order;
 * nothing is sent to Redis. Under CLIENT REPLY OFF/SKIP it gets no reply. */
void client_refuse(struct client *c, struct request *req, const char *text)
{
    if (c->flags & CLIENT_IN_MULTI)
        c->flags |= CLIENT_MULTI_DIRTY;   /* its EXEC must fail: see client_track_multi */
    client_enqueue(c, req);
    client_reply_error(c, req, text);
    client_check_output_limit(c);
}

int client_is_monitor(const struct client *c)
{
    return (c->flags & CLIENT_MONITOR) != 0;
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

/* Tunnels (client_replies.c): C sent SYNC or PSYNC on CONN. */
void client_tunnel_start(struct client *c, struct backend_conn *conn)
{
    c->flags |= CLIENT_TUNNEL;
    backend_set_tunnel(conn);
    log_debug("client %llu: replication tunnel to its private backend connection",
              (unsigned long long)c->id);
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

void client_note_parts(struct client *c, int delta)
{
    c->split_parts += delta;
    if (delta > 0 && c->inflight + c->split_parts + c->deferred >= client_cfg->client_max_inflight)
        client_over_limit(c);
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

/* Answer a protocol error the way Redis does, then close once written. */
void client_protocol_error(struct client *c, const char *msg)
{
    log_info("client %llu (%s): %s", (unsigned long long)c->id, c->addr_text, msg);
    client_close_reason(c, "protocol error");
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

/* A draining C at a request boundary (nothing read is left unframed, or
 * it streams unparsed or has gone): read no more, and close after its
 * last reply (client_write closes it once all is written; scheduled here
 * in case that is already so). Otherwise it is read on (the rest of a
 * request it began) and what it sent is framed and answered; this runs
 * again after each pass over its input. Never closes C itself. */
static void client_drain_check(struct client *c)
{
    if (!(c->flags & CLIENT_DRAINING) || (c->flags & (CLIENT_CLOSE_AFTER_REPLY |
                                                       CLIENT_HANDOVER_OUT)) || c->closing)
        return;
    if (evbuffer_get_length(c->input) > 0 && !(c->flags & CLIENT_TUNNEL) && !c->eof_seen)
        return;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
    client_want_write(c);
}

/* Frame and handle every complete request in the input buffer, until one
 * has to wait or the client is paused or closing. */
void client_process_input(struct client *c)
{
    struct evbuffer *in = c->input;

    if (c->in_input)
        return;
    c->in_input = 1;
    /* No larger bulk than a node's Redis takes: it would close the shared
     * connection the bulk goes on (backend_limits.c). */
    client_limits.max_bulk_len = backend_max_bulk_len(client_cfg->proto_max_bulk_len);
    client_hooks.input(c, in);
    c->in_input = 0;
    client_drain_check(c);
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
    (*client_metric_input) += (uint64_t)n;
    c->bytes_in += (uint64_t)n;
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
    client_close_reason(c, eof ? "closed by the client" : "read error");
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
        client_enter(c);   /* what the tick sends or answers may close C */
        client_hooks.tick(c);
        if (client_leave(c) < 0)
            continue;
        if (c->tls_handshaking && now_ms >= c->tls_deadline_ms) {
            /* Connected, never finished its handshake: it holds a
             * descriptor and memory, so it cannot stay. */
            log_info("client %llu (%s) closed: no TLS handshake within %lld ms",
                     (unsigned long long)c->id, c->addr_text, client_cfg->tls_handshake_timeout_ms);
            STAT_INC(tls_handshake_failures);
            client_close_reason(c, "no TLS handshake in time");
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
            client_close_reason(c, "idle timeout");
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
            continue;
        }
        client_close_reason(c, "its user was removed or disabled by a reload");
        if (c->busy > 0) {
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
        if (c->flags & CLIENT_HANDOVER_OUT)
            continue;   /* the new sluice takes it (client_handover.c) */
        c->flags |= CLIENT_DRAINING;
        client_close_reason(c, "drained (shutdown, hand-over or PROXY DRAIN)");
        client_drain_check(c);
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

void client_release_held(struct client *c, struct request *req, const char *error)
{
    client_hooks.release_held(c, req, error);
}
