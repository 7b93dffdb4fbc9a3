/* test_metrics.c - the metrics registry: series made once per label
 * values, histogram buckets and their cumulated text, label escaping, the
 * fine histogram's percentiles. */
#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "unit.h"

/* The exposition text as a C string (freed by the caller). */
static char *exposition(void)
{
    struct evbuffer *out = evbuffer_new();
    size_t len;
    char *text;

    metrics_write(out);
    len = evbuffer_get_length(out);
    text = malloc(len + 1);
    evbuffer_remove(out, text, len);
    text[len] = '\0';
    evbuffer_free(out);
    return text;
}

static void test_series_once(void)
{
    uint64_t *a = metrics_counter(METRIC_commands_total, "get", NULL);
    uint64_t *b = metrics_counter(METRIC_commands_total, "get", NULL);
    uint64_t *c = metrics_counter(METRIC_commands_total, "set", NULL);
    char *text;

    CHECK(a == b);
    CHECK(a != c);
    (*a) += 3;
    (*c)++;
    text = exposition();
    CHECK(strstr(text, "# TYPE sluice_commands_total counter\n") != NULL);
    CHECK(strstr(text, "sluice_commands_total{cmd=\"get\"} 3\n") != NULL);
    CHECK(strstr(text, "sluice_commands_total{cmd=\"set\"} 1\n") != NULL);
    free(text);
    metrics_free_all();
}

static void test_histogram(void)
{
    struct metrics_hist *h = metrics_hist(METRIC_backend_request_duration_seconds, "h:1", NULL);
    char *text;

    metrics_hist_observe(h, 50);        /* le 0.0001 */
    metrics_hist_observe(h, 100);       /* le 0.0001: bounds are inclusive */
    metrics_hist_observe(h, 101);       /* le 0.00025 */
    metrics_hist_observe(h, 20000000);  /* +Inf only */
    CHECK(metrics_hist_count(h) == 4);
    CHECK(h->counts[0] == 2 && h->counts[1] == 1 && h->counts[METRICS_BUCKETS] == 1);
    text = exposition();
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_bucket{backend=\"h:1\",le=\"0.0001\"} 2\n") != NULL);
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_bucket{backend=\"h:1\",le=\"0.00025\"} 3\n") != NULL);
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_bucket{backend=\"h:1\",le=\"10\"} 3\n") != NULL);
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_bucket{backend=\"h:1\",le=\"+Inf\"} 4\n") != NULL);
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_count{backend=\"h:1\"} 4\n") != NULL);
    CHECK(strstr(text, "sluice_backend_request_duration_seconds_sum{backend=\"h:1\"} 20.000251\n") != NULL);
    free(text);
    metrics_free_all();
}

/* The bucket metrics_hist_observe picks is the first bound >= the value,
 * as a search would find it, at every bound and power of two and next to
 * them. */
static void test_histogram_bucket_of_every_length(void)
{
    struct metrics_hist h;
    uint64_t probes[3 * (METRICS_BUCKETS + 64) + 1];
    int n = 0;

    for (int i = 0; i < METRICS_BUCKETS; i++) {
        probes[n++] = metrics_bucket_us[i] - 1;
        probes[n++] = metrics_bucket_us[i];
        probes[n++] = metrics_bucket_us[i] + 1;
    }
    for (int b = 0; b < 64; b++) {
        probes[n++] = (1ull << b) - 1;
        probes[n++] = 1ull << b;
        probes[n++] = (1ull << b) + 1;
    }
    probes[n++] = UINT64_MAX;
    for (int p = 0; p < n; p++) {
        int want = 0;
        while (want < METRICS_BUCKETS && probes[p] > metrics_bucket_us[want])
            want++;
        memset(&h, 0, sizeof(h));
        metrics_hist_observe(&h, probes[p]);
        CHECK(h.counts[want] == 1);
    }
}

static void test_escape(void)
{
    char out[64];
    char *text;

    metrics_escape("a\"b\\c\nd", out, sizeof(out));
    CHECK_STR(out, "a\\\"b\\\\c\\nd");
    metrics_escape("\"\"\"", out, 4);   /* an escape that does not fit is left out */
    CHECK_STR(out, "\\\"");
    /* Valid UTF-8 as is; a stray byte, an overlong form, a surrogate and a
     * cut sequence each become U+FFFD. */
    metrics_escape("\xc3\xa9t\xe2\x82\xac", out, sizeof(out));
    CHECK_STR(out, "\xc3\xa9t\xe2\x82\xac");
    metrics_escape("a\xff" "b\xc0\xaf" "c\xed\xa0\x80" "d\xe2\x82", out, sizeof(out));
    CHECK_STR(out, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                   "d\xef\xbf\xbd\xef\xbf\xbd");
    (*metrics_counter(METRIC_auth_failures_total, "bad\xfe", NULL))++;
    text = exposition();
    CHECK(strstr(text, "sluice_auth_failures_total{user=\"bad\xef\xbf\xbd\"} 1\n") != NULL);
    free(text);
    metrics_free_all();
    (*metrics_counter(METRIC_auth_failures_total, "we\"ird\nuser\\", NULL))++;
    text = exposition();
    CHECK(strstr(text, "sluice_auth_failures_total{user=\"we\\\"ird\\nuser\\\\\"} 1\n") != NULL);
    free(text);
    metrics_free_all();
}

static void test_unlabelled_and_gauges(void)
{
    char *text;

    metrics_init();
    metrics_gauge(METRIC_backend_up, "h:1", "primary", 1);
    text = exposition();
    CHECK(strstr(text, "sluice_connections_received_total 0\n") != NULL);
    CHECK(strstr(text, "sluice_lock_wait_seconds_count 0\n") != NULL);
    CHECK(strstr(text, "sluice_backend_up{backend=\"h:1\",role=\"primary\"} 1\n") != NULL);
    free(text);
    metrics_family_clear(METRIC_backend_up);
    text = exposition();
    CHECK(strstr(text, "sluice_backend_up{") == NULL);
    free(text);
    metrics_free_all();
}

/* A family of three labels (the top gauge): each value written, the
 * third told apart, all dropped by a clear. */
static void test_three_labels(void)
{
    const char *a[3] = {"names", "1", "noisy\"one"}, *b[3] = {"names", "2", "quiet"};
    char *text;

    metrics_series_set(metrics_series(METRIC_top_requests_per_second, a), 12.5);
    metrics_series_set(metrics_series(METRIC_top_requests_per_second, b), 1);
    CHECK(metrics_series(METRIC_top_requests_per_second, a) !=
          metrics_series(METRIC_top_requests_per_second, b));
    text = exposition();
    CHECK(strstr(text, "sluice_top_requests_per_second{list=\"names\",rank=\"1\","
                       "subject=\"noisy\\\"one\"} 12.5\n") != NULL);
    CHECK(strstr(text, "{list=\"names\",rank=\"2\",subject=\"quiet\"} 1\n") != NULL);
    free(text);
    metrics_family_clear(METRIC_top_requests_per_second);
    text = exposition();
    CHECK(strstr(text, "sluice_top_requests_per_second{") == NULL);
    free(text);
    metrics_free_all();
}

static void test_fine_percentiles(void)
{
    static struct metrics_fine h;

    CHECK(metrics_fine_percentile(&h, 50) == 0);
    for (uint64_t us = 1; us <= 1000; us++)
        metrics_fine_observe(&h, us);
    /* At most 1/16 above the exact value. */
    CHECK(metrics_fine_percentile(&h, 50) >= 500 && metrics_fine_percentile(&h, 50) <= 500 + 500 / 16);
    CHECK(metrics_fine_percentile(&h, 99) >= 990 && metrics_fine_percentile(&h, 99) <= 990 + 990 / 16);
    CHECK(metrics_fine_percentile(&h, 100) >= 1000 && metrics_fine_percentile(&h, 100) <= 1000 + 1000 / 16);
    metrics_fine_observe(&h, 7);
    CHECK(metrics_fine_percentile(&h, 0.01) == 1);
    metrics_fine_observe(&h, UINT64_MAX);   /* the last bucket, no overflow */
    CHECK(metrics_fine_percentile(&h, 100) > 1000);
}

UNIT_MAIN("metrics",
          {"a series per label values", test_series_once},
          {"histogram buckets", test_histogram},
          {"histogram bucket of every length", test_histogram_bucket_of_every_length},
          {"label escaping", test_escape},
          {"unlabelled families and gauges", test_unlabelled_and_gauges},
          {"three labels", test_three_labels},
          {"fine histogram percentiles", test_fine_percentiles})
