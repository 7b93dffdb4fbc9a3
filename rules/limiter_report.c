/* limiter_report.c - owns what a rule tells of what it did: its counts
 * in the metrics, and its reports in the log of whom it hit (at most one
 * per LIMITER_REPORT_EVERY_US). Decides nothing. */
#include "limiter_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "server.h"
#include "topk.h"

/* Subjects a rule tells apart between two reports: the three it names
 * are among the busiest of them (topk.h). */
#define LIMITER_REPORT_SUBJECTS 16

/* Count one decision of KIND of the rule ST; a delay of WAIT_US. */
void limiter_metric(struct rule_state *st, enum limiter_metric kind, uint64_t wait_us)
{
    (*st->metric[kind])++;
    if (kind == LIMITER_DELAYED)
        metrics_hist_observe(st->metric_delay, wait_us);
}

void limiter_metric_open(struct rule_state *st)
{
    static const char *const names[] = {"admitted", "rejected", "delayed", "dryrun"};

    static const char *const calls[LIMITER_ASK_KINDS] = {"ask", "refill", "return", "refund"};

    for (int k = 0; k < 4; k++)
        st->metric[k] = metrics_counter(METRIC_ratelimit_decisions_total, st->rule->name, names[k]);
    st->metric_delay = metrics_hist(METRIC_ratelimit_delay_seconds, st->rule->name, NULL);
    if (st->rule->cost != RULE_COST_REQUESTS)
        st->metric_cost = metrics_counter(METRIC_ratelimit_cost_total, st->rule->name,
                                          st->rule->cost == RULE_COST_REDIS_TIME ? "redis_time_us"
                                                                                 : "bytes");
    if (st->rule->scope != RULE_SCOPE_SHARED)
        return;
    st->metric_lease[0] = metrics_counter(METRIC_ratelimit_lease_tokens_total, st->rule->name, "leased");
    st->metric_lease[1] = metrics_counter(METRIC_ratelimit_lease_tokens_total, st->rule->name, "returned");
    for (int k = 0; k < LIMITER_ASK_KINDS; k++)
        st->metric_calls[k] = metrics_counter(METRIC_ratelimit_shared_calls_total, st->rule->name, calls[k]);
}

/* The user, name and addr of the subject E (limiter_subject's "user=..
 * name=.. addr=..") into PARTS (its copy, cut in place) as *USER, *NAME,
 * *ADDR; each NULL when E's subject was cut (TOPK_KEY_MAX) or is not of
 * that form. A name holds no blank (CLIENT SETNAME refuses them). */
static void limiter_subject_parts(const struct topk_entry *e, char *parts, const char **user,
                                  const char **name, const char **addr)
{
    char *n, *a;

    *user = *name = *addr = NULL;
    if (e->full_len != e->key_len || strncmp(e->key, "user=", 5) != 0)
        return;
    memcpy(parts, e->key, e->key_len);
    parts[e->key_len] = '\0';
    n = strstr(parts, " name=");
    a = n != NULL ? strstr(n + 1, " addr=") : NULL;
    if (a == NULL)
        return;
    *n = *a = '\0';
    *user = parts + 5;
    *name = n + 6;
    *addr = a + 6;
}

/* Log at notice what rule ST did since its last report: how many
 * requests it rejected and delayed (dry-run: would have) and the three
 * subjects it hit most (JSON: the rule, the counts and the user, name
 * and addr of the one hit most as fields); then start counting again. */
void limiter_report(struct rule_state *st, uint64_t now_us)
{
    const struct topk_entry *top[3];
    char most[3 * (TOPK_SUBJECT_MAX + 32)], subject[TOPK_SUBJECT_MAX + 1];
    char parts[TOPK_KEY_MAX + 1];
    size_t used = 0;
    int n = topk_list(st->report_subjects, 0, 1, top, 3);
    uint64_t secs = (now_us - st->report_start_us + 999999) / 1000000;
    struct log_field f[] = {
        LOG_STR("rule", st->rule->name), LOG_BOOL("dryrun", st->rule->mode == RULE_MODE_DRYRUN),
        LOG_NUM("rejected", st->report_rejected), LOG_NUM("delayed", st->report_delayed),
        LOG_NUM("seconds", secs ? secs : 1), LOG_STR("most_hit", most),
        LOG_STR("user", NULL), LOG_STR("name", NULL), LOG_STR("addr", NULL)};

    most[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = topk_subject(top[i], subject);
        subject[len] = '\0';
        used += (size_t)snprintf(most + used, sizeof(most) - used, "%s%s (%llu)",
                                 i > 0 ? ", " : "", subject,
                                 (unsigned long long)top[i]->requests);
    }
    if (n > 0)
        limiter_subject_parts(top[0], parts, &f[6].str, &f[7].str, &f[8].str);
    if (st->rule->mode == RULE_MODE_DRYRUN)
        log_event(LOG_NOTICE, "rule_hits", f, 9,
                  "rule %s (dryrun) would have rejected %llu and delayed %llu requests in "
                  "%llu s (%llu so far); most hit: %s", st->rule->name,
                  (unsigned long long)st->report_rejected,
                  (unsigned long long)st->report_delayed, (unsigned long long)(secs ? secs : 1),
                  (unsigned long long)st->dryrun_hits, most);
    else
        log_event(LOG_NOTICE, "rule_hits", f, 9,
                  "rule %s rejected %llu and delayed %llu requests in %llu s; most hit: %s",
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
void limiter_subject(const struct limiter_identity *who, char *out, size_t size)
{
    snprintf(out, size, "user=%.64s name=%.64s addr=%s", who->user ? who->user : "default",
             who->name ? who->name : "", who->addr_text ? who->addr_text : "");
}

void limiter_hit_who(struct rule_state *st, const struct limiter_identity *who,
                            int delayed)
{
    char subject[LIMITER_SUBJECT_MAX];

    limiter_subject(who, subject, sizeof(subject));
    limiter_hit(st, subject, delayed);
}

void limiter_dryrun_hit(struct rule_state *st, const char *subject, uint64_t wait_us)
{
    st->dryrun_hits++;
    limiter_hit(st, subject, st->rule->action == RULE_ACTION_DELAY &&
                                 wait_us <= st->rule->max_delay_us);
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
void limiter_count_answer(struct rule_state *st, const struct limiter_shared_ask *ask,
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
