/* lease.c - owns the arithmetic of leased tokens (lease.h): what one
 * sluice holds of a shared bucket, when it asks for more and how many,
 * and the table of leases by bucket key. Knows nothing of Redis or rules.
 *
 * Sizing: the recent rate r of requests meeting the rule (windows of
 * LEASE_WINDOW_US, halved into the past at each) gives the target
 *     target = clamp(ceil(r * lease_us / 1e6), 1, lease_max)
 * A refill is asked when what is held and asked falls to target / 2: at a
 * steady rate the answer (one Redis round trip, well under lease_us / 2)
 * is in before the last token is spent. */
#include "lease.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_WINDOW_US 100000ULL
/* A window this short says little; the current one counts as this long. */
#define LEASE_MIN_SPAN_US 1000ULL

void lease_note(struct lease *l, uint64_t now_us)
{
    uint64_t span = now_us - l->window_start_us;

    l->last_use_us = now_us;
    if (l->window_start_us == 0 || now_us < l->window_start_us) {
        l->window_start_us = now_us;
        l->window_count = 1;
        return;
    }
    if (span < LEASE_WINDOW_US) {
        l->window_count++;
        return;
    }
    double r = (double)l->window_count * 1e6 / (double)span;
    l->low_water_known = 0;
    /* After a pause the old rate says nothing of the new one. */
    l->rate_per_s = span > 10 * LEASE_WINDOW_US ? r : (l->rate_per_s + r) / 2;
    l->window_start_us = now_us;
    l->window_count = 1;
}

double lease_rate(const struct lease *l, uint64_t now_us)
{
    uint64_t span;
    double now_rate;

    if (l->window_start_us == 0 || now_us < l->window_start_us)
        return l->rate_per_s;
    span = now_us - l->window_start_us;
    /* The current window's rate from the gaps between its requests: one
     * request alone says nothing of a rate. */
    now_rate = l->window_count < 2 ? 0 :
               (double)(l->window_count - 1) * 1e6 /
                   (double)(span > LEASE_MIN_SPAN_US ? span : LEASE_MIN_SPAN_US);
    if (span > 10 * LEASE_WINDOW_US)
        return now_rate;
    /* A rising rate shows in the current window first. */
    return now_rate > l->rate_per_s ? now_rate : l->rate_per_s;
}

double lease_held(const struct lease *l)
{
    return l->slot[0].tokens + l->slot[1].tokens;
}

double lease_expire(struct lease *l, uint64_t now_us)
{
    double dropped = 0;

    for (int i = 1; i >= 0; i--) {
        if (l->slot[i].tokens > 0 && now_us >= l->slot[i].deadline_us) {
            dropped += l->slot[i].tokens;
            l->slot[i].tokens = 0;
        }
    }
    if (l->slot[0].tokens <= 0 && l->slot[1].tokens > 0) {
        l->slot[0] = l->slot[1];
        l->slot[1].tokens = 0;
    }
    return dropped;
}

int lease_take(struct lease *l)
{
    if (l->slot[0].tokens >= 1) {
        l->slot[0].tokens -= 1;
        if (l->slot[0].tokens <= 0 && l->slot[1].tokens > 0) {
            l->slot[0] = l->slot[1];
            l->slot[1].tokens = 0;
        }
        return 1;
    }
    if (l->slot[1].tokens >= 1) {
        l->slot[1].tokens -= 1;
        return 1;
    }
    return 0;
}

void lease_put_back(struct lease *l)
{
    l->slot[0].tokens += 1;   /* keeps slot 0's deadline: it expires no later */
}

void lease_add(struct lease *l, double tokens, uint64_t sent_us)
{
    uint64_t deadline = sent_us + LEASE_TTL_US;

    if (tokens <= 0)
        return;
    if (l->slot[0].tokens <= 0) {
        l->slot[0] = (struct lease_slot){tokens, deadline};
    } else if (l->slot[1].tokens <= 0) {
        l->slot[1] = (struct lease_slot){tokens, deadline};
    } else {
        /* Three grants at once: the newer two share the earlier deadline,
         * so no token outlives its own. */
        l->slot[1].tokens += tokens;
        if (deadline < l->slot[1].deadline_us)
            l->slot[1].deadline_us = deadline;
    }
}

double lease_drain(struct lease *l)
{
    double held = lease_held(l);

    l->slot[0].tokens = l->slot[1].tokens = 0;
    return held;
}

static double lease_target(const struct lease *l, uint64_t now_us, uint64_t lease_us,
                           double lease_max)
{
    double target = ceil(lease_rate(l, now_us) * (double)lease_us / 1e6);

    if (target > lease_max)
        target = lease_max;
    return target < 1 ? 1 : target;
}

double lease_ask_want(const struct lease *l, uint64_t now_us, uint64_t lease_us,
                      double lease_max)
{
    double want = lease_target(l, now_us, lease_us, lease_max) - lease_held(l) - l->asked;

    return want < 1 ? 1 : floor(want);
}

double lease_refill_want(struct lease *l, uint64_t now_us, uint64_t lease_us,
                         double lease_max)
{
    double target, held = lease_held(l), want;

    if (l->refilling || now_us < l->refused_until_us || now_us < l->refill_after_us ||
        lease_us == 0)
        return 0;
    /* Most requests stop here: the mark is computed again only once the
     * rate estimate moved (a window ended) or the lease fell to it. */
    if (l->low_water_known && held + l->asked > l->low_water)
        return 0;
    target = lease_target(l, now_us, lease_us, lease_max);
    l->low_water = target / 2;
    l->low_water_known = 1;
    if (held + l->asked > target / 2)
        return 0;   /* above the low-water mark */
    /* Tokens not spent before they expire would only be given back. */
    if (lease_rate(l, now_us) * (double)LEASE_TTL_US / 1e6 < held + 1)
        return 0;
    want = floor(target - held - l->asked);
    return want >= 1 ? want : 0;
}

int lease_idle(const struct lease *l, uint64_t now_us)
{
    return lease_held(l) <= 0 && l->asked <= 0 && !l->refilling &&
           now_us - l->last_use_us >= LEASE_IDLE_US;
}

/* ---- the table ------------------------------------------------------- */

struct lease_entry {
    struct lease_entry *next;
    struct lease lease;
    char key[];
};

static unsigned lease_hash(const char *s)
{
    unsigned h = 2166136261u;

    while (*s != '\0')
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % LEASE_TABLE_CHAINS;
}

struct lease *lease_table_find(struct lease_table *t, const char *key)
{
    for (struct lease_entry *e = t->chains[lease_hash(key)]; e != NULL; e = e->next) {
        if (strcmp(e->key, key) == 0)
            return &e->lease;
    }
    return NULL;
}

struct lease *lease_table_get(struct lease_table *t, const char *key)
{
    struct lease *found = lease_table_find(t, key);
    struct lease_entry *e;
    size_t len = strlen(key);

    if (found != NULL)
        return found;
    e = calloc(1, sizeof(*e) + len + 1);
    if (e == NULL)
        return NULL;
    memcpy(e->key, key, len + 1);
    e->lease.key = e->key;
    e->next = t->chains[lease_hash(key)];
    t->chains[lease_hash(key)] = e;
    t->count++;
    return &e->lease;
}

void lease_table_sweep(struct lease_table *t, lease_visit_fn *fn, void *ctx)
{
    for (int c = 0; c < LEASE_TABLE_CHAINS && t->count > 0; c++) {
        struct lease_entry **p = &t->chains[c];
        while (*p != NULL) {
            struct lease_entry *e = *p;
            if (fn(e->key, &e->lease, ctx)) {
                *p = e->next;
                free(e);
                t->count--;
            } else {
                p = &e->next;
            }
        }
    }
}

void lease_table_clear(struct lease_table *t)
{
    for (int c = 0; c < LEASE_TABLE_CHAINS; c++) {
        while (t->chains[c] != NULL) {
            struct lease_entry *next = t->chains[c]->next;
            free(t->chains[c]);
            t->chains[c] = next;
        }
    }
    t->count = 0;
}
