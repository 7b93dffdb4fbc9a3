/* replicas.h - the replicas of each primary node: which they are (the
 * `replicas =` list in standalone mode, the Sentinels' majority in
 * Sentinel mode, CLUSTER SLOTS in cluster mode), how far behind each is, and which one a client's read goes to
 * (README "Reading from replicas"). It never decides whether a request may
 * read from a replica: the client layer does. */
#ifndef SLUICE_REPLICAS_H
#define SLUICE_REPLICAS_H

struct event_base;
struct evbuffer;
struct config;
struct backend_node;

/* At most this many replicas are kept per primary; more are ignored
 * (logged once). */
#define REPLICAS_MAX 16
/* Every primary and replica is asked INFO replication this often. */
#define REPLICAS_POLL_MS 250

/* Start the poll (every REPLICAS_POLL_MS, on sluice's own requests on
 * each node's first shared connection). After backend_init. It asks only
 * while replicas_want(1) is in force. */
void replicas_init(struct event_base *base, const struct config *cfg);
void replicas_free(void);

/* ON: some client may read from a replica ([proxy] read_from, or a user's):
 * find the replicas and keep them connected. OFF: ask nothing, and (in
 * standalone mode) make no new replica nodes. Called at start and after
 * each reload. */
void replicas_want(int on);

/* The longest "host:port" of a replica. */
#define REPLICAS_NAME_MAX 280

/* Standalone and Sentinel mode: the replicas reads may use, as a source a
 * client cannot forge names them (`replicas =` of sluice.ini; in Sentinel
 * mode what a majority of the Sentinels list): NAMES (COUNT of them) are
 * the replicas of PRIMARY ("host:port"; NULL: of whichever node is the
 * primary). Replaces the list before. A primary's INFO replication only
 * measures their lag: a replica it announces is never added. */
void replicas_listed(const char *primary, const char *const *names, int count);

/* Cluster mode: the slot map names REPLICA ("host:port") a replica of
 * PRIMARY. Called for each while a new map is read, between
 * replicas_cluster_begin and replicas_cluster_end; OK 1 at the end drops
 * the replicas the map no longer names, OK 0 (a malformed map) keeps them. */
void replicas_cluster_begin(void);
void replicas_cluster_add(struct backend_node *primary, const char *replica);
void replicas_cluster_end(int ok);

/* Whether NODE is a replica sluice reads from (cluster mode keeps those
 * connected though they serve no slot). */
int replicas_is_replica(const struct backend_node *node);

/* The replica a read of client CLIENT_ID whose primary is PRIMARY goes to:
 * one of the healthy ones (connected, lag at most replica_max_lag_ms),
 * the same for one client while they stay healthy; the read is counted
 * (sluice_replica_reads_total). NULL when none is healthy. */
struct backend_node *replicas_pick(const struct backend_node *primary,
                                   unsigned long long client_id);

/* PROXY INFO's Replication section: read_from, the bounds, and each
 * replica with its primary, state, lag and reads. */
void replicas_write_info(struct evbuffer *out);

/* PROXY NODE NAME MAINTENANCE (ON 1) | ACTIVE (0): no read goes to the
 * replica NAME ("host:port") while in maintenance (PROXY INFO shows
 * state=maintenance). Returns 0, or -1 when NAME is no replica sluice
 * reads from (or too many are in maintenance). */
int replicas_set_maintenance(const char *name, int on);

#endif
