/* topk.c - owns the space-saving sketch: a fixed array of entries, a
 * min-heap over their weights (the one to give up its place is the root)
 * and an open-addressing table from a subject's hash to its entry. Knows
 * nothing of what a subject is; never allocates after topk_init.
 *
 *   topk_hit: hash -> table -> held? weight++ (sift down), counters
 *                              new?  full? evict the root: its weight + 1
 *                                                          goes to the new one
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

/* A 64-bit hash of LEN bytes, eight at a time (the last word overlapping
 * the one before it), seeded per sketch so that chosen keys cannot pile
 * up on one table slot. */
#define TOPK_MUL 0x9E3779B97F4A7C15ull

static inline uint64_t topk_round(uint64_t h, uint64_t w)
{
    h = (h ^ (w * TOPK_MUL)) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static inline uint64_t topk_hash(uint64_t seed, const char *p, size_t len)
{
    uint64_t h = seed ^ (len * TOPK_MUL);
    size_t left = len;

    if (len <= 8) {
        h ^= topk_word(p, len) * TOPK_MUL;
    } else if (len <= 16) {   /* most keys: no loop */
        h = topk_round(h, topk_word(p, 8)) ^ (topk_word(p + len - 8, 8) * TOPK_MUL);
    } else {
        for (; left > 8; left -= 8, p += 8)
            h = topk_round(h, topk_word(p, 8));
        h ^= topk_word(p + left - 8, 8) * TOPK_MUL;
    }
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

int topk_init(struct topk *t, int capacity)
{
    unsigned size = 2;

    memset(t, 0, sizeof(*t));
    while (size < 2u * (unsigned)capacity)
        size <<= 1;
    t->entries = calloc((size_t)capacity, sizeof(*t->entries));
    t->heap = calloc((size_t)capacity, sizeof(*t->heap));
    t->table = calloc(size, sizeof(*t->table));
    t->dirty = calloc((size_t)capacity, sizeof(*t->dirty));
    if (t->entries == NULL || t->heap == NULL || t->table == NULL || t->dirty == NULL) {
        topk_free(t);
        return -1;
    }
    t->capacity = capacity;
    t->table_mask = size - 1;
    t->seed = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull ^ (uint64_t)(uintptr_t)t;
    return 0;
}

void topk_free(struct topk *t)
{
    free(t->entries);
    free(t->heap);
    free(t->table);
    free(t->dirty);
    memset(t, 0, sizeof(*t));
}

void topk_clear(struct topk *t)
{
    if (t->table != NULL)
        memset(t->table, 0, (t->table_mask + 1) * sizeof(*t->table));
    t->count = 0;
    t->dirty_count = 0;
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

/* The table slot of the subject, or of the empty slot where it would go. */
static inline unsigned topk_slot(const struct topk *t, uint64_t hash, const char *key, size_t len)
{
    unsigned i = (unsigned)hash & t->table_mask;

    while (t->table[i] != 0 && !topk_same(&t->entries[t->table[i] - 1], hash, key, len))
        i = (i + 1) & t->table_mask;
    return i;
}

/* Empty slot I, moving later entries of its run back so that every
 * lookup still finds them (linear probing's deletion). */
static void topk_unslot(struct topk *t, unsigned i)
{
    unsigned j = i;

    t->table[i] = 0;
    for (;;) {
        j = (j + 1) & t->table_mask;
        if (t->table[j] == 0)
            return;
        unsigned home = (unsigned)t->entries[t->table[j] - 1].hash & t->table_mask;
        /* Move it back unless its home lies cyclically within (i, j]:
         * then a lookup from its home still reaches it. */
        int reachable = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!reachable) {
            t->table[i] = t->table[j];
            t->table[j] = 0;
            i = j;
        }
    }
}

static void topk_heap_swap(struct topk *t, int a, int b)
{
    int ea = t->heap[a], eb = t->heap[b];

    t->heap[a] = eb;
    t->heap[b] = ea;
    t->entries[eb].heap_pos = a;
    t->entries[ea].heap_pos = b;
}

/* Restore the heap below position P after its weight grew. */
static void topk_sift_down(struct topk *t, int p)
{
    for (;;) {
        int l = 2 * p + 1, r = l + 1, least = p;
        if (l < t->count && t->entries[t->heap[l]].weight < t->entries[t->heap[least]].weight)
            least = l;
        if (r < t->count && t->entries[t->heap[r]].weight < t->entries[t->heap[least]].weight)
            least = r;
        if (least == p)
            return;
        topk_heap_swap(t, p, least);
        p = least;
    }
}

/* Bring E's ring up to second NOW_S: seconds passed since its last hit
 * start from zero. */
static void topk_advance(struct topk_entry *e, uint64_t now_s)
{
    if (now_s <= e->last_s)
        return;
    if (now_s - e->last_s >= TOPK_WINDOW_S) {
        memset(e->per_s, 0, sizeof(e->per_s));
    } else {
        for (uint64_t s = e->last_s + 1; s <= now_s; s++)
            e->per_s[s % TOPK_WINDOW_S] = 0;
    }
    e->last_s = now_s;
}

/* A place for a subject not held: a free entry, or the least weighted
 * one's (its table slot emptied). Returns the entry index. */
static int topk_take_place(struct topk *t, uint64_t now_s, uint64_t *inherited)
{
    int idx;

    *inherited = 0;
    if (t->count < t->capacity) {
        idx = t->count;
        t->heap[t->count] = idx;
        t->entries[idx].heap_pos = t->count;
        t->count++;
        return idx;
    }
    topk_flush(t, now_s);   /* the root by the weights of every hit so far */
    idx = t->heap[0];
    *inherited = t->entries[idx].weight;
    topk_unslot(t, topk_slot(t, t->entries[idx].hash, t->entries[idx].key,
                             t->entries[idx].full_len));
    return idx;
}

static int topk_insert(struct topk *t, uint64_t hash, const char *key, size_t len,
                       uint64_t now_s)
{
    uint64_t inherited;
    int idx = topk_take_place(t, now_s, &inherited);
    struct topk_entry *e = &t->entries[idx];
    int pos = e->heap_pos;

    memset(e, 0, offsetof(struct topk_entry, key));
    e->heap_pos = pos;
    e->gen = ++t->next_gen;
    e->hash = hash;
    e->weight = inherited;
    e->full_len = len;
    e->key_len = (uint32_t)(len < TOPK_KEY_MAX ? len : TOPK_KEY_MAX);
    memcpy(e->key, key, e->key_len);
    e->last_s = now_s;
    /* An eviction may have moved the empty slot the lookup found. */
    t->table[topk_slot(t, hash, key, len)] = idx + 1;
    return idx;
}

/* Count N requests with OUTCOME in E at NOW_S. */
static void topk_count(struct topk *t, struct topk_entry *e, uint64_t now_s,
                       enum topk_outcome outcome, uint64_t n)
{
    topk_advance(e, now_s);
    e->per_s[now_s % TOPK_WINDOW_S] += (uint32_t)n;
    e->requests += n;
    e->rejected += outcome == TOPK_REJECTED ? n : 0;
    e->delayed += outcome == TOPK_DELAYED ? n : 0;
    e->weight += n;
    topk_sift_down(t, e->heap_pos);
}

/* Count N requests with OUTCOME of KEY (LEN bytes), taking a place for
 * it when it has none. */
static struct topk_entry *topk_hit_n(struct topk *t, const char *key, size_t len,
                                     uint64_t now_s, enum topk_outcome outcome, uint64_t n)
{
    uint64_t hash;
    unsigned slot;
    struct topk_entry *e;

    if (t->capacity == 0)
        return NULL;
    hash = topk_hash(t->seed, key, len);
    slot = topk_slot(t, hash, key, len);
    e = &t->entries[t->table[slot] != 0 ? t->table[slot] - 1
                                        : topk_insert(t, hash, key, len, now_s)];
    topk_count(t, e, now_s, outcome, n);
    return e;
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

/* The first entry on HASH's probe that has that hash, or NULL. */
static inline struct topk_entry *topk_first_with_hash(struct topk *t, uint64_t hash)
{
    int idx;

    for (unsigned i = (unsigned)hash & t->table_mask; (idx = t->table[i]) != 0;
         i = (i + 1) & t->table_mask) {
        if (t->entries[idx - 1].hash == hash)
            return &t->entries[idx - 1];
    }
    return NULL;
}

/* Note a hit of E for the next topk_flush. */
static inline void topk_pend(struct topk *t, struct topk_entry *e)
{
    if (e->pending++ == 0)
        t->dirty[t->dirty_count++] = (int)(e - t->entries);
}

void topk_flush(struct topk *t, uint64_t now_s)
{
    while (t->dirty_count > 0) {
        struct topk_entry *e = &t->entries[t->dirty[--t->dirty_count]];
        uint32_t n = e->pending;
        e->pending = 0;
        topk_count(t, e, now_s, TOPK_PASSED, n);
    }
}

/* topk_hit_later past its common case: a long subject, another with the
 * same hash, or one not held (a new place). Kept out of line (noinline)
 * so that the common case saves no registers for its calls. */
static __attribute__((noinline)) struct topk_entry *
topk_hit_later_slow(struct topk *t, uint64_t hash, const char *key, size_t len, uint64_t now_s)
{
    unsigned slot = topk_slot(t, hash, key, len);
    struct topk_entry *e = &t->entries[t->table[slot] != 0
                                           ? t->table[slot] - 1
                                           : topk_insert(t, hash, key, len, now_s)];

    topk_pend(t, e);
    return e;
}

struct topk_entry *topk_hit_later(struct topk *t, const char *key, size_t len,
                                  uint64_t now_s)
{
    uint64_t hash;
    struct topk_entry *e;

    if (t->capacity == 0)
        return NULL;
    hash = topk_hash(t->seed, key, len);
    /* The common case, with no call: the first entry of the probe with
     * that hash holds the subject, a short one. Else the full lookup. */
    e = topk_first_with_hash(t, hash);
    if (e == NULL || len > 16 || !topk_same(e, hash, key, len))
        return topk_hit_later_slow(t, hash, key, len, now_s);
    topk_pend(t, e);
    return e;
}

/* The entry REF remembers, while it still holds that subject; else NULL. */
static struct topk_entry *topk_ref_entry(struct topk *t, const struct topk_ref *ref)
{
    if (ref->gen == 0 || ref->idx >= t->count || t->entries[ref->idx].gen != ref->gen)
        return NULL;
    return &t->entries[ref->idx];
}

struct topk_entry *topk_hit_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                enum topk_outcome outcome)
{
    struct topk_entry *e = topk_ref_entry(t, ref);

    if (e != NULL)
        topk_count(t, e, now_s, outcome, 1);
    return e;
}

struct topk_entry *topk_add_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                uint64_t n)
{
    struct topk_entry *e = topk_ref_entry(t, ref);

    if (e != NULL)
        topk_count(t, e, now_s, TOPK_PASSED, n);
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
    unsigned slot;

    if (t->capacity == 0)
        return;
    hash = topk_hash(t->seed, key, len);
    slot = topk_slot(t, hash, key, len);
    if (t->table[slot] == 0)
        return;
    t->entries[t->table[slot] - 1].rejected += outcome == TOPK_REJECTED;
    t->entries[t->table[slot] - 1].delayed += outcome == TOPK_DELAYED;
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
    for (int i = 0; i < t->count; i++)
        t->entries[i].weight /= 2;
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
    int n = 0;

    if (t->count == 0 || max <= 0)
        return 0;
    r = malloc(sizeof(*r) * (size_t)t->count);
    if (r == NULL)
        return 0;
    for (int i = 0; i < t->count; i++) {
        const struct topk_entry *e = &t->entries[i];
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
