/* benchconn.h - what the benchmark clients (lockbench.c, respbench.c)
 * share: loopback connections on one event base, where a lost connection
 * ends the run, and the run's wall time. Header-only: each tool is one .c
 * file built on its own (Makefile). */
#ifndef SLUICE_BENCHCONN_H
#define SLUICE_BENCHCONN_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *benchconn_prog = "bench";   /* set by the tool, for messages */

static inline void benchconn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)arg;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
        fprintf(stderr, "%s: connection lost\n", benchconn_prog);
        exit(1);
    }
}

/* A connection to 127.0.0.1:PORT on BASE, reading and writing, whose input
 * goes to READ_CB with ARG. A connection that is lost ends the program
 * (exit 1); so does one that cannot start. */
static inline struct bufferevent *benchconn_open(struct event_base *base, int port,
                                                 bufferevent_data_cb read_cb, void *arg)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bufferevent_setcb(bev, read_cb, NULL, benchconn_event_cb, arg);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        fprintf(stderr, "%s: connect: %s\n", benchconn_prog, strerror(errno));
        exit(1);
    }
    return bev;
}

/* Seconds since T0 (CLOCK_MONOTONIC). */
static inline double benchconn_seconds_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

#endif
