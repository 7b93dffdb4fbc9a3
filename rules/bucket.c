/* bucket.c - owns token bucket arithmetic. Knows nothing of rules, clients
 * or clocks: callers pass the time and the rule's rate and burst.
 *
 * Refill: tokens = min(burst, tokens + rate_per_s * elapsed_us / 1e6).
 *
 * Reject rules: peek every matching rule's bucket; take one token from
 * each only if all of them had one.
 *
 * Delay rules ("debt"): a request that must wait reserves its token at
 * once with bucket_take, even though the bucket has less than one: the
 * count goes negative. With tokens = t < 1 the wait for the next token is
 *     wait_us = ceil((1 - t) * 1e6 / rate_per_s)
 * so each delayed request pushes the next one 1e6 / rate_per_s later, and
 * delayed requests leave in arrival order at exactly the rule's rate. The
 * caller rejects instead when wait_us > max_delay_us (and takes nothing),
 * which bounds the debt: t >= -(rate_per_s * max_delay_us / 1e6), i.e. at
 * most about rate * max_delay requests queue. Refill pays the debt back
 * before the bucket can fill again. A delayed request whose client goes
 * away gives its token back with bucket_refund. */
#include "bucket.h"

#include <math.h>

/* Slack for floating-point rounding: after waiting the wait_us we
 * announced, a request must find its token even if the refill sum came
 * out a hair below 1. */
#define BUCKET_EPSILON 1e-9

void bucket_init(struct bucket *b, double burst)
{
    b->tokens = burst;
    b->last_us = 0;
    b->fresh = 1;
}

static void bucket_refill(struct bucket *b, double rate_per_s, double burst, uint64_t now_us)
{
    if (b->fresh) {
        b->fresh = 0;
        b->last_us = now_us;
    } else if (now_us > b->last_us) {
        b->tokens += rate_per_s * (double)(now_us - b->last_us) / 1e6;
        b->last_us = now_us;
    }
    /* now_us < last_us (a clock that went back): no refill, keep last_us */
    if (b->tokens > burst)
        b->tokens = burst;
}

static uint64_t bucket_wait_for_one(const struct bucket *b, double rate_per_s)
{
    double wait;

    if (b->tokens >= 1.0 - BUCKET_EPSILON)
        return 0;
    if (rate_per_s <= 0)
        return UINT64_MAX;
    wait = ceil((1.0 - b->tokens) * 1e6 / rate_per_s);
    if (wait < 1)
        return 1;
    return wait >= 1.8e19 ? UINT64_MAX : (uint64_t)wait;
}

int bucket_peek(struct bucket *b, double rate_per_s, double burst, uint64_t now_us,
                uint64_t *wait_us)
{
    uint64_t wait;

    bucket_refill(b, rate_per_s, burst, now_us);
    wait = bucket_wait_for_one(b, rate_per_s);
    if (wait == 0)
        return 1;
    *wait_us = wait;
    return 0;
}

void bucket_take(struct bucket *b)
{
    b->tokens -= 1.0;
}

void bucket_charge(struct bucket *b, double rate_per_s, double burst, uint64_t now_us, double n,
                   double floor)
{
    bucket_refill(b, rate_per_s, burst, now_us);
    b->tokens -= n;
    if (b->tokens < -floor)
        b->tokens = -floor;
}

void bucket_refund(struct bucket *b, double burst)
{
    b->tokens += 1.0;
    if (b->tokens > burst)
        b->tokens = burst;
}

uint64_t bucket_wait_us(struct bucket *b, double rate_per_s, double burst, uint64_t now_us)
{
    bucket_refill(b, rate_per_s, burst, now_us);
    return bucket_wait_for_one(b, rate_per_s);
}

int bucket_idle(const struct bucket *b, double rate_per_s, double burst, uint64_t now_us)
{
    struct bucket copy = *b;

    bucket_refill(&copy, rate_per_s, burst, now_us);
    return copy.tokens >= burst;
}
