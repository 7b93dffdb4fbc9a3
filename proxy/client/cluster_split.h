/* cluster_split.h - cluster mode: commands run in parts, one per slot
 * (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over several slots) or one per
 * primary (DBSIZE, KEYS, RANDOMKEY, FLUSHALL, FLUSHDB, SCRIPT LOAD/EXISTS/
 * FLUSH, FUNCTION LOAD/DELETE/FLUSH), their replies merged into one. */
#ifndef SLUICE_CLUSTER_SPLIT_H
#define SLUICE_CLUSTER_SPLIT_H

#include "sv.h"

struct command;
struct request;

/* Whether a request for CMD whose keys are in SLOT (cluster.h's
 * CLUSTER_SLOT_*) is run in parts. */
int cluster_split_wants(const struct command *cmd, int slot);

/* Run REQ (in its client's queue, with arguments ARGV) in parts; its
 * merged reply is given with client_answer once every part is in. REQ is
 * REQ_DETACHED meanwhile: a closing client leaves it to the split.
 * Returns 0, or -1 when nothing was done (out of memory). */
int cluster_split_run(struct request *req, int argc, const struct sv *argv);

#endif
