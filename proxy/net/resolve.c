/* resolve.c - owns the evdns resolver and the lookups in flight: a host
 * name becomes an address while the loop goes on serving everyone else.
 * It knows nothing of backends; callers own what the answer is for. */
#include "resolve.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "log.h"

/* Passes of the loop resolve_shutdown runs at most for evdns to hand the
 * cancelled lookups back (one is enough: two leave room). */
#define RESOLVE_SHUTDOWN_PASSES 4

struct resolve_lookup {
    resolve_done_fn *fn;                     /* NULL: cancelled */
    void *arg;
    struct evdns_getaddrinfo_request *req;   /* evdns's, until it answers */
    struct event *deliver;                   /* an answer evdns gave at once, handed over
                                                from the loop (never inside resolve_start) */
    int starting;                            /* inside evdns_getaddrinfo */
    struct sockaddr_storage addr;
    socklen_t addrlen;                       /* 0: no address, ERR says why */
    char host[256];
    char err[400];
    LIST_ENTRY(resolve_lookup) link;         /* in resolve_live */
};

static LIST_HEAD(resolve_list, resolve_lookup) resolve_live = LIST_HEAD_INITIALIZER(resolve_live);
static struct event_base *resolve_base;
static struct evdns_base *resolve_dns;

/* evdns's own words (a nameserver timed out, or is back) go to sluice's
 * log, not to stderr; which lookup failed, the caller logs. */
static void resolve_log_cb(int is_warning, const char *msg)
{
    if (is_warning)
        log_notice("resolver: %s", msg);
    else
        log_debug("resolver: %s", msg);
}

int resolve_init(struct event_base *base, char *err, size_t errlen)
{
    evdns_set_log_fn(resolve_log_cb);
    /* evdns_base_new reads /etc/resolv.conf and /etc/hosts here, at start,
     * before the loop runs; a missing resolv.conf means 127.0.0.1. */
    resolve_dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
    if (resolve_dns == NULL) {
        snprintf(err, errlen, "cannot start the DNS resolver (/etc/resolv.conf)");
        return -1;
    }
    resolve_base = base;
    return 0;
}

static void resolve_free_lookup(struct resolve_lookup *lookup)
{
    LIST_REMOVE(lookup, link);
    if (lookup->deliver != NULL)
        event_free(lookup->deliver);
    free(lookup);
}

/* Hand LOOKUP's answer to its user, and free it. */
static void resolve_finish(struct resolve_lookup *lookup)
{
    resolve_done_fn *fn = lookup->fn;
    struct sockaddr_storage addr = lookup->addr;
    socklen_t addrlen = lookup->addrlen;
    char err[sizeof(lookup->err)];
    void *arg = lookup->arg;

    memcpy(err, lookup->err, sizeof(err));
    resolve_free_lookup(lookup);   /* first: FN may start a new lookup */
    if (fn != NULL)
        fn(arg, addrlen > 0 ? (struct sockaddr *)&addr : NULL, addrlen, err);
}

/* The first IPv4 address of RES, else its first IPv6 one: an IPv4-only
 * Redis on a name that also has an IPv6 address (localhost) still works. */
static const struct evutil_addrinfo *resolve_pick(const struct evutil_addrinfo *res)
{
    const struct evutil_addrinfo *ai, *v6 = NULL;

    for (ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET && ai->ai_addrlen <= sizeof(struct sockaddr_storage))
            return ai;
        if (ai->ai_family == AF_INET6 && v6 == NULL &&
            ai->ai_addrlen <= sizeof(struct sockaddr_storage))
            v6 = ai;
    }
    return v6;
}

static void resolve_gai_cb(int result, struct evutil_addrinfo *res, void *arg)
{
    struct resolve_lookup *lookup = arg;
    const struct evutil_addrinfo *ai = result == 0 ? resolve_pick(res) : NULL;

    lookup->req = NULL;
    if (ai != NULL) {
        memcpy(&lookup->addr, ai->ai_addr, ai->ai_addrlen);
        lookup->addrlen = (socklen_t)ai->ai_addrlen;
    } else {
        snprintf(lookup->err, sizeof(lookup->err), "cannot resolve host %s: %s", lookup->host,
                 result != 0 ? evutil_gai_strerror(result) : "no IPv4 or IPv6 address");
    }
    if (res != NULL)
        evutil_freeaddrinfo(res);
    if (lookup->fn == NULL)
        resolve_free_lookup(lookup);   /* cancelled: evdns is done with it now */
    else if (!lookup->starting)
        resolve_finish(lookup);
}

static void resolve_deliver_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    resolve_finish(arg);
}

struct resolve_lookup *resolve_start(const char *host, int port, resolve_done_fn *fn, void *arg)
{
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct timeval now = {0, 0};
    struct resolve_lookup *lookup;
    char port_text[16];

    if (resolve_dns == NULL || (lookup = calloc(1, sizeof(*lookup))) == NULL)
        return NULL;
    lookup->fn = fn;
    lookup->arg = arg;
    snprintf(lookup->host, sizeof(lookup->host), "%s", host);
    snprintf(port_text, sizeof(port_text), "%d", port);
    LIST_INSERT_HEAD(&resolve_live, lookup, link);
    lookup->starting = 1;
    lookup->req = evdns_getaddrinfo(resolve_dns, host, port_text, &hints, resolve_gai_cb, lookup);
    lookup->starting = 0;
    if (lookup->req != NULL)
        return lookup;
    /* Answered at once (/etc/hosts, or an error): resolve_gai_cb kept the
     * answer, which goes to FN from the loop, as a later one would. */
    lookup->deliver = evtimer_new(resolve_base, resolve_deliver_cb, lookup);
    if (lookup->deliver == NULL) {
        resolve_free_lookup(lookup);
        return NULL;
    }
    evtimer_add(lookup->deliver, &now);
    return lookup;
}

void resolve_cancel(struct resolve_lookup *lookup)
{
    lookup->fn = NULL;
    if (lookup->req != NULL)
        evdns_getaddrinfo_cancel(lookup->req);   /* resolve_gai_cb frees it, later */
    else
        resolve_free_lookup(lookup);
}

void resolve_shutdown(void)
{
    struct resolve_lookup *lookup, *next;

    if (resolve_dns == NULL)
        return;
    for (lookup = LIST_FIRST(&resolve_live); lookup != NULL; lookup = next) {
        next = LIST_NEXT(lookup, link);
        if (lookup->fn != NULL)
            resolve_cancel(lookup);
    }
    /* evdns answers a cancelled lookup through a deferred callback: the
     * loop must run for it to let go of (and free) the request. */
    for (int i = 0; i < RESOLVE_SHUTDOWN_PASSES && !LIST_EMPTY(&resolve_live); i++)
        event_base_loop(resolve_base, EVLOOP_NONBLOCK);
    evdns_base_free(resolve_dns, 0);
    resolve_dns = NULL;
}
