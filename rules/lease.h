/* lease.h - the tokens one sluice holds of a shared bucket (a rule with
 * scope = shared): leased from Redis in batches (lua/bucket.lua "lease"),
 * spent here one per request, refilled before they run out, given back
 * when unused. Pure arithmetic like bucket.h: the caller passes the time
 * (a monotonic clock, in us) and does the talking to Redis.
 *
 * Why the limit still holds: a leased token was taken from the bucket in
 * Redis, so the fleet never admits more tokens than the bucket gave out.
 * A lease only moves when a token is spent: at most the tokens held when
 * a window starts are spent in it on top of what the bucket gives in it,
 * and no token is spent after its deadline (LEASE_TTL_US after it was
 * asked for, so never later than Redis's clock allows). */
#ifndef SLUICE_LEASE_H
#define SLUICE_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* How long a leased token may be spent, from when it was asked for. */
#define LEASE_TTL_US 2000000ULL
/* A lease with nothing held or asked, unused this long, is dropped. */
#define LEASE_IDLE_US 10000000ULL

/* Tokens of one grant, spent by DEADLINE_US (local clock). */
struct lease_slot {
    double tokens;
    uint64_t deadline_us;
};

struct lease {
    struct lease_slot slot[2];    /* slot[0] is older: spent first */
    double asked;                 /* tokens asked of Redis, answers not in yet */
    int refilling;                /* a refill (not a request's ask) is in flight */
    uint64_t refused_until_us;    /* Redis said: no token before then */
    uint64_t refill_after_us;     /* Redis could not be asked: no refill before then */
    uint64_t window_start_us;     /* the rate estimate: requests counted... */
    uint32_t window_count;        /* ...since window_start_us */
    double rate_per_s;            /* their rate over the windows before */
    double low_water;             /* target / 2 as last computed... */
    int low_water_known;          /* ...until the rate estimate moves */
    uint64_t last_use_us;
    const char *key;              /* its bucket key, in its table entry; NULL for per = rule */
};

/* A request met the rule at NOW_US: counts for the rate estimate. */
void lease_note(struct lease *l, uint64_t now_us);

/* The request rate L has seen lately, per second. */
double lease_rate(const struct lease *l, uint64_t now_us);

/* Tokens held (not counting those asked for). */
double lease_held(const struct lease *l);

/* Drop the tokens whose deadline passed at NOW_US; returns how many (to
 * be given back to Redis: the bucket never holds more than burst, so a
 * late return cannot admit more than the bucket would have). */
double lease_expire(struct lease *l, uint64_t now_us);

/* Take one token: 1, or 0 when none is held. Call lease_expire first. */
int lease_take(struct lease *l);

/* A token taken for a request that then did not go comes back. */
void lease_put_back(struct lease *l);

/* TOKENS granted by Redis for an ask sent at SENT_US: held until
 * SENT_US + LEASE_TTL_US (Redis started the lease later than that). */
void lease_add(struct lease *l, double tokens, uint64_t sent_us);

/* Every token held, taken out (to give back: reload, shutdown). */
double lease_drain(struct lease *l);

/* How many tokens a request's own ask should lease when none is held:
 * enough for LEASE_US of the recent rate, at most LEASE_MAX held and
 * asked, at least 1 (the request's own). */
double lease_ask_want(const struct lease *l, uint64_t now_us, uint64_t lease_us,
                      double lease_max);

/* How many tokens to ask for ahead of need, 0 when none: no refill is in
 * flight, Redis has not just refused, the tokens held fell to half of
 * what LEASE_US of the recent rate needs (the low-water mark), and they
 * are likely spent before they expire. Requests then never wait for Redis
 * while the rate is steady. Caches the mark in L (lease.low_water). */
double lease_refill_want(struct lease *l, uint64_t now_us, uint64_t lease_us,
                         double lease_max);

/* 1 when L holds and asks nothing and was not used for LEASE_IDLE_US. */
int lease_idle(const struct lease *l, uint64_t now_us);

/* Leases by bucket key (rules with per = client/ip/user/name). */
#define LEASE_TABLE_CHAINS 256
struct lease_entry;
struct lease_table {
    struct lease_entry *chains[LEASE_TABLE_CHAINS];
    size_t count;
};

/* The lease of KEY in T, made (zeroed) when missing; NULL when memory ran
 * out and none is there. */
struct lease *lease_table_get(struct lease_table *t, const char *key);
/* The lease of KEY, or NULL. */
struct lease *lease_table_find(struct lease_table *t, const char *key);

/* Call FN(KEY, LEASE, CTX) for every lease of T; drop those it returns
 * 1 for. */
typedef int lease_visit_fn(const char *key, struct lease *l, void *ctx);
void lease_table_sweep(struct lease_table *t, lease_visit_fn *fn, void *ctx);

/* Free every lease of T (T itself is the caller's). */
void lease_table_clear(struct lease_table *t);

#endif
