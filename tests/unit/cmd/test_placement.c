/* test_placement.c - the table of where every command may run: fixed rows,
 * the default by flags, the per-request checks (XREAD/XREADGROUP options
 * walked by syntax, CLIENT KILL forms, HELLO 3), and that every command it
 * says sluice answers has a handler. */
#include <stdlib.h>

#include "commands.h"
#include "local.h"
#include "placement.h"
#include "request.h"
#include "unit.h"

#define MAX_ARGS 16

/* Decide for a request written as space-separated words. */
static struct placement decide(const char *line)
{
    static char buf[512];
    struct sv argv[MAX_ARGS];
    int argc = 0;
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", line);
    for (char *w = strtok_r(buf, " ", &save); w != NULL && argc < MAX_ARGS;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = (struct sv){w, strlen(w)};
    return placement_decide(commands_resolve(argc, argv), argc, argv);
}

static enum placement_kind kind_of(const char *line)
{
    return decide(line).kind;
}

static void setup(void)
{
    static int done;
    if (!done) {
        commands_init();
        placement_init();
        done = 1;
    }
}

static void test_defaults_by_flags(void)
{
    setup();
    CHECK(kind_of("GET k") == PLACE_SHARED);
    CHECK(kind_of("SET k v") == PLACE_SHARED);
    CHECK(kind_of("EVAL s 0") == PLACE_SHARED);
    CHECK(kind_of("BLPOP k 0") == PLACE_PRIVATE);
    CHECK(kind_of("BZPOPMIN k 0") == PLACE_PRIVATE);
    CHECK(kind_of("BLMPOP 0 1 k LEFT") == PLACE_PRIVATE);
}

static void test_fixed_rows(void)
{
    setup();
    CHECK(kind_of("SELECT 1") == PLACE_PRIVATE);
    CHECK(kind_of("MULTI") == PLACE_PRIVATE);
    CHECK(kind_of("SUBSCRIBE ch") == PLACE_PRIVATE);
    CHECK(decide("SUBSCRIBE ch").req_flags != 0);
    CHECK(kind_of("CLIENT REPLY OFF") == PLACE_LOCAL);
    CHECK(kind_of("SCRIPT KILL") == PLACE_CONTROL);
    CHECK(kind_of("FUNCTION KILL") == PLACE_CONTROL);
    CHECK(kind_of("SHUTDOWN NOSAVE") == PLACE_CONTROL);
    CHECK(kind_of("SCRIPT FLUSH") == PLACE_SHARED);
    CHECK(kind_of("LOCK k 1000") == PLACE_LOCAL);
    CHECK(kind_of("unlock k") == PLACE_LOCAL);
    CHECK(kind_of("PROXY PING") == PLACE_LOCAL);
}

static void test_refused(void)
{
    struct placement p;
    char text[256];

    setup();
    /* REPLCONF ACK/GETACK get no reply from Redis outside a replica's
     * stream (inside a SYNC tunnel nothing is parsed). */
    CHECK(kind_of("REPLCONF ACK 0") == PLACE_REFUSED);
    CHECK(kind_of("REPLCONF listening-port 1 getack *") == PLACE_REFUSED);
    p = decide("REPLCONF ACK 0");
    CHECK(p.why != NULL);
    placement_refusal(text, sizeof(text), "replconf", 8, p.why);
    CHECK_STR(text, "-ERR sluice does not forward 'replconf': REPLCONF ACK and GETACK get "
                    "no reply: only a replica sends them, after SYNC");
}

/* Standalone: SYNC/PSYNC tunnel on the client's own connection, REPLCONF
 * is its state, CLIENT PAUSE/UNPAUSE go on one-shot connections. */
static void test_replication_and_pause(void)
{
    setup();
    CHECK(kind_of("SYNC") == PLACE_PRIVATE);
    CHECK(decide("SYNC").req_flags & REQ_TUNNEL);
    CHECK(kind_of("PSYNC ? -1") == PLACE_PRIVATE);
    CHECK(decide("PSYNC ? -1").req_flags & REQ_TUNNEL);
    CHECK(kind_of("REPLCONF listening-port 6380") == PLACE_PRIVATE);
    CHECK(kind_of("REPLCONF capa eof capa psync2") == PLACE_PRIVATE);
    CHECK(!(decide("REPLCONF capa eof").req_flags & REQ_TUNNEL));
    CHECK(kind_of("CLIENT PAUSE 1000") == PLACE_CONTROL);
    CHECK(kind_of("CLIENT PAUSE 1000 WRITE") == PLACE_CONTROL);
    CHECK(kind_of("CLIENT UNPAUSE") == PLACE_CONTROL);
}

/* Options are walked as Redis walks them: names of keys, groups and
 * consumers never count as options. */
static void test_stream_reads(void)
{
    setup();
    CHECK(kind_of("XREAD STREAMS s 0") == PLACE_SHARED);
    CHECK(kind_of("XREAD BLOCK 0 STREAMS s $") == PLACE_PRIVATE);
    CHECK(kind_of("XREAD COUNT 5 BLOCK 10 STREAMS s $") == PLACE_PRIVATE);
    CHECK(kind_of("XREAD COUNT 1 STREAMS block $") == PLACE_SHARED);
    CHECK(kind_of("XREAD STREAMS streams block 0 0") == PLACE_SHARED);
    CHECK(kind_of("XREADGROUP GROUP g streams BLOCK 0 STREAMS s >") == PLACE_PRIVATE);
    CHECK(kind_of("XREADGROUP GROUP streams c BLOCK 0 STREAMS s >") == PLACE_PRIVATE);
    CHECK(kind_of("XREADGROUP GROUP block block STREAMS s >") == PLACE_SHARED);
    CHECK(kind_of("XREADGROUP GROUP g c NOACK BLOCK 5 STREAMS s >") == PLACE_PRIVATE);
    CHECK(kind_of("XREADGROUP BLOCK 5 GROUP g c STREAMS s >") == PLACE_PRIVATE);
    CHECK(kind_of("XREADGROUP GROUP g c COUNT 1 STREAMS s >") == PLACE_SHARED);
    CHECK(kind_of("XREAD BLOCK") == PLACE_SHARED);   /* a syntax error: answered at once */
}

/* CLIENT KILL acts on sluice's clients: every form goes to a shared
 * connection only to be checked there, with a filter that matches no
 * Redis connection (clientid.c); so none is refused. CLIENT LIST and INFO
 * are checked the same way. */
static void test_client_kill(void)
{
    setup();
    CHECK(kind_of("CLIENT KILL ID 12") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL ADDR 127.0.0.1:5000") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL 127.0.0.1:5000") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL ID 12 TYPE normal") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL TYPE normal") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL USER default") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL LADDR 127.0.0.1:6379") == PLACE_SHARED);
    CHECK(kind_of("CLIENT KILL SKIPME no") == PLACE_SHARED);
    CHECK(kind_of("CLIENT LIST") == PLACE_SHARED);
    CHECK(kind_of("CLIENT INFO") == PLACE_SHARED);
    CHECK(kind_of("CLIENT PAUSE 10") == PLACE_CONTROL);   /* forwarded: pause.c follows it */
}

/* HELLO is sluice's (protocol, name, user); without a users file or
 * backend_password, HELLO ... AUTH goes to Redis on the client's own
 * connection, as AUTH does. */
static void test_hello(void)
{
    setup();
    CHECK(kind_of("HELLO 3") == PLACE_LOCAL);
    CHECK(kind_of("HELLO 2") == PLACE_LOCAL);
    CHECK(kind_of("HELLO") == PLACE_LOCAL);
    CHECK(kind_of("HELLO 2 SETNAME x") == PLACE_LOCAL);
    CHECK(kind_of("HELLO 2 AUTH u p") == PLACE_PRIVATE);
    CHECK(kind_of("AUTH p") == PLACE_PRIVATE);
    CHECK(kind_of("AUTH u p") == PLACE_PRIVATE);
}

/* Every command the table says sluice answers has a handler in local.c
 * (the lock verbs and PROXY are sluice's own names, not in the table). */
static void test_local_rows_have_handlers(void)
{
    setup();
    for (int id = 0; id < commands_count(); id++) {
        const struct command *cmd = commands_by_id(id);
        struct sv argv[1] = {{cmd->name, strlen(cmd->name)}};
        if (strcmp(cmd->name, "hello") == 0)
            continue;   /* LOCAL only for version 3: checked above */
        if (placement_decide(cmd, 1, argv).kind == PLACE_LOCAL && !local_handles(cmd->name)) {
            fprintf(stderr, "no local handler for %s\n", cmd->name);
            CHECK(0);
        }
    }
    CHECK(local_handles("hello"));
    CHECK(local_handles("proxy"));
}

/* A name neither in the table nor learned must be asked about first. */
static void test_unknown_names(void)
{
    setup();
    CHECK(kind_of("FOO.BAR 1") == PLACE_LEARN);
    CHECK(kind_of("sluicetest.block 10") == PLACE_LEARN);
}

UNIT_MAIN("placement", {"defaults by flags", test_defaults_by_flags},
          {"fixed rows", test_fixed_rows}, {"refused", test_refused},
          {"replication and pause", test_replication_and_pause},
          {"stream reads", test_stream_reads}, {"client kill", test_client_kill},
          {"hello", test_hello}, {"local rows have handlers", test_local_rows_have_handlers},
          {"unknown names", test_unknown_names})
