/* limiter.h - the live rule set and its buckets: decides for each request
 * whether it passes, waits or is refused. Knows nothing of sockets or
 * backends; the proxy asks Redis for shared buckets and reports back. */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "errlist.h"
#include "sv.h"

struct command;
struct sockaddr;
struct evbuffer;
struct limiter_client;

/* Who is asking: what rules match on (ip, user, name) and whose buckets
 * per = client / ip / user / name are used. */
struct limiter_identity {
    const struct sockaddr *addr;
    const char *ip;     /* text form of addr */
    const char *user;   /* NULL: "default" */
    const char *name;   /* NULL: no name */
    uint64_t client_id; /* for per = client buckets */
    const char *addr_text; /* "ip:port": how a rule's report names the client */
};

/* Room for "user=.. name=.. addr=..", how a rule's report names whom it
 * hit (user and name cut at 64 bytes). */
#define LIMITER_SUBJECT_MAX 224

enum limiter_verdict {
    LIMITER_PASS,       /* send it now */
    LIMITER_DELAY,      /* send it after wait_us */
    LIMITER_REJECT,     /* answer -THROTTLED */
    LIMITER_ASK,        /* local rules admit; shared buckets must be asked */
};

/* What a message about a shared bucket is for. */
enum limiter_ask_kind {
    LIMITER_ASK_REQUEST,    /* a request's token (it waits, unless dry-run) */
    LIMITER_ASK_REFILL,     /* WANT tokens for the lease, ahead of need */
    LIMITER_ASK_RETURN,     /* WANT leased tokens given back ("refund") */
    LIMITER_ASK_REFUND,     /* a request's token given back: it did not go */
    LIMITER_ASK_KINDS
};

/* One shared bucket to ask Redis about with lua/bucket.lua. */
struct limiter_shared_ask {
    enum limiter_ask_kind kind;
    double want;            /* tokens; 0: a request's ask without a lease */
    uint64_t sent_us;       /* when asked (local clock): a lease's deadline counts from it */
    uint64_t rule_id;       /* for limiter_shared_done */
    char key[256];          /* the bucket key (limiter_shared_key: it always fits) */
    char rule_name[128];    /* rule names are shorter (RULES_NAME_MAX) */
    double rate_per_s;
    double burst;
    uint64_t max_wait_us;   /* 0 for reject rules */
    int dryrun;
    char subject[LIMITER_SUBJECT_MAX]; /* who asked, for the rule's report */
};

/* A local rule a request took a token from: given back with
 * limiter_give_back when the request does not go after all. */
struct limiter_taken {
    uint64_t rule_id;
    int delayed;            /* counted as delayed, else as admitted */
    int leased;             /* a shared rule's token from this sluice's lease */
};

/* The concurrency slots of one request (rules with max_inflight or
 * max_blocked): see limiter_slots_take. */
struct limiter_slots;

/* What limiter_admit decided. Every matching rule is in it, however many:
 * ASK and TAKEN grow as needed (to the client's rule count) and are kept
 * for the next decision made into the same struct. Start it zeroed, and
 * free its arrays with limiter_decision_free. */
struct limiter_decision {
    enum limiter_verdict verdict;
    uint64_t wait_us;       /* DELAY: how long; REJECT: retry after */
    char rule_name[128];    /* REJECT: the rule */
    int ask_count;          /* ASK: the shared buckets to ask, in ask[] */
    struct limiter_shared_ask *ask;
    int taken_count;        /* PASS, DELAY, ASK: the local rules that gave a token */
    struct limiter_taken *taken;
    int ask_cap, taken_cap; /* entries allocated */
    /* PASS, DELAY, ASK: the request's concurrency slots, not yet taken;
     * NULL when no rule limits its concurrency. The caller takes them
     * (sets this to NULL) and frees them with limiter_slots_free. */
    struct limiter_slots *slots;
};

void limiter_decision_free(struct limiter_decision *d);

/* Load PATH (NULL: no rules) as the live set. Rules whose name and
 * parameters are unchanged keep their buckets and counters. On any error
 * the live set stays as it was, every error is in ERRS, and -1 returns. */
int limiter_load(const char *path, struct errlist *errs);

/* limiter_load in two halves, for a reload that applies several files or
 * none: read PATH (NULL: no rules) into *OUT without touching the live
 * set; 0, or -1 with every error in ERRS. Then limiter_commit(*OUT) makes
 * it the live set (taking it), or rules_free(*OUT) drops it. */
struct rule_set;
int limiter_prepare(const char *path, struct rule_set **out, struct errlist *errs);
void limiter_commit(struct rule_set *rs);

/* Non-zero when any rule is loaded (else every request passes). */
int limiter_active(void);

/* 1 when, for certain, no rule applies to this request of the client LC:
 * the common case, told apart by a few word operations before any bucket
 * or identity is looked at, and remembered in LC by command and key's
 * first byte, so a repeat costs one compare. 0 means "ask limiter_admit"
 * (it may still pass): a new client, rules reloaded, a keyed rule that
 * may match. */
int limiter_quick_pass(struct limiter_client *lc, const struct command *cmd,
                       const struct sv *argv, int argc);

/* Decide for one request of the client *LC (created on first use; free
 * with limiter_client_free) into OUT (zeroed, or used before: see struct
 * limiter_decision). Fast when no rule can match the client.
 * NOW_US: a monotonic clock in microseconds, or 0 to have it read only
 * when a local bucket is looked at (server_pass_now_us). */
void limiter_admit(struct limiter_client **lc, const struct limiter_identity *who,
                   const struct command *cmd, const struct sv *argv, int argc,
                   uint64_t now_us, struct limiter_decision *out);

/* How the limiter sends what it asks of Redis on its own (refills and
 * returns of leases): set once by the proxy (throttle_init); the answer
 * comes back through limiter_shared_done. Without it, no lease is
 * refilled or given back (unit tests). */
typedef void limiter_send_fn(const struct limiter_shared_ask *ask);
void limiter_set_send(limiter_send_fn *send);

/* What Redis said for ASK (allowed, wait_us, and GRANTED tokens: 1 for
 * a request's ask without a lease, more for a lease), or -1 for allowed
 * when it could not be asked (a request then passes: fail open). */
void limiter_shared_done(const struct limiter_shared_ask *ask, int allowed, uint64_t wait_us,
                         double granted);

/* A message about ASK is being sent to Redis: counted by rule and kind. */
void limiter_shared_sent(const struct limiter_shared_ask *ask);

/* Give every leased token back to Redis (shutdown: before the backends
 * go; what is not back in time is lost to the bucket, as a killed
 * sluice's). Returns how many. */
double limiter_return_leases(void);

/* A request that took tokens did not go: a shared rule refused it, or its
 * client left while it waited. Give the N tokens in TAKEN back to the
 * buckets of the client LC (may be NULL) / WHO and count them neither
 * admitted nor delayed. Rules reloaded away meanwhile are skipped. */
void limiter_give_back(struct limiter_client *lc, const struct limiter_identity *who,
                       const struct limiter_taken *taken, int n);

/* The same for a shared rule's token, once Redis has it back (ASK was
 * answered with WAIT_US); only the counters live here. */
void limiter_shared_given_back(const struct limiter_shared_ask *ask, uint64_t wait_us);

enum limiter_slots_verdict {
    LIMITER_SLOTS_HELD,     /* every slot is held: the request may go */
    LIMITER_SLOTS_WAIT,     /* a delay rule's gate is full: wait, and take again */
    LIMITER_SLOTS_REJECT,   /* a reject rule's gate is full (its name in RULE) */
};

/* Take the slots S still needs, in rule order, for a request of WHO: a
 * slot already held is kept, also when another is refused or must wait.
 * QUEUED: S waits already, and is taken again in its queue's order; a
 * newcomer never goes ahead of requests waiting at the same gate. A
 * dry-run rule's slot is always taken, counted as it would have been
 * limited. RULE (SIZE bytes) gets the refusing rule's name. */
enum limiter_slots_verdict limiter_slots_take(struct limiter_slots *s, int queued,
                                              const struct limiter_identity *who, char *rule,
                                              size_t size);

/* The request of S was answered after REDIS_US of Redis's time, with
 * BYTES of request and reply: each cost rule's bucket of S is charged
 * that (once; before limiter_slots_free). */
void limiter_slots_charge(struct limiter_slots *s, uint64_t redis_us, uint64_t bytes);

/* The request of S left Redis (answered, failed, or never sent): its
 * slots go back and S is freed (NULL is fine). Returns 1 when a gate
 * with waiting requests got a slot back (take theirs again). */
int limiter_slots_free(struct limiter_slots *s);

/* The client's ip, user or name changed: match its rules again. */
void limiter_client_changed(struct limiter_client *lc);
void limiter_client_free(struct limiter_client *lc);

/* Drop per-ip/user/name buckets that are full again; give back leased
 * tokens whose deadline passed, and drop idle leases. */
void limiter_cron(uint64_t now_us);

/* PROXY RULES: an array, one entry per rule, of "name", counters... */
void limiter_write_rules(struct evbuffer *out);
/* Totals for PROXY INFO ("rules_*:" lines). */
void limiter_write_info(struct evbuffer *out);

#endif
