/* resolve.h - host names to socket addresses without blocking the event
 * loop: libevent's evdns, with the system's /etc/resolv.conf and
 * /etc/hosts read once, at resolve_init. */
#ifndef SLUICE_RESOLVE_H
#define SLUICE_RESOLVE_H

#include <stddef.h>
#include <sys/socket.h>

struct event_base;
struct resolve_lookup;

/* A lookup's answer: SA (LEN bytes) with the port set, or SA NULL and ERR
 * naming the host and the resolver's reason. Called from the loop, never
 * from inside resolve_start; the lookup is gone when it returns. */
typedef void resolve_done_fn(void *arg, const struct sockaddr *sa, socklen_t len,
                             const char *err);

/* Make the resolver on BASE from /etc/resolv.conf and /etc/hosts (read
 * now, before the loop runs, and never again). Returns 0, or -1 with ERR. */
int resolve_init(struct event_base *base, char *err, size_t errlen);

/* Look HOST up (TCP PORT); FN(ARG, ...) gets the answer: the first IPv4
 * address, else the first IPv6 one. NULL when it cannot even start (out
 * of memory, or resolve_init not called): FN is then never called. */
struct resolve_lookup *resolve_start(const char *host, int port, resolve_done_fn *fn, void *arg);

/* Forget LOOKUP: its FN is not called. Its memory goes once evdns has
 * let go of it (resolve_shutdown). */
void resolve_cancel(struct resolve_lookup *lookup);

/* At exit, after every user has cancelled its lookups: let evdns finish
 * the cancelled ones (it hands them back from the loop), then free it. */
void resolve_shutdown(void);

#endif
