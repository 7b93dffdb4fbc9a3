/* listener.h - the listening sockets. */
#ifndef SLUICE_LISTENER_H
#define SLUICE_LISTENER_H

#include <stddef.h>
#include <sys/socket.h>

struct event_base;
struct config;

/* Takes an accepted socket FD from ADDR (ADDRLEN bytes); TLS is 1 when it
 * came to a tls_listen address. */
typedef void listener_accept_fn(int fd, const struct sockaddr *addr, socklen_t addrlen, int tls);

/* Listen on every configured address; every accepted socket goes to
 * ON_ACCEPT. An address one of the INHERITED listening sockets (COUNT;
 * handed over by the sluice before) is bound to takes that socket, with
 * the connections in its queue, and its entry becomes -1; the others are
 * the caller's to close. Returns 0, or -1 with ERR set. */
int listener_start(struct event_base *base, const struct config *cfg, listener_accept_fn *on_accept,
                   int *inherited, int inherited_count, char *err, size_t errlen);
/* The listening sockets (at most MAX into FDS), still owned here: for the
 * hand-over to a new sluice. Returns how many. */
int listener_fds(int *fds, int max);
/* Stop accepting, keeping the sockets open until listener_stop. Closing a
 * socket another process holds too must wait until the loop has taken it
 * off epoll (libevent defers that to its next pass): closed first, it
 * would stay registered and wake the loop for every connection the new
 * sluice is offered. */
void listener_disable_all(void);
/* Stop (ON 0) or go on (ON 1) accepting, the sockets kept open and their
 * backlog kept: PROXY DRAIN and UNDRAIN. */
void listener_set_accepting(int on);
/* Stop accepting and close the sockets; existing clients are not touched. */
void listener_stop(void);

#endif
