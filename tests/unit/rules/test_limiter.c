/* test_limiter.c - the admission decision over a loaded rule set: the
 * command and key indexes (first-byte filter) agree with plain matching,
 * every matching rule applies, reload keeps unchanged rules' buckets,
 * tokens of a request that did not go are given back. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "errlist.h"
#include "limiter.h"
#include "unit.h"

static char limiter_path[64];

static int load(const char *text)
{
    struct errlist errs = {0};
    FILE *f;
    int rc;

    snprintf(limiter_path, sizeof(limiter_path), "/tmp/sluice-test-limiter-%d.ini", (int)getpid());
    f = fopen(limiter_path, "w");
    fputs(text, f);
    fclose(f);
    rc = limiter_load(limiter_path, &errs);
    errlist_free(&errs);
    unlink(limiter_path);
    return rc;
}

/* A request line "ARGV..." split at spaces into ARGV (over BUF, 256 bytes,
 * at most 16 arguments). Returns argc. */
static int split(const char *line, char *buf, struct sv *argv)
{
    char *save = NULL;
    int argc = 0;

    snprintf(buf, 256, "%s", line);
    for (char *t = strtok_r(buf, " ", &save); t != NULL && argc < 16; t = strtok_r(NULL, " ", &save))
        argv[argc++] = (struct sv){t, strlen(t)};
    return argc;
}

/* The verdict for "ARGV..." (space separated) from client LC at NOW_US. */
static enum limiter_verdict admit(struct limiter_client **lc, const char *line, uint64_t now_us,
                                  struct limiter_decision *d)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct limiter_identity who = {(struct sockaddr *)&sin, "127.0.0.1", NULL, NULL, 1,
                                   "127.0.0.1:5000"};
    char buf[256];
    struct sv argv[16];
    int argc = split(line, buf, argv);

    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    limiter_admit(lc, &who, commands_resolve(argc, argv), argv, argc, now_us, d);
    return d->verdict;
}

/* limiter_quick_pass for "ARGV..." (space separated) from client LC. */
static int quick(struct limiter_client *lc, const char *line)
{
    char buf[256];
    struct sv argv[16];
    int argc = split(line, buf, argv);

    return limiter_quick_pass(lc, commands_resolve(argc, argv), argv, argc);
}

/* The quick check never lets through what a rule matches: each rule
 * below admits one request an hour, so a second matching request would be
 * refused by limiter_admit. */
static void test_quick_pass_agrees_with_admit(void)
{
    static const struct {
        const char *line;
        int quick;   /* what limiter_quick_pass must say */
    } cases[] = {
        {"GET order:1", 1},          /* first byte rules the glob out */
        {"GET user:1", 0},           /* the keyed rule applies */
        {"GET uber", 0},             /* same first byte: the full scan decides */
        {"PING", 1},                 /* no key, no keyed rule; not a SET */
        {"GET", 1},                  /* wrong arity: no key */
        {"MGET a b", 0},             /* keys not at one fixed place */
        {"SET order:1 v", 0},        /* the commands rule applies */
    };
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};

    CHECK(load("[limit users]\nkeys = user:*\nrate = 1/h\nburst = 1\n"
               "[limit sets]\ncommands = SET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(quick(lc, "GET order:1") == 0);   /* a client not seen yet */
    CHECK(admit(&lc, "PING", 1, &d) == LIMITER_PASS);
    /* Twice over: the second round answers from the client's memo, which
     * must tell "GET order:1" from "GET user:1" both ways. */
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            int q = quick(lc, cases[i].line);
            CHECK(q == cases[i].quick);
            if (q) {
                CHECK(admit(&lc, cases[i].line, 2, &d) == LIMITER_PASS);
                CHECK(admit(&lc, cases[i].line, 2, &d) == LIMITER_PASS);
            }
        }
    }
    CHECK(admit(&lc, "GET user:1", 3, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET user:1", 3, &d) == LIMITER_REJECT);
    /* After a reload the client's rules are stale: ask limiter_admit. */
    CHECK(load("[limit users]\nkeys = user:*\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(quick(lc, "GET order:1") == 0);
    /* ...and what it remembered was made for the old rules: GET order:1
     * passed before, and the rules now catch it by its key. */
    CHECK(load("[limit orders]\nkeys = order:*\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "PING", 4, &d) == LIMITER_PASS);
    CHECK(quick(lc, "GET order:1") == 0);
    CHECK(quick(lc, "GET user:1") == 1);
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

static void test_key_globs_through_the_index(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};

    CHECK(load("[limit prefix]\nkeys = user:*\nrate = 1/h\nburst = 1\n"
               "[limit suffix]\nkeys = *:tmp\nrate = 1/h\nburst = 1\n"
               "[limit class]\nkeys = [xy]z\nrate = 1/h\nburst = 1\n") == 0);
    /* user:1 matches prefix only: one token, then refused by "prefix". */
    CHECK(admit(&lc, "GET user:1", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET user:2", 2, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "prefix");
    /* Other first bytes: the suffix and class globs still apply. */
    CHECK(admit(&lc, "GET a:tmp", 3, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET b:tmp", 4, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "suffix");
    CHECK(admit(&lc, "GET yz", 5, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET xz", 6, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "class");
    /* No rule matches these: never limited. */
    for (int i = 0; i < 5; i++) {
        CHECK(admit(&lc, "GET order:1", 7, &d) == LIMITER_PASS);
        CHECK(admit(&lc, "MGET order:1 order:2", 7, &d) == LIMITER_PASS);
        CHECK(admit(&lc, "PING", 7, &d) == LIMITER_PASS);   /* no keys: keyed rules skip */
        CHECK(admit(&lc, "GET", 7, &d) == LIMITER_PASS);    /* wrong arity: no keys */
    }
    /* A multi-key command matches when any key does. */
    CHECK(admit(&lc, "MGET order:1 user:9", 8, &d) == LIMITER_REJECT);
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

static void test_every_matching_rule_applies(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};

    CHECK(load("[limit wide]\ncommands = @string\nrate = 1/h\nburst = 3\n"
               "[limit narrow]\ncommands = SET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "SET a 1", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "SET a 1", 1, &d) == LIMITER_REJECT);   /* narrow is empty */
    CHECK_STR(d.rule_name, "narrow");
    /* wide gave one token (the refused SET took none): two GETs left. */
    CHECK(admit(&lc, "GET a", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET a", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET a", 1, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "wide");
    CHECK(admit(&lc, "HSET h f v", 1, &d) == LIMITER_PASS);  /* not @string */
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

static void test_reload_keeps_unchanged_buckets(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};

    CHECK(load("[limit a]\ncommands = GET\nrate = 1/h\nburst = 1\n"
               "[limit b]\ncommands = SET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "GET k", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "SET k v", 1, &d) == LIMITER_PASS);
    /* b changes (a fresh bucket), a does not (still empty); order changes. */
    CHECK(load("[limit b]\ncommands = SET\nrate = 1/h\nburst = 2\n"
               "[limit a]\ncommands = GET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "GET k", 2, &d) == LIMITER_REJECT);
    CHECK(admit(&lc, "SET k v", 2, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "SET k v", 2, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "SET k v", 2, &d) == LIMITER_REJECT);
    /* A bad file changes nothing. */
    CHECK(load("[limit a]\nrate = soon\n") == -1);
    CHECK(admit(&lc, "GET k", 3, &d) == LIMITER_REJECT);
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

static void test_many_rules_past_one_word(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};
    char text[16384];
    size_t off = 0;

    /* 130 rules: the bitmaps span three words; only the last matches. */
    for (int i = 0; i < 129; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "[limit r%d]\nkeys = other%d:*\nrate = 1/h\n", i, i);
    snprintf(text + off, sizeof(text) - off, "[limit last]\nkeys = k*\nrate = 1/h\nburst = 2\n");
    CHECK(load(text) == 0);
    CHECK(admit(&lc, "GET k1", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET k2", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET k3", 1, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "last");
    CHECK(admit(&lc, "GET other5:x", 1, &d) == LIMITER_PASS);
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

/* No fixed count of matching rules: the 40th local rule refuses, every
 * one of 40 gives its token, and 10 shared rules are all asked. */
static void test_no_cap_on_matching_rules(void)
{
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0};
    static char text[8192];
    size_t off = 0;

    for (int i = 0; i < 39; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "[limit wide%d]\ncommands = GET\nrate = 1000/s\nburst = 1000\n", i);
    for (int i = 0; i < 10; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "[limit shared%d]\ncommands = SET\nrate = 1/h\nscope = shared\n", i);
    snprintf(text + off, sizeof(text) - off, "[limit last]\ncommands = GET\nrate = 1/h\nburst = 2\n");
    CHECK(load(text) == 0);
    CHECK(admit(&lc, "GET k", 1, &d) == LIMITER_PASS);
    CHECK(d.taken_count == 40);
    CHECK(admit(&lc, "GET k", 1, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET k", 1, &d) == LIMITER_REJECT);
    CHECK_STR(d.rule_name, "last");
    CHECK(admit(&lc, "SET k v", 1, &d) == LIMITER_ASK);
    CHECK(d.ask_count == 10);
    for (int i = 0; i < d.ask_count; i++) {
        char name[24];
        snprintf(name, sizeof(name), "shared%d", i);
        CHECK_STR(d.ask[i].rule_name, name);
    }
    limiter_client_free(lc);
    limiter_decision_free(&d);
}

/* The shared bucket key of a long client name: bounded, and its own for
 * each name, however long the prefix two names share. */
static void test_shared_key_of_long_names(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct limiter_identity who = {(struct sockaddr *)&sin, "127.0.0.1", NULL, NULL, 1,
                                   "127.0.0.1:5000"};
    struct limiter_client *la = NULL, *lb = NULL;
    struct limiter_decision a = {0}, b = {0};
    char name_a[400], name_b[400];
    struct sv argv[2] = {{"GET", 3}, {"k", 1}};

    memset(name_a, 'n', sizeof(name_a));
    memcpy(name_b, name_a, sizeof(name_b));
    name_a[398] = 'a';
    name_b[398] = 'b';
    name_a[399] = name_b[399] = '\0';
    CHECK(load("[limit by-name]\nper = name\nscope = shared\nrate = 1/h\n") == 0);
    who.name = name_a;
    limiter_admit(&la, &who, commands_resolve(2, argv), argv, 2, 1, &a);
    who.name = name_b;
    who.client_id = 2;
    limiter_admit(&lb, &who, commands_resolve(2, argv), argv, 2, 1, &b);
    CHECK(a.verdict == LIMITER_ASK && b.verdict == LIMITER_ASK);
    CHECK(a.ask_count == 1 && b.ask_count == 1);
    CHECK(strcmp(a.ask[0].key, b.ask[0].key) != 0);
    CHECK(strncmp(a.ask[0].key, "sluice:bucket:{by-name}:name-sha256:", 36) == 0);
    CHECK(strlen(a.ask[0].key) == 36 + 64);
    /* A short name stays as it is. */
    who.name = "app";
    limiter_client_changed(la);
    limiter_admit(&la, &who, commands_resolve(2, argv), argv, 2, 1, &a);
    CHECK_STR(a.ask[0].key, "sluice:bucket:{by-name}:name:app");
    limiter_client_free(la);
    limiter_client_free(lb);
    limiter_decision_free(&a);
    limiter_decision_free(&b);
}

/* What a request that did not go gives back: per client and per ip
 * buckets get their token again; a rule reloaded away is skipped. */
static void test_give_back(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct limiter_identity who = {(struct sockaddr *)&sin, "127.0.0.1", NULL, NULL, 1,
                                   "127.0.0.1:5000"};
    struct limiter_client *lc = NULL;
    struct limiter_decision d = {0}, first = {0};

    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    CHECK(load("[limit ips]\ncommands = GET\nper = ip\nrate = 1/h\nburst = 1\n"
               "[limit mine]\ncommands = GET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "GET a", 1, &first) == LIMITER_PASS);
    CHECK(first.taken_count == 2);
    CHECK(admit(&lc, "GET a", 1, &d) == LIMITER_REJECT);
    CHECK(d.taken_count == 0);   /* refused: took nothing */
    limiter_give_back(lc, &who, first.taken, first.taken_count);
    CHECK(admit(&lc, "GET a", 1, &first) == LIMITER_PASS);
    /* "ips" goes, "mine" stays as it was (its bucket empty again). */
    CHECK(load("[limit mine]\ncommands = GET\nrate = 1/h\nburst = 1\n") == 0);
    CHECK(admit(&lc, "GET a", 2, &d) == LIMITER_REJECT);
    limiter_give_back(lc, &who, first.taken, first.taken_count);
    CHECK(admit(&lc, "GET a", 2, &d) == LIMITER_PASS);
    CHECK(admit(&lc, "GET a", 2, &d) == LIMITER_REJECT);
    limiter_client_free(lc);
    limiter_decision_free(&d);
    limiter_decision_free(&first);
}

static void test_cleanup(void)
{
    CHECK(load("") == 0);
    CHECK(!limiter_active());
}

static void setup(void)
{
    commands_init();
}

UNIT_MAIN("limiter", {"setup", setup},
          {"quick_pass_agrees_with_admit", test_quick_pass_agrees_with_admit}, {"key globs through the index", test_key_globs_through_the_index},
          {"every matching rule applies", test_every_matching_rule_applies},
          {"reload keeps unchanged buckets", test_reload_keeps_unchanged_buckets},
          {"many rules past one word", test_many_rules_past_one_word},
          {"no cap on matching rules", test_no_cap_on_matching_rules},
          {"shared key of long names", test_shared_key_of_long_names},
          {"give back", test_give_back}, {"cleanup", test_cleanup})
