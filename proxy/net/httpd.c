/* httpd.c - owns the metrics_listen HTTP listener, a small HTTP/1.1 server
 * in the proxy's event loop: GET and HEAD of /metrics, /healthz and
 * /readyz, answered through its owner's operations; must not name any
 * upper layer. It never lets a scraper cost the proxy more than a bounded
 * share:
 *
 *   accept -> over metrics_max_connections? 503 written once, closed
 *             (logged at most once a second)
 *   read   -> one request head (at most HTTPD_MAX_HEADERS bytes, a body of
 *             at most HTTPD_MAX_BODY skipped) -> its answer queued, and no
 *             more reading until that answer is written: one answer at a
 *             time per connection, however many are pipelined
 *   /metrics -> one rendering shared (by reference, not copied) by the
 *             scrapes within HTTPD_RENDER_REUSE_MS while one is still being
 *             sent, and by all of them after HTTPD_RENDERS_PER_WINDOW
 *
 * Every answer carries Content-Length; a HEAD answer carries the length
 * of the GET's body and no body (a body there would be read as the start
 * of the next answer on a kept-alive connection). */
#include "httpd.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "sockaddr.h"
#include "sv.h"
#include "value.h"

/* A scrape or probe is small: anything bigger is not one of ours. */
#define HTTPD_MAX_HEADERS 8192
#define HTTPD_MAX_BODY 4096
#define HTTPD_TIMEOUT_S 10
/* Scrapes this close together share one rendering of /metrics. */
#define HTTPD_RENDER_REUSE_MS 100
#define HTTPD_RENDERS_PER_WINDOW 4

/* One rendering of /metrics, shared by the answers that still send it. */
struct httpd_render {
    int refs;           /* answers queued with it, +1 while it is the newest */
    uint64_t made_ms;
    size_t len;
    char data[];
};

struct httpd_conn {
    LIST_ENTRY(httpd_conn) link;
    struct bufferevent *bev;
    size_t body_left;   /* bytes of a request body still to skip */
    int closing;        /* close once the answer is written */
};

static struct evconnlistener *httpd_listener;
static struct httpd_ops httpd_ops;
static LIST_HEAD(, httpd_conn) httpd_conns = LIST_HEAD_INITIALIZER(httpd_conns);
static int httpd_conn_count;
static long long httpd_max_conns = HTTPD_DEFAULT_MAX_CONNECTIONS;
static struct httpd_render *httpd_render_newest;
static uint64_t httpd_refused, httpd_refused_logged_ms;
static uint64_t httpd_window_start_ms;   /* of the HTTPD_RENDER_REUSE_MS window */
static int httpd_window_renders;         /* renderings made in it */

enum httpd_method { HTTPD_GET, HTTPD_HEAD, HTTPD_OTHER };

static uint64_t httpd_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void httpd_render_unref(const void *data, size_t len, void *arg)
{
    struct httpd_render *r = arg;

    (void)data;
    (void)len;
    if (--r->refs == 0)
        free(r);
}

/* The newest rendering of /metrics, or a new one: shared while younger
 * than HTTPD_RENDER_REUSE_MS when another answer still sends it (scrapes
 * at once, or scrapers that do not read) or when HTTPD_RENDERS_PER_WINDOW
 * were made in that time already; else made anew, so that a lone scraper
 * sees what just happened. At most HTTPD_RENDERS_PER_WINDOW renderings
 * per HTTPD_RENDER_REUSE_MS, however many scrapes. NULL when out of
 * memory. */
static struct httpd_render *httpd_render_get(void)
{
    uint64_t now = httpd_now_ms();
    struct httpd_render *last = httpd_render_newest;
    struct evbuffer *text;
    struct httpd_render *r;
    size_t len;

    if (now - httpd_window_start_ms >= HTTPD_RENDER_REUSE_MS) {
        httpd_window_start_ms = now;
        httpd_window_renders = 0;
    }
    if (last != NULL && now - last->made_ms < HTTPD_RENDER_REUSE_MS &&
        (last->refs > 1 || httpd_window_renders >= HTTPD_RENDERS_PER_WINDOW))
        return last;
    httpd_window_renders++;
    text = evbuffer_new();
    if (text == NULL)
        return NULL;
    httpd_ops.metrics(text);
    len = evbuffer_get_length(text);
    r = malloc(sizeof(*r) + len);
    if (r != NULL) {
        r->refs = 1;
        r->made_ms = now;
        r->len = len;
        evbuffer_remove(text, r->data, len);
    }
    evbuffer_free(text);
    if (r == NULL)
        return NULL;
    if (httpd_render_newest != NULL)
        httpd_render_unref(NULL, 0, httpd_render_newest);
    httpd_render_newest = r;
    return r;
}

/* Queue an answer: status line, headers (EXTRA: more header lines, each
 * ending in CRLF, or ""), Content-Length of the body (TEXT, or RENDER's
 * bytes) and, unless HEAD, the body. */
static void httpd_answer(struct httpd_conn *hc, enum httpd_method method, const char *status,
                         const char *type, const char *extra, const char *text,
                         struct httpd_render *render)
{
    struct evbuffer *out = bufferevent_get_output(hc->bev);
    size_t len = render != NULL ? render->len : strlen(text);

    evbuffer_add_printf(out,
                        "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                        "Connection: %s\r\n\r\n",
                        status, type, len, extra, hc->closing ? "close" : "keep-alive");
    if (method == HTTPD_HEAD || len == 0)
        return;
    if (render == NULL) {
        evbuffer_add(out, text, len);
    } else if (evbuffer_add_reference(out, render->data, len, httpd_render_unref, render) == 0) {
        render->refs++;
    }
}

static const char *const httpd_text_type = "text/plain; charset=utf-8";

static void httpd_page_metrics(struct httpd_conn *hc, enum httpd_method method)
{
    struct httpd_render *r = httpd_render_get();

    if (r == NULL) {
        hc->closing = 1;
        httpd_answer(hc, method, "500 Internal Server Error", httpd_text_type, "",
                     "out of memory\n", NULL);
        return;
    }
    httpd_answer(hc, method, "200 OK", "text/plain; version=0.0.4; charset=utf-8", "", NULL, r);
}

static void httpd_page_healthz(struct httpd_conn *hc, enum httpd_method method)
{
    httpd_answer(hc, method, "200 OK", httpd_text_type, "", "ok\n", NULL);
}

static void httpd_page_readyz(struct httpd_conn *hc, enum httpd_method method)
{
    char why[512] = "", text[530];

    if (httpd_ops.ready(why, sizeof(why))) {
        /* Ready, perhaps with a note (requests held for a new primary). */
        snprintf(text, sizeof(text), why[0] != '\0' ? "ready: %s\n" : "ready\n", why);
        httpd_answer(hc, method, "200 OK", httpd_text_type, "", text, NULL);
        return;
    }
    snprintf(text, sizeof(text), "%s\n", why);
    httpd_answer(hc, method, "503 Service Unavailable", httpd_text_type, "", text, NULL);
}

static const struct {
    const char *path;
    void (*page)(struct httpd_conn *hc, enum httpd_method method);
} httpd_pages[] = {
    {"/metrics", httpd_page_metrics},
    {"/healthz", httpd_page_healthz},
    {"/readyz", httpd_page_readyz},
};
#define HTTPD_PAGES (int)(sizeof(httpd_pages) / sizeof(httpd_pages[0]))

static void httpd_conn_free(struct httpd_conn *hc)
{
    LIST_REMOVE(hc, link);
    httpd_conn_count--;
    bufferevent_free(hc->bev);
    free(hc);
}

/* The value of header NAME in the head HEAD (LEN bytes, lines ending in
 * LF), as a view into it; 0 when absent. */
static int httpd_header(const char *head, size_t len, const char *name, struct sv *value)
{
    size_t nlen = strlen(name);
    const char *p = memchr(head, '\n', len), *end = head + len;

    while (p != NULL && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t line = eol != NULL ? (size_t)(eol - p) : (size_t)(end - p);
        if (line > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1, *vend = p + line;
            while (v < vend && (*v == ' ' || *v == '\t'))
                v++;
            while (vend > v && (vend[-1] == '\r' || vend[-1] == ' ' || vend[-1] == '\t'))
                vend--;
            *value = (struct sv){v, (size_t)(vend - v)};
            return 1;
        }
        p = eol;
    }
    return 0;
}

/* Answer the request whose head is HEAD (LEN bytes, NUL-terminated):
 * sets hc->closing and hc->body_left. */
static void httpd_handle(struct httpd_conn *hc, char *head, size_t len)
{
    char method_name[16], target[1024], version[16];
    enum httpd_method method;
    struct sv v;
    long long body = 0;

    if (sscanf(head, "%15s %1023s %15s", method_name, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0 || (version[7] != '0' && version[7] != '1') ||
        version[8] != '\0') {
        hc->closing = 1;
        httpd_answer(hc, HTTPD_GET, "400 Bad Request", httpd_text_type, "", "bad request\n",
                     NULL);
        return;
    }
    method = strcmp(method_name, "GET") == 0 ? HTTPD_GET
             : strcmp(method_name, "HEAD") == 0 ? HTTPD_HEAD : HTTPD_OTHER;
    /* HTTP/1.1 keeps the connection unless told; 1.0 closes unless told. */
    if (httpd_header(head, len, "Connection", &v))
        hc->closing = sv_ieq(v, "close") || (version[7] == '0' && !sv_ieq(v, "keep-alive"));
    else
        hc->closing = version[7] == '0';
    if (httpd_header(head, len, "Transfer-Encoding", &v) ||
        (httpd_header(head, len, "Content-Length", &v) &&
         (value_strict_ll(v.ptr, v.len, &body) != 0 || body < 0 || body > HTTPD_MAX_BODY))) {
        hc->closing = 1;
        httpd_answer(hc, method, "413 Payload Too Large", httpd_text_type, "",
                     "a request body is not expected here\n", NULL);
        return;
    }
    hc->body_left = (size_t)body;
    target[strcspn(target, "?#")] = '\0';
    for (int i = 0; i < HTTPD_PAGES; i++) {
        if (strcmp(target, httpd_pages[i].path) != 0)
            continue;
        if (method == HTTPD_OTHER)
            httpd_answer(hc, method, "405 Method Not Allowed", httpd_text_type,
                         "Allow: GET, HEAD\r\n", "method not allowed\n", NULL);
        else
            httpd_pages[i].page(hc, method);
        return;
    }
    httpd_answer(hc, method, "404 Not Found", httpd_text_type, "", "not found\n", NULL);
}

/* Read what came: skip a body, then take one request head and answer it;
 * reading stops until that answer is written (httpd_write_cb). */
static void httpd_read_cb(struct bufferevent *bev, void *arg)
{
    struct httpd_conn *hc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end;
    char *head;
    size_t len;

    if (hc->body_left > 0) {
        size_t n = evbuffer_get_length(in) < hc->body_left ? evbuffer_get_length(in)
                                                          : hc->body_left;
        evbuffer_drain(in, n);
        hc->body_left -= n;
        if (hc->body_left > 0)
            return;
    }
    end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    len = end.pos >= 0 ? (size_t)end.pos + 4 : 0;
    if (end.pos < 0) {
        end = evbuffer_search(in, "\n\n", 2, NULL);
        len = end.pos >= 0 ? (size_t)end.pos + 2 : 0;
    }
    if (len == 0 || len > HTTPD_MAX_HEADERS) {
        if (len == 0 && evbuffer_get_length(in) <= HTTPD_MAX_HEADERS)
            return;   /* not whole yet */
        hc->closing = 1;
        httpd_answer(hc, HTTPD_GET, "431 Request Header Fields Too Large", httpd_text_type, "",
                     "request head too large\n", NULL);
    } else {
        head = malloc(len + 1);
        if (head == NULL) {
            httpd_conn_free(hc);
            return;
        }
        evbuffer_remove(in, head, len);
        head[len] = '\0';
        httpd_handle(hc, head, len);
        free(head);
    }
    bufferevent_disable(bev, EV_READ);
}

/* The answer is written: close, or read the next request. */
static void httpd_write_cb(struct bufferevent *bev, void *arg)
{
    struct httpd_conn *hc = arg;

    if (hc->closing) {
        httpd_conn_free(hc);
        return;
    }
    bufferevent_enable(bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
        httpd_read_cb(bev, hc);   /* a request pipelined behind the last */
}

static void httpd_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;   /* EOF, an error or a timeout: the connection is done */
    httpd_conn_free(arg);
}

/* Over the cap: tell the scraper in one write, never queued, and close. */
static void httpd_refuse(evutil_socket_t fd)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: text/plain; charset=utf-8\r\n"
                               "Content-Length: 44\r\nConnection: close\r\n\r\n"
                               "too many metrics_listen connections; later\n";
    uint64_t now = httpd_now_ms();
    ssize_t sent = send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);

    (void)sent;   /* best effort: the close says the rest */
    close(fd);
    httpd_refused++;
    if (now - httpd_refused_logged_ms >= 1000) {
        log_warning("metrics_listen: refused %llu connection(s) over metrics_max_connections "
                    "(%lld)",
                    (unsigned long long)httpd_refused, httpd_max_conns);
        httpd_refused = 0;
        httpd_refused_logged_ms = now;
    }
}

static void httpd_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                            int salen, void *arg)
{
    struct event_base *base = evconnlistener_get_base(l);
    struct timeval tv = {HTTPD_TIMEOUT_S, 0};
    struct httpd_conn *hc;

    (void)sa;
    (void)salen;
    (void)arg;
    if (httpd_conn_count >= httpd_max_conns) {
        httpd_refuse(fd);
        return;
    }
    hc = calloc(1, sizeof(*hc));
    if (hc != NULL)
        hc->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (hc == NULL || hc->bev == NULL) {
        free(hc);
        close(fd);
        return;
    }
    LIST_INSERT_HEAD(&httpd_conns, hc, link);
    httpd_conn_count++;
    bufferevent_setcb(hc->bev, httpd_read_cb, httpd_write_cb, httpd_event_cb, hc);
    bufferevent_set_timeouts(hc->bev, &tv, &tv);
    bufferevent_enable(hc->bev, EV_READ);
}

void httpd_set_max_connections(long long max)
{
    httpd_max_conns = max;
}

int httpd_start(struct event_base *base, const char *hostport, const struct httpd_ops *ops,
                int *inherited, int inherited_count, char *err, size_t errlen)
{
    char host[256], why[200];
    struct sockaddr_storage ss;
    socklen_t sslen;
    int port, fd;
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;

    if (value_hostport(hostport, host, sizeof(host), &port, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "metrics_listen %s: %s", hostport, why);
        return -1;
    }
    /* At start only, before the loop runs (as the listen addresses). */
    if (sockaddr_resolve(hostport, SOCKADDR_PASSIVE, "metrics_listen", &ss, &sslen, err,
                         errlen) != 0)
        return -1;
    httpd_ops = *ops;
    fd = sockaddr_take_bound(&ss, inherited, inherited_count);
    if (fd >= 0) {
        /* Listening already, with its queue: scrapes go on across a
         * hand-over. */
        evutil_make_socket_nonblocking(fd);
        evutil_make_socket_closeonexec(fd);
        httpd_listener = evconnlistener_new(base, httpd_accept_cb, NULL, flags, -1, fd);
        if (httpd_listener == NULL)
            close(fd);
    } else {
        httpd_listener = evconnlistener_new_bind(base, httpd_accept_cb, NULL, flags, 128,
                                                 (struct sockaddr *)&ss, (int)sslen);
    }
    if (httpd_listener == NULL) {
        snprintf(err, errlen, "cannot listen on metrics_listen %s: %s", hostport, strerror(errno));
        return -1;
    }
    return 0;
}

int httpd_fd(void)
{
    return httpd_listener != NULL ? evconnlistener_get_fd(httpd_listener) : -1;
}

void httpd_pause(void)
{
    /* Disabled, not closed: closed now, the socket (still open in the new
     * sluice) would stay in this loop's epoll set until the deferred
     * change is applied, waking it for every scrape. Closed at exit. */
    if (httpd_listener != NULL)
        evconnlistener_disable(httpd_listener);
}

void httpd_stop(void)
{
    while (!LIST_EMPTY(&httpd_conns))
        httpd_conn_free(LIST_FIRST(&httpd_conns));
    if (httpd_listener != NULL)
        evconnlistener_free(httpd_listener);
    httpd_listener = NULL;
    if (httpd_render_newest != NULL)
        httpd_render_unref(NULL, 0, httpd_render_newest);
    httpd_render_newest = NULL;
}
