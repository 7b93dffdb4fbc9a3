/* test_log.c - the log's folding of a warning repeated within a second:
 * the first line written, the rest counted into one "(repeated N times in
 * T s)" line; other messages and other levels never folded; a count never
 * lost (written at close). */
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
                             {NULL, NULL}});
    log_close();
    unlink(log_path);
    return rc;
}
