/* lock.c - owns the lock verbs: argument checking, the rewrite into
 * EVALSHA of lua/lock_*.lua, one operation from its request to its
 * answer, and retrying a waiting LOCK. Time always comes from Redis
 * (PEXPIRE, PTTL), never from here. Keys and tokens are arbitrary bytes:
 * always pointer + length, never C strings. Each verb blocks its client's
 * later commands until answered. Below it, each called only downwards:
 * lockack.c (grants replicas must acknowledge), lockheld.c (the locks a
 * connection holds, KEEP renewals, release when it closes), lockqueue.c
 * (waiters, first come first served per key on this sluice), lockgrace.c
 * (the failover grace and fence epochs).
 *
 *   LOCK k 30000 WAIT 500 -> EVALSHA lock_acquire 2 k fence(k) token 30000 0 0
 *        {1, holds, fence} -> token            {0, pttl} -> wait or nil
 *   waiters on k:  [op1 (head, retries)] [op2] [op3]   woken by an UNLOCK
 */
#include "lock.h"
#include "lock_int.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "cluster.h"
#include "lockgrace.h"
#include "metrics.h"
#include "reply.h"
#include "placement.h"
#include "request.h"
#include "scripts.h"
#include "server.h"
#include "value.h"
#include "slot.h"
#include "stats.h"

#define LOCK_TOKEN_BYTES 16
#define LOCK_BACKOFF_MIN_MS 5
#define LOCK_BACKOFF_MAX_MS 100
#define LOCK_CHECK_POLL_MS 10   /* a LOCK waiting for the hand-over check (lock_in_grace) */
#define LOCK_FENCE_PREFIX "sluice:fence:{"
/* Longest ttl_ms: half of LLONG_MAX, so that Redis's clock plus it never
 * overflows (Redis refuses that as an invalid expire time). */
#define LOCK_TTL_MAX_MS (LLONG_MAX / 2)

/* Most replicas ACKS may ask for (as the config key's bound). */
#define LOCK_ACKS_MAX 1000

static const char *const lock_verb_names[] = {"lock", "unlock", "renew"};
static const int lock_min_args[] = {3, 2, 3};

/* A short tag per hash slot, so that a fence key can share its lock's slot. */
static char lock_slot_tags[SLOT_COUNT][8];
static const struct script *lock_script_acquire, *lock_script_release, *lock_script_renew;

static void lock_send(struct lock_op *op);
static void lock_woken(struct lock_op *op);

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
    lockheld_init(lock_script_release, lock_script_renew);
    lockqueue_set_waker(lock_woken);
    /* Nothing is granted until Redis says when its primary may last have
     * lost writes: the backends' first report (a first contact) decides,
     * or, after a hand-over that found the same primary, lockgrace_checked. */
    lockgrace_start();
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

/* ---- one operation ---- */

static void lock_op_free(struct request *req)
{
    struct lock_op *op = req->ctx;

    if (op == NULL)
        return;
    lockqueue_leave(op);
    if (op->ack != NULL)
        lockack_orphan(op->ack);   /* its replies come to nobody: a grant is given back */
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
    lockqueue_leave(op);
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
    /* Without WAIT only the hand-over check holds an op (lock_in_grace). */
    if (op->wait && server_now_ms() >= op->deadline_ms) {
        reply_nil(client_reply_buffer(op->req->client, op->req), op->req->client->resp);
        lock_finish(op);
        return;
    }
    lock_send(op);
}

/* The scripts' replicas argument for REPLICAS, formatted into BUF (24
 * bytes): a count, or "all" (CONFIG_ACKS_ALL: every one online, at least
 * one; the script returns how many that was). */
static struct sv lock_need_arg(char *buf, long long replicas)
{
    if (replicas == CONFIG_ACKS_ALL)
        return (struct sv){"all", 3};
    return (struct sv){buf, (size_t)reply_format_ll(buf, replicas)};
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
        args[6] = lock_need_arg(need, replicas);
        argc = 7;
    } else if (op->verb == LOCK_RELEASE) {
        s = lock_script_release;
        args[1] = (struct sv){"one", 3};
    } else {
        s = lock_script_renew;
        args[2] = lock_need_arg(need, replicas);
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

/* ---- grants and renewals acknowledged by replicas (ACKS): lockack.c ---- */

static void lock_acquired(struct lock_op *op, long long fence);
static void lock_busy(struct lock_op *op, long long pttl_ms);
static void lock_finish(struct lock_op *op);
static void lock_timer_cb(evutil_socket_t fd, short what, void *arg);

/* Answer OP, which its script refused or which too few replicas
 * acknowledged: the NOREPLICAS error; a renewal's lock is no longer held
 * by this connection. */
static void lock_noreplicas(struct lock_op *op, long long need)
{
    struct lock_held *h = lockheld_find(op->req->client, op->key, op->keylen, op->token,
                                         op->toklen);

    if (op->verb == LOCK_RENEW && h != NULL)
        lockheld_free(h);
    STAT_INC(lock_noreplicas);
    if (need == CONFIG_ACKS_ALL)   /* the script found no replica online */
        reply_error(client_reply_buffer(op->req->client, op->req),
                    "-NOREPLICAS lock not acknowledged by all replicas within %lld ms (none "
                    "online); not held", server.cfg.lock_replica_timeout_ms);
    else
        reply_error(client_reply_buffer(op->req->client, op->req),
                    "-NOREPLICAS lock not acknowledged by %lld replicas within %lld ms; not held",
                    need, server.cfg.lock_replica_timeout_ms);
    lock_count(op, LOCK_FAIL);
    lock_finish(op);
}

static void lock_retry_in(struct lock_op *op, uint64_t delay);

/* A LOCK ... WAIT that met a passing state (its slot moving, a node whose
 * epoch is behind while the slot map is read again): tried again in
 * LOCK_BACKOFF_MAX_MS, within its WAIT, as during a grace, rather than
 * answered TRYAGAIN. Returns 1 when it waits. */
static int lock_wait_again(struct lock_op *op)
{
    uint64_t now = server_now_ms();

    if (op->verb != LOCK_ACQUIRE || !op->wait || now >= op->deadline_ms)
        return 0;
    lock_retry_in(op, op->deadline_ms - now < LOCK_BACKOFF_MAX_MS ? op->deadline_ms - now
                                                                  : LOCK_BACKOFF_MAX_MS);
    return 1;
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
    if (lock_wait_again(op))
        return;
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
    struct lock_held *h = lockheld_find(op->req->client, op->key, op->keylen, op->token,
                                         op->toklen);

    if (notowner && h != NULL)
        lockheld_free(h);
    if (strncmp(text, "-MOVED", 6) == 0 || strncmp(text, "-ASK", 4) == 0) {
        cluster_want_refresh();
        if (lock_wait_again(op))
            return;
        text = "-TRYAGAIN the lock's slot moved; try again";
    }
    reply_error(client_reply_buffer(op->req->client, op->req), "%s",
                text[0] != '\0' ? text : "backend connection lost");
    lock_count(op, notowner ? LOCK_FAIL : LOCK_ERROR);
    lock_finish(op);
}

/* How a grant or renewal sent with ACKS came back (lockack.c): answer
 * OP. */
static void lock_ack_outcome(struct lock_op *op, const struct lockack_result *r)
{
    if (r->granted && r->enough && op->verb == LOCK_ACQUIRE) {
        lock_acquired(op, r->vals[2]);
    } else if (r->granted && r->enough) {
        evbuffer_add(client_reply_buffer(op->req->client, op->req), "+OK\r\n", 5);
        lock_count(op, LOCK_OK);
        lock_finish(op);
    } else if (r->granted || r->refused) {
        lock_noreplicas(op, r->need);
    } else if (r->type == REPLY_ARRAY && r->nvals >= 2 && r->vals[0] == 0) {
        lock_busy(op, r->vals[1]);
    } else if (r->type == REPLY_ARRAY && r->nvals >= 2 && r->vals[0] == -1) {
        lock_epoch_refused(op, r->vals[1]);
    } else {
        lock_ack_error(op, r->text);
    }
}

/* Send OP's script, requiring NEED replicas online, with the WAIT for
 * them (lockack.c); answered in lock_ack_outcome, or at once when there
 * is no connection. OP must not be touched after this returns. */
static void lock_send_acked(struct lock_op *op, long long need)
{
    struct evbuffer *buf = evbuffer_new();

    lock_write_script(op, buf, 1, need);
    if (lockack_send(op, need, buf, lock_ack_outcome) != 0)
        lock_ack_error(op, "-ERR backend unavailable: no connection for the lock's replica "
                           "acknowledgements");
    evbuffer_free(buf);
}

/* The head waiter of a key, woken by a release (lockqueue_wake): it tries
 * again now, unless its script is out. */
static void lock_woken(struct lock_op *op)
{
    if (op->inflight)
        return;
    if (op->timer != NULL)
        evtimer_del(op->timer);
    lock_send(op);
}

/* An UNLOCK or RENEW of a lock its KEEP found lost, on this connection:
 * answered NOTOWNER here (as Redis would for a lock not held) and the
 * record goes. Returns 1 when it answered. */
static int lock_answered_lost(struct lock_op *op)
{
    struct lock_held *h;

    if (op->verb == LOCK_ACQUIRE)
        return 0;
    h = lockheld_find(op->req->client, op->key, op->keylen, op->token, op->toklen);
    if (h == NULL || !h->lost)
        return 0;
    lockheld_free(h);
    reply_error(client_reply_buffer(op->req->client, op->req), "%s",
                "-NOTOWNER the lock is not held by this owner");
    lock_count(op, LOCK_FAIL);
    lock_finish(op);
    return 1;
}

/* Arm OP's timer for DELAY ms (lock_timer_cb sends it again). */
static void lock_retry_in(struct lock_op *op, uint64_t delay)
{
    struct timeval tv = {(time_t)(delay / 1000), (suseconds_t)(delay % 1000) * 1000};

    if (op->timer == NULL)
        op->timer = evtimer_new(server.base, lock_timer_cb, op);
    evtimer_add(op->timer, &tv);
}

/* A LOCK on a shard in its failover grace: answered TRYAGAIN, or with
 * WAIT tried again when the grace ends (or answered nil at its
 * deadline). Right after start, while Redis is asked when its primary may
 * last have lost writes, and after a hand-over, while this sluice checks
 * that the primary is the one the old sluice watched (a few ms), it is
 * looked at again every LOCK_CHECK_POLL_MS instead: the answer usually
 * lifts the start-up grace. Returns 1 when OP was answered or waits. */
static int lock_in_grace(struct lock_op *op)
{
    int slot = slot_for_key(op->key, op->keylen);
    uint64_t now = server_now_ms(), left = lockgrace_left_ms(slot);
    uint64_t checking = lockgrace_checking_ms(slot);

    if (op->verb != LOCK_ACQUIRE || left == 0)
        return 0;
    if (checking > 0 && (!op->wait || now < op->deadline_ms)) {
        uint64_t delay = checking < LOCK_CHECK_POLL_MS ? checking : LOCK_CHECK_POLL_MS;
        lock_retry_in(op, op->wait && op->deadline_ms - now < delay ? op->deadline_ms - now
                                                                      : delay);
        return 1;
    }
    if (!op->wait || now >= op->deadline_ms) {
        reply_error(client_reply_buffer(op->req->client, op->req),
                    "-TRYAGAIN lock grants resume on this shard in %llu ms (failover grace)",
                    (unsigned long long)left);
        lock_count(op, LOCK_FAIL);
        lock_finish(op);
        return 1;
    }
    lock_retry_in(op, left < op->deadline_ms - now ? left : op->deadline_ms - now);
    return 1;
}

/* Send OP's script call, when it is still allowed (else it is answered
 * with the refusal). When it cannot be sent, client.c says so through
 * lock_on_reply like any error reply. In cluster mode it goes to the
 * lock's slot (LOCK is placed locally, so nothing else set it), and each
 * attempt of a waiting LOCK has its own cluster_max_redirects. */
static void lock_send(struct lock_op *op)
{
    long long acks;

    if (!lock_still_allowed(op) || lock_answered_lost(op) || lock_in_grace(op))
        return;
    op->req->slot = slot_for_key(op->key, op->keylen);
    op->req->redirects = 0;
    op->grace_gen = lockgrace_generation(op->req->slot);
    acks = op->acks != -1 ? op->acks : server.cfg.lock_replica_acks;
    if (op->verb != LOCK_RELEASE && acks != CONFIG_ACKS_ALL)
        lockgrace_note_unacked(op->req->slot, op->ttl_ms);
    if (op->verb != LOCK_RELEASE && (acks > 0 || acks == CONFIG_ACKS_ALL)) {
        lock_send_acked(op, acks);
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
    int slot = slot_for_key(op->key, op->keylen);

    /* A grace began on its shard after its call went out (the call was
     * held through a failover and ran on the new primary, or crossed the
     * change): the grant may overlap a lock the old primary granted. Give
     * it back and answer as during the grace: TRYAGAIN, or WAIT on. */
    if (op->grace_gen != lockgrace_generation(slot) && lockgrace_left_ms(slot) > 0) {
        lockheld_give_back(op->key, op->keylen, op->token, op->toklen, 0);
        if (lock_in_grace(op))
            return;
    }
    if (!op->explicit_owner || op->keep)
        lockheld_add(c, op, op->fence ? fence : -1);
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
    if (op->queue == NULL)
        lockqueue_join(op);
    delay_ms = (long long)(op->deadline_ms - now);
    if (lockqueue_is_head(op)) {
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
            lockheld_release_all(op->key, op->keylen, op->token, op->toklen);
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
        struct lock_held *h = lockheld_find(req->client, op->key, op->keylen, op->token,
                                             op->toklen);
        if (h != NULL && (released || (type == REPLY_ERROR && strncmp(buf, "-NOTOWNER", 9) == 0)))
            lockheld_free(h);
        if (released)
            lockqueue_wake(op->key, op->keylen);
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
            if (sv_ieq(argv[i + 1], "all"))
                op->acks = CONFIG_ACKS_ALL;
            else if (value_strict_ll(argv[i + 1].ptr, argv[i + 1].len, &op->acks) != 0)
                return "value is not an integer or out of range";
            else if (op->acks < 0 || op->acks > LOCK_ACKS_MAX)
                return op->verb == LOCK_ACQUIRE ? "invalid ACKS count in 'lock' command"
                                                : "invalid ACKS count in 'renew' command";
            /* Under "all" a failover begins no grace: every grant, through
             * any sluice, must have reached every replica. */
            else if (server.cfg.lock_replica_acks == CONFIG_ACKS_ALL)
                return "ACKS other than all while lock_replica_acks = all";
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
        struct lock_held *h = lockheld_find(c, op->key, op->keylen, NULL, 0);
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
        req->flags |= REQ_WAITS;   /* timed apart, kept out of the slow log */
        op->deadline_ms = server_now_ms() + (uint64_t)op->wait_ms;
        if (lockqueue_has_waiters(op->key, op->keylen)) {
            /* Others wait already: behind them, first come first served. */
            lockqueue_join(op);
            lock_busy(op, 0);
            return;
        }
    }
    lock_send(op);
}

