/* test_primaryage.c - what a primary's INFO says of when it may last have
 * lost writes it acknowledged (primaryage.c): the facts read from INFO
 * server replication persistence, and the decision for a primary never
 * promoted (the promoted one's needs the record in Redis: the integration
 * tests, test_lock_start.py). */
#include "primaryage.h"
#include "unit.h"

#define REPLID "1111111111111111111111111111111111111111"
#define REPLID2 "2222222222222222222222222222222222222222"
#define ZEROS "0000000000000000000000000000000000000000"

/* INFO text of a master: uptime UP s, replid2 R2, second_repl_offset SRO
 * (NULL: no such field, an old Redis), aof_enabled AOF, keys loaded KEYS
 * (NULL: no such field). */
static const char *info(char *buf, size_t size, int up, const char *r2, const char *sro, int aof,
                        const char *keys)
{
    snprintf(buf, size,
             "# Server\r\nrun_id:abc\r\nuptime_in_seconds:%d\r\nserver_time_usec:1700000000123456"
             "\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:"
             REPLID "\r\nmaster_replid2:%s\r\n%s%s%s# Persistence\r\nloading:0\r\n"
             "async_loading:0\r\n%s%s%saof_enabled:%d\r\n",
             up, r2, sro ? "second_repl_offset:" : "", sro ? sro : "", sro ? "\r\n" : "",
             keys ? "rdb_last_load_keys_loaded:" : "", keys ? keys : "", keys ? "\r\n" : "", aof);
    return buf;
}

static void test_parse(void)
{
    char buf[1024];
    struct primaryage_facts f;

    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, ZEROS, "-1", 0, "0"), &f) == 0);
    CHECK_STR(f.replid, REPLID);
    CHECK(!f.promoted && !f.loaded);
    CHECK(f.uptime_ms == 7000 && f.now_ms == 1700000000123LL);
    /* Promoted: second_repl_offset set (a start from an RDB with
     * replication data shows the same). */
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, REPLID2, "1", 0, "0"), &f) == 0);
    CHECK(f.promoted);
    CHECK_STR(f.replid2, REPLID2);
    /* An old Redis without second_repl_offset: replid2 other than zeros. */
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, REPLID2, NULL, 0, "0"), &f) == 0 && f.promoted);
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, ZEROS, NULL, 0, "0"), &f) == 0 && !f.promoted);
    /* Loaded from disk: AOF on, keys loaded, or a Redis that does not say. */
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, ZEROS, "-1", 1, "0"), &f) == 0 && f.loaded);
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, ZEROS, "-1", 0, "12"), &f) == 0 && f.loaded);
    CHECK(primaryage_parse(info(buf, sizeof(buf), 7, ZEROS, "-1", 0, NULL), &f) == 0 && f.loaded);
    /* Not a primary: nothing to decide. */
    CHECK(primaryage_parse("# Replication\r\nrole:slave\r\nmaster_replid:" REPLID "\r\n", &f) < 0);
    CHECK(primaryage_parse("# Replication\r\nrole:master\r\n", &f) < 0);
    CHECK(primaryage_parse("", &f) < 0);
}

static long long decided_ago;
static char decided_why[256];

static void decided(void *arg, long long lost_ago_ms, const char *why)
{
    (void)arg;
    decided_ago = lost_ago_ms;
    snprintf(decided_why, sizeof(decided_why), "%s", why);
}

static void test_never_promoted(void)
{
    char buf[1024];
    struct primaryage_facts f;

    /* New, or restarted empty: nothing it acknowledged is lost. */
    primaryage_parse(info(buf, sizeof(buf), 3, ZEROS, "-1", 0, "0"), &f);
    decided_ago = 12345;
    primaryage_judge(NULL, -1, &f, decided, NULL);
    CHECK(decided_ago == PRIMARY_LOST_NEVER);
    CHECK(strstr(decided_why, "without a data set from disk") != NULL);
    /* Loaded from disk: lost at its start, uptime ago. */
    primaryage_parse(info(buf, sizeof(buf), 3, ZEROS, "-1", 1, "0"), &f);
    primaryage_judge(NULL, -1, &f, decided, NULL);
    CHECK(decided_ago == 3000);
    CHECK(strstr(decided_why, "with its data set from disk") != NULL);
}

UNIT_MAIN("primaryage",
          {"parse", test_parse},
          {"never promoted", test_never_promoted})
