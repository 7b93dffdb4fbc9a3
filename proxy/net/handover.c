/* handover.c - owns the hand-over control socket: a running sluice serves
 * it and passes its listening sockets (SCM_RIGHTS) to a new sluice, which
 * says when it is ready for the old one to stop accepting. Knows nothing
 * about clients: what the old one does then is its owner's (main.c).
 *
 *   new sluice                              running sluice
 *   connect(PATH) ------------------------> accept (same uid or root)
 *                 <------------------------ "SLUICE-HANDOVER 1 <pid> <n>[ <state>]\n" + n fds
 *   listen on the fds that match its
 *   addresses, open the others, start
 *   "GO <pid> CLIENTS\n" -----------------> stop accepting, drain (TAKEOVER)
 *                 <------------------------ "OK\n", close PATH's socket
 *   serve PATH (rename over it)
 *   the control connection stays open: the running sluice passes its
 *   subscribers over it (handpass.c; "CLIENTS" says the new one can take
 *   them: one of the version before says only "GO <pid>", and closes).
 *
 * The new one closing the connection without GO (it could not start)
 * leaves the running one as it was. */
#include "handover.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "httpd.h"
#include "listener.h"
#include "log.h"

#define HANDOVER_MAGIC "SLUICE-HANDOVER 1"
#define HANDOVER_WAIT_S 5   /* the new sluice's waits for the old one's words */

static int handover_listen_fd = -1;
static char handover_path[HANDOVER_PATH_MAX];
static ino_t handover_inode;                  /* of PATH as this process created it */
static struct event *handover_accept_ev;
static struct event *handover_conn_ev;        /* the one new sluice being served */
static int handover_conn_fd = -1;
static handover_takeover_fn *handover_takeover;
static handover_state_fn *handover_state;

/* The directory for derived paths: systemd's RuntimeDirectory=, the
 * user's runtime directory, else one of sluice's own in /tmp, made 0700
 * by handover_check (a path right in /tmp could be taken first by another
 * user). Returns 1 for that last one. */
static int handover_dir(char *dir, size_t size)
{
    const char *env = getenv("RUNTIME_DIRECTORY");
    size_t n;

    if (env == NULL || env[0] != '/')
        env = getenv("XDG_RUNTIME_DIR");
    if (env == NULL || env[0] != '/') {
        snprintf(dir, size, "/tmp/sluice-%lu", (unsigned long)geteuid());
        return 1;
    }
    n = strcspn(env, ":");   /* RUNTIME_DIRECTORY may list several */
    snprintf(dir, size, "%.*s", (int)(n < size ? n : size - 1), env);
    return 0;
}

/* The derived paths in DIR, one per listen and tls_listen address. */
static int handover_derived(const struct config *cfg, const char *dir,
                            char paths[][HANDOVER_PATH_MAX], int n, int max)
{
    for (int i = 0; i < cfg->listen_count + cfg->tls_listen_count && n < max; i++) {
        const char *addr = i < cfg->listen_count ? cfg->listen[i]
                                                 : cfg->tls_listen[i - cfg->listen_count];
        int len = snprintf(paths[n], HANDOVER_PATH_MAX, "%s/sluice-%s.sock", dir, addr);

        if (len > 0 && len < HANDOVER_PATH_MAX - 12)   /* room for the ".<pid>" of handover_serve */
            n++;
    }
    return n;
}

int handover_paths(const struct config *cfg, char paths[][HANDOVER_PATH_MAX], int max)
{
    char dir[HANDOVER_PATH_MAX];
    int n;

    if (cfg->handover_socket != NULL) {
        if (strcmp(cfg->handover_socket, "off") == 0 || max < 1)
            return 0;
        snprintf(paths[0], HANDOVER_PATH_MAX, "%s", cfg->handover_socket);
        return 1;
    }
    if (!handover_dir(dir, sizeof(dir)))
        return handover_derived(cfg, dir, paths, 0, max);
    n = handover_derived(cfg, dir, paths, 0, max);
    /* Then where a sluice before this version served, right in /tmp: only
     * connected to (a sluice of another user there is refused by its
     * peer's credentials), never served. */
    return handover_derived(cfg, "/tmp", paths, n, max);
}

/* Whether directory DIR may hold a hand-over socket: this user's or
 * root's, and writable by nobody else unless sticky (then nobody else can
 * rename or remove this user's files in it). 0, or -1 with ERR set. */
static int handover_check_dir(const char *dir, const char *path, char *err, size_t errlen)
{
    struct stat st;

    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "hand-over socket %s: its directory %s: %s", path, dir,
                 strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "hand-over socket %s: %s is not a directory", path, dir);
        return -1;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        snprintf(err, errlen, "hand-over socket %s: its directory %s belongs to another user "
                 "(uid %lu); refusing a path another user controls", path, dir,
                 (unsigned long)st.st_uid);
        return -1;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
        snprintf(err, errlen, "hand-over socket %s: its directory %s is writable by other users "
                 "and not sticky (mode %04o); another user could take the path", path, dir,
                 (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* Whether PATH, if there, is a socket of this user's. */
static int handover_check_file(const char *path, char *err, size_t errlen)
{
    struct stat st;

    if (lstat(path, &st) != 0)
        return 0;   /* not there yet: this sluice makes it */
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "hand-over socket %s belongs to another user (uid %lu); "
                 "refusing a path another user controls", path, (unsigned long)st.st_uid);
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "hand-over socket %s exists and is not a socket", path);
        return -1;
    }
    return 0;
}

/* Make sluice's own directory DIR (0700) if missing, and check it is this
 * user's, a directory, and closed to others. */
static int handover_own_dir(const char *dir, int create, char *err, size_t errlen)
{
    struct stat st;

    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the hand-over directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (lstat(dir, &st) != 0)
        return create ? (snprintf(err, errlen, "hand-over directory %s: %s", dir,
                                  strerror(errno)), -1)
                      : 0;   /* sluice -t: made at start */
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        snprintf(err, errlen, "hand-over directory %s is not a directory of this user's with "
                 "mode 0700 (uid %lu, mode %04o); refusing a path another user may control",
                 dir, (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* The directory part of PATH into DIR. */
static void handover_dirname(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

int handover_check(const struct config *cfg, int create, char *err, size_t errlen)
{
    char paths[HANDOVER_MAX_FDS][HANDOVER_PATH_MAX], dir[HANDOVER_PATH_MAX];
    int count;

    if (cfg->handover_socket != NULL && strcmp(cfg->handover_socket, "off") == 0)
        return 0;
    if (cfg->handover_socket == NULL && handover_dir(dir, sizeof(dir))) {
        /* sluice's own directory: made here, or checked whole (sluice -t
         * before it exists: nothing more to check) */
        if (handover_own_dir(dir, create, err, errlen) != 0)
            return -1;
        if (!create && lstat(dir, &(struct stat){0}) != 0)
            return 0;
    }
    count = handover_paths(cfg, paths, HANDOVER_MAX_FDS);
    if (cfg->handover_socket == NULL && handover_dir(dir, sizeof(dir)))
        count = handover_derived(cfg, dir, paths, 0, HANDOVER_MAX_FDS);   /* not /tmp's old ones */
    for (int i = 0; i < count; i++) {
        handover_dirname(paths[i], dir, sizeof(dir));
        if (handover_check_dir(dir, paths[i], err, errlen) != 0 ||
            handover_check_file(paths[i], err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* Whether the peer of unix socket FD runs as this user or as root. */
static int handover_peer_trusted(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return cred.uid == geteuid() || cred.uid == 0;
}

static void handover_set_timeout(int fd)
{
    struct timeval tv = {HANDOVER_WAIT_S, 0};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Read the running sluice's header and sockets from FD into T. */
static int handover_receive(int fd, struct handover_take *t, char *err, size_t errlen)
{
    char buf[64 + HANDOVER_STATE_MAX];
    char cbuf[CMSG_SPACE(sizeof(int) * HANDOVER_MAX_FDS)];
    struct iovec iov = {buf, sizeof(buf) - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    long pid = 0;
    int count = -1, end = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n > 0 && cm != NULL;
         cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        t->fd_count = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(t->fds, CMSG_DATA(cm), sizeof(int) * (size_t)t->fd_count);
    }
    if (n <= 0) {
        snprintf(err, errlen, "no answer: %s", n == 0 ? "connection closed" : strerror(errno));
        return -1;
    }
    buf[n] = '\0';
    if (sscanf(buf, HANDOVER_MAGIC " %ld %d%n", &pid, &count, &end) != 2 ||
        count != t->fd_count || (msg.msg_flags & MSG_CTRUNC) || buf[n - 1] != '\n') {
        snprintf(err, errlen, "unexpected answer (%d sockets)", t->fd_count);
        return -1;
    }
    t->old_pid = (pid_t)pid;
    /* The state words, if any (a sluice of the version before has none). */
    if (buf[end] == ' ')
        snprintf(t->state, sizeof(t->state), "%.*s", (int)strcspn(buf + end + 1, "\n"),
                 buf + end + 1);
    return 0;
}

/* Close every socket of T still there. */
static void handover_close_fds(struct handover_take *t)
{
    for (int i = 0; i < t->fd_count; i++) {
        if (t->fds[i] >= 0)
            close(t->fds[i]);
        t->fds[i] = -1;
    }
    t->fd_count = 0;
}

/* Connect to PATH: the socket, -1 with errno when nobody serves it. */
static int handover_dial(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int handover_connect(char paths[][HANDOVER_PATH_MAX], int count, struct handover_take *t,
                     char *err, size_t errlen)
{
    char why[256];

    memset(t, 0, sizeof(*t));
    t->ctrl_fd = -1;
    for (int i = 0; i < count; i++) {
        int fd = handover_dial(paths[i]);

        if (fd < 0)
            continue;   /* ENOENT, or ECONNREFUSED: a file left by a sluice that died */
        handover_set_timeout(fd);
        if (!handover_peer_trusted(fd)) {
            close(fd);
            snprintf(err, errlen, "hand-over socket %s is served by another user", paths[i]);
            return -1;
        }
        if (handover_receive(fd, t, why, sizeof(why)) != 0) {
            handover_close_fds(t);
            close(fd);
            snprintf(err, errlen, "hand-over from the sluice at %s failed: %s", paths[i], why);
            return -1;
        }
        t->ctrl_fd = fd;
        log_notice("hand-over: sluice pid %d passed %d listening sockets (%s)", (int)t->old_pid,
                   t->fd_count, paths[i]);
        return 0;
    }
    return 0;
}

int handover_commit(struct handover_take *t, char *err, size_t errlen)
{
    char line[64];
    int len = snprintf(line, sizeof(line), "GO %d CLIENTS\n", (int)getpid());
    ssize_t n;

    handover_close_fds(t);
    if (t->ctrl_fd < 0)
        return 0;
    if (write(t->ctrl_fd, line, (size_t)len) != len) {
        snprintf(err, errlen, "hand-over: cannot tell pid %d to stop: %s", (int)t->old_pid,
                 strerror(errno));
        close(t->ctrl_fd);
        t->ctrl_fd = -1;
        return -1;
    }
    /* Exactly "OK\n": what follows (client connections, their fds) is
     * the channel's (handpass.c), read by the loop. */
    n = read(t->ctrl_fd, line, 3);
    if (n < 3 || memcmp(line, "OK\n", 3) != 0) {
        close(t->ctrl_fd);
        t->ctrl_fd = -1;
        snprintf(err, errlen, "hand-over: pid %d did not confirm that it stopped accepting",
                 (int)t->old_pid);
        return -1;
    }
    log_notice("hand-over: pid %d stopped accepting; it answers its clients and exits",
               (int)t->old_pid);
    return 0;   /* t->ctrl_fd stays open: the caller's to serve or close */
}

void handover_abandon(struct handover_take *t)
{
    handover_close_fds(t);
    if (t->ctrl_fd >= 0)
        close(t->ctrl_fd);
    t->ctrl_fd = -1;
}

/* The connection being served. */
static void handover_conn_end(void)
{
    if (handover_conn_ev != NULL)
        event_free(handover_conn_ev);
    handover_conn_ev = NULL;
    if (handover_conn_fd >= 0)
        close(handover_conn_fd);
    handover_conn_fd = -1;
}

/* The new sluice said GO, or went without. */
static void handover_conn_cb(evutil_socket_t fd, short what, void *arg)
{
    char line[64];
    ssize_t n = read(fd, line, sizeof(line) - 1);
    long pid;
    int end = 0, channel;

    (void)what;
    (void)arg;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    line[n > 0 ? n : 0] = '\0';
    if (n <= 0 || sscanf(line, "GO %ld%n", &pid, &end) != 1) {
        log_warning("hand-over abandoned: the new sluice went without taking over "
                    "(this one goes on serving)");
        handover_conn_end();
        return;
    }
    log_notice("hand-over: pid %ld is ready; no new connections here, answering the clients "
               "connected, then exiting", pid);
    /* The connection is kept for the confirmation; the path is the new
     * sluice's from now on (it renames its own socket over it). */
    handover_conn_fd = -1;
    handover_inode = 0;
    handover_serve_stop();
    /* OK first: what TAKEOVER sends on the channel must come after it. */
    channel = strncmp(line + end, " CLIENTS", 8) == 0;
    if (write(fd, "OK\n", 3) != 3) {
        log_info("hand-over: cannot confirm to pid %ld: %s", pid, strerror(errno));
        channel = 0;
    }
    handover_takeover((pid_t)pid, channel ? fd : -1);
    if (!channel)
        close(fd);
}

/* Send the header and the listening sockets to the new sluice on FD. */
static int handover_send(int fd)
{
    int fds[HANDOVER_MAX_FDS];
    int count = listener_fds(fds, HANDOVER_MAX_FDS);
    int metrics_fd = httpd_fd();
    char head[64 + HANDOVER_STATE_MAX], state[HANDOVER_STATE_MAX] = "";
    char cbuf[CMSG_SPACE(sizeof(fds))];
    int len;
    struct iovec iov;
    struct msghdr msg = {0};
    struct cmsghdr *cm;

    if (metrics_fd >= 0 && count < HANDOVER_MAX_FDS)
        fds[count++] = metrics_fd;
    if (handover_state != NULL)
        handover_state(state, sizeof(state));
    len = snprintf(head, sizeof(head), HANDOVER_MAGIC " %d %d%s%s\n", (int)getpid(), count,
                   state[0] != '\0' ? " " : "", state);
    iov.iov_base = head;
    iov.iov_len = (size_t)len;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    memset(cbuf, 0, sizeof(cbuf));
    if (count > 0) {
        msg.msg_control = cbuf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count);
        cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)count);
    }
    return sendmsg(fd, &msg, MSG_NOSIGNAL) == len ? 0 : -1;
}

static void handover_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
    struct event_base *base = arg;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

    (void)what;
    if (fd < 0)
        return;
    if (handover_conn_fd >= 0 || !handover_peer_trusted(fd)) {
        /* One hand-over at a time; and never to a stranger. */
        log_warning("hand-over refused: %s", handover_conn_fd >= 0 ? "another one is under way"
                                                                   : "the peer is another user");
        close(fd);
        return;
    }
    handover_set_timeout(fd);
    if (handover_send(fd) != 0) {
        log_warning("hand-over: cannot pass the listening sockets: %s", strerror(errno));
        close(fd);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    handover_conn_fd = fd;
    handover_conn_ev = event_new(base, fd, EV_READ | EV_PERSIST, handover_conn_cb, NULL);
    event_add(handover_conn_ev, NULL);
    log_notice("hand-over: listening sockets passed to a new sluice; waiting for it to start");
}

/* Bind a fresh socket at a temporary name beside PATH and rename it over
 * PATH: a sluice that connects finds the old socket or the new one, never
 * none. Returns the socket or -1 with ERR set. */
static int handover_bind(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct stat st;
    mode_t old_mask;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc;

    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s.%d", path, (int)getpid());
    unlink(sun.sun_path);
    old_mask = umask(077);   /* only this user may connect */
    rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old_mask);
    if (rc != 0 || listen(fd, 4) != 0 || rename(sun.sun_path, path) != 0 ||
        stat(path, &st) != 0) {
        snprintf(err, errlen, "cannot serve the hand-over socket %s: %s", path, strerror(errno));
        if (fd >= 0) {
            unlink(sun.sun_path);
            close(fd);
        }
        return -1;
    }
    handover_inode = st.st_ino;
    return fd;
}

int handover_serve(struct event_base *base, const char *path, handover_takeover_fn *takeover,
                   handover_state_fn *state, char *err, size_t errlen)
{
    int fd = handover_bind(path, err, errlen);

    if (fd < 0)
        return -1;
    snprintf(handover_path, sizeof(handover_path), "%s", path);
    handover_listen_fd = fd;
    handover_takeover = takeover;
    handover_state = state;
    handover_accept_ev = event_new(base, fd, EV_READ | EV_PERSIST, handover_accept_cb, base);
    event_add(handover_accept_ev, NULL);
    log_info("hand-over socket %s: a new sluice started with this config takes over here",
             path);
    return 0;
}

void handover_serve_stop(void)
{
    struct stat st;

    handover_conn_end();
    if (handover_accept_ev != NULL)
        event_free(handover_accept_ev);
    handover_accept_ev = NULL;
    if (handover_listen_fd < 0)
        return;
    close(handover_listen_fd);
    handover_listen_fd = -1;
    /* Removed only while it is still the socket this process made. */
    if (handover_inode != 0 && stat(handover_path, &st) == 0 && st.st_ino == handover_inode)
        unlink(handover_path);
}
