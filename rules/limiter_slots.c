/* limiter_slots.c - owns the concurrency limits of the rules (max_inflight,
 * max_blocked): a gate per rule and subject counting the slots its
 * requests hold, and the slots one request holds or waits for; and, in the
 * same per-request list, which cost rules (cost = redis_time / bytes) the
 * request is to be charged to after its reply (limiter.c charges them).
 * Knows nothing of requests or clients: the proxy keeps a request's slots
 * with it, frees them when the request leaves Redis, and queues the waiters.
 *
 *   limiter_admit -> limiter_slots_add: one slot per matching rule whose
 *                    limit counts the request's kind (blocking or not),
 *                    in rule order (so two requests never wait on each
 *                    other: every request takes its gates in one order)
 *   limiter_slots_take -> each gate in turn: a free slot? take it
 *                         : reject (action = reject), or wait (delay)
 *   limiter_slots_free -> slots held go back; the gate is freed with its
 *                         last reference, even after its rule is gone
 */
#include "limiter_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* Requests of one subject of one rule at once, by kind (LIMITER_SLOT_*). */
struct limiter_gate {
    struct limiter_gate *next;
    struct rule_state *st;     /* NULL once its rule is reloaded away: no limit */
    int refs;                  /* slots that name it (held, waiting or not yet taken) */
    int held[2];
    int waiting[2];
    char key[];
};

/* A slot counts in held[kind] and waiting[kind]; a charge (a cost rule's
 * entry) counts nowhere and is never waited for. */
enum { LIMITER_SLOT_INFLIGHT, LIMITER_SLOT_BLOCKED, LIMITER_SLOT_CHARGE };

struct limiter_slot {
    struct limiter_gate *gate;
    unsigned char kind;        /* LIMITER_SLOT_* */
    unsigned char held;
    unsigned char waiting;     /* counted in its gate's waiting[] */
    unsigned char charged;     /* CHARGE: done */
};

struct limiter_slots {
    int count;
    int next;                  /* slots before it are held */
    uint64_t wait_since_us;    /* when the request began to wait at slot[next] */
    struct limiter_slot slot[];
};

static unsigned limiter_gate_hash(const char *s)
{
    unsigned h = 2166136261u;

    while (*s != '\0')
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % LIMITER_KEYED_CHAINS;
}

/* ST's gate for KEY, made when missing, with one more reference. NULL
 * when memory ran out. */
static struct limiter_gate *limiter_gate_get(struct rule_state *st, const char *key)
{
    struct limiter_gate **chain = &st->gates[limiter_gate_hash(key)], *g;
    size_t len = strlen(key);

    for (g = *chain; g != NULL; g = g->next) {
        if (strcmp(g->key, key) == 0)
            break;
    }
    if (g == NULL) {
        g = calloc(1, sizeof(*g) + len + 1);
        if (g == NULL)
            return NULL;
        memcpy(g->key, key, len + 1);
        g->st = st;
        g->next = *chain;
        *chain = g;
    }
    g->refs++;
    return g;
}

/* One reference to G fewer: with the last, G goes (out of its rule's
 * chain while the rule lives). */
static void limiter_gate_unref(struct limiter_gate *g)
{
    if (--g->refs > 0)
        return;
    if (g->st != NULL) {
        struct limiter_gate **p = &g->st->gates[limiter_gate_hash(g->key)];
        while (*p != g)
            p = &(*p)->next;
        *p = g->next;
    }
    free(g);
}

void limiter_gates_orphan(struct rule_state *st)
{
    for (int c = 0; c < LIMITER_KEYED_CHAINS; c++) {
        struct limiter_gate *g = st->gates[c];
        while (g != NULL) {
            struct limiter_gate *next = g->next;
            g->st = NULL;   /* referenced still (every gate is): freed by its last slot */
            g->next = NULL;
            g = next;
        }
        st->gates[c] = NULL;
    }
}

void limiter_subject_key(const struct rule_state *st, const struct limiter_identity *who,
                             char *out, size_t size)
{
    switch (st->rule->per) {
    case RULE_PER_CLIENT:
        snprintf(out, size, "#%llu", (unsigned long long)who->client_id);
        return;
    case RULE_PER_IP: snprintf(out, size, "%s", who->ip != NULL ? who->ip : ""); return;
    case RULE_PER_USER: snprintf(out, size, "%s", who->user != NULL ? who->user : "default"); return;
    case RULE_PER_NAME: snprintf(out, size, "%s", who->name != NULL ? who->name : ""); return;
    case RULE_PER_RULE: break;
    }
    out[0] = '\0';
}

static int limiter_slot_limit(const struct rule *r, int kind)
{
    return kind == LIMITER_SLOT_BLOCKED ? r->max_blocked : r->max_inflight;
}

static void limiter_slots_put(struct limiter_pass *p, struct rule_state *st, int kind);

void limiter_slots_add(struct limiter_pass *p, struct rule_state *st)
{
    int kind = p->blocking ? LIMITER_SLOT_BLOCKED : LIMITER_SLOT_INFLIGHT;

    if (limiter_slot_limit(st->rule, kind) == 0)
        return;   /* the rule limits the other kind only */
    limiter_slots_put(p, st, kind);
}

void limiter_slots_add_charge(struct limiter_pass *p, struct rule_state *st)
{
    limiter_slots_put(p, st, LIMITER_SLOT_CHARGE);
}

/* An entry of KIND for ST's gate of P's subject in P's decision. */
static void limiter_slots_put(struct limiter_pass *p, struct rule_state *st, int kind)
{
    struct limiter_slots *s = p->out->slots;
    char key[512];
    struct limiter_gate *g;

    if (s == NULL) {
        s = calloc(1, sizeof(*s) + sizeof(s->slot[0]) * (size_t)p->room);
        if (s == NULL)
            return;   /* out of memory: the request goes unlimited rather than lost */
        p->out->slots = s;
    }
    limiter_subject_key(st, p->who, key, sizeof(key));
    g = limiter_gate_get(st, key);
    if (g != NULL && s->count < p->room)
        s->slot[s->count++] = (struct limiter_slot){g, (unsigned char)kind, 0, 0, 0};
    else if (g != NULL)
        limiter_gate_unref(g);
}

/* Slot SL's gate has room for one more of its kind; a newcomer (not
 * QUEUED) also finds it full while others wait there, so it queues behind
 * them. A gate whose rule is gone, or whose limit is off now, has room. */
static int limiter_slot_room(const struct limiter_slot *sl, int queued)
{
    const struct limiter_gate *g = sl->gate;
    int limit = g->st != NULL ? limiter_slot_limit(g->st->rule, sl->kind) : 0;

    if (limit == 0)
        return 1;
    if (!queued && !sl->waiting && g->waiting[sl->kind] > 0)
        return 0;
    return g->held[sl->kind] < limit;
}

/* SL is full for its enforce rule ST: refuse (1) or wait (0). */
static int limiter_slot_full(struct limiter_slots *s, struct limiter_slot *sl,
                             const struct limiter_identity *who, char *rule, size_t size)
{
    struct rule_state *st = sl->gate->st;

    if (st->rule->action == RULE_ACTION_REJECT) {
        st->rejected++;
        limiter_metric(st, LIMITER_REJECTED, 0);
        limiter_hit_who(st, who, 0);
        snprintf(rule, size, "%s", st->rule->name);
        return 1;
    }
    if (!sl->waiting) {
        sl->waiting = 1;
        sl->gate->waiting[sl->kind]++;
        st->slot_waits++;
        st->delayed++;
        limiter_hit_who(st, who, 1);
        s->wait_since_us = server_now_us();
    }
    return 0;
}

/* SL gets its slot: counted as held, and its wait (if any) as a delay. */
static void limiter_slot_hold(struct limiter_slots *s, struct limiter_slot *sl,
                              const struct limiter_identity *who)
{
    struct limiter_gate *g = sl->gate;
    struct rule_state *st = g->st;

    if (st != NULL && st->rule->mode == RULE_MODE_DRYRUN) {
        int limit = limiter_slot_limit(st->rule, sl->kind);
        int over = limit > 0 && g->held[sl->kind] >= limit;
        char subject[LIMITER_SUBJECT_MAX];
        if (over) {
            limiter_subject(who, subject, sizeof(subject));
            limiter_dryrun_hit(st, subject, 0);
        }
        if (over || st->rule->rate_per_s == 0)
            limiter_metric(st, over ? LIMITER_DRYRUN : LIMITER_ADMITTED, 0);
    } else if (st != NULL && sl->waiting) {
        uint64_t now = server_now_us();
        limiter_metric(st, LIMITER_DELAYED, now > s->wait_since_us ? now - s->wait_since_us : 0);
    } else if (st != NULL && st->rule->rate_per_s == 0) {
        st->admitted++;   /* a rule with a rate counted it at its bucket */
        limiter_metric(st, LIMITER_ADMITTED, 0);
    }
    if (sl->waiting) {
        sl->waiting = 0;
        g->waiting[sl->kind]--;
    }
    g->held[sl->kind]++;
    if (st != NULL)
        st->held_now[sl->kind]++;
    sl->held = 1;
}

enum limiter_slots_verdict limiter_slots_take(struct limiter_slots *s, int queued,
                                              const struct limiter_identity *who, char *rule,
                                              size_t size)
{
    while (s->next < s->count) {
        struct limiter_slot *sl = &s->slot[s->next];
        const struct rule_state *st = sl->gate->st;
        int dryrun = st != NULL && st->rule->mode == RULE_MODE_DRYRUN;

        if (sl->kind == LIMITER_SLOT_CHARGE) {
            s->next++;   /* nothing to take: charged after the reply */
            continue;
        }
        if (!dryrun && !limiter_slot_room(sl, queued))
            return limiter_slot_full(s, sl, who, rule, size) ? LIMITER_SLOTS_REJECT
                                                             : LIMITER_SLOTS_WAIT;
        limiter_slot_hold(s, sl, who);
        s->next++;
    }
    return LIMITER_SLOTS_HELD;
}

int limiter_slots_free(struct limiter_slots *s)
{
    int wake = 0;

    if (s == NULL)
        return 0;
    for (int i = 0; i < s->count; i++) {
        struct limiter_slot *sl = &s->slot[i];
        struct limiter_gate *g = sl->gate;
        if (sl->kind == LIMITER_SLOT_CHARGE) {
            limiter_gate_unref(g);
            continue;
        }
        if (sl->held) {
            g->held[sl->kind]--;
            if (g->st != NULL)
                g->st->held_now[sl->kind]--;
            wake |= g->waiting[sl->kind] > 0;
        }
        if (sl->waiting)
            g->waiting[sl->kind]--;
        limiter_gate_unref(g);
    }
    free(s);
    return wake;
}

int limiter_slots_next_charge(struct limiter_slots *s, int *i, struct rule_state **st,
                              const char **key)
{
    for (; s != NULL && *i < s->count; (*i)++) {
        struct limiter_slot *sl = &s->slot[*i];
        if (sl->kind != LIMITER_SLOT_CHARGE || sl->charged || sl->gate->st == NULL)
            continue;   /* a rule reloaded away charges nothing */
        sl->charged = 1;
        *st = sl->gate->st;
        *key = sl->gate->key;
        (*i)++;
        return 1;
    }
    return 0;
}
