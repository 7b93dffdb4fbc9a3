/* netio.c - owns the direct socket writes at the end of a loop pass and
 * the direct client reads (see netio.h for why). A connection with an SSL
 * object goes through tls.c instead: one branch, nothing else changes. */
#include "netio.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls.h"

#define NETIO_READ_SIZE (64 * 1024)

struct evbuffer *netio_output(struct bufferevent *bev, int *write_off)
{
    if (*write_off) {
        *write_off = 0;
        bufferevent_enable(bev, EV_WRITE);
    }
    return bufferevent_get_output(bev);
}

int netio_write_now(struct bufferevent *bev, int *write_off)
{
    struct evbuffer *out = bufferevent_get_output(bev);

    if (*write_off)
        return 1;
    if (evbuffer_get_length(out) > 0) {
        /* A socket bufferevent keeps its output's start frozen outside its
         * own write callback; thaw it for this one write. Errors are left
         * for the bufferevent to meet and report on its next write. */
        evbuffer_unfreeze(out, 1);
        netio_write(out, bufferevent_getfd(bev), NULL);
        evbuffer_freeze(out, 1);
    }
    if (evbuffer_get_length(out) > 0)
        return 0;
    bufferevent_disable(bev, EV_WRITE);
    *write_off = 1;
    return 1;
}

int netio_write(struct evbuffer *out, int fd, struct ssl_st *ssl)
{
    if (ssl != NULL)
        return tls_write(ssl, out);
    /* evbuffer_write takes a bounded number of chains per writev: go on
     * while it makes progress, stop when the socket is full. */
    while (evbuffer_get_length(out) > 0) {
        int n = evbuffer_write(out, fd);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        if (n == 0)
            return 0;
    }
    return 1;
}

long netio_read(struct evbuffer *in, int fd, struct ssl_st *ssl, size_t max)
{
    /* Read into one static buffer and copy: evbuffer_add then allocates
     * what the data needs, where reserving space would allocate (and free
     * again once framed) a large chunk for every small request. */
    static char buf[NETIO_READ_SIZE];
    size_t total = 0;

    if (ssl != NULL)
        return tls_read(ssl, in, max);
    while (total < max) {
        size_t want = max - total < sizeof(buf) ? max - total : sizeof(buf);
        ssize_t n = read(fd, buf, want);
        if (n <= 0) {
            if (total > 0)
                return (long)total;   /* EOF or error shows on the next read */
            if (n == 0)
                return 0;
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2 : -1;
        }
        if (evbuffer_add(in, buf, (size_t)n) != 0) {
            errno = ENOMEM;
            return -1;
        }
        total += (size_t)n;
        if ((size_t)n < want)
            break;   /* the socket is drained */
    }
    return (long)total;
}

void netio_discard_unread(int fd)
{
    char sink[4096];

    for (int i = 0; i < 64; i++) {
        if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
            return;
    }
}
