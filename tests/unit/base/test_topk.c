/* test_topk.c - the heavy-hitter sketch: counts, the 10 s window, a hot
 * subject found among a stream of distinct cold ones (and among 10 million
 * distinct keys), eviction keeping the table consistent, long subjects,
 * decay, and a lookup's bounded cost (tags compared) whatever the keys. */
#include <stdio.h>
#include <stdlib.h>

#include "topk.h"
#include "unit.h"

static struct topk_entry *hit(struct topk *t, const char *key, uint64_t s)
{
    return topk_hit(t, key, strlen(key), s, TOPK_PASSED);
}

/* The entry of KEY as topk_list sees it, or NULL. */
static const struct topk_entry *find(const struct topk *t, const char *key, uint64_t now_s)
{
    const struct topk_entry *list[4096];
    int n = topk_list(t, now_s, 1, list, 4096);

    for (int i = 0; i < n; i++) {
        if (list[i]->full_len == strlen(key) && memcmp(list[i]->key, key, list[i]->key_len) == 0)
            return list[i];
    }
    return NULL;
}

static void test_counts_and_outcomes(void)
{
    struct topk t;

    CHECK(topk_init(&t, 8) == 0);
    for (int i = 0; i < 5; i++)
        hit(&t, "a", 100);
    topk_hit(&t, "a", 1, 100, TOPK_REJECTED);
    topk_hit(&t, "a", 1, 101, TOPK_DELAYED);
    topk_note(&t, "a", 1, TOPK_REJECTED);
    topk_note(&t, "zzz", 3, TOPK_REJECTED);   /* not held: nothing */
    hit(&t, "b", 101);
    const struct topk_entry *a = find(&t, "a", 101);
    CHECK(a != NULL && a->requests == 7 && a->rejected == 2 && a->delayed == 1);
    CHECK(find(&t, "zzz", 101) == NULL);
    CHECK(t.count == 2);
    topk_free(&t);
}

static void test_window(void)
{
    struct topk t;
    struct topk_entry *e;

    CHECK(topk_init(&t, 4) == 0);
    for (uint64_t s = 1000; s < 1020; s++)
        e = hit(&t, "k", s);
    /* One hit a second: the last 10 seconds hold 10. */
    CHECK(topk_recent(e, 1019) == 10);
    CHECK(topk_recent(e, 1024) == 5);
    CHECK(topk_recent(e, 1029) == 0);
    CHECK(topk_recent(e, 5000) == 0);
    /* A hit after a long pause starts from an empty window. */
    hit(&t, "k", 1100);
    CHECK(topk_recent(e, 1100) == 1);
    CHECK(e->requests == 21);
    topk_free(&t);
}

/* Space-saving's promise: a subject seen more often than 1/capacity of all
 * hits is held, whatever streams past it. */
static void test_hot_among_cold(void)
{
    struct topk t;
    char key[32];
    const struct topk_entry *list[3];

    CHECK(topk_init(&t, 64) == 0);
    for (int i = 0; i < 200000; i++) {
        snprintf(key, sizeof(key), "cold:%d", i);
        hit(&t, key, 7);
        if (i % 20 == 0)
            hit(&t, "hot", 7);
    }
    CHECK(t.count == 64);
    CHECK(topk_list(&t, 7, 0, list, 3) == 3);
    CHECK(list[0]->full_len == 3 && memcmp(list[0]->key, "hot", 3) == 0);
    CHECK(list[0]->requests > 9000);
    /* Every held entry is found by its key: the table stayed consistent
     * through all those evictions. */
    for (int i = 0; i < t.count; i++) {
        const struct topk_entry *e = &t.entries[i];
        struct topk_entry *again = topk_hit(&t, e->key, e->full_len, 7, TOPK_PASSED);
        CHECK(again == e);
    }
    CHECK(t.count == 64);
    topk_free(&t);
}

static void test_long_subject(void)
{
    struct topk t;
    char a[300], b[300], text[TOPK_SUBJECT_MAX];

    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[299] = 'y';   /* same first 128 bytes, another subject */
    CHECK(topk_init(&t, 4) == 0);
    topk_hit(&t, a, sizeof(a), 1, TOPK_PASSED);
    topk_hit(&t, a, sizeof(a), 1, TOPK_PASSED);
    struct topk_entry *e = topk_hit(&t, b, sizeof(b), 1, TOPK_PASSED);
    CHECK(t.count == 2 && e->requests == 1);
    size_t n = topk_subject(e, text);
    CHECK(n == 128 + strlen("... (172 more bytes)"));
    CHECK(memcmp(text + 128, "... (172 more bytes)", n - 128) == 0);
    topk_free(&t);
}

/* After decay, a subject busy now takes the place of one busy long ago. */
static void test_decay(void)
{
    struct topk t;

    CHECK(topk_init(&t, 2) == 0);
    for (int i = 0; i < 1000; i++)
        hit(&t, "old", 1);
    hit(&t, "b", 1);
    for (int i = 0; i < 12; i++)
        topk_decay(&t);
    for (int i = 0; i < 10; i++) {
        hit(&t, "new1", 50);
        hit(&t, "new2", 50);
    }
    CHECK(find(&t, "old", 50) == NULL);
    CHECK(find(&t, "new1", 50) != NULL || find(&t, "new2", 50) != NULL);
    topk_free(&t);
}

static void test_clear(void)
{
    struct topk t;

    CHECK(topk_init(&t, 4) == 0);
    hit(&t, "a", 1);
    topk_clear(&t);
    CHECK(t.count == 0 && find(&t, "a", 1) == NULL);
    CHECK(hit(&t, "a", 1)->requests == 1);
    topk_free(&t);
}

/* A remembered place counts its subject without a lookup, and stops
 * holding once the subject lost its place. */
static void test_ref(void)
{
    struct topk t;
    struct topk_ref ref = {0, 0};

    CHECK(topk_init(&t, 2) == 0);
    CHECK(topk_hit_ref(&t, &ref, 1, TOPK_PASSED) == NULL);   /* zeroed: none */
    topk_ref_set(&t, &ref, hit(&t, "a", 1));
    CHECK(topk_hit_ref(&t, &ref, 1, TOPK_REJECTED) != NULL);
    CHECK(find(&t, "a", 1)->requests == 2 && find(&t, "a", 1)->rejected == 1);
    hit(&t, "b", 1);
    hit(&t, "b", 1);
    hit(&t, "b", 1);
    hit(&t, "c", 1);   /* evicts "a", the least counted */
    CHECK(find(&t, "a", 1) == NULL);
    CHECK(topk_hit_ref(&t, &ref, 1, TOPK_PASSED) == NULL);
    CHECK(find(&t, "c", 1)->requests == 1);
    topk_free(&t);
}

/* A heavy hitter (1 request in 50) among 10 million distinct keys drawn
 * uniformly, redis-benchmark's 16-byte form, in the default 1,024-subject
 * sketch: held from its first request to its last (so its count is
 * exact), ranked first; and a lookup compared at most one held subject
 * with it (the tags told the others apart). */
static void test_hot_among_ten_million(void)
{
    struct topk t;
    char key[32];
    const struct topk_entry *list[2];
    uint64_t x = 88172645463325252ull, hits = 0, hot = 0;

    CHECK(topk_init(&t, 1024) == 0);
    for (int i = 0; i < 10000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;   /* xorshift64 */
        snprintf(key, sizeof(key), "key:%012llu", (unsigned long long)(x % 10000000));
        hit(&t, key, 7);
        hits++;
        if (i % 50 == 0) {
            hit(&t, "key:hot-one-here", 7);
            hits++, hot++;
        }
    }
    CHECK(t.count == 1024);
    CHECK(topk_list(&t, 7, 1, list, 2) == 2);
    CHECK(list[0]->full_len == 16 && memcmp(list[0]->key, "key:hot-one-here", 16) == 0);
    CHECK(list[0]->requests == hot);
    CHECK(list[1]->requests < 10);
    CHECK(t.probes <= hot + hits / 1000);
    topk_free(&t);
}

/* Keys that differ only in their last digits (the parent's hash put 1,000
 * of them on one slot and every lookup walked them all): they spread over
 * the buckets, so a sketch of 1,024 holds most of 1,000 such keys, and
 * looking one up compares one held subject at most. */
static void test_similar_keys_spread(void)
{
    struct topk t;
    char key[32];
    uint64_t before;

    CHECK(topk_init(&t, 1024) == 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "key:%012d", i);
        hit(&t, key, 1);
    }
    CHECK(t.count > 700);
    before = t.probes;
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 1000; i++) {
            snprintf(key, sizeof(key), "key:%012d", i);
            hit(&t, key, 1);
        }
    }
    CHECK(t.probes - before <= 10000);
    CHECK(t.count <= 1024);
    topk_free(&t);
}

/* A capacity that is no multiple of TOPK_WAYS holds exactly that many
 * subjects, however many come. */
static void test_odd_capacity(void)
{
    struct topk t;
    char key[32];

    for (int cap = 1; cap <= 20; cap++) {
        CHECK(topk_init(&t, cap) == 0);
        for (int i = 0; i < 500; i++) {
            snprintf(key, sizeof(key), "s%d", i);
            hit(&t, key, 1);
            CHECK(t.count <= cap);
        }
        CHECK(t.count == cap);
        topk_free(&t);
    }
}

UNIT_MAIN("topk",
          {"hot among ten million", test_hot_among_ten_million},
          {"similar keys spread", test_similar_keys_spread},
          {"odd capacity", test_odd_capacity},
          {"remembered place", test_ref},
          {"counts and outcomes", test_counts_and_outcomes},
          {"10 s window", test_window},
          {"hot among cold", test_hot_among_cold},
          {"long subject", test_long_subject},
          {"decay", test_decay},
          {"clear", test_clear})
