/* lockgrace.h - what a primary change means for the locks: the failover
 * grace of each hash slot (no lock granted there meanwhile) and the fence
 * epoch sluice passes to lua/lock_acquire.lua (README "Locks across a
 * failover"). */
#ifndef SLUICE_LOCKGRACE_H
#define SLUICE_LOCKGRACE_H

#include <stdint.h>

/* Start-up (lock_init): no lock granted anywhere until the first report
 * of each slot, which replaces this grace; a LOCK waits for that report
 * for up to LOCKGRACE_CHECK_MS (lockgrace_checking_ms), then the grace
 * runs its whole length (Redis not reachable: nothing is known). */
void lockgrace_start(void);

/* The primary of hash slots FIRST..LAST changed or was seen first
 * (primary_changed_fn, registered by main.c): writes may have been lost
 * LOST_AGO_MS ago (PRIMARY_LOST_NEVER: not at all), so no lock is
 * granted there for the rest of the window, lock_failover_grace_ms
 * after that; a first report replaces the start-up grace, a later one
 * keeps an end already later. Fences there use at least EPOCH. Counted
 * and logged with WHY (and the end of the grace logged when it comes). */
void lockgrace_primary_changed(int first, int last, long long epoch, long long lost_ago_ms,
                               const char *why);

/* A lock on SLOT was granted or renewed for TTL_MS without every
 * replica's acknowledgement (sent so: noted before its reply): a
 * promotion with lock_replica_acks = all begins a grace until it ends. */
void lockgrace_note_unacked(int slot, long long ttl_ms);

/* Milliseconds until locks are granted again on SLOT (0: now). */
uint64_t lockgrace_left_ms(int slot);

/* The fence epoch of SLOT. */
long long lockgrace_epoch(int slot);

/* How many graces SLOT has begun: a LOCK notes it when its call goes out,
 * and a grant answered after another began (its call was held through a
 * failover and sent to the new primary, or crossed the change) is given
 * back and treated as one asked during the grace. */
uint32_t lockgrace_generation(int slot);

/* Another sluice used epoch SEEN on this shard (standalone: every slot):
 * take it when higher. */
void lockgrace_adopt_epoch(long long seen);

/* Hand-over (README "Restart and upgrade"), standalone and Sentinel mode:
 * what the running sluice passes on, and what the new one does with it. */

/* The grace left on the shard (ms) and its fence epoch. */
void lockgrace_export(long long *grace_left_ms, long long *epoch);

/* New sluice: the one it replaced had GRACE_LEFT_MS of grace left and
 * fence epoch EPOCH. Kept aside until lockgrace_checked; until then, and
 * for at most LOCKGRACE_CHECK_MS, lockgrace_checking_ms says a LOCK
 * should wait for the check rather than be refused. */
void lockgrace_inherit(long long grace_left_ms, long long epoch);

#define LOCKGRACE_CHECK_MS 5000

/* The primary was checked (primary.h's checked hook). SAME: it is the
 * one the replaced sluice watched, and its grace replaces the start-up
 * one, its epoch taken when higher; else the start-up grace stays. */
void lockgrace_checked(int same);

/* Milliseconds a LOCK on SLOT should wait for a check rather than be
 * refused: the hand-over check, or the first report at start-up (0:
 * none pending). */
uint64_t lockgrace_checking_ms(int slot);

/* Set the gauge sluice_lock_grace_remaining_seconds{shard} (every shard,
 * 0 when none runs); before each metrics scrape (main.c). */
void lockgrace_metrics_refresh(void);

/* PROXY INFO's "# Locks" lines into TEXT. */
struct evbuffer;
void lockgrace_write_info(struct evbuffer *text);

/* Stop the timer (at exit). */
void lockgrace_free(void);

#endif
