/* test_respwalk.c - reading values of a contiguous RESP2 reply: a CLUSTER
 * SLOTS reply as Redis 7 sends it, skipping nested values, and every cut
 * or malformed input refused without reading past the end. */
#include <stdlib.h>

#include "respwalk.h"
#include "unit.h"

static const char slots_reply[] =
    "*2\r\n"
    "*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$3\r\nabc\r\n*0\r\n"
    "*4\r\n:5461\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$1\r\nd\r\n"
    "*3\r\n$9\r\n127.0.0.1\r\n:7004\r\n$1\r\ne\r\n";

static void test_cluster_slots_shape(void)
{
    struct respwalk w = {slots_reply, slots_reply + sizeof(slots_reply) - 1};
    long long n, fields, v;
    const char *s;
    size_t len;

    CHECK(respwalk_array(&w, &n) == 0 && n == 2);
    CHECK(respwalk_array(&w, &fields) == 0 && fields == 3);
    CHECK(respwalk_int(&w, &v) == 0 && v == 0);
    CHECK(respwalk_int(&w, &v) == 0 && v == 5460);
    CHECK(respwalk_array(&w, &n) == 0 && n == 4);
    CHECK(respwalk_bulk(&w, &s, &len) == 0 && len == 9 && memcmp(s, "127.0.0.1", 9) == 0);
    CHECK(respwalk_int(&w, &v) == 0 && v == 7000);
    CHECK(respwalk_skip(&w, 2) == 0);
    CHECK(respwalk_array(&w, &fields) == 0 && fields == 4);
    CHECK(respwalk_skip(&w, 2) == 0);
    CHECK(respwalk_array(&w, &n) == 0 && n == 3);
    CHECK(respwalk_bulk(&w, &s, &len) == 0 && len == 0);
    CHECK(respwalk_skip(&w, 2) == 0);
    CHECK(respwalk_skip(&w, 1) == 0);   /* the replica, a whole array */
    CHECK(w.p == w.end);
}

/* Every proper prefix of a valid reply is refused by a whole skip. */
static void test_every_cut_refused(void)
{
    size_t total = sizeof(slots_reply) - 1;

    for (size_t cut = 0; cut < total; cut++) {
        char *copy = malloc(cut + 1);
        struct respwalk w = {copy, copy + cut};
        memcpy(copy, slots_reply, cut);
        CHECK(respwalk_skip(&w, 1) != 0);
        free(copy);
    }
}

static void test_malformed(void)
{
    static const char *const bad[] = {"*x\r\n", ":\r\n", "$5\r\nab\r\n", "*1\n", "\r\n",
                                      "$-2\r\n", ":12a\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct respwalk w = {bad[i], bad[i] + strlen(bad[i])};
        const char *s;
        size_t len;
        long long v;
        CHECK(respwalk_bulk(&w, &s, &len) != 0 || bad[i][0] != '$');
        w.p = bad[i];
        CHECK(respwalk_int(&w, &v) != 0 || bad[i][0] != ':');
        w.p = bad[i];
        if (bad[i][0] == '*' || bad[i][0] == '\r' || bad[i][0] == '$')
            CHECK(respwalk_skip(&w, 1) != 0 || strcmp(bad[i], "$-2\r\n") == 0);
    }
}

UNIT_MAIN("respwalk",
          {"CLUSTER SLOTS shape", test_cluster_slots_shape},
          {"every cut refused", test_every_cut_refused},
          {"malformed", test_malformed})
