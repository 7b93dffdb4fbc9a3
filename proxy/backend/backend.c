/* backend.c - owns connections to Redis: connecting with backoff, sending
 * requests, framing replies and pairing them with requests in FIFO order.
 * It never writes to a client itself; it hands replies to backend_deliver,
 * and reaches the client code only through the backend_client_ops main.c
 * registers.
 *
 *   client A --req a1--\                     +------------------+
 *   client B --req b1---+--> pool conn ----> | redis-server     |
 *   client A --req a2--/   inflight: a1 b1 a2 +------------------+
 *                           replies pop the head of inflight, in order
 *
 *   client C (MULTI/SUBSCRIBE/BLPOP/...) --> private conn (owner C)
 *   SCRIPT KILL, FUNCTION KILL, SHUTDOWN  --> one-shot conn, freed after its reply
 *   client D (SYNC/PSYNC) --> private conn, then a tunnel: bytes pass unframed
 *
 * A connection speaks one protocol at a time. The pool is kept per
 * protocol (RESP3 connections, made when a RESP3 client first needs one,
 * send HELLO 3 first), so a reply always has the shape its client asked
 * for; a private connection follows its client's HELLO (backend_use_resp).
 * A RESP3 push (pub/sub message, invalidation) is no reply: it goes to the
 * private connection's owner as it comes, and pairs with nothing, unless
 * the owner says it was the last one a request of its was waiting for.
 *
 * Every connection of a node is in node->conns, so that sluice knows its
 * own connections' Redis client ids and addresses (CLIENT KILL must not
 * reach them) and can cap how many it opens. Standalone mode has one node;
 * in cluster mode cluster.c adds a node per primary it learns of
 * (backend_node_get), and sees error replies first (backend_set_reply_filter)
 * to follow redirections: requests then keep their bytes until answered.
 * Which pool connection a client takes, private and one-shot connections
 * and their spares, and the connections' Redis ids are in
 * backend_extra.c, which calls this file (never the other way round).
 */
#include "backend.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "netio.h"
#include "reply.h"
#include "request.h"
#include "resolve.h"
#include "respframe.h"
#include "scripts.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "tls.h"
#include "value.h"

#include "backend_int.h"

const char *const backend_state_names[] = {"connecting", "up", "down"};

static struct backend_conn_list backend_write_list = TAILQ_HEAD_INITIALIZER(backend_write_list);

struct event_base *backend_base;
const struct config *backend_cfg;
struct backend_node_list backend_nodes = TAILQ_HEAD_INITIALIZER(backend_nodes);
int backend_cluster_mode;
int backend_keep_bytes;
/* Cluster mode: sees error replies before they are delivered. */
static backend_reply_filter_fn *backend_reply_filter;
static backend_reply_note_fn *backend_reply_note;
static void (*backend_node_up_hook)(struct backend_node *node);
static struct backend_client_ops backend_client;   /* from backend_set_client_ops */

void backend_connect(struct backend_conn *conn);
void backend_conn_down(struct backend_conn *conn, const char *why);
static void backend_want_write(struct backend_conn *conn);
static void backend_read_cb(struct bufferevent *bev, void *arg);
void backend_close_if_retired(struct backend_conn *conn);
void backend_spares_refill(struct backend_node *node);

/* Set NODE's name from HOSTPORT, and its address when the host is an IP
 * address. A host name is looked up later, off the loop, when a
 * connection needs it (backend_node_lookup): nothing here blocks. Returns
 * 0, or -1 with ERR set when HOSTPORT is not "host:port". */
static int backend_node_address(struct backend_node *node, const char *hostport, char *err,
                                size_t errlen)
{
    int rc = sockaddr_resolve(hostport, SOCKADDR_NUMERIC, "backend", &node->addr,
                              &node->addrlen, err, errlen);

    if (rc < 0 || value_hostport(hostport, node->host, sizeof(node->host), &node->port, err,
                                 errlen) != 0)
        return -1;
    node->host_is_name = rc == 1;
    if (node->host_is_name)
        node->addrlen = 0;
    snprintf(node->name, sizeof(node->name), "%s", hostport);
    return 0;
}

struct backend_conn *backend_conn_new(struct backend_node *node, struct client *owner)
{
    struct backend_conn *conn = calloc(1, sizeof(*conn));

    if (conn == NULL)
        return NULL;
    conn->node = node;
    conn->owner = owner;
    conn->resp = 2;
    conn->backoff_ms = BACKEND_BACKOFF_MIN_MS;
    conn->staged = evbuffer_new();
    if (conn->staged == NULL) {
        free(conn);
        return NULL;
    }
    TAILQ_INIT(&conn->inflight);
    TAILQ_INIT(&conn->waiters);
    TAILQ_INSERT_TAIL(&node->conns, conn, node_link);
    return conn;
}

/* A new node for HOSTPORT with its pool connecting (a host name's after
 * its lookup), at the end of the node list. NULL with ERR set when
 * HOSTPORT is not "host:port" (or OOM). */
/* NODE's metric series (made again when a node that was forgotten,
 * backend_forget_departed, comes back: its counters start again at 0, a
 * reset Prometheus's rate() takes in its stride). */
void backend_node_metrics(struct backend_node *node)
{
    static const char *const kinds[BACKEND_ERROR_KINDS] = {
        [BACKEND_ERROR_CONNECT] = "connect", [BACKEND_ERROR_CLOSED] = "closed",
        [BACKEND_ERROR_TIMEOUT] = "timeout", [BACKEND_ERROR_AUTH] = "auth",
        [BACKEND_ERROR_PROTOCOL] = "protocol"};

    node->metric_requests = metrics_counter(METRIC_backend_requests_total, node->name, NULL);
    node->metric_duration = metrics_hist(METRIC_backend_request_duration_seconds, node->name, NULL);
    for (int k = 0; k < BACKEND_ERROR_KINDS; k++)
        node->metric_errors[k] = metrics_counter(METRIC_backend_errors_total, node->name, kinds[k]);
}

struct backend_node *backend_node_new(const char *hostport, char *err, size_t errlen)
{
    struct backend_node *node = calloc(1, sizeof(*node));

    if (node == NULL || backend_node_address(node, hostport, err, errlen) != 0) {
        free(node);
        return NULL;
    }
    TAILQ_INIT(&node->conns);
    backend_node_metrics(node);
    node->pool_size = (int)backend_cfg->backend_connections;
    for (int k = 0; k < BACKEND_POOL_KINDS; k++)
        node->pools[k] = calloc((size_t)node->pool_size, sizeof(*node->pools[k]));
    TAILQ_INSERT_TAIL(&backend_nodes, node, link);
    for (int i = 0; i < node->pool_size; i++) {
        node->pools[BACKEND_POOL_RESP2][i] = backend_conn_new(node, NULL);
        backend_connect(node->pools[BACKEND_POOL_RESP2][i]);
    }
    backend_spares_refill(node);
    return node;
}



void backend_set_reply_filter(backend_reply_filter_fn *fn)
{
    backend_reply_filter = fn;
}

void backend_set_reply_note(backend_reply_note_fn *fn)
{
    backend_reply_note = fn;
}



/* The reply to a request sluice sent on its own behalf (AUTH, SCRIPT
 * LOAD): only an error is worth a word. */
static void backend_internal_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct backend_conn *conn = req->ctx;

    if (type == REPLY_ERROR) {
        char text[200] = {0};
        evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
        text[strcspn(text, "\r\n")] = '\0';
        if (conn->auth_failed)   /* what follows a refused login: that is logged already */
            log_debug("backend %s refused sluice's own request: %s", conn->node->name, text);
        else
            log_warning("backend %s refused sluice's own request: %s", conn->node->name, text);
    }
    evbuffer_drain(src, len);
    request_free(req);
}

/* The reply to the prelude's CLIENT ID: which Redis client this
 * connection is (PROXY INFO shows it). */
static void backend_client_id_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct backend_conn *conn = req->ctx;
    char text[32] = {0};

    if (type == REPLY_INTEGER && len < sizeof(text)) {
        evbuffer_copyout(src, text, len);
        conn->redis_id = strtoll(text + 1, NULL, 10);
    }
    if (type == REPLY_INTEGER || type == REPLY_ERROR) {
        evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
        conn->node->wants_auth = strncmp(text, "-NOAUTH", 7) == 0;
    }
    evbuffer_drain(src, len);
    request_free(req);
}

/* Copy into OUT the bulk string value after the bulk string KEY in the
 * reply TEXT (a HELLO reply, RESP2 array or RESP3 map). */
static void backend_hello_field(const char *text, const char *key, char *out, size_t size)
{
    char pattern[32];
    const char *p;
    long len;
    char *end;

    snprintf(pattern, sizeof(pattern), "$%zu\r\n%s\r\n$", strlen(key), key);
    p = strstr(text, pattern);
    if (p == NULL)
        return;
    len = strtol(p + strlen(pattern), &end, 10);
    if (len <= 0 || (size_t)len >= size || strncmp(end, "\r\n", 2) != 0 ||
        strlen(end + 2) < (size_t)len)
        return;
    memcpy(out, end + 2, (size_t)len);
    out[len] = '\0';
}

/* The reply to the prelude's HELLO: Redis's version, mode and role. */
static void backend_hello_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct backend_conn *conn = req->ctx;
    char text[2048];
    size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;

    if (type != REPLY_ERROR) {
        evbuffer_copyout(src, text, n);
        text[n] = '\0';
        backend_hello_field(text, "version", conn->node->redis_version,
                            sizeof(conn->node->redis_version));
        backend_hello_field(text, "mode", conn->node->redis_mode, sizeof(conn->node->redis_mode));
        backend_hello_field(text, "role", conn->node->redis_role, sizeof(conn->node->redis_role));
    }
    evbuffer_drain(src, len);
    request_free(req);
}


int backend_send_internal(struct backend_conn *conn, struct evbuffer *bytes,
                          request_reply_fn *on_reply, void *ctx,
                          void (*ctx_free)(struct request *req))
{
    struct request *req;
    char err[64];

    req = request_new();
    if (req == NULL)
        return -1;
    req->raw = evbuffer_new();
    req->raw_len = evbuffer_get_length(bytes);
    evbuffer_add_buffer(req->raw, bytes);
    req->on_reply = on_reply != NULL ? on_reply : backend_internal_reply;
    req->ctx = on_reply != NULL ? ctx : conn;
    req->ctx_free = ctx_free;
    if (backend_send(conn, req, NULL, err, sizeof(err)) != 0) {
        request_free(req);
        return -1;
    }
    return 0;
}

/* The first line of the reply of LEN bytes at the head of SRC, into TEXT
 * (SIZE bytes, cut to fit); the reply is drained and REQ, sluice's own
 * request, freed. */
static void backend_take_reply_line(struct request *req, struct evbuffer *src, size_t len,
                                    char *text, size_t size)
{
    memset(text, 0, size);
    evbuffer_copyout(src, text, len < size - 1 ? len : size - 1);
    text[strcspn(text, "\r\n")] = '\0';
    evbuffer_drain(src, len);
    request_free(req);
}

/* The reply to sluice's own AUTH (backend_password): a refusal marks
 * CONN auth_failed (PROXY INFO, backend_up, /readyz) and is logged with
 * Redis's words once per node until a login succeeds again, not on every
 * reconnect. */
static void backend_auth_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct backend_conn *conn = req->ctx;
    char text[200] = {0};

    backend_take_reply_line(req, src, len, text, sizeof(text));
    if (type != REPLY_ERROR) {
        conn->auth_failed = 0;
        conn->node->auth_refusal_logged = 0;
        return;
    }
    conn->auth_failed = 1;
    BACKEND_COUNT_ERROR(conn->node, BACKEND_ERROR_AUTH);
    if (!conn->node->auth_refusal_logged)
        backend_log_refusal(conn, " refused sluice's login: ", text + (text[0] == '-'));
    conn->node->auth_refusal_logged = 1;
}

void backend_reauth(struct backend_conn *conn)
{
    const struct config *cfg = backend_cfg;
    struct evbuffer *buf;

    if (cfg->backend_password == NULL)
        return;
    buf = evbuffer_new();
    if (cfg->backend_user != NULL)
        evbuffer_add_printf(buf, "*3\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n",
                            strlen(cfg->backend_user), cfg->backend_user);
    else
        evbuffer_add_printf(buf, "*2\r\n$4\r\nAUTH\r\n");
    evbuffer_add_printf(buf, "$%zu\r\n%s\r\n", strlen(cfg->backend_password),
                        cfg->backend_password);
    backend_send_internal(conn, buf, backend_auth_reply, conn, NULL);
    evbuffer_free(buf);
}

/* Ask CONN to speak RESP (2 or 3) with HELLO; its reply is sluice's. */
static void backend_send_hello(struct backend_conn *conn, int resp)
{
    static const char hello2[] = "*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n";
    static const char hello3[] = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";
    struct evbuffer *buf = evbuffer_new();

    if (resp == 3)
        evbuffer_add(buf, hello3, sizeof(hello3) - 1);
    else
        evbuffer_add(buf, hello2, sizeof(hello2) - 1);
    backend_send_internal(conn, buf, NULL, NULL, NULL);
    evbuffer_free(buf);
}

void backend_use_resp(struct backend_conn *conn, int resp)
{
    /* RESP2 pub/sub takes no HELLO (Redis refuses it there), and its
     * reply would stream to the client unpaired. */
    if (conn->resp == resp || conn->passthrough)
        return;
    backend_send_hello(conn, resp);
    conn->resp = resp;
}

void backend_set_node_up_hook(void (*fn)(struct backend_node *node))
{
    backend_node_up_hook = fn;
}

/* The reply to the AUTH of a connection logged in as a user of its own:
 * until it is +OK nothing else was sent (a script must never run as the
 * user a connection has before, sluice's or Redis's default). A refusal
 * takes the connection down with Redis's reason, which its requests get;
 * it connects again later. */
static void backend_login_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct backend_conn *conn = req->ctx;
    char text[200] = {0}, why[400];

    backend_take_reply_line(req, src, len, text, sizeof(text));
    if (type != REPLY_ERROR) {
        conn->login_wait = 0;
        conn->login_refused = 0;
        backend_want_write(conn);
        return;
    }
    snprintf(why, sizeof(why), "Redis refused to log a script connection in as %s: %s",
             conn->login->user, text + (text[0] == '-'));
    if (!conn->login_refused)   /* not again on every retry */
        backend_log_refusal(conn, ": ", why);
    conn->login_refused = 1;
    backend_conn_down(conn, why);
}

/* Send AUTH as CONN's own user, ahead of anything staged, and hold the
 * rest until it is accepted (backend_login_reply). */
static void backend_login_first(struct backend_conn *conn)
{
    struct evbuffer *buf = evbuffer_new();

    evbuffer_add_printf(buf, "*3\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                        strlen(conn->login->user), conn->login->user,
                        strlen(conn->login->password), conn->login->password);
    backend_send_internal(conn, buf, backend_login_reply, conn, NULL);
    evbuffer_free(buf);
    if (conn->bev != NULL)
        evbuffer_add_buffer(netio_output(conn->bev, &conn->write_off), conn->staged);
    conn->login_wait = 1;
}

/* Cluster mode: CONN, to a replica reads go to, says READONLY (Redis
 * Cluster's replicas otherwise redirect every read to the primary). */
void backend_send_readonly(struct backend_conn *conn)
{
    static const char readonly[] = "*1\r\n$8\r\nREADONLY\r\n";
    struct evbuffer *buf = evbuffer_new();

    if (buf == NULL)
        return;
    evbuffer_add(buf, readonly, sizeof(readonly) - 1);
    backend_send_internal(conn, buf, NULL, NULL, NULL);
    evbuffer_free(buf);
}

/* A new connection first authenticates (when configured). A RESP3 pool
 * or script connection then asks for RESP3. A pool one also learns its
 * Redis client id (PROXY INFO shows it) and what Redis says of itself
 * (sluice's HELLO repeats it), and loads sluice's scripts, so EVALSHA
 * rarely meets NOSCRIPT (the script cache is Redis's, not the
 * connection's). A script, private or one-shot one does
 * nothing more: its client's first command should not wait behind
 * sluice's (a blocking XREADGROUP overtaken by another client's DEL), be
 * seen first by MONITOR, or meet -BUSY while a script runs. */
static void backend_send_prelude(struct backend_conn *conn)
{
    static const char client_id[] = "*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n";
    static const char hello[] = "*1\r\n$5\r\nHELLO\r\n";
    struct evbuffer *buf;

    if (conn->login != NULL) {
        backend_login_first(conn);
        if (conn->resp == 3)
            backend_send_hello(conn, 3);
        return;
    }
    backend_reauth(conn);
    if (conn->node->readonly && conn->owner == NULL && !conn->spare)
        backend_send_readonly(conn);
    /* A private connection asks for its client's protocol just before
     * the client's first command (backend_use_resp): whatever sluice
     * sends first, that it must, or the replies would have the wrong
     * shape (and RESP3 pushes could not be told from replies). */
    if (conn->oneshot || conn->owner != NULL || conn->spare)
        return;
    if (conn->resp == 3)
        backend_send_hello(conn, 3);
    /* A script connection is made when a client's first script comes, a
     * MONITOR may be running: it carries clients' scripts only, nothing of
     * sluice's, and shows nothing of its own. */
    if (conn->scripts)
        return;
    buf = evbuffer_new();
    evbuffer_add(buf, client_id, sizeof(client_id) - 1);
    backend_send_internal(conn, buf, backend_client_id_reply, conn, NULL);
    evbuffer_add(buf, hello, sizeof(hello) - 1);
    backend_send_internal(conn, buf, backend_hello_reply, conn, NULL);
    for (int i = 0; i < scripts_count(); i++) {
        scripts_write_load(buf, scripts_by_index(i));
        backend_send_internal(conn, buf, NULL, NULL, NULL);
    }
    evbuffer_free(buf);
}

/* CONN is going down: flag REQ_UNWRITTEN on its in-flight requests whose
 * bytes, all or some, are still in sluice's buffers (staged, or in the
 * bufferevent's output): Redis has not read them whole, so it cannot have
 * run them, and they may be sent again. The others were written and may
 * have run. Requests are staged in the order they are in flight, so the
 * unwritten ones are the last. A private connection too (a BLPOP whose
 * connect was refused ran nothing, and is not told it may have), but not
 * a tunnel or one streaming pub/sub: their staged bytes (raw, unpaired)
 * belong to no request in flight. */
static void backend_mark_unwritten(struct backend_conn *conn)
{
    struct request *req;
    size_t unsent;

    if (conn->spare || conn->tunnel || conn->passthrough)
        return;
    unsent = evbuffer_get_length(conn->staged);
    if (conn->bev != NULL)
        unsent += evbuffer_get_length(bufferevent_get_output(conn->bev));
    TAILQ_FOREACH_REVERSE(req, &conn->inflight, request_queue, conn_link) {
        if (unsent == 0)
            break;
        req->flags |= REQ_UNWRITTEN;
        unsent = unsent > req->raw_len ? unsent - req->raw_len : 0;
    }
}

/* Fail every in-flight request of CONN with the error TEXT; one Redis
 * may have run is told so. The connection's own prelude goes quietly:
 * the failure is logged once, by backend_conn_down. */
static void backend_fail_inflight(struct backend_conn *conn, const char *text)
{
    struct request *req;
    struct evbuffer *err = evbuffer_new();

    while ((req = TAILQ_FIRST(&conn->inflight)) != NULL) {
        TAILQ_REMOVE(&conn->inflight, req, conn_link);
        conn->inflight_count--;
        req->conn = NULL;
        if (req->on_reply == backend_internal_reply || req->on_reply == backend_client_id_reply ||
            req->on_reply == backend_hello_reply) {
            request_free(req);
            continue;
        }
        reply_error(err, "%s%s", text,
                    (req->flags & REQ_UNWRITTEN) ? "" : "; the command may or may not have run");
        if (backend_reply_filter == NULL || !backend_conn_is_shared(conn) ||
            !backend_reply_filter(conn, req, err, evbuffer_get_length(err), 1))
            backend_deliver(req, err, evbuffer_get_length(err), REPLY_ERROR);
        evbuffer_drain(err, evbuffer_get_length(err));
    }
    evbuffer_free(err);
}

static void backend_conn_reset_io(struct backend_conn *conn)
{
    if (conn->bev != NULL)
        bufferevent_free(conn->bev);
    conn->bev = NULL;
    /* Staged bytes belong to requests that fail with this connection. */
    evbuffer_drain(conn->staged, evbuffer_get_length(conn->staged));
    conn->write_off = 0;   /* a new bufferevent starts with writing on */
    conn->awaiting_addr = 0;
    respframe_release(&conn->frame);   /* a reply cut off mid-way may hold levels */
    respframe_init(&conn->frame);
    conn->hold_until = 0;
}

void backend_conn_free(struct backend_conn *conn)
{
    struct request *req;

    TAILQ_REMOVE(&conn->node->conns, conn, node_link);
    backend_conn_reset_io(conn);
    if (conn->write_listed)
        TAILQ_REMOVE(&backend_write_list, conn, write_link);
    while ((req = TAILQ_FIRST(&conn->inflight)) != NULL) {
        TAILQ_REMOVE(&conn->inflight, req, conn_link);
        request_free(req);
    }
    if (conn->retry != NULL)
        event_free(conn->retry);
    evbuffer_free(conn->staged);
    free(conn);
}

static void backend_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct backend_conn *conn = arg;

    (void)fd;
    (void)what;
    if (conn->state == BACKEND_DOWN && (conn->owner != NULL || conn->oneshot))
        backend_conn_down(conn, conn->error);   /* a failure backend_fail_soon deferred */
    else if (!conn->node->retired)
        backend_connect(conn);
}

/* CONN could not even start connecting. Its owner may not know it yet
 * (backend_private_conn has not returned), so the failure is handled from
 * the loop, at once; meanwhile requests to it fail with WHY. */
static void backend_fail_soon(struct backend_conn *conn, const char *why)
{
    struct timeval now = {0, 0};

    if (conn->owner == NULL && !conn->oneshot) {
        backend_conn_down(conn, why);
        return;
    }
    conn->state = BACKEND_DOWN;
    snprintf(conn->error, sizeof(conn->error), "%s", why);
    if (conn->retry == NULL)
        conn->retry = evtimer_new(backend_base, backend_retry_cb, conn);
    evtimer_add(conn->retry, &now);
}

void backend_set_client_ops(const struct backend_client_ops *ops)
{
    backend_client = *ops;
}

static void backend_wake_waiters(struct backend_conn *conn)
{
    struct client *c;

    while ((c = TAILQ_FIRST(&conn->waiters)) != NULL) {
        TAILQ_REMOVE(&conn->waiters, c, wait_link);
        c->waiting_on = NULL;
        backend_client.resume(c);
    }
}

/* Free CONN (private or one-shot) now, or once its read callback, which
 * is running, returns. */
void backend_conn_release(struct backend_conn *conn)
{
    struct client *c;

    conn->owner = NULL;
    while ((c = TAILQ_FIRST(&conn->waiters)) != NULL) {
        TAILQ_REMOVE(&conn->waiters, c, wait_link);
        c->waiting_on = NULL;
    }
    if (conn->released)
        return;
    if (conn->spare) {
        conn->node->spare_count--;
    } else {
        conn->node->private_count--;
        backend_spares_refill(conn->node);   /* room again under backend_max_connections */
    }
    conn->released = 1;
    if (!conn->busy)
        backend_conn_free(conn);
}

/* When CONN, a shared connection just down, tries again: soon after a
 * refusal (backend_event_cb), else on the backoff, which then doubles. */
static void backend_retry_later(struct backend_conn *conn)
{
    int delay_ms = conn->refused ? BACKEND_REFUSED_RETRY_MS : conn->backoff_ms;
    struct timeval tv = {delay_ms / 1000, (delay_ms % 1000) * 1000};

    if (conn->retry == NULL)
        conn->retry = evtimer_new(backend_base, backend_retry_cb, conn);
    evtimer_add(conn->retry, &tv);
    if (!conn->refused)
        conn->backoff_ms = conn->backoff_ms * 2 > BACKEND_BACKOFF_MAX_MS
                               ? BACKEND_BACKOFF_MAX_MS : conn->backoff_ms * 2;
    conn->refused = 0;
}

/* The one place a backend connection goes down. Pending requests get an
 * error reply; a pool connection reconnects with backoff; a private one is
 * freed and its client told; a one-shot one is freed. */
void backend_conn_down(struct backend_conn *conn, const char *why)
{
    struct client *owner = conn->owner;

    snprintf(conn->error, sizeof(conn->error), "backend unavailable: %s (%s)", conn->node->name,
             why);
    if (conn->node->retired && owner == NULL && !conn->oneshot && !conn->spare)
        log_info("backend %s connection closed: %s", conn->node->name, why);
    else if (owner == NULL && !conn->oneshot && !conn->spare)
        backend_log_down(conn, why);
    else
        log_debug("backend %s connection down: %s", conn->node->name, why);
    conn->state = BACKEND_DOWN;
    backend_mark_unwritten(conn);
    backend_conn_reset_io(conn);
    /* Failing a request may close its client, which releases its private
     * connection, CONN itself: CONN stays allocated until this is done. */
    conn->busy++;
    backend_fail_inflight(conn, conn->error);
    backend_wake_waiters(conn);
    conn->busy--;
    if (conn->released) {   /* its owner went meanwhile: nobody to tell */
        if (!conn->busy)
            backend_conn_free(conn);
        return;
    }
    owner = conn->owner;
    if (owner != NULL || conn->oneshot) {
        backend_conn_release(conn);
        if (owner != NULL)
            backend_client.on_private_lost(owner);
        return;
    }
    if (conn->node->retired) {
        /* Out of the map: it connects again only if the node comes back. */
        if (conn->retry != NULL)
            evtimer_del(conn->retry);
        if (conn->write_listed) {
            TAILQ_REMOVE(&backend_write_list, conn, write_link);
            conn->write_listed = 0;
        }
        return;
    }
    if (conn->login != NULL && conn->login->gone)
        return;   /* nobody's scripts come to it again */
    backend_retry_later(conn);
}

/* Remember the address Redis sees for CONN ("ip:port" or "[ip6]:port", as
 * CLIENT LIST's addr shows it and CLIENT KILL ADDR must name it); "" when
 * the socket has none. */
static void backend_note_local_addr(struct backend_conn *conn, int fd)
{
    if (sockaddr_format_local(fd, SOCKADDR_BRACKET_IP6, conn->local_addr,
                              sizeof(conn->local_addr)) != 0)
        conn->local_addr[0] = '\0';
}

static void backend_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct backend_conn *conn = arg;
    int fd = bufferevent_getfd(bev);
    int one = 1;

    if (what & BEV_EVENT_CONNECTED) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        backend_note_local_addr(conn, fd);
        if (conn->owner == NULL && !conn->oneshot && !conn->spare)
            log_notice("backend %s connected", conn->node->name);
        conn->state = BACKEND_UP;
        conn->last_reply_us = server_pass_now_us();   /* what was staged starts now */
        conn->backoff_ms = BACKEND_BACKOFF_MIN_MS;
        conn->refused = conn->refused_in_row = 0;
        STAT_INC(backend_connects);
        if (conn == conn->node->pools[BACKEND_POOL_RESP2][0] && backend_node_up_hook != NULL)
            backend_node_up_hook(conn->node);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        BACKEND_COUNT_ERROR(conn->node, BACKEND_ERROR_CLOSED);
        backend_conn_down(conn, "connection closed by server");
    } else if (what & BEV_EVENT_ERROR) {
        char why[300] = "";
        int timed_out = EVUTIL_SOCKET_ERROR() == ETIMEDOUT;
        BACKEND_COUNT_ERROR(conn->node, timed_out ? BACKEND_ERROR_TIMEOUT
                                        : conn->state == BACKEND_CONNECTING ? BACKEND_ERROR_CONNECT
                                                                            : BACKEND_ERROR_CLOSED);
        if (conn->state == BACKEND_CONNECTING) {
            STAT_INC(backend_connect_failures);
            /* Refused: the host answers, Redis is not listening yet (a
             * restart): it is tried again soon, not on the backoff. */
            conn->refused = EVUTIL_SOCKET_ERROR() == ECONNREFUSED;
            conn->refused_in_row += conn->refused;
            /* The name may point elsewhere by now: look it up again. */
            if (conn->node->host_is_name && conn->node->lookup == NULL)
                conn->node->addrlen = 0;
        }
        if (backend_cfg->backend_tls)
            tls_bev_error(bev, why, sizeof(why));
        backend_conn_down(conn, why[0] != '\0' ? why : strerror(EVUTIL_SOCKET_ERROR()));
    }
}

static void backend_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    backend_wake_waiters(arg);
}

/* Start CONN's socket connecting to its node's address. Returns 0, or
 * -1 when it could not even start (then handled as backend_fail_soon). */
static int backend_socket_connect(struct backend_conn *conn)
{
    struct backend_node *node = conn->node;

    if (bufferevent_socket_connect(conn->bev, (struct sockaddr *)&node->addr,
                                   (int)node->addrlen) == 0)
        return 0;
    STAT_INC(backend_connect_failures);
    BACKEND_COUNT_ERROR(node, BACKEND_ERROR_CONNECT);
    backend_fail_soon(conn, strerror(errno));
    return -1;
}

/* The first of NODE's connections waiting for its address, or NULL. */
static struct backend_conn *backend_first_awaiting(struct backend_node *node)
{
    struct backend_conn *conn;

    TAILQ_FOREACH(conn, &node->conns, node_link) {
        if (conn->awaiting_addr)
            return conn;
    }
    return NULL;
}

/* NODE's host name lookup answered: SA, or ERR ("cannot resolve host
 * NAME: reason"). Its waiting connections connect now, or fail as a
 * connect fails (logged, retried with backoff, looked up again). Going
 * down may release other connections of the list: look again from the
 * start each time. */
static void backend_lookup_done(void *arg, const struct sockaddr *sa, socklen_t len,
                                const char *err)
{
    struct backend_node *node = arg;
    struct backend_conn *conn;

    node->lookup = NULL;
    if (sa != NULL) {
        memcpy(&node->addr, sa, len);
        node->addrlen = len;
    } else if (backend_first_awaiting(node) == NULL) {
        /* Its connections closed meanwhile (the node left the slot map):
         * no connect failure will say it, so this does. */
        log_notice("backend %s: %s; no connection waits for it now", node->name, err);
    }
    while ((conn = backend_first_awaiting(node)) != NULL) {
        conn->awaiting_addr = 0;
        if (sa != NULL) {
            backend_socket_connect(conn);
        } else {
            STAT_INC(backend_connect_failures);
            BACKEND_COUNT_ERROR(node, BACKEND_ERROR_CONNECT);
            backend_conn_down(conn, err);
        }
    }
}

/* Look NODE's host name up, unless a lookup is in flight already. Returns
 * 0, or -1 when it cannot start. */
static int backend_node_lookup(struct backend_node *node)
{
    if (node->lookup != NULL)
        return 0;
    log_info("backend %s: looking up host %s", node->name, node->host);
    node->lookup = resolve_start(node->host, node->port, backend_lookup_done, node);
    return node->lookup != NULL ? 0 : -1;
}

void backend_connect(struct backend_conn *conn)
{
    struct backend_node *node = conn->node;

    backend_conn_reset_io(conn);
    conn->state = BACKEND_CONNECTING;
    conn->auth_failed = 0;
    conn->bev = backend_cfg->backend_tls ? tls_backend_bev(backend_base)
                                         : bufferevent_socket_new(backend_base, -1,
                                                                  BEV_OPT_CLOSE_ON_FREE);
    conn->redis_id = 0;
    if (conn->bev == NULL) {
        backend_fail_soon(conn, "out of memory");
        return;
    }
    bufferevent_setcb(conn->bev, backend_read_cb, backend_write_cb, backend_event_cb, conn);
    bufferevent_set_max_single_read(conn->bev, BACKEND_MAX_SINGLE_READ);
    bufferevent_setwatermark(conn->bev, EV_WRITE, BACKEND_LOW_WATER, 0);
    bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
    if (node->addrlen == 0) {
        /* A host name: CONN stays connecting, with its bufferevent taking
         * requests, until the lookup answers (backend_lookup_done). */
        if (backend_node_lookup(node) != 0) {
            STAT_INC(backend_connect_failures);
            BACKEND_COUNT_ERROR(node, BACKEND_ERROR_CONNECT);
            backend_fail_soon(conn, "cannot start a DNS lookup (out of memory)");
            return;
        }
        conn->awaiting_addr = 1;
    } else if (backend_socket_connect(conn) != 0) {
        return;
    }
    backend_send_prelude(conn);
}

/* Spares. A client's first command that needs a private connection (a
 * blocking XREADGROUP, SELECT) would otherwise wait for a connect round
 * trip, while a later command of another client on a shared connection
 * overtakes it. So each node keeps backend_spare_connections private
 * connections connected and authenticated, owned by nobody, and refills
 * them from the loop as they are taken. A spare sends nothing but AUTH:
 * MONITOR never shows it, and a taken spare's first command is its
 * client's. A spare that goes down reconnects like a pool connection. */
static void backend_spares_cb(evutil_socket_t fd, short what, void *arg)
{
    struct backend_node *node = arg;
    struct backend_conn *conn;

    (void)fd;
    (void)what;
    while (!node->retired && node->spare_count < backend_cfg->backend_spare_connections &&
           node->private_count + node->spare_count < backend_cfg->backend_max_connections) {
        conn = backend_conn_new(node, NULL);
        if (conn == NULL)
            return;
        conn->spare = 1;
        node->spare_count++;
        backend_connect(conn);
    }
}

/* Refill NODE's spares from the loop, not inside a caller's callback. */
void backend_spares_refill(struct backend_node *node)
{
    struct timeval now = {0, 0};

    if (backend_cfg->backend_spare_connections == 0)
        return;
    if (node->spare_ev == NULL)
        node->spare_ev = evtimer_new(backend_base, backend_spares_cb, node);
    if (node->spare_ev != NULL)
        evtimer_add(node->spare_ev, &now);
}








static void backend_want_write(struct backend_conn *conn)
{
    if (!conn->write_listed) {
        conn->write_listed = 1;
        TAILQ_INSERT_TAIL(&backend_write_list, conn, write_link);
    }
}

void backend_write_now(void)
{
    struct backend_conn *conn;

    while ((conn = TAILQ_FIRST(&backend_write_list)) != NULL) {
        TAILQ_REMOVE(&backend_write_list, conn, write_link);
        conn->write_listed = 0;
        if (conn->bev == NULL || conn->login_wait)
            continue;   /* backend_login_reply lists it again */
        evbuffer_add_buffer(netio_output(conn->bev, &conn->write_off), conn->staged);
        /* Still connecting: the bufferevent writes once it is connected.
         * With TLS, the OpenSSL bufferevent encrypts and writes itself. */
        if (conn->state == BACKEND_UP && !backend_cfg->backend_tls &&
            netio_write_now(conn->bev, &conn->write_off))
            backend_wake_waiters(conn);
    }
}

/* Move or copy REQ's bytes (from SRC, or those REQ holds when SRC is NULL)
 * to OUT. In cluster mode a paired request keeps a copy, so that a
 * redirection can send it again. */
static void backend_stage(struct evbuffer *out, struct request *req, struct evbuffer *src)
{
    if (!backend_keep_bytes || (req->flags & REQ_UNPAIRED)) {
        if (src != NULL)
            evbuffer_remove_buffer(src, out, req->raw_len);
        else
            evbuffer_add_buffer(out, req->raw);
        return;
    }
    if (src != NULL)
        request_move_kept(req, src, out);
    else
        request_copy_bytes(req, out);
}

int backend_send(struct backend_conn *conn, struct request *req, struct evbuffer *src,
                 char *err, size_t errlen)
{
    /* users_in_redis: the last word on every path that picks a connection:
     * a request of a user's Redis user never runs as anybody else. */
    if (req->login != NULL && conn->login != req->login) {
        snprintf(err, errlen, BACKEND_ERR_WRONG_LOGIN, req->login->user);
        return -1;
    }
    if (conn->state == BACKEND_DOWN || conn->bev == NULL) {
        snprintf(err, errlen, "%s", conn->error[0] ? conn->error : "backend unavailable");
        return -1;
    }
    backend_want_write(conn);
    backend_stage(conn->staged, req, src);
    if (req->flags & REQ_UNPAIRED) {
        request_free(req);
        return 0;
    }
    req->conn = conn;
    /* Written at the end of this loop pass, timed from the pass's clock;
     * one staged while connecting would time the connect too: not timed. */
    req->sent_us = conn->state == BACKEND_UP ? server_pass_now_us() : 0;
    if (conn->inflight_count == 0)
        conn->progress_ms = server_pass_now_us() / 1000;   /* an idle one starts now */
    TAILQ_INSERT_TAIL(&conn->inflight, req, conn_link);
    conn->inflight_count++;
    STAT_INC(total_forwarded);
    (*conn->node->metric_requests)++;
    return 0;
}

int backend_send_raw(struct backend_conn *conn, struct evbuffer *src)
{
    if (conn->state == BACKEND_DOWN || conn->bev == NULL)
        return -1;
    backend_want_write(conn);
    evbuffer_add_buffer(conn->staged, src);
    return 0;
}

void backend_deliver(struct request *req, struct evbuffer *src, size_t len, int type)
{
    if (req->client != NULL) {
        backend_client.on_reply(req, src, len, type);
        return;
    }
    if (req->on_reply != NULL) {
        req->on_reply(req, src, len, type);
        return;
    }
    STAT_INC(swallowed_replies);
    evbuffer_drain(src, len);
    request_free(req);
}

/* REQ's service time (the cost rules charge it): Redis starts on it once
 * it is sent and has answered what came before it on CONN (or CONN came
 * up, for one staged while it connected); the time before is queueing
 * behind others, not its cost. Ends when its reply is read. */
static void backend_note_service(struct backend_conn *conn, struct request *req)
{
    uint64_t now = server_pass_now_us();
    uint64_t start = req->sent_us > conn->last_reply_us ? req->sent_us : conn->last_reply_us;

    if (start != 0 && now > start)
        req->service_us += now - start;
    conn->last_reply_us = now;
}

/* Take REQ, at the head of CONN's in-flight queue, off it: its reply is
 * complete. */
static void backend_pop(struct backend_conn *conn, struct request *req)
{
    TAILQ_REMOVE(&conn->inflight, req, conn_link);
    conn->inflight_count--;
    req->conn = NULL;
    conn->progress_ms = server_pass_now_us() / 1000;
    backend_note_service(conn, req);
    if (req->sent_us != 0) {
        /* Sent again (a redirection, a rewrite): its time in Redis adds up
         * for the slow log; each send is one backend request observed. */
        uint64_t now = server_pass_now_us();
        uint64_t took = now > req->sent_us ? now - req->sent_us : 0;

        req->redis_us += took;
        metrics_hist_observe(conn->node->metric_duration, took);
        req->sent_us = 0;
    }
}

/* A RESP3 push of LEN bytes heads the input of CONN. It pairs with no
 * request: it goes to the owner as it comes, which says whether it ended
 * the request at the head (a SUBSCRIBE is answered by pushes only); that
 * request then completes with no bytes of its own. A push on a shared
 * connection has nobody to go to (nothing there subscribes or tracks). */
static void backend_dispatch_push(struct backend_conn *conn, struct evbuffer *in, size_t len)
{
    struct request *head = TAILQ_FIRST(&conn->inflight);

    if (conn->owner == NULL) {   /* shared, one-shot, or its client has gone */
        if (!conn->oneshot && !conn->released)
            log_warning("backend %s sent a push message on a shared connection; dropped",
                        conn->node->name);
        evbuffer_drain(in, len);
        return;
    }
    if (!backend_client.on_push(conn->owner, head, in, len))
        return;
    backend_pop(conn, head);
    backend_deliver(head, in, 0, REPLY_PUSH);
}

/* One complete reply of LEN bytes heads the input: hand it on. */
static void backend_dispatch_reply(struct backend_conn *conn, struct evbuffer *in, size_t len,
                                   int type)
{
    struct request *req;

    /* Streaming, a push pairs with nothing either: with sluice's own
     * request in flight (the HELLO 2 of a RESP3 subscriber switching to
     * RESP2 pub/sub) a message Redis sent before answering it is the
     * client's, not that request's reply. */
    if (conn->passthrough && conn->owner != NULL &&
        (TAILQ_EMPTY(&conn->inflight) || type == REPLY_PUSH)) {
        backend_client.on_passthrough(conn->owner, in, len);
        return;
    }
    if (type == REPLY_PUSH && !conn->passthrough) {
        backend_dispatch_push(conn, in, len);
        return;
    }
    req = TAILQ_FIRST(&conn->inflight);
    if (req == NULL) {
        log_warning("backend %s sent a reply nobody asked for; dropped", conn->node->name);
        evbuffer_drain(in, len);
        return;
    }
    backend_pop(conn, req);
    if (backend_reply_note != NULL)
        backend_reply_note(conn, req, type);
    if (type != REPLY_ERROR || backend_reply_filter == NULL ||
        !backend_reply_filter(conn, req, in, len, 0))
        backend_deliver(req, in, len, type);
    if (conn->oneshot && TAILQ_EMPTY(&conn->inflight))
        backend_conn_release(conn);   /* its one request is answered */
}

/* Frame the next reply in IN. Returns its length (and *TYPE), 0 when more
 * bytes are needed, -1 on a protocol error. A reply whose end is far off
 * (a large bulk) is looked at again only once enough has arrived. */
static ssize_t backend_frame(struct backend_conn *conn, struct evbuffer *in, int *type)
{
    size_t avail = evbuffer_get_length(in);
    ssize_t len;

    if (avail < conn->hold_until)
        return 0;
    conn->hold_until = 0;
    len = respframe_next(&conn->frame, in, type);
    if (len == 0 && respframe_missing(&conn->frame) > BACKEND_FRAME_WAIT)
        conn->hold_until = avail + respframe_missing(&conn->frame);
    return len;
}

/* Redis sent something that is not RESP: the connection cannot be trusted
 * to pair replies any more. */
static void backend_protocol_error(struct backend_conn *conn)
{
    char why[200];

    snprintf(why, sizeof(why), "protocol error in reply: %s", conn->frame.err);
    BACKEND_COUNT_ERROR(conn->node, BACKEND_ERROR_PROTOCOL);
    backend_conn_down(conn, why);
}

/* Whether CONN is a tunnel with every framed reply it owed delivered:
 * then the rest of IN goes to its owner unframed. Returns 1 when so. */
static int backend_tunnel_pass(struct backend_conn *conn, struct evbuffer *in)
{
    if (!conn->tunnel || !TAILQ_EMPTY(&conn->inflight))
        return 0;
    if (conn->owner != NULL && evbuffer_get_length(in) > 0)
        backend_client.on_tunnel(conn->owner, in);
    else
        evbuffer_drain(in, evbuffer_get_length(in));
    return 1;
}

static void backend_read_cb(struct bufferevent *bev, void *arg)
{
    struct backend_conn *conn = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    ssize_t len = 0;
    int type = 0;

    conn->busy++;
    for (;;) {
        if (backend_tunnel_pass(conn, in))
            break;
        len = backend_frame(conn, in, &type);
        if (len <= 0)
            break;
        backend_dispatch_reply(conn, in, (size_t)len, type);
        if (conn->released || conn->bev != bev)
            break;
    }
    conn->busy--;
    if (conn->released) {
        backend_conn_free(conn);
        return;
    }
    if (len < 0 && conn->bev == bev)
        backend_protocol_error(conn);
    else
        backend_close_if_retired(conn);
}

/* CONN, a shared connection of a node out of the map, closes once it has
 * nothing in flight (its last reply delivered); a spare goes at once. */
int backend_retired_closable(const struct backend_conn *conn)
{
    if (!conn->node->retired || !backend_conn_is_shared(conn) || conn->busy || conn->released)
        return 0;
    return conn->spare || (conn->state != BACKEND_DOWN && conn->inflight_count == 0);
}

void backend_close_if_retired(struct backend_conn *conn)
{
    if (!backend_retired_closable(conn))
        return;
    if (conn->spare)
        backend_conn_release(conn);
    else
        backend_conn_down(conn, "the node left the cluster's slot map");
}

void backend_after_reset(struct backend_conn *conn)
{
    conn->resp = 2;   /* RESET also returns Redis's connection to RESP2 */
    backend_reauth(conn);
}

struct backend_node *backend_node_next(const struct backend_node *node)
{
    return node == NULL ? TAILQ_FIRST(&backend_nodes) : TAILQ_NEXT(node, link);
}

int backend_conn_is_shared(const struct backend_conn *conn)
{
    return conn->owner == NULL && !conn->oneshot;
}
