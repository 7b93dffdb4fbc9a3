/* listener.c - owns the listening sockets and hands accepted ones to
 * client_accept. Knows nothing about the protocol. */
#include "listener.h"

#include <errno.h>
#include <event2/listener.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "value.h"

static struct evconnlistener *listeners[CONFIG_MAX_LISTEN];
static int listener_count;

static void listener_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
                               struct sockaddr *addr, int addrlen, void *arg)
{
    (void)l;
    (void)arg;
    client_accept(fd, addr, (socklen_t)addrlen);
}

static void listener_error_cb(struct evconnlistener *l, void *arg)
{
    (void)l;
    (void)arg;
    /* EMFILE and friends: the connection waits in the backlog; log it. */
    log_warning("accept failed: %s", strerror(EVUTIL_SOCKET_ERROR()));
}

static int listener_open(struct event_base *base, const char *hostport, char *err, size_t errlen)
{
    char host[256], port_text[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    struct evconnlistener *l;
    int port, rc;

    if (value_hostport(hostport, host, sizeof(host), &port, err, errlen) != 0)
        return -1;
    snprintf(port_text, sizeof(port_text), "%d", port);
    rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve listen address %s: %s", hostport, gai_strerror(rc));
        return -1;
    }
    l = evconnlistener_new_bind(base, listener_accept_cb, NULL,
                                LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                511, res->ai_addr, (int)res->ai_addrlen);
    freeaddrinfo(res);
    if (l == NULL) {
        snprintf(err, errlen, "cannot listen on %s: %s", hostport, strerror(errno));
        return -1;
    }
    evconnlistener_set_error_cb(l, listener_error_cb);
    listeners[listener_count++] = l;
    log_notice("listening on %s", hostport);
    return 0;
}

int listener_start(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < cfg->listen_count; i++) {
        if (listener_open(base, cfg->listen[i], err, errlen) != 0)
            return -1;
    }
    return 0;
}

void listener_stop(void)
{
    for (int i = 0; i < listener_count; i++)
        evconnlistener_free(listeners[i]);
    listener_count = 0;
}
