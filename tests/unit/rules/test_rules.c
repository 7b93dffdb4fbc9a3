/* test_rules.c - the rule file (every key, every error as FILE:LINE), client
 * and command matching, globs, and token bucket arithmetic. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bucket.h"
#include "commands.h"
#include "glob.h"
#include "rules.h"
#include "unit.h"

static char path[64];

static void init_commands_once(void)
{
    static int done;

    if (!done) {
        commands_init();
        done = 1;
    }
}

static void write_file(const char *text)
{
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/sluice-test-rules-%d.ini", (int)getpid());
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Load TEXT as a rule file; the set, or NULL with the errors printed. */
static struct rule_set *load(const char *text)
{
    struct errlist errs = {0};
    struct rule_set *rs;

    init_commands_once();
    write_file(text);
    rs = rules_load(path, &errs);
    if (rs == NULL)
        fprintf(stderr, "  unexpected errors:\n%s", errs.text ? errs.text : "(none)\n");
    errlist_free(&errs);
    unlink(path);
    return rs;
}

/* TEXT must fail, its first error at LINE and containing FRAGMENT. */
static void expect_error_at(int src_line, const char *text, int line, const char *fragment)
{
    struct errlist errs = {0};
    struct rule_set *rs;
    char prefix[128];
    int ok;

    init_commands_once();
    write_file(text);
    rs = rules_load(path, &errs);
    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    ok = rs == NULL && errs.text != NULL && strncmp(errs.text, prefix, strlen(prefix)) == 0 &&
         strcspn(errs.text, "\n") > strlen(prefix) && strstr(errs.text, fragment) != NULL &&
         strstr(errs.text, fragment) < errs.text + strcspn(errs.text, "\n");
    if (!ok) {
        fprintf(stderr, "%s:%d: expected %s...%s, got: %s\n", __FILE__, src_line, prefix,
                fragment, errs.text ? errs.text : (rs ? "(a rule set)\n" : "(nothing)\n"));
        unit_failed_checks++;
    }
    rules_free(rs);
    errlist_free(&errs);
    unlink(path);
}
#define expect_error(text, line, fragment) expect_error_at(__LINE__, text, line, fragment)

static struct sockaddr_storage addr_store;

static const struct sockaddr *sa(const char *ip)
{
    memset(&addr_store, 0, sizeof(addr_store));
    if (strchr(ip, ':') == NULL) {
        struct sockaddr_in *in = (struct sockaddr_in *)&addr_store;
        in->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &in->sin_addr);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr_store;
        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &in6->sin6_addr);
    }
    return (const struct sockaddr *)&addr_store;
}

/* A request from a space-separated line (words keep pointing into a copy). */
struct req {
    char buf[4096];
    struct sv argv[512];
    int argc;
    const struct command *cmd;
};

static struct req *req(const char *line)
{
    static struct req r;
    char *save = NULL;

    snprintf(r.buf, sizeof(r.buf), "%s", line);
    r.argc = 0;
    for (char *w = strtok_r(r.buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        r.argv[r.argc].ptr = w;
        r.argv[r.argc].len = strlen(w);
        r.argc++;
    }
    r.cmd = commands_resolve(r.argc, r.argv);
    return &r;
}

static int cmd_matches(const struct rule *rule, const char *line)
{
    struct req *r = req(line);
    return rules_command_matches(rule, r->cmd, r->argv, r->argc);
}

static void test_every_key(void)
{
    struct rule_set *rs = load(
        "; rules\n"
        "[limit writes-per-ip]\n"
        "match_ip   = 10.0.0.0/8 192.168.1.7 ::1    ; addresses or CIDRs\n"
        "match_user = app batch\n"
        "match_name = worker-*\n"
        "commands   = SET INCR @write\n"
        "keys       = user:* session:*\n"
        "rate       = 500/s\n"
        "burst      = 100\n"
        "per        = ip\n"
        "action     = delay\n"
        "max_delay  = 250ms\n"
        "scope      = shared\n"
        "mode       = dryrun\n"
        "\n"
        "[limit second]\n"
        "rate = 30/m\n"
        "per = user\n"
        "[limit third]\n"
        "rate = 7200/h\n"
        "per = name\n"
        "action = delay\n"
        "[limit fourth]\n"
        "rate = 3/s\n"
        "per = rule\n"
        "action = reject\n"
        "scope = local\n"
        "mode = enforce\n");
    const struct rule *r;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    CHECK(rules_count(rs) == 4);
    r = rules_get(rs, 0);
    CHECK_STR(r->name, "writes-per-ip");
    CHECK(r->index == 0 && r->line == 2);
    CHECK(r->rate_per_s == 500.0);
    CHECK(r->burst == 100.0);
    CHECK(r->per == RULE_PER_IP);
    CHECK(r->action == RULE_ACTION_DELAY);
    CHECK(r->max_delay_us == 250000);
    CHECK(r->scope == RULE_SCOPE_SHARED);
    CHECK(r->mode == RULE_MODE_DRYRUN);
    CHECK(rules_client_matches(r, sa("10.9.8.7"), "app", "worker-1"));
    CHECK(!rules_client_matches(r, sa("11.0.0.1"), "app", "worker-1"));
    CHECK(!rules_client_matches(r, sa("10.9.8.7"), "other", "worker-1"));
    CHECK(!rules_client_matches(r, sa("10.9.8.7"), "app", "boss"));
    CHECK(cmd_matches(r, "SET user:1 x"));
    CHECK(!cmd_matches(r, "SET other:1 x"));
    CHECK(!cmd_matches(r, "GET user:1"));

    r = rules_get(rs, 1);
    CHECK_STR(r->name, "second");
    CHECK(r->index == 1 && r->line == 16);
    CHECK(r->rate_per_s == 0.5);
    CHECK(r->burst == 1.0);                  /* default: rate per second, at least 1 */
    CHECK(r->per == RULE_PER_USER);
    CHECK(r->action == RULE_ACTION_REJECT);  /* defaults */
    CHECK(r->max_delay_us == 0);
    CHECK(r->scope == RULE_SCOPE_LOCAL);
    CHECK(r->mode == RULE_MODE_ENFORCE);
    CHECK(rules_client_matches(r, NULL, NULL, NULL));  /* no conditions */
    CHECK(cmd_matches(r, "GET a"));
    CHECK(cmd_matches(r, "PING"));

    r = rules_get(rs, 2);
    CHECK(r->rate_per_s == 2.0);
    CHECK(r->burst == 2.0);
    CHECK(r->per == RULE_PER_NAME);
    CHECK(r->max_delay_us == 1000000);       /* delay without max_delay: 1s */

    r = rules_get(rs, 3);
    CHECK(r->rate_per_s == 3.0 && r->burst == 3.0);
    CHECK(r->per == RULE_PER_RULE && r->action == RULE_ACTION_REJECT);
    CHECK(r->scope == RULE_SCOPE_LOCAL && r->mode == RULE_MODE_ENFORCE);
    rules_free(rs);
}

static void test_per_client_default_and_fractional_burst(void)
{
    struct rule_set *rs = load("[limit a]\nrate = 90/m\n");

    CHECK(rs != NULL && rules_count(rs) == 1);
    if (rs == NULL)
        return;
    CHECK(rules_get(rs, 0)->per == RULE_PER_CLIENT);
    CHECK(rules_get(rs, 0)->rate_per_s == 1.5);
    CHECK(rules_get(rs, 0)->burst == 1.5);
    rules_free(rs);
}

static void test_empty_files(void)
{
    struct rule_set *rs = load("");

    CHECK(rs != NULL && rules_count(rs) == 0);
    rules_free(rs);
    rs = load("; nothing but comments\n# and blanks\n\n");
    CHECK(rs != NULL && rules_count(rs) == 0);
    rules_free(rs);
}

static void test_file_quirks(void)
{
    /* a UTF-8 BOM, CRLF line ends, blanks inside the brackets */
    struct rule_set *rs = load("\xEF\xBB\xBF[limit a]\r\nrate = 1/s\r\n[  limit   b  ]\r\nrate = 2/s\r\n");

    CHECK(rs != NULL && rules_count(rs) == 2);
    if (rs != NULL && rules_count(rs) == 2) {
        CHECK_STR(rules_get(rs, 0)->name, "a");
        CHECK_STR(rules_get(rs, 1)->name, "b");
        CHECK(rules_get(rs, 1)->rate_per_s == 2.0);
    }
    rules_free(rs);
    expect_error("[  ]\nrate = 1/s\n", 1, "unknown section []");
}

static void test_lists_spaces_and_commas(void)
{
    struct rule_set *rs = load("[limit a]\nrate = 1/s\n"
                               "match_user = app,batch ,  ops\t, ,dev\n"
                               "match_ip = 10.0.0.1,10.0.0.2 , 10.0.0.3\n"
                               "commands = get,SET , incr\n"
                               "keys = a:*,b:*\n");
    const struct rule *r;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    r = rules_get(rs, 0);
    CHECK(rules_client_matches(r, sa("10.0.0.1"), "app", NULL));
    CHECK(rules_client_matches(r, sa("10.0.0.2"), "batch", NULL));
    CHECK(rules_client_matches(r, sa("10.0.0.3"), "ops", NULL));
    CHECK(rules_client_matches(r, sa("10.0.0.3"), "dev", NULL));
    CHECK(!rules_client_matches(r, sa("10.0.0.4"), "dev", NULL));
    CHECK(!rules_client_matches(r, sa("10.0.0.1"), "", NULL));
    CHECK(!rules_client_matches(r, sa("10.0.0.1"), "app,batch", NULL));
    CHECK(cmd_matches(r, "get a:1"));
    CHECK(cmd_matches(r, "set b:1 v"));
    CHECK(cmd_matches(r, "INCR a:x"));
    CHECK(!cmd_matches(r, "get c:1"));
    CHECK(!cmd_matches(r, "del a:1"));
    rules_free(rs);
}

/* inih reads at most 199 characters a line: long lists go on over
 * indented lines, which must not count as duplicate keys. */
static void test_list_continuation_lines(void)
{
    struct rule_set *rs = load("[limit a]\nrate = 1/s\n"
                               "match_ip = 10.0.0.1\n"
                               "    10.0.0.2, ::1\n"
                               "\n"
                               "    ; a comment between\n"
                               "    10.0.0.3\n"
                               "commands = get\n"
                               "    set\n"
                               "burst = 2\n");
    struct rule_set *one_line = load("[limit a]\nrate = 1/s\nmatch_ip = 10.0.0.1 10.0.0.2 ::1 10.0.0.3\n"
                                     "commands = get set\nburst = 2\n");
    const struct rule *r;

    CHECK(rs != NULL && one_line != NULL);
    if (rs == NULL || one_line == NULL) {
        rules_free(rs);
        rules_free(one_line);
        return;
    }
    r = rules_get(rs, 0);
    CHECK(r->burst == 2.0);
    CHECK(rules_client_matches(r, sa("10.0.0.1"), NULL, NULL));
    CHECK(rules_client_matches(r, sa("10.0.0.2"), NULL, NULL));
    CHECK(rules_client_matches(r, sa("::1"), NULL, NULL));
    CHECK(rules_client_matches(r, sa("10.0.0.3"), NULL, NULL));
    CHECK(!rules_client_matches(r, sa("10.0.0.4"), NULL, NULL));
    CHECK(cmd_matches(r, "GET k"));
    CHECK(cmd_matches(r, "SET k v"));
    CHECK(!cmd_matches(r, "INCR k"));
    CHECK(rules_same_params(r, rules_get(one_line, 0)));
    rules_free(rs);
    rules_free(one_line);

    expect_error("[limit a]\nrate = 1/s\nburst = 3\n  4\n", 4, "burst takes one value");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = 10.0.0.1\n  10.0.0.0/40\n", 4,
                 "'10.0.0.0/40' is not an address");
    expect_error("[limit a]\nrate = 1/s\ncommands = get\n\n  nosuch\n", 5,
                 "unknown command 'nosuch'");
}

static void test_errors_have_lines(void)
{
    expect_error("[limit a]\nrate = 1/s\nbogus = 1\n", 3, "unknown key 'bogus'");
    expect_error("[limit a]\nrate = 5/d\n", 2, "rate: '5/d' is not a rate");
    expect_error("[limit a]\nrate = 0/s\n", 2, "not a rate");
    expect_error("[limit a]\nrate = /s\n", 2, "not a rate");
    expect_error("[limit a]\nrate = 5\n", 2, "not a rate");
    expect_error("[limit a]\nrate = 5/sec\n", 2, "not a rate");
    expect_error("[limit a]\nrate = -5/s\n", 2, "not a rate");
    expect_error("[limit a]\nrate = 1/s\nrate = 2/s\n", 3, "duplicate key 'rate'");
    expect_error("[limit a]\nrate = 1/s\n[limit b]\nrate = 1/s\n\n[limit a]\nrate = 1/s\n", 6,
                 "duplicate rule name 'a'");
    /* the same name twice in a row: inih alone would merge the two */
    expect_error("[limit a]\nrate = 1/s\n[limit a]\nrate = 2/s\n", 3, "duplicate rule name 'a'");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = 10.0.0.0/8 10.0.0.0/33\n", 3,
                 "'10.0.0.0/33' is not an address or CIDR");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = ::1/129\n", 3, "not an address");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = 300.1.1.1\n", 3, "not an address");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = 10.0.0.0/\n", 3, "not an address");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = 10.0.0.0/x\n", 3, "not an address");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = example.com\n", 3, "not an address");
    expect_error("[limit a]\nrate = 1/s\nmatch_ip = ,\n", 3, "match_ip: needs at least one");
    expect_error("[limit a]\nrate = 1/s\ncommands = SET FROBNICATE\n", 3,
                 "unknown command 'FROBNICATE'");
    expect_error("[limit a]\nrate = 1/s\ncommands = client|nosuch\n", 3,
                 "unknown command 'client|nosuch'");
    expect_error("[limit a]\nrate = 1/s\ncommands = @write @nope\n", 3,
                 "unknown ACL category '@nope'");
    expect_error("[limit a]\nrate = 1/s\ncommands = @\n", 3, "unknown ACL category '@'");
    expect_error("\n[limit a]\nburst = 5\n", 2, "missing key 'rate' in [limit a]");
    expect_error("[limit a]\n", 1, "missing key 'rate'");
    expect_error("[limit a]\n[limit b]\nrate = 1/s\n", 1, "missing key 'rate' in [limit a]");
    expect_error("[limit a]\nrate = 1/s\nper = host\n", 3,
                 "per: must be client, ip, user, name or rule, not 'host'");
    expect_error("[limit a]\nrate = 1/s\naction = drop\n", 3, "action: must be reject or delay");
    expect_error("[limit a]\nrate = 1/s\nscope = global\n", 3, "scope: must be local or shared");
    expect_error("[limit a]\nrate = 1/s\nmode = audit\n", 3, "mode: must be enforce or dryrun");
    expect_error("[limit a]\nrate = 1/s\nmax_delay = 250ms\n", 3, "max_delay needs action = delay");
    expect_error("[limit a]\nrate = 1/s\nmax_delay = 250ms\naction = reject\n", 3,
                 "max_delay needs action = delay");
    expect_error("[limit a]\nrate = 1/s\naction = delay\nmax_delay = 5x\n", 4, "not a duration");
    expect_error("[limit a]\nrate = 1/s\naction = delay\nmax_delay = 0ms\n", 4, "out of range");
    expect_error("[limit a]\nrate = 1/s\nburst = 0\n", 3, "burst: 0 is out of range");
    expect_error("[limit a]\nrate = 1/s\nburst = many\n", 3, "burst: 'many' is not an integer");
    expect_error("[limit a]\nrate = 1/s\nmatch_user =\n", 3, "match_user: needs at least one");
    expect_error("[proxy]\nbackend = h:1\n", 1, "unknown section [proxy] (expected [limit NAME])");
    expect_error("[limit]\nrate = 1/s\n", 1, "unknown section [limit]");
    expect_error("[limit a b]\nrate = 1/s\n", 1, "unknown section [limit a b]");
    expect_error("[limits a]\nrate = 1/s\n", 1, "unknown section");
    expect_error("[limit a]\nrate = 1/s\n[other]\n", 3, "unknown section [other]");
    expect_error("rate = 1/s\n[limit a]\nrate = 1/s\n", 1, "outside a [limit NAME] section");
    expect_error("[limit a]\nrate = 1/s\nthis line is wrong\n", 3, "syntax error");
}

static void test_missing_file(void)
{
    struct errlist errs = {0};

    CHECK(rules_load("/nonexistent/rules.ini", &errs) == NULL);
    CHECK(errs.text != NULL && strstr(errs.text, "/nonexistent/rules.ini:0: cannot open") != NULL);
    errlist_free(&errs);
}

static void test_cidr_matching(void)
{
    struct rule_set *rs = load("[limit v4]\nrate = 1/s\nmatch_ip = 10.0.0.0/8 192.168.1.7 172.16.0.0/12\n"
                               "[limit v6]\nrate = 1/s\nmatch_ip = ::1 2001:db8::/32 fe80::1/128\n"
                               "[limit any4]\nrate = 1/s\nmatch_ip = 0.0.0.0/0\n"
                               "[limit any6]\nrate = 1/s\nmatch_ip = ::/0\n"
                               "[limit host32]\nrate = 1/s\nmatch_ip = 192.168.1.7/32\n"
                               "[limit odd]\nrate = 1/s\nmatch_ip = 10.1.2.3/20\n");
    const struct rule *v4, *v6, *any4, *any6, *host32, *odd;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    v4 = rules_get(rs, 0);
    v6 = rules_get(rs, 1);
    any4 = rules_get(rs, 2);
    any6 = rules_get(rs, 3);
    host32 = rules_get(rs, 4);
    odd = rules_get(rs, 5);

    CHECK(rules_client_matches(v4, sa("10.0.0.0"), NULL, NULL));
    CHECK(rules_client_matches(v4, sa("10.255.255.255"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("11.0.0.0"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("9.255.255.255"), NULL, NULL));
    CHECK(rules_client_matches(v4, sa("192.168.1.7"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("192.168.1.8"), NULL, NULL));
    CHECK(rules_client_matches(v4, sa("172.31.255.1"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("172.32.0.1"), NULL, NULL));
    /* IPv4 clients on an IPv6 socket arrive IPv4-mapped */
    CHECK(rules_client_matches(v4, sa("::ffff:10.1.2.3"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("::ffff:11.1.2.3"), NULL, NULL));
    CHECK(!rules_client_matches(v4, sa("::1"), NULL, NULL));
    CHECK(!rules_client_matches(v4, NULL, NULL, NULL));

    CHECK(rules_client_matches(v6, sa("::1"), NULL, NULL));
    CHECK(!rules_client_matches(v6, sa("::2"), NULL, NULL));
    CHECK(!rules_client_matches(v6, sa("127.0.0.1"), NULL, NULL));
    CHECK(rules_client_matches(v6, sa("2001:db8:ffff::1"), NULL, NULL));
    CHECK(!rules_client_matches(v6, sa("2001:db9::1"), NULL, NULL));
    CHECK(rules_client_matches(v6, sa("fe80::1"), NULL, NULL));
    CHECK(!rules_client_matches(v6, sa("fe80::2"), NULL, NULL));

    CHECK(rules_client_matches(any4, sa("1.2.3.4"), NULL, NULL));
    CHECK(rules_client_matches(any4, sa("::ffff:1.2.3.4"), NULL, NULL));
    CHECK(!rules_client_matches(any4, sa("2001:db8::1"), NULL, NULL));
    CHECK(rules_client_matches(any6, sa("2001:db8::1"), NULL, NULL));
    CHECK(rules_client_matches(any6, sa("1.2.3.4"), NULL, NULL));

    CHECK(rules_client_matches(host32, sa("192.168.1.7"), NULL, NULL));
    CHECK(!rules_client_matches(host32, sa("192.168.1.6"), NULL, NULL));
    /* host bits past the prefix are ignored: 10.1.2.3/20 is 10.1.0.0/20 */
    CHECK(rules_client_matches(odd, sa("10.1.15.255"), NULL, NULL));
    CHECK(!rules_client_matches(odd, sa("10.1.16.0"), NULL, NULL));
    rules_free(rs);
}

static void test_user_and_name_globs(void)
{
    struct rule_set *rs = load("[limit u]\nrate = 1/s\nmatch_user = app-? batch default\n"
                               "[limit n]\nrate = 1/s\nmatch_name = worker-[0-9]* cron\n"
                               "[limit anyname]\nrate = 1/s\nmatch_name = *\n");
    const struct rule *u, *n, *anyname;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    u = rules_get(rs, 0);
    n = rules_get(rs, 1);
    anyname = rules_get(rs, 2);
    CHECK(rules_client_matches(u, NULL, "app-1", NULL));
    CHECK(!rules_client_matches(u, NULL, "app-12", NULL));
    CHECK(rules_client_matches(u, NULL, "batch", NULL));
    CHECK(!rules_client_matches(u, NULL, "Batch", NULL));      /* case sensitive */
    CHECK(rules_client_matches(u, NULL, NULL, NULL));          /* no AUTH: "default" */
    CHECK(rules_client_matches(u, NULL, "default", NULL));
    CHECK(rules_client_matches(n, NULL, NULL, "worker-7"));
    CHECK(rules_client_matches(n, NULL, NULL, "worker-7b"));
    CHECK(!rules_client_matches(n, NULL, NULL, "worker-x"));
    CHECK(rules_client_matches(n, NULL, NULL, "cron"));
    CHECK(!rules_client_matches(n, NULL, NULL, "crontab"));
    CHECK(!rules_client_matches(n, NULL, NULL, NULL));
    CHECK(!rules_client_matches(anyname, NULL, NULL, NULL));  /* no name: no glob matches */
    CHECK(!rules_client_matches(anyname, NULL, NULL, ""));
    CHECK(rules_client_matches(anyname, NULL, NULL, "x"));
    rules_free(rs);
}

static void test_commands_and_categories(void)
{
    struct rule_set *rs = load("[limit w]\nrate = 1/s\ncommands = @write\n"
                               "[limit names]\nrate = 1/s\ncommands = get Incr\n"
                               "[limit client]\nrate = 1/s\ncommands = client\n"
                               "[limit kill]\nrate = 1/s\ncommands = CLIENT|KILL\n"
                               "[limit mixed]\nrate = 1/s\ncommands = @read set\n");
    const struct rule *w, *names, *client, *kill, *mixed;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    w = rules_get(rs, 0);
    names = rules_get(rs, 1);
    client = rules_get(rs, 2);
    kill = rules_get(rs, 3);
    mixed = rules_get(rs, 4);
    CHECK(cmd_matches(w, "SET k v"));
    CHECK(cmd_matches(w, "set k v"));
    CHECK(cmd_matches(w, "DEL a b"));
    CHECK(cmd_matches(w, "MSET a 1 b 2"));
    CHECK(!cmd_matches(w, "GET k"));
    CHECK(!cmd_matches(w, "PING"));
    CHECK(cmd_matches(names, "GET k"));
    CHECK(cmd_matches(names, "incr k"));
    CHECK(!cmd_matches(names, "SET k v"));
    /* a container name covers its subcommands */
    CHECK(cmd_matches(client, "CLIENT KILL ID 5"));
    CHECK(cmd_matches(client, "client setname x"));
    CHECK(!cmd_matches(client, "PING"));
    /* a subcommand name covers only that subcommand */
    CHECK(cmd_matches(kill, "client kill id 5"));
    CHECK(!cmd_matches(kill, "client setname x"));
    CHECK(cmd_matches(mixed, "GET k"));
    CHECK(cmd_matches(mixed, "SET k v"));
    CHECK(!cmd_matches(mixed, "INCR k"));
    /* commands the table does not know match only unconditional rules */
    CHECK(!cmd_matches(w, "MODULE.CMD k"));
    rules_free(rs);
}

static void test_key_globs(void)
{
    struct rule_set *rs = load("[limit k]\nrate = 1/s\nkeys = user:* session:?\n"
                               "[limit wk]\nrate = 1/s\ncommands = @write\nkeys = user:*\n");
    const struct rule *k, *wk;
    char big[4096];
    size_t len;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    k = rules_get(rs, 0);
    wk = rules_get(rs, 1);
    CHECK(cmd_matches(k, "GET user:1"));
    CHECK(cmd_matches(k, "GET session:x"));
    CHECK(!cmd_matches(k, "GET session:xy"));
    CHECK(!cmd_matches(k, "GET other"));
    /* MSET: keys at 1, 3, 5...; a value that looks like a key does not count */
    CHECK(cmd_matches(k, "MSET a 1 b 2 user:9 3"));
    CHECK(!cmd_matches(k, "MSET a user:1 b user:2"));
    CHECK(cmd_matches(k, "DEL a b c user:x"));
    CHECK(!cmd_matches(k, "DEL a b c"));
    CHECK(!cmd_matches(k, "PING"));            /* no keys: no match */
    CHECK(!cmd_matches(k, "SET"));             /* too few arguments: no key */
    CHECK(cmd_matches(wk, "SET user:1 v"));
    CHECK(!cmd_matches(wk, "GET user:1"));
    CHECK(!cmd_matches(wk, "SET other v"));
    /* more keys than fit on the stack */
    len = (size_t)snprintf(big, sizeof(big), "DEL");
    for (int i = 0; i < 200; i++)
        len += (size_t)snprintf(big + len, sizeof(big) - len, " k%d", i);
    CHECK(!cmd_matches(k, big));
    snprintf(big + len, sizeof(big) - len, " user:last");
    CHECK(cmd_matches(k, big));
    rules_free(rs);
}

static void test_sluice_verbs(void)
{
    struct rule_set *rs = load("[limit lock]\nrate = 1/s\ncommands = LOCK renew\n"
                               "[limit lockkeys]\nrate = 1/s\ncommands = lock\nkeys = job:*\n"
                               "[limit onlykeys]\nrate = 1/s\nkeys = job:*\n"
                               "[limit any]\nrate = 1/s\n"
                               "[limit writes]\nrate = 1/s\ncommands = @write\n");
    const struct rule *lock, *lockkeys, *onlykeys, *any, *writes;

    CHECK(rs != NULL);
    if (rs == NULL)
        return;
    lock = rules_get(rs, 0);
    lockkeys = rules_get(rs, 1);
    onlykeys = rules_get(rs, 2);
    any = rules_get(rs, 3);
    writes = rules_get(rs, 4);
    CHECK(req("LOCK job:1 10000")->cmd == NULL);
    CHECK(cmd_matches(lock, "LOCK job:1 10000"));
    CHECK(cmd_matches(lock, "renew job:1 10000"));
    CHECK(!cmd_matches(lock, "UNLOCK job:1"));
    CHECK(!cmd_matches(lock, "SET job:1 v"));
    CHECK(cmd_matches(lockkeys, "lock job:1 10000"));
    CHECK(!cmd_matches(lockkeys, "lock other 10000"));
    CHECK(!cmd_matches(lockkeys, "lock"));
    CHECK(!cmd_matches(lockkeys, "unlock job:1"));
    CHECK(cmd_matches(onlykeys, "UNLOCK job:1"));
    CHECK(!cmd_matches(onlykeys, "UNLOCK other"));
    CHECK(!cmd_matches(onlykeys, "MODULE.CMD job:1"));
    CHECK(cmd_matches(any, "LOCK job:1"));
    CHECK(cmd_matches(any, "MODULE.CMD job:1"));
    CHECK(!cmd_matches(writes, "LOCK job:1"));
    rules_free(rs);
}

static int gm(const char *p, const char *s)
{
    return glob_match(p, strlen(p), s, strlen(s));
}

static int gcm(const char *p)
{
    return glob_can_match(p, strlen(p));
}

/* glob_can_match says 0 only for patterns nothing matches: checked
 * against every subject of up to 3 bytes from the bytes that matter. */
static void test_glob_can_match(void)
{
    static const char *const patterns[] = {
        "[]", "a[]", "[]*", "foo[", "[", "*[", "[^]", "[^", "[abc", "\\[]", "[\\]]", "a*b",
        "[]]", "x[]y", "\\[", "[a-]", "",
    };
    static const char *const never[] = {"[]", "a[]", "[]*", "foo[", "[", "*[", "x[]y", "[]]"};
    const char bytes[] = "a]b[^\\x-y";

    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        CHECK(!gcm(never[i]));
    CHECK(gcm("[^]") && gcm("[^") && gcm("[abc") && gcm("\\[]") && gcm("[a-]") && gcm(""));
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        const char *p = patterns[i];
        int matched = 0;
        size_t nb = sizeof(bytes) - 1;

        for (size_t a = 0; a <= nb && !matched; a++) {
            for (size_t b = 0; b <= nb && !matched; b++) {
                for (size_t c = 0; c <= nb && !matched; c++) {
                    char subj[3];
                    size_t len = 0;
                    if (a < nb) subj[len++] = bytes[a];
                    if (a < nb && b < nb) subj[len++] = bytes[b];
                    if (a < nb && b < nb && c < nb) subj[len++] = bytes[c];
                    matched = glob_match(p, strlen(p), subj, len);
                }
            }
        }
        if (!gcm(p))
            CHECK(!matched);
    }
}

static void test_glob(void)
{
    CHECK(gm("", ""));
    CHECK(!gm("", "a"));
    CHECK(gm("*", ""));
    CHECK(gm("*", "anything"));
    CHECK(gm("**", "x"));
    CHECK(gm("a*", "a"));
    CHECK(gm("a*b", "ab"));
    CHECK(gm("a*b", "axxxb"));
    CHECK(!gm("a*b", "axxxc"));
    CHECK(gm("a*b*c", "abxbxc"));
    CHECK(gm("*a*b", "xxaxxbxxb"));
    CHECK(!gm("*a*b", "xxaxxbxxc"));
    CHECK(gm("?", "x"));
    CHECK(!gm("?", ""));
    CHECK(!gm("?", "xy"));
    CHECK(gm("h?llo", "hello"));
    CHECK(gm("h[ae]llo", "hallo"));
    CHECK(!gm("h[ae]llo", "hillo"));
    CHECK(gm("h[^e]llo", "hallo"));
    CHECK(!gm("h[^e]llo", "hello"));
    CHECK(gm("h[a-b]llo", "hbllo"));
    CHECK(!gm("h[a-b]llo", "hcllo"));
    CHECK(gm("h[b-a]llo", "hallo"));           /* reversed range, as Redis */
    CHECK(gm("[0-9][0-9]", "42"));
    CHECK(!gm("[]", "a"));                     /* empty class matches nothing */
    CHECK(gm("[^]", "a"));
    CHECK(gm("[abc", "c"));                    /* unclosed class ends with the pattern */
    CHECK(gm("[\\]]", "]"));
    CHECK(gm("[a\\-z]", "-"));
    CHECK(!gm("[a\\-z]", "b"));
    CHECK(gm("\\*", "*"));
    CHECK(!gm("\\*", "x"));
    CHECK(gm("a\\?c", "a?c"));
    CHECK(!gm("a\\?c", "abc"));
    CHECK(gm("a\\", "a\\"));                   /* a trailing backslash is literal */
    CHECK(gm("\\[x]", "[x]"));
    CHECK(!gm("abc", "ABC"));
    CHECK(glob_match("a?c", 3, "a\0c", 3));  /* binary-safe */
    CHECK(glob_match("*\xff", 2, "\x01\xff", 2));
    CHECK(gm("[\x80-\xff]", "\xc3"));          /* classes compare unsigned bytes */
    /* a pattern that makes naive recursion exponential */
    {
        char s[201], pat[64];
        memset(s, 'a', 200);
        s[200] = '\0';
        snprintf(pat, sizeof(pat), "a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b");
        CHECK(!gm(pat, s));
        s[199] = 'b';
        CHECK(gm(pat, s));
    }
}

static void test_bucket_basics(void)
{
    struct bucket b;
    uint64_t wait = 0, t0 = 1000000000ULL;

    bucket_init(&b, 5);
    for (int i = 0; i < 5; i++) {           /* starts full: burst requests at once */
        CHECK(bucket_peek(&b, 10, 5, t0, &wait) == 1);
        bucket_take(&b);
    }
    CHECK(bucket_peek(&b, 10, 5, t0, &wait) == 0);
    CHECK(wait == 100000);                  /* 1 token at 10/s: 100ms */
    CHECK(bucket_peek(&b, 10, 5, t0 + 99999, &wait) == 0);
    CHECK(wait == 1);
    CHECK(bucket_peek(&b, 10, 5, t0 + 100000, &wait) == 1);
    bucket_take(&b);
    /* refill after 250ms: 2.5 tokens */
    CHECK(bucket_peek(&b, 10, 5, t0 + 350000, &wait) == 1);
    CHECK(b.tokens > 2.49 && b.tokens < 2.51);
    /* never above burst, however long idle */
    CHECK(bucket_peek(&b, 10, 5, t0 + 3600ULL * 1000000, &wait) == 1);
    CHECK(b.tokens == 5.0);
    CHECK(bucket_idle(&b, 10, 5, t0 + 3600ULL * 1000000));
    bucket_take(&b);
    CHECK(!bucket_idle(&b, 10, 5, t0 + 3600ULL * 1000000));
    CHECK(bucket_idle(&b, 10, 5, t0 + 3600ULL * 1000000 + 100000));
    /* a clock going back refills nothing and breaks nothing */
    CHECK(bucket_peek(&b, 10, 5, t0, &wait) == 1);
    CHECK(b.tokens == 4.0);
}

static void test_bucket_wait_rounding(void)
{
    struct bucket b;
    uint64_t wait = 0, t0 = 5;

    /* 3/s: a token every 333333.33us; the wait is rounded up, and after
     * waiting exactly that long the token is there */
    bucket_init(&b, 1);
    CHECK(bucket_peek(&b, 3, 1, t0, &wait) == 1);
    bucket_take(&b);
    CHECK(bucket_peek(&b, 3, 1, t0, &wait) == 0);
    CHECK(wait == 333334);
    CHECK(bucket_peek(&b, 3, 1, t0 + 333333, &wait) == 0);
    CHECK(wait >= 1 && wait <= 2);
    CHECK(bucket_peek(&b, 3, 1, t0 + 333334, &wait) == 1);
    /* refills in many small steps add up to a hair under 1 in floating
     * point: the announced wait must still suffice */
    for (int rate = 1; rate < 3000; rate += 3) {
        for (int steps = 2; steps < 40; steps += 5) {
            uint64_t first = 0, now = 777;

            bucket_init(&b, 1);
            bucket_peek(&b, rate / 3.0, 1, now, &wait);
            bucket_take(&b);
            CHECK(bucket_peek(&b, rate / 3.0, 1, now, &first) == 0);
            for (int i = 1; i < steps; i++)
                bucket_peek(&b, rate / 3.0, 1, now + first * (uint64_t)i / (uint64_t)steps, &wait);
            CHECK(bucket_peek(&b, rate / 3.0, 1, now + first, &wait) == 1);
        }
    }
    /* for many rates, the announced wait always suffices and is > 0 */
    for (int rate = 1; rate < 2000; rate += 7) {
        uint64_t now = 123456789;

        bucket_init(&b, 1);
        for (int i = 0; i < 20; i++) {
            if (bucket_peek(&b, rate / 7.0, 1, now, &wait) == 1) {
                bucket_take(&b);
                continue;
            }
            CHECK(wait > 0);
            now += wait;
            CHECK(bucket_peek(&b, rate / 7.0, 1, now, &wait) == 1);
            bucket_take(&b);
        }
    }
}

/* Over T seconds of constant demand, a bucket admits burst + rate * T. */
static void test_bucket_admission_over_time(void)
{
    struct bucket b;
    uint64_t wait, t0 = 42;
    int admitted = 0;

    bucket_init(&b, 20);
    for (uint64_t t = 0; t <= 10 * 1000000ULL; t += 1000) {  /* a request every 1ms */
        if (bucket_peek(&b, 50, 20, t0 + t, &wait)) {
            bucket_take(&b);
            admitted++;
        }
    }
    CHECK(admitted >= 20 + 500 - 1 && admitted <= 20 + 500 + 1);
    CHECK(b.tokens < 1 && b.tokens >= 0);
}

/* Delayed requests reserve their token; each one waits one interval more. */
static void test_bucket_debt(void)
{
    struct bucket b;
    uint64_t t0 = 1000;

    bucket_init(&b, 1);
    CHECK(bucket_wait_us(&b, 10, 1, t0) == 0);
    bucket_take(&b);
    CHECK(bucket_wait_us(&b, 10, 1, t0) == 100000);
    bucket_take(&b);                        /* reserved: tokens -1 */
    CHECK(bucket_wait_us(&b, 10, 1, t0) == 200000);
    bucket_take(&b);
    CHECK(bucket_wait_us(&b, 10, 1, t0) == 300000);
    CHECK(b.tokens == -2.0);
    bucket_refund(&b, 1);                   /* the last one's client left */
    CHECK(bucket_wait_us(&b, 10, 1, t0) == 200000);
    /* 150ms later the debt is half paid */
    CHECK(bucket_wait_us(&b, 10, 1, t0 + 150000) == 50000);
    /* refund never fills above burst */
    CHECK(bucket_wait_us(&b, 10, 1, t0 + 10000000) == 0);
    bucket_refund(&b, 1);
    CHECK(b.tokens == 1.0);
}

static void test_same_params(void)
{
    const char *base = "[limit a]\nrate = 10/s\nburst = 5\ncommands = SET GET\nkeys = u:*\n";
    struct rule_set *x = load(base);
    struct rule_set *same = load("; moved and reformatted\n\n[limit a]\nkeys = u:*\n"
                                 "commands = set, Get\nburst = 5\nrate = 10/s\n");
    struct rule_set *other_rate = load("[limit a]\nrate = 11/s\nburst = 5\ncommands = SET GET\nkeys = u:*\n");
    struct rule_set *other_keys = load("[limit a]\nrate = 10/s\nburst = 5\ncommands = SET GET\nkeys = v:*\n");
    struct rule_set *other_name = load("[limit b]\nrate = 10/s\nburst = 5\ncommands = SET GET\nkeys = u:*\n");
    struct rule_set *other_mode = load("[limit a]\nrate = 10/s\nburst = 5\ncommands = SET GET\nkeys = u:*\nmode = dryrun\n");
    struct rule_set *no_keys = load("[limit a]\nrate = 10/s\nburst = 5\ncommands = SET GET\n");

    CHECK(x && same && other_rate && other_keys && other_name && other_mode && no_keys);
    if (x && same && other_rate && other_keys && other_name && other_mode && no_keys) {
        CHECK(rules_same_params(rules_get(x, 0), rules_get(x, 0)));
        CHECK(rules_same_params(rules_get(x, 0), rules_get(same, 0)));
        CHECK(!rules_same_params(rules_get(x, 0), rules_get(other_rate, 0)));
        CHECK(!rules_same_params(rules_get(x, 0), rules_get(other_keys, 0)));
        CHECK(!rules_same_params(rules_get(x, 0), rules_get(other_name, 0)));
        CHECK(!rules_same_params(rules_get(x, 0), rules_get(other_mode, 0)));
        CHECK(!rules_same_params(rules_get(x, 0), rules_get(no_keys, 0)));
        CHECK(!rules_same_params(rules_get(no_keys, 0), rules_get(x, 0)));
    }
    rules_free(x);
    rules_free(same);
    rules_free(other_rate);
    rules_free(other_keys);
    rules_free(other_name);
    rules_free(other_mode);
    rules_free(no_keys);
}

/* lease and lease_max: defaults (shared rules lease 200 ms of their rate,
 * at most burst / 8; local rules never), bounds, and that they make a
 * changed rule at reload. */
static void test_lease_keys(void)
{
    struct rule_set *rs = load("[limit s]\nrate = 100/s\nburst = 80\nscope = shared\n"
                               "[limit tiny]\nrate = 1/s\nburst = 3\nscope = shared\n"
                               "[limit l]\nrate = 100/s\n"
                               "[limit t]\nrate = 100/s\nburst = 80\nscope = shared\n"
                               "lease = 50ms\nlease_max = 80\n"
                               "[limit o]\nrate = 100/s\nscope = shared\nlease = OFF\n");
    struct rule_set *other = load("[limit s]\nrate = 100/s\nburst = 80\nscope = shared\n"
                                  "lease_max = 9\n");

    CHECK(rs != NULL && other != NULL);
    if (rs == NULL || other == NULL)
        return;
    CHECK(rules_get(rs, 0)->lease_us == RULES_DEFAULT_LEASE_US && rules_get(rs, 0)->lease_max == 10);
    CHECK(rules_get(rs, 1)->lease_max == 1);
    CHECK(rules_get(rs, 2)->lease_us == 0);
    CHECK(rules_get(rs, 3)->lease_us == 50000 && rules_get(rs, 3)->lease_max == 80);
    CHECK(rules_get(rs, 4)->lease_us == 0);
    CHECK(!rules_same_params(rules_get(rs, 0), rules_get(other, 0)));
    rules_free(rs);
    rules_free(other);
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nlease = 10ms\n", 3, "lease needs scope = shared");
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nlease_max = 1\n", 3,
                    "lease_max needs scope = shared");
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nscope = shared\nlease = 2s\n", 4,
                    "out of range");
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nscope = shared\nlease = 500us\n", 4,
                    "out of range");
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nburst = 4\nscope = shared\nlease_max = 5\n",
                    5, "lease_max (5) must not exceed burst (4)");
    expect_error_at(__LINE__, "[limit a]\nrate = 5/s\nscope = shared\nlease_max = -1\n", 4,
                    "lease_max");
}

UNIT_MAIN("rules",
          {"every key parsed", test_every_key},
          {"lease keys", test_lease_keys},
          {"defaults and fractional burst", test_per_client_default_and_fractional_burst},
          {"empty files", test_empty_files},
          {"BOM, CRLF, blanks in brackets", test_file_quirks},
          {"lists with spaces and commas", test_lists_spaces_and_commas},
          {"lists go on over indented lines", test_list_continuation_lines},
          {"errors carry FILE:LINE", test_errors_have_lines},
          {"missing file", test_missing_file},
          {"CIDR matching", test_cidr_matching},
          {"user and name globs", test_user_and_name_globs},
          {"commands and categories", test_commands_and_categories},
          {"key globs", test_key_globs},
          {"LOCK/UNLOCK/RENEW", test_sluice_verbs},
          {"glob", test_glob},
          {"glob_can_match", test_glob_can_match},
          {"bucket basics", test_bucket_basics},
          {"bucket wait rounding", test_bucket_wait_rounding},
          {"bucket admission over time", test_bucket_admission_over_time},
          {"bucket debt", test_bucket_debt},
          {"same params", test_same_params})
