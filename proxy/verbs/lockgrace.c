/* lockgrace.c - owns the failover grace and the fence epoch of each hash
 * slot, and what shows of them (log lines, the gauge, PROXY INFO). It only
 * keeps time and numbers: lock.c asks it before a grant; the backend
 * layer's primary-change hook (primary.h, through main.c) and lock_init
 * tell it of changes; at a hand-over it keeps what the old sluice passed
 * on until the primary is checked. Standalone and Sentinel mode have one
 * shard: every slot alike.
 *
 *   start: every slot undecided, a LOCK waits (up to LOCKGRACE_CHECK_MS)
 *   first report of a slot: grace = lock window - how long ago Redis says
 *       writes may last have been lost (replaces the start-up one)
 *   later reports: a grace at least that long (a change seen: the whole window)
 */
#include "lockgrace.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include "backend.h"
#include "cluster.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "primary.h"
#include "server.h"
#include "slot.h"
#include "stats.h"

static uint64_t lockgrace_until[SLOT_COUNT];   /* server clock, ms */
static long long lockgrace_epochs[SLOT_COUNT];
static uint32_t lockgrace_gens[SLOT_COUNT];    /* graces begun: a grant that straddles one
                                                  is not trusted (lockgrace_generation) */
static uint8_t lockgrace_decided[SLOT_COUNT];  /* a report came: the start-up grace is replaced */
static uint8_t lockgrace_logged[SLOT_COUNT];   /* a grace began and its end is not logged yet */
static uint64_t lockgrace_weak_until[SLOT_COUNT];   /* server clock, ms: the end of the
                                                  longest lock this sluice granted or renewed
                                                  there that not every replica acknowledged */
static uint64_t lockgrace_start_check_until;   /* server clock, ms: a LOCK waits for the first
                                                  report until then */
static struct event *lockgrace_end_timer;      /* logs the end of graces */
static char lockgrace_last_why[320];           /* why the last grace began */

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

/* Log the end of every grace that began and is over; arm the timer for
 * the next end. */
static void lockgrace_arm(void);

static void lockgrace_end_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();
    int first = -1;

    (void)fd;
    (void)what;
    (void)arg;
    for (int s = 0; s <= SLOT_COUNT; s++) {
        int over = s < SLOT_COUNT && lockgrace_logged[s] && lockgrace_until[s] <= now;
        if (over) {
            lockgrace_logged[s] = 0;
            if (first < 0)
                first = s;
        } else if (first >= 0) {
            log_notice("lock: failover grace over on slots %d-%d: locks are granted again",
                       first, s - 1);
            first = -1;
        }
    }
    lockgrace_arm();
}

static void lockgrace_arm(void)
{
    uint64_t now = server_now_ms(), next = 0;
    struct timeval tv;

    for (int s = 0; s < SLOT_COUNT; s++) {
        if (lockgrace_logged[s] && (next == 0 || lockgrace_until[s] < next))
            next = lockgrace_until[s];
    }
    if (next == 0 || server.base == NULL)
        return;
    if (lockgrace_end_timer == NULL)
        lockgrace_end_timer = evtimer_new(server.base, lockgrace_end_cb, NULL);
    next = next > now ? next - now : 0;
    tv.tv_sec = (time_t)(next / 1000);
    tv.tv_usec = (suseconds_t)(next % 1000) * 1000;
    evtimer_add(lockgrace_end_timer, &tv);
}

/* Slots FIRST..LAST: no lock granted there for LEFT ms from NOW on (0:
 * none). REPLACE: that is the end, also when it is sooner than the one
 * set (a start-up grace replaced by what Redis said); else a later end
 * stays. Returns 1 when a grace runs on the range afterwards. */
static int lockgrace_set(int first, int last, uint64_t now, long long left, int replace)
{
    uint64_t until = now + (uint64_t)left;
    int running = 0;

    for (int s = first; s <= last; s++) {
        if (replace || until > lockgrace_until[s])
            lockgrace_until[s] = until;
        if (left > 0)
            lockgrace_gens[s]++;
        if (lockgrace_until[s] > now) {
            running = 1;
            lockgrace_logged[s] = 1;
        }
    }
    return running;
}

/* How long no lock may be granted on slots FIRST..LAST (ms from NOW)
 * when writes were lost LOST_AGO_MS ago (primary.h). A promotion with
 * lock_replica_acks = all loses only what this sluice granted or renewed
 * without every replica's acknowledgement (KEEP renewals, grants before
 * the setting): until the longest of those ends. */
static long long lockgrace_left_after(int first, int last, long long lost_ago_ms, uint64_t now)
{
    long long grace = lockgrace_ms();
    uint64_t weak = now;

    if (lost_ago_ms == PRIMARY_LOST_NEVER || grace == 0)
        return 0;
    if (lost_ago_ms == PRIMARY_LOST_UNACKED && server.cfg.lock_replica_acks == CONFIG_ACKS_ALL) {
        for (int s = first; s <= last; s++)
            weak = lockgrace_weak_until[s] > weak ? lockgrace_weak_until[s] : weak;
        return (long long)(weak - now) < grace ? (long long)(weak - now) : grace;
    }
    if (lost_ago_ms < 0)
        return grace;
    return lost_ago_ms >= grace ? 0 : grace - lost_ago_ms;
}

void lockgrace_note_unacked(int slot, long long ttl_ms)
{
    uint64_t end = server_now_ms() + (uint64_t)(ttl_ms > 0 ? ttl_ms : 0);

    if (slot >= 0 && slot < SLOT_COUNT && end > lockgrace_weak_until[slot])
        lockgrace_weak_until[slot] = end;
}

void lockgrace_primary_changed(int first, int last, long long epoch, long long lost_ago_ms,
                               const char *why)
{
    long long grace = lockgrace_ms(), left;
    uint64_t now = server_now_ms();
    int replace = 1, running;

    if (first < 0)
        first = 0;
    if (last >= SLOT_COUNT)
        last = SLOT_COUNT - 1;
    left = lockgrace_left_after(first, last, lost_ago_ms, now);
    /* The first report of a slot replaces its start-up grace; later ones
     * only lengthen what runs. */
    for (int s = first; s <= last; s++)
        replace = replace && !lockgrace_decided[s];
    running = lockgrace_set(first, last, now, left, replace);
    for (int s = first; s <= last; s++) {
        lockgrace_decided[s] = 1;
        if (epoch > lockgrace_epochs[s])
            lockgrace_epochs[s] = epoch;
    }
    STAT_INC(lock_failover_graces);
    (*metrics_counter(METRIC_lock_primary_changes_total, NULL, NULL))++;
    if (left > 0) {
        snprintf(lockgrace_last_why, sizeof(lockgrace_last_why), "%s", why);
        log_notice("lock: primary of slots %d-%d changed (%s): failover grace begins on slots "
                   "%d-%d: no lock granted there for %lld ms, fence epoch %lld", first, last, why,
                   first, last, left, epoch);
    } else if (grace > 0) {
        if (replace && !running) {
            for (int s = first; s <= last; s++)
                lockgrace_logged[s] = 0;   /* the start-up wait is no grace to log the end of */
            lockgrace_last_why[0] = '\0';
        }
        log_notice("lock: no failover grace on slots %d-%d for this (%s)%s, fence epoch %lld",
                   first, last, why, running ? ": the one running goes on" : "", epoch);
    } else {
        log_info("lock: primary of slots %d-%d changed (%s): failover grace off, fence epoch %lld",
                 first, last, why, epoch);
    }
    lockgrace_arm();
}

void lockgrace_start(void)
{
    long long grace = lockgrace_ms();
    uint64_t now = server_now_ms();

    /* Until Redis says when its primary may last have lost writes (a few
     * ms), nothing is granted, for at most the whole window; a LOCK waits
     * for that answer (lockgrace_checking_ms) rather than being refused. */
    lockgrace_set(0, SLOT_COUNT - 1, now, grace, 1);
    /* What other sluices (or this one's predecessor) granted without every
     * replica's acknowledgement is not known here: as if this one had. */
    for (int s = 0; s < SLOT_COUNT; s++)
        lockgrace_weak_until[s] = now + (uint64_t)grace;
    lockgrace_start_check_until = grace > 0 ? now + LOCKGRACE_CHECK_MS : now;
    snprintf(lockgrace_last_why, sizeof(lockgrace_last_why), "startup: what Redis says of the "
             "primary is not read yet");
    if (grace > 0)
        log_info("lock: startup: no lock granted until Redis says when its primary may last have "
                 "lost writes (at most %lld ms)", grace);
    STAT_INC(lock_failover_graces);
    (*metrics_counter(METRIC_lock_primary_changes_total, NULL, NULL))++;
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
    for (int s = 0; s < SLOT_COUNT; s++) {
        lockgrace_until[s] = until;
        lockgrace_decided[s] = 1;
        lockgrace_logged[s] = until > now;
    }
    lockgrace_adopt_epoch(lockgrace_inherited.epoch);
    log_notice("lock: the primary did not change across the hand-over: the start-up grace is "
               "lifted (%llu ms of the old sluice's grace left), fence epoch %lld",
               (unsigned long long)(until > now ? until - now : 0), lockgrace_epochs[0]);
    lockgrace_arm();
}

uint64_t lockgrace_checking_ms(int slot)
{
    uint64_t now = server_now_ms();

    if (lockgrace_inherited.pending && now < lockgrace_inherited.check_until)
        return lockgrace_inherited.check_until - now;
    if (!lockgrace_decided[slot] && now < lockgrace_start_check_until)
        return lockgrace_start_check_until - now;
    return 0;
}

/* ---- what shows: the gauge and PROXY INFO ---- */

/* Call FN for each shard: the slots FIRST..LAST of one primary (in
 * cluster mode as the map says; else one), its name, the longest grace
 * left there (ms) and its highest fence epoch. */
static void lockgrace_each_shard(void (*fn)(void *arg, const char *name, int first, int last,
                                            uint64_t left_ms, long long epoch),
                                 void *arg)
{
    int cluster = cluster_enabled(), first = 0;
    uint64_t left = 0;
    long long epoch = 0;

    for (int s = 0; s <= SLOT_COUNT; s++) {
        const struct backend_node *node = cluster && s < SLOT_COUNT ? cluster_node_for_slot(s) : NULL;
        if (s == SLOT_COUNT || (cluster && s > first && node != cluster_node_for_slot(first))) {
            const struct backend_node *owner = cluster ? cluster_node_for_slot(first)
                                                       : backend_default_node();
            fn(arg, owner != NULL ? backend_node_name(owner) : "unknown", first, s - 1, left, epoch);
            first = s;
            left = 0;
            epoch = 0;
        }
        if (s < SLOT_COUNT) {
            uint64_t l = lockgrace_left_ms(s);
            left = l > left ? l : left;
            epoch = lockgrace_epochs[s] > epoch ? lockgrace_epochs[s] : epoch;
        }
    }
}

static void lockgrace_gauge_one(void *arg, const char *name, int first, int last, uint64_t left_ms,
                                long long epoch)
{
    (void)arg;
    (void)first;
    (void)last;
    (void)epoch;
    metrics_gauge(METRIC_lock_grace_remaining_seconds, name, NULL, (double)left_ms / 1000.0);
}

void lockgrace_metrics_refresh(void)
{
    metrics_family_clear(METRIC_lock_grace_remaining_seconds);
    lockgrace_each_shard(lockgrace_gauge_one, NULL);
}

/* PROXY INFO's lines of one shard; ARG: {text, index, longest left}. */
struct lockgrace_info {
    struct evbuffer *text;
    int n;
    uint64_t longest;
};

static void lockgrace_info_one(void *arg, const char *name, int first, int last, uint64_t left_ms,
                               long long epoch)
{
    struct lockgrace_info *in = arg;

    evbuffer_add_printf(in->text, "lock_shard%d:name=%s,slots=%d-%d,grace_remaining_seconds=%.3f,"
                        "fence_epoch=%lld\r\n", in->n++, name, first, last,
                        (double)left_ms / 1000.0, epoch);
    if (left_ms > in->longest)
        in->longest = left_ms;
}

void lockgrace_write_info(struct evbuffer *text)
{
    struct evbuffer *shards = evbuffer_new();
    struct lockgrace_info in = {shards, 0, 0};

    lockgrace_each_shard(lockgrace_info_one, &in);
    evbuffer_add_printf(text, "lock_failover_grace_ms:%lld\r\nlock_max_ttl_ms:%lld\r\n"
                        "lock_grace_remaining_seconds:%.3f\r\nlock_grace_last_why:%s\r\n"
                        "lock_shards:%d\r\n", lockgrace_ms(), server.cfg.lock_max_ttl_ms,
                        (double)in.longest / 1000.0, lockgrace_last_why, in.n);
    evbuffer_add_buffer(text, shards);
    evbuffer_free(shards);
}

void lockgrace_free(void)
{
    if (lockgrace_end_timer != NULL)
        event_free(lockgrace_end_timer);
    lockgrace_end_timer = NULL;
}
