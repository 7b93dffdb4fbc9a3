/* primary.h - "the primary of these slots changed": what the backend layer
 * tells an upper layer (the lock verbs, registered by main.c) when a shard
 * may have lost writes it acknowledged. Reported by cluster mode (a slot
 * whose owner is another node, the first slot map), by the standalone
 * watch of the primary's master_replid below, and by Sentinel mode (a
 * +switch-master) through primary_changed. */
#ifndef SLUICE_PRIMARY_H
#define SLUICE_PRIMARY_H

struct backend_node;

/* The primary of hash slots FIRST..LAST (0..16383 in standalone and
 * Sentinel mode: one shard) changed, or was seen for the first time:
 * writes acknowledged before may have been lost LOST_AGO_MS ago (0: now,
 * a change seen; a first contact: what Redis says, primaryage.h), or
 * never (PRIMARY_LOST_NEVER: nothing lost). EPOCH: a number that only
 * goes up across changes of this shard (Sentinel's config epoch, a time
 * in seconds of the new primary), or 0 when the shard's Redis tells it
 * itself (cluster mode: its config epoch). WHY: for the log. */
typedef void primary_changed_fn(int first, int last, long long epoch, long long lost_ago_ms,
                                const char *why);

#define PRIMARY_LOST_NEVER (-1LL)
/* A replica was promoted now: only writes it had not acknowledged are
 * lost (none, for grants every replica acknowledged: lock_replica_acks =
 * all). */
#define PRIMARY_LOST_UNACKED (-2LL)

/* Register FN (main.c, once at start). None: changes are only logged. */
void primary_set_changed_hook(primary_changed_fn *fn);

/* Report a change (cluster.c, the standalone watch, Sentinel mode):
 * writes may have been lost now. */
void primary_changed(int first, int last, long long epoch, const char *why);

/* A replica was promoted to primary of slots FIRST..LAST (cluster mode: a
 * failover; Sentinel mode: a switch): writes it had not acknowledged may
 * be lost now (PRIMARY_LOST_UNACKED). Standalone mode cannot tell a
 * promotion from a restart (a new master_replid either way): a change. */
void primary_promoted(int first, int last, long long epoch, const char *why);

/* Cluster mode: slots FIRST..LAST moved to a node that was a primary of
 * other slots already (a migration: MIGRATE moves keys whole): nothing is
 * lost (PRIMARY_LOST_NEVER), reported for the log. */
void primary_migrated(int first, int last, const char *why);

/* Cluster mode, the first slot map: NODE is the primary of slots
 * FIRST..LAST. Ask its INFO (and sluice's record in it) and report a
 * first contact, lost when Redis says (primaryage.h); now when it cannot
 * be read. */
void primary_first_map(struct backend_node *node, int first, int last);

/* Sentinel mode: Sentinel switched the primary (reported here, WHY for
 * the log). The new primary's master_replid, when the watch reads it, is
 * the same change if its master_replid2 is the replid seen before (a
 * replica of the old primary, promoted): it only brings the epoch (the
 * epoch hook), not a second grace. */
void primary_switched(const char *why);

/* Register FN (main.c): a primary's epoch learnt after its change was
 * reported (primary_switched). */
typedef void primary_epoch_fn(long long epoch);
void primary_set_epoch_hook(primary_epoch_fn *fn);

/* Standalone and Sentinel mode: NODE's first shared connection connected
 * (the node-up hook, through main.c), or Sentinel made NODE the primary:
 * ask its master_replid now, and every second from then on. A replid
 * other than the one seen before is a new primary (a promoted replica, or
 * a restart that lost the data set); the first one seen is reported too
 * (sluice cannot know what was granted before it), unless it is the one
 * a hand-over passed on (primary_inherit). Does nothing in
 * cluster mode, nor for a node that is not the primary (a read_from
 * replica). */
void primary_node_up(struct backend_node *node);

/* The primary was checked against the one the sluice this one replaced
 * watched (a hand-over, primary_inherit): SAME is 1 when it is that one
 * and no change was seen since start, 0 otherwise (a change, reported as
 * always). */
typedef void primary_checked_fn(int same);

/* Register FN (main.c, once at start). */
void primary_set_checked_hook(primary_checked_fn *fn);

/* Standalone and Sentinel mode: the master_replid last seen into REPLID
 * (PRIMARY_REPLID_LEN + 1 bytes) and the last epoch reported into EPOCH.
 * Returns 0, or -1 when there is none to hand over (cluster mode, or no
 * primary seen yet). */
int primary_export(char *replid, long long *epoch);

/* A new sluice, handed over to: the running one last saw master_replid
 * REPLID with EPOCH. When this sluice's own first look at the primary
 * (before it, or already done) finds the same replid and no change was
 * reported meanwhile, there is no "first contact" change; another replid
 * is a change as always. Either way the checked hook runs, once. Epochs
 * go on from EPOCH. Ignored in cluster mode. */
void primary_inherit(const char *replid, long long epoch);

#define PRIMARY_REPLID_LEN 40

/* Stop the watch (at exit). */
void primary_free(void);

#endif
