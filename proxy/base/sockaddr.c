/* sockaddr.c - owns turning a socket address into text, and "host:port"
 * into a socket address. No connection state, no policy about which form
 * a caller shows. */
#include "sockaddr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "value.h"

int sockaddr_ip(const struct sockaddr_storage *ss, char *ip, size_t ip_size)
{
    snprintf(ip, ip_size, "?");
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, ip, ip_size);
        return ntohs(sin->sin_port);
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, ip_size);
        return ntohs(sin6->sin6_port);
    }
    return 0;
}

void sockaddr_format(const struct sockaddr_storage *ss, int flags, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN];
    int port = sockaddr_ip(ss, ip, sizeof(ip));
    int bracket = (flags & SOCKADDR_BRACKET_IP6) && ss->ss_family == AF_INET6;

    snprintf(out, size, bracket ? "[%s]:%d" : "%s:%d", ip, port);
}

int sockaddr_format_local(int fd, int flags, char *out, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int rc = 0;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        memset(&ss, 0, sizeof(ss));   /* AF_UNSPEC: "?:0" */
        rc = -1;
    }
    sockaddr_format(&ss, flags, out, size);
    return rc;
}

int sockaddr_resolve(const char *hostport, int flags, const char *what,
                     struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen)
{
    char host[256], port_text[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV |
                                         ((flags & SOCKADDR_PASSIVE) ? AI_PASSIVE : 0) |
                                         ((flags & SOCKADDR_NUMERIC) ? AI_NUMERICHOST : 0)};
    struct addrinfo *res;
    int port, rc;

    if (value_hostport(hostport, host, sizeof(host), &port, err, errlen) != 0)
        return -1;
    snprintf(port_text, sizeof(port_text), "%d", port);
    rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc == EAI_NONAME && (flags & SOCKADDR_NUMERIC))
        return 1;   /* a host name: the caller looks it up without blocking */
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s %s: %s", what, hostport, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int sockaddr_fd_bound_to(int fd, const struct sockaddr_storage *ss)
{
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    const struct sockaddr_in *a4 = (const void *)ss, *b4 = (const void *)&bound;
    const struct sockaddr_in6 *a6 = (const void *)ss, *b6 = (const void *)&bound;

    if (getsockname(fd, (struct sockaddr *)&bound, &len) != 0 || bound.ss_family != ss->ss_family)
        return 0;
    if (ss->ss_family == AF_INET)
        return a4->sin_port == b4->sin_port &&
               a4->sin_addr.s_addr == b4->sin_addr.s_addr;
    if (ss->ss_family == AF_INET6)
        return a6->sin6_port == b6->sin6_port &&
               memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
    return 0;
}

int sockaddr_take_bound(const struct sockaddr_storage *ss, int *fds, int count)
{
    for (int i = 0; i < count; i++) {
        int fd = fds[i];

        if (fd >= 0 && sockaddr_fd_bound_to(fd, ss)) {
            fds[i] = -1;
            return fd;
        }
    }
    return -1;
}
