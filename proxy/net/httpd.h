/* httpd.h - the HTTP listener of metrics_listen: /metrics, /healthz and
 * /readyz, served by a small HTTP/1.1 server in the proxy's event loop,
 * its connections and the bytes each may queue bounded. */
#ifndef SLUICE_HTTPD_H
#define SLUICE_HTTPD_H

#include <stddef.h>

struct event_base;
struct evbuffer;

/* What the pages say, given by the owner (main.c): the net layer knows
 * nothing of clients or backends. */
struct httpd_ops {
    /* Append the Prometheus text (format 0.0.4) to OUT. */
    void (*metrics)(struct evbuffer *out);
    /* 1 when sluice is ready for traffic; else 0 with the reason in WHY
     * (LEN bytes). */
    int (*ready)(char *why, size_t len);
};

/* metrics_max_connections' default: a few scrapers and probes at once. */
#define HTTPD_DEFAULT_MAX_CONNECTIONS 16

/* Connections open at once at most (metrics_max_connections); one more is
 * answered 503 and closed. Live: applies to the next connection. */
void httpd_set_max_connections(long long max);

/* Listen on HOSTPORT ("host:port") with OPS (copied): on the socket for
 * that address among INHERITED (COUNT of them, handed over by the sluice
 * this one replaces; the one taken is set to -1), else on a new one.
 * Returns 0, or -1 with ERR set. */
int httpd_start(struct event_base *base, const char *hostport, const struct httpd_ops *ops,
                int *inherited, int inherited_count, char *err, size_t errlen);
/* The listening socket, for a hand-over; -1 when there is none. */
int httpd_fd(void);
/* Accept no more connections (those open are answered): a newer sluice
 * serves the same socket after a hand-over. */
void httpd_pause(void);
/* Close the listener and its connections (at exit; not at the start of a
 * shutdown: it answers while sluice drains). */
void httpd_stop(void);

#endif
