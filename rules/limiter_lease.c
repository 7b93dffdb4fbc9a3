/* limiter_lease.c - owns how shared rules use leases (rules/lease.h):
 * a request spends a leased token or meets a refusal Redis gave lately,
 * else the limiter asks Redis as without leases, and that ask leases too;
 * refills, returns and expiry go out through the proxy's send hook
 * (limiter_set_send). Never waits on Redis itself.
 *
 *   request -> limiter_apply_shared -> lease holds a token? match (take later)
 *                                   -> refused lately (reject)? match (refuse)
 *                                   -> else ask Redis: "lease" for want tokens
 *   answer  -> limiter_shared_done  -> one for the request, the rest held
 *   low water (lease_refill_want)   -> refill, no request waiting
 *   expiry, reload, shutdown        -> return ("refund") */
#include "limiter_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

/* A user or client name longer than this goes into a shared bucket's key
 * as its SHA-256 (limiter_shared_key), so the key always fits. */
#define LIMITER_KEY_IDENTITY_MAX 64

_Static_assert(sizeof("sluice:bucket:{}:client:4294967295:18446744073709551615") + RULES_NAME_MAX <=
                   sizeof(((struct limiter_shared_ask *)0)->key) &&
               sizeof("sluice:bucket:{}:name-sha256:") + RULES_NAME_MAX + 64 <=
                   sizeof(((struct limiter_shared_ask *)0)->key),
               "every shared bucket key fits");

/* The key of rule R's shared bucket for the user or client name ID, of
 * kind KIND ("user", "name"): ID itself, or when it is long, "KIND-sha256:"
 * and its digest in hex. Never cut short: two names that share a prefix
 * must not share a bucket, and a short name cannot be taken for a digest
 * (its kind is another). */
static void limiter_identity_key(const struct rule *r, const char *kind, const char *id,
                                 char *out, size_t size)
{
    size_t len = strlen(id);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];

    if (len <= LIMITER_KEY_IDENTITY_MAX) {
        snprintf(out, size, "sluice:bucket:{%s}:%s:%s", r->name, kind, id);
        return;
    }
    if (EVP_Digest(id, len, digest, &n, EVP_sha256(), NULL) != 1)
        n = 0;   /* no digest: long names share one bucket, never a short name's */
    for (unsigned int i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    hex[2 * n] = '\0';
    snprintf(out, size, "sluice:bucket:{%s}:%s-sha256:%s", r->name, kind, hex);
}

/* The shared bucket key of rule ST for WHO, in one hash slot per rule. */
void limiter_shared_key(const struct rule_state *st, const struct limiter_identity *who,
                               char *out, size_t size)
{
    const struct rule *r = st->rule;

    switch (r->per) {
    case RULE_PER_CLIENT:
        snprintf(out, size, "sluice:bucket:{%s}:client:%d:%llu", r->name, (int)getpid(),
                 (unsigned long long)who->client_id);
        break;
    case RULE_PER_IP: snprintf(out, size, "sluice:bucket:{%s}:ip:%s", r->name, who->ip); break;
    case RULE_PER_USER:
        limiter_identity_key(r, "user", who->user ? who->user : "default", out, size);
        break;
    case RULE_PER_NAME: limiter_identity_key(r, "name", who->name ? who->name : "", out, size); break;
    case RULE_PER_RULE: snprintf(out, size, "sluice:bucket:{%s}", r->name); break;
    }
}

static limiter_send_fn *limiter_send;

/* What a walk over a rule's leases (lease_table_sweep) needs. */
struct limiter_tick {
    struct rule_state *st;
    uint64_t now_us;
    double returned;
};
/* After a refill could not be sent (no backend), the next waits this long. */
#define LIMITER_LEASE_RETRY_US 100000ULL

void limiter_set_send(limiter_send_fn *send)
{
    limiter_send = send;
}

/* Fill A, a message about the shared bucket KEY of rule ST, of KIND. */
static void limiter_ask_fill(struct limiter_shared_ask *a, const struct rule_state *st,
                             const char *key, enum limiter_ask_kind kind, uint64_t now_us)
{
    const struct rule *r = st->rule;

    a->kind = kind;
    a->want = 0;
    a->sent_us = now_us;
    a->rule_id = st->id;
    snprintf(a->key, sizeof(a->key), "%s", key);
    snprintf(a->rule_name, sizeof(a->rule_name), "%s", r->name);
    a->rate_per_s = r->rate_per_s;
    a->burst = r->burst;
    a->max_wait_us = kind == LIMITER_ASK_REQUEST && r->action == RULE_ACTION_DELAY ?
                         r->max_delay_us : 0;
    a->dryrun = r->mode == RULE_MODE_DRYRUN;
    a->subject[0] = '\0';
}

/* Ask Redis for WANT tokens for lease L of ST (REFILL), or give WANT back
 * (RETURN). A refill counts as asked before it is sent: a send that fails
 * answers at once (limiter_shared_done). */
static void limiter_lease_send(struct rule_state *st, struct lease *l, enum limiter_ask_kind kind,
                               double want, uint64_t now_us)
{
    struct limiter_shared_ask a;
    char key[sizeof(a.key)];

    if (limiter_send == NULL || want < 1)
        return;
    if (l->key != NULL)
        snprintf(key, sizeof(key), "%s", l->key);
    else
        snprintf(key, sizeof(key), "sluice:bucket:{%s}", st->rule->name);
    limiter_ask_fill(&a, st, key, kind, now_us);
    if (kind == LIMITER_ASK_RETURN) {
        /* More than burst is no use: the bucket never holds more. */
        a.want = want < st->rule->burst ? want : st->rule->burst;
        st->returned += (uint64_t)want;
        *st->metric_lease[1] += (uint64_t)want;
    } else {
        a.want = want;
        l->refilling = 1;
        l->asked += want;
    }
    limiter_send(&a);
}

/* Give back what of lease L of ST is past its deadline. */
static void limiter_lease_expire(struct rule_state *st, struct lease *l, uint64_t now_us)
{
    double dropped = lease_expire(l, now_us);

    if (dropped > 0)
        limiter_lease_send(st, l, LIMITER_ASK_RETURN, dropped, now_us);
}

void limiter_lease_refill(struct rule_state *st, struct lease *l, uint64_t now_us)
{
    double want = lease_refill_want(l, now_us, st->rule->lease_us, st->rule->lease_max);

    if (want >= 1)
        limiter_lease_send(st, l, LIMITER_ASK_REFILL, want, now_us);
}

static int limiter_lease_return_one(const char *key, struct lease *l, void *ctx)
{
    struct limiter_tick *t = ctx;
    double n = lease_drain(l);

    (void)key;
    t->returned += n;
    limiter_lease_send(t->st, l, LIMITER_ASK_RETURN, n, t->now_us);
    return 0;
}

/* Give back every token ST's leases hold; returns how many. */
double limiter_lease_return_all(struct rule_state *st)
{
    struct limiter_tick t = {st, server_pass_now_us(), 0};

    if (st->rule->scope != RULE_SCOPE_SHARED)
        return 0;
    limiter_lease_return_one(NULL, &st->lease, &t);
    lease_table_sweep(&st->leases, limiter_lease_return_one, &t);
    return t.returned;
}


/* The lease of the shared rule ST for WHO: the rule's own (per = rule),
 * else the one of its bucket key, written to KEY. NULL when memory ran
 * out (the request is then asked about as without leases). */
struct lease *limiter_lease_for(struct rule_state *st, const struct limiter_identity *who,
                                       char *key, size_t size)
{
    if (st->rule->per == RULE_PER_RULE)
        return &st->lease;
    limiter_shared_key(st, who, key, size);
    return lease_table_get(&st->leases, key);
}

/* The lease a message ASK of ST was about, or NULL (dropped, or none). */
static struct lease *limiter_lease_of_ask(struct rule_state *st,
                                          const struct limiter_shared_ask *ask)
{
    if (ask->want <= 0 || st->rule->lease_us == 0)
        return NULL;
    if (st->rule->per == RULE_PER_RULE)
        return &st->lease;
    return lease_table_find(&st->leases, ask->key);
}

/* A request meets shared rule ST whose lease L holds a token, or was
 * lately refused by Redis (reject rules): decided here, without Redis.
 * Returns 0 when Redis must be asked. */
static int limiter_lease_apply(struct limiter_pass *p, struct rule_state *st, struct lease *l)
{
    const struct rule *r = st->rule;
    char subject[LIMITER_SUBJECT_MAX];

    lease_note(l, p->now_us);
    limiter_lease_expire(st, l, p->now_us);
    if (lease_held(l) >= 1 && r->mode == RULE_MODE_DRYRUN) {
        lease_take(l);   /* it models the limit as if enforced */
        st->admitted++;
        limiter_metric(st, LIMITER_ADMITTED, 0);
        limiter_lease_refill(st, l, p->now_us);
        return 1;
    }
    if (lease_held(l) >= 1) {
        p->m[p->n++] = (struct limiter_match){st, NULL, 0, l, 0};
        return 1;
    }
    /* A delay rule may still reserve a token Redis does not have yet. */
    if (r->action != RULE_ACTION_REJECT || p->now_us >= l->refused_until_us)
        return 0;
    if (r->mode == RULE_MODE_DRYRUN) {
        limiter_subject(p->who, subject, sizeof(subject));
        limiter_dryrun_hit(st, subject, UINT64_MAX);
        limiter_metric(st, LIMITER_DRYRUN, 0);
        return 1;
    }
    p->m[p->n++] = (struct limiter_match){st, NULL, l->refused_until_us - p->now_us, l, 0};
    return 1;
}

/* A request meets the shared rule ST: its lease decides when it can,
 * else a question for Redis, which also asks for the lease's tokens. */
void limiter_apply_shared(struct limiter_pass *p, struct rule_state *st)
{
    const struct rule *r = st->rule;
    struct limiter_shared_ask *a;
    char key[sizeof(a->key)];
    struct lease *l = NULL;

    key[0] = '\0';
    if (p->now_us == 0)
        p->now_us = server_pass_now_us();
    if (r->lease_us > 0) {
        l = limiter_lease_for(st, p->who, key, sizeof(key));
        if (l != NULL && limiter_lease_apply(p, st, l))
            return;
    }
    if (key[0] == '\0')
        limiter_shared_key(st, p->who, key, sizeof(key));
    a = &p->out->ask[p->out->ask_count++];
    limiter_ask_fill(a, st, key, LIMITER_ASK_REQUEST, p->now_us);
    if (l != NULL)
        a->want = lease_ask_want(l, p->now_us, r->lease_us, r->lease_max);
    limiter_subject(p->who, a->subject, sizeof(a->subject));
}

/* EXTRA tokens Redis granted for the lease L of ST (NULL: reloaded away,
 * or dropped) in answer to ASK: held, or given back at once when there
 * is no lease to hold them. */
static void limiter_lease_granted(struct rule_state *st, struct lease *l,
                                  const struct limiter_shared_ask *ask, double extra)
{
    struct limiter_shared_ask back = *ask;

    if (extra < 1)
        return;
    if (st != NULL && l != NULL) {
        lease_add(l, extra, ask->sent_us);
        st->leased += (uint64_t)extra;
        *st->metric_lease[0] += (uint64_t)extra;
        return;
    }
    back.kind = LIMITER_ASK_RETURN;
    back.want = extra < ask->burst ? extra : ask->burst;
    if (limiter_send != NULL)
        limiter_send(&back);
}

void limiter_lease_answer(struct rule_state *st, const struct limiter_shared_ask *ask,
                          int allowed, uint64_t wait_us, double granted)
{
    struct lease *l = st != NULL ? limiter_lease_of_ask(st, ask) : NULL;
    double extra;

    if (ask->kind != LIMITER_ASK_REQUEST && ask->kind != LIMITER_ASK_REFILL)
        return;
    /* What Redis says is range-checked as anything from the wire. */
    if (granted > ask->want && ask->want > 0)
        granted = ask->want;
    if (!(granted >= 0))
        granted = 0;
    if (l != NULL) {
        l->asked = l->asked > ask->want ? l->asked - ask->want : 0;
        if (ask->kind == LIMITER_ASK_REFILL)
            l->refilling = 0;
    }
    if (ask->kind == LIMITER_ASK_REFILL)
        extra = allowed > 0 ? granted : 0;
    else   /* the request takes one; a reserved token (wait) is its alone */
        extra = allowed > 0 && wait_us == 0 && granted > 1 ? granted - 1 : 0;
    limiter_lease_granted(st, l, ask, extra);
    if (l == NULL)
        return;
    /* Refused, or a token reserved (a delay rule's bucket in debt): no
     * token for a lease before then. */
    if (allowed == 0 || (allowed > 0 && wait_us > 0))
        l->refused_until_us = ask->sent_us + wait_us;
    else if (allowed < 0)   /* fail open: the requests pass, refills wait a little */
        l->refill_after_us = server_pass_now_us() + LIMITER_LEASE_RETRY_US;
    limiter_lease_refill(st, l, server_pass_now_us());
}

void limiter_lease_sent(struct rule_state *st, const struct limiter_shared_ask *ask)
{
    struct lease *l;

    if (st->rule->scope != RULE_SCOPE_SHARED)
        return;
    (*st->metric_calls[ask->kind])++;
    /* A refill counted itself (limiter_lease_send). */
    if (ask->kind == LIMITER_ASK_REQUEST && (l = limiter_lease_of_ask(st, ask)) != NULL)
        l->asked += ask->want;
}

static int limiter_lease_tick(const char *key, struct lease *l, void *ctx)
{
    struct limiter_tick *t = ctx;

    (void)key;
    limiter_lease_expire(t->st, l, t->now_us);
    return lease_idle(l, t->now_us);
}

/* Leases of ST: give back what expired, drop the idle ones. */
void limiter_lease_cron(struct rule_state *st, uint64_t now_us)
{
    struct limiter_tick t = {st, now_us, 0};

    if (st->rule->scope != RULE_SCOPE_SHARED)
        return;
    limiter_lease_expire(st, &st->lease, now_us);
    lease_table_sweep(&st->leases, limiter_lease_tick, &t);
}
