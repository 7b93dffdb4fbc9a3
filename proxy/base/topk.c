/* topk.c - owns the heavy-hitter sketch: a fixed array of buckets of
 * TOPK_WAYS entries, space-saving within each bucket. Knows nothing of
 * what a subject is; never allocates after topk_init. Every hit costs the
 * same whatever the keys and however full the sketch: one hash, one
 * bucket (a cache line of tags and weights), at most TOPK_WAYS tags.
 *
 *   topk_hit: hash -> bucket -> a way's tag and subject match? count it
 *                               none: admitted (topk_admit: always, or
 *                                     1 in 8 in a stream of new ones)?
 *                                     an empty way (while the sketch has
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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Past the replacements topk_admit always allows, one new subject in
 * this many takes a place (a power of two). */
#define TOPK_ADMIT_ONE_IN 8

/* Weights saturate here, below 2^31: SSE2 compares signed words. */
#define TOPK_WEIGHT_MAX 0x7FFFFFFF

/* The request path's helpers: inlined whole into topk_hit, so that a hit
 * makes no call (GCC's own choice varies from build to build). */
#define TOPK_INLINE static inline __attribute__((always_inline))

/* Up to 8 bytes at P (LEN of them, 0 to 8) as one word: overlapping
 * loads, no byte loop (which bytes make the word only matters for the
 * hash; the length is mixed in apart). */
TOPK_INLINE uint64_t topk_word(const char *p, size_t len)
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
TOPK_INLINE uint64_t topk_mum(uint64_t a, uint64_t b)
{
    __extension__ unsigned __int128 r = (unsigned __int128)a * b;

    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* A 64-bit hash of LEN bytes whose every bit depends on every byte (the
 * bucket is taken from its high half, the tag from its low half: keys that
 * differ only in a few digits spread over all buckets). Seeded per sketch,
 * so that chosen keys cannot pile up on one bucket. */
TOPK_INLINE uint64_t topk_hash(const uint64_t seed[2], const char *p, size_t len)
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
    /* Two products: one alone leaves keys that differ only in their last
     * bytes (the high bits of B) poorly spread for some seeds. */
    return topk_mum(seed[0] ^ len ^ 0x9E3779B97F4A7C15ull, topk_mum(a ^ seed[0], b ^ s));
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
    t->rng = topk_splitmix(&x) | 1;
    t->admit_credit = (unsigned)capacity;
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
    t->admit_credit = (unsigned)t->capacity;
}

TOPK_INLINE int topk_same(const struct topk_entry *e, uint64_t hash, const char *key,
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
TOPK_INLINE unsigned topk_bucket_of(const struct topk *t, uint64_t hash)
{
    return (unsigned)(((hash >> 32) * (uint64_t)t->buckets) >> 32);
}

TOPK_INLINE uint32_t topk_tag(uint64_t hash)
{
    return (uint32_t)hash | 1;
}

#if defined(__SSE2__)
/* The ways of B whose tag is TAG, as bits (way W: bit W): two compares of
 * four tags at once. */
TOPK_INLINE unsigned topk_match(const struct topk_bucket *b, uint32_t tag)
{
    __m128i t = _mm_set1_epi32((int)tag);
    __m128i lo = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(const void *)b->tag), t);
    __m128i hi = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b->tag + 4)), t);

    return (unsigned)_mm_movemask_ps(_mm_castsi128_ps(lo)) |
           (unsigned)_mm_movemask_ps(_mm_castsi128_ps(hi)) << 4;
}

static inline __m128i topk_min4(__m128i a, __m128i b)
{
    __m128i a_more = _mm_cmpgt_epi32(a, b);   /* weights stay below 2^31 */

    return _mm_or_si128(_mm_and_si128(a_more, b), _mm_andnot_si128(a_more, a));
}

/* The ways of B that hold a subject of the least weight, as bits (none
 * when B holds nothing): the least of eight weights in three steps, empty
 * ways counted as the heaviest. */
static inline unsigned topk_least_ways(const struct topk_bucket *b)
{
    __m128i zero = _mm_setzero_si128(), heaviest = _mm_set1_epi32(TOPK_WEIGHT_MAX);
    __m128i tlo = _mm_loadu_si128((const __m128i *)(const void *)b->tag);
    __m128i thi = _mm_loadu_si128((const __m128i *)(const void *)(b->tag + 4));
    __m128i wlo = _mm_loadu_si128((const __m128i *)(const void *)b->weight);
    __m128i whi = _mm_loadu_si128((const __m128i *)(const void *)(b->weight + 4));
    __m128i m;

    wlo = _mm_or_si128(wlo, _mm_and_si128(_mm_cmpeq_epi32(tlo, zero), heaviest));
    whi = _mm_or_si128(whi, _mm_and_si128(_mm_cmpeq_epi32(thi, zero), heaviest));
    m = topk_min4(wlo, whi);
    m = topk_min4(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = topk_min4(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return ((unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(wlo, m))) |
            (unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(whi, m))) << 4) &
           ~topk_match(b, 0) & 0xFFu;
}
#else
TOPK_INLINE unsigned topk_match(const struct topk_bucket *b, uint32_t tag)
{
    unsigned bits = 0;

    for (int w = 0; w < TOPK_WAYS; w++)
        bits |= (unsigned)(b->tag[w] == tag) << w;
    return bits;
}

static inline unsigned topk_least_ways(const struct topk_bucket *b)
{
    uint32_t min = UINT32_MAX;
    unsigned bits = 0;

    for (int w = 0; w < TOPK_WAYS; w++) {
        if (b->tag[w] != 0 && b->weight[w] < min)
            min = b->weight[w];
    }
    for (int w = 0; w < TOPK_WAYS; w++)
        bits |= (unsigned)(b->tag[w] != 0 && b->weight[w] == min) << w;
    return bits;
}
#endif

/* The way of bucket B (its entries from FIRST) holding the subject, or
 * -1: the eight tags compared at once, then the subject of each way whose
 * tag matches (one, but for a 1 in 2^31 chance per way). */
TOPK_INLINE int topk_find(struct topk *t, const struct topk_bucket *b,
                            const struct topk_entry *first, uint64_t hash, const char *key,
                            size_t len)
{
    for (unsigned m = topk_match(b, topk_tag(hash)); m != 0; m &= m - 1) {
        int w = __builtin_ctz(m);
        t->probes++;
        if (topk_same(&first[w], hash, key, len))
            return w;
    }
    return -1;
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
    e->last_slot = (uint32_t)(now_s % TOPK_WINDOW_S);
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

/* A way of B for a subject not held: an empty one while the sketch has
 * room, else the least weighted held one (the first of equals). Some way
 * of B is held when the sketch is full: the other buckets hold fewer than
 * capacity entries between them (buckets = capacity / TOPK_WAYS rounded
 * up). */
static int topk_place(struct topk *t, const struct topk_bucket *b)
{
    unsigned empty, least;

    if (t->count < t->capacity && (empty = topk_match(b, 0)) != 0) {
        t->count++;
        return __builtin_ctz(empty);
    }
    least = topk_least_ways(b);
    return least != 0 ? __builtin_ctz(least) : 0;
}

/* Whether a subject not held, seen once more, takes a place now. Always
 * while the sketch has room or has replaced fewer than capacity subjects
 * since the last decay; past that (a stream of distinct subjects: nearly
 * every request would replace one) one in TOPK_ADMIT_ONE_IN, at random.
 * A subject that comes back gets in within a few of its requests; the
 * replacements it spares are most of the cost of a stream of distinct
 * keys. */
static inline int topk_admit(struct topk *t)
{
    if (t->count < t->capacity)
        return 1;
    if (t->admit_credit > 0) {
        t->admit_credit--;
        return 1;
    }
    t->rng ^= t->rng << 13;   /* xorshift64 */
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    return (t->rng & (TOPK_ADMIT_ONE_IN - 1)) == 0;
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
    e->last_slot = (uint32_t)(now_s % TOPK_WINDOW_S);
}

/* Count N requests with OUTCOME in E, way W of B, at NOW_S. */
TOPK_INLINE void topk_count(struct topk_bucket *b, int w, struct topk_entry *e,
                              uint64_t now_s, enum topk_outcome outcome, uint64_t n)
{
    uint64_t weight = b->weight[w] + n;

    if (now_s > e->last_s)
        topk_advance(e, now_s);
    /* NOW_S's slot, with no division (a clock read before the latest hit
     * counts in the latest hit's second). */
    e->per_s[e->last_slot] += (uint32_t)n;
    e->requests += n;
    if (outcome != TOPK_PASSED) {
        e->rejected += outcome == TOPK_REJECTED ? n : 0;
        e->delayed += outcome == TOPK_DELAYED ? n : 0;
    }
    b->weight[w] = weight < TOPK_WEIGHT_MAX ? (uint32_t)weight : TOPK_WEIGHT_MAX;
}

/* KEY (LEN bytes, HASH), not held in bucket B (entries from FIRST):
 * counted for N requests with OUTCOME at NOW_S in the place it takes, or
 * NULL when it takes none (a single request not admitted). */
static inline struct topk_entry *topk_newcomer(struct topk *t, struct topk_bucket *b,
                                               struct topk_entry *first, uint64_t hash,
                                               const char *key, size_t len, uint64_t now_s,
                                               enum topk_outcome outcome, uint64_t n)
{
    int w;

    if (n == 1 && !topk_admit(t))
        return NULL;
    w = topk_place(t, b);
    topk_take(t, b, w, &first[w], hash, key, len, now_s);
    topk_count(b, w, &first[w], now_s, outcome, n);
    return &first[w];
}

/* Count N requests with OUTCOME of KEY (LEN bytes), taking a place for
 * it when it has none: any subject, any N. */
static __attribute__((noinline)) struct topk_entry *
topk_hit_n(struct topk *t, const char *key, size_t len, uint64_t now_s,
           enum topk_outcome outcome, uint64_t n)
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
    if (w < 0)
        return topk_newcomer(t, b, first, hash, key, len, now_s, outcome, n);
    topk_count(b, w, &first[w], now_s, outcome, n);
    return &first[w];
}

/* topk_hit's subject with HASH, admitted: its place taken and counted. */
static __attribute__((noinline)) struct topk_entry *
topk_hit_place(struct topk *t, const char *key, size_t len, uint64_t now_s, uint64_t hash,
               enum topk_outcome outcome)
{
    unsigned bi = topk_bucket_of(t, hash);
    struct topk_bucket *b = &t->bucket[bi];
    struct topk_entry *first = &t->entries[(size_t)bi * TOPK_WAYS];
    int w = topk_place(t, b);

    topk_take(t, b, w, &first[w], hash, key, len, now_s);
    topk_count(b, w, &first[w], now_s, outcome, 1);
    return &first[w];
}

/* topk_hit's subject of at most 16 bytes with HASH, not held: six
 * arguments, so that topk_hit reaches it by a plain jump, and one not
 * admitted costs only the draw. */
static __attribute__((noinline)) struct topk_entry *
topk_hit_new(struct topk *t, const char *key, size_t len, uint64_t now_s, uint64_t hash,
             enum topk_outcome outcome)
{
    if (!topk_admit(t))
        return NULL;
    return topk_hit_place(t, key, len, now_s, hash, outcome);
}

/* The request path: a subject of at most 16 bytes (most keys) held in
 * its bucket is counted here with no call; a longer one, or one not held,
 * goes on by a tail call, so that this saves no registers. */
inline __attribute__((always_inline)) struct topk_entry *
topk_hit(struct topk *t, const char *key, size_t len, uint64_t now_s,
                            enum topk_outcome outcome)
{
    uint64_t hash;
    unsigned bi;
    struct topk_bucket *b;
    struct topk_entry *first;

    if (len > 16 || t->capacity == 0)
        return topk_hit_n(t, key, len, now_s, outcome, 1);
    hash = topk_hash(t->seed, key, len);
    bi = topk_bucket_of(t, hash);
    b = &t->bucket[bi];
    first = &t->entries[(size_t)bi * TOPK_WAYS];
    for (unsigned m = topk_match(b, topk_tag(hash)); m != 0; m &= m - 1) {
        int w = __builtin_ctz(m);
        t->probes++;
        if (topk_same(&first[w], hash, key, len)) {
            topk_count(b, w, &first[w], now_s, outcome, 1);
            return &first[w];
        }
    }
    return topk_hit_new(t, key, len, now_s, hash, outcome);
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
    t->admit_credit = (unsigned)t->capacity;
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
