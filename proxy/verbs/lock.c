/* lock.c - owns the lock verbs: argument checking, the rewrite into
 * EVALSHA of lua/lock_*.lua, waiting (first come, first served per key on
 * this sluice), KEEP renewals, and releasing a connection's locks when it
 * closes. Time always comes from Redis (PEXPIRE, PTTL), never from here.
 * Keys and tokens are arbitrary bytes: always pointer + length, never C
 * strings. Each verb blocks its client's later commands until answered.
 *
 *   LOCK k 30000 WAIT 500 -> EVALSHA lock_acquire 2 k fence(k) token 30000 0 0
 *        {1, holds, fence} -> token            {0, pttl} -> wait or nil
 *   waiters on k:  [op1 (head, retries)] [op2] [op3]   woken by an UNLOCK
 */
#include "lock.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "lockgrace.h"
#include "log.h"
#include "metrics.h"
#include "reply.h"
#include "pause.h"
#include "placement.h"
#include "request.h"
#include "router.h"
#include "scripts.h"
#include "server.h"
#include "value.h"
#include "slot.h"
#include "stats.h"

#define LOCK_TOKEN_BYTES 16
#define LOCK_BACKOFF_MIN_MS 5
#define LOCK_BACKOFF_MAX_MS 100
#define LOCK_QUEUE_BUCKETS 1024
#define LOCK_FENCE_PREFIX "sluice:fence:{"
/* Renewing more often than this costs Redis more than it protects. */
#define LOCK_KEEP_MIN_PERIOD_MS 100
/* Longest ttl_ms: half of LLONG_MAX, so that Redis's clock plus it never
 * overflows (Redis refuses that as an invalid expire time). */
#define LOCK_TTL_MAX_MS (LLONG_MAX / 2)
/* Bytes of a key shown in a log line. */
#define LOCK_LOG_KEY_MAX 64

/* Most replicas ACKS may ask for (as the config key's bound). */
#define LOCK_ACKS_MAX 1000

enum lock_verb { LOCK_ACQUIRE, LOCK_RELEASE, LOCK_RENEW };

static const char *const lock_verb_names[] = {"lock", "unlock", "renew"};
static const int lock_min_args[] = {3, 2, 3};

/* One LOCK, UNLOCK or RENEW of a client, owned by its request (ctx). */
struct lock_op {
    enum lock_verb verb;
    struct request *req;
    char *key;                /* keylen bytes, any bytes */
    size_t keylen;
    char *token;              /* toklen bytes, any bytes */
    size_t toklen;
    int explicit_owner;
    int keep;
    int fence;
    int wait;
    int blocks;               /* it blocked its client: unblock when answered */
    int inflight;             /* its EVALSHA is out */
    int noscript_retried;
    int epoch_retried;        /* sent again once after a fence epoch refusal */
    long long acks;           /* replicas to WAIT for; -1: lock_replica_acks */
    struct lock_ack *ack;     /* set while its script + WAIT are out */
    long long ttl_ms;
    long long wait_ms;
    uint64_t started_us;      /* when it came (lock_wait_seconds) */
    uint64_t deadline_ms;
    int backoff_ms;
    struct event *timer;
    struct lock_queue *queue; /* set while it waits in its key's FIFO */
    TAILQ_ENTRY(lock_op) queue_link;
};

/* A grant or renewal waiting for its replicas (lock_ack_send). */
struct lock_ack {
    struct lock_op *op;       /* NULL once OP is gone (its client closed) */
    int out;                  /* its requests not yet freed (script, WAIT) */
    int done;
    int type;                 /* the script's reply type; 0: none came */
    int nvals;
    long long vals[3];
    long long need;
    char text[160];           /* the script's reply, first line */
    enum lock_verb verb;
    int explicit_owner;
    size_t keylen, toklen;
    char bytes[];             /* key, then token: to give a grant back when OP is gone */
};

/* The waiters on one key, first come first served. */
struct lock_queue {
    char *key;
    size_t keylen;
    TAILQ_HEAD(, lock_op) ops;
    struct lock_queue *next;  /* hash chain */
};

/* What a KEEP renewal's reply finds its lock by. It lives while the lock
 * is kept or a renewal is out: a reply may come after the connection and
 * its lock_held are gone, and then finds HELD cleared. */
struct lock_keep {
    struct lock_held *held;   /* NULL once the record is freed */
    int inflight;             /* renewals sent, not yet freed */
};

/* A lock a connection took: for UNLOCK without OWNER, KEEP, and release
 * when the connection closes. */
struct lock_held {
    TAILQ_ENTRY(lock_held) link;
    struct client *client;    /* whose it is */
    char *key;                /* both point into text[] */
    size_t keylen;
    char *token;
    size_t toklen;
    int explicit_owner;
    int lost;                 /* KEEP found it lost: UNLOCK / RENEW say NOTOWNER */
    long long fence;          /* its fence, -1 without FENCE */
    long long keep_ttl_ms;
    struct event *keep_timer;
    struct lock_keep *keep;   /* set while KEEP renews it */
    char text[];              /* key, NUL, token, NUL */
};

struct lock_client {
    TAILQ_HEAD(, lock_held) held;
};

static struct lock_queue *lock_queues[LOCK_QUEUE_BUCKETS];
/* A short tag per hash slot, so that a fence key can share its lock's slot. */
static char lock_slot_tags[SLOT_COUNT][8];
static const struct script *lock_script_acquire, *lock_script_release, *lock_script_renew;

static void lock_send(struct lock_op *op);

int lock_init(void)
{
    int found = 0;

    for (int v = 0; v < 3; v++) {   /* every series shows from the start, at 0 */
        metrics_counter(METRIC_lock_operations_total, lock_verb_names[v], "ok");
        metrics_counter(METRIC_lock_operations_total, lock_verb_names[v], "fail");
        metrics_counter(METRIC_lock_operations_total, lock_verb_names[v], "error");
    }

    for (unsigned i = 0; found < SLOT_COUNT; i++) {
        char tag[8];
        int n = snprintf(tag, sizeof(tag), "%u", i);
        uint16_t slot = slot_crc16(tag, (size_t)n) & (SLOT_COUNT - 1);
        if (lock_slot_tags[slot][0] == '\0') {
            memcpy(lock_slot_tags[slot], tag, (size_t)n + 1);
            found++;
        }
    }
    lock_script_acquire = scripts_find("lock_acquire");
    lock_script_release = scripts_find("lock_release");
    lock_script_renew = scripts_find("lock_renew");
    /* Startup counts as a change: sluice cannot know what was granted
     * before it. The backends' first report begins it again. */
    lockgrace_primary_changed(0, SLOT_COUNT - 1, 0, "startup");
    return lock_script_acquire && lock_script_release && lock_script_renew ? 0 : -1;
}

size_t lock_fence_key(const char *key, size_t len, char *out, size_t size)
{
    const char *tag = lock_slot_tags[slot_for_key(key, len)];
    size_t prefix = sizeof(LOCK_FENCE_PREFIX) - 1, taglen = strlen(tag);
    size_t n = prefix + taglen + 2;   /* "}:" */

    if (n + len + 1 > size)
        return n + len;
    memcpy(out, LOCK_FENCE_PREFIX, prefix);
    memcpy(out + prefix, tag, taglen);
    memcpy(out + prefix + taglen, "}:", 2);
    memcpy(out + n, key, len);
    out[n + len] = '\0';
    return n + len;
}

/* LEN bytes at P, copied to the heap with a NUL after them (for the
 * debugger's sake: users of the copy go by LEN). */
static char *lock_memdup(const char *p, size_t len)
{
    char *copy = malloc(len + 1);

    memcpy(copy, p, len);
    copy[len] = '\0';
    return copy;
}

/* KEY (LEN bytes) made fit for a log line in OUT: bytes other than
 * printable ASCII as \xHH, cut after LOCK_LOG_KEY_MAX bytes with "...". */
static const char *lock_printable(const char *key, size_t len, char *out, size_t size)
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

static int lock_verb_of(const struct sv *argv)
{
    for (int v = 0; v < 3; v++) {
        if (sv_ieq(argv[0], lock_verb_names[v]))
            return v;
    }
    return -1;
}

int lock_wants(const struct request *req, int argc, const struct sv *argv)
{
    return req->cmd == NULL && argc > 0 && lock_verb_of(argv) >= 0;
}

/* ---- waiter queues ---- */

static unsigned lock_hash(const char *key, size_t len)
{
    unsigned h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 16777619u;
    return h % LOCK_QUEUE_BUCKETS;
}

static struct lock_queue *lock_queue_find(const char *key, size_t len, int create)
{
    struct lock_queue **slot = &lock_queues[lock_hash(key, len)], *q;

    for (q = *slot; q != NULL; q = q->next) {
        if (q->keylen == len && memcmp(q->key, key, len) == 0)
            return q;
    }
    if (!create)
        return NULL;
    q = calloc(1, sizeof(*q));
    q->key = malloc(len + 1);
    memcpy(q->key, key, len);
    q->key[len] = '\0';
    q->keylen = len;
    TAILQ_INIT(&q->ops);
    q->next = *slot;
    *slot = q;
    return q;
}

static void lock_queue_drop_if_empty(struct lock_queue *q)
{
    struct lock_queue **p = &lock_queues[lock_hash(q->key, q->keylen)];

    if (!TAILQ_EMPTY(&q->ops))
        return;
    while (*p != q)
        p = &(*p)->next;
    *p = q->next;
    free(q->key);
    free(q);
}

/* The head waiter of KEY tries again now (a release passed through). */
static void lock_wake(const char *key, size_t len)
{
    struct lock_queue *q = lock_queue_find(key, len, 0);
    struct lock_op *head = q != NULL ? TAILQ_FIRST(&q->ops) : NULL;

    if (head == NULL || head->inflight)
        return;
    if (head->timer != NULL)
        evtimer_del(head->timer);
    lock_send(head);
}

/* OP leaves its key's queue; the next waiter, now first, tries at once. */
static void lock_dequeue(struct lock_op *op)
{
    struct lock_queue *q = op->queue;
    int was_head;

    if (q == NULL)
        return;
    was_head = TAILQ_FIRST(&q->ops) == op;
    TAILQ_REMOVE(&q->ops, op, queue_link);
    op->queue = NULL;
    if (was_head && !TAILQ_EMPTY(&q->ops))
        lock_wake(q->key, q->keylen);
    else
        lock_queue_drop_if_empty(q);
}

/* ---- per-connection held locks ---- */

/* C's record of KEY held with TOKEN (TOKLEN bytes), or with any token when
 * TOKEN is NULL. */
static struct lock_held *lock_held_find(struct client *c, const char *key, size_t len,
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

static int lock_keeps_active;   /* KEEP renewals running (lock_keep_active) */

enum lock_result { LOCK_OK, LOCK_FAIL, LOCK_ERROR };

/* Count OP's outcome in lock_operations_total; a LOCK ... WAIT also in
 * lock_wait_seconds, with the time it took to get its answer. */
static void lock_count(const struct lock_op *op, enum lock_result result)
{
    static const char *const results[] = {"ok", "fail", "error"};

    (*metrics_counter(METRIC_lock_operations_total, lock_verb_names[op->verb], results[result]))++;
    if (op->verb == LOCK_ACQUIRE && op->wait && result != LOCK_ERROR)
        metrics_hist_observe(metrics_hist(METRIC_lock_wait_seconds, NULL, NULL),
                             server_now_us() - op->started_us);
}

int lock_keep_active(void)
{
    return lock_keeps_active;
}

/* H no longer renews: its timer stops, and a renewal still out finds no
 * record when its reply comes (the lock_keep goes with the last one). */
static void lock_keep_detach(struct lock_held *h)
{
    if (h->keep_timer != NULL)
        evtimer_del(h->keep_timer);
    if (h->keep == NULL)
        return;
    lock_keeps_active--;
    h->keep->held = NULL;
    if (h->keep->inflight == 0)
        free(h->keep);
    h->keep = NULL;
}

/* Forget H (its connection no longer holds the lock) and stop its KEEP. */
static void lock_held_free(struct lock_held *h)
{
    TAILQ_REMOVE(&h->client->locks->held, h, link);
    lock_keep_detach(h);
    if (h->keep_timer != NULL)
        event_free(h->keep_timer);
    free(h);
}

/* Send a script of sluice's own for KEY, with no client waiting: EVAL
 * rather than EVALSHA, so a flushed script cache needs no second try.
 * CTX_FREE (may be NULL) runs when the request goes, also when it cannot
 * be sent. In cluster mode, while KEY's node is down, it waits for the
 * slot's owner like a client's request (cluster_send_own). */
static void lock_send_internal(const struct script *s, const char *key, size_t keylen,
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
        rc = cluster_send_own(node, 0, 2, slot_for_key(key, keylen), 0, buf, on_reply, ctx, ctx_free);
    else
        rc = backend_send_internal(pause_internal_conn(node, 0, 1), buf, on_reply, ctx, ctx_free);
    if (rc != 0)
        log_info("lock: could not send %s for '%s': backend down", s->name,
                 lock_printable(key, keylen, shown, sizeof(shown)));
    evbuffer_free(buf);
}

/* Tell H's client, when it speaks RESP3, that H is lost: the push
 * >4 "sluice" "lock-lost" <key> <fence or -1>. */
static void lock_push_lost(const struct lock_held *h)
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
static void lock_keep_lost(struct lock_held *h)
{
    char shown[LOCK_LOG_KEY_MAX * 4 + 16];

    log_notice("lock: KEEP of '%s' stopped: the lock was lost (expired, or another owner "
               "holds it)", lock_printable(h->key, h->keylen, shown, sizeof(shown)));
    STAT_INC(lock_lost);
    (*metrics_counter(METRIC_lock_lost_total, NULL, NULL))++;
    lock_keep_detach(h);
    h->lost = 1;
    lock_push_lost(h);
}

static void lock_keep_ctx_free(struct request *req)
{
    struct lock_keep *keep = req->ctx;

    if (--keep->inflight == 0 && keep->held == NULL)
        free(keep);
    req->ctx = NULL;
}

static void lock_keep_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_keep *keep = req->ctx;
    static const char notowner[] = "-NOTOWNER";
    char head[sizeof(notowner) - 1];
    int lost = type == REPLY_ERROR && len >= sizeof(head) &&
               evbuffer_copyout(src, head, sizeof(head)) == (ssize_t)sizeof(head) &&
               memcmp(head, notowner, sizeof(head)) == 0;

    evbuffer_drain(src, len);
    if (lost && keep->held != NULL)
        lock_keep_lost(keep->held);
    else if (type == REPLY_ERROR)
        log_info("lock: a KEEP renewal failed; retried on the next tick");
    request_free(req);
}

/* Renew H for another keep_ttl_ms, unless a renewal is still out. */
static void lock_keep_cb(evutil_socket_t fd, short what, void *arg)
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
        lock_keep_detach(h);   /* the lock expires */
        return;
    }
    args[1].len = (size_t)reply_format_ll(ttl, h->keep_ttl_ms);
    h->keep->inflight++;
    lock_send_internal(lock_script_renew, h->key, h->keylen, args, 2, lock_keep_reply, h->keep,
                       lock_keep_ctx_free);
}

/* Renew H every third of TTL_MS, but no more often than
 * LOCK_KEEP_MIN_PERIOD_MS. A renewal still out from before belongs to the
 * old keep and is ignored when it comes back. */
static void lock_keep_start(struct lock_held *h, long long ttl_ms)
{
    long long every = ttl_ms / 3 > LOCK_KEEP_MIN_PERIOD_MS ? ttl_ms / 3 : LOCK_KEEP_MIN_PERIOD_MS;
    struct timeval tv = {every / 1000, (every % 1000) * 1000};

    lock_keep_detach(h);
    h->keep = calloc(1, sizeof(*h->keep));
    h->keep->held = h;
    lock_keeps_active++;
    h->keep_ttl_ms = ttl_ms;
    if (h->keep_timer == NULL)
        h->keep_timer = event_new(server.base, -1, EV_PERSIST, lock_keep_cb, h);
    evtimer_add(h->keep_timer, &tv);
}

/* Remember that C holds OP's key with OP's token and FENCE (-1: none);
 * start KEEP renewals if asked. A record of that key found lost goes:
 * the connection holds it again. */
static void lock_held_add(struct client *c, const struct lock_op *op, long long fence)
{
    struct lock_held *h;

    if (c->locks == NULL) {
        c->locks = calloc(1, sizeof(*c->locks));
        TAILQ_INIT(&c->locks->held);
    }
    while ((h = lock_held_find(c, op->key, op->keylen, NULL, 0)) != NULL && h->lost)
        lock_held_free(h);
    h = lock_held_find(c, op->key, op->keylen, op->token, op->toklen);
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
        lock_keep_start(h, op->ttl_ms);
}

struct lock_release_ctx {
    size_t keylen;
    char key[];
};

static void lock_release_ctx_free(struct request *req)
{
    free(req->ctx);
    req->ctx = NULL;
}

static void lock_release_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_release_ctx *ctx = req->ctx;

    if (type == REPLY_INTEGER)
        lock_wake(ctx->key, ctx->keylen);
    evbuffer_drain(src, len);
    request_free(req);
}

/* Give back the lock KEY holds for TOKEN: one hold (ALL 0) or every one,
 * owner-checked by the release script; a waiter here then tries. */
static void lock_give_back(const char *key, size_t keylen, const char *token, size_t toklen,
                           int all)
{
    struct lock_release_ctx *ctx = malloc(sizeof(*ctx) + keylen);
    struct sv args[2] = {{token, toklen}, {all ? "all" : "one", 3}};

    ctx->keylen = keylen;
    memcpy(ctx->key, key, keylen);
    lock_send_internal(lock_script_release, key, keylen, args, 2, lock_release_reply, ctx,
                       lock_release_ctx_free);
}

/* Drop every hold of TOKEN on KEY, for a client that is gone. */
static void lock_release_all(const char *key, size_t keylen, const char *token, size_t toklen)
{
    lock_give_back(key, keylen, token, toklen, 1);
}

void lock_client_closed(struct client *c)
{
    struct lock_held *h;

    if (c->locks == NULL)
        return;
    while ((h = TAILQ_FIRST(&c->locks->held)) != NULL) {
        if (!h->explicit_owner && !h->lost)
            lock_release_all(h->key, h->keylen, h->token, h->toklen);
        lock_held_free(h);
    }
    free(c->locks);
    c->locks = NULL;
}

/* ---- one operation ---- */

static void lock_op_free(struct request *req)
{
    struct lock_op *op = req->ctx;

    if (op == NULL)
        return;
    lock_dequeue(op);
    if (op->ack != NULL)
        op->ack->op = NULL;   /* its replies come to nobody: a grant is given back */
    if (op->timer != NULL)
        event_free(op->timer);
    free(op->key);
    free(op->token);
    free(op);
    req->ctx = NULL;
}

/* Answer OP's request with the reply written (client_reply_buffer), and
 * let the client go on. */
static void lock_finish(struct lock_op *op)
{
    struct request *req = op->req;
    struct client *c = req->client;
    int blocked = op->blocks;

    op->blocks = 0;
    lock_dequeue(op);
    if (op->timer != NULL)
        evtimer_del(op->timer);
    /* Answering may free REQ and OP, and close C over its output limit. */
    if (client_answer(c, req) == 0 && blocked)
        client_unblock(c);
}

static void lock_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lock_op *op = arg;

    (void)fd;
    (void)what;
    if (server_now_ms() >= op->deadline_ms) {
        reply_nil(client_reply_buffer(op->req->client, op->req), op->req->client->resp);
        lock_finish(op);
        return;
    }
    lock_send(op);
}

/* Append OP's script call to OUT: EVAL (with the body) when EVAL is set,
 * else EVALSHA. REPLICAS: how many replicas the script requires online
 * before it writes (0: no check). The fence key is as long as the lock's
 * key plus a few bytes: on the heap when that is large. */
static void lock_write_script(const struct lock_op *op, struct evbuffer *out, int eval,
                              long long replicas)
{
    char fence_stack[256], ttl[24], epoch[24], need[24];
    char *fence = fence_stack;
    struct sv keys[2] = {{op->key, op->keylen}, {NULL, 0}};
    struct sv args[7] = {{op->token, op->toklen}, {ttl, 0}};
    const struct script *s;
    int numkeys = 1, argc = 2;
    int slot = slot_for_key(op->key, op->keylen);

    args[1].len = (size_t)reply_format_ll(ttl, op->ttl_ms);
    if (op->verb == LOCK_ACQUIRE) {
        size_t fence_len = lock_fence_key(op->key, op->keylen, NULL, 0);
        if (fence_len + 1 > sizeof(fence_stack))
            fence = malloc(fence_len + 1);
        lock_fence_key(op->key, op->keylen, fence, fence_len + 1);
        keys[1] = (struct sv){fence, fence_len};
        s = lock_script_acquire;
        numkeys = 2;
        args[2] = (struct sv){op->explicit_owner ? "1" : "0", 1};
        args[3] = (struct sv){op->fence ? "1" : "0", 1};
        args[4] = (struct sv){epoch, (size_t)reply_format_ll(epoch, lockgrace_epoch(slot))};
        args[5] = (struct sv){cluster_enabled() ? "1" : "0", 1};
        args[6] = (struct sv){need, (size_t)reply_format_ll(need, replicas)};
        argc = 7;
    } else if (op->verb == LOCK_RELEASE) {
        s = lock_script_release;
        args[1] = (struct sv){"one", 3};
    } else {
        s = lock_script_renew;
        args[2] = (struct sv){need, (size_t)reply_format_ll(need, replicas)};
        argc = 3;
    }
    if (eval)
        scripts_write_eval(out, s, numkeys, keys, argc, args);
    else
        scripts_write_evalsha(out, s, numkeys, keys, argc, args);
    if (fence != fence_stack)
        free(fence);
}

/* Write OP's script call into its request's raw bytes. After a NOSCRIPT,
 * EVAL carries the body: Redis caches it and runs it at once. */
static void lock_write_call(struct lock_op *op)
{
    struct request *req = op->req;

    if (req->raw == NULL)
        req->raw = evbuffer_new();
    evbuffer_drain(req->raw, evbuffer_get_length(req->raw));
    lock_write_script(op, req->raw, op->noscript_retried, 0);
    req->raw_len = evbuffer_get_length(req->raw);
}

/* Whether OP may still go: its client's user may have been narrowed by a
 * reload since the gate let OP in (a LOCK that waits tries for long).
 * Returns 0 when OP was refused and answered. */
static int lock_still_allowed(struct lock_op *op)
{
    char why[200];
    const char *refusal = auth_lock_refusal(op->req->client, lock_verb_names[op->verb], op->key,
                                            op->keylen, why, sizeof(why));

    if (refusal == NULL)
        return 1;
    reply_error(client_reply_buffer(op->req->client, op->req), "%s", refusal);
    lock_finish(op);
    return 0;
}

/* Send OP's script call, when it is still allowed (else it is answered
 * with the refusal). When it cannot be sent, client.c says so through
 * lock_on_reply like any error reply. In cluster mode it goes to the
 * lock's slot (LOCK is placed locally, so nothing else set it), and each
 * attempt of a waiting LOCK has its own cluster_max_redirects. */
/* ---- grants and renewals acknowledged by replicas (ACKS) ----
 *
 *   one-shot connection: EVAL lock_acquire ... n   -> {1,..} | {0,pttl} | -NOREPLICAS
 *                        WAIT n timeout            -> :acked
 *   on WAIT's reply: granted and acked >= n -> answered; granted, fewer ->
 *   given back (owner-checked) and -NOREPLICAS. WAIT counts the writes of
 *   its own connection: the script goes on the same one, and no other
 *   client's commands wait behind it.
 */

static void lock_acquired(struct lock_op *op, long long fence);
static void lock_busy(struct lock_op *op, long long pttl_ms);
static void lock_finish(struct lock_op *op);
static void lock_timer_cb(evutil_socket_t fd, short what, void *arg);

/* Answer OP, which its script refused or which too few replicas
 * acknowledged: the NOREPLICAS error; a renewal's lock is no longer held
 * by this connection. */
static void lock_noreplicas(struct lock_op *op, long long need)
{
    struct lock_held *h = lock_held_find(op->req->client, op->key, op->keylen, op->token,
                                         op->toklen);

    if (op->verb == LOCK_RENEW && h != NULL)
        lock_held_free(h);
    STAT_INC(lock_noreplicas);
    reply_error(client_reply_buffer(op->req->client, op->req),
                "-NOREPLICAS lock not acknowledged by %lld replicas within %lld ms; not held",
                need, server.cfg.lock_replica_timeout_ms);
    lock_count(op, LOCK_FAIL);
    lock_finish(op);
}

/* lock_acquire refused OP's fence epoch: the key has seen SEEN. In
 * standalone mode another sluice saw a primary change this one did not:
 * take its epoch and try once more. In cluster mode the node's config
 * epoch is older than one the key saw (a primary that lost its slots). */
static void lock_epoch_refused(struct lock_op *op, long long seen)
{
    if (!cluster_enabled() && !op->epoch_retried) {
        lockgrace_adopt_epoch(seen);
        op->epoch_retried = 1;
        lock_send(op);
        return;
    }
    if (cluster_enabled())
        cluster_want_refresh();
    reply_error(client_reply_buffer(op->req->client, op->req),
                "-TRYAGAIN the lock's fence has seen epoch %lld, newer than this primary's; "
                "not held", seen);
    lock_count(op, LOCK_FAIL);
    lock_finish(op);
}

/* An error the script (or the connection) answered OP with, passed on:
 * a redirection becomes TRYAGAIN (the slot map is asked again). */
static void lock_ack_error(struct lock_op *op, const char *text)
{
    int notowner = strncmp(text, "-NOTOWNER", 9) == 0;
    struct lock_held *h = lock_held_find(op->req->client, op->key, op->keylen, op->token,
                                         op->toklen);

    if (notowner && h != NULL)
        lock_held_free(h);
    if (strncmp(text, "-MOVED", 6) == 0 || strncmp(text, "-ASK", 4) == 0) {
        cluster_want_refresh();
        text = "-TRYAGAIN the lock's slot moved; try again";
    }
    reply_error(client_reply_buffer(op->req->client, op->req), "%s",
                text[0] != '\0' ? text : "backend connection lost");
    lock_count(op, notowner ? LOCK_FAIL : LOCK_ERROR);
    lock_finish(op);
}

/* Both replies of ACK came (ACKED: WAIT's count, -1 when it failed):
 * answer its op, or give back a grant nobody waits for. */
static void lock_ack_done(struct lock_ack *ack, long long acked)
{
    struct lock_op *op = ack->op;
    const char *token = ack->bytes + ack->keylen;
    int granted = ack->verb == LOCK_ACQUIRE ? ack->type == REPLY_ARRAY && ack->nvals >= 1 &&
                                                  ack->vals[0] == 1
                                            : ack->type == REPLY_STATUS;
    int enough = acked >= ack->need;

    ack->done = 1;
    if (op != NULL) {
        op->ack = NULL;
        op->inflight = 0;
    }
    int refused = strncmp(ack->text, "-NOREPLICAS", 11) == 0;

    /* Too few acknowledgements: a grant is given back (one hold), a
     * renewal's lock wholly, also one the script refused to renew: the
     * reply says "not held", and its holder must take it as lost. */
    if ((granted && (!enough || (op == NULL && ack->verb == LOCK_ACQUIRE && !ack->explicit_owner))) ||
        (refused && ack->verb == LOCK_RENEW))
        lock_give_back(ack->bytes, ack->keylen, token, ack->toklen,
                       ack->verb == LOCK_RENEW || (op == NULL && !ack->explicit_owner));
    if (op == NULL)
        return;
    if (granted && enough && ack->verb == LOCK_ACQUIRE) {
        lock_acquired(op, ack->vals[2]);
    } else if (granted && enough) {
        evbuffer_add(client_reply_buffer(op->req->client, op->req), "+OK\r\n", 5);
        lock_count(op, LOCK_OK);
        lock_finish(op);
    } else if (granted || refused) {
        lock_noreplicas(op, ack->need);
    } else if (ack->type == REPLY_ARRAY && ack->nvals >= 2 && ack->vals[0] == 0) {
        lock_busy(op, ack->vals[1]);
    } else if (ack->type == REPLY_ARRAY && ack->nvals >= 2 && ack->vals[0] == -1) {
        lock_epoch_refused(op, ack->vals[1]);
    } else {
        lock_ack_error(op, ack->text);
    }
}

static void lock_ack_ctx_free(struct request *req)
{
    struct lock_ack *ack = req->ctx;

    req->ctx = NULL;
    if (--ack->out > 0)
        return;
    if (!ack->done)
        lock_ack_done(ack, -1);   /* freed unanswered (its connection could not send) */
    free(ack);
}

static void lock_ack_script_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_ack *ack = req->ctx;
    char buf[160];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;

    evbuffer_remove(src, buf, n);
    evbuffer_drain(src, len - n);
    buf[n] = '\0';
    ack->type = type;
    if (type == REPLY_ARRAY)
        ack->nvals = reply_parse_ints(buf, n, ack->vals, 3);
    memcpy(ack->text, buf, strcspn(buf, "\r\n"));
    request_free(req);
}

static void lock_ack_wait_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_ack *ack = req->ctx;
    char buf[32];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    long long acked = -1;

    evbuffer_remove(src, buf, n);
    evbuffer_drain(src, len - n);
    buf[n] = '\0';
    if (type != REPLY_INTEGER || reply_parse_ints(buf, n, &acked, 1) != 1)
        acked = -1;
    lock_ack_done(ack, acked);
    request_free(req);
}

/* Send OP's script, requiring NEED replicas online, and WAIT NEED
 * lock_replica_timeout_ms after it, on a one-shot connection to the
 * lock's primary. Answered in lock_ack_done (or at once, with no
 * connection). OP must not be touched after this returns. */
static void lock_ack_send(struct lock_op *op, long long need)
{
    struct backend_node *node = cluster_enabled() ? cluster_node_for_slot(op->req->slot)
                                                  : backend_default_node();
    struct backend_conn *conn = node != NULL ? backend_control_conn(node) : NULL;
    struct lock_ack *ack;
    struct evbuffer *buf;
    char n[24], t[24];
    int nlen, tlen;

    if (conn == NULL) {
        lock_ack_error(op, "-ERR backend unavailable: no connection for the lock's replica "
                           "acknowledgements");
        return;
    }
    ack = calloc(1, sizeof(*ack) + op->keylen + op->toklen);
    ack->op = op;
    ack->need = need;
    ack->verb = op->verb;
    ack->explicit_owner = op->explicit_owner;
    ack->keylen = op->keylen;
    ack->toklen = op->toklen;
    memcpy(ack->bytes, op->key, op->keylen);
    memcpy(ack->bytes + op->keylen, op->token, op->toklen);
    ack->out = 2;
    op->ack = ack;
    op->inflight = 1;
    buf = evbuffer_new();
    lock_write_script(op, buf, 1, need);
    backend_send_internal(conn, buf, lock_ack_script_reply, ack, lock_ack_ctx_free);
    evbuffer_drain(buf, evbuffer_get_length(buf));
    nlen = snprintf(n, sizeof(n), "%lld", need);
    tlen = snprintf(t, sizeof(t), "%lld", server.cfg.lock_replica_timeout_ms);
    evbuffer_add_printf(buf, "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", nlen, n, tlen, t);
    backend_send_internal(conn, buf, lock_ack_wait_reply, ack, lock_ack_ctx_free);
    evbuffer_free(buf);
}

/* An UNLOCK or RENEW of a lock its KEEP found lost, on this connection:
 * answered NOTOWNER here (as Redis would for a lock not held) and the
 * record goes. Returns 1 when it answered. */
static int lock_answered_lost(struct lock_op *op)
{
    struct lock_held *h;

    if (op->verb == LOCK_ACQUIRE)
        return 0;
    h = lock_held_find(op->req->client, op->key, op->keylen, op->token, op->toklen);
    if (h == NULL || !h->lost)
        return 0;
    lock_held_free(h);
    reply_error(client_reply_buffer(op->req->client, op->req), "%s",
                "-NOTOWNER the lock is not held by this owner");
    lock_count(op, LOCK_FAIL);
    lock_finish(op);
    return 1;
}

/* A LOCK on a shard in its failover grace: answered TRYAGAIN, or with
 * WAIT tried again when the grace ends (or answered nil at its
 * deadline). Returns 1 when OP was answered or waits. */
static int lock_in_grace(struct lock_op *op)
{
    uint64_t now = server_now_ms(), left = lockgrace_left_ms(slot_for_key(op->key, op->keylen));
    uint64_t delay;
    struct timeval tv;

    if (op->verb != LOCK_ACQUIRE || left == 0)
        return 0;
    if (!op->wait || now >= op->deadline_ms) {
        reply_error(client_reply_buffer(op->req->client, op->req),
                    "-TRYAGAIN lock grants resume on this shard in %llu ms (failover grace)",
                    (unsigned long long)left);
        lock_count(op, LOCK_FAIL);
        lock_finish(op);
        return 1;
    }
    delay = left < op->deadline_ms - now ? left : op->deadline_ms - now;
    tv.tv_sec = (time_t)(delay / 1000);
    tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
    if (op->timer == NULL)
        op->timer = evtimer_new(server.base, lock_timer_cb, op);
    evtimer_add(op->timer, &tv);
    return 1;
}

static void lock_send(struct lock_op *op)
{
    long long acks;

    if (!lock_still_allowed(op) || lock_answered_lost(op) || lock_in_grace(op))
        return;
    op->req->slot = slot_for_key(op->key, op->keylen);
    op->req->redirects = 0;
    acks = op->acks >= 0 ? op->acks : server.cfg.lock_replica_acks;
    if (op->verb != LOCK_RELEASE && acks > 0) {
        lock_ack_send(op, acks);
        return;
    }
    lock_write_call(op);
    op->inflight = 1;
    op->req->place = PLACE_LOCAL;   /* routed afresh: a pause may have begun or ended */
    client_forward(op->req->client, op->req);
}

static void lock_acquired(struct lock_op *op, long long fence)
{
    struct request *req = op->req;
    struct client *c = req->client;
    struct evbuffer *out;

    if (!op->explicit_owner || op->keep)
        lock_held_add(c, op, op->fence ? fence : -1);
    lock_count(op, LOCK_OK);
    out = client_reply_buffer(c, req);
    if (op->fence) {
        reply_array_header(out, 2);
        reply_bulk(out, op->token, op->toklen);
        reply_integer(out, fence);
    } else {
        reply_bulk(out, op->token, op->toklen);
    }
    lock_finish(op);
}

/* The lock is someone else's: answer nil, or wait (PTTL tells how long at
 * most until it could be free). */
static void lock_busy(struct lock_op *op, long long pttl_ms)
{
    uint64_t now = server_now_ms();
    long long delay_ms;
    struct timeval tv;

    if (!op->wait || now >= op->deadline_ms) {
        lock_count(op, LOCK_FAIL);
        reply_nil(client_reply_buffer(op->req->client, op->req), op->req->client->resp);
        lock_finish(op);
        return;
    }
    if (op->queue == NULL) {
        op->queue = lock_queue_find(op->key, op->keylen, 1);
        TAILQ_INSERT_TAIL(&op->queue->ops, op, queue_link);
    }
    delay_ms = (long long)(op->deadline_ms - now);
    if (TAILQ_FIRST(&op->queue->ops) == op) {
        /* Only the first waiter polls; a release here wakes it sooner. */
        if (pttl_ms > 0 && pttl_ms < delay_ms)
            delay_ms = pttl_ms;
        if (op->backoff_ms < delay_ms)
            delay_ms = op->backoff_ms;
        op->backoff_ms = op->backoff_ms * 2 > LOCK_BACKOFF_MAX_MS ? LOCK_BACKOFF_MAX_MS
                                                                    : op->backoff_ms * 2;
    }
    tv.tv_sec = delay_ms / 1000;
    tv.tv_usec = (delay_ms % 1000) * 1000;
    if (op->timer == NULL)
        op->timer = evtimer_new(server.base, lock_timer_cb, op);
    evtimer_add(op->timer, &tv);
}

/* The reply to a rewritten LOCK/UNLOCK/RENEW: LEN bytes at the head of SRC. */
static void lock_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_op *op = req->ctx;
    char buf[128];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    long long vals[3] = {0, 0, 0};

    op->inflight = 0;
    evbuffer_copyout(src, buf, n);
    buf[n] = '\0';
    if (type == REPLY_ERROR && strncmp(buf, "-NOSCRIPT", 9) == 0 && !op->noscript_retried &&
        req->client != NULL) {
        evbuffer_drain(src, len);
        op->noscript_retried = 1;
        lock_send(op);
        return;
    }
    if (req->client == NULL) {
        /* Its client is gone: a lock taken for nobody goes back at once. */
        if (op->verb == LOCK_ACQUIRE && type == REPLY_ARRAY &&
            reply_parse_ints(buf, n, vals, 3) >= 1 && vals[0] == 1 && !op->explicit_owner)
            lock_release_all(op->key, op->keylen, op->token, op->toklen);
        evbuffer_drain(src, len);
        request_free(req);
        return;
    }
    if (op->verb == LOCK_ACQUIRE && type == REPLY_ARRAY && reply_parse_ints(buf, n, vals, 3) >= 2) {
        evbuffer_drain(src, len);
        if (vals[0] == 1)
            lock_acquired(op, vals[2]);
        else if (vals[0] == -1)
            lock_epoch_refused(op, vals[1]);
        else
            lock_busy(op, vals[1]);
        return;
    }
    if (op->verb != LOCK_ACQUIRE) {
        int released = type == REPLY_INTEGER && reply_parse_ints(buf, n, vals, 1) == 1 && vals[0] == 0;
        struct lock_held *h = lock_held_find(req->client, op->key, op->keylen, op->token,
                                             op->toklen);
        if (h != NULL && (released || (type == REPLY_ERROR && strncmp(buf, "-NOTOWNER", 9) == 0)))
            lock_held_free(h);
        if (released)
            lock_wake(op->key, op->keylen);
        lock_count(op, type != REPLY_ERROR ? LOCK_OK
                       : strncmp(buf, "-NOTOWNER", 9) == 0 ? LOCK_FAIL : LOCK_ERROR);
    } else {
        lock_count(op, LOCK_ERROR);   /* WRONGTYPE, an error of Redis's */
    }
    /* Everything else (counts, OK, NOTOWNER, WRONGTYPE, errors) as is. */
    evbuffer_remove_buffer(src, client_reply_buffer(req->client, req), len);
    lock_finish(op);
}

/* ---- argument checking ---- */

/* A strictly decimal, positive 64-bit integer. 1 when it is one; 0 when it
 * is an integer but not positive; -1 when it is not an integer. */
static int lock_parse_positive(struct sv arg, long long *out)
{
    if (value_strict_ll(arg.ptr, arg.len, out) != 0)
        return -1;
    return *out > 0 ? 1 : 0;
}

/* Random bytes for tokens, drawn from libcrypto a page at a time: each
 * RAND_bytes call costs a getpid() (its fork check), too much per LOCK. */
static unsigned char lock_random_pool[4096];
static size_t lock_random_left;

/* A fresh token: LOCK_TOKEN_BYTES random bytes as lower-case hex in OUT
 * (2 * LOCK_TOKEN_BYTES + 1 bytes). */
static void lock_make_token(char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *raw;

    if (lock_random_left < LOCK_TOKEN_BYTES) {
        lock_random_left = sizeof(lock_random_pool);
        if (RAND_bytes(lock_random_pool, sizeof(lock_random_pool)) != 1) {
            /* Not expected from libcrypto. Fall back, for this one token, to
             * what still differs across processes and restarts. */
            static uint32_t fallback;
            struct timespec ts;
            uint32_t parts[4];
            clock_gettime(CLOCK_REALTIME, &ts);
            parts[0] = (uint32_t)ts.tv_sec;
            parts[1] = (uint32_t)ts.tv_nsec;
            parts[2] = (uint32_t)getpid();
            parts[3] = ++fallback;
            lock_random_left = LOCK_TOKEN_BYTES;
            memcpy(lock_random_pool + sizeof(lock_random_pool) - LOCK_TOKEN_BYTES, parts,
                   sizeof(parts));
        }
    }
    raw = lock_random_pool + sizeof(lock_random_pool) - lock_random_left;
    lock_random_left -= LOCK_TOKEN_BYTES;
    for (int i = 0; i < LOCK_TOKEN_BYTES; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * LOCK_TOKEN_BYTES] = '\0';
}

/* Parse the options after the fixed arguments. Returns NULL when fine, or
 * the error reply text. */
static const char *lock_parse_options(struct lock_op *op, int argc, const struct sv *argv,
                                      int first)
{
    int seen_wait = 0, seen_owner = 0, seen_keep = 0, seen_fence = 0, seen_acks = 0;

    for (int i = first; i < argc; i++) {
        if (sv_ieq(argv[i], "owner") && i + 1 < argc && !seen_owner) {
            seen_owner = 1;
            if (argv[i + 1].len == 0)
                return "OWNER token must not be empty";
            op->token = lock_memdup(argv[i + 1].ptr, argv[i + 1].len);
            op->toklen = argv[i + 1].len;
            op->explicit_owner = 1;
            i++;
        } else if (op->verb == LOCK_ACQUIRE && sv_ieq(argv[i], "wait") && i + 1 < argc &&
                   !seen_wait) {
            int rc = lock_parse_positive(argv[i + 1], &op->wait_ms);
            seen_wait = 1;
            if (rc < 0)
                return "value is not an integer or out of range";
            if (rc == 0)
                return "invalid WAIT timeout in 'lock' command";
            op->wait = 1;
            i++;
        } else if (op->verb != LOCK_RELEASE && sv_ieq(argv[i], "acks") && i + 1 < argc &&
                   !seen_acks) {
            seen_acks = 1;
            if (value_strict_ll(argv[i + 1].ptr, argv[i + 1].len, &op->acks) != 0)
                return "value is not an integer or out of range";
            if (op->acks < 0 || op->acks > LOCK_ACKS_MAX)
                return op->verb == LOCK_ACQUIRE ? "invalid ACKS count in 'lock' command"
                                                : "invalid ACKS count in 'renew' command";
            i++;
        } else if (op->verb == LOCK_ACQUIRE && sv_ieq(argv[i], "keep") && !seen_keep) {
            seen_keep = op->keep = 1;
        } else if (op->verb == LOCK_ACQUIRE && sv_ieq(argv[i], "fence") && !seen_fence) {
            seen_fence = op->fence = 1;
        } else {
            return "syntax error";
        }
    }
    return NULL;
}

/* Check REQ's arguments into OP (their count is checked already).
 * Returns NULL, or the error reply text. */
static const char *lock_parse(struct client *c, struct lock_op *op, int argc, const struct sv *argv)
{
    int first = op->verb == LOCK_RELEASE ? 2 : 3;
    const char *err;

    op->key = lock_memdup(argv[1].ptr, argv[1].len);
    op->keylen = argv[1].len;
    if (op->verb != LOCK_RELEASE) {
        int rc = lock_parse_positive(argv[2], &op->ttl_ms);
        if (rc < 0)
            return "value is not an integer or out of range";
        /* Redis refuses an expire that overflows its clock (now + ttl past
         * LLONG_MAX) only after the script has made the key: a lock that
         * never expires, for a client told it failed. Refused here first. */
        if (rc == 0 || op->ttl_ms > LOCK_TTL_MAX_MS)
            return op->verb == LOCK_ACQUIRE ? "invalid expire time in 'lock' command"
                                            : "invalid expire time in 'renew' command";
        /* The failover grace covers locks up to lock_max_ttl_ms. */
        if (op->ttl_ms > server.cfg.lock_max_ttl_ms) {
            static char longer[120];
            snprintf(longer, sizeof(longer), "invalid expire time in '%s' command: longer than "
                     "lock_max_ttl_ms (%lld)", lock_verb_names[op->verb],
                     server.cfg.lock_max_ttl_ms);
            return longer;
        }
    }
    err = lock_parse_options(op, argc, argv, first);
    if (err != NULL)
        return err;
    if (op->token == NULL && op->verb == LOCK_ACQUIRE) {
        op->token = malloc(2 * LOCK_TOKEN_BYTES + 1);
        lock_make_token(op->token);
        op->toklen = 2 * LOCK_TOKEN_BYTES;
    } else if (op->token == NULL) {
        struct lock_held *h = lock_held_find(c, op->key, op->keylen, NULL, 0);
        if (h == NULL)
            return "this connection holds no lock on that key; pass OWNER token";
        op->token = lock_memdup(h->token, h->toklen);
        op->toklen = h->toklen;
    }
    return NULL;
}

/* Whether OP's verb may run on C at all, in Redis's order: argument count,
 * then the connection's mode. Returns NULL, or the error text in BUF.
 * Inside MULTI a lock verb cannot be queued (Redis would run it at EXEC,
 * sluice cannot); as for any command refused there, EXEC then fails. */
static const char *lock_check_context(struct client *c, const struct lock_op *op, int argc,
                                      char *buf, size_t size)
{
    const char *name = lock_verb_names[op->verb];

    if (argc < lock_min_args[op->verb]) {
        snprintf(buf, size, "wrong number of arguments for '%s' command", name);
        return buf;
    }
    if ((c->flags & CLIENT_PASSTHROUGH) && (c->flags & CLIENT_MONITOR))
        return "Replica can't interact with the keyspace";
    if (c->flags & CLIENT_PASSTHROUGH) {
        snprintf(buf, size, "Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                 "QUIT / RESET are allowed in this context", name);
        return buf;
    }
    if (c->flags & CLIENT_IN_MULTI)
        return "Command not allowed inside a transaction";
    return NULL;
}

void lock_handle(struct client *c, struct request *req, int argc, const struct sv *argv)
{
    struct lock_op *op = calloc(1, sizeof(*op));
    char buf[160];
    const char *err;

    op->verb = (enum lock_verb)lock_verb_of(argv);
    op->req = req;
    op->backoff_ms = LOCK_BACKOFF_MIN_MS;   /* its timer: made when it first waits */
    op->acks = -1;
    op->started_us = server_now_us();
    req->ctx = op;
    req->ctx_free = lock_op_free;
    req->on_reply = lock_on_reply;
    err = lock_check_context(c, op, argc, buf, sizeof(buf));
    if (err == NULL)
        err = lock_parse(c, op, argc, argv);
    if (err != NULL) {
        if (c->flags & CLIENT_IN_MULTI)
            c->flags |= CLIENT_MULTI_DIRTY;   /* client.c turns its EXEC into EXECABORT */
        reply_error(client_reply_buffer(c, req), "%s", err);
        lock_count(op, LOCK_ERROR);
        req->flags |= REQ_FAILED;
        client_answer(c, req);
        return;
    }
    /* Commands after a lock verb run once it is answered: replies stay in
     * order even when its script must be sent again (NOSCRIPT), and an
     * UNLOCK without OWNER after a LOCK knows its token. */
    op->blocks = 1;
    client_block(c);
    if (op->wait) {
        op->deadline_ms = server_now_ms() + (uint64_t)op->wait_ms;
        struct lock_queue *q = lock_queue_find(op->key, op->keylen, 0);
        if (q != NULL && !TAILQ_EMPTY(&q->ops)) {
            /* Others wait already: behind them, first come first served. */
            op->queue = q;
            TAILQ_INSERT_TAIL(&q->ops, op, queue_link);
            lock_busy(op, 0);
            return;
        }
    }
    lock_send(op);
}
