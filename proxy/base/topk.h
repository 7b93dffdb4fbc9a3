/* topk.h - a bounded heavy-hitter sketch: counts requests per subject (a
 * key, a user, a client...) in a fixed number of entries, whatever the
 * number of distinct subjects, at a fixed cost per hit. The entries sit
 * in buckets of TOPK_WAYS; a seeded hash of the subject picks its bucket.
 * A subject not held takes the place of the least counted one of its
 * bucket (space-saving within the bucket): any subject seen more often
 * than 1/TOPK_WAYS of the hits landing in its bucket is held, which for
 * hits spread over many subjects is about 1/capacity of all hits (in a
 * stream of distinct subjects it gets in within a few of its requests:
 * topk_hit). Each entry also keeps its hits of the last TOPK_WINDOW_S
 * seconds, what PROXY TOP ranks by. */
#ifndef SLUICE_TOPK_H
#define SLUICE_TOPK_H

#include <stddef.h>
#include <stdint.h>

#define TOPK_WINDOW_S 10
/* A subject's bytes kept for display and comparison; a longer one is kept
 * as its first TOPK_KEY_MAX bytes and told apart by its hash and length. */
#define TOPK_KEY_MAX 128
/* Entries per bucket: a lookup compares at most this many tags, whatever
 * the capacity and however full the sketch. */
#define TOPK_WAYS 8

enum topk_outcome { TOPK_PASSED, TOPK_REJECTED, TOPK_DELAYED };

struct topk_entry {
    uint64_t hash;                  /* of the whole subject */
    size_t full_len;                /* the subject's length */
    uint64_t requests, rejected, delayed;  /* since it took its place */
    uint64_t last_s;                /* second of its latest hit */
    uint32_t per_s[TOPK_WINDOW_S];  /* hits per second, at [second % TOPK_WINDOW_S] */
    uint32_t last_slot;             /* last_s % TOPK_WINDOW_S */
    uint32_t key_len;               /* bytes in key[] */
    uint64_t gen;                   /* which subject took this place (topk_ref) */
    char key[TOPK_KEY_MAX];
};

/* One bucket: its ways' tags (bits of the subject's hash, never 0; 0: the
 * way is empty) and space-saving weights, one cache line. The entry of
 * way W of bucket B is entries[B * TOPK_WAYS + W]. */
struct topk_bucket {
    uint32_t tag[TOPK_WAYS];
    uint32_t weight[TOPK_WAYS];     /* halved by topk_decay; saturates below 2^31 */
};

struct topk {
    int capacity;                   /* entries held at most */
    int count;                      /* entries held now */
    unsigned buckets;
    struct topk_bucket *bucket;
    struct topk_entry *entries;     /* buckets * TOPK_WAYS of them */
    uint64_t seed[2];
    uint64_t next_gen;
    uint64_t rng;                   /* topk_admit's draws */
    unsigned admit_credit;          /* replacements left before sampling (topk_decay) */
    uint64_t probes;                /* subjects compared by lookups, all told (one
                                     * per hit of a held subject, none per new one) */
};

/* Where a subject was, kept by whoever counts it again and again (a
 * client, a command), so that a repeat needs no hash nor the subject's
 * bytes: valid while that place still holds that subject. Zeroed: none. */
struct topk_ref {
    int idx;
    uint64_t gen;
};

/* Set up T for CAPACITY (>= 1) subjects; all of its memory is taken here.
 * Returns 0, or -1 when out of memory (T is then empty: topk_hit does
 * nothing). Release with topk_free. */
int topk_init(struct topk *t, int capacity);
void topk_free(struct topk *t);
/* Forget every subject (the memory stays). */
void topk_clear(struct topk *t);

/* Count one request of the subject KEY (LEN bytes) at second NOW_S, with
 * OUTCOME: the TOPK_WAYS tags of one bucket compared, a subject not held
 * takes the place of the least counted of its bucket. Past capacity such
 * replacements since the last topk_decay (a stream of distinct subjects),
 * a subject not held takes a place on one of its requests in 8, at random
 * (what keeps a stream of distinct keys cheap; a subject that comes back
 * is in within a few requests). Never allocates. Returns its entry, or
 * NULL when T is empty or the subject was not given a place. */
struct topk_entry *topk_hit(struct topk *t, const char *key, size_t len, uint64_t now_s,
                            enum topk_outcome outcome);

/* topk_hit for N requests at once (passed), as a counter kept by its
 * subject between two flushes hands them over: N > 1 always takes a
 * place. */
struct topk_entry *topk_add(struct topk *t, const char *key, size_t len, uint64_t now_s,
                            uint64_t n);
struct topk_entry *topk_add_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                uint64_t n);

/* topk_hit for the subject REF remembers: its entry, or NULL when REF no
 * longer holds (the subject lost its place, or REF is zeroed); then call
 * topk_hit and topk_ref_set. */
struct topk_entry *topk_hit_ref(struct topk *t, const struct topk_ref *ref, uint64_t now_s,
                                enum topk_outcome outcome);
void topk_ref_set(const struct topk *t, struct topk_ref *ref, const struct topk_entry *e);

/* Count OUTCOME (rejected, delayed) of a request already counted with
 * topk_hit, when its subject is still held. */
void topk_note(struct topk *t, const char *key, size_t len, enum topk_outcome outcome);

/* Hits of E in the TOPK_WINDOW_S seconds up to NOW_S. */
uint64_t topk_recent(const struct topk_entry *e, uint64_t now_s);

/* Halve every weight, so that subjects busy long ago give way to those
 * busy now (their order stays). */
void topk_decay(struct topk *t);

/* The busiest entries into OUT (at most MAX): by hits in the last
 * TOPK_WINDOW_S seconds, or by requests when BY_REQUESTS; entries with
 * none left out. Returns how many. */
int topk_list(const struct topk *t, uint64_t now_s, int by_requests,
              const struct topk_entry **out, int max);

/* E's subject into BUF (TOPK_SUBJECT_MAX bytes, not NUL-terminated):
 * whole, or cut as Redis's SLOWLOG cuts an argument ("... (N more
 * bytes)"). Returns its length. */
#define TOPK_SUBJECT_MAX (TOPK_KEY_MAX + 48)
size_t topk_subject(const struct topk_entry *e, char *buf);

#endif
