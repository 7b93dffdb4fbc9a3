/* metrics.c - owns the series of every metric family of METRICS_LIST and
 * their text form. Knows no layer above: gauges read from other modules'
 * state are set by the refresh function main.c gives. */
#include "metrics.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

const uint64_t metrics_bucket_us[METRICS_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};
/* Bit length L: values 2^(L-1) to 2^L - 1; the first bound >= 2^(L-1). */
const uint8_t metrics_bucket_by_bits[65] = {
    0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 13,
    14, 15, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
    16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
    16, 16,
};
/* The same bounds in seconds, as the "le" label writes them. */
static const char *const metrics_bucket_le[METRICS_BUCKETS] = {
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
};

struct metrics_family {
    const char *name;
    enum metrics_type type;
    const char *labels;   /* comma-separated names */
    const char *help;
};

static const struct metrics_family metrics_families[METRIC_COUNT] = {
#define X(name, type, labels, help) {#name, METRICS_##type, labels, help},
    METRICS_LIST(X)
#undef X
};

struct metrics_series {
    char *values[METRICS_MAX_LABELS];
    union {
        uint64_t count;
        double gauge;
        struct metrics_hist hist;
    } v;
};

/* The series of each family, in the order they were first seen. */
static struct {
    struct metrics_series **series;
    int count, cap;
} metrics_sets[METRIC_COUNT];

static void (*metrics_refresh)(void);
static double (*metrics_gauge_fns[METRIC_COUNT])(void);   /* metrics_gauge_fn */

/* Where counting goes when a series cannot be made (out of memory). */
static union {
    uint64_t count;
    struct metrics_hist hist;
} metrics_scratch;

uint64_t metrics_hist_count(const struct metrics_hist *h)
{
    uint64_t n = 0;

    for (int i = 0; i <= METRICS_BUCKETS; i++)
        n += h->counts[i];
    return n;
}

/* The largest value bucket I holds. */
static uint64_t metrics_fine_upper(int i)
{
    int msb;

    if (i < 16)
        return (uint64_t)i;
    msb = (i - 16) / 16 + 4;
    return ((uint64_t)(16 + (i - 16) % 16 + 1) << (msb - 4)) - 1;
}

uint64_t metrics_fine_percentile(const struct metrics_fine *h, double p)
{
    uint64_t rank, seen = 0;

    if (h->total == 0)
        return 0;
    /* The smallest value with at least P% of the observations at or below. */
    rank = (uint64_t)((double)h->total * p / 100.0 + 0.999999);
    if (rank == 0)
        rank = 1;
    for (int i = 0; i < METRICS_FINE_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            return metrics_fine_upper(i);
    }
    return metrics_fine_upper(METRICS_FINE_BUCKETS - 1);
}

static int metrics_label_count(enum metrics_id id)
{
    const char *l = metrics_families[id].labels;
    int n = l[0] != '\0';

    for (; *l != '\0'; l++)
        n += *l == ',';
    return n;
}

static int metrics_values_match(const struct metrics_series *s, const char *const *values, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(s->values[i], values[i] != NULL ? values[i] : "") != 0)
            return 0;
    }
    return 1;
}

static struct metrics_series *metrics_series_new(enum metrics_id id, const char *const *values,
                                                 int n)
{
    struct metrics_series *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        s->values[i] = strdup(values[i] != NULL ? values[i] : "");
        if (s->values[i] == NULL) {
            for (int k = 0; k < i; k++)
                free(s->values[k]);
            free(s);
            return NULL;
        }
    }
    (void)id;
    return s;
}

struct metrics_series *metrics_series(enum metrics_id id, const char *const *values)
{
    int n = metrics_label_count(id);
    struct metrics_series *s;

    for (int i = 0; i < metrics_sets[id].count; i++) {
        if (metrics_values_match(metrics_sets[id].series[i], values, n))
            return metrics_sets[id].series[i];
    }
    if (metrics_sets[id].count == metrics_sets[id].cap) {
        int cap = metrics_sets[id].cap > 0 ? 2 * metrics_sets[id].cap : 8;
        struct metrics_series **grown =
            realloc(metrics_sets[id].series, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        metrics_sets[id].series = grown;
        metrics_sets[id].cap = cap;
    }
    s = metrics_series_new(id, values, n);
    if (s != NULL)
        metrics_sets[id].series[metrics_sets[id].count++] = s;
    return s;
}

uint64_t *metrics_series_counter(struct metrics_series *s)
{
    return s != NULL ? &s->v.count : &metrics_scratch.count;
}

struct metrics_hist *metrics_series_hist(struct metrics_series *s)
{
    return s != NULL ? &s->v.hist : &metrics_scratch.hist;
}

void metrics_series_set(struct metrics_series *s, double value)
{
    if (s != NULL)
        s->v.gauge = value;
}

uint64_t *metrics_counter(enum metrics_id id, const char *v1, const char *v2)
{
    const char *values[METRICS_MAX_LABELS] = {v1, v2};

    return metrics_series_counter(metrics_series(id, values));
}

struct metrics_hist *metrics_hist(enum metrics_id id, const char *v1, const char *v2)
{
    const char *values[METRICS_MAX_LABELS] = {v1, v2};

    return metrics_series_hist(metrics_series(id, values));
}

void metrics_gauge(enum metrics_id id, const char *v1, const char *v2, double value)
{
    const char *values[METRICS_MAX_LABELS] = {v1, v2};

    metrics_series_set(metrics_series(id, values), value);
}

static void metrics_series_free(struct metrics_series *s)
{
    for (int i = 0; i < METRICS_MAX_LABELS; i++)
        free(s->values[i]);
    free(s);
}

void metrics_family_clear(enum metrics_id id)
{
    for (int i = 0; i < metrics_sets[id].count; i++)
        metrics_series_free(metrics_sets[id].series[i]);
    metrics_sets[id].count = 0;
}

void metrics_family_retain(enum metrics_id id, metrics_keep_fn *keep, void *ctx)
{
    int kept = 0;

    for (int i = 0; i < metrics_sets[id].count; i++) {
        struct metrics_series *s = metrics_sets[id].series[i];
        if (keep(ctx, (const char *const *)s->values))
            metrics_sets[id].series[kept++] = s;
        else
            metrics_series_free(s);
    }
    metrics_sets[id].count = kept;
}

void metrics_gauge_fn(enum metrics_id id, double (*fn)(void))
{
    metrics_gauge_fns[id] = fn;
}

void metrics_set_refresh(void (*fn)(void))
{
    metrics_refresh = fn;
}

void metrics_escape(const char *value, char *out, size_t size)
{
    size_t n = 0;

    for (; *value != '\0' && n + 1 < size; value++) {
        const char *esc = *value == '\\' ? "\\\\" : *value == '"' ? "\\\"" : *value == '\n' ? "\\n" : NULL;
        if (esc == NULL) {
            out[n++] = *value;
        } else if (n + 2 < size) {
            out[n++] = esc[0];
            out[n++] = esc[1];
        } else {
            break;
        }
    }
    out[n] = '\0';
}

/* A label value escaped straight into OUT. */
static void metrics_add_escaped(struct evbuffer *out, const char *value)
{
    size_t run;

    while (*value != '\0') {
        run = strcspn(value, "\\\"\n");
        evbuffer_add(out, value, run);
        value += run;
        if (*value == '\0')
            break;
        evbuffer_add(out, *value == '\\' ? "\\\\" : *value == '"' ? "\\\"" : "\\n", 2);
        value++;
    }
}

/* "{name="value",...}" of series S of family F, with EXTRA (le="...")
 * last when not NULL; nothing when there is no label at all. */
static void metrics_add_labels(struct evbuffer *out, const struct metrics_family *f,
                               const struct metrics_series *s, const char *extra)
{
    const char *name = f->labels;
    int i = 0, any = 0;

    while (*name != '\0') {
        size_t len = strcspn(name, ",");
        evbuffer_add_printf(out, "%s%.*s=\"", any ? "," : "{", (int)len, name);
        metrics_add_escaped(out, s->values[i++]);
        evbuffer_add(out, "\"", 1);
        any = 1;
        name += len + (name[len] == ',');
    }
    if (extra != NULL) {
        evbuffer_add_printf(out, "%sle=\"%s\"", any ? "," : "{", extra);
        any = 1;
    }
    if (any)
        evbuffer_add(out, "}", 1);
}

static void metrics_write_hist(struct evbuffer *out, const struct metrics_family *f,
                               const struct metrics_series *s)
{
    uint64_t cumulated = 0;

    for (int i = 0; i <= METRICS_BUCKETS; i++) {
        cumulated += s->v.hist.counts[i];
        evbuffer_add_printf(out, "sluice_%s_bucket", f->name);
        metrics_add_labels(out, f, s, i < METRICS_BUCKETS ? metrics_bucket_le[i] : "+Inf");
        evbuffer_add_printf(out, " %llu\n", (unsigned long long)cumulated);
    }
    evbuffer_add_printf(out, "sluice_%s_sum", f->name);
    metrics_add_labels(out, f, s, NULL);
    evbuffer_add_printf(out, " %llu.%06llu\n", (unsigned long long)(s->v.hist.sum_us / 1000000),
                        (unsigned long long)(s->v.hist.sum_us % 1000000));
    evbuffer_add_printf(out, "sluice_%s_count", f->name);
    metrics_add_labels(out, f, s, NULL);
    evbuffer_add_printf(out, " %llu\n", (unsigned long long)cumulated);
}

static void metrics_write_family(struct evbuffer *out, enum metrics_id id)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    const struct metrics_family *f = &metrics_families[id];

    evbuffer_add_printf(out, "# HELP sluice_%s %s\n# TYPE sluice_%s %s\n", f->name, f->help,
                        f->name, type_names[f->type]);
    for (int i = 0; i < metrics_sets[id].count; i++) {
        const struct metrics_series *s = metrics_sets[id].series[i];
        if (f->type == METRICS_HISTOGRAM) {
            metrics_write_hist(out, f, s);
            continue;
        }
        evbuffer_add_printf(out, "sluice_%s", f->name);
        metrics_add_labels(out, f, s, NULL);
        if (f->type == METRICS_COUNTER)
            evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->v.count);
        else
            evbuffer_add_printf(out, " %.17g\n", s->v.gauge);
    }
}

void metrics_write(struct evbuffer *out)
{
    if (metrics_refresh != NULL)
        metrics_refresh();
    for (int id = 0; id < METRIC_COUNT; id++) {
        if (metrics_gauge_fns[id] != NULL)
            metrics_gauge((enum metrics_id)id, NULL, NULL, metrics_gauge_fns[id]());
    }
    for (int id = 0; id < METRIC_COUNT; id++)
        metrics_write_family(out, (enum metrics_id)id);
}

void metrics_init(void)
{
    for (int id = 0; id < METRIC_COUNT; id++) {
        if (metrics_label_count((enum metrics_id)id) == 0)
            metrics_series((enum metrics_id)id, NULL);
    }
}

void metrics_free_all(void)
{
    for (int id = 0; id < METRIC_COUNT; id++) {
        metrics_family_clear((enum metrics_id)id);
        free(metrics_sets[id].series);
        metrics_sets[id].series = NULL;
        metrics_sets[id].cap = 0;
    }
}
