/* sluicetest.c - a tiny Redis module for the integration tests: commands
 * sluice has never heard of (a keyed one, a blocking one, one with no
 * flags), so that tests can check how sluice learns about them.
 *
 * Built without redismodule.h: the few API entry points it uses are
 * declared here and fetched by name through RedisModule_GetApi, which
 * Redis passes as the first pointer of the ctx given to RedisModule_OnLoad
 * (the module ABI of Redis 7.0, API version 1). Not part of sluice.
 *
 *   sluicetest.echo KEY VALUE   "readonly fast", key at 1: replies VALUE
 *   sluicetest.block MS         "blocking": blocks the caller MS ms, then +WOKE
 *   sluicetest.noflags          no flags, no keys: +OK
 *   sluicetest.pairs KEY TAG... "readonly getkeys-api", declared keys 1..-1
 *                               but the module says only each KEY is one
 *                               (movablekeys): +OK
 */
#include <stddef.h>

#define SLUICETEST_OK 0
#define SLUICETEST_ERR 1
#define SLUICETEST_APIVER_1 1

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleBlockedClient RedisModuleBlockedClient;

typedef int (*sluicetest_cmd_fn)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
typedef void (*sluicetest_free_fn)(RedisModuleCtx *ctx, void *privdata);

/* The API entry points, by the names Redis exports them under. */
static int (*sluicetest_get_api)(const char *name, void *funcptr);
static void (*sluicetest_set_module_attribs)(RedisModuleCtx *ctx, const char *name, int ver,
                                             int apiver);
static int (*sluicetest_is_module_name_busy)(const char *name);
static int (*sluicetest_create_command)(RedisModuleCtx *ctx, const char *name,
                                        sluicetest_cmd_fn fn, const char *flags, int firstkey,
                                        int lastkey, int keystep);
static int (*sluicetest_wrong_arity)(RedisModuleCtx *ctx);
static int (*sluicetest_reply_simple)(RedisModuleCtx *ctx, const char *msg);
static int (*sluicetest_reply_error)(RedisModuleCtx *ctx, const char *err);
static int (*sluicetest_reply_string)(RedisModuleCtx *ctx, RedisModuleString *str);
static int (*sluicetest_string_to_ll)(const RedisModuleString *str, long long *ll);
static int (*sluicetest_is_keys_position_request)(RedisModuleCtx *ctx);
static void (*sluicetest_key_at_pos)(RedisModuleCtx *ctx, int pos);
static RedisModuleBlockedClient *(*sluicetest_block_client)(RedisModuleCtx *ctx,
                                                            sluicetest_cmd_fn reply_cb,
                                                            sluicetest_cmd_fn timeout_cb,
                                                            sluicetest_free_fn free_cb,
                                                            long long timeout_ms);

static const struct {
    const char *name;
    void *slot;   /* where the fetched pointer goes */
} sluicetest_api[] = {
    {"RedisModule_SetModuleAttribs", &sluicetest_set_module_attribs},
    {"RedisModule_IsModuleNameBusy", &sluicetest_is_module_name_busy},
    {"RedisModule_CreateCommand", &sluicetest_create_command},
    {"RedisModule_WrongArity", &sluicetest_wrong_arity},
    {"RedisModule_ReplyWithSimpleString", &sluicetest_reply_simple},
    {"RedisModule_ReplyWithError", &sluicetest_reply_error},
    {"RedisModule_ReplyWithString", &sluicetest_reply_string},
    {"RedisModule_StringToLongLong", &sluicetest_string_to_ll},
    {"RedisModule_BlockClient", &sluicetest_block_client},
    {"RedisModule_IsKeysPositionRequest", &sluicetest_is_keys_position_request},
    {"RedisModule_KeyAtPos", &sluicetest_key_at_pos},
};

static int sluicetest_echo(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 3)
        return sluicetest_wrong_arity(ctx);
    return sluicetest_reply_string(ctx, argv[2]);
}

/* Never called: nothing unblocks the client before its timeout. */
static int sluicetest_block_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    return sluicetest_reply_simple(ctx, "WOKE");
}

static int sluicetest_block_timeout(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    return sluicetest_reply_simple(ctx, "WOKE");
}

/* The client stays blocked until the timeout fires: MS must be positive,
 * since a zero timeout would block it forever. */
static int sluicetest_block(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    long long ms;

    if (argc != 2)
        return sluicetest_wrong_arity(ctx);
    if (sluicetest_string_to_ll(argv[1], &ms) != SLUICETEST_OK || ms <= 0)
        return sluicetest_reply_error(ctx, "ERR timeout must be a positive integer");
    sluicetest_block_client(ctx, sluicetest_block_reply, sluicetest_block_timeout, NULL, ms);
    return SLUICETEST_OK;
}

static int sluicetest_noflags(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    if (argc != 1)
        return sluicetest_wrong_arity(ctx);
    return sluicetest_reply_simple(ctx, "OK");
}

/* KEY TAG pairs: only the keys are keys, as the module tells Redis when
 * asked (its declared range, every argument, is wider). */
static int sluicetest_pairs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    if (argc < 3 || argc % 2 == 0)
        return sluicetest_wrong_arity(ctx);
    if (sluicetest_is_keys_position_request(ctx)) {
        for (int i = 1; i < argc; i += 2)
            sluicetest_key_at_pos(ctx, i);
        return SLUICETEST_OK;
    }
    return sluicetest_reply_simple(ctx, "OK");
}

static const struct {
    const char *name;
    sluicetest_cmd_fn fn;
    const char *flags;
    int firstkey, lastkey, keystep;
} sluicetest_commands[] = {
    {"sluicetest.echo", sluicetest_echo, "readonly fast", 1, 1, 1},
    {"sluicetest.block", sluicetest_block, "blocking", 0, 0, 0},
    {"sluicetest.noflags", sluicetest_noflags, "", 0, 0, 0},
    {"sluicetest.pairs", sluicetest_pairs, "readonly getkeys-api", 1, -1, 1},
};

#define SLUICETEST_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Fetch every entry point, name the module (Redis wants that done before
 * any command is created), then register the commands. Returns
 * SLUICETEST_ERR, which makes Redis refuse the module, on any failure. */
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    /* ISO C has no cast from a data pointer to a function pointer; one
     * through an integer is what the platform defines. */
    sluicetest_get_api = (int (*)(const char *, void *))(unsigned long)((void **)ctx)[0];
    for (size_t i = 0; i < SLUICETEST_COUNT(sluicetest_api); i++) {
        if (sluicetest_get_api(sluicetest_api[i].name, sluicetest_api[i].slot) != SLUICETEST_OK)
            return SLUICETEST_ERR;
    }
    if (sluicetest_is_module_name_busy("sluicetest"))
        return SLUICETEST_ERR;
    sluicetest_set_module_attribs(ctx, "sluicetest", 1, SLUICETEST_APIVER_1);
    for (size_t i = 0; i < SLUICETEST_COUNT(sluicetest_commands); i++) {
        if (sluicetest_create_command(ctx, sluicetest_commands[i].name, sluicetest_commands[i].fn,
                                      sluicetest_commands[i].flags,
                                      sluicetest_commands[i].firstkey,
                                      sluicetest_commands[i].lastkey,
                                      sluicetest_commands[i].keystep) != SLUICETEST_OK)
            return SLUICETEST_ERR;
    }
    return SLUICETEST_OK;
}
