/* netio.h - socket I/O where libevent's bufferevents would cost a system
 * call (or a few hundred instructions) more per request.
 *
 * Writing: the loop (main.c) runs one pass at a time and then lets clients
 * and backends write what the pass produced: one writev per socket and
 * pass. Clients own a plain output evbuffer and a write event that is
 * added only when the socket did not take everything (netio_write), so a
 * reply costs no event change at all. Backends keep a bufferevent (it
 * connects them); their write event goes off again before the base (which
 * keeps a changelist) ever hands it to epoll (netio_write_now), and what
 * the socket does not take is left to the bufferevent.
 *
 * Reading (clients): straight into an evbuffer, without the FIONREAD ioctl
 * libevent makes before every read. */
#ifndef SLUICE_NETIO_H
#define SLUICE_NETIO_H

#include <stddef.h>

struct bufferevent;
struct evbuffer;
struct ssl_st;

/* BEV's output, for adding to it: when netio_write_now turned its write
 * event off (*WRITE_OFF), it is turned on again. */
struct evbuffer *netio_output(struct bufferevent *bev, int *write_off);

/* Write BEV's output now. Returns 1 when all of it went and the write event
 * is off (*WRITE_OFF set), else 0. */
int netio_write_now(struct bufferevent *bev, int *write_off);

/* Write as much of OUT to FD as the socket takes now; through SSL when it
 * is not NULL (tls_write). Returns 1 when OUT is empty, 0 when the socket
 * is full (write again once writable; with SSL, see tls_wants_read), -1
 * on an error (errno set; the connection is broken). */
int netio_write(struct evbuffer *out, int fd, struct ssl_st *ssl);

/* Read what FD has into IN, at most MAX bytes, in reads of up to 64 KB
 * while they come back full (libevent's own read asks the kernel how much
 * is there first: one system call more per request); through SSL when it
 * is not NULL (tls_read). Returns
 * the bytes read (> 0), 0 at end of file, -1 on an error (errno set), -2
 * when there was nothing to read. */
long netio_read(struct evbuffer *in, int fd, struct ssl_st *ssl, size_t max);

/* Read and drop what socket FD holds (up to 256 KB), without blocking:
 * for a connection closed between replies while its next request may
 * already be in the socket. Closed with unread bytes, the kernel would
 * answer with a reset, which throws away replies still in the socket's
 * send buffer; dropped first, the close is an orderly FIN after the last
 * reply. The bytes were never read by sluice and never will be. */
void netio_discard_unread(int fd);

#endif
