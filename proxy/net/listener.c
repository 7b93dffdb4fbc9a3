/* listener.c - owns the listening sockets and hands accepted ones to
 * the accept callback its owner gives listener_start; when accept runs out
 * of descriptors, it pauses accepting
 * for a moment instead of spinning. Knows nothing about the protocol. */
#include "listener.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "sockaddr.h"

/* How long accepting pauses after accept found no descriptor or memory,
 * and how often such a failure may be logged. */
#define LISTENER_PAUSE_MS 100
#define LISTENER_LOG_EVERY_MS 1000

static struct evconnlistener *listeners[2 * CONFIG_MAX_LISTEN];   /* plain, then TLS */
static int listener_count;
static struct event *listener_resume_timer;   /* armed while paused */
static uint64_t listener_last_log_ms;
static unsigned long listener_suppressed;     /* failures not logged since */

/* ARG is listener_tls for a tls_listen address, NULL for a plain one. */
static int listener_tls;

static listener_accept_fn *listener_on_accept;   /* from listener_start */

static void listener_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                               struct sockaddr *addr, int addrlen, void *arg)
{
    (void)l;
    listener_on_accept(fd, addr, (socklen_t)addrlen, arg == &listener_tls);
}

/* Log an accept failure, at most once per LISTENER_LOG_EVERY_MS; the next
 * line logged says how many were left out. */
static void listener_log_failure(int err, int paused)
{
    uint64_t now = server_now_ms();

    if (listener_last_log_ms != 0 && now - listener_last_log_ms < LISTENER_LOG_EVERY_MS) {
        listener_suppressed++;
        return;
    }
    listener_last_log_ms = now;
    if (listener_suppressed > 0)
        log_warning("accept failed: %s%s (%lu more such failures not logged)", strerror(err),
                    paused ? "; pausing accepts" : "", listener_suppressed);
    else
        log_warning("accept failed: %s%s", strerror(err), paused ? "; pausing accepts" : "");
    listener_suppressed = 0;
}

static void listener_set_enabled(int enabled)
{
    for (int i = 0; i < listener_count; i++) {
        if (enabled)
            evconnlistener_enable(listeners[i]);
        else
            evconnlistener_disable(listeners[i]);
    }
}

/* Closed by the operator (PROXY DRAIN): the out-of-resources pause must
 * not open the doors again. */
static int listener_closed;

static void listener_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (!listener_closed)
        listener_set_enabled(1);
}

void listener_set_accepting(int on)
{
    listener_closed = !on;
    listener_set_enabled(on);
}

static int listener_out_of_resources(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* Out of descriptors or memory, the pending connection stays in the
 * backlog and the socket stays readable: left armed, the listener would
 * call accept again at once, forever. So every listener rests for
 * LISTENER_PAUSE_MS, giving clients time to leave. (libevent retries
 * EINTR, EAGAIN and ECONNABORTED itself, without calling us.) */
static void listener_error_cb(struct evconnlistener *l, void *arg)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval resume_after = {0, LISTENER_PAUSE_MS * 1000};
    int paused = listener_out_of_resources(err) && listener_resume_timer != NULL;

    (void)l;
    (void)arg;
    (*metrics_counter(METRIC_rejected_connections_total,
                      listener_out_of_resources(err) ? "out_of_resources" : "accept_error",
                      NULL))++;
    if (paused) {
        listener_set_enabled(0);
        evtimer_add(listener_resume_timer, &resume_after);
    }
    /* Anything else (a connection reset before accept...) concerns one
     * connection only: the listener goes on. */
    listener_log_failure(err, paused);
}

static int listener_open(struct event_base *base, const char *hostport, int tls, int *inherited,
                         int inherited_count, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    struct evconnlistener *l;
    unsigned flags = LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
    int fd;

    /* At start only, before the loop runs: a host name here may block on
     * the system's resolver (getaddrinfo), and nothing else waits yet. */
    if (sockaddr_resolve(hostport, SOCKADDR_PASSIVE, "listen address", &ss, &len, err,
                         errlen) != 0)
        return -1;
    fd = sockaddr_take_bound(&ss, inherited, inherited_count);
    if (fd >= 0) {
        /* Already listening, with its queue of connections not yet
         * accepted: backlog 0 leaves it as it is. */
        evutil_make_socket_nonblocking(fd);
        l = evconnlistener_new(base, listener_accept_cb, tls ? &listener_tls : NULL, flags, 0, fd);
        if (l == NULL)
            close(fd);
    } else {
        l = evconnlistener_new_bind(base, listener_accept_cb, tls ? &listener_tls : NULL, flags,
                                    511, (struct sockaddr *)&ss, (int)len);
    }
    if (l == NULL) {
        snprintf(err, errlen, "cannot listen on %s: %s", hostport, strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(l, listener_error_cb);
    listeners[listener_count++] = l;
    log_notice("listening on %s%s%s", hostport, tls ? " (TLS)" : "",
               fd >= 0 ? " (socket handed over)" : "");
    return 0;
}

int listener_start(struct event_base *base, const struct config *cfg, listener_accept_fn *on_accept,
                   int *inherited, int inherited_count, char *err, size_t errlen)
{
    listener_on_accept = on_accept;
    listener_resume_timer = evtimer_new(base, listener_resume_cb, NULL);
    if (listener_resume_timer == NULL) {
        snprintf(err, errlen, "cannot create the accept timer");
        return -1;
    }
    for (int i = 0; i < cfg->listen_count; i++) {
        if (listener_open(base, cfg->listen[i], 0, inherited, inherited_count, err, errlen) != 0)
            return -1;
    }
    for (int i = 0; i < cfg->tls_listen_count; i++) {
        if (listener_open(base, cfg->tls_listen[i], 1, inherited, inherited_count, err,
                          errlen) != 0)
            return -1;
    }
    return 0;
}

int listener_fds(int *fds, int max)
{
    int n = 0;

    for (int i = 0; i < listener_count && n < max; i++)
        fds[n++] = evconnlistener_get_fd(listeners[i]);
    return n;
}

void listener_disable_all(void)
{
    if (listener_resume_timer != NULL)
        evtimer_del(listener_resume_timer);
    listener_set_enabled(0);
}

void listener_stop(void)
{
    for (int i = 0; i < listener_count; i++)
        evconnlistener_free(listeners[i]);
    listener_count = 0;
    if (listener_resume_timer != NULL)
        event_free(listener_resume_timer);
    listener_resume_timer = NULL;
}
