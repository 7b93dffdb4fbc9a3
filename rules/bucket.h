/* bucket.h - a token bucket for one rate limit, refilled continuously.
 * Pure arithmetic: the caller passes the time (a monotonic clock, in us)
 * and the rule's rate and burst on every call, so a reloaded rule with a
 * new rate or burst keeps its buckets' state. */
#ifndef SLUICE_BUCKET_H
#define SLUICE_BUCKET_H

#include <stdint.h>

struct bucket {
    double tokens;      /* may go negative: tokens reserved by delayed requests */
    uint64_t last_us;   /* time of the last refill */
    int fresh;          /* 1 until the first refill sets last_us */
};

/* A full bucket (BURST tokens); its clock starts at the first peek. */
void bucket_init(struct bucket *b, double burst);

/* Refill B up to NOW_US. Returns 1 when at least one token is there, else
 * 0 with *WAIT_US set to the microseconds until one will be (rounded up,
 * always > 0). Never changes the count other than by refilling. */
int bucket_peek(struct bucket *b, double rate_per_s, double burst, uint64_t now_us,
                uint64_t *wait_us);

/* Take one token. After bucket_peek said 1, or to reserve a token for a
 * delayed request (the count may then go below zero; see bucket.c). */
void bucket_take(struct bucket *b);

/* Take N tokens at once, after the fact (a request's cost, known after
 * its reply: rules/limiter_slots.c): refilled to NOW_US first; the count
 * goes no lower than -FLOOR (a debt is bounded). */
void bucket_charge(struct bucket *b, double rate_per_s, double burst, uint64_t now_us, double n,
                   double floor);

/* Give back a token taken for a request that was then not sent (e.g. its
 * client left while it was delayed). Never fills above BURST. */
void bucket_refund(struct bucket *b, double burst);

/* Refill B up to NOW_US and return how long a request arriving now waits
 * for its token: 0 when one is there, else as bucket_peek's *WAIT_US. */
uint64_t bucket_wait_us(struct bucket *b, double rate_per_s, double burst, uint64_t now_us);

/* 1 when B would be full at NOW_US, so it can be dropped: a bucket made
 * again with bucket_init behaves the same. Does not change B. */
int bucket_idle(const struct bucket *b, double rate_per_s, double burst, uint64_t now_us);

#endif
