/* stats.h - process-wide counters, declared once in STATS_LIST, which
 * generates the enum, the names, and the PROXY INFO lines; and the
 * per-command statistics (calls, time, failures, refusals, latency) that
 * PROXY INFO commandstats/latencystats and the sluice_command* metrics
 * show. */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <stdint.h>

#include "sv.h"

struct evbuffer;
struct command;

#define STATS_LIST(X)                                                        \
    X(total_connections_received, "client connections accepted")            \
    X(rejected_connections, "refused at maxclients")                         \
    X(total_requests, "requests framed from clients")                        \
    X(total_forwarded, "requests sent to a backend")                         \
    X(total_local, "requests answered by sluice")                            \
    X(total_error_replies, "error replies sent to clients")                  \
    X(protocol_errors, "clients closed for a protocol error")                \
    X(security_attacks, "clients closed for POST or Host: (cross protocol scripting)") \
    X(backend_unavailable_replies, "requests failed: backend down")          \
    X(backend_connects, "backend connections established")                   \
    X(backend_connect_failures, "backend connection failures")               \
    X(output_limit_disconnects, "clients over client_output_buffer_limit")   \
    X(query_limit_disconnects, "clients over client_query_buffer_limit")     \
    X(idle_timeouts, "clients closed for idleness")                          \
    X(swallowed_replies, "replies for clients that had gone")                \
    X(stalled_detours, "requests sent around a stalled shared connection")   \
    X(pause_detours, "requests Redis holds for a CLIENT PAUSE, sent on one-shot connections") \
    X(tls_handshake_failures, "client TLS handshakes failed or timed out")   \
    X(cluster_moved, "cluster: MOVED replies followed")                      \
    X(cluster_ask, "cluster: ASK replies followed")                          \
    X(cluster_tryagain, "cluster: TRYAGAIN replies retried")                 \
    X(cluster_redirect_limit, "cluster: requests over cluster_max_redirects")\
    X(cluster_refreshes, "cluster: slot maps loaded")                        \
    X(cluster_refresh_failures, "cluster: slot map requests that failed")    \
    X(cluster_retries, "cluster: requests retried for want of a reachable node")\
    X(cluster_crossslot, "cluster: requests refused with CROSSSLOT")         \
    X(cluster_down_replies, "cluster: requests refused for want of a map")   \
    X(cluster_unconfirmed, "cluster: redirections the cluster did not confirm, passed on")\
    X(cluster_not_rerun, "cluster: replies passed on because the command may have run")\
    X(lock_lost, "locks: KEEP renewals that found their lock lost")         \
    X(lock_noreplicas, "locks: grants and renewals not acknowledged by enough replicas")\
    X(lock_failover_graces, "locks: reports of the primary (start, first contact, changes), a grace or not")

enum stats_id {
#define X(name, doc) STAT_##name,
    STATS_LIST(X)
#undef X
    STAT_COUNT
};

extern uint64_t stats[STAT_COUNT];

#define STAT_INC(name) (stats[STAT_##name]++)

/* Why sluice refused a request before running it (the reason label of
 * sluice_commands_rejected_total). */
enum stats_reject {
    STATS_REJECT_NOAUTH,
    STATS_REJECT_NOPERM,
    STATS_REJECT_THROTTLED,
    STATS_REJECT_REFUSED,
    STATS_REJECT_KINDS
};

void stats_init(void);

/* The per-command row of a request: its command table id; past the table,
 * sluice's own verbs (lock, unlock, renew, proxy), then "other" for every
 * name sluice does not know (so the rows, and the metric series, stay
 * bounded whatever clients send). NAME is argv[0], read only when CMD is
 * NULL. */
int stats_command_row(const struct command *cmd, struct sv name);

/* A request of ROW was framed. */
void stats_count_command(int row);
/* Requests of ROW framed so far (refused ones included). */
uint64_t stats_command_total(int row);
/* A request of ROW had its reply queued for its client US microseconds
 * after it was framed; FAILED: the reply was an error (not a refusal). */
void stats_command_done(int row, uint64_t us, int failed, int waited);

/* Whether ROW's commands may block (Redis's "blocking" flag): their time
 * is in blocking_command_duration_seconds and stays out of the slow log,
 * as Redis leaves blocked time out of its SLOWLOG; so does a request that
 * waited on purpose (WAITED to stats_command_done: LOCK ... WAIT). */
int stats_row_blocks(int row);
/* A request of ROW was refused for REASON. */
void stats_command_rejected(int row, enum stats_reject reason);

/* Append "name:value" lines of the counters. */
void stats_write_info(struct evbuffer *out);
/* "cmdstat_NAME:calls=..,usec=..,usec_per_call=..,rejected_calls=..,
 * failed_calls=.." lines, Redis 7's fields, for every row with calls. */
void stats_write_commandstats(struct evbuffer *out);
/* "latency_percentiles_usec_NAME:p50=..,p99=..,p99.9=.." lines. */
void stats_write_latencystats(struct evbuffer *out);

#endif
