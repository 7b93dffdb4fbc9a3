/* sockaddr.h - socket addresses as text ("ip:port"), written one way for
 * clients, backends and CLIENT LIST. */
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

#endif
