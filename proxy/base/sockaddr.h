/* sockaddr.h - socket addresses as text ("ip:port"), written one way for
 * clients, backends and CLIENT LIST; and "host:port" resolved, one way for
 * listeners and backends. */
#ifndef SLUICE_SOCKADDR_H
#define SLUICE_SOCKADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Flag for sockaddr_format: write an IPv6 address "[ip]:port", as Redis's
 * CLIENT LIST shows it (and CLIENT KILL ADDR must name it). */
#define SOCKADDR_BRACKET_IP6 1

/* Write SS's address into IP (IP_SIZE bytes; INET6_ADDRSTRLEN is enough)
 * and return its port. A family other than IPv4/IPv6 gives "?" and 0. */
int sockaddr_ip(const struct sockaddr_storage *ss, char *ip, size_t ip_size);

/* Write SS as "ip:port" into OUT (SIZE bytes, truncated to fit); FLAGS is
 * 0 or SOCKADDR_BRACKET_IP6. An unknown family gives "?:0". */
void sockaddr_format(const struct sockaddr_storage *ss, int flags, char *out, size_t size);

/* sockaddr_format for the local end of socket FD (getsockname). Returns 0,
 * or -1 when getsockname fails: then OUT holds "?:0". */
int sockaddr_format_local(int fd, int flags, char *out, size_t size);

/* Flags for sockaddr_resolve. */
#define SOCKADDR_PASSIVE 1   /* an address to listen on */
#define SOCKADDR_NUMERIC 2   /* an IP address only: a host name is not looked up */

/* Resolve HOSTPORT ("host:port", as value_hostport reads it) to its first
 * TCP address in *SS and *LEN. Without SOCKADDR_NUMERIC this may block
 * on the system's resolver: only for start-up, before the loop runs (the
 * listen addresses); on the loop, host names go to resolve.h. Returns 0;
 * 1 when SOCKADDR_NUMERIC and the host is a name (nothing done); or -1
 * with ERR set: value_hostport's message, or "cannot resolve WHAT
 * HOSTPORT: reason". */
int sockaddr_resolve(const char *hostport, int flags, const char *what,
                     struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen);

/* Whether socket FD is bound to SS's address and port (IPv4 or IPv6):
 * how a socket handed over by another process is matched to an address. */
int sockaddr_fd_bound_to(int fd, const struct sockaddr_storage *ss);

/* The socket among FDS (COUNT of them; -1 entries skipped) bound to SS,
 * taken out of FDS (set to -1); or -1 when none is. */
int sockaddr_take_bound(const struct sockaddr_storage *ss, int *fds, int count);

#endif
