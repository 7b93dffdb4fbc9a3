/* test_cluster.c - cluster mode's pure decisions: the slot of a request's
 * keys (hash tags, key specs, CROSSSLOT), which commands are run in parts,
 * and what sluice answers itself (as a standalone Redis would, or while it
 * has no slot map). */
#include "cluster.h"
#include "cluster_split.h"
#include "commands.h"
#include "slot.h"
#include "unit.h"

static int slot_of(int argc, const char *const *args)
{
    struct sv argv[16];

    for (int i = 0; i < argc; i++)
        argv[i] = (struct sv){args[i], strlen(args[i])};
    return cluster_request_slot(commands_resolve(argc, argv), argc, argv);
}

#define SLOT_OF(...) \
    slot_of(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), (const char *[]){__VA_ARGS__})

static void test_request_slot(void)
{
    CHECK(SLOT_OF("GET", "foo") == slot_for_key("foo", 3));
    CHECK(SLOT_OF("GET", "{user1000}.following") == slot_for_key("user1000", 8));
    CHECK(SLOT_OF("MSET", "{t}a", "1", "{t}b", "2") == slot_for_key("t", 1));
    CHECK(SLOT_OF("MSET", "a", "1", "b", "2") == CLUSTER_SLOT_CROSS);
    CHECK(SLOT_OF("PING") == CLUSTER_SLOT_NONE);
    CHECK(SLOT_OF("EVAL", "return 1", "0") == CLUSTER_SLOT_NONE);
    CHECK(SLOT_OF("EVAL", "return 1", "2", "{x}1", "{x}2", "arg") == slot_for_key("x", 1));
    CHECK(SLOT_OF("EVAL", "return 1", "2", "a", "b") == CLUSTER_SLOT_CROSS);
    /* Values are not keys: MSET's values hash anywhere. */
    CHECK(SLOT_OF("MSET", "{t}a", "zzz", "{t}b", "yyy") == slot_for_key("t", 1));
    CHECK(SLOT_OF("NOSUCHCOMMAND", "a", "b") == CLUSTER_SLOT_NONE);
}

static const char *answer_of(int argc, const char *const *args)
{
    struct sv argv[16];
    const struct command *cmd;

    for (int i = 0; i < argc; i++)
        argv[i] = (struct sv){args[i], strlen(args[i])};
    cmd = commands_resolve(argc, argv);
    return cluster_answer(cmd, argc, argv, cluster_request_slot(cmd, argc, argv));
}

#define ANSWER_OF(...) \
    answer_of(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), (const char *[]){__VA_ARGS__})

static void test_answers(void)
{
    static const char disabled[] = "-ERR This instance has cluster support disabled";

    CHECK_STR(ANSWER_OF("CLUSTER", "INFO"), disabled);
    CHECK_STR(ANSWER_OF("cluster", "slots"), disabled);
    /* As a standalone Redis 7.0 answers: an unknown subcommand is named. */
    CHECK_STR(ANSWER_OF("CLUSTER", "NOSUCH"), "-ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.");
    CHECK_STR(ANSWER_OF("READONLY"), disabled);
    CHECK_STR(ANSWER_OF("ASKING"), disabled);
    CHECK_STR(ANSWER_OF("SELECT", "0"), "+OK");
    CHECK_STR(ANSWER_OF("SELECT", "1"), "-ERR SELECT is not allowed in cluster mode");
    CHECK_STR(ANSWER_OF("SELECT", "00"), "+OK");
    CHECK_STR(ANSWER_OF("SELECT", "-1"), "-ERR SELECT is not allowed in cluster mode");
    CHECK_STR(ANSWER_OF("SELECT", "x"), "-ERR value is not an integer or out of range");
    CHECK_STR(ANSWER_OF("SELECT", ""), "-ERR value is not an integer or out of range");
    CHECK_STR(ANSWER_OF("MSETNX", "a", "1", "b", "2"),
              "-CROSSSLOT Keys in request don't hash to the same slot");
    CHECK_STR(ANSWER_OF("RENAME", "a", "b"),
              "-CROSSSLOT Keys in request don't hash to the same slot");
    CHECK_STR(ANSWER_OF("WAIT", "0", "0"), "-ERR sluice does not support 'wait' in cluster mode yet");
    /* No slot map in this process: everything else waits for one. */
    CHECK(strncmp(ANSWER_OF("GET", "a"), "-CLUSTERDOWN ", 13) == 0);
    CHECK(strncmp(ANSWER_OF("MGET", "a", "b"), "-CLUSTERDOWN ", 13) == 0);
}

static void test_split_choice(void)
{
    struct sv mget[] = {{"MGET", 4}, {"a", 1}, {"b", 1}};
    struct sv dbsize[] = {{"DBSIZE", 6}};
    struct sv script_load[] = {{"SCRIPT", 6}, {"LOAD", 4}, {"return 1", 8}};
    struct sv script_kill[] = {{"SCRIPT", 6}, {"KILL", 4}};
    struct sv ping[] = {{"PING", 4}};
    struct sv msetnx[] = {{"MSETNX", 6}, {"a", 1}, {"1", 1}, {"b", 1}, {"2", 1}};

    CHECK(cluster_split_wants(commands_resolve(3, mget), CLUSTER_SLOT_CROSS));
    CHECK(!cluster_split_wants(commands_resolve(3, mget), 7));
    CHECK(cluster_split_wants(commands_resolve(1, dbsize), CLUSTER_SLOT_NONE));
    CHECK(cluster_split_wants(commands_resolve(3, script_load), CLUSTER_SLOT_NONE));
    /* The script runs on one node, which one sluice does not know. */
    CHECK(cluster_split_wants(commands_resolve(2, script_kill), CLUSTER_SLOT_NONE));
    CHECK(!cluster_split_wants(commands_resolve(1, ping), CLUSTER_SLOT_NONE));
    CHECK(!cluster_split_wants(commands_resolve(5, msetnx), CLUSTER_SLOT_CROSS));
    CHECK(!cluster_split_wants(NULL, CLUSTER_SLOT_CROSS));
}

static void setup(void)
{
    commands_init();
    cluster_set_split_wants(cluster_split_wants);   /* as main.c registers it */
}

UNIT_MAIN("cluster",
          {"setup", setup},
          {"request slot", test_request_slot},
          {"answers", test_answers},
          {"split choice", test_split_choice})
