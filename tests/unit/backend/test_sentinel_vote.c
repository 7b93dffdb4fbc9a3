/* test_sentinel_vote.c - what a majority of the configured Sentinels say:
 * the primary (one voice is never enough), the replicas (healthy in a
 * majority's eyes only), and SENTINEL REPLICAS read into a ballot. */
#include "sentinel_vote.h"
#include "unit.h"

static struct sentinel_ballot ballots[5];
static const struct sentinel_ballot *ptrs[5];

static void vote(int i, enum sentinel_answer answer, const char *addr)
{
    ballots[i] = (struct sentinel_ballot){.answer = answer};
    snprintf(ballots[i].addr, sizeof(ballots[i].addr), "%s", addr);
    ptrs[i] = &ballots[i];
}

static void test_needed(void)
{
    CHECK(sentinel_vote_needed(1) == 1);
    CHECK(sentinel_vote_needed(2) == 2);
    CHECK(sentinel_vote_needed(3) == 2);
    CHECK(sentinel_vote_needed(4) == 3);
    CHECK(sentinel_vote_needed(5) == 3);
}

static void test_primary(void)
{
    char out[SENTINEL_VOTE_NAME_MAX];

    vote(0, SENTINEL_ANSWER_ADDR, "10.0.0.1:6379");
    vote(1, SENTINEL_ANSWER_ADDR, "10.0.0.9:1");      /* the liar */
    vote(2, SENTINEL_ANSWER_ADDR, "10.0.0.1:6379");
    CHECK(sentinel_vote_primary(ptrs, 3, out, sizeof(out)) == 2);
    CHECK_STR(out, "10.0.0.1:6379");
    /* One voice of three, the others silent: no majority. */
    vote(0, SENTINEL_ANSWER_NONE, "");
    vote(2, SENTINEL_ANSWER_UNKNOWN, "");
    CHECK(sentinel_vote_primary(ptrs, 3, out, sizeof(out)) == 1);
    CHECK(1 < sentinel_vote_needed(3));
    /* Nobody names one. */
    vote(1, SENTINEL_ANSWER_NONE, "");
    CHECK(sentinel_vote_primary(ptrs, 3, out, sizeof(out)) == 0);
    CHECK_STR(out, "");
    /* A single configured Sentinel is trusted fully. */
    vote(0, SENTINEL_ANSWER_ADDR, "10.0.0.2:6379");
    CHECK(sentinel_vote_primary(ptrs, 1, out, sizeof(out)) == sentinel_vote_needed(1));
}

static void test_replicas(void)
{
    char out[SENTINEL_VOTE_REPLICAS][SENTINEL_VOTE_NAME_MAX];

    vote(0, SENTINEL_ANSWER_ADDR, "p:1");
    vote(1, SENTINEL_ANSWER_ADDR, "p:1");
    vote(2, SENTINEL_ANSWER_ADDR, "evil:1");
    snprintf(ballots[0].replicas[0], SENTINEL_VOTE_NAME_MAX, "r:1");
    snprintf(ballots[0].replicas[1], SENTINEL_VOTE_NAME_MAX, "fake:1");
    ballots[0].replica_count = 2;
    snprintf(ballots[1].replicas[0], SENTINEL_VOTE_NAME_MAX, "r:1");
    ballots[1].replica_count = 1;
    /* The liar lists fake:1 too, but for another primary: not a vote. */
    snprintf(ballots[2].replicas[0], SENTINEL_VOTE_NAME_MAX, "fake:1");
    ballots[2].replica_count = 1;
    CHECK(sentinel_vote_replicas(ptrs, 3, "p:1", out, SENTINEL_VOTE_REPLICAS) == 1);
    CHECK_STR(out[0], "r:1");
}

static void test_parse(void)
{
    static const char text[] =
        "*4\r\n"
        "*8\r\n$2\r\nip\r\n$3\r\n1.1\r\n$4\r\nport\r\n$4\r\n6379\r\n$5\r\nflags\r\n"
        "$5\r\nslave\r\n$18\r\nmaster-link-status\r\n$2\r\nok\r\n"
        "*8\r\n$2\r\nip\r\n$3\r\n2.2\r\n$4\r\nport\r\n$4\r\n6379\r\n$5\r\nflags\r\n"
        "$12\r\ns_down,slave\r\n$18\r\nmaster-link-status\r\n$2\r\nok\r\n"
        "*8\r\n$2\r\nip\r\n$3\r\n3.3\r\n$4\r\nport\r\n$4\r\n6379\r\n$5\r\nflags\r\n"
        "$5\r\nslave\r\n$18\r\nmaster-link-status\r\n$3\r\nerr\r\n"
        "*8\r\n$2\r\nip\r\n$3\r\n::1\r\n$4\r\nport\r\n$4\r\n6380\r\n$5\r\nflags\r\n"
        "$5\r\nslave\r\n$18\r\nmaster-link-status\r\n$2\r\nok\r\n";
    struct sentinel_ballot b = {0};

    CHECK(sentinel_vote_parse_replicas(&b, text, sizeof(text) - 1) == 0);
    CHECK(b.replica_count == 2);
    CHECK_STR(b.replicas[0], "1.1:6379");
    CHECK_STR(b.replicas[1], "[::1]:6380");
    CHECK(sentinel_vote_parse_replicas(&b, "-ERR no\r\n", 9) == -1);
    CHECK(b.replica_count == 0);
    CHECK(sentinel_vote_parse_replicas(&b, "*1\r\n*2\r\n$2\r\nip\r\n", 16) == -1);
    CHECK(b.replica_count == 0);
}

UNIT_MAIN("sentinel_vote",
          {"needed", test_needed},
          {"primary", test_primary},
          {"replicas", test_replicas},
          {"parse", test_parse})
