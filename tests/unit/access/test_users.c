/* test_users.c - the users file (every error as FILE:LINE), passwords plain
 * and sha256, and command, key and channel grants checked against verdicts
 * a real Redis 7.0 gave (ACL DRYRUN, through tools/acl_cases.py). */
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "users.h"
#include "unit.h"

static char path[64];

#define SECRET_SHA256 "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"

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

    snprintf(path, sizeof(path), "/tmp/sluice-test-users-%d.ini", (int)getpid());
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Load TEXT as a users file; the set, or NULL with the errors printed. */
static struct user_set *load(const char *text)
{
    struct errlist errs = {0};
    struct user_set *set;

    init_commands_once();
    write_file(text);
    set = users_load(path, &errs);
    if (set == NULL)
        fprintf(stderr, "  unexpected errors:\n%s", errs.text ? errs.text : "(none)\n");
    errlist_free(&errs);
    unlink(path);
    return set;
}

/* TEXT must fail; its first error line must be exactly "PATH:LINE: MESSAGE". */
static void expect_error_at(int src_line, const char *text, int line, const char *message)
{
    struct errlist errs = {0};
    struct user_set *set;
    char want[512], got[512];

    init_commands_once();
    write_file(text);
    set = users_load(path, &errs);
    snprintf(want, sizeof(want), "%s:%d: %s", path, line, message);
    errlist_first(&errs, got, sizeof(got));
    if (set != NULL || strcmp(want, got) != 0) {
        fprintf(stderr, "%s:%d: expected \"%s\", got \"%s\"%s\n", __FILE__, src_line, want, got,
                set != NULL ? " and a user set" : "");
        unit_failed_checks++;
    }
    users_free(set);
    errlist_free(&errs);
    unlink(path);
}
#define expect_error(text, line, message) expect_error_at(__LINE__, text, line, message)

/* A request from a space-separated line (words point into a copy). */
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

/* A one-user set "[user u]" with nopass and the given keys' values. */
static struct user_set *one_user(const char *commands, const char *keys, const char *channels)
{
    char text[1024];
    int n = snprintf(text, sizeof(text), "[user u]\nnopass = yes\ncommands = %s\n", commands);

    if (keys != NULL)
        n += snprintf(text + n, sizeof(text) - (size_t)n, "keys = %s\n", keys);
    if (channels != NULL)
        snprintf(text + n, sizeof(text) - (size_t)n, "channels = %s\n", channels);
    return load(text);
}

static int may_run(const struct user *u, const char *line)
{
    struct req *r = req(line);
    return users_may_run(u, r->cmd, r->argv, r->argc);
}

static int may_keys(const struct user *u, const char *line)
{
    struct req *r = req(line);
    return users_may_access_keys(u, r->cmd, r->argc, r->argv);
}

static int may_channels(const struct user *u, const char *line)
{
    struct req *r = req(line);
    return users_may_access_channels(u, r->cmd, r->argc, r->argv);
}

/* ---- the file -------------------------------------------------------- */

static void test_example_file_loads(void)
{
    struct errlist errs = {0};
    struct user_set *set;
    const struct user *app, *rep, *admin;

    init_commands_once();
    set = users_load("conf/users.ini", &errs);
    if (set == NULL)
        fprintf(stderr, "  conf/users.ini:\n%s", errs.text ? errs.text : "(none)\n");
    CHECK(set != NULL);
    if (set == NULL)
        return;
    CHECK(users_count(set) == 3);
    CHECK(users_auth_required(set));        /* no "default" user in the example */
    app = users_find(set, "app", 3);
    rep = users_find(set, "reporting", 9);
    admin = users_find(set, "admin", 5);
    CHECK(app != NULL && rep != NULL && admin != NULL);
    if (app == NULL || rep == NULL || admin == NULL)
        goto out;
    CHECK(users_check_password(app, "app-secret", 10));
    CHECK(!users_check_password(app, "admin-secret", 12));
    CHECK(users_check_password(admin, "admin-secret", 12));
    CHECK(may_run(app, "set app:1 v") && may_keys(app, "set app:1 v"));
    CHECK(!may_keys(app, "set other v"));
    CHECK(!may_run(app, "flushall") && !may_run(app, "config get maxmemory"));
    CHECK(!may_run(app, "proxy reload") && may_run(app, "proxy ping"));
    CHECK(may_run(app, "lock app:l 1000"));
    CHECK(may_channels(app, "publish app.events.x m") && !may_channels(app, "publish x m"));
    CHECK(may_run(rep, "get k") && may_keys(rep, "get anything") && !may_run(rep, "set k v"));
    CHECK(may_run(rep, "ping") && !may_run(rep, "lock k 1000"));
    CHECK(!may_channels(rep, "subscribe c"));
    CHECK(may_run(admin, "proxy reload") && may_run(admin, "config set maxmemory 1"));
    CHECK(may_channels(admin, "psubscribe *") && may_keys(admin, "del a b c"));
out:
    users_free(set);
    errlist_free(&errs);
}

static void test_good_file(void)
{
    struct user_set *set = load("; users\n[user default]\nnopass = yes\ncommands = +get\n"
                                "[user ops]\npassword = secret ; inline comment\n"
                                "password = sha256:" SECRET_SHA256 "\nenabled = no\n"
                                "commands = +@all\n    -flushall\n    -@dangerous\n"
                                "keys = app:* ~tmp:*\n    other\nchannels = &news.* allchannels\n");
    const struct user *def, *ops;

    CHECK(set != NULL);
    if (set == NULL)
        return;
    CHECK(users_count(set) == 2);
    def = users_find(set, "default", 7);
    ops = users_find(set, "ops", 3);
    CHECK(def != NULL && ops != NULL);
    CHECK(users_find(set, "OPS", 3) == NULL);     /* names are case sensitive */
    CHECK(users_find(set, "op", 2) == NULL);
    CHECK(!users_auth_required(set));             /* default: nopass, enabled */
    CHECK_STR(users_name(ops), "ops");
    CHECK(users_nopass(def) && !users_nopass(ops));
    CHECK(users_enabled(def) && !users_enabled(ops));
    /* Continuation lines go on with the list, left to right. */
    CHECK(may_run(ops, "get k") && !may_run(ops, "flushall") && !may_run(ops, "config get x"));
    CHECK(may_keys(ops, "mset app:1 v tmp:2 v other v") && !may_keys(ops, "get others"));
    CHECK(may_channels(ops, "psubscribe any*"));
    users_free(set);
    CHECK(users_auth_required(NULL) == 0);
}

static void test_errors_have_lines(void)
{
    expect_error("[user a]\nnopass = yes\nbogus = 1\n", 3, "unknown key 'bogus' in [user a]");
    expect_error("[user a]\nnopass = yes\nnopass = yes\n", 3,
                 "duplicate key 'nopass' (first set on line 2)");
    expect_error("[user a]\nnopass = yes\nkeys = *\nkeys = a\n", 4,
                 "duplicate key 'keys' (first set on line 3)");
    expect_error("[user a]\nnopass = maybe\n", 2, "nopass: must be yes or no, not 'maybe'");
    expect_error("[user a]\nnopass = yes\nenabled = 1\n", 3, "enabled: must be yes or no, not '1'");
    expect_error("[user a]\nnopass = yes\n[user a]\nnopass = yes\n", 3,
                 "duplicate user 'a' (first on line 1)");
    expect_error("[user a]\nnopass = yes\n\n[user a]\n", 4,
                 "duplicate user 'a' (first on line 1)");
    expect_error("[limit a]\nrate = 1/s\n", 1, "unknown section [limit a] (expected [user NAME])");
    expect_error("[user]\nnopass = yes\n", 1, "unknown section [user] (expected [user NAME])");
    expect_error("[user a b]\nnopass = yes\n", 1,
                 "unknown section [user a b] (expected [user NAME])");
    expect_error("nopass = yes\n[user a]\nnopass = yes\n", 1,
                 "key 'nopass' outside a [user NAME] section");
    expect_error("[user a]\ncommands = +get\n", 1,
                 "user 'a' has no password (add password = ..., or nopass = yes)");
    expect_error("\n[user a]\n", 2, "user 'a' has no password (add password = ..., or nopass = yes)");
    expect_error("[user a]\npassword = x\nnopass = yes\n", 3,
                 "user 'a' has a password and nopass = yes: choose one");
    expect_error("[user a]\npassword =\n", 2,
                 "password: empty (for a user without a password, set nopass = yes)");
    expect_error("[user a]\npassword = sha256:abc\n", 2,
                 "password: sha256: needs exactly 64 hex digits");
    expect_error("[user a]\npassword = sha256:zzb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n", 2,
                 "password: sha256: needs exactly 64 hex digits");
    expect_error("[user a]\nnopass = yes\ncommands = +nosuch\n", 3,
                 "commands: unknown command 'nosuch'");
    expect_error("[user a]\nnopass = yes\ncommands = +config|nosuch\n", 3,
                 "commands: unknown command 'config|nosuch'");
    expect_error("[user a]\nnopass = yes\ncommands = +@nosuch\n", 3,
                 "commands: unknown ACL category '@nosuch'");
    expect_error("[user a]\nnopass = yes\ncommands = +get get\n", 3,
                 "commands: 'get': each item is +name, -name, +@category or -@category");
    expect_error("[user a]\nnopass = yes\ncommands = +select|0\n", 3,
                 "commands: 'select|0': first-argument rules are not supported (only "
                 "subcommands, like config|get)");
    expect_error("[user a]\nnopass = yes\ncommands = +get\n  +@bogus\n", 4,
                 "commands: unknown ACL category '@bogus'");
    expect_error("[user a]\nnopass = yes\nkeys = %R~foo\n", 3,
                 "keys: '%R~foo': read/write patterns (%R~, %W~) are not supported");
    expect_error("[user a]\nnopass = yes\nkeys = ~\n", 3, "keys: '~' without a pattern");
    expect_error("[user a]\nnopass = yes\nchannels = &\n", 3, "channels: '&' without a pattern");
    expect_error("[user a]\nnopass = yes\nenabled = yes\n  no\n", 4,
                 "enabled takes one value; only commands, keys and channels go on over lines");
    expect_error("[user a]\nnopass = yes\nthis is wrong\n", 3,
                 "syntax error: expected [section] or key = value");
}

static void test_all_errors_collected(void)
{
    struct errlist errs = {0};

    init_commands_once();
    write_file("[user a]\nbogus = 1\nnopass = yes\n[user b]\nnopass = x\ncommands = +nosuch\n");
    CHECK(users_load(path, &errs) == NULL);
    CHECK(errs.count == 4);     /* bogus, nopass, commands, and b without a password */
    errlist_free(&errs);
    unlink(path);
    CHECK(users_load("/nonexistent/users.ini", &errs) == NULL);
    CHECK(errs.count == 1 && strstr(errs.text, "/nonexistent/users.ini:0: cannot open") != NULL);
    errlist_free(&errs);
}

/* ---- passwords ------------------------------------------------------- */

static void test_passwords(void)
{
    struct user_set *set = load("[user plain]\npassword = secret\n"
                                "[user hashed]\npassword = sha256:" SECRET_SHA256 "\n"
                                "[user upper]\npassword = SHA256:2BB80D537B1DA3E38BD30361AA855686"
                                "BDE0EACD7162FEF6A25FE97BF527A25B\n"
                                "[user two]\npassword = first\npassword = second\n"
                                "[user open]\nnopass = yes\n"
                                "[user off]\npassword = secret\nenabled = no\n"
                                "[user offopen]\nnopass = yes\nenabled = no\n");
    const char *names[] = {"plain", "hashed", "upper"};

    CHECK(set != NULL);
    if (set == NULL)
        return;
    for (int i = 0; i < 3; i++) {
        const struct user *u = users_find(set, names[i], strlen(names[i]));
        CHECK(u != NULL && users_check_password(u, "secret", 6));
        CHECK(u != NULL && !users_check_password(u, "Secret", 6));
        CHECK(u != NULL && !users_check_password(u, "secret", 5));
        CHECK(u != NULL && !users_check_password(u, "secret!", 7));
        CHECK(u != NULL && !users_check_password(u, "", 0));
        /* The digest itself is not the password. */
        CHECK(u != NULL && !users_check_password(u, SECRET_SHA256, 64));
    }
    /* Every stored digest is compared: the second one matches too. */
    const struct user *two = users_find(set, "two", 3);
    CHECK(users_check_password(two, "first", 5) && users_check_password(two, "second", 6));
    CHECK(!users_check_password(two, "third", 5));
    /* Passwords are bytes: a NUL inside counts. */
    CHECK(!users_check_password(two, "first\0", 6));
    CHECK(users_check_password(users_find(set, "open", 4), "anything", 8));
    CHECK(users_check_password(users_find(set, "open", 4), "", 0));
    /* A disabled user never logs in, with or without a password. */
    CHECK(!users_check_password(users_find(set, "off", 3), "secret", 6));
    CHECK(!users_check_password(users_find(set, "offopen", 7), "x", 1));
    CHECK(!users_check_password(NULL, "secret", 6));
    users_free(set);
}

static void test_auth_required(void)
{
    struct user_set *set;

    set = load("[user default]\npassword = x\n");
    CHECK(set != NULL && users_auth_required(set));
    users_free(set);
    set = load("[user default]\nnopass = yes\nenabled = no\n");
    CHECK(set != NULL && users_auth_required(set));
    users_free(set);
    set = load("[user other]\nnopass = yes\n");
    CHECK(set != NULL && users_auth_required(set));
    users_free(set);
    set = load("[user default]\nnopass = yes\n");
    CHECK(set != NULL && !users_auth_required(set));
    users_free(set);
}

/* ---- grants: verdicts of Redis 7.0 (tools/acl_cases.py) --------------- */

struct acl_case {
    const char *grant;
    const char *request;
    int allowed;
};

/* commands = GRANT (keys and channels: all); Redis's ACL DRYRUN said ALLOWED. */
static const struct acl_case cmd_cases[] = {
    {"+@all", "get k", 1},
    {"+@all", "config set maxmemory 1", 1},
    {"+@all -@dangerous", "config get maxmemory", 0},
    {"+@all -@dangerous", "flushall", 0},
    {"+@all -@dangerous", "keys *", 0},
    {"+@all -@dangerous", "get k", 1},
    {"+@all -@dangerous", "client id", 1},
    {"+@all -@dangerous", "client kill id 1", 0},
    {"+@all -@dangerous", "debug sleep 0", 0},
    {"+@all -@dangerous", "eval return 0", 1},
    {"+@read", "get k", 1},
    {"+@read", "set k v", 0},
    {"+@read", "hgetall h", 1},
    {"+@read", "object encoding k", 1},
    {"+@read", "memory usage k", 1},
    {"+@read", "scan 0", 1},
    {"+@read", "ping", 0},
    {"+@read", "info", 0},
    {"+@read", "xread streams s 0", 1},
    {"+@read", "sort k", 0},
    {"+@read", "sort_ro k", 1},
    {"+get", "get k", 1},
    {"+get", "mget k", 0},
    {"+get", "getex k", 0},
    {"+config", "config get maxmemory", 1},
    {"+config", "config set maxmemory 1", 1},
    {"+config|get", "config get maxmemory", 1},
    {"+config|get", "config set maxmemory 1", 0},
    {"+config -config|set", "config get maxmemory", 1},
    {"+config -config|set", "config set maxmemory 1", 0},
    {"+config|get -config", "config get maxmemory", 0},
    {"+@all -config", "config get maxmemory", 0},
    {"+@all -config", "get k", 1},
    {"+@all -config +config|get", "config get maxmemory", 1},
    {"+@all -config +config|get", "config resetstat", 0},
    {"+@slow", "config get maxmemory", 1},
    {"+@slow", "client id", 1},
    {"+@slow", "get k", 0},
    {"+@slow", "keys *", 1},
    {"+@fast", "get k", 1},
    {"+@fast", "client id", 0},
    {"+@all -@slow", "client id", 0},
    {"+@all -@slow", "config get x", 0},
    {"+@all -@slow", "get k", 1},
    {"+@all -@slow +client|id", "client id", 1},
    {"+@connection", "client id", 1},
    {"+@connection", "client setname n", 1},
    {"+@connection", "ping", 1},
    {"+@connection", "echo x", 1},
    {"+@connection", "select 0", 1},
    {"+@admin", "config get x", 1},
    {"+@admin", "get k", 0},
    {"+@admin", "client kill id 1", 1},
    {"+@admin", "client list", 1},
    {"+@admin", "acl whoami", 0},
    {"+@admin", "acl setuser x", 1},
    {"+@admin -@dangerous", "config get x", 0},
    {"+@write", "set k v", 1},
    {"+@write", "get k", 0},
    {"+@write", "del k", 1},
    {"+@write -del", "del k", 0},
    {"+@write -del", "unlink k", 1},
    {"+@keyspace", "del k", 1},
    {"+@keyspace", "type k", 1},
    {"+@keyspace", "get k", 0},
    {"+@pubsub", "publish c m", 1},
    {"+@pubsub", "subscribe c", 1},
    {"+@pubsub", "pubsub channels", 1},
    {"+@pubsub", "get k", 0},
    {"+@scripting", "eval return 0", 1},
    {"+@scripting", "evalsha abc 0", 1},
    {"+@scripting", "script load x", 1},
    {"+@scripting", "function list", 1},
    {"+@transaction", "multi", 1},
    {"+@transaction", "exec", 1},
    {"+@transaction", "watch k", 1},
    {"+@string", "append k v", 1},
    {"+@string", "lpush k v", 0},
    {"+@hash", "hset h f v", 1},
    {"+@list", "blpop k 0", 1},
    {"+@blocking", "blpop k 0", 1},
    {"+@blocking", "lpop k", 0},
    {"+@stream", "xadd s * f v", 1},
    {"+@geo", "geoadd g 1 1 m", 1},
    {"+@hyperloglog", "pfadd h a", 1},
    {"+@bitmap", "setbit k 1 1", 1},
    {"+@set", "sadd s m", 1},
    {"+@sortedset", "zadd z 1 m", 1},
    {"+@all -@all", "get k", 0},
    {"+@all -@all +get", "get k", 1},
    {"+@all -@all +get", "set k v", 0},
    {"-@all +@read -@read", "get k", 0},
    {"+@read -get", "get k", 0},
    {"+@read -get", "mget k", 1},
    {"-get +get", "get k", 1},
    {"+client|id +client|info", "client info", 1},
    {"+client|id +client|info", "client list", 0},
    {"+client", "client list", 1},
    {"+client -client|kill", "client kill id 1", 0},
    {"+client -client|kill", "client id", 1},
    {"+object|encoding", "object encoding k", 1},
    {"+object|encoding", "object freq k", 0},
    {"+command", "command", 1},
    {"+command", "command count", 1},
    {"+command|count", "command", 0},
    {"+command|count", "command count", 1},
    {"+@read", "auth pw", 1},
    {"+@read", "hello", 1},
    {"+@read", "quit", 1},
    {"+@read", "reset", 1},
    {"+get", "auth pw", 1},
};

/* keys = GRANT (commands +@all); Redis's verdict on the request's keys. */
static const struct acl_case key_cases[] = {
    {"*", "get anything", 1},
    {"app:*", "get app:1", 1},
    {"app:*", "get other", 0},
    {"app:*", "mset app:1 v app:2 v", 1},
    {"app:*", "mset app:1 v other v", 0},
    {"app:*", "del app:1 app:2 app:3", 1},
    {"app:*", "del app:1 x app:3", 0},
    {"app:*", "eval s 2 app:1 app:2 other", 1},
    {"app:*", "eval s 2 app:1 other app:3", 0},
    {"app:*", "eval s 0 other", 1},
    {"app:*", "ping", 1},
    {"app:*", "publish other m", 1},
    {"app:* tmp:?", "rename app:1 tmp:1", 1},
    {"app:* tmp:?", "rename app:1 tmp:12", 0},
    {"app:*", "sort app:1 store other", 0},
    {"app:*", "sort app:1 store app:2", 1},
    {"app:*", "zunionstore app:d 2 app:1 other", 0},
    {"app:*", "xread streams app:s other 0 0", 0},
    {"app:*", "blmove app:1 app:2 left right 0", 1},
    {"app:*", "lmove app:1 other left right", 0},
    {"app:*", "object encoding other", 0},
    {"app:*", "spublish other m", 1},
    {"a[bc]d", "get abd", 1},
    {"a[bc]d", "get aed", 0},
    {"h?llo", "get hello", 1},
    {"h\\*", "get h*", 1},
    {"h\\*", "get hx", 0},
    {"app:*", "eval s 5 app:1", 1},
    {"app:*", "eval s 1", 1},
    {"app:*", "eval s x other", 1},
    {"app:*", "migrate h 1 other 0 10", 0},
    {"app:*", "sort app:1 by other", 1},
    {"app:*", "georadius app:g 0 0 1 km store other", 0},
    {"app:*", "xreadgroup group g c streams app:1 other 0 0", 0},
    {"app:*", "lmpop 2 app:1 other left", 0},
    {"app:*", "zrangestore other app:1 0 1", 0},
    {"app:*", "memory usage other", 0},
    {"app:*", "bitop and app:d app:1 other", 0},
    {"app:*", "pfcount app:1 other", 0},
    {"app:*", "exists other", 0},
    {"app:*", "object help", 1},
};

/* channels = GRANT (commands +@all); Redis's verdict on its channels. */
static const struct acl_case chan_cases[] = {
    {"*", "subscribe anything", 1},
    {"news.*", "publish news.sport m", 1},
    {"news.*", "publish other m", 0},
    {"news.*", "subscribe news.a news.b", 1},
    {"news.*", "subscribe news.a other", 0},
    {"news.*", "psubscribe news.*", 1},
    {"news.*", "psubscribe news.sp*", 0},
    {"news.sport", "psubscribe news.*", 0},
    {"news.*", "spublish news.a m", 1},
    {"news.*", "spublish other m", 0},
    {"news.*", "ssubscribe news.a other", 0},
    {"news.*", "unsubscribe other", 1},
    {"news.*", "punsubscribe other", 1},
    {"news.*", "get k", 1},
    {"news.* other", "psubscribe other", 1},
};

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

static void run_cases(const struct acl_case *cases, size_t n, int kind)
{
    for (size_t i = 0; i < n; i++) {
        const struct acl_case *c = &cases[i];
        struct user_set *set = kind == 0 ? one_user(c->grant, "*", "*")
                             : kind == 1 ? one_user("+@all", c->grant, "*")
                                         : one_user("+@all", "*", c->grant);
        const struct user *u = set != NULL ? users_find(set, "u", 1) : NULL;
        int got = -1;

        if (u != NULL) {
            got = kind == 0 ? may_run(u, c->request)
                : kind == 1 ? may_keys(u, c->request) && may_run(u, c->request)
                            : may_channels(u, c->request);
        }
        if (got != c->allowed) {
            fprintf(stderr, "%s:%d: grant \"%s\", request \"%s\": Redis says %d, we say %d\n",
                    __FILE__, __LINE__, c->grant, c->request, c->allowed, got);
            unit_failed_checks++;
        }
        users_free(set);
    }
}

static void test_commands_as_redis(void)
{
    run_cases(cmd_cases, N_CASES(cmd_cases), 0);
}

static void test_keys_as_redis(void)
{
    run_cases(key_cases, N_CASES(key_cases), 1);
}

static void test_channels_as_redis(void)
{
    run_cases(chan_cases, N_CASES(chan_cases), 2);
}

/* ---- grants Redis cannot tell us about ------------------------------- */

static void test_sluice_verbs(void)
{
    static const struct acl_case cases[] = {
        {"+@all", "lock k 1000", 1}, {"+@all", "proxy reload", 1},
        {"+@all -@dangerous", "lock k 1000", 1}, {"+@all -@dangerous", "proxy info", 0},
        {"+@all -@dangerous", "proxy ping", 1}, {"+@all -lock", "lock k 1000", 0},
        {"+@all -lock", "unlock k", 1}, {"+@all -@lock", "renew k 1", 0},
        {"+@read", "lock k 1000", 0}, {"+@write", "unlock k", 0},
        {"+@lock", "lock k 1000", 1}, {"+@lock", "UNLOCK k", 1}, {"+@lock", "renew k 1", 1},
        {"+@lock", "get k", 0}, {"+lock", "lock k 1", 1}, {"+lock", "renew k 1", 0},
        {"+@read", "proxy ping", 1}, {"+@read", "PROXY PING", 1}, {"+@read", "proxy help", 1},
        {"+@read", "proxy info", 0}, {"+@read", "proxy rules", 0},
        {"+@read", "proxy reload", 0}, {"+@admin", "proxy info", 1},
        {"+@admin", "proxy rules", 1}, {"+@admin", "proxy reload", 1},
        {"+@admin -proxy|reload", "proxy reload", 0}, {"+@admin -proxy|reload", "proxy info", 1},
        {"+proxy|info", "proxy info", 1}, {"+proxy|info", "proxy rules", 0},
        {"+proxy|rules", "proxy rules", 1}, {"+proxy|reload", "Proxy Reload", 1},
        {"+proxy", "proxy reload", 1}, {"+@all -proxy", "proxy info", 0},
        {"+@all -proxy", "proxy ping", 1},
        /* sluice answers PROXY's own errors itself. */
        {"+get", "proxy", 1}, {"+get", "proxy nosuch", 1},
        /* Commands sluice does not know (a module's): only with +@all. */
        {"+@all", "mymod.cmd x", 1}, {"+@all -get", "mymod.cmd x", 0},
        {"+@read", "mymod.cmd x", 0}, {"allcommands", "mymod.cmd x", 1},
        {"allcommands nocommands", "get k", 0}, {"+@all -@all +@all", "mymod.cmd", 1},
        /* Errors Redis gives before its ACL check pass through to Redis. */
        {"+get", "config nosuch", 1}, {"+get", "config", 1}, {"+get", "set k", 1},
        /* A verb's name with '|' is no verb: an unknown command. */
        {"+lock +proxy", "lock|x k", 0}, {"+lock +proxy", "proxy|info", 0},
    };

    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct user_set *set = one_user(cases[i].grant, "*", "*");
        const struct user *u = set != NULL ? users_find(set, "u", 1) : NULL;
        int got = u != NULL ? may_run(u, cases[i].request) : -1;

        if (got != cases[i].allowed) {
            fprintf(stderr, "%s:%d: grant \"%s\", request \"%s\": want %d, got %d\n", __FILE__,
                    __LINE__, cases[i].grant, cases[i].request, cases[i].allowed, got);
            unit_failed_checks++;
        }
        users_free(set);
    }
}

static void test_defaults_are_none(void)
{
    struct user_set *set = load("[user u]\nnopass = yes\n");
    const struct user *u = set != NULL ? users_find(set, "u", 1) : NULL;

    CHECK(u != NULL);
    if (u == NULL)
        return;
    CHECK(!may_run(u, "get k") && !may_run(u, "ping") && !may_run(u, "lock k 1"));
    CHECK(may_run(u, "auth x") && may_run(u, "hello 3") && may_run(u, "quit"));
    CHECK(!may_keys(u, "get k") && may_keys(u, "ping"));
    CHECK(!may_channels(u, "subscribe c") && may_channels(u, "unsubscribe c"));
    CHECK(users_may_access_key(u, "k", 1) == 0);
    users_free(set);
}

static void test_keys_many(void)
{
    static char line[40000];
    struct user_set *set = one_user("+@all", "app:*", NULL);
    const struct user *u = set != NULL ? users_find(set, "u", 1) : NULL;
    size_t n = 0;
    struct req *r;

    CHECK(u != NULL);
    if (u == NULL)
        return;
    /* More keys than the checker keeps on its stack; the last one is out. */
    n += (size_t)snprintf(line, sizeof(line), "del");
    for (int i = 0; i < 400; i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " app:%d", i);
    r = req(line);
    CHECK(r->argc == 401 && users_may_access_keys(u, r->cmd, r->argc, r->argv));
    snprintf(line + n, sizeof(line) - n, " other");
    r = req(line);
    CHECK(r->argc == 402 && !users_may_access_keys(u, r->cmd, r->argc, r->argv));
    CHECK(users_may_access_key(u, "app:x", 5) && !users_may_access_key(u, "apx", 3));
    users_free(set);
}

/* SORT's BY (with a '*') and GET read keys no key spec names: refused, as
 * Redis 7.0 does, to a user without every key; parsing stops where Redis's
 * own parsing fails first. */
static void test_sort_options(void)
{
    static const struct {
        const char *request;
        const char *denied;     /* NULL: allowed */
    } cases[] = {
        {"sort app:l", NULL},
        {"sort app:l by nosort", NULL},
        {"sort app:l by w_*", "BY"},
        {"sort app:l get #", "GET"},
        {"sort_ro app:l GET secret_*", "GET"},
        {"sort app:l limit 0 1 alpha desc get x", "GET"},
        {"sort app:l limit x 1 get x", NULL},          /* Redis: not an integer */
        {"sort app:l limit 01 1 get x", NULL},         /* string2ll refuses 01 */
        {"sort app:l nosuch get x", NULL},             /* Redis: syntax error */
        {"sort app:l get", NULL},                      /* GET without a pattern */
        {"sort app:l store app:d get x", "GET"},
        {"sort_ro app:l store app:d get x", NULL},     /* SORT_RO has no STORE */
        {"get app:l", NULL},
    };
    struct user_set *limited = one_user("+@all", "app:*", "*");
    struct user_set *all = one_user("+@all", "*", "*");
    const struct user *u = limited != NULL ? users_find(limited, "u", 1) : NULL;
    const struct user *a = all != NULL ? users_find(all, "u", 1) : NULL;

    CHECK(u != NULL && a != NULL);
    for (size_t i = 0; u != NULL && a != NULL && i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct req *r = req(cases[i].request);
        const char *got = users_sort_denied_option(u, r->cmd, r->argc, r->argv);
        if ((got == NULL) != (cases[i].denied == NULL) ||
            (got != NULL && strcmp(got, cases[i].denied) != 0)) {
            fprintf(stderr, "%s:%d: \"%s\": want %s, got %s\n", __FILE__, __LINE__,
                    cases[i].request, cases[i].denied ? cases[i].denied : "allowed",
                    got ? got : "allowed");
            unit_failed_checks++;
        }
        CHECK(users_sort_denied_option(a, r->cmd, r->argc, r->argv) == NULL);
    }
    users_free(limited);
    users_free(all);
}

/* A reload narrows a user when any grant of the old one is gone. */
static void test_narrowed(void)
{
    static const struct {
        const char *old_commands, *old_keys, *old_channels;
        const char *new_commands, *new_keys, *new_channels;
        int narrowed;
    } cases[] = {
        {"+@all", "*", "*", "+@all", "*", "*", 0},
        {"+@all", "app:*", "news.*", "+@all", "app:* tmp:*", "news.* x", 0},
        {"+@all", "*", "*", "+@all", "app:*", "*", 1},
        {"+@all", "app:*", "*", "+@all", "tmp:*", "*", 1},
        {"+@all", "*", "news.*", "+@all", "*", "sport.*", 1},
        {"+@all", "*", "*", "+@all -flushall", "*", "*", 1},
        {"+get +set", "*", "*", "+get", "*", "*", 1},
        {"+get", "*", "*", "+get +set", "*", "*", 0},
        {"+@all", "*", "*", "+@all -proxy", "*", "*", 1},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct user_set *o = one_user(cases[i].old_commands, cases[i].old_keys,
                                      cases[i].old_channels);
        struct user_set *n = one_user(cases[i].new_commands, cases[i].new_keys,
                                      cases[i].new_channels);
        const struct user *ou = o != NULL ? users_find(o, "u", 1) : NULL;
        const struct user *nu = n != NULL ? users_find(n, "u", 1) : NULL;

        CHECK(ou != NULL && nu != NULL);
        if (ou != NULL && nu != NULL && users_narrowed(ou, nu) != cases[i].narrowed) {
            fprintf(stderr, "%s:%d: case %zu: want %d\n", __FILE__, __LINE__, i,
                    cases[i].narrowed);
            unit_failed_checks++;
        }
        users_free(o);
        users_free(n);
    }
}

static void test_denied_names(void)
{
    char buf[128];
    struct req *r;

    init_commands_once();
    r = req("CONFIG SET maxmemory 1");
    CHECK_STR(users_denied_command_name(r->cmd), "config|set");
    CHECK_STR(users_denied_name(r->cmd, r->argc, r->argv, buf, sizeof(buf)), "config|set");
    r = req("GET k");
    CHECK_STR(users_denied_command_name(r->cmd), "get");
    r = req("LOCK k 1000");
    CHECK(r->cmd == NULL);
    CHECK_STR(users_denied_name(r->cmd, r->argc, r->argv, buf, sizeof(buf)), "lock");
    r = req("Proxy RELOAD");
    CHECK_STR(users_denied_name(r->cmd, r->argc, r->argv, buf, sizeof(buf)), "proxy|reload");
    r = req("MyMod.Cmd x");
    CHECK_STR(users_denied_name(r->cmd, r->argc, r->argv, buf, 6), "mymod");
    snprintf(buf, sizeof(buf), USERS_ERR_NOPERM_CMD_FMT, "config|set");
    CHECK_STR(buf, "-NOPERM this user has no permissions to run the 'config|set' command");
    CHECK_STR(USERS_ERR_WRONGPASS, "-WRONGPASS invalid username-password pair or user is "
                                   "disabled.");
    CHECK_STR(USERS_ERR_NOAUTH, "-NOAUTH Authentication required.");
}

/* users_in_redis: U's rules as ACL SETUSER items (RESP bulks, sluice's
 * own items left out), and which users need a Redis user at all. */
static void check_redis_rules(const char *commands, const char *keys, const char *channels,
                              int want_count, const char *want)
{
    struct user_set *set = one_user(commands, keys, channels);
    struct evbuffer *out = evbuffer_new();
    size_t len;
    char *got;

    CHECK(set != NULL);
    CHECK(users_redis_rules(users_at(set, 0), out) == want_count);
    len = evbuffer_get_length(out);
    got = (char *)evbuffer_pullup(out, -1);
    CHECK(len == strlen(want) && memcmp(got, want, len) == 0);
    evbuffer_free(out);
    users_free(set);
}

static void test_redis_rules(void)
{
    struct user_set *set;

    init_commands_once();
    check_redis_rules("+@all -@dangerous +@lock -proxy|info -lock", "app:* ~b:?", NULL, 7,
                      "$10\r\nnocommands\r\n$5\r\n+@all\r\n$11\r\n-@dangerous\r\n"
                      "$9\r\nresetkeys\r\n$6\r\n~app:*\r\n$4\r\n~b:?\r\n"
                      "$13\r\nresetchannels\r\n");
    check_redis_rules("allcommands", "*", "news.* &x", 7,
                      "$10\r\nnocommands\r\n$11\r\nallcommands\r\n$9\r\nresetkeys\r\n"
                      "$7\r\nallkeys\r\n$13\r\nresetchannels\r\n$7\r\n&news.*\r\n"
                      "$2\r\n&x\r\n");
    set = one_user("+@all -flushall", "*", "*");   /* may run scripts, lacks FLUSHALL */
    CHECK(users_scripts_in_redis(users_at(set, 0)));
    users_free(set);
    set = one_user("+@all", "*", "*");   /* may do everything: no Redis user */
    CHECK(!users_scripts_in_redis(users_at(set, 0)));
    users_free(set);
    set = one_user("+@read", "app:*", NULL);   /* may run no script */
    CHECK(!users_scripts_in_redis(users_at(set, 0)));
    users_free(set);
    set = one_user("+@read +evalsha", "app:*", NULL);
    CHECK(users_scripts_in_redis(users_at(set, 0)));
    users_free(set);
}

UNIT_MAIN("users", {"example_file_loads", test_example_file_loads},
          {"good_file", test_good_file}, {"errors_have_lines", test_errors_have_lines},
          {"all_errors_collected", test_all_errors_collected}, {"passwords", test_passwords},
          {"auth_required", test_auth_required},
          {"commands_as_redis", test_commands_as_redis},
          {"keys_as_redis", test_keys_as_redis}, {"channels_as_redis", test_channels_as_redis},
          {"sluice_verbs", test_sluice_verbs}, {"defaults_are_none", test_defaults_are_none},
          {"keys_many", test_keys_many}, {"denied_names", test_denied_names},
          {"sort_options", test_sort_options}, {"narrowed", test_narrowed},
          {"redis_rules", test_redis_rules})
