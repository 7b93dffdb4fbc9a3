/* test_commands.c - the command table: lookup, subcommands, flags and ACL
 * categories, and key positions for every kind of key spec, malformed
 * requests included. Expected keys agree with redis-server 7.0's
 * COMMAND GETKEYS wherever that answers. */
#include <stdlib.h>

#include "commands.h"
#include "unit.h"

#define MAX_ARGS 64

/* Split LINE at spaces into views of a static copy; the word "" stands for
 * an empty argument. Returns argc. */
static int split(const char *line, struct sv *argv)
{
    static char copy[1024];
    int argc = 0;
    char *p = copy;

    snprintf(copy, sizeof(copy), "%s", line);
    while (*p != '\0' && argc < MAX_ARGS) {
        char *end = strchr(p, ' ');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        argv[argc].ptr = p;
        argv[argc].len = len == 2 && p[0] == '"' && p[1] == '"' ? 0 : len;
        argc++;
        p += len;
        while (*p == ' ')
            p++;
    }
    return argc;
}

/* The key positions of the request LINE, at most MAX, as "1 3 5" ("" for
 * none, "?" when the command is unknown). */
static const char *keys_max(const char *line, int max)
{
    static char out[512];
    struct sv argv[MAX_ARGS];
    int keys[MAX_ARGS], argc = split(line, argv);
    const struct command *cmd = commands_resolve(argc, argv);
    size_t o = 0;

    if (cmd == NULL)
        return "?";
    int n = commands_keys(cmd, argc, argv, keys, max);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, i ? " %d" : "%d", keys[i]);
    return out;
}

static const char *keys_of(const char *line)
{
    return keys_max(line, MAX_ARGS);
}

/* The name of the entry LINE resolves to, or "?" when it is unknown. */
static const char *resolved(const char *line)
{
    struct sv argv[MAX_ARGS];
    int argc = split(line, argv);
    const struct command *cmd = commands_resolve(argc, argv);
    return cmd != NULL ? cmd->name : "?";
}

static const struct command *lookup(const char *name)
{
    return commands_lookup(name, strlen(name));
}

static void test_table_ids(void)
{
    CHECK(commands_count() > 300);
    for (int id = 0; id < commands_count(); id++) {
        const struct command *cmd = commands_by_id(id);
        CHECK(cmd != NULL && cmd->id == id);
    }
    CHECK(commands_by_id(-1) == NULL);
    CHECK(commands_by_id(commands_count()) == NULL);
}

static void test_lookup_case_insensitive(void)
{
    const struct command *get = lookup("get");
    CHECK(get != NULL);
    CHECK_STR(get->name, "get");
    CHECK(lookup("GET") == get);
    CHECK(lookup("gEt") == get);
    CHECK_STR(lookup("ZRANGEBYSCORE")->name, "zrangebyscore");
    CHECK_STR(lookup("Georadius_RO")->name, "georadius_ro");
    CHECK(commands_lookup("getx", 3) == get);
}

static void test_lookup_unknown(void)
{
    CHECK(lookup("") == NULL);
    CHECK(commands_lookup(NULL, 0) == NULL);
    CHECK(lookup("ge") == NULL);
    CHECK(lookup("gett") == NULL);
    CHECK(lookup("get ") == NULL);
    CHECK(commands_lookup("get\0", 4) == NULL);
    CHECK(lookup("nosuchcommand") == NULL);
    CHECK(lookup("client|setname") == NULL); /* subcommands are not top level */
    CHECK(lookup("setname") == NULL);
    char big[4096];
    memset(big, 'a', sizeof(big));
    CHECK(commands_lookup(big, sizeof(big)) == NULL);
}

static void test_every_entry_is_found(void)
{
    for (int id = 0; id < commands_count(); id++) {
        const struct command *cmd = commands_by_id(id);
        char line[128], *bar;
        snprintf(line, sizeof(line), "%s", cmd->name);
        for (char *c = line; *c != '\0'; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        bar = strchr(line, '|');
        if (bar == NULL) {
            CHECK(lookup(line) == cmd);
        } else {
            *bar = ' ';
            if (strcmp(resolved(line), cmd->name) != 0) {
                fprintf(stderr, "\"%s\" resolved to %s\n", line, resolved(line));
                CHECK(0);
            }
        }
    }
}

static void test_subcommands(void)
{
    CHECK_STR(resolved("CLIENT SETNAME x"), "client|setname");
    CHECK_STR(resolved("client setname x"), "client|setname");
    CHECK_STR(resolved("CONFIG GET maxmemory"), "config|get");
    CHECK_STR(resolved("config Set maxmemory 1"), "config|set");
    CHECK_STR(resolved("XINFO STREAM s FULL"), "xinfo|stream");
    CHECK_STR(resolved("OBJECT ENCODING k"), "object|encoding");
    CHECK_STR(resolved("SCRIPT LOAD return"), "script|load");
    CHECK_STR(resolved("CLUSTER KEYSLOT k"), "cluster|keyslot");
    CHECK_STR(resolved("CLIENT NO-EVICT on"), "client|no-evict");
    /* Unknown or missing subcommand: the container itself. */
    CHECK_STR(resolved("CLIENT"), "client");
    CHECK_STR(resolved("CLIENT NOSUCH"), "client");
    CHECK_STR(resolved("CLIENT ''"), "client");
    CHECK_STR(resolved("CLIENT SETNAMEX"), "client");
    /* No subcommands: argv[1] is not looked at. */
    CHECK_STR(resolved("GET client"), "get");
    CHECK_STR(resolved("SET setname x"), "set");
    /* Unknown command, or a subcommand's name in argv[0]. */
    CHECK_STR(resolved("NOSUCH SETNAME"), "?");
    CHECK_STR(resolved("CLIENT|SETNAME x"), "?");
    CHECK_STR(resolved("SETNAME x"), "?");
    CHECK(commands_resolve(0, NULL) == NULL);
    const struct command *client = lookup("client");
    CHECK(client != NULL && client->subcommand_count >= 10);
}

static void test_arity(void)
{
    CHECK(lookup("get")->arity == 2);
    CHECK(lookup("set")->arity == -3);
    CHECK(lookup("mset")->arity == -3);
    CHECK(lookup("ping")->arity == -1);
    CHECK_STR(resolved("client setname x"), "client|setname");
    struct sv argv[3] = {{"client", 6}, {"setname", 7}, {"x", 1}};
    CHECK(commands_resolve(3, argv)->arity == 3);
}

static void test_flags(void)
{
    const struct command *get = lookup("get"), *set = lookup("set");
    CHECK(get->flags == (CMD_READONLY | CMD_FAST));
    CHECK((set->flags & (CMD_WRITE | CMD_DENYOOM)) == (CMD_WRITE | CMD_DENYOOM));
    CHECK(!(set->flags & CMD_READONLY));
    CHECK(lookup("blpop")->flags & CMD_BLOCKING);
    CHECK(!(lookup("lpop")->flags & CMD_BLOCKING));
    CHECK(lookup("subscribe")->flags & CMD_PUBSUB);
    CHECK(lookup("eval")->flags & CMD_MOVABLEKEYS);
    CHECK(lookup("eval")->flags & CMD_NOSCRIPT);
    CHECK(lookup("eval")->flags & CMD_NO_MANDATORY_KEYS);
    CHECK(lookup("auth")->flags & CMD_NO_AUTH);
    CHECK(lookup("multi")->flags & CMD_ALLOW_BUSY);
    CHECK(lookup("shutdown")->flags & CMD_ADMIN);
    CHECK(!(lookup("get")->flags & CMD_MOVABLEKEYS));
}

static void test_acl_categories_of_commands(void)
{
    CHECK(lookup("get")->acl_categories == (ACL_READ | ACL_STRING | ACL_FAST));
    CHECK(lookup("set")->acl_categories == (ACL_WRITE | ACL_STRING | ACL_SLOW));
    CHECK(lookup("blpop")->acl_categories & ACL_BLOCKING);
    CHECK(lookup("subscribe")->acl_categories & ACL_PUBSUB);
    CHECK(lookup("del")->acl_categories & ACL_KEYSPACE);
    CHECK(lookup("eval")->acl_categories & ACL_SCRIPTING);
    CHECK(lookup("flushall")->acl_categories & ACL_DANGEROUS);
    CHECK(lookup("zadd")->acl_categories & ACL_SORTEDSET);
}

static void test_acl_category_names(void)
{
    CHECK(commands_acl_category("write", 5) == ACL_WRITE);
    CHECK(commands_acl_category("keyspace", 8) == ACL_KEYSPACE);
    CHECK(commands_acl_category("READ", 4) == ACL_READ);
    CHECK(commands_acl_category("SortedSet", 9) == ACL_SORTEDSET);
    CHECK(commands_acl_category("scripting", 9) == ACL_SCRIPTING);
    CHECK(commands_acl_category("@write", 6) == 0);
    CHECK(commands_acl_category("writes", 6) == 0);
    CHECK(commands_acl_category("writes", 4) == 0);
    CHECK(commands_acl_category("", 0) == 0);
    CHECK(commands_acl_category(NULL, 0) == 0);
    CHECK(commands_acl_category("all", 3) == 0);
}

static void test_keys_index_range(void)
{
    CHECK_STR(keys_of("GET foo"), "1");
    CHECK_STR(keys_of("get foo"), "1");
    CHECK_STR(keys_of("SET k v EX 10"), "1");
    CHECK_STR(keys_of("MGET a b c"), "1 2 3");
    CHECK_STR(keys_of("DEL a b"), "1 2");
    CHECK_STR(keys_of("MSET a 1 b 2 c 3"), "1 3 5");
    CHECK_STR(keys_of("MSETNX a 1 b 2"), "1 3");
    CHECK_STR(keys_of("RENAME a b"), "1 2");
    CHECK_STR(keys_of("SMOVE src dst m"), "1 2");
    CHECK_STR(keys_of("BITOP AND dst a b"), "2 3 4");
    CHECK_STR(keys_of("BLPOP a b 0"), "1 2");
    CHECK_STR(keys_of("PING"), "");
    CHECK_STR(keys_of("NOSUCH a"), "?");
}

static void test_keys_keynum(void)
{
    CHECK_STR(keys_of("EVAL return 2 k1 k2 a1"), "3 4");
    CHECK_STR(keys_of("EVAL return 0 a1"), "");
    CHECK_STR(keys_of("EVALSHA abc 1 k a"), "3");
    CHECK_STR(keys_of("EVAL_RO return 1 k"), "3");
    CHECK_STR(keys_of("FCALL f 2 a b"), "3 4");
    CHECK_STR(keys_of("ZUNIONSTORE dst 2 a b WEIGHTS 1 2"), "1 3 4");
    CHECK_STR(keys_of("ZINTERSTORE dst 1 a"), "1 3");
    CHECK_STR(keys_of("ZINTER 2 a b WITHSCORES"), "2 3");
    CHECK_STR(keys_of("ZDIFF 3 a b c"), "2 3 4");
    CHECK_STR(keys_of("LMPOP 2 a b LEFT COUNT 2"), "2 3");
    CHECK_STR(keys_of("BLMPOP 0 2 a b LEFT"), "3 4");
    CHECK_STR(keys_of("ZMPOP 1 z MIN"), "2");
    CHECK_STR(keys_of("SINTERCARD 2 a b LIMIT 1"), "2 3");
}

static void test_keys_keyword(void)
{
    CHECK_STR(keys_of("XREAD COUNT 1 STREAMS a b 0 0"), "4 5");
    CHECK_STR(keys_of("xread streams a 0"), "2");
    CHECK_STR(keys_of("XREAD BLOCK 0 STREAMS a b c 0 0 0"), "4 5 6");
    CHECK_STR(keys_of("XREAD STREAMS a b 0"), "2"); /* odd: half, rounded down */
    CHECK_STR(keys_of("XREAD COUNT 1"), "");
    CHECK_STR(keys_of("XREAD COUNT 1 STREAMS"), "");
    CHECK_STR(keys_of("XREADGROUP GROUP g c COUNT 1 STREAMS a b > >"), "7 8");
    /* The search starts at argv[4]: a group named "streams" is no keyword. */
    CHECK_STR(keys_of("XREADGROUP GROUP streams c STREAMS s >"), "5");
    CHECK_STR(keys_of("GEORADIUS k 0 0 1 km"), "1");
    CHECK_STR(keys_of("GEORADIUS k 0 0 1 km STORE dst"), "1 7");
    CHECK_STR(keys_of("GEORADIUS k 0 0 1 km STOREDIST dst"), "1 7");
    CHECK_STR(keys_of("GEORADIUS k 0 0 1 km STORE a STOREDIST b"), "1 7 9");
    CHECK_STR(keys_of("GEORADIUSBYMEMBER k m 1 km WITHDIST store dst"), "1 7");
    CHECK_STR(keys_of("GEORADIUS k 0 0 1 km STORE"), "1");
}

static void test_keys_subcommands(void)
{
    CHECK_STR(keys_of("OBJECT ENCODING k"), "2");
    CHECK_STR(keys_of("object freq k"), "2");
    CHECK_STR(keys_of("XINFO STREAM s FULL"), "2");
    CHECK_STR(keys_of("XGROUP CREATE s g $"), "2");
    CHECK_STR(keys_of("MEMORY USAGE k SAMPLES 5"), "2");
    CHECK_STR(keys_of("CONFIG GET maxmemory"), "");
    CHECK_STR(keys_of("OBJECT NOSUCH k"), "");
    CHECK_STR(keys_of("OBJECT"), "");
}

static void test_keys_sort(void)
{
    CHECK_STR(keys_of("SORT k"), "1");
    CHECK_STR(keys_of("SORT k STORE dst"), "1 3");
    CHECK_STR(keys_of("SORT k BY p LIMIT 0 1 GET g STORE dst ALPHA"), "1 10");
    CHECK_STR(keys_of("SORT k STORE a STORE b"), "1 5"); /* the last STORE */
    CHECK_STR(keys_of("SORT k GET store"), "1");          /* GET's argument */
    CHECK_STR(keys_of("SORT k LIMIT store 1"), "1");      /* LIMIT's arguments */
    CHECK_STR(keys_of("SORT k store limit 0 1"), "1 3");
    CHECK_STR(keys_of("SORT k STORE"), "1");
    CHECK_STR(keys_of("SORT_RO k BY p"), "1");
    CHECK_STR(keys_of("SORT"), "");
}

static void test_keys_migrate(void)
{
    CHECK_STR(keys_of("MIGRATE h 6379 k 0 5000"), "3");
    CHECK_STR(keys_of("MIGRATE h 6379 k 0 5000 COPY REPLACE"), "3");
    CHECK_STR(keys_of("MIGRATE h 6379 \"\" 0 5000 KEYS a b"), "7 8");
    CHECK_STR(keys_of("MIGRATE h 6379 \"\" 0 5000 COPY REPLACE KEYS a"), "9");
    CHECK_STR(keys_of("MIGRATE h 6379 \"\" 0 5000 AUTH keys KEYS a"), "9");
    CHECK_STR(keys_of("MIGRATE h 6379 \"\" 0 5000 AUTH2 u keys KEYS a b"), "10 11");
    /* KEYS with a non-empty key argument is an error: no keys. */
    CHECK_STR(keys_of("MIGRATE h 6379 k 0 5000 KEYS a"), "");
    /* A KEYS that is only AUTH's password, or last: the key argument. */
    CHECK_STR(keys_of("MIGRATE h 6379 k 0 5000 AUTH keys"), "3");
    CHECK_STR(keys_of("MIGRATE h 6379 \"\" 0 5000 KEYS"), "3");
    CHECK_STR(keys_of("MIGRATE h 6379"), "");
}

static void test_keys_shard_channels(void)
{
    /* not_key specs are followed: cluster routing needs the channel. */
    CHECK_STR(keys_of("SPUBLISH ch msg"), "1");
    CHECK_STR(keys_of("SSUBSCRIBE a b"), "1 2");
    CHECK_STR(keys_of("SUBSCRIBE a b"), "");
}

static void test_keys_malformed(void)
{
    CHECK_STR(keys_of("GET"), "");
    CHECK_STR(keys_of("MGET"), "");
    CHECK_STR(keys_of("MSET"), "");
    CHECK_STR(keys_of("BLPOP a"), "");
    CHECK_STR(keys_of("EVAL"), "");
    CHECK_STR(keys_of("EVAL return"), "");
    CHECK_STR(keys_of("EVAL return 3 k1 k2"), "");
    CHECK_STR(keys_of("EVAL return -1 k1"), "");
    CHECK_STR(keys_of("EVAL return abc k1"), "");
    /* numkeys is parsed strictly, as Redis's key specs parse it (EVAL itself
     * refuses these; only COMMAND GETKEYS's atoi() fallback accepts some). */
    CHECK_STR(keys_of("EVAL return 01 k1"), "");
    CHECK_STR(keys_of("EVAL return +1 k1"), "");
    CHECK_STR(keys_of("EVAL return 1x k1"), "");
    CHECK_STR(keys_of("EVAL return \"\" k1"), "");
    CHECK_STR(keys_of("EVAL return 2147483648 k1"), "");
    CHECK_STR(keys_of("EVAL return 4294967297 k1"), "");
    CHECK_STR(keys_of("EVAL return 99999999999999999999999 k1"), "");
    CHECK_STR(keys_of("ZINTER 1"), "");
    CHECK_STR(keys_of("ZINTER -1 a"), "");
    CHECK_STR(keys_of("LMPOP 3 a b"), "");
    /* One spec fails, the other still counts (Redis's partial mode). */
    CHECK_STR(keys_of("ZUNIONSTORE dst 3 a b"), "1");
    CHECK_STR(keys_of("ZUNIONSTORE dst 99999999999999999999 a"), "1");
}

static void test_keys_max_and_bad_calls(void)
{
    struct sv argv[MAX_ARGS];
    int keys[MAX_ARGS], argc = split("MGET a b c d", argv);
    const struct command *mget = lookup("mget");

    CHECK_STR(keys_max("MGET a b c d", 2), "1 2");
    CHECK_STR(keys_max("SORT k STORE d", 1), "1");
    CHECK_STR(keys_max("MIGRATE h p \"\" 0 1 KEYS a b c", 2), "7 8");
    CHECK(commands_keys(mget, argc, argv, keys, 0) == 0);
    CHECK(commands_keys(NULL, argc, argv, keys, MAX_ARGS) == 0);
    CHECK(commands_keys(mget, 0, argv, keys, MAX_ARGS) == 0);
    CHECK(commands_keys(mget, argc, NULL, keys, MAX_ARGS) == 0);
}

/* Every entry with random arguments: positions always in 1..argc-1, never
 * more than max, and nothing read outside argv (run under ASan). */
static void test_keys_never_out_of_range(void)
{
    static const char *words[] = {
        "0", "1", "2", "3", "7", "-1", "-2", "01", "+1", "2147483647", "2147483648",
        "99999999999999999999", "x", "", "STREAMS", "STORE", "STOREDIST", "KEYS",
        "LIMIT", "GET", "BY", "AUTH", "AUTH2", "COUNT", "streams", "keys"};
    const size_t nwords = sizeof(words) / sizeof(words[0]);
    uint32_t rnd = 1;

    for (int id = 0; id < commands_count(); id++) {
        const struct command *cmd = commands_by_id(id);
        for (int round = 0; round < 200; round++) {
            struct sv argv[16];
            int keys[16], argc = 1 + round % 16, max = 1 + round % 9;
            argv[0] = (struct sv){cmd->name, strlen(cmd->name)};
            for (int i = 1; i < argc; i++) {
                rnd = rnd * 1103515245u + 12345u;
                const char *w = words[(rnd >> 16) % nwords];
                argv[i] = (struct sv){w, strlen(w)};
            }
            int n = commands_keys(cmd, argc, argv, keys, max);
            CHECK(n >= 0 && n <= max);
            for (int i = 0; i < n; i++)
                CHECK(keys[i] >= 1 && keys[i] < argc);
        }
    }
}

/* Runs first: every other test reads the index. */
static void test_init(void)
{
    commands_init();
    commands_init(); /* a second call does nothing */
    CHECK(lookup("get") != NULL);
}

/* Where the one fixed key is, what the limiter's quick check relies on. */
static void test_fixed_key(void)
{
    CHECK(commands_fixed_key(lookup("get")) == 1);
    CHECK(commands_fixed_key(lookup("set")) == 1);
    CHECK(commands_fixed_key(lookup("ping")) == -1);
    CHECK(commands_fixed_key(lookup("mget")) == 0);    /* a range of keys */
    CHECK(commands_fixed_key(lookup("sort")) == 0);    /* keys found by code */
    CHECK(commands_fixed_key(lookup("xread")) == 0);   /* keys after a keyword */
    CHECK(commands_fixed_key(lookup("eval")) == 0);    /* keys after numkeys */
}

UNIT_MAIN("commands", {"init", test_init}, {"fixed_key", test_fixed_key}, {"table_ids", test_table_ids},
          {"lookup_case_insensitive", test_lookup_case_insensitive},
          {"lookup_unknown", test_lookup_unknown},
          {"every_entry_is_found", test_every_entry_is_found},
          {"subcommands", test_subcommands}, {"arity", test_arity}, {"flags", test_flags},
          {"acl_categories_of_commands", test_acl_categories_of_commands},
          {"acl_category_names", test_acl_category_names},
          {"keys_index_range", test_keys_index_range}, {"keys_keynum", test_keys_keynum},
          {"keys_keyword", test_keys_keyword}, {"keys_subcommands", test_keys_subcommands},
          {"keys_sort", test_keys_sort}, {"keys_migrate", test_keys_migrate},
          {"keys_shard_channels", test_keys_shard_channels},
          {"keys_malformed", test_keys_malformed},
          {"keys_max_and_bad_calls", test_keys_max_and_bad_calls},
          {"keys_never_out_of_range", test_keys_never_out_of_range})
