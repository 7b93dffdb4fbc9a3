/* httpd.c - owns the metrics_listen HTTP listener (evhttp, in the proxy's
 * event loop): routes GET /metrics, /healthz and /readyz to its owner's
 * operations; must not name any upper layer. */
#include "httpd.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sockaddr.h"
#include "value.h"

/* A scrape or probe is small: anything bigger is not one of ours. */
#define HTTPD_MAX_HEADERS 8192
#define HTTPD_MAX_BODY 4096
#define HTTPD_TIMEOUT_S 10

static struct evhttp *httpd;
static struct evhttp_bound_socket *httpd_bound;
static struct httpd_ops httpd_ops;

static void httpd_page_metrics(struct evhttp_request *r, struct evbuffer *body);
static void httpd_page_healthz(struct evhttp_request *r, struct evbuffer *body);
static void httpd_page_readyz(struct evhttp_request *r, struct evbuffer *body);

static const struct {
    const char *path;
    void (*page)(struct evhttp_request *r, struct evbuffer *body);
} httpd_pages[] = {
    {"/metrics", httpd_page_metrics},
    {"/healthz", httpd_page_healthz},
    {"/readyz", httpd_page_readyz},
};
#define HTTPD_PAGES (int)(sizeof(httpd_pages) / sizeof(httpd_pages[0]))

static void httpd_send(struct evhttp_request *r, int code, const char *reason,
                       const char *type, struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(r), "Content-Type", type);
    evhttp_send_reply(r, code, reason, body);
}

static void httpd_page_metrics(struct evhttp_request *r, struct evbuffer *body)
{
    httpd_ops.metrics(body);
    httpd_send(r, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
}

static void httpd_page_healthz(struct evhttp_request *r, struct evbuffer *body)
{
    evbuffer_add_printf(body, "ok\n");
    httpd_send(r, 200, "OK", "text/plain; charset=utf-8", body);
}

static void httpd_page_readyz(struct evhttp_request *r, struct evbuffer *body)
{
    char why[512] = "";

    if (httpd_ops.ready(why, sizeof(why))) {
        /* Ready, perhaps with a note (requests held for a new primary). */
        evbuffer_add_printf(body, why[0] != '\0' ? "ready: %s\n" : "ready\n", why);
        httpd_send(r, 200, "OK", "text/plain; charset=utf-8", body);
        return;
    }
    evbuffer_add_printf(body, "%s\n", why);
    httpd_send(r, 503, "Service Unavailable", "text/plain; charset=utf-8", body);
}

/* Every request: an unknown path is 404, a known one asked with another
 * method than GET (or HEAD, whose body evhttp leaves out) 405. */
static void httpd_request_cb(struct evhttp_request *r, void *arg)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(r);
    struct evbuffer *body = evbuffer_new();

    (void)arg;
    if (body == NULL) {
        evhttp_send_error(r, 500, NULL);
        return;
    }
    for (int i = 0; i < HTTPD_PAGES && path != NULL; i++) {
        if (strcmp(path, httpd_pages[i].path) != 0)
            continue;
        if (method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD) {
            httpd_pages[i].page(r, body);
        } else {
            evhttp_add_header(evhttp_request_get_output_headers(r), "Allow", "GET, HEAD");
            evbuffer_add_printf(body, "method not allowed\n");
            httpd_send(r, 405, "Method Not Allowed", "text/plain; charset=utf-8", body);
        }
        evbuffer_free(body);
        return;
    }
    evbuffer_add_printf(body, "not found\n");
    httpd_send(r, 404, "Not Found", "text/plain; charset=utf-8", body);
    evbuffer_free(body);
}

int httpd_start(struct event_base *base, const char *hostport, const struct httpd_ops *ops,
                int *inherited, int inherited_count, char *err, size_t errlen)
{
    char host[256], why[200];
    struct sockaddr_storage ss;
    socklen_t sslen;
    int port, fd;

    if (value_hostport(hostport, host, sizeof(host), &port, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "metrics_listen %s: %s", hostport, why);
        return -1;
    }
    /* At start only, before the loop runs (as the listen addresses). */
    if (sockaddr_resolve(hostport, SOCKADDR_PASSIVE, "metrics_listen", &ss, &sslen, err,
                         errlen) != 0)
        return -1;
    httpd_ops = *ops;
    httpd = evhttp_new(base);
    if (httpd == NULL) {
        snprintf(err, errlen, "metrics_listen %s: out of memory", hostport);
        return -1;
    }
    /* Every method reaches httpd_request_cb, which answers 405 itself. */
    evhttp_set_allowed_methods(httpd, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                          EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                          EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                          EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_headers_size(httpd, HTTPD_MAX_HEADERS);
    evhttp_set_max_body_size(httpd, HTTPD_MAX_BODY);
    evhttp_set_timeout(httpd, HTTPD_TIMEOUT_S);
    evhttp_set_gencb(httpd, httpd_request_cb, NULL);
    fd = sockaddr_take_bound(&ss, inherited, inherited_count);
    if (fd >= 0) {
        /* Listening already, with its queue: scrapes go on across a
         * hand-over. */
        evutil_make_socket_nonblocking(fd);
        evutil_make_socket_closeonexec(fd);
        httpd_bound = evhttp_accept_socket_with_handle(httpd, fd);
        if (httpd_bound == NULL)
            close(fd);
    } else {
        httpd_bound = evhttp_bind_socket_with_handle(httpd, host, (ev_uint16_t)port);
    }
    if (httpd_bound == NULL) {
        snprintf(err, errlen, "cannot listen on metrics_listen %s: %s", hostport, strerror(errno));
        evhttp_free(httpd);
        httpd = NULL;
        return -1;
    }
    return 0;
}

int httpd_fd(void)
{
    return httpd_bound != NULL ? evhttp_bound_socket_get_fd(httpd_bound) : -1;
}

void httpd_pause(void)
{
    /* Disabled, not closed: closed now, the socket (still open in the new
     * sluice) would stay in this loop's epoll set until the deferred
     * change is applied, waking it for every scrape. Closed at exit. */
    if (httpd_bound != NULL)
        evconnlistener_disable(evhttp_bound_socket_get_listener(httpd_bound));
}

void httpd_stop(void)
{
    if (httpd != NULL)
        evhttp_free(httpd);
    httpd = NULL;
    httpd_bound = NULL;
}
