/* commands.h - the Redis 7.0 command table: arity, flags, ACL categories and
 * key specs of every command and subcommand. The router, cluster slotting
 * and rule matching all read this one table. */
#ifndef SLUICE_COMMANDS_H
#define SLUICE_COMMANDS_H

#include <stdint.h>
#include "sv.h"

/* Command flags, as Redis's COMMAND reply names them. */
#define CMD_FLAG_LIST(X)                                                     \
    X(WRITE, "write") X(READONLY, "readonly") X(DENYOOM, "denyoom")          \
    X(MODULE, "module") X(ADMIN, "admin") X(PUBSUB, "pubsub")                \
    X(NOSCRIPT, "noscript") X(BLOCKING, "blocking") X(LOADING, "loading")    \
    X(STALE, "stale") X(SKIP_MONITOR, "skip_monitor")                        \
    X(SKIP_SLOWLOG, "skip_slowlog") X(ASKING, "asking") X(FAST, "fast")      \
    X(NO_AUTH, "no_auth") X(MAY_REPLICATE, "may_replicate")                  \
    X(NO_MANDATORY_KEYS, "no_mandatory_keys")                                \
    X(NO_ASYNC_LOADING, "no_async_loading") X(NO_MULTI, "no_multi")          \
    X(MOVABLEKEYS, "movablekeys") X(ALLOW_BUSY, "allow_busy")

enum command_flag_bit {
#define X(id, name) CMD_BIT_##id,
    CMD_FLAG_LIST(X)
#undef X
    CMD_BIT_COUNT
};
#define X(id, name) CMD_##id = 1u << CMD_BIT_##id,
enum command_flag { CMD_FLAG_LIST(X) };
#undef X

/* ACL categories (without the '@'), as Redis 7.0 names them. */
#define ACL_CATEGORY_LIST(X)                                                 \
    X(KEYSPACE, "keyspace") X(READ, "read") X(WRITE, "write")                \
    X(SET, "set") X(SORTEDSET, "sortedset") X(LIST, "list")                  \
    X(HASH, "hash") X(STRING, "string") X(BITMAP, "bitmap")                  \
    X(HYPERLOGLOG, "hyperloglog") X(GEO, "geo") X(STREAM, "stream")          \
    X(PUBSUB, "pubsub") X(ADMIN, "admin") X(FAST, "fast") X(SLOW, "slow")    \
    X(BLOCKING, "blocking") X(DANGEROUS, "dangerous")                        \
    X(CONNECTION, "connection") X(TRANSACTION, "transaction")                \
    X(SCRIPTING, "scripting")

enum acl_category_bit {
#define X(id, name) ACL_BIT_##id,
    ACL_CATEGORY_LIST(X)
#undef X
    ACL_BIT_COUNT
};
#define X(id, name) ACL_##id = 1u << ACL_BIT_##id,
enum acl_category { ACL_CATEGORY_LIST(X) };
#undef X

/* How a key spec finds where its keys begin. */
enum key_begin { KS_BEGIN_UNKNOWN, KS_BEGIN_INDEX, KS_BEGIN_KEYWORD };
/* How a key spec finds its keys from there. */
enum key_find { KS_FIND_UNKNOWN, KS_FIND_RANGE, KS_FIND_KEYNUM };

/* One Redis 7 key spec (see COMMAND DOCS / "key specs" in Redis's docs). */
struct key_spec {
    uint8_t begin;          /* enum key_begin */
    int16_t index;          /* KS_BEGIN_INDEX: argv position of the first key */
    const char *keyword;    /* KS_BEGIN_KEYWORD: keys follow this word... */
    int16_t startfrom;      /* ...searched from here (negative: from the end, backwards) */
    uint8_t find;           /* enum key_find */
    int16_t lastkey;        /* RANGE: last key relative to begin (-1: end of argv) */
    int16_t keystep;        /* RANGE: step between keys */
    int16_t limit;          /* RANGE with lastkey -1: take 1/limit of the rest (0 = all) */
    int16_t keynumidx;      /* KEYNUM: position of numkeys relative to begin */
    int16_t firstkey;       /* KEYNUM: first key relative to begin */
    int16_t keynumstep;     /* KEYNUM: step between keys */
};

struct command {
    const char *name;        /* lower case; a subcommand is "parent|sub" */
    int16_t arity;           /* as in Redis: negative means at least -arity */
    uint32_t flags;          /* enum command_flag bits */
    uint32_t acl_categories; /* enum acl_category bits */
    const struct key_spec *key_specs;
    uint8_t key_spec_count;
    const struct command *subcommands;
    uint16_t subcommand_count;
    uint16_t id;             /* dense index over all commands and subcommands */
};

/* Build the lookup index. Call once at startup before any lookup. */
void commands_init(void);

/* Number of entries (commands and subcommands); ids are 0..count-1. */
int commands_count(void);

/* The entry with this id (0 <= id < commands_count()). */
const struct command *commands_by_id(int id);

/* Find a top-level command by name, case-insensitive. NULL if unknown. */
const struct command *commands_lookup(const char *name, size_t len);

/* Find the entry for a request: the subcommand when argv[0] names a command
 * with subcommands and argv[1] names one of them, else the command itself.
 * NULL when argv[0] is not a known command (modules): forward untouched. */
const struct command *commands_resolve(int argc, const struct sv *argv);

/* The argv position of CMD's only key when it always sits at one fixed
 * place (GET, SET, INCR...); -1 when CMD never has keys (PING); else 0. */
int commands_fixed_key(const struct command *cmd);

/* Store in KEYS the argv positions of the keys of a request for CMD, in order,
 * at most MAX of them, never a position >= argc. Bad arity or arguments that
 * do not fit the specs yield fewer keys, never an out-of-range position.
 * Returns the number stored. */
int commands_keys(const struct command *cmd, int argc, const struct sv *argv,
                  int *keys, int max);

/* ACL category bit for a category name without '@' (case-insensitive);
 * 0 when unknown. */
uint32_t commands_acl_category(const char *name, size_t len);

#endif
