/* test_log.c - the log's folding of a warning repeated within a second:
 * the first line written, the rest counted into one "(repeated N times in
 * T s)" line; other messages and other levels never folded; a count never
 * lost (written at close). log_event's fields: in JSON escaped, cut,
 * typed; in text the line log_write would write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "unit.h"

static char log_path[] = "/tmp/sluice-test-log-XXXXXX";

/* The number of lines of the log file that contain NEEDLE. */
static int lines_with(const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(log_path, "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void open_fresh(void)
{
    log_close();
    CHECK(truncate(log_path, 0) == 0);
    CHECK(log_open(log_path) == 0);
}

static void test_repeats_folded(void)
{
    open_fresh();
    for (int i = 0; i < 112; i++)
        log_warning("backend unavailable: 127.0.0.1:7402 (Connection refused)");
    log_warning("another warning");
    CHECK(lines_with("backend unavailable") == 1);
    CHECK(lines_with("another warning") == 1);
    usleep(1100 * 1000);
    log_repeats_flush();
    CHECK(lines_with("(Connection refused) (repeated 111 times in") == 1);
    /* The count's line began a new window: one more within it is counted
     * (at most a line a second while the warning goes on)... */
    log_warning("backend unavailable: 127.0.0.1:7402 (Connection refused)");
    CHECK(lines_with("backend unavailable") == 2);
    usleep(1100 * 1000);
    log_repeats_flush();
    CHECK(lines_with("(Connection refused) (repeated 1 time in") == 1);
    /* ...and once a second has passed quietly, it is written at once. */
    usleep(1100 * 1000);
    log_warning("backend unavailable: 127.0.0.1:7402 (Connection refused)");
    CHECK(lines_with("backend unavailable") == 4);
}

static void test_notices_never_folded(void)
{
    open_fresh();
    for (int i = 0; i < 5; i++)
        log_notice("config reloaded from x");
    CHECK(lines_with("config reloaded from x") == 5);
}

static void test_count_written_at_close(void)
{
    open_fresh();
    for (int i = 0; i < 3; i++)
        log_warning("held at close");
    log_close();
    CHECK(lines_with("held at close (repeated 2 times in") == 1);
    CHECK(log_open(log_path) == 0);
}

static void test_many_distinct_warnings_all_written(void)
{
    open_fresh();
    for (int i = 0; i < 100; i++)
        log_warning("distinct %d", i);
    for (int i = 0; i < 100; i++)
        log_warning("distinct %d", i);
    /* 100 texts, more than the slots: nothing is lost (each first line is
     * written; repeats are folded or written, never dropped). */
    CHECK(lines_with("distinct ") >= 100);
    log_close();
    CHECK(lines_with("distinct ") + 0 >= 100);
    CHECK(log_open(log_path) == 0);
}

/* The whole log file into BUF (SIZE bytes, terminated). */
static void read_all(char *buf, size_t size)
{
    FILE *f = fopen(log_path, "r");
    size_t n = f != NULL ? fread(buf, 1, size - 1, f) : 0;

    buf[n] = '\0';
    if (f != NULL)
        fclose(f);
}

static void test_event_fields_in_json(void)
{
    static char buf[1 << 16], big[LOG_FIELD_VALUE_MAX + 100];
    const struct log_field f[] = {LOG_STR("user", "a\"b\\c\n\xff"), LOG_STR("name", NULL),
                                  LOG_NUM("commands", -42), LOG_BOOL("tls", 7),
                                  LOG_MS("duration", 18), LOG_STR("big", big)};

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    open_fresh();
    log_set_format(LOG_FORMAT_JSON);
    log_event(LOG_NOTICE, "client_closed", f, 6, "closed %d", 7);
    log_set_format(LOG_FORMAT_TEXT);
    read_all(buf, sizeof(buf));
    CHECK(strstr(buf, "\"level\":\"notice\",\"event\":\"client_closed\",\"user\":\"a\\\"b\\\\c"
                      "\\n\\ufffd\",\"name\":null,\"commands\":-42,\"tls\":true,"
                      "\"duration\":0.018,\"big\":\"xxx") != NULL);
    /* A value is cut at LOG_FIELD_VALUE_MAX bytes. */
    CHECK(strstr(buf, "xxx\",\"msg\":\"closed 7\"}\n") != NULL);
    CHECK(strlen(buf) < LOG_FIELD_VALUE_MAX + 400);
    /* In text, the line log_write writes: no field. */
    open_fresh();
    log_event(LOG_NOTICE, "client_closed", f, 6, "closed %d", 7);
    read_all(buf, sizeof(buf));
    CHECK(strstr(buf, " * closed 7\n") != NULL && strchr(buf, '{') == NULL);
    /* Below the level: nothing. */
    open_fresh();
    log_event(LOG_DEBUG, "client_closed", f, 6, "closed %d", 8);
    read_all(buf, sizeof(buf));
    CHECK(buf[0] == '\0');
}

static void test_repeat_count_keeps_its_event(void)
{
    static char buf[1 << 16];
    const struct log_field f[] = {LOG_STR("backend", "h:1")};

    open_fresh();
    log_set_format(LOG_FORMAT_JSON);
    for (int i = 0; i < 3; i++)
        log_event(LOG_WARNING, "backend_lost", f, 1, "lost h:1");
    log_warning("plain after");   /* no event of its own */
    log_close();
    log_set_format(LOG_FORMAT_TEXT);
    read_all(buf, sizeof(buf));
    CHECK(strstr(buf, "\"event\":\"backend_lost\",\"backend\":\"h:1\","
                      "\"msg\":\"lost h:1\"") != NULL);
    CHECK(strstr(buf, "\"event\":\"backend_lost\",\"repeated\":2,\"msg\":\"lost h:1 (repeated 2 "
                      "times in") != NULL);
    CHECK(strstr(buf, "\"level\":\"warning\",\"msg\":\"plain after\"") != NULL);
    CHECK(log_open(log_path) == 0);
}

int main(void)
{
    int fd = mkstemp(log_path);
    int rc;

    if (fd < 0)
        return 1;
    close(fd);
    log_current_level = LOG_NOTICE;
    rc = unit_run("log", (const struct unit_test[]){
                             {"repeats_folded", test_repeats_folded},
                             {"notices_never_folded", test_notices_never_folded},
                             {"count_written_at_close", test_count_written_at_close},
                             {"many_distinct_warnings_all_written",
                              test_many_distinct_warnings_all_written},
                             {"event_fields_in_json", test_event_fields_in_json},
                             {"repeat_count_keeps_its_event", test_repeat_count_keeps_its_event},
                             {NULL, NULL}});
    log_close();
    unlink(log_path);
    return rc;
}
