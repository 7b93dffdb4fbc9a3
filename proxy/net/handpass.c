/* handpass.c - owns the hand-over channel after the listening sockets
 * went (see handpass.h): the old sluice passes client connections (their
 * fd with SCM_RIGHTS, an opaque blob) and both sides trade short lines
 * about each. It never looks inside a blob and knows nothing of clients.
 *
 *   old sluice                                      new sluice
 *   "C <id> <len>\n" + blob, the fd on the 'C' ---> on_conn(id, fd, blob)
 *                 <-------------------------------- "R <id>\n" (on_word)
 *   "D <id>\n" or "F <id>\n" ---------------------> on_word
 *   exit: the channel ends ------------------------> on_end
 */
#include "handpass.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

#define HANDPASS_BLOB_MAX (64u << 20)   /* a subscriber's names: far above any real one */
#define HANDPASS_FDS_MAX 256            /* received, not yet matched with their header */
#define HANDPASS_SEND_WAIT_MS 5000
#define HANDPASS_READ_CHUNK 65536

static int handpass_fd = -1;
static struct event *handpass_ev;
static const struct handpass_ops *handpass_ops;
static struct evbuffer *handpass_in;
static int handpass_fds[HANDPASS_FDS_MAX];   /* a FIFO: fds come in the order of their 'C' */
static int handpass_fd_count;

int handpass_open(void)
{
    return handpass_fd >= 0;
}

void handpass_close(void)
{
    if (handpass_ev != NULL)
        event_free(handpass_ev);
    handpass_ev = NULL;
    if (handpass_fd >= 0)
        close(handpass_fd);
    handpass_fd = -1;
    if (handpass_in != NULL)
        evbuffer_free(handpass_in);
    handpass_in = NULL;
    for (int i = 0; i < handpass_fd_count; i++)
        close(handpass_fds[i]);
    handpass_fd_count = 0;
}

/* The channel is over: close it, then tell the owner (once). */
static void handpass_end(const char *why)
{
    const struct handpass_ops *ops = handpass_ops;

    if (handpass_fd < 0)
        return;
    log_info("hand-over channel closed: %s", why);
    handpass_close();
    handpass_ops = NULL;
    if (ops != NULL && ops->on_end != NULL)
        ops->on_end();
}

/* Take the fds that came with a read into the FIFO. Returns -1 when some
 * were lost (truncated, or too many waiting). */
static int handpass_take_fds(struct msghdr *msg)
{
    int lost = (msg->msg_flags & MSG_CTRUNC) != 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        int n;
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + sizeof(int) * (size_t)i, sizeof(int));
            if (handpass_fd_count < HANDPASS_FDS_MAX)
                handpass_fds[handpass_fd_count++] = fd;
            else {
                close(fd);
                lost = 1;
            }
        }
    }
    return lost ? -1 : 0;
}

/* One message at the head of the input, if whole: 1 handled, 0 wait for
 * more, -1 nonsense (the channel ends). */
static int handpass_one(void)
{
    char line[96];
    struct evbuffer_ptr eol = evbuffer_search_eol(handpass_in, NULL, NULL, EVBUFFER_EOL_LF);
    uint64_t id;
    size_t len = 0, head;
    char word;
    int end = 0;

    if (eol.pos < 0)
        return evbuffer_get_length(handpass_in) < sizeof(line) ? 0 : -1;
    if ((size_t)eol.pos >= sizeof(line))
        return -1;
    head = (size_t)eol.pos + 1;
    evbuffer_copyout(handpass_in, line, head);
    line[eol.pos] = '\0';
    if (sscanf(line, "%c %" SCNu64 "%n", &word, &id, &end) != 2)
        return -1;
    if (word != 'C') {
        if (line[end] != '\0')
            return -1;
        evbuffer_drain(handpass_in, head);
        if (handpass_ops->on_word != NULL)
            handpass_ops->on_word(word, id);
        return 1;
    }
    if (sscanf(line + end, " %zu", &len) != 1 || len > HANDPASS_BLOB_MAX)
        return -1;
    if (evbuffer_get_length(handpass_in) < head + len)
        return 0;
    if (handpass_fd_count == 0)
        return -1;   /* a connection without its fd */
    {
        int fd = handpass_fds[0];
        char *blob = malloc(len + 1);

        memmove(handpass_fds, handpass_fds + 1, sizeof(int) * (size_t)--handpass_fd_count);
        if (blob == NULL) {
            close(fd);
            return -1;
        }
        evbuffer_drain(handpass_in, head);
        evbuffer_remove(handpass_in, blob, len);
        blob[len] = '\0';
        if (handpass_ops->on_conn != NULL)
            handpass_ops->on_conn(id, fd, blob, len);
        else
            close(fd);
        free(blob);
    }
    return 1;
}

/* Read what the socket has into the input (and the fds into the FIFO).
 * Returns 1 read, 0 nothing yet, -1 the channel ended (WHY set). */
static int handpass_read(const char **why)
{
    char buf[HANDPASS_READ_CHUNK];
    char cbuf[CMSG_SPACE(sizeof(int) * 64)];
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t n = recvmsg(handpass_fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        *why = n == 0 ? "the other sluice closed it" : strerror(errno);
        return -1;
    }
    if (handpass_take_fds(&msg) != 0) {
        *why = "file descriptors lost in passing";
        return -1;
    }
    evbuffer_add(handpass_in, buf, (size_t)n);
    return 1;
}

/* Readable (or woken to handle what a blocked send read meanwhile). */
static void handpass_read_cb(evutil_socket_t fd, short what, void *arg)
{
    const char *why = NULL;
    int rc;

    (void)fd;
    (void)what;
    (void)arg;
    if (handpass_read(&why) < 0) {
        handpass_end(why);
        return;
    }
    while (handpass_fd >= 0 && (rc = handpass_one()) != 0) {
        if (rc < 0) {
            handpass_end("unexpected words");
            return;
        }
    }
}

void handpass_start(struct event_base *base, int fd, const struct handpass_ops *ops)
{
    handpass_end("a newer hand-over began");
    evutil_make_socket_nonblocking(fd);
    handpass_fd = fd;
    handpass_ops = ops;
    handpass_in = evbuffer_new();
    handpass_ev = event_new(base, fd, EV_READ | EV_PERSIST, handpass_read_cb, NULL);
    event_add(handpass_ev, NULL);
}

/* Send LEN bytes of BUF, the first with ATTACH (an fd; -1: none), waiting
 * (bounded) while the socket is full. Returns 0 or -1. */
static int handpass_write(const char *buf, size_t len, int attach)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    size_t done = 0;

    while (done < len) {
        struct iovec iov = {(char *)buf + done, len - done};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct pollfd p = {.fd = handpass_fd, .events = POLLOUT | POLLIN};
        const char *why = NULL;
        ssize_t n;

        if (attach >= 0 && done == 0) {
            struct cmsghdr *cm;
            memset(cbuf, 0, sizeof(cbuf));
            msg.msg_control = cbuf;
            msg.msg_controllen = sizeof(cbuf);
            cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &attach, sizeof(int));
        }
        n = sendmsg(handpass_fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && poll(&p, 1, HANDPASS_SEND_WAIT_MS) == 1 &&
            !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) {
            /* Read what the other side says meanwhile (it may be blocked
             * sending too): handled from the loop, after this send. */
            if ((p.revents & POLLIN) && handpass_read(&why) != 0 && why != NULL)
                return -1;
            if (p.revents & POLLIN)
                event_active(handpass_ev, EV_READ, 0);
            continue;
        }
        return -1;
    }
    return 0;
}

/* The channel failed while sending: end it from the loop, not from under
 * the caller (who may be walking its clients). */
static int handpass_failed(void)
{
    log_warning("hand-over channel: cannot send: %s", strerror(errno));
    shutdown(handpass_fd, SHUT_RDWR);   /* a message may be cut: nothing more is read */
    if (handpass_ev != NULL)
        event_active(handpass_ev, EV_READ, 0);   /* the read sees the error or EOF */
    return -1;
}

int handpass_send_conn(uint64_t id, int fd, const char *blob, size_t len)
{
    char head[64];
    int n = snprintf(head, sizeof(head), "C %" PRIu64 " %zu\n", id, len);

    if (handpass_fd < 0)
        return -1;
    if (handpass_write(head, (size_t)n, fd) != 0 || handpass_write(blob, len, -1) != 0)
        return handpass_failed();
    return 0;
}

int handpass_say(char word, uint64_t id)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "%c %" PRIu64 "\n", word, id);

    if (handpass_fd < 0)
        return -1;
    if (handpass_write(line, (size_t)n, -1) != 0)
        return handpass_failed();
    return 0;
}
