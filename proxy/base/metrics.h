/* metrics.h - the Prometheus metrics: every family declared once in
 * METRICS_LIST (name, type, label names, help), their series, and the
 * text exposition format 0.0.4. Counting is a plain integer increment
 * through a pointer the counting code keeps; a series is allocated only
 * the first time its label values are seen, and label values are bounded
 * by whoever names them (commands, rules, users, backends). */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

/* name (after "sluice_"), type, label names (comma-separated, "" for
 * none), help. */
#define METRICS_LIST(X)                                                                   \
    X(build_info, GAUGE, "version,commit",                                                  \
      "Always 1; the labels say sluice's version and the git commit it was built from.")   \
    X(ready, GAUGE, "", "1 when /readyz answers 200 (sluice serves new clients), else 0.")  \
    X(paused, GAUGE, "", "1 while PROXY PAUSE holds clients' requests in sluice.")          \
    X(pause_held_requests, GAUGE, "", "Requests a PROXY PAUSE holds now.")                   \
    X(draining, GAUGE, "", "1 from PROXY DRAIN until PROXY UNDRAIN.")                        \
    X(start_time_seconds, GAUGE, "", "Start time of the process since the Unix epoch.")   \
    X(config_reloads_total, COUNTER, "result", "Reloads (SIGHUP, PROXY RELOAD) by result.") \
    X(connected_clients, GAUGE, "", "Client connections open now.")                       \
    X(connections_received_total, COUNTER, "", "Client connections accepted.")            \
    X(rejected_connections_total, COUNTER, "reason", "Client connections refused.")       \
    X(auth_failures_total, COUNTER, "user", "Failed client logins by user.")              \
    X(user_commands_total, COUNTER, "user", "Requests framed, by the user that sent them.") \
    X(input_bytes_total, COUNTER, "", "Bytes read from clients.")                         \
    X(output_bytes_total, COUNTER, "", "Bytes written to clients.")                       \
    X(commands_total, COUNTER, "cmd", "Requests framed, by command.")                     \
    X(commands_failed_total, COUNTER, "cmd", "Requests answered with an error reply.")    \
    X(commands_rejected_total, COUNTER, "cmd,reason",                                     \
      "Requests sluice refused before running them.")                                     \
    X(command_duration_seconds, HISTOGRAM, "cmd",                                          \
      "From framing a request to queueing its reply to the client.")                      \
    X(blocking_command_duration_seconds, HISTOGRAM, "cmd",                                 \
      "Time of commands that may block (BLPOP, XREAD, WAIT, LOCK...), framed to replied.")  \
    X(backend_up, GAUGE, "backend,role", "1 when the backend is connected and logged in.") \
    X(backend_connections, GAUGE, "backend,kind", "Connections to the backend by kind.")  \
    X(backend_requests_total, COUNTER, "backend", "Requests sent to the backend.")        \
    X(backend_errors_total, COUNTER, "backend,kind", "Backend connection errors by kind.") \
    X(backend_request_duration_seconds, HISTOGRAM, "backend",                              \
      "From sending a request to the backend to reading its reply.")                      \
    X(cluster_redirections_total, COUNTER, "type", "Cluster redirections followed.")      \
    X(cluster_slot_map_refreshes_total, COUNTER, "result", "Cluster slot map loads.")     \
    X(replica_reads_total, COUNTER, "backend", "Reads sent to a replica (read_from).")    \
    X(sentinel_switches_total, COUNTER, "", "Primary switches learned from Sentinel.")     \
    X(sentinels_up, GAUGE, "", "Sentinels sluice is connected to now.")                   \
    X(sentinels_configured, GAUGE, "", "Sentinels named in sluice.ini (sentinel =).")      \
    X(failover_writes_unconfirmed_total, COUNTER, "",                                      \
      "Writes acknowledged before a Sentinel failover not confirmed on the new primary.")  \
    X(ratelimit_decisions_total, COUNTER, "rule,decision", "Rate-limit decisions by rule.") \
    X(ratelimit_delay_seconds, HISTOGRAM, "rule", "Delays rate-limit rules imposed.")     \
    X(ratelimit_lease_tokens_total, COUNTER, "rule,kind",                                  \
      "Tokens of shared rules leased from Redis (leased) and given back (returned).")    \
    X(ratelimit_shared_calls_total, COUNTER, "rule,kind",                                  \
      "Scripts run in Redis for shared rules: ask, refill, return, refund.")              \
    X(ratelimit_cost_total, COUNTER, "rule,kind",                                          \
      "What requests cost Redis, charged to cost rules: redis_time_us, bytes.")           \
    X(lock_operations_total, COUNTER, "op,result", "LOCK, UNLOCK and RENEW by result.")   \
    X(lock_wait_seconds, HISTOGRAM, "", "Time LOCK ... WAIT waited.")                     \
    X(lock_keep_active, GAUGE, "", "LOCK KEEP renewals running now.")                     \
    X(lock_lost_total, COUNTER, "", "Locks a KEEP renewal found lost (expired, or another owner's).") \
    X(lock_primary_changes_total, COUNTER, "", "Reports of the primary seen by the locks: start, first contact, changes.") \
    X(lock_grace_remaining_seconds, GAUGE, "shard", "Failover grace left on the shard: no lock granted there meanwhile (0: none).") \
    X(slowlog_length, GAUGE, "", "Entries in the slow log.")                               \
    X(slowlog_entries_total, COUNTER, "", "Entries ever added to the slow log.")             \
    X(top_requests_per_second, GAUGE, "list,rank,subject",                                  \
      "PROXY TOP's busiest subjects of each list (top_metrics_count ranks), requests per second over 10 s.")

enum metrics_id {
#define X(name, type, labels, help) METRIC_##name,
    METRICS_LIST(X)
#undef X
    METRIC_COUNT
};

#define METRICS_MAX_LABELS 3

/* Histogram buckets, upper bounds in microseconds (100 us to 10 s); the
 * last count is +Inf. */
#define METRICS_BUCKETS 16
extern const uint64_t metrics_bucket_us[METRICS_BUCKETS];

struct metrics_hist {
    uint64_t counts[METRICS_BUCKETS + 1];   /* per bucket, not cumulative */
    uint64_t sum_us;
};

/* By a value's bit length (0 to 64), the first bucket that can hold a
 * value of that length. The bounds are at least twice apart, so a value's
 * bucket is that one or the next: no search per observation. */
extern const uint8_t metrics_bucket_by_bits[65];

static inline void metrics_hist_observe(struct metrics_hist *h, uint64_t us)
{
    int i = metrics_bucket_by_bits[us != 0 ? 64 - __builtin_clzll(us) : 0];

    i += i < METRICS_BUCKETS && us > metrics_bucket_us[i];
    h->counts[i]++;
    h->sum_us += us;
}

/* Observations in H (its +Inf bucket, cumulated). */
uint64_t metrics_hist_count(const struct metrics_hist *h);

/* A fine log-linear latency histogram for percentiles: below 16 us one
 * bucket per microsecond, above 16 per power of two (at most 1/16 off). */
#define METRICS_FINE_BUCKETS (16 + 40 * 16)
struct metrics_fine {
    uint64_t counts[METRICS_FINE_BUCKETS];
    uint64_t total;
};

/* The fine histogram's bucket of US: exact below 16, else 16 buckets per
 * power of two, by the four bits below the highest. */
static inline int metrics_fine_index(uint64_t us)
{
    int msb;

    if (us < 16)
        return (int)us;
    msb = 63 - __builtin_clzll(us);
    if (msb > 43)
        return METRICS_FINE_BUCKETS - 1;
    return 16 + (msb - 4) * 16 + (int)((us >> (msb - 4)) & 15);
}

static inline void metrics_fine_observe(struct metrics_fine *h, uint64_t us)
{
    h->counts[metrics_fine_index(us)]++;
    h->total++;
}
/* The upper bound (us) of the bucket holding the P-th percentile (0 <
 * P <= 100) of H; 0 when H is empty. */
uint64_t metrics_fine_percentile(const struct metrics_fine *h, double p);

/* The series of family ID with the label values VALUES (as many as the
 * family has labels; NULL is taken as ""), made on first use (the values
 * are copied). NULL only when out of memory. */
struct metrics_series;
struct metrics_series *metrics_series(enum metrics_id id, const char *const *values);

/* Its counter, gauge or histogram. */
uint64_t *metrics_series_counter(struct metrics_series *s);
struct metrics_hist *metrics_series_hist(struct metrics_series *s);
void metrics_series_set(struct metrics_series *s, double value);

/* Shorthands over metrics_series; NULL-safe returns for out of memory
 * point at a scratch cell, so callers increment without checking. */
uint64_t *metrics_counter(enum metrics_id id, const char *v1, const char *v2);
struct metrics_hist *metrics_hist(enum metrics_id id, const char *v1, const char *v2);
void metrics_gauge(enum metrics_id id, const char *v1, const char *v2, double value);

/* Drop every series of family ID (a gauge set afresh at each scrape, whose
 * label values may change: a backend's role). */
void metrics_family_clear(enum metrics_id id);

/* Drop the series of family ID for which KEEP(CTX, their label values)
 * says 0 (a user or rule a reload removed): the others stay where they
 * are, so pointers to them stay good. */
typedef int metrics_keep_fn(void *ctx, const char *const *values);
void metrics_family_retain(enum metrics_id id, metrics_keep_fn *keep, void *ctx);

/* Free every series of family ID whose first label is VALUE (a node gone
 * from the topology, its series forgotten). Pointers to them that
 * counting code kept are invalid after: it must let go of them first. */
void metrics_forget(enum metrics_id id, const char *value);

/* The unlabelled gauge ID reads FN at each metrics_write (a count kept by
 * another module: clients, KEEP renewals, the slow log's length). */
void metrics_gauge_fn(enum metrics_id id, double (*fn)(void));

/* FN runs before each metrics_write: it sets the gauges read from state
 * (clients, backends). Set by main.c. */
void metrics_set_refresh(void (*fn)(void));

/* The whole exposition (text format 0.0.4) appended to OUT. */
void metrics_write(struct evbuffer *out);

/* A label value escaped for the exposition format (\\, \", \n) into OUT
 * (SIZE bytes, always terminated; cut short when it does not fit). */
void metrics_escape(const char *value, char *out, size_t size);

/* Make the one series of every family without labels (so each shows 0
 * before anything is counted). */
void metrics_init(void);

/* Free every series (at exit). */
void metrics_free_all(void);

#endif
