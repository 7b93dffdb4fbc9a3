/* stats.h - process-wide counters, declared once in STATS_LIST, which
 * generates the enum, the names, and the PROXY INFO lines. */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <stdint.h>

struct evbuffer;

#define STATS_LIST(X)                                                        \
    X(total_connections_received, "client connections accepted")            \
    X(rejected_connections, "refused at maxclients")                         \
    X(total_requests, "requests framed from clients")                        \
    X(total_forwarded, "requests sent to a backend")                         \
    X(total_local, "requests answered by sluice")                            \
    X(total_error_replies, "error replies sent to clients")                  \
    X(protocol_errors, "clients closed for a protocol error")                \
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
    X(cluster_not_rerun, "cluster: replies passed on because the command may have run")

enum stats_id {
#define X(name, doc) STAT_##name,
    STATS_LIST(X)
#undef X
    STAT_COUNT
};

extern uint64_t stats[STAT_COUNT];

#define STAT_INC(name) (stats[STAT_##name]++)

/* Per-command call counts, indexed by command id, plus unknown commands. */
void stats_init(void);
void stats_count_command(int command_id);
void stats_count_unknown(void);
/* Append "name:value" lines of the counters and "cmdstat_*" lines. */
void stats_write_info(struct evbuffer *out);

#endif
