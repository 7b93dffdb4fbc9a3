/* cluster_request.c - what cluster mode decides about a request before
 * any routing: the hash slot of its keys (from the command table, or the
 * key positions learned of a module's command) and what sluice answers
 * itself (CLUSTER ..., SELECT, CROSSSLOT, no map yet). It reads the
 * command table and asks cluster.c only whether a map is loaded; cluster.c
 * never calls it. */
#include "cluster.h"
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "learned.h"
#include "slot.h"
#include "stats.h"

#define CLUSTER_KEYS_STACK 64

static cluster_split_wants_fn *cluster_split_wants_hook;   /* from cluster_set_split_wants */

/* The key positions of a command outside sluice's table (a module's),
 * as sluice learned them from COMMAND INFO (first key, last key, step):
 * into KEYS (room for ARGC). None for a command not learned, or whose keys
 * only the module finds (movablekeys without a first key). With
 * movablekeys the range may hold arguments that are no keys (only the
 * module knows): the first key alone routes it, and Redis judges the rest
 * (CROSSSLOT). */
static int cluster_learned_keys(int argc, const struct sv *argv, int *keys)
{
    const struct learned_command *lc = argc > 0 ? learned_lookup(argv[0].ptr, argv[0].len) : NULL;
    int last, step, n = 0;

    if (lc == NULL || !lc->known || lc->first_key <= 0)
        return 0;
    if (lc->flags & CMD_MOVABLEKEYS) {
        keys[0] = lc->first_key;
        return lc->first_key < argc;
    }
    last = lc->last_key < 0 ? argc + lc->last_key : lc->last_key;
    step = lc->key_step > 0 ? lc->key_step : 1;
    for (int i = lc->first_key; i <= last && i < argc; i += step)
        keys[n++] = i;
    return n;
}

int cluster_request_slot(const struct command *cmd, int argc, const struct sv *argv)
{
    int stack[CLUSTER_KEYS_STACK], *keys = stack, n, slot = CLUSTER_SLOT_NONE;

    if (argc > CLUSTER_KEYS_STACK && (keys = malloc((size_t)argc * sizeof(*keys))) == NULL)
        return CLUSTER_SLOT_NONE;
    if (cmd == NULL)
        n = cluster_learned_keys(argc, argv, keys);
    else
        n = commands_keys(cmd, argc, argv, keys,
                          argc > CLUSTER_KEYS_STACK ? argc : CLUSTER_KEYS_STACK);
    for (int i = 0; i < n; i++) {
        int s = slot_for_key(argv[keys[i]].ptr, argv[keys[i]].len);
        if (slot == CLUSTER_SLOT_NONE) {
            slot = s;
        } else if (s != slot) {
            slot = CLUSTER_SLOT_CROSS;
            break;
        }
    }
    if (keys != stack)
        free(keys);
    return slot;
}

/* What cluster_answer does with a command, by command id: made once, on
 * first use (it is asked on every request). */
enum cluster_command_class {
    CLUSTER_CMD_FORWARD,    /* anything else: routed */
    CLUSTER_CMD_CLUSTER,    /* CLUSTER ..., ASKING, READONLY, READWRITE: as standalone Redis */
    CLUSTER_CMD_SELECT,     /* only database 0 */
    CLUSTER_CMD_NOT_YET,    /* keyless, would answer for one node's part of the keyspace */
};
static unsigned char *cluster_command_classes;

/* Keyless commands that, sent to one node, would answer for a part of the
 * keyspace only: refused until sluice runs them across the primaries
 * (cluster_split.c runs the others that are). */
static const char *const cluster_not_yet[] = {"wait"};

static enum cluster_command_class cluster_class_of_name(const char *n)
{
    if ((strncmp(n, "cluster", 7) == 0 && (n[7] == '\0' || n[7] == '|')) ||
        strcmp(n, "asking") == 0 || strcmp(n, "readonly") == 0 || strcmp(n, "readwrite") == 0)
        return CLUSTER_CMD_CLUSTER;
    if (strcmp(n, "select") == 0)
        return CLUSTER_CMD_SELECT;
    for (size_t i = 0; i < sizeof(cluster_not_yet) / sizeof(cluster_not_yet[0]); i++) {
        if (strcmp(n, cluster_not_yet[i]) == 0)
            return CLUSTER_CMD_NOT_YET;
    }
    return CLUSTER_CMD_FORWARD;
}

static enum cluster_command_class cluster_command_class(const struct command *cmd)
{
    if (cmd == NULL)
        return CLUSTER_CMD_FORWARD;
    if (cluster_command_classes == NULL) {
        int n = commands_count();
        cluster_command_classes = malloc((size_t)n);
        if (cluster_command_classes == NULL)
            return cluster_class_of_name(cmd->name);
        for (int id = 0; id < n; id++)
            cluster_command_classes[id] =
                (unsigned char)cluster_class_of_name(commands_by_id(id)->name);
    }
    return (enum cluster_command_class)cluster_command_classes[cmd->id];
}

/* SELECT DB as Redis Cluster answers it: only database 0 exists. */
static const char *cluster_select_answer(struct sv db)
{
    char text[32], *end;
    long long n;

    if (db.len == 0 || db.len >= sizeof(text))
        return "-ERR value is not an integer or out of range";
    memcpy(text, db.ptr, db.len);
    text[db.len] = '\0';
    n = strtoll(text, &end, 10);
    if (*end != '\0' || text[0] == ' ')
        return "-ERR value is not an integer or out of range";
    return n == 0 ? "+OK" : "-ERR SELECT is not allowed in cluster mode";
}

/* CLUSTER ..., ASKING, READONLY, READWRITE (CMD, ARGC arguments ARGV) as
 * a standalone Redis answers them: its arity and subcommand checks come
 * first, as for any command, then the refusal. */
static const char *cluster_disabled_answer(const struct command *cmd, int argc,
                                           const struct sv *argv)
{
    static char text[220];

    if (cmd->subcommand_count > 0 && argc >= 2) {   /* a container: no such subcommand */
        snprintf(text, sizeof(text), "-ERR unknown subcommand '%.*s'. Try CLUSTER HELP.",
                 argv[1].len > 128 ? 128 : (int)argv[1].len, argv[1].ptr);
        return text;
    }
    if (cmd->arity >= 0 ? argc != cmd->arity : argc < -cmd->arity) {
        snprintf(text, sizeof(text), "-ERR wrong number of arguments for '%s' command",
                 cmd->name);
        return text;
    }
    return "-ERR This instance has cluster support disabled";
}

void cluster_set_split_wants(cluster_split_wants_fn *fn)
{
    cluster_split_wants_hook = fn;
}

const char *cluster_answer(const struct command *cmd, int argc, const struct sv *argv, int slot)
{
    static char text[200];

    switch (cluster_command_class(cmd)) {
    case CLUSTER_CMD_CLUSTER:
        return cluster_disabled_answer(cmd, argc, argv);
    case CLUSTER_CMD_SELECT:
        if (argc == 2)
            return cluster_select_answer(argv[1]);
        break;
    case CLUSTER_CMD_NOT_YET:
        snprintf(text, sizeof(text), "-ERR sluice does not support '%s' in cluster mode yet",
                 cmd->name);
        return text;
    case CLUSTER_CMD_FORWARD:
        break;
    }
    if (slot == CLUSTER_SLOT_CROSS &&
        !(cluster_split_wants_hook != NULL && cluster_split_wants_hook(cmd, slot))) {
        STAT_INC(cluster_crossslot);
        return "-CROSSSLOT Keys in request don't hash to the same slot";
    }
    if (!cluster_has_map()) {
        STAT_INC(cluster_down_replies);
        return "-CLUSTERDOWN sluice has no slot map yet: no seed node has answered "
               "CLUSTER SLOTS";
    }
    return NULL;   /* a slot the map does not name goes to any node, which knows better */
}
