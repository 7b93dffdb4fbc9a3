/* sdnotify.c - owns the datagrams to systemd's notification socket
 * (READY=1, RELOADING=1, STOPPING=1, MAINPID=). Knows nothing about when
 * they are due: main.c decides. */
#include "sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

int sdnotify_send(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t len;
    socklen_t addrlen;
    int fd;
    ssize_t n;

    if (path == NULL || path[0] == '\0')
        return 0;
    len = strlen(path);
    /* An absolute path, or '@' for Linux's abstract namespace (a leading
     * NUL byte, the name not NUL-terminated). */
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sun.sun_path)) {
        log_debug("NOTIFY_SOCKET %s is not a socket path sluice can use", path);
        return -1;
    }
    memcpy(sun.sun_path, path, len);
    if (path[0] == '@')
        sun.sun_path[0] = '\0';
    addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, addrlen);
    if (n < 0)
        log_debug("cannot notify systemd (%s): %s", path, strerror(errno));
    close(fd);
    return n < 0 ? -1 : 0;
}

int sdnotify_sendf(const char *fmt, ...)
{
    char state[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(state, sizeof(state), fmt, ap);
    va_end(ap);
    return sdnotify_send(state);
}
