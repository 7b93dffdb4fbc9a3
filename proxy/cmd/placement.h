/* placement.h - where every command may run: on a shared backend
 * connection, on the client's private one, on a one-shot connection of its
 * own, answered by sluice, or refused. One table (placement.c) decides it
 * for every command; README lists it. */
#ifndef SLUICE_PLACEMENT_H
#define SLUICE_PLACEMENT_H

#include <stddef.h>

#include "commands.h"
#include "sv.h"

enum placement_kind {
    PLACE_SHARED,   /* exactly one reply, never blocks: any shared connection */
    PLACE_PRIVATE,  /* gives the connection state, or may block it: the client's own */
    PLACE_LOCAL,    /* answered by sluice itself (local.c, lock.c) */
    PLACE_CONTROL,  /* must reach Redis at once, past a busy script: a one-shot connection */
    PLACE_REFUSED,  /* would break the shared connections' promise: refused, with why */
    PLACE_LEARN,    /* not in sluice's table: ask Redis (COMMAND INFO) first, learn.c */
};

/* What the client code does with a command beyond sending it. */
enum placement_role {
    ROLE_NONE,
    ROLE_AUTH,          /* records the user on success */
    ROLE_HELLO,         /* may record a user and a name */
    ROLE_MULTI,         /* transaction tracking: client_track_multi */
    ROLE_WATCH,         /* not queued inside MULTI */
    ROLE_SELECT,        /* records the database on success (CLIENT LIST) */
    ROLE_CLIENT_IDS,    /* names clients by id: clientid.c translates them */
    ROLE_EXEC,
    ROLE_DISCARD,
    ROLE_RESET,
    ROLE_CLIENT_REPLY,  /* CLIENT REPLY ON/OFF/SKIP */
    ROLE_MONITOR,
    ROLE_SCRIPT,        /* a client's script or function: the script connections */
    ROLE_SCRIPT_LOAD,   /* SCRIPT LOAD: there too for a user with a Redis user */
    ROLE_PAUSE,         /* CLIENT PAUSE: sluice notes the pause (pause.c) */
    ROLE_UNPAUSE,       /* CLIENT UNPAUSE: ends it on +OK */
    ROLE_WAIT,          /* WAIT: its connection must first take the client's writes'
                           replication offset (client_wait_offset) */
};

struct placement {
    enum placement_kind kind;
    unsigned req_flags;     /* enum request_flag bits the request takes (PASSTHROUGH, RESET) */
    const char *why;        /* PLACE_REFUSED: the reason, for the error reply */
};

/* Build the per-command-id lookup. After commands_init. */
void placement_init(void);

/* Per command id, read on every request (so inline, without a call):
 * whether the command always runs on a shared connection with no flags
 * and no role (GET, SET...), and its role. Private to placement.c. */
extern unsigned char *placement_plain_shared;
extern unsigned char *placement_roles;

struct placement placement_decide_slow(const struct command *cmd, int argc,
                                       const struct sv *argv);

/* Where a request for CMD (NULL: not in the command table) with ARGC
 * arguments ARGV runs. Pure but for what learn.c has learned and the
 * config's modes (cluster, clients authenticated by sluice). */
static inline struct placement placement_decide(const struct command *cmd, int argc,
                                                const struct sv *argv)
{
    if (cmd != NULL && placement_plain_shared[cmd->id])
        return (struct placement){PLACE_SHARED, 0, NULL};
    return placement_decide_slow(cmd, argc, argv);
}

/* CMD's role (ROLE_NONE for NULL). */
static inline enum placement_role placement_role(const struct command *cmd)
{
    return cmd != NULL ? (enum placement_role)placement_roles[cmd->id] : ROLE_NONE;
}

/* Write the refusal of a request for NAME (LEN bytes) refused for WHY into
 * OUT (size SIZE): the error reply's text, "-ERR sluice does not forward
 * 'NAME': WHY". */
void placement_refusal(char *out, size_t size, const char *name, size_t len, const char *why);

#endif
