/* lockheld.c - owns the locks each connection holds (for UNLOCK without
 * OWNER, KEEP, and release when it closes), their KEEP renewals, and the
 * scripts sluice sends of its own to renew or give back a lock (no client
 * waiting: lockheld_send_internal). It tells the lock's waiters when a
 * give-back freed it (lockqueue.c); it never calls lock.c nor lockack.c.
 */
#include "lock.h"
#include "lock_int.h"
#include "lockgrace.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "log.h"
#include "metrics.h"
#include "pause.h"
#include "reply.h"
#include "request.h"
#include "router.h"
#include "scripts.h"
#include "server.h"
#include "slot.h"
#include "stats.h"

/* Renewing more often than this costs Redis more than it protects. */
#define LOCK_KEEP_MIN_PERIOD_MS 100
/* Bytes of a key shown in a log line. */
#define LOCK_LOG_KEY_MAX 64

/* What a KEEP renewal's reply finds its lock by. It lives while the lock
 * is kept or a renewal is out: a reply may come after the connection and
 * its lock_held are gone, and then finds HELD cleared. */
struct lock_keep {
    struct lock_held *held;   /* NULL once the record is freed */
    int inflight;             /* renewals sent, not yet freed */
};

struct lock_client {
    TAILQ_HEAD(, lock_held) held;
};

static const struct script *lockheld_script_release, *lockheld_script_renew;
static int lockheld_keeps_active;   /* KEEP renewals running (lock_keep_active) */

void lockheld_init(const struct script *release, const struct script *renew)
{
    lockheld_script_release = release;
    lockheld_script_renew = renew;
}

/* KEY (LEN bytes) made fit for a log line in OUT: bytes other than
 * printable ASCII as \xHH, cut after LOCK_LOG_KEY_MAX bytes with "...". */
static const char *lockheld_printable(const char *key, size_t len, char *out, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    for (size_t i = 0; i < len && o + 8 < size; i++) {
        unsigned char b = (unsigned char)key[i];
        if (i == LOCK_LOG_KEY_MAX) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (b >= 0x20 && b < 0x7f && b != '\\' && b != '\'') {
            out[o++] = (char)b;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[b >> 4];
            out[o++] = hex[b & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* C's record of KEY held with TOKEN (TOKLEN bytes), or with any token when
 * TOKEN is NULL. */
struct lock_held *lockheld_find(struct client *c, const char *key, size_t len,
                                const char *token, size_t toklen)
{
    struct lock_held *h;

    if (c->locks == NULL)
        return NULL;
    TAILQ_FOREACH(h, &c->locks->held, link) {
        if (h->keylen == len && memcmp(h->key, key, len) == 0 &&
            (token == NULL || (h->toklen == toklen && memcmp(h->token, token, toklen) == 0)))
            return h;
    }
    return NULL;
}

int lock_keep_active(void)
{
    return lockheld_keeps_active;
}

/* H no longer renews: its timer stops, and a renewal still out finds no
 * record when its reply comes (the lock_keep goes with the last one). */
static void lockheld_keep_detach(struct lock_held *h)
{
    if (h->keep_timer != NULL)
        evtimer_del(h->keep_timer);
    if (h->keep == NULL)
        return;
    lockheld_keeps_active--;
    h->keep->held = NULL;
    if (h->keep->inflight == 0)
        free(h->keep);
    h->keep = NULL;
}

/* Forget H (its connection no longer holds the lock) and stop its KEEP. */
void lockheld_free(struct lock_held *h)
{
    TAILQ_REMOVE(&h->client->locks->held, h, link);
    lockheld_keep_detach(h);
    if (h->keep_timer != NULL)
        event_free(h->keep_timer);
    free(h);
}

/* Send a script of sluice's own for KEY, with no client waiting: EVAL
 * rather than EVALSHA, so a flushed script cache needs no second try.
 * CTX_FREE (may be NULL) runs when the request goes, also when it cannot
 * be sent. In cluster mode, while KEY's node is down, it waits for the
 * slot's owner like a client's request (cluster_send_own). */
static void lockheld_send_internal(const struct script *s, const char *key, size_t keylen,
                                   const struct sv *args, int argc, request_reply_fn *on_reply,
                                   void *ctx, void (*ctx_free)(struct request *req))
{
    struct evbuffer *buf = evbuffer_new();
    struct sv keys[1] = {{key, keylen}};
    struct backend_node *node = router_node_for_key(key, keylen);
    char shown[LOCK_LOG_KEY_MAX * 4 + 16];
    int rc;

    scripts_write_eval(buf, s, 1, keys, argc, args);
    /* During a CLIENT PAUSE Redis holds the script: on a one-shot
     * connection. Cluster mode has no CLIENT PAUSE: sluice's shared one. */
    if (cluster_enabled())
        rc = cluster_send_own(node, NULL, 0, 2, slot_for_key(key, keylen), 0, buf, on_reply, ctx,
                              ctx_free);
    else
        rc = backend_send_internal(pause_internal_conn(node, 0, 1), buf, on_reply, ctx, ctx_free);
    if (rc != 0)
        log_info("lock: could not send %s for '%s': backend down", s->name,
                 lockheld_printable(key, keylen, shown, sizeof(shown)));
    evbuffer_free(buf);
}

/* Tell H's client, when it speaks RESP3, that H is lost: the push
 * >4 "sluice" "lock-lost" <key> <fence or -1>. */
static void lockheld_push_lost(const struct lock_held *h)
{
    struct evbuffer *push;

    if (h->client->resp != 3)
        return;
    push = evbuffer_new();
    evbuffer_add(push, ">4\r\n", 4);
    reply_bulk(push, "sluice", 6);
    reply_bulk(push, "lock-lost", 9);
    reply_bulk(push, h->key, h->keylen);
    reply_integer(push, h->fence);
    client_on_push(h->client, NULL, push, evbuffer_get_length(push));
    evbuffer_free(push);
}

/* A renewal that finds its lock gone (expired, or lost in a failover,
 * then maybe taken by another owner) stops KEEP for good: renewing cannot
 * win it back. The record stays, marked lost, so that the connection's
 * next UNLOCK or RENEW of it says NOTOWNER (lock_send). */
static void lockheld_keep_lost(struct lock_held *h)
{
    char shown[LOCK_LOG_KEY_MAX * 4 + 16];

    log_notice("lock: KEEP of '%s' stopped: the lock was lost (expired, or another owner "
               "holds it)", lockheld_printable(h->key, h->keylen, shown, sizeof(shown)));
    STAT_INC(lock_lost);
    (*metrics_counter(METRIC_lock_lost_total, NULL, NULL))++;
    lockheld_keep_detach(h);
    h->lost = 1;
    lockheld_push_lost(h);
}

static void lockheld_keep_ctx_free(struct request *req)
{
    struct lock_keep *keep = req->ctx;

    if (--keep->inflight == 0 && keep->held == NULL)
        free(keep);
    req->ctx = NULL;
}

static void lockheld_keep_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_keep *keep = req->ctx;
    static const char notowner[] = "-NOTOWNER";
    char head[sizeof(notowner) - 1];
    int lost = type == REPLY_ERROR && len >= sizeof(head) &&
               evbuffer_copyout(src, head, sizeof(head)) == (ssize_t)sizeof(head) &&
               memcmp(head, notowner, sizeof(head)) == 0;

    evbuffer_drain(src, len);
    if (lost && keep->held != NULL)
        lockheld_keep_lost(keep->held);
    else if (type == REPLY_ERROR)
        log_info("lock: a KEEP renewal failed; retried on the next tick");
    request_free(req);
}

/* Renew H for another keep_ttl_ms, unless a renewal is still out. */
static void lockheld_keep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lock_held *h = arg;
    char ttl[24], why[200];
    struct sv args[2] = {{h->token, h->toklen}, {ttl, 0}};

    (void)fd;
    (void)what;
    if (h->keep == NULL || h->keep->inflight > 0)
        return;
    /* KEEP came with LOCK: its user must still have both (a reload). */
    if (auth_lock_refusal(h->client, "lock", h->key, h->keylen, why, sizeof(why)) != NULL) {
        lockheld_keep_detach(h);   /* the lock expires */
        return;
    }
    args[1].len = (size_t)reply_format_ll(ttl, h->keep_ttl_ms);
    /* Not acknowledged by replicas: a promotion must wait for its end. */
    lockgrace_note_unacked(slot_for_key(h->key, h->keylen), h->keep_ttl_ms);
    h->keep->inflight++;
    lockheld_send_internal(lockheld_script_renew, h->key, h->keylen, args, 2, lockheld_keep_reply,
                           h->keep, lockheld_keep_ctx_free);
}

/* Renew H every third of TTL_MS, but no more often than
 * LOCK_KEEP_MIN_PERIOD_MS. A renewal still out from before belongs to the
 * old keep and is ignored when it comes back. */
static void lockheld_keep_start(struct lock_held *h, long long ttl_ms)
{
    long long every = ttl_ms / 3 > LOCK_KEEP_MIN_PERIOD_MS ? ttl_ms / 3 : LOCK_KEEP_MIN_PERIOD_MS;
    struct timeval tv = {every / 1000, (every % 1000) * 1000};

    lockheld_keep_detach(h);
    h->keep = calloc(1, sizeof(*h->keep));
    h->keep->held = h;
    lockheld_keeps_active++;
    h->keep_ttl_ms = ttl_ms;
    if (h->keep_timer == NULL)
        h->keep_timer = event_new(server.base, -1, EV_PERSIST, lockheld_keep_cb, h);
    evtimer_add(h->keep_timer, &tv);
}

/* Remember that C holds OP's key with OP's token and FENCE (-1: none);
 * start KEEP renewals if asked. A record of that key found lost goes:
 * the connection holds it again. */
void lockheld_add(struct client *c, const struct lock_op *op, long long fence)
{
    struct lock_held *h;

    if (c->locks == NULL) {
        c->locks = calloc(1, sizeof(*c->locks));
        TAILQ_INIT(&c->locks->held);
    }
    while ((h = lockheld_find(c, op->key, op->keylen, NULL, 0)) != NULL && h->lost)
        lockheld_free(h);
    h = lockheld_find(c, op->key, op->keylen, op->token, op->toklen);
    if (h == NULL) {
        h = calloc(1, sizeof(*h) + op->keylen + op->toklen + 2);
        h->client = c;
        h->key = h->text;
        memcpy(h->key, op->key, op->keylen);
        h->keylen = op->keylen;
        h->token = h->text + op->keylen + 1;
        memcpy(h->token, op->token, op->toklen);
        h->toklen = op->toklen;
        h->explicit_owner = op->explicit_owner;
        TAILQ_INSERT_TAIL(&c->locks->held, h, link);
    }
    h->fence = fence;
    if (op->keep)
        lockheld_keep_start(h, op->ttl_ms);
}

struct lock_release_ctx {
    size_t keylen;
    char key[];
};

static void lockheld_release_ctx_free(struct request *req)
{
    free(req->ctx);
    req->ctx = NULL;
}

static void lockheld_release_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_release_ctx *ctx = req->ctx;

    if (type == REPLY_INTEGER)
        lockqueue_wake(ctx->key, ctx->keylen);
    evbuffer_drain(src, len);
    request_free(req);
}

/* Give back the lock KEY holds for TOKEN: one hold (ALL 0) or every one,
 * owner-checked by the release script; a waiter here then tries. */
void lockheld_give_back(const char *key, size_t keylen, const char *token, size_t toklen,
                        int all)
{
    struct lock_release_ctx *ctx = malloc(sizeof(*ctx) + keylen);
    struct sv args[2] = {{token, toklen}, {all ? "all" : "one", 3}};

    ctx->keylen = keylen;
    memcpy(ctx->key, key, keylen);
    lockheld_send_internal(lockheld_script_release, key, keylen, args, 2, lockheld_release_reply,
                           ctx, lockheld_release_ctx_free);
}

/* Drop every hold of TOKEN on KEY, for a client that is gone. */
void lockheld_release_all(const char *key, size_t keylen, const char *token, size_t toklen)
{
    lockheld_give_back(key, keylen, token, toklen, 1);
}

void lock_client_closed(struct client *c)
{
    struct lock_held *h;

    if (c->locks == NULL)
        return;
    while ((h = TAILQ_FIRST(&c->locks->held)) != NULL) {
        if (!h->explicit_owner && !h->lost)
            lockheld_release_all(h->key, h->keylen, h->token, h->toklen);
        lockheld_free(h);
    }
    free(c->locks);
    c->locks = NULL;
}
