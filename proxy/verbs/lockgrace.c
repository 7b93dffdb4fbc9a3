/* lockgrace.c - owns the failover grace and the fence epoch of each hash
 * slot. It only keeps time and numbers: lock.c asks it before a grant;
 * the backend layer's primary-change hook (primary.h, through main.c)
 * and lock_init tell it of changes. Standalone and Sentinel mode have one
 * shard: every slot alike. */
#include "lockgrace.h"

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "slot.h"
#include "stats.h"

static uint64_t lockgrace_until[SLOT_COUNT];   /* server clock, ms */
static long long lockgrace_epochs[SLOT_COUNT];
static uint32_t lockgrace_gens[SLOT_COUNT];    /* graces begun: a grant that straddles one
                                                  is not trusted (lockgrace_generation) */

/* The failover grace in ms: lock_failover_grace_ms, unset meaning
 * lock_max_ttl_ms (no lock granted before a change outlives it). */
static long long lockgrace_ms(void)
{
    const struct config *cfg = &server.cfg;

    return cfg->lock_failover_grace_ms < 0 ? cfg->lock_max_ttl_ms : cfg->lock_failover_grace_ms;
}

void lockgrace_primary_changed(int first, int last, long long epoch, const char *why)
{
    long long grace = lockgrace_ms();
    uint64_t until = server_now_ms() + (uint64_t)grace;

    for (int s = first < 0 ? 0 : first; s <= last && s < SLOT_COUNT; s++) {
        if (grace > 0 && until > lockgrace_until[s])
            lockgrace_until[s] = until;
        if (grace > 0)
            lockgrace_gens[s]++;
        if (epoch > lockgrace_epochs[s])
            lockgrace_epochs[s] = epoch;
    }
    STAT_INC(lock_failover_graces);
    (*metrics_counter(METRIC_lock_primary_changes_total, NULL, NULL))++;
    if (grace > 0)
        log_notice("lock: primary of slots %d-%d changed (%s): no lock granted there for %lld ms "
                   "(failover grace), fence epoch %lld", first, last, why, grace, epoch);
    else
        log_info("lock: primary of slots %d-%d changed (%s): failover grace off, fence epoch %lld",
                 first, last, why, epoch);
}

uint64_t lockgrace_left_ms(int slot)
{
    uint64_t now = server_now_ms();

    return lockgrace_until[slot] > now ? lockgrace_until[slot] - now : 0;
}

uint32_t lockgrace_generation(int slot)
{
    return lockgrace_gens[slot];
}

long long lockgrace_epoch(int slot)
{
    return lockgrace_epochs[slot];
}

void lockgrace_adopt_epoch(long long seen)
{
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (seen > lockgrace_epochs[s])
            lockgrace_epochs[s] = seen;
    }
}
