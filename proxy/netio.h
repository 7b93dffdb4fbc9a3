/* netio.h - socket I/O under the bufferevents, where libevent's own would
 * cost a system call more per request.
 *
 * Writing: the loop (main.c) runs one pass at a time and then lets clients
 * and backends write what the pass produced: one writev per socket and
 * pass. When the socket takes it all, the write event goes off again
 * before the base (which keeps a changelist) ever hands it to epoll, so a
 * reply costs no epoll_ctl. Whatever the socket does not take is left to
 * the bufferevent, which writes it when the socket is writable.
 *
 * Reading (clients): straight into an evbuffer, without the FIONREAD ioctl
 * libevent makes before every read. */
#ifndef SLUICE_NETIO_H
#define SLUICE_NETIO_H

#include <stddef.h>

struct bufferevent;
struct evbuffer;

/* BEV's output, for adding to it: when netio_write_now turned its write
 * event off (*WRITE_OFF), it is turned on again. */
struct evbuffer *netio_output(struct bufferevent *bev, int *write_off);

/* Write BEV's output now. Returns 1 when all of it went and the write event
 * is off (*WRITE_OFF set), else 0. */
int netio_write_now(struct bufferevent *bev, int *write_off);

/* Read what FD has into IN, at most MAX bytes, in reads of up to 64 KB
 * while they come back full (libevent's own read asks the kernel how much
 * is there first: one system call more per request). Returns
 * the bytes read (> 0), 0 at end of file, -1 on an error (errno set), -2
 * when there was nothing to read. */
long netio_read(struct evbuffer *in, int fd, size_t max);

#endif
