/* lockgrace.h - what a primary change means for the locks: the failover
 * grace of each hash slot (no lock granted there meanwhile) and the fence
 * epoch sluice passes to lua/lock_acquire.lua (README "Locks across a
 * failover"). */
#ifndef SLUICE_LOCKGRACE_H
#define SLUICE_LOCKGRACE_H

#include <stdint.h>

/* The primary of hash slots FIRST..LAST changed (primary_changed_fn,
 * registered by main.c; lock_init reports start-up): no lock is granted
 * there for lock_failover_grace_ms from now (a grace already longer
 * keeps its end), and fences there use at least EPOCH. Counted and
 * logged with WHY. */
void lockgrace_primary_changed(int first, int last, long long epoch, const char *why);

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

/* Milliseconds left to wait for that check (0: none pending). */
uint64_t lockgrace_checking_ms(void);

#endif
