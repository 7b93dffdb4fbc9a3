/* test_lease.c - leases of shared buckets: the arithmetic of lease.c
 * (rate estimate, sizing, low-water refill, expiry in grant order, put
 * back, idle), and the limiter spending a lease without Redis: one ask
 * then local passes, a refill at the low-water mark, a refusal kept until
 * Redis said, tokens given back on reload, a leased token given back by
 * a request that did not go. The messages to Redis are caught by a send
 * hook; answers are fed back with limiter_shared_done. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "errlist.h"
#include "lease.h"
#include "limiter.h"
#include "server.h"
#include "unit.h"

/* ---- lease.c --------------------------------------------------------- */

static void test_sizing_follows_rate(void)
{
    struct lease l = {0};
    uint64_t t = 1000000;

    /* 1000 requests over 1 s: 1000/s, 200 ms of it is 200 tokens. */
    for (int i = 0; i < 1000; i++)
        lease_note(&l, t + (uint64_t)i * 1000);
    t += 1000000;
    CHECK(lease_rate(&l, t) > 900 && lease_rate(&l, t) < 1100);
    CHECK(lease_ask_want(&l, t, 200000, 1000) >= 180 && lease_ask_want(&l, t, 200000, 1000) <= 220);
    /* capped by lease_max, never below 1 */
    CHECK(lease_ask_want(&l, t, 200000, 50) == 50);
    struct lease idle = {0};
    CHECK(lease_ask_want(&idle, t, 200000, 50) == 1);
    /* tokens held and asked count against the target */
    l.asked = 40;
    CHECK(lease_ask_want(&l, t, 200000, 50) == 10);
    l.asked = 60;
    CHECK(lease_ask_want(&l, t, 200000, 50) == 1);
}

static void test_refill_at_low_water(void)
{
    struct lease l = {0};
    uint64_t t = 1000000;

    for (int i = 0; i < 1000; i++)
        lease_note(&l, t + (uint64_t)i * 1000);
    t += 1000000;
    lease_add(&l, 100, t);   /* target min(200, lease_max 100) = 100 */
    CHECK(lease_refill_want(&l, t, 200000, 100) == 0);    /* full */
    for (int i = 0; i < 50; i++)
        CHECK(lease_take(&l));
    CHECK(lease_refill_want(&l, t, 200000, 100) == 50);   /* at half: refill to target */
    l.refilling = 1;
    CHECK(lease_refill_want(&l, t, 200000, 100) == 0);    /* one at a time */
    l.refilling = 0;
    l.refused_until_us = t + 5000;
    CHECK(lease_refill_want(&l, t, 200000, 100) == 0);    /* Redis said no */
    CHECK(lease_refill_want(&l, t + 5000, 200000, 100) == 50);
    CHECK(lease_refill_want(&l, t + 5000, 0, 100) == 0);  /* lease = off */
    /* a rate too low to spend a token before it expires: no refill */
    struct lease slow = {0};
    lease_note(&slow, t);
    lease_note(&slow, t + 5000000);
    CHECK(lease_refill_want(&slow, t + 5000001, 200000, 100) == 0);
}

static void test_expiry_in_grant_order(void)
{
    struct lease l = {0};
    uint64_t t = 10000000;

    lease_add(&l, 3, t);
    lease_add(&l, 5, t + 1000000);
    CHECK(lease_held(&l) == 8);
    CHECK(lease_take(&l));                    /* from the older grant */
    CHECK(lease_expire(&l, t + LEASE_TTL_US - 1) == 0);
    CHECK(lease_expire(&l, t + LEASE_TTL_US) == 2);   /* the older grant's rest */
    CHECK(lease_held(&l) == 5);
    CHECK(lease_expire(&l, t + 1000000 + LEASE_TTL_US) == 5);
    CHECK(lease_held(&l) == 0 && !lease_take(&l));
    /* a third grant while two are held shares the earlier deadline */
    lease_add(&l, 1, t);
    lease_add(&l, 1, t + 100);
    lease_add(&l, 1, t + 50);
    CHECK(l.slot[1].tokens == 2 && l.slot[1].deadline_us == t + 50 + LEASE_TTL_US);
    /* put back: into the oldest slot, so it expires no later */
    CHECK(lease_take(&l));
    lease_put_back(&l);
    CHECK(lease_held(&l) == 3);
    CHECK(lease_drain(&l) == 3 && lease_held(&l) == 0);
}

static void test_idle_and_table(void)
{
    struct lease_table t = {0};
    struct lease *a = lease_table_get(&t, "sluice:bucket:{r}:ip:1.2.3.4");
    struct lease *b = lease_table_get(&t, "sluice:bucket:{r}:ip:1.2.3.5");

    CHECK(a != NULL && b != NULL && a != b && t.count == 2);
    CHECK(lease_table_get(&t, "sluice:bucket:{r}:ip:1.2.3.4") == a);
    CHECK(lease_table_find(&t, "nope") == NULL);
    CHECK(strcmp(a->key, "sluice:bucket:{r}:ip:1.2.3.4") == 0);
    lease_note(a, 1000);
    CHECK(!lease_idle(a, 1000 + LEASE_IDLE_US - 1));
    CHECK(lease_idle(a, 1000 + LEASE_IDLE_US));
    a->asked = 1;
    CHECK(!lease_idle(a, 1000 + LEASE_IDLE_US));   /* an answer is due */
    lease_table_clear(&t);
    CHECK(t.count == 0);
}

/* ---- the limiter with leases ------------------------------------------ */

static struct limiter_shared_ask sent[64];
static int sent_count;

static void catch_send(const struct limiter_shared_ask *ask)
{
    if (sent_count < 64)
        sent[sent_count++] = *ask;
    limiter_shared_sent(ask);
}

static char lease_path[64];

static int load(const char *text)
{
    struct errlist errs = {0};
    FILE *f;
    int rc;

    snprintf(lease_path, sizeof(lease_path), "/tmp/sluice-test-lease-%d.ini", (int)getpid());
    f = fopen(lease_path, "w");
    fputs(text, f);
    fclose(f);
    rc = limiter_load(lease_path, &errs);
    errlist_free(&errs);
    unlink(lease_path);
    return rc;
}

static struct sockaddr_in lease_sin = {.sin_family = AF_INET};
static struct limiter_identity lease_who = {(struct sockaddr *)&lease_sin, "127.0.0.1", NULL,
                                            NULL, 1, "127.0.0.1:5000"};

static enum limiter_verdict get(struct limiter_client **lc, uint64_t now_us,
                                struct limiter_decision *d)
{
    struct sv argv[2] = {{"GET", 3}, {"k", 1}};

    limiter_admit(lc, &lease_who, commands_resolve(2, argv), argv, 2, now_us, d);
    return d->verdict;
}

static void test_limiter_spends_lease(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0}, kept = {0};
    uint64_t t = server_pass_now_us();
    struct limiter_shared_ask ask;
    int locally = 0;

    inet_pton(AF_INET, "127.0.0.1", &lease_sin.sin_addr);
    limiter_set_send(catch_send);
    sent_count = 0;
    CHECK(load("[limit gets]\ncommands = GET\nrate = 1/h\nburst = 100\nper = rule\n"
               "scope = shared\nlease_max = 10\n") == 0);
    /* No lease yet: Redis is asked, for more than the request's own. */
    CHECK(get(&lc, t, &d) == LIMITER_ASK);
    CHECK(d.ask_count == 1 && d.ask[0].kind == LIMITER_ASK_REQUEST && d.ask[0].want >= 1);
    ask = d.ask[0];
    ask.want = 10;   /* as if the rate had asked for 10 */
    limiter_shared_sent(&ask);
    limiter_shared_done(&ask, 1, 0, 10);   /* granted 10: 1 for it, 9 held */
    /* The next 9 pass without Redis (a refill may be asked meanwhile). */
    for (int i = 0; i < 9; i++)
        locally += get(&lc, t + 1 + (uint64_t)i, &d) == LIMITER_PASS && d.ask_count == 0;
    CHECK(locally == 9);
    CHECK(d.taken_count == 1 && d.taken[0].leased);
    /* The last token comes back (its request did not go), and is spent. */
    limiter_give_back(lc, &lease_who, d.taken, d.taken_count);
    CHECK(get(&lc, t + 20, &kept) == LIMITER_PASS && kept.ask_count == 0);
    /* Refills went out as the lease ran low: answer them "refused". */
    int refills = 0;
    for (int i = 0; i < sent_count; i++) {
        if (sent[i].kind != LIMITER_ASK_REFILL)
            continue;
        refills++;
        limiter_shared_done(&sent[i], 0, 3600000000ULL, 0);
    }
    CHECK(refills >= 1);
    /* Out of tokens and refused by Redis: refused here, with its wait. */
    CHECK(get(&lc, t + 30, &d) == LIMITER_REJECT);
    CHECK(d.wait_us > 3000000000ULL);
    limiter_decision_free(&d);
    limiter_decision_free(&kept);
    limiter_client_free(lc);
}

static void test_reload_returns_tokens_of_changed_rule(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};
    uint64_t t = server_pass_now_us();
    struct limiter_shared_ask ask;
    const char *rule = "[limit gets]\ncommands = GET\nrate = 1/h\nburst = 100\nper = ip\n"
                       "scope = shared\nlease_max = %d\n";
    char text[256];

    limiter_set_send(catch_send);
    snprintf(text, sizeof(text), rule, 10);
    CHECK(load(text) == 0);
    CHECK(get(&lc, t, &d) == LIMITER_ASK);
    ask = d.ask[0];
    CHECK(strcmp(ask.key, "sluice:bucket:{gets}:ip:127.0.0.1") == 0);
    ask.want = 6;
    limiter_shared_sent(&ask);
    limiter_shared_done(&ask, 1, 0, 6);   /* 5 held */
    sent_count = 0;
    CHECK(load(text) == 0);               /* unchanged: kept */
    CHECK(sent_count == 0);
    snprintf(text, sizeof(text), rule, 20);
    CHECK(load(text) == 0);               /* changed: the 5 go back */
    CHECK(sent_count == 1 && sent[0].kind == LIMITER_ASK_RETURN && sent[0].want == 5);
    CHECK(strcmp(sent[0].key, "sluice:bucket:{gets}:ip:127.0.0.1") == 0);
    /* An answer for the rule reloaded away: its tokens go straight back. */
    sent_count = 0;
    ask.kind = LIMITER_ASK_REFILL;
    limiter_shared_done(&ask, 1, 0, 4);
    CHECK(sent_count == 1 && sent[0].kind == LIMITER_ASK_RETURN && sent[0].want == 4);
    limiter_decision_free(&d);
    limiter_client_free(lc);
    CHECK(load("") == 0);
    limiter_set_send(NULL);
}

static void setup(void)
{
    commands_init();
}

UNIT_MAIN("lease", {"setup", setup}, {"sizing follows rate", test_sizing_follows_rate},
          {"refill at low water", test_refill_at_low_water},
          {"expiry in grant order", test_expiry_in_grant_order},
          {"idle and table", test_idle_and_table},
          {"limiter spends lease", test_limiter_spends_lease},
          {"reload returns tokens of changed rule", test_reload_returns_tokens_of_changed_rule})
