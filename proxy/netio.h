/* netio.h - writing a bufferevent's output at once, at the end of a loop
 * pass, instead of waiting for epoll to report the socket writable.
 *
 * The loop (main.c) runs one pass at a time and then lets clients and
 * backends write what the pass produced: one writev per socket and pass.
 * When the socket takes it all, the write event goes off again before the
 * base (which keeps a changelist) ever hands it to epoll, so a reply costs
 * no epoll_ctl. Whatever the socket does not take is left to the
 * bufferevent, which writes it when the socket is writable. */
#ifndef SLUICE_NETIO_H
#define SLUICE_NETIO_H

struct bufferevent;
struct evbuffer;

/* BEV's output, for adding to it: when netio_write_now turned its write
 * event off (*WRITE_OFF), it is turned on again. */
struct evbuffer *netio_output(struct bufferevent *bev, int *write_off);

/* Write BEV's output now. Returns 1 when all of it went and the write event
 * is off (*WRITE_OFF set), else 0. */
int netio_write_now(struct bufferevent *bev, int *write_off);

#endif
