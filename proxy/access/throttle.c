/* throttle.c - owns what the rate-limit rules do to a client's requests:
 * the -THROTTLED refusal, requests held back for action = delay, and the
 * questions to Redis about shared buckets (lua/bucket.lua).
 *
 *   client_handle -> throttle_admit -> limiter_quick_pass (no rule applies?)
 *                                   -> limiter_admit (local buckets)
 *        PASS    -> client_dispatch, as if there were no rules
 *        REJECT  -> -THROTTLED rule NAME retry_after_ms=N, in reply order
 *        HOLD    -> throttle_hold: client blocked, request kept
 *                     shared rules: EVALSHA bucket per rule -> settle
 *                     delay: timer -> release (client_release_held) -> dispatch
 *
 * Shared rules mostly decide without Redis: the limiter spends tokens it
 * leased (rules/lease.h) and asks, through throttle_send_lease, for more
 * before they run out, or gives them back; those messages have no
 * request waiting on them. A request is held only when no token is held.
 *
 * A held request that does not go after all (a shared rule refuses it, or
 * its client leaves first) gives back every token it took: to the local
 * buckets (limiter_give_back), and to shared ones in Redis (bucket.lua
 * "refund"), so a refused command takes none.
 *
 * Concurrency limits (max_inflight, max_blocked) are taken last, once
 * every token is there, so no later rule can refuse a request that holds
 * a slot. The slots go with the request (req->slots) and back when its
 * reply comes (throttle_request_done) or it is freed unanswered
 * (request_free: a failed send, a lost connection, a client gone), so
 * none can leak. A request whose gate is full waits, its client blocked,
 * in throttle_slot_waiters (oldest first), taken again when a slot of a
 * gate with waiters comes back (throttle_wake_cb, from the event loop).
 */
#include "throttle.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/queue.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "client.h"
#include "commands.h"
#include "errlist.h"
#include "lease.h"
#include "log.h"
#include "reply.h"
#include "pause.h"
#include "request.h"
#include "router.h"
#include "rules.h"
#include "scripts.h"
#include "server.h"
#include "stats.h"

/* A shared bucket that gave a held request its token (or reserved it). */
struct throttle_granted {
    struct limiter_shared_ask ask;
    uint64_t wait_us;
};

/* A request held back: by a delay, or until Redis answers about shared
 * buckets. Lives until both its timer has fired (or was never needed)
 * and every question is answered, even when its client goes first. */
struct throttle_hold {
    struct client *c;           /* NULL once the client has gone */
    struct request *req;        /* owned here until released */
    struct event *timer;
    int asks_pending;
    uint64_t wait_us;           /* the longest wait any rule asked for */
    int rejected;
    char error[192];
    /* Tokens to give back if the request does not go: one per matching
     * local rule, and room for a grant of each shared rule asked. */
    int taken_count;
    struct limiter_taken *taken;
    int granted_count;
    struct throttle_granted *granted;
    /* Waiting for a concurrency slot (req->slots), in throttle_slot_waiters. */
    int slot_queued;
    TAILQ_ENTRY(throttle_hold) wait_link;
};

/* Holds waiting for a concurrency slot, oldest first, and the event that
 * takes their slots again (throttle_wake_soon). */
static TAILQ_HEAD(throttle_waiters, throttle_hold) throttle_slot_waiters =
    TAILQ_HEAD_INITIALIZER(throttle_slot_waiters);
static struct event *throttle_wake_ev;
static int throttle_down;   /* throttle_shutdown ran: slots freed later wake nobody */

/* One message about a shared bucket, the ctx of its internal request: a
 * question, a lease's refill, or tokens given back (ask.kind). */
struct throttle_ask {
    struct throttle_hold *hold; /* NULL: a dry-run rule, a lease's message or a refund */
    struct limiter_shared_ask ask;
    uint64_t wait_us;           /* REFUND: the grant's wait, to uncount it */
    int sent_as_eval;           /* NOSCRIPT was answered once already */
    int answered;               /* else it counts as let through (fail open) */
};

static const struct script *throttle_bucket_script;
/* The decision of the request being admitted (throttle_decision.limits):
 * its arrays grow to the most rules a client has matched, and stay. */
static struct limiter_decision throttle_limits;
static void throttle_index_exempt(void);
static uint64_t throttle_last_cron_us;
static request_release_fn *throttle_hand_back;   /* from throttle_set_release */
static void throttle_send_lease(const struct limiter_shared_ask *ask);
static void throttle_slots_drop(struct request *req);
static void throttle_wake_soon(void);

void throttle_set_release(request_release_fn *release)
{
    throttle_hand_back = release;
}

int throttle_init(const char *path, struct errlist *errs)
{
    throttle_bucket_script = scripts_find("bucket");
    throttle_index_exempt();
    limiter_set_send(throttle_send_lease);
    request_set_slots_drop(throttle_slots_drop);
    if (limiter_load(path, errs) != 0)
        return -1;
    if (path != NULL)
        log_notice("rules loaded from %s", path);
    return 0;
}

int throttle_prepare(const char *path, struct rule_set **out, struct errlist *errs)
{
    return limiter_prepare(path, out, errs);
}

void throttle_commit(const char *path, struct rule_set *rs)
{
    limiter_commit(rs);
    throttle_wake_soon();   /* a limit raised or gone lets waiters go */
    log_notice("rules reloaded from %s", path != NULL ? path : "(none)");
}

static void throttle_reject_text(char *out, size_t size, const char *rule, uint64_t wait_us)
{
    uint64_t ms = (wait_us + 999) / 1000;

    snprintf(out, size, "-THROTTLED rule %.*s retry_after_ms=%llu", RULES_NAME_MAX, rule,
             (unsigned long long)(ms > 0 ? ms : 1));
}

/* Commands the rules never see: ending a connection, and the brackets of a
 * transaction (a refused MULTI would let the commands after it run at once,
 * a refused EXEC would leave the transaction open). The commands inside a
 * transaction are limited like any other. */
static const char *const throttle_exempt_commands[] = {
    "quit", "reset", "multi", "exec", "discard",
};

/* By command id: 1 for the commands above (built by throttle_init). */
static unsigned char *throttle_exempt_by_id;

static void throttle_index_exempt(void)
{
    size_t n = sizeof(throttle_exempt_commands) / sizeof(throttle_exempt_commands[0]);

    free(throttle_exempt_by_id);
    throttle_exempt_by_id = calloc((size_t)commands_count(), 1);
    for (size_t i = 0; i < n; i++) {
        const struct command *cmd = commands_lookup(throttle_exempt_commands[i], strlen(throttle_exempt_commands[i]));
        if (cmd != NULL)
            throttle_exempt_by_id[cmd->id] = 1;
    }
}

/* Requests the rules never see: sluice's own PROXY command (operators
 * must reach it) and the commands above. Whatever state C is in (pub/sub
 * or after it, MONITOR, CLIENT REPLY OFF, MULTI) is no reason: Redis runs
 * commands there too, and which ones sluice cannot know for certain before
 * the replies to C's earlier commands are back (a pipelined UNSUBSCRIBE
 * ends the subscribed context). A refusal then waits for its fence (see
 * client.c), and a held request is sent on C's stream when released. Only
 * a SYNC tunnel's bytes are never parsed, and so never limited. */
static int throttle_exempt(const struct request *req, const struct sv *argv)
{
    if (req->cmd == NULL)
        return req->argc > 0 && sv_ieq(argv[0], "proxy");
    return throttle_exempt_by_id[req->cmd->id];
}

static void throttle_send_ask(struct throttle_ask *a);

/* The limiter's own message ASK (a lease's refill or return): sent with
 * no request waiting; the answer goes back to limiter_shared_done. */
static void throttle_send_lease(const struct limiter_shared_ask *ask)
{
    struct throttle_ask *a = calloc(1, sizeof(*a));

    if (a == NULL) {
        limiter_shared_done(ask, -1, 0, 0);   /* a refill counts as not asked */
        return;
    }
    a->ask = *ask;
    throttle_send_ask(a);
}

/* What the rules know of C. Points into C. */
static void throttle_identity(const struct client *c, struct limiter_identity *who)
{
    who->addr = (const struct sockaddr *)&c->addr;
    who->ip = c->ip_text;
    who->user = c->user;
    who->name = c->name;
    who->client_id = c->id;
    who->addr_text = c->addr_text;
}

/* REQ takes the slots of the decision D: in a transaction no slot is
 * taken (Redis queues the command, and runs it at EXEC, which no rule
 * limits). */
static void throttle_slots_adopt(struct client *c, struct request *req, struct limiter_decision *d)
{
    if (d->slots == NULL)
        return;
    if (c->flags & CLIENT_IN_MULTI)
        limiter_slots_free(d->slots);   /* none held yet */
    else
        req->slots = d->slots;
    d->slots = NULL;
}

/* REQ of C (WHO) has its tokens (the decision OUT->limits passed it):
 * its slots now. Full: HOLD (it waits, throttle_go), or REJECT with the
 * tokens it took given back. */
static enum throttle_verdict throttle_slots_first(struct client *c, struct request *req,
                                                  const struct limiter_identity *who,
                                                  struct throttle_decision *out)
{
    const struct limiter_decision *d = out->limits;
    char rule[RULES_NAME_MAX + 1];

    if (req->slots == NULL)
        return THROTTLE_PASS;
    switch (limiter_slots_take(req->slots, 0, who, rule, sizeof(rule))) {
    case LIMITER_SLOTS_HELD: return THROTTLE_PASS;
    case LIMITER_SLOTS_WAIT: return THROTTLE_HOLD;
    case LIMITER_SLOTS_REJECT: break;
    }
    limiter_give_back(c->limiter, who, d->taken, d->taken_count);
    throttle_slots_drop(req);
    throttle_reject_text(out->error, sizeof(out->error), rule, 0);
    return THROTTLE_REJECT;
}

/* throttle_admit for a request some rule may apply to: the buckets. Kept
 * out of line, so the common case does not pay for its frame. */
static __attribute__((noinline)) enum throttle_verdict
throttle_admit_ruled(struct client *c, struct request *req, const struct sv *argv,
                     struct throttle_decision *out)
{
    struct limiter_decision *d = &throttle_limits;
    struct limiter_identity who;
    int enforce = 0;

    out->limits = d;
    throttle_identity(c, &who);
    limiter_admit(&c->limiter, &who, req->cmd, argv, req->argc, 0, d);
    throttle_slots_adopt(c, req, d);
    switch (d->verdict) {
    case LIMITER_PASS: return throttle_slots_first(c, req, &who, out);
    case LIMITER_DELAY: return THROTTLE_HOLD;
    case LIMITER_REJECT:
        throttle_reject_text(out->error, sizeof(out->error), d->rule_name, d->wait_us);
        return THROTTLE_REJECT;
    case LIMITER_ASK: break;
    }
    /* Dry-run rules only count: ask about them without waiting. */
    for (int i = 0; i < d->ask_count; i++) {
        if (!d->ask[i].dryrun) {
            d->ask[enforce++] = d->ask[i];
            continue;
        }
        struct throttle_ask *a = calloc(1, sizeof(*a));
        a->ask = d->ask[i];
        throttle_send_ask(a);
    }
    d->ask_count = enforce;
    if (enforce > 0 || d->wait_us > 0)
        return THROTTLE_HOLD;
    return throttle_slots_first(c, req, &who, out);
}

enum throttle_verdict throttle_admit(struct client *c, struct request *req,
                                     const struct sv *argv, struct throttle_decision *out)
{
    if (!limiter_active() || throttle_exempt(req, argv) ||
        limiter_quick_pass(c->limiter, req->cmd, argv, req->argc))
        return THROTTLE_PASS;
    return throttle_admit_ruled(c, req, argv, out);
}

static void throttle_unqueue(struct throttle_hold *h)
{
    if (h->slot_queued)
        TAILQ_REMOVE(&throttle_slot_waiters, h, wait_link);
    h->slot_queued = 0;
}

static void throttle_hold_free(struct throttle_hold *h)
{
    throttle_unqueue(h);
    if (h->timer != NULL)
        event_free(h->timer);
    request_free(h->req);
    free(h->taken);
    free(h->granted);
    free(h);
}

/* Give the held request back to its client: to be answered with ERROR,
 * or run when ERROR is NULL. */
static void throttle_release(struct throttle_hold *h, const char *error)
{
    struct client *c = h->c;
    struct request *req = h->req;
    char text[sizeof(h->error)];

    if (error != NULL)
        snprintf(text, sizeof(text), "%s", error);   /* it may be h->error */
    h->req = NULL;
    c->throttle_hold = NULL;
    throttle_hold_free(h);   /* out of the waiters too */
    throttle_hand_back(c, req, error != NULL ? text : NULL);
}

static void throttle_give_back(struct throttle_hold *h);

/* H's request has its tokens and its delay is over: its slots now. It
 * goes when it holds them all, waits in throttle_slot_waiters while a
 * delay rule's gate is full, or is refused (its tokens given back) by a
 * reject rule's. Returns 0 when it waits still. */
static int throttle_go(struct throttle_hold *h)
{
    struct limiter_identity who;
    char rule[RULES_NAME_MAX + 1];

    if (h->req->slots == NULL) {
        throttle_release(h, NULL);
        return 1;
    }
    throttle_identity(h->c, &who);
    switch (limiter_slots_take(h->req->slots, h->slot_queued, &who, rule, sizeof(rule))) {
    case LIMITER_SLOTS_HELD:
        throttle_release(h, NULL);
        return 1;
    case LIMITER_SLOTS_WAIT:
        if (!h->slot_queued) {
            TAILQ_INSERT_TAIL(&throttle_slot_waiters, h, wait_link);
            h->slot_queued = 1;
            throttle_wake_soon();   /* a slot that came back meanwhile is not missed */
        }
        return 0;
    case LIMITER_SLOTS_REJECT: break;
    }
    throttle_give_back(h);
    throttle_slots_drop(h->req);
    throttle_reject_text(h->error, sizeof(h->error), rule, 0);
    throttle_release(h, h->error);
    return 1;
}

/* Take the slots of the waiters again, oldest first. Each release hands a
 * request back to its client code, which may change the list: the walk
 * starts again after each, and ends when none can go. */
static void throttle_wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct throttle_hold *h;
    int moved = 1;

    (void)fd;
    (void)what;
    (void)arg;
    while (moved) {
        moved = 0;
        TAILQ_FOREACH(h, &throttle_slot_waiters, wait_link) {
            if (throttle_go(h)) {
                moved = 1;
                break;
            }
        }
    }
}

/* Have throttle_wake_cb run from the event loop (never inside whatever
 * freed a slot: a reply, a client closing) when anything waits. */
static void throttle_wake_soon(void)
{
    if (TAILQ_EMPTY(&throttle_slot_waiters) || throttle_down)
        return;
    if (throttle_wake_ev == NULL)
        throttle_wake_ev = event_new(server.base, -1, 0, throttle_wake_cb, NULL);
    if (throttle_wake_ev != NULL)
        event_active(throttle_wake_ev, EV_TIMEOUT, 0);
}

/* request_free's hook, and the reply's: REQ's slots go back. */
static void throttle_slots_drop(struct request *req)
{
    struct limiter_slots *s = req->slots;

    req->slots = NULL;
    if (limiter_slots_free(s))
        throttle_wake_soon();
}

void throttle_request_done(struct request *req, size_t reply_len)
{
    if (req->slots == NULL)
        return;
    limiter_slots_charge(req->slots, req->service_us, req->raw_len + reply_len);
    throttle_slots_drop(req);
}

static void throttle_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    throttle_go(arg);
}

/* Ask Redis to put back the token the grant G took from a shared bucket. */
static void throttle_send_refund(const struct throttle_granted *g)
{
    struct throttle_ask *a = calloc(1, sizeof(*a));

    a->ask = g->ask;
    a->ask.kind = LIMITER_ASK_REFUND;
    a->ask.want = 0;
    a->wait_us = g->wait_us;
    throttle_send_ask(a);
}

/* H's request will not go: give back what it took, local and shared.
 * Local buckets need the client, so this runs before it is gone. */
static void throttle_give_back(struct throttle_hold *h)
{
    if (h->c != NULL && h->taken_count > 0) {
        struct limiter_identity who;
        throttle_identity(h->c, &who);
        limiter_give_back(h->c->limiter, &who, h->taken, h->taken_count);
    }
    h->taken_count = 0;
    for (int i = 0; i < h->granted_count; i++)
        throttle_send_refund(&h->granted[i]);
    h->granted_count = 0;
}

/* Every answer is in: refuse, wait, or go. */
static void throttle_settle(struct throttle_hold *h)
{
    struct timeval tv;

    if (h->c == NULL) {
        throttle_hold_free(h);   /* given back when the client left */
        return;
    }
    if (h->rejected) {
        throttle_give_back(h);
        throttle_release(h, h->error);
        return;
    }
    if (h->wait_us == 0) {
        throttle_go(h);
        return;
    }
    tv.tv_sec = (time_t)(h->wait_us / 1000000);
    tv.tv_usec = (suseconds_t)(h->wait_us % 1000000);
    h->timer = evtimer_new(server.base, throttle_timer_cb, h);
    evtimer_add(h->timer, &tv);
}

/* 1 when A gives tokens back (a request's, or a lease's). */
static int throttle_giving_back(const struct throttle_ask *a)
{
    return a->ask.kind == LIMITER_ASK_REFUND || a->ask.kind == LIMITER_ASK_RETURN;
}

/* The ask's request is freed: one answer fewer to wait for. */
static void throttle_ask_free(struct request *req)
{
    struct throttle_ask *a = req->ctx;
    struct throttle_hold *h = a->hold;

    if (!a->answered && throttle_giving_back(a)) {
        log_info("rule %s: token not given back to the shared bucket (backend down)",
                 a->ask.rule_name);
    } else if (!a->answered) {
        if (a->ask.kind == LIMITER_ASK_REQUEST)
            log_info("rule %s: shared bucket not asked (backend down); let through",
                     a->ask.rule_name);
        limiter_shared_done(&a->ask, -1, 0, 0);
    }
    free(a);
    req->ctx = NULL;
    if (h != NULL && --h->asks_pending == 0)
        throttle_settle(h);
}

/* Redis allowed (or refused) H's request a token of the shared bucket of
 * ASK, after WAIT_US. A grant is kept to give back should the request not
 * go, and given back at once when that is known already. */
static void throttle_answer(struct throttle_hold *h, const struct limiter_shared_ask *ask,
                            int allowed, uint64_t wait_us)
{
    struct throttle_granted g = {*ask, wait_us};

    if (!allowed) {
        if (!h->rejected) {
            h->rejected = 1;
            throttle_reject_text(h->error, sizeof(h->error), ask->rule_name, wait_us);
        }
        return;
    }
    if (h->rejected || h->c == NULL)
        throttle_send_refund(&g);
    else
        h->granted[h->granted_count++] = g;   /* room for each ask: throttle_hold */
    if (wait_us > h->wait_us)
        h->wait_us = wait_us;
}

/* Redis's answer {allowed, wait_us, tokens} about A's bucket, or an error:
 * then the request goes through (fail open). */
static void throttle_ask_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct throttle_ask *a = req->ctx;
    struct throttle_hold *h = a->hold;
    long long v[5] = {0, 0, 0, 0, 0};
    char buf[160];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;

    evbuffer_copyout(src, buf, n);
    buf[n] = '\0';
    evbuffer_drain(src, len);
    a->answered = 1;
    if (type == REPLY_ERROR && strncmp(buf, "-NOSCRIPT", 9) == 0 && !a->sent_as_eval) {
        struct throttle_ask *again = malloc(sizeof(*again));
        *again = *a;
        again->sent_as_eval = 1;
        again->answered = 0;
        if (h != NULL)
            h->asks_pending++;
        throttle_send_ask(again);
    } else if (throttle_giving_back(a)) {
        if (type == REPLY_ARRAY && a->ask.kind == LIMITER_ASK_REFUND)
            limiter_shared_given_back(&a->ask, a->wait_us);
        else if (type != REPLY_ARRAY)
            log_info("rule %s: tokens not given back to the shared bucket (%.*s)",
                     a->ask.rule_name, (int)strcspn(buf, "\r\n"), buf);
    } else if (type != REPLY_ARRAY || reply_parse_ints(buf, n, v, 5) < (a->ask.want > 0 ? 4 : 2)) {
        log_info("rule %s: shared bucket not asked (%.*s); let through", a->ask.rule_name,
                 (int)strcspn(buf, "\r\n"), buf);
        limiter_shared_done(&a->ask, -1, 0, 0);
    } else {
        /* A lease's answer says how many it granted; else one, if allowed. */
        limiter_shared_done(&a->ask, (int)v[0], (uint64_t)v[1],
                            a->ask.want > 0 ? (double)v[3] : (double)v[0]);
        if (h != NULL)
            throttle_answer(h, &a->ask, (int)v[0], (uint64_t)v[1]);
    }
    request_free(req);
}

static void throttle_fmt_double(char *out, size_t size, double v)
{
    snprintf(out, size, "%.17g", v);
}

/* The script's mode (ARGV[5]) for A: a refund gives tokens back, a
 * lease takes up to its want; a request's ask without a lease has none. */
static int throttle_ask_mode(const struct throttle_ask *a, struct sv *mode)
{
    if (throttle_giving_back(a))
        *mode = (struct sv){"refund", 6};
    else if (a->ask.want > 0)
        *mode = (struct sv){"lease", 5};
    else
        return 0;
    return 1;
}

/* Send A's question: EVALSHA bucket (EVAL after NOSCRIPT), routed by the
 * bucket key's slot. A takes part in its hold's count already.
 *   ask:     rate burst 1 max_wait
 *   lease:   rate burst want max_wait lease ttl_us   (a request's, or a refill's)
 *   refund:  rate burst n 0 refund                   (a request's token, or a lease's) */
static void throttle_send_ask(struct throttle_ask *a)
{
    char rate[32], burst[32], wait[24], cost[32], ttl[24];
    struct sv keys[1] = {{a->ask.key, strlen(a->ask.key)}};
    struct sv args[6];
    int nargs = 4 + throttle_ask_mode(a, &args[4]);
    struct evbuffer *buf = evbuffer_new();
    /* During a CLIENT PAUSE Redis holds the script: on a one-shot connection. */
    struct backend_conn *conn =
        pause_internal_conn(router_node_for_key(keys[0].ptr, keys[0].len), 0, 1);

    throttle_fmt_double(rate, sizeof(rate), a->ask.rate_per_s);
    throttle_fmt_double(burst, sizeof(burst), a->ask.burst);
    throttle_fmt_double(cost, sizeof(cost), a->ask.want > 0 ? a->ask.want : 1);
    snprintf(wait, sizeof(wait), "%llu",
             (unsigned long long)(throttle_giving_back(a) ? 0 : a->ask.max_wait_us));
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)LEASE_TTL_US);
    args[0] = (struct sv){rate, strlen(rate)};
    args[1] = (struct sv){burst, strlen(burst)};
    args[2] = (struct sv){cost, strlen(cost)};
    args[3] = (struct sv){wait, strlen(wait)};
    args[5] = (struct sv){ttl, strlen(ttl)};
    if (nargs == 5 && args[4].len == 5)
        nargs = 6;   /* a lease says its lifetime */
    if (!a->sent_as_eval)
        limiter_shared_sent(&a->ask);
    if (a->sent_as_eval)
        scripts_write_eval(buf, throttle_bucket_script, 1, keys, nargs, args);
    else
        scripts_write_evalsha(buf, throttle_bucket_script, 1, keys, nargs, args);
    /* On failure the request is freed at once, and with it A (fail open). */
    backend_send_internal(conn, buf, throttle_ask_reply, a, throttle_ask_free);
    evbuffer_free(buf);
}

/* A new hold of REQ for C with room for what the decision D gave and
 * may give: its tokens taken, a grant per shared rule asked. NULL when
 * memory ran out. */
static struct throttle_hold *throttle_hold_new(struct client *c, struct request *req,
                                               const struct limiter_decision *d)
{
    struct throttle_hold *h = calloc(1, sizeof(*h));

    if (h == NULL)
        return NULL;
    h->taken = calloc((size_t)d->taken_count + 1, sizeof(*h->taken));
    h->granted = calloc((size_t)d->ask_count + 1, sizeof(*h->granted));
    if (h->taken == NULL || h->granted == NULL) {
        free(h->taken);
        free(h->granted);
        free(h);
        return NULL;
    }
    h->c = c;
    h->req = req;
    h->wait_us = d->wait_us;
    h->taken_count = d->taken_count;
    memcpy(h->taken, d->taken, sizeof(h->taken[0]) * (size_t)d->taken_count);
    return h;
}

void throttle_hold(struct client *c, struct request *req, const struct throttle_decision *td)
{
    const struct limiter_decision *d = td->limits;
    struct throttle_hold *h = throttle_hold_new(c, req, d);

    if (h == NULL) {
        /* It does not go: its tokens go back, and it is answered. */
        struct limiter_identity who;
        throttle_identity(c, &who);
        limiter_give_back(c->limiter, &who, d->taken, d->taken_count);
        throttle_hand_back(c, req, "OOM sluice is out of memory");
        return;
    }
    c->throttle_hold = h;
    /* Counted before any is sent: a failed send settles at once. */
    h->asks_pending = d->ask_count + 1;
    for (int i = 0; i < d->ask_count; i++) {
        struct throttle_ask *a = calloc(1, sizeof(*a));
        a->hold = h;
        a->ask = d->ask[i];
        throttle_send_ask(a);
    }
    if (--h->asks_pending == 0)
        throttle_settle(h);
}

void throttle_client_closed(struct client *c)
{
    struct throttle_hold *h = c->throttle_hold;

    if (h != NULL)
        throttle_give_back(h);   /* its request will never go */
    limiter_client_free(c->limiter);
    c->limiter = NULL;
    c->throttle_hold = NULL;
    if (h == NULL)
        return;
    h->c = NULL;
    if (h->asks_pending == 0)
        throttle_hold_free(h);   /* it was waiting on its timer only */
}

void throttle_client_changed(struct client *c)
{
    c->identity_changes++;
    limiter_client_changed(c->limiter);
}

void throttle_cron(void)
{
    uint64_t now = server_now_us();

    if (now - throttle_last_cron_us < 1000000)
        return;
    throttle_last_cron_us = now;
    limiter_cron(now);
    throttle_wake_soon();   /* once a second, whatever a wake-up missed */
}

double throttle_return_leases(void)
{
    return limiter_return_leases();
}

void throttle_shutdown(void)
{
    struct errlist errs = {0};

    limiter_load(NULL, &errs);
    errlist_free(&errs);
    free(throttle_exempt_by_id);
    throttle_exempt_by_id = NULL;
    if (throttle_wake_ev != NULL)
        event_free(throttle_wake_ev);
    throttle_wake_ev = NULL;
    throttle_down = 1;
    limiter_decision_free(&throttle_limits);
}
