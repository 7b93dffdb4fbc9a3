/* metrics.c - owns the series of every metric family of METRICS_LIST and
 * their text form. Knows no layer above: gauges read from other modules'
 * state are set by the refresh function main.c gives. */
#include "metrics.h"

#include <event2/buffer.h>
#include <stdio.h>
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

void metrics_forget(enum metrics_id id, const char *value)
{
    int kept = 0;

    if (metrics_label_count(id) == 0)
        return;
    for (int i = 0; i < metrics_sets[id].count; i++) {
        struct metrics_series *s = metrics_sets[id].series[i];
        if (strcmp(s->values[0], value) == 0)
            metrics_series_free(s);
        else
            metrics_sets[id].series[kept++] = s;   /* in the order first seen */
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

/* The length of the valid UTF-8 sequence at P (before END), or 0 when P
 * starts none (a stray continuation byte, an overlong form, a surrogate,
 * beyond U+10FFFF, cut short). */
static size_t metrics_utf8_len(const unsigned char *p, const unsigned char *end)
{
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : 2;
    unsigned char lo = 0x80, hi = 0xbf;   /* the bounds of the second byte */

    if (p[0] < 0xc2 || p[0] > 0xf4 || (size_t)(end - p) < n)
        return 0;
    if (p[0] == 0xe0)
        lo = 0xa0;   /* overlong */
    else if (p[0] == 0xed)
        hi = 0x9f;   /* surrogates */
    else if (p[0] == 0xf0)
        lo = 0x90;   /* overlong */
    else if (p[0] == 0xf4)
        hi = 0x8f;   /* beyond U+10FFFF */
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    }
    return n;
}

/* The one escaping of label values: the next piece of the value at P
 * (before END) as the exposition format wants it, into *PIECE (*PIECE_LEN
 * bytes): a run of plain bytes as is, \\, \" and \n escaped, valid
 * UTF-8 as is, any other byte as U+FFFD (Prometheus rejects a whole
 * scrape for one invalid byte; a value from outside, a replica's
 * announced address or a client's name, may hold any). Returns how many
 * bytes of P it stands for (at least 1). */
static size_t metrics_escape_step(const unsigned char *p, const unsigned char *end,
                                  const char **piece, size_t *piece_len)
{
    size_t run = 0, n;

    while (p + run < end && p[run] < 0x80 && p[run] != '\\' && p[run] != '"' && p[run] != '\n')
        run++;
    if (run > 0) {
        *piece = (const char *)p;
        *piece_len = run;
        return run;
    }
    if (p[0] < 0x80) {
        *piece = p[0] == '\\' ? "\\\\" : p[0] == '"' ? "\\\"" : "\\n";
        *piece_len = 2;
        return 1;
    }
    n = metrics_utf8_len(p, end);
    if (n > 0) {
        *piece = (const char *)p;
        *piece_len = n;
        return n;
    }
    *piece = "\xef\xbf\xbd";   /* U+FFFD REPLACEMENT CHARACTER */
    *piece_len = 3;
    return 1;
}

void metrics_escape(const char *value, char *out, size_t size)
{
    const unsigned char *p = (const unsigned char *)value, *end = p + strlen(value);
    const char *piece;
    size_t n = 0, len;

    while (p < end && size > 0) {
        size_t took = metrics_escape_step(p, end, &piece, &len);
        if (n + len + 1 > size)
            break;   /* what does not fit is left out whole */
        memcpy(out + n, piece, len);
        n += len;
        p += took;
    }
    if (size > 0)
        out[n] = '\0';
}

/* A label value escaped (metrics_escape_step) straight into OUT. */
static void metrics_add_escaped(struct evbuffer *out, const char *value)
{
    const unsigned char *p = (const unsigned char *)value, *end = p + strlen(value);
    const char *piece;
    size_t len;

    while (p < end) {
        p += metrics_escape_step(p, end, &piece, &len);
        evbuffer_add(out, piece, len);
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

/* " VALUE\n": the shortest of %.15g and %.17g that reads back as VALUE
 * (27.484, not 27.484000000000002; a start time keeps every digit). */
static void metrics_write_double(struct evbuffer *out, double value)
{
    char text[40];

    snprintf(text, sizeof(text), "%.15g", value);
    if (strtod(text, NULL) != value)
        snprintf(text, sizeof(text), "%.17g", value);
    evbuffer_add_printf(out, " %s\n", text);
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
            metrics_write_double(out, s->v.gauge);
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
