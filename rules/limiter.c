/* limiter.c - owns the live rule set, the state kept per rule (counters,
 * buckets) across reloads, and the admission decision for a request.
 *
 *   request -> client's rules (ip/user/name matched once: a bitmap)
 *           AND the command's rules (limiter_cmd_bits, built at load)
 *           -> none left once a fixed key's first byte is checked? pass
 *              (limiter_quick_pass: the common case, a few word operations)
 *           -> keyed rules: first byte of each key, then the globs
 *           -> bucket per client/ip/user/name/rule (shared: its lease, or
 *              ask Redis; see limiter_lease.c)
 *           -> every enforce rule has a token? take one from each : refuse
 *           (a cost rule: its subject not in debt? take nothing now; the
 *           request is charged after its reply, limiter_slots_charge)
 *           -> concurrency limits and charges: the decision's slots
 *              (limiter_slots.c), taken by the proxy once the tokens are in
 */
#include "limiter_int.h"

#include <event2/buffer.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "commands.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "server.h"
#include "topk.h"


_Static_assert(RULES_NAME_MAX < sizeof(((struct limiter_decision *)0)->rule_name),
               "a rule name fits a decision");

/* A bucket of one ip, user or name, for a rule with per = ip/user/name. */
struct keyed_bucket {
    struct keyed_bucket *next;
    struct bucket bucket;
    char key[];
};


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
    limiter_gates_orphan(st);
    if (st->report_subjects != NULL)
        topk_free(st->report_subjects);
    free(st->report_subjects);
    free(st);
}

int limiter_active(void)
{
    return limiter_words > 0;   /* limiter_index_commands: 0 when no rule */
}

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

/* metrics_family_retain's question: whether VALUES[0] names a rule of
 * the set CTX. */
static int limiter_rule_kept(void *ctx, const char *const *values)
{
    const struct rule_set *rs = ctx;

    for (int i = 0; rs != NULL && i < rules_count(rs); i++) {
        if (strcmp(rules_get(rs, i)->name, values[0]) == 0)
            return 1;
    }
    return 0;
}

/* The series of rules a reload removed go: /metrics stays bounded by the
 * rules there are (a rule kept keeps its counts, and its state's pointers
 * to them stay good). */
static void limiter_drop_removed_series(const struct rule_set *rs)
{
    static const enum metrics_id families[] = {
        METRIC_ratelimit_decisions_total, METRIC_ratelimit_delay_seconds,
        METRIC_ratelimit_lease_tokens_total, METRIC_ratelimit_shared_calls_total,
        METRIC_ratelimit_cost_total};

    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        metrics_family_retain(families[i], limiter_rule_kept, (void *)rs);
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
    limiter_drop_removed_series(rs);
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

static void limiter_reject(struct limiter_decision *out, const struct rule_state *st, uint64_t wait_us)
{
    out->verdict = LIMITER_REJECT;
    out->wait_us = wait_us;
    snprintf(out->rule_name, sizeof(out->rule_name), "%s", st->rule->name);
}

/* Decide over the local enforce rules in M (N of them) for WHO. */
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
        } else if (!m[i].cost) {
            bucket_take(m[i].bucket);   /* a cost rule is charged after the reply */
        }
        if (m[i].wait_us > 0) {
            m[i].st->delayed++;
            limiter_hit_who(m[i].st, who, 1);
        } else
            m[i].st->admitted++;
        limiter_metric(m[i].st, m[i].wait_us > 0 ? LIMITER_DELAYED : LIMITER_ADMITTED, m[i].wait_us);
        if (!m[i].cost)   /* nothing taken to give back */
            out->taken[out->taken_count++] =
            (struct limiter_taken){m[i].st->id, m[i].wait_us > 0, m[i].lease != NULL};
    }
    out->verdict = delay > 0 ? LIMITER_DELAY : LIMITER_PASS;
    out->wait_us = delay;
}


/* The bucket of the cost rule ST for the subject KEY (limiter_subject_key),
 * made when missing. */
static struct bucket *limiter_cost_bucket(struct rule_state *st, const char *key)
{
    return st->rule->per == RULE_PER_RULE ? &st->bucket : limiter_keyed(st, key);
}

/* The request of P meets the cost rule ST: it waits or is refused while
 * its subject's bucket is in debt, takes nothing now, and is charged what
 * it cost once answered (limiter_slots_charge). */
static void limiter_apply_cost(struct limiter_pass *p, struct rule_state *st)
{
    const struct rule *r = st->rule;
    char key[512];
    struct bucket *b;
    uint64_t wait;

    if (p->now_us == 0)
        p->now_us = server_pass_now_us();
    limiter_subject_key(st, p->who, key, sizeof(key));
    b = limiter_cost_bucket(st, key);
    wait = bucket_wait_us(b, r->rate_per_s, r->burst, p->now_us);
    limiter_slots_add_charge(p, st);
    if (r->mode == RULE_MODE_DRYRUN) {
        if (wait > 0) {
            char subject[LIMITER_SUBJECT_MAX];
            limiter_subject(p->who, subject, sizeof(subject));
            limiter_dryrun_hit(st, subject, wait);
        }
        limiter_metric(st, wait > 0 ? LIMITER_DRYRUN : LIMITER_ADMITTED, 0);
        return;
    }
    p->m[p->n++] = (struct limiter_match){st, b, wait, NULL, 1};
}

static void limiter_apply(struct limiter_pass *p, struct limiter_entry *e)
{
    struct rule_state *st = e->state;
    const struct rule *r = st->rule;

    st->matched++;
    if (r->max_inflight > 0 || r->max_blocked > 0)
        limiter_slots_add(p, st);   /* scope = local only */
    if (r->rate_per_s == 0)
        return;   /* a concurrency limit only: no bucket */
    if (r->cost != RULE_COST_REQUESTS) {
        limiter_apply_cost(p, st);
        return;
    }
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
    p->m[p->n++] = (struct limiter_match){st, b, wait, NULL, 0};
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
    limiter_slots_free(d->slots);
    d->slots = NULL;
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
    p.room = lc != NULL ? lc->count : 0;
    p.blocking = cmd != NULL && (cmd->flags & CMD_BLOCKING) != 0;

    limiter_slots_free(out->slots);   /* not taken by the caller: none held */
    out->slots = NULL;
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
    p.room = lc->count;
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
    if (out->verdict == LIMITER_REJECT) {
        limiter_slots_free(out->slots);   /* none taken yet */
        out->slots = NULL;
    }
    if (out->verdict != LIMITER_REJECT && out->ask_count > 0)
        out->verdict = LIMITER_ASK;
    else
        out->ask_count = 0;
}

struct rule_state *limiter_state_by_id(uint64_t id)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;

    for (int i = 0; i < count; i++) {
        if (limiter_states[i]->id == id)
            return limiter_states[i];
    }
    return NULL;
}

void limiter_shared_done(const struct limiter_shared_ask *ask, int allowed, uint64_t wait_us,
                         double granted)
{
    struct rule_state *st = limiter_state_by_id(ask->rule_id);   /* NULL: reloaded away */

    if (ask->kind == LIMITER_ASK_REQUEST && st != NULL)
        limiter_count_answer(st, ask, allowed, wait_us);
    limiter_lease_answer(st, ask, allowed, wait_us, granted);
}

void limiter_shared_sent(const struct limiter_shared_ask *ask)
{
    struct rule_state *st = limiter_state_by_id(ask->rule_id);

    if (st != NULL)
        limiter_lease_sent(st, ask);
}

/* Each cost rule may charge at most an hour of its rate as debt: a
 * request that cost more leaves its subject waiting an hour, not years. */
#define LIMITER_DEBT_MAX_S 3600.0

void limiter_slots_charge(struct limiter_slots *s, uint64_t redis_us, uint64_t bytes)
{
    uint64_t now = 0;
    struct rule_state *st;
    const char *key;
    int i = 0;

    while (limiter_slots_next_charge(s, &i, &st, &key)) {
        const struct rule *r = st->rule;
        uint64_t n = r->cost == RULE_COST_REDIS_TIME ? redis_us : bytes;
        if (now == 0)
            now = server_now_us();
        bucket_charge(limiter_cost_bucket(st, key), r->rate_per_s, r->burst, now, (double)n,
                      r->rate_per_s * LIMITER_DEBT_MAX_S);
        st->charged += n;
        if (st->metric_cost != NULL)
            *st->metric_cost += n;
    }
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

double limiter_return_leases(void)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    double returned = 0;

    for (int i = 0; i < count; i++)
        returned += limiter_lease_return_all(limiter_states[i]);
    return returned;
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
    "inflight_now", "blocked_now", "inflight_waits", "charged", "debt",
};
#define LIMITER_COUNTERS (int)(sizeof(limiter_counter_names) / sizeof(limiter_counter_names[0]))

/* What the buckets of the cost rule ST owe now (us or bytes), as of
 * their last refill; 0 for other rules. */
static uint64_t limiter_debt(const struct rule_state *st)
{
    double owed = 0;

    if (st->rule->cost == RULE_COST_REQUESTS)
        return 0;
    if (st->bucket.tokens < 0)
        owed -= st->bucket.tokens;
    for (int c = 0; c < LIMITER_KEYED_CHAINS && st->keyed_count > 0; c++) {
        for (const struct keyed_bucket *kb = st->keyed[c]; kb != NULL; kb = kb->next)
            owed -= kb->bucket.tokens < 0 ? kb->bucket.tokens : 0;
    }
    return (uint64_t)owed;
}

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
    v[8] = (uint64_t)st->held_now[0];
    v[9] = (uint64_t)st->held_now[1];
    v[10] = st->slot_waits;
    v[11] = st->charged;
    v[12] = limiter_debt(st);
}

/* "name" and VALUE as two bulk strings of PROXY RULES. */
static void limiter_write_pair(struct evbuffer *out, const char *name, const char *value)
{
    evbuffer_add_printf(out, "$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(name), name, strlen(value),
                        value);
}

/* A concurrency limit N as a setting: "off" when 0. */
static void limiter_write_limit(struct evbuffer *out, const char *name, int n)
{
    char num[16];

    if (n > 0)
        snprintf(num, sizeof(num), "%d", n);
    else
        snprintf(num, sizeof(num), "off");
    limiter_write_pair(out, name, num);
}

/* R's settings, as the rule file spells them: what an operator reads
 * beside the counters to know what the rule does now. */
#define LIMITER_SETTINGS 11
static void limiter_write_settings(struct evbuffer *out, const struct rule *r)
{
    struct rule_words w;
    char num[64];

    rules_words(r, &w);
    if (r->rate_per_s > 0 && r->cost == RULE_COST_REDIS_TIME)
        snprintf(num, sizeof(num), "%.6gms/s", r->rate_per_s / 1000);
    else if (r->rate_per_s > 0 && r->cost == RULE_COST_BYTES)
        snprintf(num, sizeof(num), "%.6gb/s", r->rate_per_s);
    else if (r->rate_per_s > 0)
        snprintf(num, sizeof(num), "%.6g/s", r->rate_per_s);
    else
        snprintf(num, sizeof(num), "off");   /* a concurrency limit only */
    limiter_write_pair(out, "rate", num);
    snprintf(num, sizeof(num), "%.6g", r->burst);
    limiter_write_pair(out, "burst", num);
    limiter_write_pair(out, "per", w.per);
    limiter_write_pair(out, "scope", w.scope);
    limiter_write_pair(out, "action", w.action);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)(r->max_delay_us / 1000));
    limiter_write_pair(out, "max_delay_ms", num);
    limiter_write_pair(out, "mode", w.mode);
    if (r->scope == RULE_SCOPE_SHARED && r->lease_us > 0)
        snprintf(num, sizeof(num), "%llums max %.6g", (unsigned long long)(r->lease_us / 1000),
                 r->lease_max);
    else
        snprintf(num, sizeof(num), "off");
    limiter_write_pair(out, "lease", num);
    limiter_write_limit(out, "max_inflight", r->max_inflight);
    limiter_write_limit(out, "max_blocked", r->max_blocked);
    limiter_write_pair(out, "cost", w.cost);
}

void limiter_write_rules(struct evbuffer *out)
{
    int count = limiter_set != NULL ? rules_count(limiter_set) : 0;
    uint64_t v[LIMITER_COUNTERS];

    evbuffer_add_printf(out, "*%d\r\n", count);
    for (int i = 0; i < count; i++) {
        const struct rule_state *st = limiter_states[i];
        limiter_counters(st, v);
        evbuffer_add_printf(out, "*%d\r\n$4\r\nname\r\n$%zu\r\n%s\r\n",
                            2 + 2 * LIMITER_SETTINGS + 2 * LIMITER_COUNTERS,
                            strlen(st->rule->name), st->rule->name);
        limiter_write_settings(out, st->rule);
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
