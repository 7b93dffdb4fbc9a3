/* lockgrace.c - owns the failover grace and the fence epoch of each hash
 * slot. It only keeps time and numbers: lock.c asks it before a grant;
 * the backend layer's primary-change hook (primary.h, through main.c)
 * and lock_init tell it of changes; at a hand-over it keeps what the old
 * sluice passed on until the primary is checked. Standalone and Sentinel
 * mode have one shard: every slot alike. */
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

/* What the sluice this one replaced passed on (lockgrace_inherit). */
static struct {
    int pending;
    uint64_t check_until;   /* server clock, ms: given up after this */
    uint64_t grace_until;
    long long epoch;
} lockgrace_inherited;

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

void lockgrace_export(long long *grace_left_ms, long long *epoch)
{
    *grace_left_ms = (long long)lockgrace_left_ms(0);
    *epoch = lockgrace_epochs[0];
}

void lockgrace_inherit(long long grace_left_ms, long long epoch)
{
    uint64_t now = server_now_ms();

    lockgrace_inherited.pending = 1;
    lockgrace_inherited.check_until = now + LOCKGRACE_CHECK_MS;
    lockgrace_inherited.grace_until = now + (uint64_t)(grace_left_ms > 0 ? grace_left_ms : 0);
    lockgrace_inherited.epoch = epoch;
}

void lockgrace_checked(int same)
{
    uint64_t now = server_now_ms(), until = lockgrace_inherited.grace_until;

    if (!lockgrace_inherited.pending)
        return;
    lockgrace_inherited.pending = 0;
    if (!same)
        return;
    /* Only start-up and the first contact began graces here (primary.c
     * confirms only then): the replaced sluice's watch covers that time. */
    for (int s = 0; s < SLOT_COUNT; s++)
        lockgrace_until[s] = until;
    lockgrace_adopt_epoch(lockgrace_inherited.epoch);
    log_notice("lock: the primary did not change across the hand-over: the start-up grace is "
               "lifted (%llu ms of the old sluice's grace left), fence epoch %lld",
               (unsigned long long)(until > now ? until - now : 0), lockgrace_epochs[0]);
}

uint64_t lockgrace_checking_ms(void)
{
    uint64_t now = server_now_ms();

    if (!lockgrace_inherited.pending || now >= lockgrace_inherited.check_until)
        return 0;
    return lockgrace_inherited.check_until - now;
}
