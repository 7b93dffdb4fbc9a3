/* stats.c - owns the counters, the per-command call counts (by command
 * table id, hence in cmd/) and their text form in PROXY INFO. */
#include "stats.h"

#include <event2/buffer.h>
#include <stdlib.h>

#include "commands.h"

uint64_t stats[STAT_COUNT];
static uint64_t *stats_command_calls;
static uint64_t stats_unknown_calls;

static const char *const stats_names[] = {
#define X(name, doc) #name,
    STATS_LIST(X)
#undef X
};

void stats_init(void)
{
    stats_command_calls = calloc((size_t)commands_count(), sizeof(*stats_command_calls));
}

void stats_count_command(int command_id)
{
    stats_command_calls[command_id]++;
}

void stats_count_unknown(void)
{
    stats_unknown_calls++;
}

void stats_write_info(struct evbuffer *out)
{
    for (int i = 0; i < STAT_COUNT; i++)
        evbuffer_add_printf(out, "%s:%llu\r\n", stats_names[i], (unsigned long long)stats[i]);
    evbuffer_add_printf(out, "\r\n# Commandstats\r\n");
    for (int id = 0; id < commands_count(); id++) {
        if (stats_command_calls[id] == 0)
            continue;
        evbuffer_add_printf(out, "cmdstat_%s:calls=%llu\r\n", commands_by_id(id)->name,
                            (unsigned long long)stats_command_calls[id]);
    }
    if (stats_unknown_calls > 0)
        evbuffer_add_printf(out, "cmdstat_unknown:calls=%llu\r\n",
                            (unsigned long long)stats_unknown_calls);
}
