/* primaryage.h - how long ago a primary seen for the first time may last
 * have lost writes it acknowledged, decided from what Redis says: INFO
 * (uptime, whether it was promoted, whether it loaded its data set from
 * disk) and, for a promoted one, sluice's record in it of when its
 * master_replid was first seen (lua/primary_record.lua). Backend-internal:
 * primary.c asks it at a first contact (standalone, Sentinel, cluster's
 * first slot map). README "Locks across a failover". */
#ifndef SLUICE_PRIMARYAGE_H
#define SLUICE_PRIMARYAGE_H

#include <stddef.h>

#include "primary.h"

struct backend_node;

/* What INFO server replication persistence says of a node. */
struct primaryage_facts {
    char replid[PRIMARY_REPLID_LEN + 1];
    char replid2[PRIMARY_REPLID_LEN + 1];   /* "" when INFO has none */
    int promoted;        /* a replica once, promoted in this run (second_repl_offset != -1) */
    int loaded;          /* it may have loaded a data set from disk at start (or cannot tell) */
    long long uptime_ms; /* uptime_in_seconds, in ms (the latest its start can be) */
    long long now_ms;    /* server_time_usec, in ms */
};

/* The value of FIELD ("name:") in INFO text TEXT into OUT (SIZE bytes,
 * cut): 1 when found. */
int primaryage_field(const char *text, const char *field, char *out, size_t size);

/* FIELD of INFO text TEXT as a number; DEF when absent. */
long long primaryage_number(const char *text, const char *field, long long def);

/* Fill F from INFO text TEXT. Returns 0 when TEXT is a primary's (role:
 * master, a master_replid), else -1. */
int primaryage_parse(const char *text, struct primaryage_facts *f);

/* Called once per primaryage_judge: LOST_AGO_MS, how long ago (by the
 * node's clock) acknowledged writes may last have been lost (0: now;
 * PRIMARY_LOST_NEVER: nothing lost), WHY for the log. ARG: as given. */
typedef void primaryage_done_fn(void *arg, long long lost_ago_ms, const char *why);

/* Decide for NODE, whose INFO said F. An unpromoted node decides at once:
 * writes may be lost from its start when it loaded a data set from disk
 * (those after its last save), else nothing it acknowledged is lost (a
 * new Redis, or one restarted without persistence: README "Redis
 * restarts"). A promoted one reads and writes the record (key in SLOT in
 * cluster mode, -1 otherwise): lost when the record says its replid was
 * first seen; no record read (refused, connection lost): now. DONE runs
 * before this returns, or later from the record's reply. */
void primaryage_judge(struct backend_node *node, int slot, const struct primaryage_facts *f,
                      primaryage_done_fn *done, void *arg);

#endif
