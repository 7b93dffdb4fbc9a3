/* placement.c - owns the table of where every command may run. The
 * promise of a shared backend connection is that each request sent on it
 * gets exactly one reply and never blocks it: replies are paired with
 * requests by order, and many clients wait behind each other. A command
 * that cannot keep that promise takes the client's private connection,
 * a one-shot connection, is answered by sluice, or is refused.
 *
 *   rows below (by name)          -> fixed kind, or a check per request
 *   any other command in the table -> PRIVATE if flagged blocking, else SHARED
 *   a name not in the table       -> sluice's own verbs: LOCAL
 *                                    else what learn.c learned from Redis
 */
#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config.h"
#include "learned.h"
#include "request.h"
#include "server.h"
#include "value.h"

typedef struct placement placement_check(int argc, const struct sv *argv);

struct placement_row {
    const char *name;          /* as in the command table, or sluice's own verb */
    enum placement_kind kind;  /* when CHECK is NULL */
    unsigned req_flags;
    enum placement_role role;
    placement_check *check;    /* decides per request; NULL: KIND always */
    const char *why;           /* the reason for this row (REFUSED: in the error) */
};

static placement_check placement_check_xread, placement_check_xreadgroup,
    placement_check_hello, placement_check_auth, placement_check_sync,
    placement_check_replconf, placement_check_pause, placement_check_shutdown;

#define WHY_REPLICATION "a byte tunnel to the client's own connection from then on"
#define WHY_REPLCONF "replica handshake state of the connection"
#define WHY_PROTECTED "only from a local client (127.0.0.1, ::1), as Redis allows it"
#define WHY_PAUSE "forwarded; while it is on, what Redis holds goes on one-shot connections"
/* Refusals of the replication and pause rows (cluster mode, and REPLCONF
 * ACK/GETACK outside a tunnel). */
#define WHY_CLUSTER_REPLICATION "in cluster mode a replica must connect to a node itself"
#define WHY_CLUSTER_SHUTDOWN "in cluster mode it would stop one node of many, whichever " \
    "sluice sends keyless commands to; shut nodes down directly"
#define WHY_CLUSTER_AUTH "in cluster mode without a users file or backend_password it would " \
    "log in one node's connection only, and the client's commands for other nodes would run as " \
    "sluice's backend user; give sluice a users file (or backend_password)"
#define WHY_REPLCONF_ACK "REPLCONF ACK and GETACK get no reply: only a replica sends them, " \
    "after SYNC"

static const struct placement_row placement_rows[] = {
    /* Answered by sluice. */
    {"client|setname", PLACE_LOCAL, 0, ROLE_NONE, NULL, "the name is sluice's (rules match it)"},
    {"client|getname", PLACE_LOCAL, 0, ROLE_NONE, NULL, "the name is sluice's"},
    {"client|id", PLACE_LOCAL, 0, ROLE_NONE, NULL, "the id is sluice's client id"},
    {"client|list", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL,
     "sluice's clients, once Redis has checked the client may list"},
    {"client|info", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL,
     "the client as sluice sees it, once Redis has checked it may ask"},
    {"client|reply", PLACE_LOCAL, 0, ROLE_CLIENT_REPLY, NULL,
     "Redis always answers; sluice drops the replies"},
    {"quit", PLACE_LOCAL, 0, ROLE_NONE, NULL, "closes the client connection"},
    {"hello", PLACE_LOCAL, 0, ROLE_HELLO, placement_check_hello,
     "the protocol, name and user are sluice's; HELLO AUTH goes to Redis when sluice "
     "does not authenticate clients itself"},
    {"acl|whoami", PLACE_SHARED, 0, ROLE_NONE, placement_check_auth,
     "the user is sluice's when it authenticates clients itself"},
    {"proxy", PLACE_LOCAL, 0, ROLE_NONE, NULL, "sluice's own command"},
    {"lock", PLACE_LOCAL, 0, ROLE_NONE, NULL, "sluice's lock verb (EVALSHA of lua/)"},
    {"unlock", PLACE_LOCAL, 0, ROLE_NONE, NULL, "sluice's lock verb"},
    {"renew", PLACE_LOCAL, 0, ROLE_NONE, NULL, "sluice's lock verb"},
    /* Session state: the client's own connection from then on. */
    {"select", PLACE_PRIVATE, 0, ROLE_SELECT, NULL, "selects a database for the connection"},
    {"multi", PLACE_PRIVATE, 0, ROLE_MULTI, NULL, "transaction state"},
    {"watch", PLACE_PRIVATE, 0, ROLE_WATCH, NULL, "watched keys belong to the connection"},
    {"exec", PLACE_SHARED, 0, ROLE_EXEC, NULL, "ends a transaction (on its private connection)"},
    {"discard", PLACE_SHARED, 0, ROLE_DISCARD, NULL, "ends a transaction"},
    {"auth", PLACE_PRIVATE, 0, ROLE_AUTH, placement_check_auth,
     "answered by sluice with a users file or backend_password; else the user belongs "
     "to the connection"},
    {"reset", PLACE_PRIVATE, REQ_RESET, ROLE_RESET, NULL, "resets the connection's state"},
    {"wait", PLACE_PRIVATE, 0, ROLE_WAIT, NULL, "blocks until replicas acknowledge"},
    {"client|tracking", PLACE_PRIVATE, 0, ROLE_CLIENT_IDS, NULL,
     "tracking belongs to the connection; REDIRECT names a sluice client id"},
    {"client|caching", PLACE_PRIVATE, 0, ROLE_NONE, NULL, "tracking belongs to the connection"},
    {"client|no-evict", PLACE_PRIVATE, 0, ROLE_NONE, NULL, "a flag of the connection"},
    {"subscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "messages stream unpaired"},
    {"psubscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "messages stream unpaired"},
    {"ssubscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "messages stream unpaired"},
    {"unsubscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "one reply per channel"},
    {"punsubscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "one reply per pattern"},
    {"sunsubscribe", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_NONE, NULL, "one reply per channel"},
    {"monitor", PLACE_PRIVATE, REQ_PASSTHROUGH, ROLE_MONITOR, NULL, "a stream of replies"},
    {"xread", PLACE_SHARED, 0, ROLE_NONE, placement_check_xread, "blocks with BLOCK"},
    {"xreadgroup", PLACE_SHARED, 0, ROLE_NONE, placement_check_xreadgroup, "blocks with BLOCK"},
    /* A client's script may run long and hold its connection: standalone,
     * scripts go on shared connections of their own (client_route). */
    {"eval", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a script"},
    {"evalsha", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a script"},
    {"eval_ro", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a script"},
    {"evalsha_ro", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a script"},
    {"fcall", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a function"},
    {"fcall_ro", PLACE_SHARED, 0, ROLE_SCRIPT, NULL, "a function"},
    {"script|load", PLACE_SHARED, 0, ROLE_SCRIPT_LOAD, NULL,
     "with users_in_redis, a restricted user's on its Redis user's script connections"},
    /* Redis's "protected" commands: allowed by enable-debug-command and
     * enable-module-command only from a local connection, which every
     * connection of sluice's is; so sluice asks where its client is. */
    {"debug", PLACE_SHARED, REQ_PROTECTED, ROLE_NONE, NULL, WHY_PROTECTED},
    {"module|load", PLACE_SHARED, REQ_PROTECTED, ROLE_NONE, NULL, WHY_PROTECTED},
    {"module|loadex", PLACE_SHARED, REQ_PROTECTED, ROLE_NONE, NULL, WHY_PROTECTED},
    {"module|unload", PLACE_SHARED, REQ_PROTECTED, ROLE_NONE, NULL, WHY_PROTECTED},
    /* Must reach Redis at once, even while a script keeps it busy. */
    {"script|kill", PLACE_CONTROL, 0, ROLE_NONE, NULL, "stops a busy script: cannot wait behind it"},
    {"function|kill", PLACE_CONTROL, 0, ROLE_NONE, NULL, "stops a busy function"},
    {"shutdown", PLACE_CONTROL, 0, ROLE_NONE, placement_check_shutdown,
     "SHUTDOWN NOSAVE works past a busy script"},
    /* Would break the shared connections for everybody. */
    /* Replication: a private connection, then a byte tunnel (standalone). */
    {"sync", PLACE_PRIVATE, REQ_TUNNEL, ROLE_NONE, placement_check_sync, WHY_REPLICATION},
    {"psync", PLACE_PRIVATE, REQ_TUNNEL, ROLE_NONE, placement_check_sync, WHY_REPLICATION},
    {"replconf", PLACE_PRIVATE, 0, ROLE_NONE, placement_check_replconf, WHY_REPLCONF},
    /* Must never wait behind a request Redis holds for the pause. */
    {"client|pause", PLACE_CONTROL, 0, ROLE_PAUSE, placement_check_pause, WHY_PAUSE},
    {"client|unpause", PLACE_CONTROL, 0, ROLE_UNPAUSE, placement_check_pause, WHY_PAUSE},
    {"client|kill", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL,
     "kills sluice's clients: Redis checks it with a filter that matches nobody"},
    {"client|unblock", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL, "names a sluice client id"},
    {"client|getredir", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL, "answers a sluice client id"},
    {"client|trackinginfo", PLACE_SHARED, 0, ROLE_CLIENT_IDS, NULL, "answers a sluice client id"},
};
#define PLACEMENT_ROW_COUNT (int)(sizeof(placement_rows) / sizeof(placement_rows[0]))

/* Row per command id (NULL: the default by flags). */
static const struct placement_row **placement_by_id;
unsigned char *placement_plain_shared;
unsigned char *placement_roles;

void placement_init(void)
{
    int n = commands_count();

    placement_by_id = calloc((size_t)n, sizeof(*placement_by_id));
    placement_plain_shared = calloc((size_t)n, 1);
    placement_roles = calloc((size_t)n, 1);
    for (int id = 0; id < n; id++) {
        for (int i = 0; i < PLACEMENT_ROW_COUNT; i++) {
            if (strcmp(commands_by_id(id)->name, placement_rows[i].name) == 0)
                placement_by_id[id] = &placement_rows[i];
        }
        placement_roles[id] = placement_by_id[id] != NULL ? (unsigned char)placement_by_id[id]->role
                                                           : ROLE_NONE;
        placement_plain_shared[id] = placement_by_id[id] == NULL &&
                                     !(commands_by_id(id)->flags & CMD_BLOCKING);
    }
}

static struct placement placement_of_row(const struct placement_row *row, int argc,
                                         const struct sv *argv)
{
    struct placement p = {row->kind, row->req_flags, row->why};

    if (row->check != NULL) {
        p = row->check(argc, argv);
        p.req_flags |= row->req_flags;
        if (p.kind == PLACE_REFUSED && p.why == NULL)
            p.why = row->why;
    }
    return p;
}

/* A name that is not in the command table: sluice's own verbs by name,
 * else whatever Redis said of it when asked. */
static struct placement placement_unknown(int argc, const struct sv *argv)
{
    const struct learned_command *lc;

    for (int i = 0; i < PLACEMENT_ROW_COUNT && argc > 0; i++) {
        if (commands_lookup(placement_rows[i].name, strlen(placement_rows[i].name)) == NULL &&
            sv_ieq(argv[0], placement_rows[i].name))
            return placement_of_row(&placement_rows[i], argc, argv);
    }
    /* No module has such a name: Redis answers it with one error. */
    if (argc == 0 || argv[0].len > LEARN_MAX_NAME || memchr(argv[0].ptr, '\0', argv[0].len))
        return (struct placement){PLACE_SHARED, 0, NULL};
    lc = learned_lookup(argv[0].ptr, argv[0].len);
    if (lc == NULL)
        return (struct placement){PLACE_LEARN, 0, NULL};
    if (!lc->known)   /* Redis does not know it either: it answers one error */
        return (struct placement){PLACE_SHARED, 0, NULL};
    if (lc->flags & (CMD_BLOCKING | CMD_PUBSUB))
        return (struct placement){PLACE_PRIVATE, 0, NULL};
    return (struct placement){PLACE_SHARED, 0, NULL};
}

struct placement placement_decide_slow(const struct command *cmd, int argc,
                                       const struct sv *argv)
{
    const struct placement_row *row;

    if (cmd == NULL)
        return placement_unknown(argc, argv);
    row = placement_by_id[cmd->id];
    if (row != NULL)
        return placement_of_row(row, argc, argv);
    if (cmd->flags & CMD_BLOCKING)
        return (struct placement){PLACE_PRIVATE, 0, "blocks its connection"};
    return (struct placement){PLACE_SHARED, 0, NULL};
}

void placement_refusal(char *out, size_t size, const char *name, size_t len, const char *why)
{
    int n = len < 64 ? (int)len : 64;

    snprintf(out, size, "-ERR sluice does not forward '%.*s': %s", n, name, why);
}

/* ---- checks per request ---- */

static struct placement placement_shared(void)
{
    return (struct placement){PLACE_SHARED, 0, NULL};
}

static struct placement placement_private(void)
{
    return (struct placement){PLACE_PRIVATE, 0, NULL};
}

/* XREAD and XREADGROUP block only with a BLOCK option. Their options are
 * walked as Redis walks them (xreadCommand): each option takes its values,
 * so a key, group or consumer named "streams" or "block" is never taken
 * for one. STREAMS ends the options. */
static struct placement placement_check_stream_read(int argc, const struct sv *argv, int group)
{
    for (int i = 1; i < argc; i++) {
        int more = argc - i - 1;
        if (sv_ieq(argv[i], "block") && more >= 1)
            return placement_private();
        if (sv_ieq(argv[i], "count") && more >= 1)
            i++;
        else if (group && sv_ieq(argv[i], "group") && more >= 2)
            i += 2;
        else if (!(group && sv_ieq(argv[i], "noack")))
            break;   /* STREAMS, or a syntax error Redis answers at once */
    }
    return placement_shared();
}

static struct placement placement_check_xread(int argc, const struct sv *argv)
{
    return placement_check_stream_read(argc, argv, 0);
}

static struct placement placement_check_xreadgroup(int argc, const struct sv *argv)
{
    return placement_check_stream_read(argc, argv, 1);
}

/* AUTH or HELLO AUTH that goes to Redis (no users of sluice's own): on
 * the client's own connection. In cluster mode that is one node's, while
 * the client's other commands run on other nodes as sluice's user: a
 * login that would hold for part of the keyspace only is refused. */
static struct placement placement_forwarded_login(void)
{
    if (config_cluster_mode(&server.cfg))
        return (struct placement){PLACE_REFUSED, 0, WHY_CLUSTER_AUTH};
    return placement_private();
}

/* HELLO is sluice's: it keeps the protocol, name and user of its own
 * clients. Only when Redis authenticates the clients (no users file, no
 * backend_password) does HELLO ... AUTH go to Redis, on the client's own
 * connection, as AUTH does. */
static struct placement placement_check_hello(int argc, const struct sv *argv)
{
    if (config_auth_local(&server.cfg) || (argc >= 2 && sv_ieq(argv[1], "3")))
        return (struct placement){PLACE_LOCAL, 0, NULL};
    for (int i = 2; i < argc; i++) {
        if (sv_ieq(argv[i], "auth"))
            return placement_forwarded_login();
    }
    return (struct placement){PLACE_LOCAL, 0, NULL};
}

/* AUTH and ACL WHOAMI: sluice's when it authenticates clients itself
 * (auth.c); else AUTH's user belongs to the client's own connection. */
static struct placement placement_check_auth(int argc, const struct sv *argv)
{
    if (config_auth_local(&server.cfg))
        return (struct placement){PLACE_LOCAL, 0, NULL};
    return argc >= 1 && sv_ieq(argv[0], "acl") ? placement_shared() : placement_forwarded_login();
}

/* SYNC and PSYNC: standalone, on the client's own connection, which then
 * becomes a byte tunnel (REQ_TUNNEL); cluster mode refuses them. */
static struct placement placement_check_sync(int argc, const struct sv *argv)
{
    (void)argc;
    (void)argv;
    if (config_cluster_mode(&server.cfg))
        return (struct placement){PLACE_REFUSED, 0, WHY_CLUSTER_REPLICATION};
    return placement_private();
}

/* REPLCONF is state of the replica's connection: its own. ACK and GETACK
 * (at any option position, as Redis reads them) get no reply from Redis,
 * which would leave the request unanswered: inside a tunnel nothing is
 * parsed, so only these stray ones are refused. */
static struct placement placement_check_replconf(int argc, const struct sv *argv)
{
    if (config_cluster_mode(&server.cfg))
        return (struct placement){PLACE_REFUSED, 0, WHY_CLUSTER_REPLICATION};
    for (int i = 1; i < argc; i += 2) {
        if (sv_ieq(argv[i], "ack") || sv_ieq(argv[i], "getack"))
            return (struct placement){PLACE_REFUSED, 0, WHY_REPLCONF_ACK};
    }
    return placement_private();
}

/* A one-shot connection standalone; refused for WHY in cluster mode. */
static struct placement placement_control_standalone(const char *why)
{
    if (config_cluster_mode(&server.cfg))
        return (struct placement){PLACE_REFUSED, 0, why};
    return (struct placement){PLACE_CONTROL, 0, NULL};
}

/* CLIENT PAUSE and UNPAUSE: a one-shot connection (pause.c follows the
 * pause); in cluster mode cluster_split.c sends them to every primary, as
 * one Redis would pause everything. */
static struct placement placement_check_pause(int argc, const struct sv *argv)
{
    (void)argc;
    (void)argv;
    return (struct placement){PLACE_CONTROL, 0, NULL};
}

/* SHUTDOWN: a one-shot connection (past a busy script); cluster mode
 * refuses it. */
static struct placement placement_check_shutdown(int argc, const struct sv *argv)
{
    (void)argc;
    (void)argv;
    return placement_control_standalone(WHY_CLUSTER_SHUTDOWN);
}
