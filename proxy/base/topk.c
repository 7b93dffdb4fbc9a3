/* topk.c - owns the heavy-hitter sketch: a fixed array of buckets of
 * TOPK_WAYS entries, space-saving within each bucket. Knows nothing of
 * what a subject is; never allocates after topk_init. Every hit costs the
 * same whatever the keys and however full the sketch: one hash, one
 * bucket (a cache line of tags and weights), at most TOPK_WAYS tags.
 *
 *   topk_hit: hash -> bucket -> a way's tag and subject match? count it
 *                               none: an empty way (while the sketch has
 *                                     room), else the least weighted
 *                                     way's place, its weight + 1 going
 *                                     to the new subject
 */
#include "topk.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Up to 8 bytes at P (LEN of them, 0 to 8) as one word: overlapping
 * loads, no byte loop (which bytes make the word only matters for the
 * hash; the length is mixed in apart). */
static inline uint64_t topk_word(const char *p, size_t len)
{
    uint64_t w;
    uint32_t a, b;

    if (len >= 8) {
        memcpy(&w, p, 8);
        return w;
    }
    if (len >= 4) {
        memcpy(&a, p, 4);
        memcpy(&b, p + len - 4, 4);
        return (uint64_t)a << 32 | b;
    }
    if (len > 0)
        return (uint64_t)(unsigned char)p[0] << 16 | (uint64_t)(unsigned char)p[len / 2] << 8 |
               (unsigned char)p[len - 1];
    return 0;
}

/* The 128-bit product of A and B folded to 64 bits: every bit of either
 * reaches every bit of the result (wyhash's mix). */
static inline uint64_t topk_mum(uint64_t a, uint64_t b)
{
    __extension__ unsigned __int128 r = (unsigned __int128)a * b;

    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* A 64-bit hash of LEN bytes whose every bit depends on every byte (the
 * bucket is taken from its high half, the tag from its low half: keys that
 * differ only in a few digits spread over all buckets). Seeded per sketch,
 * so that chosen keys cannot pile up on one bucket. */
static inline uint64_t topk_hash(const uint64_t seed[2], const char *p, size_t len)
{
    uint64_t a, b, s = seed[1];
    size_t left = len;

    if (len <= 8) {
        a = topk_word(p, len);
        b = 0;
    } else if (len <= 16) {   /* most keys: no loop */
        a = topk_word(p, 8);
        b = topk_word(p + len - 8, 8);
    } else {
        for (; left > 16; left -= 16, p += 16)
            s = topk_mum(topk_word(p, 8) ^ seed[0], topk_word(p + 8, 8) ^ s);
        a = topk_word(p + left - 16, 8);   /* the last 16 bytes, overlapping */
        b = topk_word(p + left - 8, 8);
    }
    return topk_mum(seed[1] ^ len ^ 0x9E3779B97F4A7C15ull, topk_mum(a ^ seed[0], b ^ s));
}

/* splitmix64's step: a seed word from any start. */
static uint64_t topk_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int topk_init(struct topk *t, int capacity)
{
    struct timespec ts;
    uint64_t x;

    memset(t, 0, sizeof(*t));
    t->buckets = (unsigned)(capacity + TOPK_WAYS - 1) / TOPK_WAYS;
    t->bucket = calloc(t->buckets, sizeof(*t->bucket));
    t->entries = calloc((size_t)t->buckets * TOPK_WAYS, sizeof(*t->entries));
    if (t->bucket == NULL || t->entries == NULL) {
        topk_free(t);
        return -1;
    }
    t->capacity = capacity;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    x = (uint64_t)time(NULL) ^ (uint64_t)ts.tv_nsec << 20 ^ (uint64_t)(uintptr_t)t;
    t->seed[0] = topk_splitmix(&x);
    t->seed[1] = topk_splitmix(&x);
    return 0;
}

void topk_free(struct topk *t)
{
    free(t->bucket);
    free(t->entries);
    memset(t, 0, sizeof(*t));
}

void topk_clear(struct topk *t)
{
    if (t->bucket != NULL)
        memset(t->bucket, 0, t->buckets * sizeof(*t->bucket));
    t->count = 0;
}

static inline int topk_same(const struct topk_entry *e, uint64_t hash, const char *key,
                            size_t len)
{
    if (e->hash != hash || e->full_len != len)
        return 0;
    if (len <= 16)   /* most keys: two words, no call */
        return topk_word(e->key, len < 8 ? len : 8) == topk_word(key, len < 8 ? len : 8) &&
               (len <= 8 || topk_word(e->key + len - 8, 8) == topk_word(key + len - 8, 8));
    return memcmp(e->key, key, len < TOPK_KEY_MAX ? len : TOPK_KEY_MAX) == 0;
}

/* Where a subject goes: its bucket (from the hash's high half, onto any
 * number of buckets) and its tag (the low half; never 0, an empty way). */
static inline unsigned topk_bucket_of(const struct topk *t, uint64_t hash)
{
    return (unsigned)(((hash >> 32) * (uint64_t)t->buckets) >> 32);
}

static inline uint32_t topk_tag(uint64_t hash)
{
    return (uint32_t)hash | 1;
}

/* The way of bucket B (its entries from FIRST) holding the subject, or
 * -1: at most TOPK_WAYS tags compared. */
static inline int topk_find(struct topk *t, const struct topk_bucket *b,
                            const struct topk_entry *first, uint64_t hash, const char *key,
                            size_t len)
{
    uint32_t tag = topk_tag(hash);

    for (int w = 0; w < TOPK_WAYS; w++) {
        if (b->tag[w] == tag && topk_same(&first[w], hash, key, len)) {
            t->probes += (unsigned)w + 1;
            return w;
        }
    }
    t->probes += TOPK_WAYS;
    return -1;
}

/* A way of B for a subject not held: an empty one while the sketch has
 * room, else the least weighted held one (the first of equals). Some way
 * of B is held when the sketch is full: the other buckets hold fewer than
 * capacity entries between them (buckets = capacity / TOPK_WAYS rounded
 * up). */
static int topk_place(struct topk *t, const struct topk_bucket *b)
{
    int least = 0;
    uint32_t min = UINT32_MAX;

    if (t->count < t->capacity) {
        for (int w = 0; w < TOPK_WAYS; w++) {
            if (b->tag[w] == 0) {
                t->count++;
                return w;
            }
        }
    }
    for (int w = 0; w < TOPK_WAYS; w++) {
        if (b->tag[w] != 0 && b->weight[w] < min) {
            min = b->weight[w];
            least = w;
        }
    }
    return least;
}

/* Give way W of B, entry E, to the subject KEY (LEN bytes, HASH) at
 * NOW_S: its counts from zero, its weight the one it replaces (0 for an
 * empty way; the hit about to be counted makes it + 1). */
static void topk_take(struct topk *t, struct topk_bucket *b, int w, struct topk_entry *e,
                      uint64_t hash, const char *key, size_t len, uint64_t now_s)
{
    if (b->tag[w] == 0)
        b->weight[w] = 0;
    b->tag[w] = topk_tag(hash);
    e->hash = hash;
    e->full_len = len;
    e->requests = e->rejected = e->delayed = 0;
    e->last_s = now_s;
    memset(e->per_s, 0, sizeof(e->per_s));
    e->gen = ++t->next_gen;
    e->key_len = (uint32_t)(len < TOPK_KEY_MAX ? len : TOPK_KEY_MAX);
    if (len >= 8 && len <= 16) {   /* most keys: two words, no call */
        uint64_t head = topk_word(key, 8), tail = topk_word(key + len - 8, 8);
        memcpy(e->key, &head, 8);
        memcpy(e->key + len - 8, &tail, 8);
    } else {
        memcpy(e->key, key, e->key_len);
    }
}

/* Bring E's ring up to second NOW_S (later than its last hit): seconds
 * passed since then start from zero. */
static void topk_advance(struct topk_entry *e, uint64_t now_s)
{
    if (now_s - e->last_s >= TOPK_WINDOW_S) {
        memset(e->per_s, 0, sizeof(e->per_s));
    } else {
        for (uint64_t s = e->last_s + 1; s <= now_s; s++)
            e->per_s[s % TOPK_WINDOW_S] = 0;
    }
    e->last_s = now_s;
}

/* Count N requests with OUTCOME in E, way W of B, at NOW_S. */
static inline void topk_count(struct topk_bucket *b, int w, struct topk_entry *e,
                              uint64_t now_s, enum topk_outcome outcome, uint64_t n)
{
    uint64_t weight = b->weight[w] + n;

    if (now_s > e->last_s)
        topk_advance(e, now_s);
    e->per_s[now_s % TOPK_WINDOW_S] += (uint32_t)n;
    e->requests += n;
    if (outcome != TOPK_PASSED) {
        e->rejected += outcome == TOPK_REJECTED ? n : 0;
        e->delayed += outcome == TOPK_DELAYED ? n : 0;
    }
    b->weight[w] = weight < UINT32_MAX ? (uint32_t)weight : UINT32_MAX;
}

/* Count N requests with OUTCOME of KEY (LEN bytes), taking a place for
 * it when it has none. */
static struct topk_entry *topk_hit_n(struct topk *t, const char *key, size_t len,
                                     uint64_t now_s, enum topk_outcome outcome, uint64_t n)
{
    uint64_t hash;
    unsigned bi;
    struct topk_bucket *b;
    struct topk_entry *first;
    int w;

    if (t->capacity == 0)
        return NULL;
    hash = topk_hash(t->seed, key, len);
    bi = topk_bucket_of(t, hash);
    b = &t->bucket[bi];
    first = &t->entries[(size_t)bi * TOPK_WAYS];
    w = topk_find(t, b, first, hash, key, len);
    if (w < 0) {
        w = topk_place(t, b);
        topk_take(t, b, w, &first[w], hash, key, len, now_s);
    }
    topk_count(b, w, &first[w], now_s, outcome, n);
    return &first[w];
}

struct topk_entry *topk_hit(struct topk *t, const char *key, size_t len, uint64_t now_s,
                            enum topk_outcome outcome)
{
    return topk_hit_n(t, key, len, now_s, outcome, 1);
}

struct topk_entry *topk_add(struct topk *t, const char *key, size_t len, uint64_t now_s,
                            uint64_t n)
{
    return topk_hit_n(t, key, len, now_s, TOPK_PASSED, n);
}

/* The bucket of entry index IDX. */
static inline struct topk_bucket *topk_bucket_at(const struct topk *t, size_t idx)
{
    return &t->bucket[idx / TOPK_WAYS];
}

/* The entry REF remembers, while it still holds that subject; else NULL. */
static struct topk_entry *topk_ref_entry(struct topk *t, const struct topk_ref *ref)
{
    size_t idx = (size_t)ref->idx;

    if (ref->gen == 0 || ref->idx < 0 || idx >= (size_t)t->buckets * TOPK_WAYS ||
        topk_bucket_at(t, idx)->tag[idx % TOPK_WAYS] == 0 || t->entries[idx].gen != ref->gen)
        return NULL;
    return &t->entries[idx];
}

struct topk_entry *topk_hit_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                enum topk_outcome outcome)
{
    struct topk_entry *e = topk_ref_entry(t, ref);

    if (e != NULL)
        topk_count(topk_bucket_at(t, (size_t)ref->idx), ref->idx % TOPK_WAYS, e, now_s,
                   outcome, 1);
    return e;
}

struct topk_entry *topk_add_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                uint64_t n)
{
    struct topk_entry *e = topk_ref_entry(t, ref);

    if (e != NULL)
        topk_count(topk_bucket_at(t, (size_t)ref->idx), ref->idx % TOPK_WAYS, e, now_s,
                   TOPK_PASSED, n);
    return e;
}

void topk_ref_set(const struct topk *t, struct topk_ref *ref, const struct topk_entry *e)
{
    ref->idx = e != NULL ? (int)(e - t->entries) : 0;
    ref->gen = e != NULL ? e->gen : 0;
}

void topk_note(struct topk *t, const char *key, size_t len, enum topk_outcome outcome)
{
    uint64_t hash;
    unsigned bi;
    int w;
    struct topk_entry *first;

    if (t->capacity == 0)
        return;
    hash = topk_hash(t->seed, key, len);
    bi = topk_bucket_of(t, hash);
    first = &t->entries[(size_t)bi * TOPK_WAYS];
    w = topk_find(t, &t->bucket[bi], first, hash, key, len);
    if (w < 0)
        return;
    first[w].rejected += outcome == TOPK_REJECTED;
    first[w].delayed += outcome == TOPK_DELAYED;
}

uint64_t topk_recent(const struct topk_entry *e, uint64_t now_s)
{
    uint64_t sum = 0, first;

    if (now_s < e->last_s)
        now_s = e->last_s;   /* a clock read before the latest hit */
    if (now_s >= e->last_s + TOPK_WINDOW_S)
        return 0;
    /* The ring holds the seconds up to last_s; those before the window
     * that ends at NOW_S are left out. */
    first = now_s + 1 >= TOPK_WINDOW_S ? now_s + 1 - TOPK_WINDOW_S : 0;
    for (uint64_t s = first; s <= e->last_s; s++)
        sum += e->per_s[s % TOPK_WINDOW_S];
    return sum;
}

void topk_decay(struct topk *t)
{
    for (unsigned i = 0; i < t->buckets; i++) {
        for (int w = 0; w < TOPK_WAYS; w++)
            t->bucket[i].weight[w] /= 2;
    }
}

/* For topk_list's sort: the window to rank by, and the entries. */
struct topk_ranked {
    const struct topk_entry *e;
    uint64_t score, tie;
};

static int topk_rank_cmp(const void *a, const void *b)
{
    const struct topk_ranked *x = a, *y = b;

    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->tie != y->tie)
        return x->tie > y->tie ? -1 : 1;
    return 0;
}

int topk_list(const struct topk *t, uint64_t now_s, int by_requests,
              const struct topk_entry **out, int max)
{
    struct topk_ranked *r;
    size_t slots = (size_t)t->buckets * TOPK_WAYS;
    int n = 0;

    if (t->count == 0 || max <= 0)
        return 0;
    r = malloc(sizeof(*r) * (size_t)t->count);
    if (r == NULL)
        return 0;
    for (size_t i = 0; i < slots; i++) {
        const struct topk_entry *e = &t->entries[i];
        if (topk_bucket_at(t, i)->tag[i % TOPK_WAYS] == 0)
            continue;
        uint64_t recent = topk_recent(e, now_s);
        uint64_t score = by_requests ? e->requests : recent;
        if (score > 0)
            r[n++] = (struct topk_ranked){e, score, by_requests ? recent : e->requests};
    }
    qsort(r, (size_t)n, sizeof(*r), topk_rank_cmp);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++)
        out[i] = r[i].e;
    free(r);
    return n;
}

size_t topk_subject(const struct topk_entry *e, char *buf)
{
    memcpy(buf, e->key, e->key_len);
    if (e->full_len <= TOPK_KEY_MAX)
        return e->key_len;
    return e->key_len + (size_t)snprintf(buf + e->key_len, TOPK_SUBJECT_MAX - e->key_len,
                                         "... (%zu more bytes)", e->full_len - TOPK_KEY_MAX);
}
