/* client_handover.c - owns a subscriber's passage from an old sluice to
 * the new one in a hand-over restart (docs/operations.md "Restart and
 * upgrade"): its connection (fd), user, name, protocol and subscriptions
 * go over the hand-over channel (handpass.c); the new sluice subscribes
 * it on its own backend connection while the old one still delivers; only
 * once every subscription is confirmed does the old one let go, and only
 * after its last message is written does the new one write. So no message
 * is lost; those published in the overlap come twice (pub/sub has no ids
 * to drop them by).
 *
 *   old sluice                         new sluice
 *   offer: C id + fd + state  ------>  adopt: a client, not read, output
 *   (messages still written)            held; SUBSCRIBE... sent as its own
 *                                       commands, confirmations dropped
 *                             <------  R id: every name confirmed
 *   release its backend conn,
 *   write what it has, close
 *   its copy of the fd        ------>  D id: write the held messages, read
 *
 * Either side failing says F id: the old one then drains the client as
 * before (closed at once: it reconnects), the new one closes its copy. */
#include <event2/buffer.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "client_failover.h"
#include "client_int.h"
#include "config.h"
#include "cluster.h"
#include "handpass.h"
#include "log.h"
#include "respframe.h"
#include "respwalk.h"
#include "throttle.h"

#define HANDOVER_BLOB_TAG "sluice-subscriber-1"

struct client_handover {
    uint64_t old_id;            /* new sluice: its id in the old one */
    long long confirms;         /* new: subscriptions not yet confirmed */
    int ready_said;             /* new: R said, waiting for D */
    int released;               /* old: R heard, its backend connection let go */
    struct evbuffer *scan;      /* new: output not yet looked at */
    struct evbuffer *kept;      /* new: messages held until D */
    struct respframe frame;
};

static struct client_handover *client_handover_state(struct client *c)
{
    if (c->handover == NULL && (c->handover = calloc(1, sizeof(*c->handover))) != NULL) {
        c->handover->scan = evbuffer_new();
        c->handover->kept = evbuffer_new();
        respframe_init(&c->handover->frame);
    }
    return c->handover;
}

/* C goes: free its hand-over state; a client still between the two
 * sluices makes the other one let go of it too. */
void client_handover_closing(struct client *c)
{
    struct client_handover *h = c->handover;

    if (c->flags & CLIENT_HANDOVER_OUT) {
        if (h == NULL || !h->released)
            handpass_say('F', c->id);
    } else if ((c->flags & CLIENT_HANDOVER_IN) && h != NULL) {
        handpass_say('F', h->old_id);
    }
    c->flags &= ~(unsigned)(CLIENT_HANDOVER_OUT | CLIENT_HANDOVER_IN);
    if (h == NULL)
        return;
    evbuffer_free(h->scan);
    evbuffer_free(h->kept);
    respframe_release(&h->frame);
    free(h);
    c->handover = NULL;
}

/* Old sluice: whether C can be passed on. A subscriber, plain TCP (a TLS
 * session cannot move), with nothing half-done: no request waiting, no
 * unread input, no fence out, no lock, database 0. Its subscriptions,
 * user, name and protocol go; other state of its Redis connection
 * (CLIENT TRACKING, CLIENT NO-EVICT...) does not (CLIENT_SESSION is set
 * by SUBSCRIBE itself: it cannot tell; docs/known-limits.md). Others are
 * drained as before. */
static int client_handover_eligible(const struct client *c)
{
    int subscribed = ((c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR)) ||
                     (c->resp == 3 && (c->subs.total > 0 || c->subs.shards > 0));
    unsigned busy = CLIENT_CLOSE_AFTER_REPLY | CLIENT_MONITOR | CLIENT_IN_MULTI | CLIENT_TUNNEL |
                    CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP | CLIENT_BLOCKED |
                    CLIENT_WATCHING | CLIENT_TRACKING | CLIENT_DRAINING;

    return subscribed && !(c->flags & busy) && c->ssl == NULL && !c->closing && !c->eof_seen &&
           TAILQ_EMPTY(&c->requests) && c->inflight == 0 && c->fences == 0 &&
           c->stalled == NULL && c->locks == NULL && c->sub_names != NULL &&
           !c->resubscribe_pending && c->private_conn != NULL && c->db == 0 &&
           evbuffer_get_length(c->input) == 0 && !cluster_enabled();
}

static void client_handover_bulk(struct evbuffer *out, const char *s, size_t len)
{
    evbuffer_add_printf(out, "$%zu\r\n", len);
    evbuffer_add(out, s, len);
    evbuffer_add(out, "\r\n", 2);
}

/* C's state for the new sluice: a RESP array (tag, protocol, logged in,
 * user, name; "" for none), then the commands that subscribe it again. */
static struct evbuffer *client_handover_blob(const struct client *c)
{
    struct evbuffer *b = evbuffer_new();
    const char *user = c->user != NULL ? c->user : "default";
    const char *name = c->name != NULL ? c->name : "";

    if (b == NULL)
        return NULL;
    evbuffer_add_printf(b, "*5\r\n");
    client_handover_bulk(b, HANDOVER_BLOB_TAG, strlen(HANDOVER_BLOB_TAG));
    client_handover_bulk(b, c->resp == 3 ? "3" : "2", 1);
    client_handover_bulk(b, c->authenticated ? "1" : "0", 1);
    client_handover_bulk(b, user, strlen(user));
    client_handover_bulk(b, name, strlen(name));
    if (client_failover_replay(c, b) == 0) {
        evbuffer_free(b);
        return NULL;
    }
    return b;
}

int client_handover_offer(void)
{
    int passed = 0, kept = 0;

    for (struct client *c = client_next(NULL); c != NULL && handpass_open(); c = client_next(c)) {
        struct evbuffer *blob;

        if (!client_handover_eligible(c)) {
            kept += (c->flags & CLIENT_PASSTHROUGH) || c->subs.total > 0 || c->subs.shards > 0;
            continue;
        }
        if ((blob = client_handover_blob(c)) == NULL)
            continue;
        if (handpass_send_conn(c->id, c->fd, (const char *)evbuffer_pullup(blob, -1),
                               evbuffer_get_length(blob)) == 0) {
            c->flags |= CLIENT_HANDOVER_OUT;
            client_read_off(c);   /* what it sends next is the new sluice's to read */
            passed++;
        }
        evbuffer_free(blob);
    }
    log_notice("hand-over: %d subscribers passed to the new sluice, which subscribes them "
               "before this one lets go%s", passed,
               kept > 0 ? "; others (TLS, MONITOR, busy) are closed as clients are" : "");
    return passed;
}

/* Old sluice: C (released) has written everything this sluice had for it:
 * the new one writes from now on. Closes this sluice's copy only (the
 * connection stays open: the new one holds it). */
static void client_handover_finish(struct client *c)
{
    handpass_say('D', c->id);
    log_debug("client %llu: handed over", (unsigned long long)c->id);
    c->flags &= ~(unsigned)CLIENT_HANDOVER_OUT;   /* no F, no drain, no FIN */
    client_kill(c, NULL);
}

/* Old sluice, R: stop the messages here. Redis delivers nothing more on
 * the released connection; everything from the moment the new sluice
 * subscribed is on its way there. */
static void client_handover_release(struct client *c)
{
    struct client_handover *h = client_handover_state(c);

    if (h == NULL || h->released)
        return;
    h->released = 1;
    if (c->private_conn != NULL)
        backend_release_private(c->private_conn);
    if (c->inflight_conn == c->private_conn)
        c->inflight_conn = NULL;
    c->private_conn = NULL;
    if (evbuffer_get_length(c->output) == 0)
        client_handover_finish(c);
    else
        client_output(c);   /* written in this pass; finished once empty */
}

/* The client the new sluice adopted as the old one's ID. */
static struct client *client_handover_find_adopted(uint64_t id)
{
    for (struct client *c = client_next(NULL); c != NULL; c = client_next(c)) {
        if ((c->flags & CLIENT_HANDOVER_IN) && c->handover != NULL && c->handover->old_id == id)
            return c;
    }
    return NULL;
}

/* New sluice, D: the old one wrote its last byte to C: C is this
 * sluice's now, its held messages first. */
static void client_handover_done(struct client *c)
{
    struct client_handover *h = c->handover;

    c->flags &= ~(unsigned)CLIENT_HANDOVER_IN;
    evbuffer_add_buffer(h->kept, h->scan);   /* empty since R; kept in order anyway */
    evbuffer_prepend_buffer(c->output, h->kept);
    if (client_readable(c))
        client_read_on(c);
    client_output(c);
    log_debug("client %llu: taken over from the old sluice's client %llu",
              (unsigned long long)c->id, (unsigned long long)h->old_id);
}

/* Old sluice: C stays here after all: closed as a drain closes a
 * subscriber (at once, with a FIN), as if there had been no channel. */
static void client_handover_drop(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_HANDOVER_OUT;
    c->flags |= CLIENT_DRAINING;
    client_kill(c, NULL);
}

void client_handover_word(char word, uint64_t id)
{
    struct client *c;

    if (word == 'R') {   /* old sluice */
        if ((c = client_find(id)) != NULL && (c->flags & CLIENT_HANDOVER_OUT))
            client_handover_release(c);
    } else if (word == 'D') {   /* new sluice */
        if ((c = client_handover_find_adopted(id)) != NULL)
            client_handover_done(c);
    } else if (word == 'F') {   /* either */
        if ((c = client_find(id)) != NULL && (c->flags & CLIENT_HANDOVER_OUT)) {
            client_handover_drop(c);
        } else if ((c = client_handover_find_adopted(id)) != NULL) {
            c->flags &= ~(unsigned)CLIENT_HANDOVER_IN;
            client_kill(c, NULL);
        }
    }
}

void client_handover_ended(void)
{
    struct client *c, *next;

    for (c = client_next(NULL); c != NULL; c = next) {
        next = client_next(c);
        if (c->flags & CLIENT_HANDOVER_OUT) {
            if (c->handover != NULL && c->handover->released) {
                c->flags &= ~(unsigned)CLIENT_HANDOVER_OUT;
                client_kill(c, NULL);   /* its messages are the new one's, if any */
            } else {
                client_handover_drop(c);
            }
        } else if (c->flags & CLIENT_HANDOVER_IN) {
            c->flags &= ~(unsigned)CLIENT_HANDOVER_IN;
            client_kill(c, NULL);   /* the old one may have written half a message */
        }
    }
}

/* The kind of the whole reply of LEN bytes at the head of IN. */
enum { FRAME_OTHER, FRAME_CONFIRM, FRAME_ERROR };

static int client_handover_frame_kind(struct evbuffer *in, size_t len)
{
    static const char *const confirms[] = {"subscribe", "psubscribe", "ssubscribe"};
    char head[64];
    size_t n = len < sizeof(head) ? len : sizeof(head);
    struct respwalk w;
    const char *s;
    size_t slen;
    char type;
    long long count;

    evbuffer_copyout(in, head, n);
    if (head[0] == '-' || head[0] == '!')
        return FRAME_ERROR;
    if (head[0] != '*' && head[0] != '>')
        return FRAME_OTHER;
    head[0] = '*';   /* a RESP3 push is walked as the array it is */
    w.p = head;
    w.end = head + n;
    if (respwalk_line(&w, &type, &count) != 0 || count < 1)
        return FRAME_OTHER;
    if (respwalk_bulk(&w, &s, &slen) != 0)
        return FRAME_OTHER;
    for (size_t i = 0; i < sizeof(confirms) / sizeof(confirms[0]); i++) {
        if (slen == strlen(confirms[i]) && memcmp(s, confirms[i], slen) == 0)
            return FRAME_CONFIRM;
    }
    return FRAME_OTHER;
}

/* New sluice: the adopted C's output grew. Its confirmations (the client
 * had them from the old sluice) are dropped, messages kept; once none is
 * owed, R. Returns -1 when C was closed (a refusal: F). */
static int client_handover_scan(struct client *c)
{
    struct client_handover *h = c->handover;
    ssize_t len;
    int type;

    evbuffer_add_buffer(h->scan, c->output);
    if (h->ready_said) {
        evbuffer_add_buffer(h->kept, h->scan);
        return 0;
    }
    while ((len = respframe_next(&h->frame, h->scan, &type)) > 0) {
        int kind = client_handover_frame_kind(h->scan, (size_t)len);

        if (kind == FRAME_ERROR || (kind == FRAME_CONFIRM && h->confirms <= 0)) {
            log_warning("client %llu (%s): cannot be subscribed again after the hand-over "
                        "(refused); closed, it must reconnect", (unsigned long long)c->id,
                        c->addr_text);
            client_kill(c, NULL);   /* F goes from client_handover_closing */
            return -1;
        }
        if (kind == FRAME_CONFIRM) {
            evbuffer_drain(h->scan, (size_t)len);
            h->confirms--;
        } else {
            evbuffer_remove_buffer(h->scan, h->kept, (size_t)len);
        }
    }
    if (len < 0) {
        client_kill(c, NULL);
        return -1;
    }
    if (h->confirms == 0) {
        h->ready_said = 1;
        evbuffer_add_buffer(h->kept, h->scan);
        handpass_say('R', h->old_id);
    }
    return 0;
}

int client_handover_write(struct client *c, int written)
{
    if (!written)
        return c->flags & CLIENT_HANDOVER_IN ? (client_handover_scan(c), 1) : 0;
    if (c->handover != NULL && c->handover->released && evbuffer_get_length(c->output) == 0) {
        client_handover_finish(c);
        return 1;
    }
    return 0;
}

/* Read the header of BLOB into C: protocol, login, name. Returns the
 * offset of the commands that follow, or -1. */
static long client_handover_header(struct client *c, const char *blob, size_t len)
{
    struct respwalk w = {blob, blob + len};
    const char *v[5];
    size_t vl[5];
    long long count;
    char user[512];

    if (respwalk_array(&w, &count) != 0 || count != 5)
        return -1;
    for (int i = 0; i < 5; i++) {
        if (respwalk_bulk(&w, &v[i], &vl[i]) != 0)
            return -1;
    }
    if (vl[0] != strlen(HANDOVER_BLOB_TAG) || memcmp(v[0], HANDOVER_BLOB_TAG, vl[0]) != 0 ||
        vl[1] != 1 || (v[1][0] != '2' && v[1][0] != '3') || vl[3] >= sizeof(user) ||
        memchr(v[3], '\0', vl[3]) != NULL || memchr(v[4], '\0', vl[4]) != NULL)
        return -1;
    memcpy(user, v[3], vl[3]);
    user[vl[3]] = '\0';
    if (auth_adopt(c, user, vl[2] == 1 && v[2][0] == '1') != 0)
        return -1;
    c->resp = v[1][0] - '0';
    if (vl[4] > 0 && (c->name = strndup(v[4], vl[4])) == NULL)
        return -1;
    throttle_client_changed(c);   /* the rules see its user and name, as after AUTH */
    return (long)(w.p - blob);
}

/* How many names the commands at CMDS (LEN bytes) subscribe to. */
static long long client_handover_count(const char *cmds, size_t len)
{
    struct respwalk w = {cmds, cmds + len};
    long long total = 0, count;

    while (w.p < w.end) {
        if (respwalk_array(&w, &count) != 0 || count < 2 || respwalk_skip(&w, count) != 0)
            return -1;
        total += count - 1;
    }
    return total;
}

/* A client for FD, not read yet (its turn comes at D); NULL (FD closed)
 * over maxclients: an error line would land among the old one's messages. */
static struct client *client_handover_client(int fd)
{
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    struct client *c;

    memset(&addr, 0, sizeof(addr));
    if (client_count() >= client_cfg->maxclients ||
        getpeername(fd, (struct sockaddr *)&addr, &len) != 0) {
        close(fd);
        return NULL;
    }
    client_accept(fd, (struct sockaddr *)&addr, len, 0);
    if ((c = client_newest()) == NULL || c->fd != fd)
        return NULL;   /* it could not be served: FD is closed */
    client_read_off(c);
    return c;
}

void client_handover_adopt(uint64_t id, int fd, const char *blob, size_t len)
{
    struct client *c = client_handover_client(fd);
    struct client_handover *h;
    long off;

    if (c == NULL) {
        handpass_say('F', id);
        return;
    }
    c->flags |= CLIENT_HANDOVER_IN;
    if ((h = client_handover_state(c)) == NULL ||
        (off = client_handover_header(c, blob, len)) < 0 ||
        (h->confirms = client_handover_count(blob + off, len - (size_t)off)) <= 0) {
        log_warning("hand-over: a subscriber from the old sluice cannot be taken (its user "
                    "is not in this config, or its state is unreadable); it is closed there");
        if (h != NULL)
            h->old_id = id;
        else
            handpass_say('F', id);
        client_kill(c, NULL);
        return;
    }
    h->old_id = id;
    /* Its subscriptions, as its own commands: the rules and the users of
     * this config apply, and the confirmations are dropped (scan). */
    evbuffer_add(c->input, blob + off, len - (size_t)off);
    client_enter(c);
    client_process_input(c);
    client_leave(c);
}
