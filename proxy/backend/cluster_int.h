/* cluster_int.h - what the files of cluster mode share (cluster.c, the
 * map and its redirections; cluster_slots.c, reading a CLUSTER SLOTS
 * reply; cluster_request.c, a request's slot and sluice's own answers).
 * cluster.c calls cluster_slots.c; cluster_request.c calls cluster.c;
 * never the other way round. Nothing outside proxy/backend/ includes it. */
#ifndef SLUICE_CLUSTER_INT_H
#define SLUICE_CLUSTER_INT_H

#include <stddef.h>

struct backend_node;

#define CLUSTER_NAME_MAX 300              /* "host:port", a host of up to 255 */

/* A set of node names ("host:port"). */
struct cluster_names {
    char (*name)[CLUSTER_NAME_MAX];
    int count, cap;
};

/* cluster_slots.c */

/* Whether NAMES holds NAME. */
int cluster_names_has(const struct cluster_names *names, const char *name);

/* Free NAMES's list and empty it. */
void cluster_names_free(struct cluster_names *names);

/* Parse a CLUSTER SLOTS reply (LEN bytes at BUF, from the node named
 * ASKED) into MAP (SLOT_COUNT entries, NULL for slots nobody serves) and
 * MEMBERS (every node it names, replicas too), telling replicas.c the
 * replicas of each primary (read_from). The primaries are made backend
 * nodes. Returns 0, or -1 when malformed. */
int cluster_parse_map(const char *buf, size_t len, const char *asked,
                      struct backend_node **map, struct cluster_names *members);

/* cluster.c */

/* Whether a slot map was loaded. */
int cluster_has_map(void);

#endif
