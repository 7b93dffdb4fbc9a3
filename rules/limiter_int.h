/* limiter_int.h - what limiter.c and limiter_lease.c share: the state a
 * rule keeps, one request's pass over its rules, and the functions each
 * lends the other. Private to rules/limiter*.c; others use limiter.h. */
#ifndef SLUICE_LIMITER_INT_H
#define SLUICE_LIMITER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "bucket.h"
#include "lease.h"
#include "limiter.h"
#include "rules.h"

#define LIMITER_KEYED_CHAINS 256
/* A rule reports who it hits at most this often (limiter_report). */
#define LIMITER_REPORT_EVERY_US 10000000

struct keyed_bucket;
struct limiter_gate;
struct metrics_hist;
struct topk;

/* What a rule keeps while it lives, carried over a reload when the rule
 * is unchanged. */
struct rule_state {
    uint64_t id;
    const struct rule *rule;          /* in the live set */
    uint64_t matched, admitted, rejected, delayed, dryrun_hits, fail_open;
    struct bucket bucket;             /* per = rule */
    struct keyed_bucket *keyed[LIMITER_KEYED_CHAINS];
    size_t keyed_count;               /* buckets in keyed[] */
    /* sluice_ratelimit_decisions_total by enum limiter_metric, and
     * sluice_ratelimit_delay_seconds: series of the rule's name, which
     * count on over reloads (never taken back, unlike the counters above). */
    uint64_t *metric[4];
    struct metrics_hist *metric_delay;
    /* scope = shared: tokens leased from Redis and given back (PROXY
     * RULES), the lease of per = rule, the leases of other pers by key,
     * and the metrics of both (by kind: leased, returned; and the calls
     * by enum limiter_ask_kind). */
    uint64_t leased, returned;
    struct lease lease;
    struct lease_table leases;
    uint64_t *metric_lease[2];
    uint64_t *metric_calls[LIMITER_ASK_KINDS];
    /* Since its last report (limiter_report): what it did or, dry-run,
     * would have done, and to whom. */
    uint64_t report_rejected, report_delayed;
    uint64_t report_start_us, last_report_us;
    struct topk *report_subjects;     /* made at its first hit */
    /* max_inflight, max_blocked (limiter_slots.c): a gate per subject,
     * the slots held now by kind (in flight, blocked), and how many
     * requests had to wait for one. */
    struct limiter_gate *gates[LIMITER_KEYED_CHAINS];
    long held_now[2];
    uint64_t slot_waits;
    /* cost = redis_time / bytes: what its requests were charged (us or
     * bytes), and sluice_ratelimit_cost_total's series. */
    uint64_t charged;
    uint64_t *metric_cost;
};

enum limiter_metric { LIMITER_ADMITTED, LIMITER_REJECTED, LIMITER_DELAYED, LIMITER_DRYRUN };

/* A local enforce rule a request matches, and what its bucket says. */
struct limiter_match {
    struct rule_state *st;
    struct bucket *bucket;            /* NULL for a shared rule's lease */
    uint64_t wait_us;
    struct lease *lease;              /* a shared rule's: a token of it, or its refusal */
    int cost;                         /* cost = redis_time / bytes: checked, charged later */
};

/* What one request does to the rule of entry E, which it matches: a
 * question for Redis (shared), a dry-run count, or a candidate in M. M
 * (limiter_matches) and OUT's arrays have room for every rule of the
 * client (limiter_decision_reserve). */
struct limiter_pass {
    const struct limiter_identity *who;
    uint64_t now_us;                  /* 0 until first needed */
    struct limiter_match *m;
    int n;
    struct limiter_decision *out;
    int room;                         /* the client's rules: most slots a request takes */
    int blocking;                     /* the command blocks (CMD_BLOCKING): max_blocked */
};

/* limiter_report.c (called by both files below) */
/* Count one decision of KIND of the rule ST; a delay of WAIT_US. */
void limiter_metric(struct rule_state *st, enum limiter_metric kind, uint64_t wait_us);
/* Find the metric series of ST (a new state). */
void limiter_metric_open(struct rule_state *st);
/* WHO as a rule's report names it. */
void limiter_subject(const struct limiter_identity *who, char *out, size_t size);
/* Rule ST rejected (DELAYED 0) or delayed a request of WHO. */
void limiter_hit_who(struct rule_state *st, const struct limiter_identity *who, int delayed);
/* A dry-run rule ST would have limited SUBJECT (waiting WAIT_US). */
void limiter_dryrun_hit(struct rule_state *st, const char *subject, uint64_t wait_us);
/* Log what ST did since its last report, and start counting again. */
void limiter_report(struct rule_state *st, uint64_t now_us);
/* Counters of a request's ask about the shared rule ST, answered. */
void limiter_count_answer(struct rule_state *st, const struct limiter_shared_ask *ask,
                          int allowed, uint64_t wait_us);

/* limiter_lease.c (called by limiter.c) */
/* The shared bucket key of rule ST for WHO, in one hash slot per rule. */
void limiter_shared_key(const struct rule_state *st, const struct limiter_identity *who,
                        char *out, size_t size);
/* Redis answered ASK about ST's bucket (ST NULL: reloaded away): the
 * lease takes what was granted beyond the request's own token. */
void limiter_lease_answer(struct rule_state *st, const struct limiter_shared_ask *ask,
                          int allowed, uint64_t wait_us, double granted);
/* ASK about ST's bucket is being sent: counted, and as asked. */
void limiter_lease_sent(struct rule_state *st, const struct limiter_shared_ask *ask);
/* A request meets the shared rule ST: its lease decides when it can,
 * else a question for Redis in P's decision. */
void limiter_apply_shared(struct limiter_pass *p, struct rule_state *st);
/* Ask for a refill of lease L of ST when it is due (lease_refill_want). */
void limiter_lease_refill(struct rule_state *st, struct lease *l, uint64_t now_us);
/* Give back every token ST's leases hold; returns how many. */
double limiter_lease_return_all(struct rule_state *st);
/* Leases of ST: give back what expired, drop the idle ones. */
void limiter_lease_cron(struct rule_state *st, uint64_t now_us);
/* The lease of the shared rule ST for WHO (per = rule: the rule's own;
 * else by bucket key, written to KEY). NULL when memory ran out. */
struct lease *limiter_lease_for(struct rule_state *st, const struct limiter_identity *who,
                                char *key, size_t size);

/* limiter_slots.c (called by limiter.c) */
/* The request of P meets ST, which limits concurrency: a slot of its
 * subject's gate goes into P's decision (taken later). */
void limiter_slots_add(struct limiter_pass *p, struct rule_state *st);
/* The subject of WHO that ST's limit counts, as a gate's (or a cost
 * bucket's) key: "#ID" (per = client), the ip, user or name, or "". */
void limiter_subject_key(const struct rule_state *st, const struct limiter_identity *who,
                         char *out, size_t size);
/* The request of P meets ST, a cost rule: it is charged after its reply. */
void limiter_slots_add_charge(struct limiter_pass *p, struct rule_state *st);
/* The next entry of a cost rule in S from *I on, not yet charged (it is
 * marked charged now): its rule ST (one that is still loaded) and its
 * subject's KEY (limiter_subject_key). 0 when none is left. */
int limiter_slots_next_charge(struct limiter_slots *s, int *i, struct rule_state **st,
                              const char **key);
/* ST goes: its gates live on, with no limit, until their last slot goes. */
void limiter_gates_orphan(struct rule_state *st);

#endif
