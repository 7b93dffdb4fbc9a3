/* stats.c - owns the counters, the per-command statistics (by command
 * table row, hence in cmd/) and their text form in PROXY INFO; the
 * per-command metric series live in the metrics registry, reached from
 * here through pointers kept per row. */
#include "stats.h"

#include <event2/buffer.h>
#include <stdlib.h>

#include "commands.h"
#include "metrics.h"

uint64_t stats[STAT_COUNT];

/* The rows past the command table. */
static const char *const stats_extra_names[] = {"lock", "unlock", "renew", "proxy", "other"};
#define STATS_EXTRA (int)(sizeof(stats_extra_names) / sizeof(stats_extra_names[0]))
#define STATS_ROW_OTHER (stats_table_rows + STATS_EXTRA - 1)

static const char *const stats_reject_names[STATS_REJECT_KINDS] = {
    [STATS_REJECT_NOAUTH] = "noauth",
    [STATS_REJECT_NOPERM] = "noperm",
    [STATS_REJECT_THROTTLED] = "throttled",
    [STATS_REJECT_REFUSED] = "refused",
};

/* One row's series, made when its first request is framed. */
struct stats_row {
    uint64_t *total;                   /* sluice_commands_total */
    uint64_t *failed;                  /* sluice_commands_failed_total */
    uint64_t *rejected[STATS_REJECT_KINDS]; /* made on first refusal */
    uint64_t rejected_all;
    struct metrics_hist *duration;     /* sluice_command_duration_seconds, or
                                          _blocking_command_duration_seconds */
    struct metrics_hist *waited;       /* _blocking_command_duration_seconds of a
                                          request of a non-blocking row that waited
                                          (LOCK ... WAIT); made on first use */
    struct metrics_fine *latency;      /* for latencystats */
    int blocking;                      /* its time may be spent waiting (stats_row_blocks) */
};

static struct stats_row *stats_rows;
static int stats_table_rows;

void stats_init(void)
{
    stats_table_rows = commands_count();
    stats_rows = calloc((size_t)(stats_table_rows + STATS_EXTRA), sizeof(*stats_rows));
}

static const char *stats_row_name(int row)
{
    return row < stats_table_rows ? commands_by_id(row)->name
                                   : stats_extra_names[row - stats_table_rows];
}

int stats_command_row(const struct command *cmd, struct sv name)
{
    if (cmd != NULL)
        return cmd->id;
    for (int i = 0; i < STATS_EXTRA - 1; i++) {
        if (sv_ieq(name, stats_extra_names[i]))
            return stats_table_rows + i;
    }
    return STATS_ROW_OTHER;
}

/* Whether ROW's commands may wait for data rather than work: Redis's
 * "blocking" flag (BLPOP, BRPOP, BLMOVE, BZPOPMIN, XREAD, XREADGROUP,
 * WAIT...). Their time says how long a client waited, not how fast Redis
 * or sluice were. (A LOCK waits only with WAIT: stats_command_done.) */
static int stats_row_is_blocking(int row)
{
    return row < stats_table_rows && (commands_by_id(row)->flags & CMD_BLOCKING) != 0;
}

/* Make ROW's series; a row whose memory ran out counts nowhere. A
 * blocking row's time goes to its own histogram, so that the request
 * latency an operator graphs (command_duration_seconds) is not inflated
 * by clients waiting on purpose. */
static void stats_row_open(struct stats_row *r, int row)
{
    const char *name = stats_row_name(row);

    r->total = metrics_counter(METRIC_commands_total, name, NULL);
    r->failed = metrics_counter(METRIC_commands_failed_total, name, NULL);
    r->blocking = stats_row_is_blocking(row);
    r->duration = metrics_hist(r->blocking ? METRIC_blocking_command_duration_seconds
                                           : METRIC_command_duration_seconds, name, NULL);
    r->latency = calloc(1, sizeof(*r->latency));
}

void stats_count_command(int row)
{
    struct stats_row *r = &stats_rows[row];

    if (r->total == NULL)
        stats_row_open(r, row);
    (*r->total)++;
}

int stats_row_blocks(int row)
{
    struct stats_row *r = &stats_rows[row];

    if (r->total == NULL)
        stats_row_open(r, row);
    return r->blocking;
}

uint64_t stats_command_total(int row)
{
    return stats_rows[row].total != NULL ? *stats_rows[row].total : 0;
}

void stats_command_done(int row, uint64_t us, int failed, int waited)
{
    struct stats_row *r = &stats_rows[row];

    if (r->total == NULL)
        stats_row_open(r, row);
    if (waited && !r->blocking) {
        if (r->waited == NULL)
            r->waited = metrics_hist(METRIC_blocking_command_duration_seconds,
                                     stats_row_name(row), NULL);
        metrics_hist_observe(r->waited, us);
    } else {
        metrics_hist_observe(r->duration, us);
    }
    if (r->latency != NULL)
        metrics_fine_observe(r->latency, us);
    if (failed)
        (*r->failed)++;
}

void stats_command_rejected(int row, enum stats_reject reason)
{
    struct stats_row *r = &stats_rows[row];

    if (r->rejected[reason] == NULL)
        r->rejected[reason] = metrics_counter(METRIC_commands_rejected_total, stats_row_name(row),
                                              stats_reject_names[reason]);
    (*r->rejected[reason])++;
    r->rejected_all++;
}

static const char *const stats_names[] = {
#define X(name, doc) #name,
    STATS_LIST(X)
#undef X
};

void stats_write_info(struct evbuffer *out)
{
    for (int i = 0; i < STAT_COUNT; i++)
        evbuffer_add_printf(out, "%s:%llu\r\n", stats_names[i], (unsigned long long)stats[i]);
}

/* Redis counts a refused command in rejected_calls, not in calls. */
void stats_write_commandstats(struct evbuffer *out)
{
    for (int row = 0; row < stats_table_rows + STATS_EXTRA; row++) {
        const struct stats_row *r = &stats_rows[row];
        if (r->total == NULL || *r->total == 0)
            continue;
        uint64_t calls = *r->total - r->rejected_all;
        uint64_t usec = r->duration->sum_us + (r->waited != NULL ? r->waited->sum_us : 0);
        evbuffer_add_printf(out, "cmdstat_%s:calls=%llu,usec=%llu,usec_per_call=%.2f,"
                                 "rejected_calls=%llu,failed_calls=%llu\r\n",
                            stats_row_name(row), (unsigned long long)calls,
                            (unsigned long long)usec,
                            calls > 0 ? (double)usec / (double)calls : 0.0,
                            (unsigned long long)r->rejected_all, (unsigned long long)*r->failed);
    }
}

void stats_write_latencystats(struct evbuffer *out)
{
    for (int row = 0; row < stats_table_rows + STATS_EXTRA; row++) {
        const struct stats_row *r = &stats_rows[row];
        if (r->latency == NULL || r->latency->total == 0)
            continue;
        evbuffer_add_printf(out, "latency_percentiles_usec_%s:p50=%llu.000,p99=%llu.000,"
                                 "p99.9=%llu.000\r\n", stats_row_name(row),
                            (unsigned long long)metrics_fine_percentile(r->latency, 50),
                            (unsigned long long)metrics_fine_percentile(r->latency, 99),
                            (unsigned long long)metrics_fine_percentile(r->latency, 99.9));
    }
}
