/* client.c - owns client connections: reading and framing requests,
 * choosing the backend connection for each, and writing replies back in
 * request order. The one place a client connection is closed is
 * client_close().
 *
 *   socket -> input evbuffer -> reqparse -> request -> throttle (rules)
 *      refused -> -THROTTLED in order; delayed -> held, client blocked
 *      request -> lock verbs -> EVALSHA of lua/ scripts (lock.c)
 *      request -> local (PROXY, CLIENT SETNAME...) -> reply now
 *      request -> route -> backend conn (pool, or private when stateful)
 *   backend reply -> client_on_reply -> head of queue? write : hold
 *
 *   c->requests:  [r1 sent] [r2 done, held reply] [r3 sent] ...
 *                  ^ replies leave from the head only, in order
 */
#include "client.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "commands.h"
#include "config.h"
#include "local.h"
#include "lock.h"
#include "router.h"
#include "log.h"
#include "netio.h"
#include "reply.h"
#include "server.h"
#include "stats.h"
#include "throttle.h"

/* libevent reads 16 KB a callback by default: large values want more. */
#define CLIENT_MAX_SINGLE_READ (256 * 1024)

static struct event_base *client_base;
static const struct config *client_cfg;
static struct client_list client_all = TAILQ_HEAD_INITIALIZER(client_all);
static struct client_list client_write_list = TAILQ_HEAD_INITIALIZER(client_write_list);
static int client_total;
static uint64_t client_next_id = 1;
static struct reqparse_limits client_limits;
/* What the client code does with a command beyond forwarding it. */
enum client_role {
    ROLE_NONE,
    ROLE_AUTH,          /* records the user on success */
    ROLE_HELLO,         /* may record a user and a name */
    ROLE_MULTI,         /* transaction tracking: client_track_multi */
    ROLE_EXEC,
    ROLE_DISCARD,
    ROLE_RESET,
    ROLE_CLIENT_REPLY,  /* CLIENT REPLY ON/OFF/SKIP */
    ROLE_MONITOR,
    ROLE_XREAD,         /* blocks only with a BLOCK option */
};

/* Per command id, looked up once per request instead of comparing names:
 * enum request_flag bits, and enum client_role. */
static unsigned *client_session_flags;
static unsigned char *client_roles;

/* Commands that give a connection state of its own (from them on the
 * client gets a private backend connection), and those with a role.
 * Blocking commands are found by their flag in the command table. */
static const struct {
    const char *name;
    unsigned flags;
    enum client_role role;
} client_session_table[] = {
    {"select", REQ_PRIVATE, ROLE_NONE}, {"multi", REQ_PRIVATE, ROLE_MULTI},
    {"exec", 0, ROLE_EXEC}, {"discard", 0, ROLE_DISCARD}, {"watch", REQ_PRIVATE, ROLE_NONE},
    {"auth", REQ_PRIVATE, ROLE_AUTH}, {"hello", REQ_PRIVATE, ROLE_HELLO},
    {"reset", REQ_PRIVATE | REQ_RESET, ROLE_RESET}, {"wait", REQ_PRIVATE, ROLE_NONE},
    {"client|tracking", REQ_PRIVATE, ROLE_NONE}, {"client|reply", REQ_PRIVATE, ROLE_CLIENT_REPLY},
    {"client|caching", REQ_PRIVATE, ROLE_NONE}, {"client|no-evict", REQ_PRIVATE, ROLE_NONE},
    {"subscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"psubscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"ssubscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"unsubscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"punsubscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"sunsubscribe", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_NONE},
    {"monitor", REQ_PRIVATE | REQ_PASSTHROUGH, ROLE_MONITOR},
    {"xread", 0, ROLE_XREAD}, {"xreadgroup", 0, ROLE_XREAD},
};

static void client_read_cb(evutil_socket_t fd, short what, void *arg);
static void client_write_cb(evutil_socket_t fd, short what, void *arg);
static void client_read_ended(struct client *c, int eof);
static void client_process_input(struct client *c);
static int client_finished(const struct client *c);
static void client_process_input_loop(struct client *c, struct evbuffer *in);

void client_module_init(struct event_base *base, const struct config *cfg)
{
    client_base = base;
    client_cfg = cfg;
    client_limits.max_bulk_len = cfg->proto_max_bulk_len;
    client_limits.max_multibulk_len = cfg->proto_max_multibulk_len;
    client_session_flags = calloc((size_t)commands_count(), sizeof(*client_session_flags));
    client_roles = calloc((size_t)commands_count(), sizeof(*client_roles));
    for (int id = 0; id < commands_count(); id++) {
        const struct command *cmd = commands_by_id(id);
        if (cmd->flags & CMD_BLOCKING)
            client_session_flags[id] = REQ_PRIVATE;
        for (size_t i = 0; i < sizeof(client_session_table) / sizeof(client_session_table[0]); i++) {
            if (strcmp(cmd->name, client_session_table[i].name) == 0) {
                client_session_flags[id] |= client_session_table[i].flags;
                client_roles[id] = (unsigned char)client_session_table[i].role;
            }
        }
    }
}

int client_count(void)
{
    return client_total;
}

static void client_format_addr(struct client *c)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (c->addr.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&c->addr;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        port = ntohs(sin->sin_port);
    } else if (c->addr.ss_family == AF_INET6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&c->addr;
        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
        port = ntohs(sin6->sin6_port);
    }
    snprintf(c->addr_text, sizeof(c->addr_text), "%s:%d", ip, port);
    snprintf(c->ip_text, sizeof(c->ip_text), "%s", ip);
}

/* Start or stop reading C's socket. */
static void client_read_on(struct client *c)
{
    if (!c->read_on) {
        c->read_on = 1;
        event_add(c->read_ev, NULL);
    }
}

static void client_read_off(struct client *c)
{
    if (c->read_on) {
        c->read_on = 0;
        event_del(c->read_ev);
    }
}

void client_accept(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    static const char full[] = "-ERR max number of clients reached\r\n";
    struct client *c;
    int one = 1;

    if (client_total >= client_cfg->maxclients) {
        STAT_INC(rejected_connections);
        if (write(fd, full, sizeof(full) - 1) < 0)
            log_debug("could not tell a client about maxclients: %s", strerror(errno));
        close(fd);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || reqparse_init(&c->parser, &client_limits) != 0) {
        free(c);
        close(fd);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    c->id = client_next_id++;
    c->user = strdup("default");
    c->last_active_ms = server_now_ms();
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

static void client_enqueue(struct client *c, struct request *req)
{
    req->flags |= REQ_QUEUED;
    TAILQ_INSERT_TAIL(&c->requests, req, client_link);
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
        if (req->conn != NULL)
            req->client = NULL;
        else
            request_free(req);
    }
    request_free(orphan);
    if (c->write_listed)
        TAILQ_REMOVE(&client_write_list, c, write_link);
    lock_client_closed(c);
    throttle_client_closed(c);
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
    close(c->fd);
    free(c->name);
    free(c->user);
    free(c);
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
    client_want_write(c);
    return c->output;
}

/* Write C's output now. What the socket does not take waits for its write
 * event, which is on only while there is such a rest. Closes C on a write
 * error, or when it asked to go and everything is written. */
static void client_write(struct client *c)
{
    int rc = netio_write(c->output, c->fd);

    if (rc < 0) {
        log_debug("client %llu: write: %s", (unsigned long long)c->id, strerror(errno));
        client_close(c);
        return;
    }
    if (rc == 0 && !c->write_on) {
        c->write_on = 1;
        event_add(c->write_ev, NULL);
    } else if (rc == 1 && c->write_on) {
        c->write_on = 0;
        event_del(c->write_ev);
    }
    if (rc == 1 && client_finished(c))
        client_close(c);
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
 * sluice hold its replies without bound. Returns -1 when closed. */
static int client_check_output_limit(struct client *c)
{
    size_t pending = evbuffer_get_length(c->output) + c->held_reply_bytes;

    if (client_cfg->client_output_buffer_limit == 0 ||
        pending <= (size_t)client_cfg->client_output_buffer_limit)
        return 0;
    log_notice("client %llu (%s) closed: %zu bytes of replies over client_output_buffer_limit",
               (unsigned long long)c->id, c->addr_text, pending);
    STAT_INC(output_limit_disconnects);
    client_close(c);
    return -1;
}

/* A client whose replies are all written and who asked to go. */
static int client_finished(const struct client *c)
{
    return (c->flags & CLIENT_CLOSE_AFTER_REPLY) && TAILQ_EMPTY(&c->requests) && c->inflight == 0;
}

/* Write the replies at the head of the queue that are complete. */
static void client_flush(struct client *c)
{
    struct request *req;

    while ((req = TAILQ_FIRST(&c->requests)) != NULL && (req->flags & REQ_DONE)) {
        TAILQ_REMOVE(&c->requests, req, client_link);
        if (req->reply != NULL) {
            c->held_reply_bytes -= evbuffer_get_length(req->reply);
            evbuffer_add_buffer(client_output(c), req->reply);
        }
        request_free(req);
    }
    if (client_finished(c) && evbuffer_get_length(c->output) == 0)
        client_close(c);
}

/* REQ's reply is in its own buffer now: mark it and write what can go. */
static void client_complete(struct client *c, struct request *req)
{
    req->flags |= REQ_DONE;
    if (req->reply != NULL)
        c->held_reply_bytes += evbuffer_get_length(req->reply);
    client_flush(c);
}

struct evbuffer *client_reply_buffer(struct client *c, struct request *req)
{
    if (req == TAILQ_FIRST(&c->requests) && req->reply == NULL)
        return client_output(c);
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    return req->reply;
}

int client_answer(struct client *c, struct request *req)
{
    client_enter(c);
    client_complete(c, req);
    client_check_output_limit(c);
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

/* Answer REQ (framed, not queued) with the error TEXT, in reply order;
 * nothing is sent to Redis. Under CLIENT REPLY OFF/SKIP it gets no reply. */
static void client_refuse(struct client *c, struct request *req, const char *text)
{
    if (c->flags & CLIENT_IN_MULTI)
        c->flags |= CLIENT_MULTI_DIRTY;   /* its EXEC must fail: see client_track_multi */
    if (req->flags & REQ_NOREPLY) {
        request_free(req);
        return;
    }
    client_enqueue(c, req);
    client_reply_error(c, req, text);
    client_check_output_limit(c);
}

/* Apply what a successful AUTH, HELLO or RESET changed on the session. */
static void client_apply_session(struct client *c, struct request *req, int type)
{
    if (type == REPLY_ERROR)
        return;
    if (req->ok_user != NULL || req->ok_name != NULL || (req->flags & REQ_RESET))
        throttle_client_changed(c);
    if (req->ok_user != NULL) {
        free(c->user);
        c->user = req->ok_user;
        req->ok_user = NULL;
    }
    if (req->ok_name != NULL) {
        free(c->name);
        c->name = req->ok_name;
        req->ok_name = NULL;
    }
    if (req->flags & REQ_RESET) {
        free(c->name);
        c->name = NULL;
        free(c->user);
        c->user = strdup("default");
        c->flags &= ~(unsigned)(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
    }
}

static void client_try_unstall(struct client *c);

void client_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = req->client;

    client_enter(c);
    c->inflight--;
    client_apply_session(c, req, type);
    if (type == REPLY_ERROR)
        STAT_INC(total_error_replies);
    if (req->on_reply != NULL) {
        /* A rewritten request (LOCK...): its hook answers or resends it. */
        req->on_reply(req, src, len, type);
    } else if (req == TAILQ_FIRST(&c->requests)) {
        /* The common case: nothing earlier is waiting, so the bytes go
         * straight from the backend's buffer to the client's. */
        evbuffer_remove_buffer(src, client_output(c), len);
        TAILQ_REMOVE(&c->requests, req, client_link);
        request_free(req);
        client_flush(c);
    } else {
        req->reply = evbuffer_new();
        evbuffer_remove_buffer(src, req->reply, len);
        client_complete(c, req);
    }
    if (!c->closing && client_check_output_limit(c) == 0)
        client_try_unstall(c);
    client_leave(c);
}

static int client_is_monitor(const struct client *c)
{
    return (c->flags & CLIENT_MONITOR) != 0;
}

void client_on_passthrough(struct client *c, struct evbuffer *src, size_t len)
{
    static const char reset_reply[] = "+RESET\r\n";
    char head[sizeof(reset_reply) - 1];

    client_enter(c);
    /* In pub/sub mode only RESET answers with a status: the session is
     * back to normal, and replies pair with requests again. */
    if (len == sizeof(head) && c->private_conn != NULL && !client_is_monitor(c) &&
        evbuffer_copyout(src, head, len) == (ssize_t)len && memcmp(head, reset_reply, len) == 0) {
        c->flags &= ~(unsigned)CLIENT_PASSTHROUGH;
        backend_set_passthrough(c->private_conn, 0);
        free(c->name);
        c->name = NULL;
        free(c->user);
        c->user = strdup("default");
    }
    evbuffer_remove_buffer(src, client_output(c), len);
    client_check_output_limit(c);
    client_leave(c);
}

void client_on_private_lost(struct client *c)
{
    /* Its session (database, transaction, subscriptions) is gone with the
     * connection; carrying on elsewhere would silently change meaning. */
    c->private_conn = NULL;
    c->inflight_conn = NULL;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
    if (c->flags & CLIENT_PASSTHROUGH)
        reply_error(client_output(c), "backend connection lost");
    client_flush(c);
}

void client_resume(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_PAUSED;
    client_enter(c);
    if (!(c->flags & CLIENT_CLOSE_AFTER_REPLY))
        client_read_on(c);
    client_process_input(c);
    client_leave(c);
}

static enum client_role client_role(const struct request *req)
{
    return req->cmd != NULL ? (enum client_role)client_roles[req->cmd->id] : ROLE_NONE;
}

/* The session flags of REQ: which connection it needs and how its reply
 * comes. XREAD and XREADGROUP block only with a BLOCK option. */
static unsigned client_request_flags(const struct request *req, int argc, const struct sv *argv)
{
    unsigned flags;

    if (req->cmd == NULL)
        return 0;
    flags = client_session_flags[req->cmd->id];
    if ((flags & REQ_PRIVATE) && client_role(req) == ROLE_XREAD) {
        flags = 0;
        for (int i = 1; i < argc && !sv_ieq(argv[i], "streams"); i++) {
            if (sv_ieq(argv[i], "block"))
                flags = REQ_PRIVATE;
        }
    }
    return flags;
}

/* CLIENT REPLY OFF/SKIP: Redis sends no reply, so none is expected. */
static void client_reply_mode(struct client *c, struct request *req, int argc,
                              const struct sv *argv)
{
    int skip_next = 0;

    if (client_role(req) == ROLE_CLIENT_REPLY && argc == 3) {
        if (sv_ieq(argv[2], "off"))
            c->flags |= CLIENT_REPLY_OFF;
        else if (sv_ieq(argv[2], "on"))
            c->flags &= ~(unsigned)(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
        else if (sv_ieq(argv[2], "skip"))
            skip_next = 1;
    }
    if (c->flags & (CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP))
        req->flags |= REQ_NOREPLY;
    c->flags &= ~(unsigned)CLIENT_REPLY_SKIP;
    if (skip_next && !(c->flags & CLIENT_REPLY_OFF)) {
        req->flags |= REQ_NOREPLY;
        c->flags |= CLIENT_REPLY_SKIP;
    }
}

/* Remember the user or name a HELLO or AUTH sets, to record on success. */
static void client_note_session(struct request *req, int argc, const struct sv *argv)
{
    enum client_role role = client_role(req);

    if (role == ROLE_AUTH) {
        req->ok_user = argc >= 3 ? strndup(argv[1].ptr, argv[1].len) : strdup("default");
        return;
    }
    if (role != ROLE_HELLO)
        return;
    for (int i = 2; i < argc; i++) {
        if (sv_ieq(argv[i], "auth") && i + 2 < argc) {
            req->ok_user = strndup(argv[i + 1].ptr, argv[i + 1].len);
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
    (void)type;
    evbuffer_drain(src, len);
    if (req->client == NULL) {   /* its client has gone */
        request_free(req);
        return;
    }
    req->on_reply = NULL;
    req->reply = evbuffer_new();
    reply_error(req->reply, "-EXECABORT Transaction discarded because of previous errors.");
    client_answer(req->client, req);
}

/* Follow MULTI ... EXEC/DISCARD/RESET. Redis never saw a command a rule
 * refused inside a transaction, so running the others would break its
 * all-or-nothing promise: as Redis does after a queuing error, that EXEC
 * becomes DISCARD and the client gets EXECABORT. *SRC is set to NULL when
 * REQ's bytes are replaced. */
static void client_track_multi(struct client *c, struct request *req, struct evbuffer **src)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    enum client_role role = client_role(req);
    int abort_exec;

    if (role == ROLE_MULTI) {
        c->flags |= CLIENT_IN_MULTI;
        return;
    }
    if (role != ROLE_EXEC && role != ROLE_DISCARD && role != ROLE_RESET)
        return;
    abort_exec = role == ROLE_EXEC && (c->flags & CLIENT_MULTI_DIRTY);
    c->flags &= ~(unsigned)(CLIENT_IN_MULTI | CLIENT_MULTI_DIRTY);
    if (!abort_exec)
        return;
    if (*src != NULL)
        evbuffer_drain(*src, req->raw_len);
    *src = NULL;
    if (req->raw == NULL)
        req->raw = evbuffer_new();
    evbuffer_drain(req->raw, evbuffer_get_length(req->raw));
    evbuffer_add(req->raw, discard, sizeof(discard) - 1);
    req->raw_len = sizeof(discard) - 1;
    req->on_reply = client_execabort_reply;
}

/* The backend connection REQ goes to. */
static struct backend_conn *client_route(struct client *c, struct request *req)
{
    if (c->private_conn == NULL && (req->flags & REQ_PRIVATE)) {
        c->private_conn = backend_private_conn(backend_default_node(), c);
        log_debug("client %llu now has a private backend connection", (unsigned long long)c->id);
    }
    if (c->private_conn != NULL)
        return c->private_conn;
    return backend_pool_conn(router_node_for_request(req, NULL), c->id);
}

/* Whether REQ must wait before it can be sent on CONN: replies of one
 * client come back in order only from one connection, and a client
 * entering pub/sub must have every earlier reply written first. */
static int client_must_wait(const struct client *c, const struct request *req,
                            const struct backend_conn *conn)
{
    if (c->inflight > 0 && c->inflight_conn != conn)
        return 1;
    return (req->flags & REQ_PASSTHROUGH) && !(c->flags & CLIENT_PASSTHROUGH) &&
           !TAILQ_EMPTY(&c->requests);
}

/* Send REQ (already in the client's queue unless NOREPLY) on CONN. SRC
 * holds its bytes, or NULL when REQ owns them. */
static void client_send(struct client *c, struct request *req, struct backend_conn *conn,
                        struct evbuffer *src)
{
    char err[512];
    int noreply;

    if ((req->flags & REQ_PASSTHROUGH) && !(c->flags & CLIENT_PASSTHROUGH)) {
        c->flags |= CLIENT_PASSTHROUGH;
        if (client_role(req) == ROLE_MONITOR)
            c->flags |= CLIENT_MONITOR;
        backend_set_passthrough(conn, 1);
    }
    if (c->flags & CLIENT_PASSTHROUGH)
        req->flags |= REQ_NOREPLY;
    noreply = (req->flags & REQ_NOREPLY) != 0;
    if (backend_send(conn, req, src, err, sizeof(err)) != 0) {
        STAT_INC(backend_unavailable_replies);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (noreply)
            request_free(req);
        else
            client_reply_error(c, req, err);
        return;
    }
    if (!noreply) {
        c->inflight++;
        c->inflight_conn = conn;
    }
    if (backend_congested(conn) && c->waiting_on == NULL) {
        c->flags |= CLIENT_PAUSED;
        client_read_off(c);
        backend_wait(conn, c);
    }
}

static void client_try_unstall(struct client *c)
{
    struct request *req = c->stalled;
    struct backend_conn *conn;

    if (req == NULL)
        return;
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

/* Run REQ, with its arguments ARGV: answer it here, rewrite it (LOCK
 * verbs) or forward it. Its bytes are in SRC (the input buffer) or, when
 * SRC is NULL, in req->raw. Returns -1 when reading must stop (it waits,
 * the client is blocked or paused, or closing). */
static int client_dispatch(struct client *c, struct request *req, const struct sv *argv,
                           struct evbuffer *src)
{
    struct backend_conn *conn;

    if (lock_wants(req, req->argc, argv)) {
        size_t original_len = req->raw_len;   /* the rewrite replaces raw_len */
        client_enqueue(c, req);
        lock_handle(c, req, req->argc, argv);
        if (src != NULL)
            evbuffer_drain(src, original_len);
        return (c->flags & (CLIENT_BLOCKED | CLIENT_PAUSED)) || c->stalled != NULL ? -1 : 0;
    }
    if (local_wants(req, req->argc, argv)) {
        req->reply = evbuffer_new();
        local_execute(c, req, req->argc, argv, req->reply);
        if (src != NULL)
            evbuffer_drain(src, req->raw_len);
        if (req->flags & REQ_NOREPLY) {
            request_free(req);
        } else {
            client_enqueue(c, req);
            client_complete(c, req);
        }
        return (c->flags & CLIENT_CLOSE_AFTER_REPLY) ? -1 : 0;
    }
    req->flags |= client_request_flags(req, req->argc, argv);
    client_note_session(req, req->argc, argv);
    client_track_multi(c, req, &src);
    /* Pub/sub replies stream unpaired: such requests wait in no queue. */
    if (!(req->flags & (REQ_NOREPLY | REQ_PASSTHROUGH)) && !(c->flags & CLIENT_PASSTHROUGH))
        client_enqueue(c, req);
    conn = client_route(c, req);
    if (client_must_wait(c, req, conn)) {
        if (src != NULL)
            request_take_raw(req, src);
        c->stalled = req;
        return -1;
    }
    client_send(c, req, conn, src);
    return (c->flags & CLIENT_PAUSED) ? -1 : 0;
}

/* Handle one framed request. Its bytes are in REQ->raw (inline commands)
 * or the first raw_len bytes of IN. Returns -1 when input processing must
 * stop (the request waits, or the client is closing). */
static int client_handle(struct client *c, struct request *req, struct evbuffer *in)
{
    struct evbuffer *src = req->raw != NULL ? NULL : in;
    struct throttle_decision decision;
    struct req_argv views;
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
    STAT_INC(total_requests);
    if (req->cmd != NULL)
        stats_count_command(req->cmd->id);
    else
        stats_count_unknown();
    client_reply_mode(c, req, req->argc, argv);
    switch (throttle_admit(c, req, argv, &decision)) {
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

void client_release_held(struct client *c, struct request *req, const char *error)
{
    struct req_argv views;

    client_enter(c);
    c->flags &= ~(unsigned)CLIENT_BLOCKED;
    if (error != NULL) {
        client_refuse(c, req, error);
    } else if (request_argv_open(&views, req, req->raw) != 0) {
        client_refuse(c, req, "OOM sluice is out of memory");
    } else {
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
    if (TAILQ_EMPTY(&c->requests)) {
        reply_error(client_output(c), "%s", msg);
        return;
    }
    /* Earlier replies are pending: the error takes its place after them. */
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

/* C's socket is readable: read what is there, then frame and handle it.
 * End of file and errors: client_read_ended. */
static void client_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    long n = netio_read(c->input, fd, CLIENT_MAX_SINGLE_READ);

    (void)what;
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
    client_leave(c);
}

/* C's socket takes data again after it was full. */
static void client_write_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;

    (void)fd;
    (void)what;
    client_write(c);
}

/* Reading C's socket met end of file (EOF set) or an error. */
static void client_read_ended(struct client *c, int eof)
{
    if (eof && c->private_conn == NULL && (!TAILQ_EMPTY(&c->requests) || c->inflight > 0)) {
        /* Half-closed after sending (`printf 'PING\r\n' | nc`): answer what
         * it asked, then close. A client with a session may be blocked
         * (BLPOP...) and goes at once, as it would from Redis. */
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

void client_cron(uint64_t now_ms)
{
    struct client *c, *next;
    uint64_t idle_ms = (uint64_t)client_cfg->timeout_s * 1000;

    if (idle_ms == 0)
        return;
    for (c = TAILQ_FIRST(&client_all); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        /* Like Redis: blocked and subscribed clients are not idle. */
        if (!TAILQ_EMPTY(&c->requests) || c->inflight > 0 || (c->flags & CLIENT_PASSTHROUGH))
            continue;
        if (now_ms - c->last_active_ms > idle_ms) {
            log_info("client %llu (%s) closed after %llds idle", (unsigned long long)c->id,
                     c->addr_text, (long long)client_cfg->timeout_s);
            STAT_INC(idle_timeouts);
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
