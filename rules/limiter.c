/* limiter.c - owns the live rule set, the state kept per rule (counters,
 * buckets) across reloads, and the admission decision for a request.
 *
 *   request -> client's rules (ip/user/name matched once: a bitmap)
 *           AND the command's rules (limiter_cmd_bits, built at load)
 *           -> none left once a fixed key's first byte is checked? pass
 *              (limiter_quick_pass: the common case, a few word operations)
 *           -> keyed rules: first byte of each key, then the globs
 *           -> bucket per client/ip/user/name/rule (shared: ask Redis)
 *           -> every enforce rule has a token? take one from each : refuse
 */
#include "limiter.h"

#include <event2/buffer.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket.h"
#include "commands.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "server.h"
#include "topk.h"

#define LIMITER_KEYED_CHAINS 256
/* A rule reports who it hits at most this often (limiter_report). */
#define LIMITER_REPORT_EVERY_US 10000000
/* Subjects a rule tells apart between two reports: the three it names
 * are among the busiest of them (topk.h). */
#define LIMITER_REPORT_SUBJECTS 16
/* A user or client name longer than this goes into a shared bucket's key
 * as its SHA-256 (limiter_shared_key), so the key always fits. */
#define LIMITER_KEY_IDENTITY_MAX 64

_Static_assert(RULES_NAME_MAX < sizeof(((struct limiter_decision *)0)->rule_name),
               "a rule name fits a decision");
_Static_assert(sizeof("sluice:bucket:{}:client:4294967295:18446744073709551615") + RULES_NAME_MAX <=
                   sizeof(((struct limiter_shared_ask *)0)->key) &&
               sizeof("sluice:bucket:{}:name-sha256:") + RULES_NAME_MAX + 64 <=
                   sizeof(((struct limiter_shared_ask *)0)->key),
               "every shared bucket key fits");

/* A bucket of one ip, user or name, for a rule with per = ip/user/name. */
struct keyed_bucket {
    struct keyed_bucket *next;
    struct bucket bucket;
    char key[];
};

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
};

enum limiter_metric { LIMITER_ADMITTED, LIMITER_REJECTED, LIMITER_DELAYED, LIMITER_DRYRUN };

/* Count one decision of KIND of the rule ST; a delay of WAIT_US. */
static void limiter_metric(struct rule_state *st, enum limiter_metric kind, uint64_t wait_us)
{
    (*st->metric[kind])++;
    if (kind == LIMITER_DELAYED)
        metrics_hist_observe(st->metric_delay, wait_us);
}

static void limiter_metric_open(struct rule_state *st)
{
    static const char *const names[] = {"admitted", "rejected", "delayed", "dryrun"};

    static const char *const calls[LIMITER_ASK_KINDS] = {"ask", "refill", "return", "refund"};

    for (int k = 0; k < 4; k++)
        st->metric[k] = metrics_counter(METRIC_ratelimit_decisions_total, st->rule->name, names[k]);
    st->metric_delay = metrics_hist(METRIC_ratelimit_delay_seconds, st->rule->name, NULL);
    if (st->rule->scope != RULE_SCOPE_SHARED)
        return;
    st->metric_lease[0] = metrics_counter(METRIC_ratelimit_lease_tokens_total, st->rule->name, "leased");
    st->metric_lease[1] = metrics_counter(METRIC_ratelimit_lease_tokens_total, st->rule->name, "returned");
    for (int k = 0; k < LIMITER_ASK_KINDS; k++)
        st->metric_calls[k] = metrics_counter(METRIC_ratelimit_shared_calls_total, st->rule->name, calls[k]);
}

struct limiter_entry {
    uint64_t state_id;
    struct rule_state *state;
    struct bucket bucket;             /* per = client */
};

/* Slots of a client's quick-pass memo (a power of two), and the bit of an
 * entry that says some rule may apply (limiter_memo_key's keys, a 16-bit
 * command id above 9 bits, never set it). */
#define LIMITER_MEMO_SLOTS 8
#define LIMITER_MEMO_ASK (1u << 31)
_Static_assert(sizeof(((struct command *)0)->id) * 8 + 9 < 31, "memo keys stay below LIMITER_MEMO_ASK");

struct limiter_client {
    uint64_t generation;              /* of the set its entries were made for */
    int count;
    struct limiter_entry *entries;    /* the rules its ip/user/name match */
    uint64_t *rule_bits;              /* bit i: rule i is among entries... */
    int *entry_of;                    /* ...at entries[entry_of[i]] */
    /* limiter_quick_pass's recent answers, as limiter_memo_key, with
     * LIMITER_MEMO_ASK when it was "ask limiter_admit": a client mostly
     * repeats a few commands on keys of a few prefixes, and a hit skips
     * the walk over the bitmaps. 0: empty. Cleared with entries. */
    uint32_t memo[LIMITER_MEMO_SLOTS];
};

static struct rule_set *limiter_set;
static struct rule_state **limiter_states;   /* one per rule of limiter_set */
/* Per command id, a bitmap over the rules whose commands condition admits
 * it (limiter_words words each): a request's candidate rules are this AND
 * its client's rule_bits, a couple of word operations. */
static uint64_t *limiter_cmd_bits;
static int limiter_words;
/* The rules with a keys condition, and per first byte of a key the keyed
 * rules whose globs could match such a key (limiter_words words each). */
static uint64_t *limiter_keyed_bits;
static uint64_t *limiter_first_byte_bits;
/* Per command id, where its only key always is, -1 when it has none, 0
 * otherwise (commands_fixed_key): lets limiter_quick_pass filter keyed
 * rules without finding keys. */
static int *limiter_key_pos;
static uint64_t limiter_generation = 1;
static uint64_t limiter_next_state_id = 1;

/* A local enforce rule a request matches, and what its bucket says. */
struct limiter_match {
    struct rule_state *st;
    struct bucket *bucket;            /* NULL for a shared rule's lease */
    uint64_t wait_us;
    struct lease *lease;              /* a shared rule's: a token of it, or its refusal */
};

/* Room for one request's local enforce rules: one per rule of the set,
 * so every matching rule has its place (limiter_apply). */
static struct limiter_match *limiter_matches;

static unsigned limiter_hash(const char *s)
{
    unsigned h = 2166136261u;

    while (*s != '\0')
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % LIMITER_KEYED_CHAINS;
}

static struct bucket *limiter_keyed(struct rule_state *st, const char *key)
{
    struct keyed_bucket **chain = &st->keyed[limiter_hash(key)], *kb;
    size_t len = strlen(key);

    for (kb = *chain; kb != NULL; kb = kb->next) {
        if (strcmp(kb->key, key) == 0)
            return &kb->bucket;
    }
    kb = malloc(sizeof(*kb) + len + 1);
    memcpy(kb->key, key, len + 1);
    bucket_init(&kb->bucket, st->rule->burst);
    kb->next = *chain;
    *chain = kb;
    st->keyed_count++;
    return &kb->bucket;
}

static void limiter_state_free(struct rule_state *st)
{
    for (int i = 0; i < LIMITER_KEYED_CHAINS; i++) {
        while (st->keyed[i] != NULL) {
            struct keyed_bucket *next = st->keyed[i]->next;
            free(st->keyed[i]);
            st->keyed[i] = next;
        }
    }
    lease_table_clear(&st->leases);
    if (st->report_subjects != NULL)
        topk_free(st->report_subjects);
    free(st->report_subjects);
    free(st);
}

int limiter_active(void)
{
    return limiter_words > 0;   /* limiter_index_commands: 0 when no rule */
}

static double limiter_lease_return_all(struct rule_state *st);

/* The state for NEW: the old one of an unchanged rule, else a fresh one. */
static struct rule_state *limiter_carry_over(const struct rule *new_rule, struct rule_state **old,
                                             int old_count)
{
    struct rule_state *st;

    for (int i = 0; i < old_count; i++) {
        if (old[i] != NULL && rules_same_params(old[i]->rule, new_rule)) {
            st = old[i];
            old[i] = NULL;
            st->rule = new_rule;
            return st;
        }
    }
    st = calloc(1, sizeof(*st));
    st->id = limiter_next_state_id++;
    st->rule = new_rule;
    limiter_metric_open(st);
    bucket_init(&st->bucket, new_rule->burst);
    return st;
}

/* Build limiter_cmd_bits for the COUNT rules of the live set. */
static void limiter_index_commands(int count)
{
    int ncmd = commands_count();

    free(limiter_cmd_bits);
    free(limiter_keyed_bits);
    free(limiter_first_byte_bits);
    free(limiter_key_pos);
    free(limiter_matches);
    limiter_cmd_bits = limiter_keyed_bits = limiter_first_byte_bits = NULL;
    limiter_key_pos = NULL;
    limiter_matches = NULL;
    limiter_words = (count + 63) / 64;
    if (count == 0)
        return;
    limiter_matches = calloc((size_t)count, sizeof(*limiter_matches));
    limiter_keyed_bits = calloc((size_t)limiter_words, sizeof(uint64_t));
    limiter_first_byte_bits = calloc(256 * (size_t)limiter_words, sizeof(uint64_t));
    for (int i = 0; i < count; i++) {
        const struct rule *r = limiter_states[i]->rule;
        if (!rules_has_keys(r))
            continue;
        limiter_keyed_bits[i / 64] |= 1ULL << (i % 64);
        for (int c = 0; c < 256; c++) {
            if (rules_key_may_start_with(r, (unsigned char)c))
                limiter_first_byte_bits[(size_t)c * (size_t)limiter_words + (size_t)(i / 64)] |=
                    1ULL << (i % 64);
        }
    }
    limiter_cmd_bits = calloc((size_t)ncmd * (size_t)limiter_words + 1, sizeof(uint64_t));
    limiter_key_pos = calloc((size_t)ncmd + 1, sizeof(int));
    for (int id = 0; id < ncmd; id++) {
        const struct command *cmd = commands_by_id(id);
        uint64_t *bits = &limiter_cmd_bits[(size_t)id * (size_t)limiter_words];
        limiter_key_pos[id] = commands_fixed_key(cmd);
        for (int i = 0; i < count; i++) {
            if (rules_command_allowed(limiter_states[i]->rule, cmd))
                bits[i / 64] |= 1ULL << (i % 64);
        }
    }
}

int limiter_prepare(const char *path, struct rule_set **out, struct errlist *errs)
{
    *out = NULL;
    if (path == NULL)
        return 0;
    *out = rules_load(path, errs);
    return *out != NULL ? 0 : -1;
}

void limiter_commit(struct rule_set *rs)
{
    struct rule_state **states = NULL;
    int old_count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    int count = rs != NULL ? rules_count(rs) : 0;

    states = calloc((size_t)count + 1, sizeof(*states));
    for (int i = 0; i < count; i++)
        states[i] = limiter_carry_over(rules_get(rs, i), limiter_states, old_count);
    for (int i = 0; i < old_count; i++) {
        if (limiter_states[i] == NULL)
            continue;
        limiter_lease_return_all(limiter_states[i]);   /* a rule gone or changed */
        limiter_state_free(limiter_states[i]);
    }
    free(limiter_states);
    rules_free(limiter_set);
    limiter_set = rs;
    limiter_states = states;
    limiter_generation++;
    limiter_index_commands(count);
}

int limiter_load(const char *path, struct errlist *errs)
{
    struct rule_set *rs;

    if (limiter_prepare(path, &rs, errs) != 0)
        return -1;
    limiter_commit(rs);
    return 0;
}

/* Match the client's ip/user/name against every rule again, keeping the
 * per-client buckets of rules that stay. */
static void limiter_client_refresh(struct limiter_client *lc, const struct limiter_identity *who)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    struct limiter_entry *entries = calloc((size_t)count + 1, sizeof(*entries));
    int n = 0;

    free(lc->rule_bits);
    free(lc->entry_of);
    lc->rule_bits = calloc((size_t)limiter_words + 1, sizeof(uint64_t));
    lc->entry_of = calloc((size_t)count + 1, sizeof(int));
    for (int i = 0; i < count; i++) {
        struct rule_state *st = limiter_states[i];
        if (!rules_client_matches(st->rule, who->addr, who->user, who->name))
            continue;
        lc->rule_bits[i / 64] |= 1ULL << (i % 64);
        lc->entry_of[i] = n;
        entries[n].state = st;
        entries[n].state_id = st->id;
        bucket_init(&entries[n].bucket, st->rule->burst);
        for (int j = 0; j < lc->count; j++) {
            if (lc->entries[j].state_id == st->id)
                entries[n].bucket = lc->entries[j].bucket;
        }
        n++;
    }
    free(lc->entries);
    lc->entries = entries;
    lc->count = n;
    memset(lc->memo, 0, sizeof(lc->memo));
    lc->generation = limiter_generation;
}

void limiter_client_changed(struct limiter_client *lc)
{
    if (lc != NULL)
        lc->generation = 0;
}

void limiter_client_free(struct limiter_client *lc)
{
    if (lc == NULL)
        return;
    free(lc->entries);
    free(lc->rule_bits);
    free(lc->entry_of);
    free(lc);
}

static struct bucket *limiter_bucket(struct limiter_entry *e, const struct limiter_identity *who)
{
    struct rule_state *st = e->state;

    switch (st->rule->per) {
    case RULE_PER_CLIENT: return &e->bucket;
    case RULE_PER_IP: return limiter_keyed(st, who->ip != NULL ? who->ip : "");
    case RULE_PER_USER: return limiter_keyed(st, who->user != NULL ? who->user : "default");
    case RULE_PER_NAME: return limiter_keyed(st, who->name != NULL ? who->name : "");
    case RULE_PER_RULE: break;
    }
    return &st->bucket;
}

/* Log at notice what rule ST did since its last report: how many
 * requests it rejected and delayed (dry-run: would have) and the three
 * subjects it hit most; then start counting again. */
static void limiter_report(struct rule_state *st, uint64_t now_us)
{
    const struct topk_entry *top[3];
    char most[3 * (TOPK_SUBJECT_MAX + 32)], subject[TOPK_SUBJECT_MAX + 1];
    size_t used = 0;
    int n = topk_list(st->report_subjects, 0, 1, top, 3);
    uint64_t secs = (now_us - st->report_start_us + 999999) / 1000000;

    most[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = topk_subject(top[i], subject);
        subject[len] = '\0';
        used += (size_t)snprintf(most + used, sizeof(most) - used, "%s%s (%llu)",
                                 i > 0 ? ", " : "", subject,
                                 (unsigned long long)top[i]->requests);
    }
    if (st->rule->mode == RULE_MODE_DRYRUN)
        log_notice("rule %s (dryrun) would have rejected %llu and delayed %llu requests in "
                   "%llu s (%llu so far); most hit: %s", st->rule->name,
                   (unsigned long long)st->report_rejected,
                   (unsigned long long)st->report_delayed, (unsigned long long)(secs ? secs : 1),
                   (unsigned long long)st->dryrun_hits, most);
    else
        log_notice("rule %s rejected %llu and delayed %llu requests in %llu s; most hit: %s",
                   st->rule->name, (unsigned long long)st->report_rejected,
                   (unsigned long long)st->report_delayed, (unsigned long long)(secs ? secs : 1),
                   most);
    st->report_rejected = st->report_delayed = 0;
    st->last_report_us = now_us;
    topk_clear(st->report_subjects);
}

/* Rule ST rejected (DELAYED 0) or delayed a request of SUBJECT ("user=..
 * name=.. addr=.."), or would have in dry-run: count it for the next
 * report, made now when the last one is LIMITER_REPORT_EVERY_US old. */
static void limiter_hit(struct rule_state *st, const char *subject, int delayed)
{
    uint64_t now_us = server_pass_now_us();

    if (st->report_subjects == NULL) {
        st->report_subjects = calloc(1, sizeof(*st->report_subjects));
        if (st->report_subjects != NULL &&
            topk_init(st->report_subjects, LIMITER_REPORT_SUBJECTS) != 0) {
            free(st->report_subjects);
            st->report_subjects = NULL;
        }
        if (st->report_subjects == NULL)
            return;   /* out of memory: the rule's counters still count */
    }
    if (st->report_rejected + st->report_delayed == 0)
        st->report_start_us = now_us;
    st->report_rejected += !delayed;
    st->report_delayed += delayed != 0;
    topk_hit(st->report_subjects, subject, strlen(subject), 0, TOPK_PASSED);
    if (st->last_report_us == 0 || now_us - st->last_report_us >= LIMITER_REPORT_EVERY_US)
        limiter_report(st, now_us);
}

/* WHO as a rule's report names it. */
static void limiter_subject(const struct limiter_identity *who, char *out, size_t size)
{
    snprintf(out, size, "user=%.64s name=%.64s addr=%s", who->user ? who->user : "default",
             who->name ? who->name : "", who->addr_text ? who->addr_text : "");
}

static void limiter_hit_who(struct rule_state *st, const struct limiter_identity *who,
                            int delayed)
{
    char subject[LIMITER_SUBJECT_MAX];

    limiter_subject(who, subject, sizeof(subject));
    limiter_hit(st, subject, delayed);
}

static void limiter_dryrun_hit(struct rule_state *st, const char *subject, uint64_t wait_us)
{
    st->dryrun_hits++;
    limiter_hit(st, subject, st->rule->action == RULE_ACTION_DELAY &&
                                 wait_us <= st->rule->max_delay_us);
}

/* The key of rule R's shared bucket for the user or client name ID, of
 * kind KIND ("user", "name"): ID itself, or when it is long, "KIND-sha256:"
 * and its digest in hex. Never cut short: two names that share a prefix
 * must not share a bucket, and a short name cannot be taken for a digest
 * (its kind is another). */
static void limiter_identity_key(const struct rule *r, const char *kind, const char *id,
                                 char *out, size_t size)
{
    size_t len = strlen(id);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];

    if (len <= LIMITER_KEY_IDENTITY_MAX) {
        snprintf(out, size, "sluice:bucket:{%s}:%s:%s", r->name, kind, id);
        return;
    }
    if (EVP_Digest(id, len, digest, &n, EVP_sha256(), NULL) != 1)
        n = 0;   /* no digest: long names share one bucket, never a short name's */
    for (unsigned int i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    hex[2 * n] = '\0';
    snprintf(out, size, "sluice:bucket:{%s}:%s-sha256:%s", r->name, kind, hex);
}

/* The shared bucket key of rule ST for WHO, in one hash slot per rule. */
static void limiter_shared_key(const struct rule_state *st, const struct limiter_identity *who,
                               char *out, size_t size)
{
    const struct rule *r = st->rule;

    switch (r->per) {
    case RULE_PER_CLIENT:
        snprintf(out, size, "sluice:bucket:{%s}:client:%d:%llu", r->name, (int)getpid(),
                 (unsigned long long)who->client_id);
        break;
    case RULE_PER_IP: snprintf(out, size, "sluice:bucket:{%s}:ip:%s", r->name, who->ip); break;
    case RULE_PER_USER:
        limiter_identity_key(r, "user", who->user ? who->user : "default", out, size);
        break;
    case RULE_PER_NAME: limiter_identity_key(r, "name", who->name ? who->name : "", out, size); break;
    case RULE_PER_RULE: snprintf(out, size, "sluice:bucket:{%s}", r->name); break;
    }
}

static void limiter_reject(struct limiter_decision *out, const struct rule_state *st, uint64_t wait_us)
{
    out->verdict = LIMITER_REJECT;
    out->wait_us = wait_us;
    snprintf(out->rule_name, sizeof(out->rule_name), "%s", st->rule->name);
}

/* Decide over the local enforce rules in M (N of them) for WHO. */
static void limiter_lease_refill(struct rule_state *st, struct lease *l, uint64_t now_us);

static void limiter_decide(struct limiter_match *m, int n, const struct limiter_identity *who,
                           uint64_t now_us, struct limiter_decision *out)
{
    uint64_t delay = 0;

    for (int i = 0; i < n; i++) {
        const struct rule *r = m[i].st->rule;
        int too_long = r->action == RULE_ACTION_REJECT ? m[i].wait_us > 0
                                                       : m[i].wait_us > r->max_delay_us;
        if (too_long) {
            limiter_reject(out, m[i].st, m[i].wait_us);
            m[i].st->rejected++;
            limiter_metric(m[i].st, LIMITER_REJECTED, 0);
            limiter_hit_who(m[i].st, who, 0);
            return;
        }
        if (m[i].wait_us > delay)
            delay = m[i].wait_us;
    }
    /* Every rule admits: each gives a token (delay rules may go into debt,
     * so the next request waits one interval longer), noted in OUT in case
     * the request does not go after all. */
    for (int i = 0; i < n; i++) {
        if (m[i].lease != NULL) {
            lease_take(m[i].lease);   /* it held one: limiter_lease_apply */
            limiter_lease_refill(m[i].st, m[i].lease, now_us);
        } else {
            bucket_take(m[i].bucket);
        }
        if (m[i].wait_us > 0) {
            m[i].st->delayed++;
            limiter_hit_who(m[i].st, who, 1);
        } else
            m[i].st->admitted++;
        limiter_metric(m[i].st, m[i].wait_us > 0 ? LIMITER_DELAYED : LIMITER_ADMITTED, m[i].wait_us);
        out->taken[out->taken_count++] =
            (struct limiter_taken){m[i].st->id, m[i].wait_us > 0, m[i].lease != NULL};
    }
    out->verdict = delay > 0 ? LIMITER_DELAY : LIMITER_PASS;
    out->wait_us = delay;
}

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
};

/* ---- leases of shared buckets (rules/lease.h) ------------------------ */

static limiter_send_fn *limiter_send;

/* What a walk over a rule's leases (lease_table_sweep) needs. */
struct limiter_tick {
    struct rule_state *st;
    uint64_t now_us;
    double returned;
};
/* After a refill could not be sent (no backend), the next waits this long. */
#define LIMITER_LEASE_RETRY_US 100000ULL

void limiter_set_send(limiter_send_fn *send)
{
    limiter_send = send;
}

/* Fill A, a message about the shared bucket KEY of rule ST, of KIND. */
static void limiter_ask_fill(struct limiter_shared_ask *a, const struct rule_state *st,
                             const char *key, enum limiter_ask_kind kind, uint64_t now_us)
{
    const struct rule *r = st->rule;

    a->kind = kind;
    a->want = 0;
    a->sent_us = now_us;
    a->rule_id = st->id;
    snprintf(a->key, sizeof(a->key), "%s", key);
    snprintf(a->rule_name, sizeof(a->rule_name), "%s", r->name);
    a->rate_per_s = r->rate_per_s;
    a->burst = r->burst;
    a->max_wait_us = kind == LIMITER_ASK_REQUEST && r->action == RULE_ACTION_DELAY ?
                         r->max_delay_us : 0;
    a->dryrun = r->mode == RULE_MODE_DRYRUN;
    a->subject[0] = '\0';
}

/* Ask Redis for WANT tokens for lease L of ST (REFILL), or give WANT back
 * (RETURN). A refill counts as asked before it is sent: a send that fails
 * answers at once (limiter_shared_done). */
static void limiter_lease_send(struct rule_state *st, struct lease *l, enum limiter_ask_kind kind,
                               double want, uint64_t now_us)
{
    struct limiter_shared_ask a;
    char key[sizeof(a.key)];

    if (limiter_send == NULL || want < 1)
        return;
    if (l->key != NULL)
        snprintf(key, sizeof(key), "%s", l->key);
    else
        snprintf(key, sizeof(key), "sluice:bucket:{%s}", st->rule->name);
    limiter_ask_fill(&a, st, key, kind, now_us);
    if (kind == LIMITER_ASK_RETURN) {
        /* More than burst is no use: the bucket never holds more. */
        a.want = want < st->rule->burst ? want : st->rule->burst;
        st->returned += (uint64_t)want;
        *st->metric_lease[1] += (uint64_t)want;
    } else {
        a.want = want;
        l->refilling = 1;
        l->asked += want;
    }
    limiter_send(&a);
}

/* Give back what of lease L of ST is past its deadline. */
static void limiter_lease_expire(struct rule_state *st, struct lease *l, uint64_t now_us)
{
    double dropped = lease_expire(l, now_us);

    if (dropped > 0)
        limiter_lease_send(st, l, LIMITER_ASK_RETURN, dropped, now_us);
}

static void limiter_lease_refill(struct rule_state *st, struct lease *l, uint64_t now_us)
{
    double want = lease_refill_want(l, now_us, st->rule->lease_us, st->rule->lease_max);

    if (want >= 1)
        limiter_lease_send(st, l, LIMITER_ASK_REFILL, want, now_us);
}

static int limiter_lease_return_one(const char *key, struct lease *l, void *ctx)
{
    struct limiter_tick *t = ctx;
    double n = lease_drain(l);

    (void)key;
    t->returned += n;
    limiter_lease_send(t->st, l, LIMITER_ASK_RETURN, n, t->now_us);
    return 0;
}

/* Give back every token ST's leases hold; returns how many. */
static double limiter_lease_return_all(struct rule_state *st)
{
    struct limiter_tick t = {st, server_pass_now_us(), 0};

    if (st->rule->scope != RULE_SCOPE_SHARED)
        return 0;
    limiter_lease_return_one(NULL, &st->lease, &t);
    lease_table_sweep(&st->leases, limiter_lease_return_one, &t);
    return t.returned;
}

double limiter_return_leases(void)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    double returned = 0;

    for (int i = 0; i < count; i++)
        returned += limiter_lease_return_all(limiter_states[i]);
    return returned;
}

/* The lease of the shared rule ST for WHO: the rule's own (per = rule),
 * else the one of its bucket key, written to KEY. NULL when memory ran
 * out (the request is then asked about as without leases). */
static struct lease *limiter_lease_for(struct rule_state *st, const struct limiter_identity *who,
                                       char *key, size_t size)
{
    if (st->rule->per == RULE_PER_RULE)
        return &st->lease;
    limiter_shared_key(st, who, key, size);
    return lease_table_get(&st->leases, key);
}

/* The lease a message ASK of ST was about, or NULL (dropped, or none). */
static struct lease *limiter_lease_of_ask(struct rule_state *st,
                                          const struct limiter_shared_ask *ask)
{
    if (ask->want <= 0 || st->rule->lease_us == 0)
        return NULL;
    if (st->rule->per == RULE_PER_RULE)
        return &st->lease;
    return lease_table_find(&st->leases, ask->key);
}

/* A request meets shared rule ST whose lease L holds a token, or was
 * lately refused by Redis (reject rules): decided here, without Redis.
 * Returns 0 when Redis must be asked. */
static int limiter_lease_apply(struct limiter_pass *p, struct rule_state *st, struct lease *l)
{
    const struct rule *r = st->rule;
    char subject[LIMITER_SUBJECT_MAX];

    lease_note(l, p->now_us);
    limiter_lease_expire(st, l, p->now_us);
    if (lease_held(l) >= 1 && r->mode == RULE_MODE_DRYRUN) {
        lease_take(l);   /* it models the limit as if enforced */
        st->admitted++;
        limiter_metric(st, LIMITER_ADMITTED, 0);
        limiter_lease_refill(st, l, p->now_us);
        return 1;
    }
    if (lease_held(l) >= 1) {
        p->m[p->n++] = (struct limiter_match){st, NULL, 0, l};
        return 1;
    }
    /* A delay rule may still reserve a token Redis does not have yet. */
    if (r->action != RULE_ACTION_REJECT || p->now_us >= l->refused_until_us)
        return 0;
    if (r->mode == RULE_MODE_DRYRUN) {
        limiter_subject(p->who, subject, sizeof(subject));
        limiter_dryrun_hit(st, subject, UINT64_MAX);
        limiter_metric(st, LIMITER_DRYRUN, 0);
        return 1;
    }
    p->m[p->n++] = (struct limiter_match){st, NULL, l->refused_until_us - p->now_us, l};
    return 1;
}

/* A request meets the shared rule ST: its lease decides when it can,
 * else a question for Redis, which also asks for the lease's tokens. */
static void limiter_apply_shared(struct limiter_pass *p, struct rule_state *st)
{
    const struct rule *r = st->rule;
    struct limiter_shared_ask *a;
    char key[sizeof(a->key)];
    struct lease *l = NULL;

    key[0] = '\0';
    if (p->now_us == 0)
        p->now_us = server_pass_now_us();
    if (r->lease_us > 0) {
        l = limiter_lease_for(st, p->who, key, sizeof(key));
        if (l != NULL && limiter_lease_apply(p, st, l))
            return;
    }
    if (key[0] == '\0')
        limiter_shared_key(st, p->who, key, sizeof(key));
    a = &p->out->ask[p->out->ask_count++];
    limiter_ask_fill(a, st, key, LIMITER_ASK_REQUEST, p->now_us);
    if (l != NULL)
        a->want = lease_ask_want(l, p->now_us, r->lease_us, r->lease_max);
    limiter_subject(p->who, a->subject, sizeof(a->subject));
}

static void limiter_apply(struct limiter_pass *p, struct limiter_entry *e)
{
    struct rule_state *st = e->state;
    const struct rule *r = st->rule;

    st->matched++;
    if (r->scope == RULE_SCOPE_SHARED) {
        limiter_apply_shared(p, st);
        return;
    }
    if (p->now_us == 0)
        p->now_us = server_pass_now_us();
    struct bucket *b = limiter_bucket(e, p->who);
    uint64_t wait = bucket_wait_us(b, r->rate_per_s, r->burst, p->now_us);
    if (r->mode == RULE_MODE_DRYRUN) {
        int would = r->action == RULE_ACTION_REJECT ? wait > 0 : wait > r->max_delay_us;
        if (wait > 0) {
            char subject[LIMITER_SUBJECT_MAX];
            limiter_subject(p->who, subject, sizeof(subject));
            limiter_dryrun_hit(st, subject, wait);
        }
        limiter_metric(st, wait > 0 ? LIMITER_DRYRUN : LIMITER_ADMITTED, 0);
        if (!would)
            bucket_take(b);   /* it models the limit as if enforced */
        return;
    }
    p->m[p->n++] = (struct limiter_match){st, b, wait, NULL};
}

/* Of the keyed rules in word W, those one of the request's keys (POS, N)
 * might match by its first byte; every rule without keys passes. */
static uint64_t limiter_key_filter(int w, const struct sv *argv, const int *pos, int n)
{
    uint64_t may = ~limiter_keyed_bits[w];

    for (int k = 0; k < n; k++) {
        const struct sv *key = &argv[pos[k]];
        if (key->len == 0)
            may |= limiter_keyed_bits[w];
        else
            may |= limiter_first_byte_bits[(size_t)(unsigned char)key->ptr[0] *
                                           (size_t)limiter_words + (size_t)w];
    }
    return may;
}

/* The positions of the request's keys into *POS (16 of room; more are
 * allocated there when ARGC is larger). Returns their count, or -2 when
 * memory ran out: then no key filter is known, and every keyed rule
 * applies rather than one be skipped. */
static int limiter_find_keys(const struct command *cmd, const struct sv *argv, int argc, int **pos)
{
    if (argc > 16) {
        int *room = malloc(sizeof(*room) * (size_t)argc);
        if (room == NULL)
            return -2;
        *pos = room;
    }
    return commands_keys(cmd, argc, argv, *pos, argc > 16 ? argc : 16);
}

/* The client's rules that CMD (known to the table) meets: the candidates
 * are the client's rules AND the command's, then for keyed rules the
 * first-byte filter and the globs, with the request's keys found once. */
static void limiter_scan_known(struct limiter_pass *p, struct limiter_client *lc,
                               const struct command *cmd, const struct sv *argv, int argc)
{
    const uint64_t *cmd_bits = &limiter_cmd_bits[(size_t)cmd->id * (size_t)limiter_words];
    int on_stack[16], *pos = on_stack, nkeys = -1;

    for (int w = 0; w < limiter_words; w++) {
        uint64_t bits = lc->rule_bits[w] & cmd_bits[w];
        if ((bits & limiter_keyed_bits[w]) != 0) {
            if (nkeys == -1)
                nkeys = limiter_find_keys(cmd, argv, argc, &pos);
            if (nkeys >= 0)
                bits &= limiter_key_filter(w, argv, pos, nkeys);
        }
        while (bits != 0) {
            int i = w * 64 + __builtin_ctzll(bits);
            struct limiter_entry *e = &lc->entries[lc->entry_of[i]];
            bits &= bits - 1;
            if (nkeys >= 0 && (limiter_keyed_bits[w] & (1ULL << (i % 64))) &&
                !rules_keys_match(e->state->rule, argv, pos, nkeys))
                continue;
            limiter_apply(p, e);
        }
    }
    if (pos != on_stack)
        free(pos);
}

/* What limiter_quick_pass's answer for CMD can depend on besides the
 * client: the first byte of the key at the command's fixed place, or that
 * there is none there (256) or it is empty (257). Never 0. */
static uint32_t limiter_memo_key(const struct command *cmd, int kp, const struct sv *argv, int argc)
{
    uint32_t what;

    if (kp <= 0 || kp >= argc)
        what = 256;   /* kp == 0: the answer does not depend on the keys */
    else if (argv[kp].len == 0)
        what = 257;
    else
        what = (unsigned char)argv[kp].ptr[0];
    return ((uint32_t)cmd->id << 9 | what) + 1;
}

/* The walk over the bitmaps behind limiter_quick_pass: 1 when no rule
 * of the client LC can apply to CMD with the key at KP. Out of line: the
 * memo answers most requests, and they need not pay for its registers. */
static __attribute__((noinline)) int
limiter_no_rule_applies(const struct limiter_client *lc, const struct command *cmd, int kp,
                        const struct sv *argv, int argc)
{
    const uint64_t *cmd_bits = &limiter_cmd_bits[(size_t)cmd->id * (size_t)limiter_words];
    int nkeys = kp > 0 && kp < argc ? 1 : 0;   /* kp < 0 or bad arity: no key */

    for (int w = 0; w < limiter_words; w++) {
        uint64_t bits = lc->rule_bits[w] & cmd_bits[w];
        if ((bits & limiter_keyed_bits[w]) != 0) {
            if (kp == 0)
                return 0;   /* keys found otherwise: the full scan decides */
            bits &= limiter_key_filter(w, argv, &kp, nkeys);
        }
        if (bits != 0)
            return 0;
    }
    return 1;
}

int limiter_quick_pass(struct limiter_client *lc, const struct command *cmd,
                       const struct sv *argv, int argc)
{
    uint32_t key, *slot;
    int kp;

    if (lc == NULL || lc->generation != limiter_generation || cmd == NULL)
        return 0;
    if (lc->count == 0)
        return 1;
    kp = limiter_key_pos[cmd->id];
    key = limiter_memo_key(cmd, kp, argv, argc);
    slot = &lc->memo[(key ^ key >> 9) & (LIMITER_MEMO_SLOTS - 1)];
    if ((*slot & ~LIMITER_MEMO_ASK) == key)
        return !(*slot & LIMITER_MEMO_ASK);
    if (!limiter_no_rule_applies(lc, cmd, kp, argv, argc)) {
        *slot = key | LIMITER_MEMO_ASK;
        return 0;
    }
    *slot = key;
    return 1;
}

void limiter_decision_free(struct limiter_decision *d)
{
    free(d->ask);
    free(d->taken);
    d->ask = NULL;
    d->taken = NULL;
    d->ask_cap = d->taken_cap = d->ask_count = d->taken_count = 0;
}

/* Room in D for N shared questions and N tokens taken. Returns 0, or -1
 * when memory ran out (D keeps what it had). */
static int limiter_decision_reserve(struct limiter_decision *d, int n)
{
    if (d->ask_cap < n) {
        struct limiter_shared_ask *ask = realloc(d->ask, sizeof(*ask) * (size_t)n);
        if (ask == NULL)
            return -1;
        d->ask = ask;
        d->ask_cap = n;
    }
    if (d->taken_cap < n) {
        struct limiter_taken *taken = realloc(d->taken, sizeof(*taken) * (size_t)n);
        if (taken == NULL)
            return -1;
        d->taken = taken;
        d->taken_cap = n;
    }
    return 0;
}

void limiter_admit(struct limiter_client **lcp, const struct limiter_identity *who,
                   const struct command *cmd, const struct sv *argv, int argc,
                   uint64_t now_us, struct limiter_decision *out)
{
    struct limiter_client *lc = *lcp;
    struct limiter_pass p;

    p.who = who;
    p.now_us = now_us;
    p.m = limiter_matches;
    p.n = 0;
    p.out = out;

    out->verdict = LIMITER_PASS;
    out->wait_us = 0;
    out->ask_count = 0;
    out->taken_count = 0;
    if (limiter_set == NULL)
        return;
    if (lc == NULL)
        lc = *lcp = calloc(1, sizeof(*lc));
    if (lc->generation != limiter_generation)
        limiter_client_refresh(lc, who);
    if (lc->count == 0)
        return;
    /* Each of the client's rules may match: room for all of them. Without
     * it the request is refused, as no rule may be skipped. */
    if (limiter_decision_reserve(out, lc->count) != 0) {
        out->verdict = LIMITER_REJECT;
        out->wait_us = 1000;
        snprintf(out->rule_name, sizeof(out->rule_name), "(sluice out of memory)");
        return;
    }
    if (cmd != NULL) {
        limiter_scan_known(&p, lc, cmd, argv, argc);
    } else {
        /* LOCK verbs and commands the table does not know: rare, by rule. */
        for (int i = 0; i < lc->count; i++) {
            if (rules_command_matches(lc->entries[i].state->rule, NULL, argv, argc))
                limiter_apply(&p, &lc->entries[i]);
        }
    }
    limiter_decide(p.m, p.n, who, p.now_us, out);
    if (out->verdict != LIMITER_REJECT && out->ask_count > 0)
        out->verdict = LIMITER_ASK;
    else
        out->ask_count = 0;
}

static struct rule_state *limiter_state_by_id(uint64_t id)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;

    for (int i = 0; i < count; i++) {
        if (limiter_states[i]->id == id)
            return limiter_states[i];
    }
    return NULL;
}

/* A shared rule ST rejected (DELAYED 0) or delayed a request of SUBJECT. */
static void limiter_count_shared(struct rule_state *st, const char *subject, int delayed)
{
    if (delayed)
        st->delayed++;
    else
        st->rejected++;
    limiter_hit(st, subject, delayed);
}

/* Counters of a request's ask about the shared rule ST, answered. */
static void limiter_count_answer(struct rule_state *st, const struct limiter_shared_ask *ask,
                                 int allowed, uint64_t wait_us)
{
    if (allowed < 0) {
        st->fail_open++;
        limiter_metric(st, LIMITER_ADMITTED, 0);   /* it passes */
    } else if (ask->dryrun && (!allowed || wait_us > 0)) {
        limiter_dryrun_hit(st, ask->subject, !allowed ? UINT64_MAX : wait_us);
        limiter_metric(st, LIMITER_DRYRUN, 0);
    } else if (!allowed) {
        limiter_count_shared(st, ask->subject, 0);
        limiter_metric(st, LIMITER_REJECTED, 0);
    } else if (wait_us > 0) {
        limiter_count_shared(st, ask->subject, 1);
        limiter_metric(st, LIMITER_DELAYED, wait_us);
    } else {
        st->admitted++;
        limiter_metric(st, LIMITER_ADMITTED, 0);
    }
}

/* EXTRA tokens Redis granted for the lease L of ST (NULL: reloaded away,
 * or dropped) in answer to ASK: held, or given back at once when there
 * is no lease to hold them. */
static void limiter_lease_granted(struct rule_state *st, struct lease *l,
                                  const struct limiter_shared_ask *ask, double extra)
{
    struct limiter_shared_ask back = *ask;

    if (extra < 1)
        return;
    if (st != NULL && l != NULL) {
        lease_add(l, extra, ask->sent_us);
        st->leased += (uint64_t)extra;
        *st->metric_lease[0] += (uint64_t)extra;
        return;
    }
    back.kind = LIMITER_ASK_RETURN;
    back.want = extra < ask->burst ? extra : ask->burst;
    if (limiter_send != NULL)
        limiter_send(&back);
}

void limiter_shared_done(const struct limiter_shared_ask *ask, int allowed, uint64_t wait_us,
                         double granted)
{
    struct rule_state *st = limiter_state_by_id(ask->rule_id);
    struct lease *l = st != NULL ? limiter_lease_of_ask(st, ask) : NULL;
    double extra;

    if (ask->kind != LIMITER_ASK_REQUEST && ask->kind != LIMITER_ASK_REFILL)
        return;
    if (l != NULL) {
        l->asked = l->asked > ask->want ? l->asked - ask->want : 0;
        if (ask->kind == LIMITER_ASK_REFILL)
            l->refilling = 0;
    }
    if (ask->kind == LIMITER_ASK_REFILL)
        extra = allowed > 0 ? granted : 0;
    else   /* the request takes one; a reserved token (wait) is its alone */
        extra = allowed > 0 && wait_us == 0 && granted > 1 ? granted - 1 : 0;
    if (ask->kind == LIMITER_ASK_REQUEST && st != NULL)
        limiter_count_answer(st, ask, allowed, wait_us);
    limiter_lease_granted(st, l, ask, extra);
    if (l == NULL)
        return;
    if (allowed == 0)
        l->refused_until_us = ask->sent_us + wait_us;
    else if (allowed < 0)   /* fail open: the requests pass, refills wait a little */
        l->refill_after_us = server_pass_now_us() + LIMITER_LEASE_RETRY_US;
    limiter_lease_refill(st, l, server_pass_now_us());
}

void limiter_shared_sent(const struct limiter_shared_ask *ask)
{
    struct rule_state *st = limiter_state_by_id(ask->rule_id);
    struct lease *l;

    if (st == NULL || st->rule->scope != RULE_SCOPE_SHARED)
        return;
    (*st->metric_calls[ask->kind])++;
    /* A refill counted itself (limiter_lease_send). */
    if (ask->kind == LIMITER_ASK_REQUEST && (l = limiter_lease_of_ask(st, ask)) != NULL)
        l->asked += ask->want;
}

/* Take back the count a given-back token had made. */
static void limiter_uncount(struct rule_state *st, int delayed)
{
    uint64_t *counter = delayed ? &st->delayed : &st->admitted;

    if (*counter > 0)
        (*counter)--;
}

/* The bucket of the client LC / WHO for the rule ST: NULL when it is a
 * per = client bucket LC does not have. Creates a missing keyed bucket. */
static struct bucket *limiter_bucket_of(struct rule_state *st, struct limiter_client *lc,
                                        const struct limiter_identity *who)
{
    if (st->rule->per != RULE_PER_CLIENT) {
        struct limiter_entry any = {.state_id = st->id, .state = st};
        return limiter_bucket(&any, who);
    }
    for (int i = 0; lc != NULL && i < lc->count; i++) {
        if (lc->entries[i].state_id == st->id)
            return &lc->entries[i].bucket;
    }
    return NULL;
}

void limiter_give_back(struct limiter_client *lc, const struct limiter_identity *who,
                       const struct limiter_taken *taken, int n)
{
    for (int i = 0; i < n; i++) {
        struct rule_state *st = limiter_state_by_id(taken[i].rule_id);
        struct bucket *b;

        if (st == NULL)
            continue;   /* reloaded away meanwhile */
        limiter_uncount(st, taken[i].delayed);
        if (taken[i].leased) {
            char key[sizeof(((struct limiter_shared_ask *)0)->key)];
            struct lease *l = limiter_lease_for(st, who, key, sizeof(key));
            if (l != NULL)
                lease_put_back(l);
            continue;
        }
        b = limiter_bucket_of(st, lc, who);
        if (b != NULL)
            bucket_refund(b, st->rule->burst);
    }
}

void limiter_shared_given_back(const struct limiter_shared_ask *ask, uint64_t wait_us)
{
    struct rule_state *st = limiter_state_by_id(ask->rule_id);

    if (st != NULL)
        limiter_uncount(st, wait_us > 0);
}

static int limiter_lease_tick(const char *key, struct lease *l, void *ctx)
{
    struct limiter_tick *t = ctx;

    (void)key;
    limiter_lease_expire(t->st, l, t->now_us);
    return lease_idle(l, t->now_us);
}

/* Leases of ST: give back what expired, drop the idle ones. */
static void limiter_lease_cron(struct rule_state *st, uint64_t now_us)
{
    struct limiter_tick t = {st, now_us, 0};

    if (st->rule->scope != RULE_SCOPE_SHARED)
        return;
    limiter_lease_expire(st, &st->lease, now_us);
    lease_table_sweep(&st->leases, limiter_lease_tick, &t);
}

void limiter_cron(uint64_t now_us)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;

    for (int i = 0; i < count; i++) {
        struct rule_state *st = limiter_states[i];
        limiter_lease_cron(st, now_us);
        /* What a rule did since its last report is told once that report
         * is LIMITER_REPORT_EVERY_US old, even when no request comes. */
        if (st->report_rejected + st->report_delayed > 0 &&
            now_us - st->last_report_us >= LIMITER_REPORT_EVERY_US)
            limiter_report(st, now_us);
        if (st->keyed_count == 0)
            continue;
        for (int c = 0; c < LIMITER_KEYED_CHAINS; c++) {
            struct keyed_bucket **p = &st->keyed[c];
            while (*p != NULL) {
                struct keyed_bucket *kb = *p;
                if (bucket_idle(&kb->bucket, st->rule->rate_per_s, st->rule->burst, now_us)) {
                    *p = kb->next;
                    free(kb);
                    st->keyed_count--;
                } else {
                    p = &kb->next;
                }
            }
        }
    }
}

static const char *const limiter_counter_names[] = {
    "matched", "admitted", "rejected", "delayed", "dryrun_hits", "fail_open", "leased", "returned",
};
#define LIMITER_COUNTERS (int)(sizeof(limiter_counter_names) / sizeof(limiter_counter_names[0]))

static void limiter_counters(const struct rule_state *st, uint64_t *v)
{
    v[0] = st->matched;
    v[1] = st->admitted;
    v[2] = st->rejected;
    v[3] = st->delayed;
    v[4] = st->dryrun_hits;
    v[5] = st->fail_open;
    v[6] = st->leased;
    v[7] = st->returned;
}

void limiter_write_rules(struct evbuffer *out)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    uint64_t v[LIMITER_COUNTERS];

    evbuffer_add_printf(out, "*%d\r\n", count);
    for (int i = 0; i < count; i++) {
        const struct rule_state *st = limiter_states[i];
        limiter_counters(st, v);
        evbuffer_add_printf(out, "*%d\r\n$4\r\nname\r\n$%zu\r\n%s\r\n", 2 + 2 * LIMITER_COUNTERS,
                            strlen(st->rule->name), st->rule->name);
        for (int k = 0; k < LIMITER_COUNTERS; k++)
            evbuffer_add_printf(out, "$%zu\r\n%s\r\n:%llu\r\n", strlen(limiter_counter_names[k]),
                                limiter_counter_names[k], (unsigned long long)v[k]);
    }
}

void limiter_write_info(struct evbuffer *out)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    uint64_t total[LIMITER_COUNTERS] = {0}, v[LIMITER_COUNTERS];

    for (int i = 0; i < count; i++) {
        limiter_counters(limiter_states[i], v);
        for (int k = 0; k < LIMITER_COUNTERS; k++)
            total[k] += v[k];
    }
    evbuffer_add_printf(out, "rules_loaded:%d\r\n", count);
    for (int k = 0; k < LIMITER_COUNTERS; k++)
        evbuffer_add_printf(out, "rules_%s:%llu\r\n", limiter_counter_names[k],
                            (unsigned long long)total[k]);
}
