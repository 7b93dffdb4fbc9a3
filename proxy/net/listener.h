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
 * ON_ACCEPT. Returns 0, or -1 with ERR set. */
int listener_start(struct event_base *base, const struct config *cfg, listener_accept_fn *on_accept,
                   char *err, size_t errlen);
/* Stop accepting (shutdown); existing clients are not touched. */
void listener_stop(void);

#endif
