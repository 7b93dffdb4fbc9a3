/* local.c - owns the replies of commands sluice answers itself. Handlers
 * are rows of local_commands[]; they write the reply, never forward. */
#include "local.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <ctype.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "client_int.h"
#include "clientid.h"
#include "control.h"
#include "cluster.h"
#include "sentinel.h"
#include "commands.h"
#include "proxysub.h"
#include "replicas.h"
#include "reply.h"
#include "request.h"
#include "server.h"
#include "slowlog.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"
#include "top.h"
#include "users.h"
#include "glob.h"
#include "value.h"

typedef void local_handler(struct client *c, int argc, const struct sv *argv,
                           struct evbuffer *out);

struct local_command {
    const char *name;      /* as in the command table ("client|setname") or sluice's own */
    int arity;             /* Redis-style: negative means at least -arity */
    local_handler *run;
    int queues;            /* inside MULTI Redis queues it: it runs at EXEC (multi.c) */
    int session;           /* reads or sets what an earlier reply may change (the name) */
    int subscribed_refused; /* Redis refuses it in a RESP2 subscribed context */
    int at_turn;           /* its reply is read from sluice's state and changes nothing:
                              built at its turn (local_at_turn) */
};

static local_handler local_client_setname, local_client_getname, local_client_id,
    local_client_reply, local_client_list, local_client_info, local_quit, local_hello,
    local_auth, local_acl_whoami, local_proxy;

/* name, arity, handler, queues (in MULTI), session (runs behind earlier
 * replies), subscribed_refused (RESP2 pub/sub), at_turn (a reply of
 * sluice's state: a name, a listing, counters; PROXY: per subcommand). */
static const struct local_command local_commands[] = {
    {"client|setname", 3, local_client_setname, 1, 1, 1, 0},
    {"client|getname", 2, local_client_getname, 1, 1, 1, 1},
    {"client|id", 2, local_client_id, 1, 0, 1, 1},
    {"client|reply", 3, local_client_reply, 0, 0, 1, 0},
    {"client|list", -2, local_client_list, 1, 1, 0, 1},   /* at EXEC (multi.c) */
    {"client|info", 2, local_client_info, 1, 1, 0, 1},
    {"quit", -1, local_quit, 0, 0, 0, 0},  /* Redis 7.0 answers QUIT at once, even in MULTI */
    {"hello", -1, local_hello, 0, 0, 1, 0},
    /* When sluice authenticates clients (auth.c); a subscriber keeps its user. */
    {"auth", -2, local_auth, 0, 0, 1, 0},
    {"acl|whoami", 2, local_acl_whoami, 0, 1, 1, 1},
    {"proxy", -2, local_proxy, 0, 0, 0, 1},   /* sluice's own: Redis never sees it */
};
#define LOCAL_COUNT (int)(sizeof(local_commands) / sizeof(local_commands[0]))

/* Handler row per command id, so the per-request check is one load. */
static const struct local_command **local_by_id;

void local_init(void)
{
    local_by_id = calloc((size_t)commands_count(), sizeof(*local_by_id));
    for (int id = 0; id < commands_count(); id++) {
        for (int i = 0; i < LOCAL_COUNT; i++) {
            if (strcmp(commands_by_id(id)->name, local_commands[i].name) == 0)
                local_by_id[id] = &local_commands[i];
        }
    }
}

int local_handles(const char *name)
{
    for (int i = 0; i < LOCAL_COUNT; i++) {
        if (strcmp(local_commands[i].name, name) == 0)
            return 1;
    }
    return 0;
}

static const struct local_command *local_find(const struct request *req, int argc,
                                              const struct sv *argv)
{
    if (req->cmd != NULL)
        return local_by_id[req->cmd->id];
    for (int i = 0; i < LOCAL_COUNT && argc > 0; i++) {
        if (sv_ieq(argv[0], local_commands[i].name))
            return &local_commands[i];
    }
    return NULL;
}

static int local_arity_ok(const struct local_command *lc, int argc)
{
    return lc->arity > 0 ? argc == lc->arity : argc >= -lc->arity;
}

int local_subscribed_refuses(const struct request *req, int argc, const struct sv *argv)
{
    const struct local_command *lc = local_find(req, argc, argv);

    /* Redis checks the arity first: a wrong one gets its own error. */
    return lc != NULL && lc->subscribed_refused && req->cmd != NULL && local_arity_ok(lc, argc);
}

static int local_proxy_at_turn(struct sv sub);

int local_at_turn(const struct request *req, int argc, const struct sv *argv)
{
    const struct local_command *lc = local_find(req, argc, argv);

    if (lc == NULL || !lc->at_turn)
        return 0;
    return lc->run != local_proxy || argc != 2 || local_proxy_at_turn(argv[1]);
}

int local_reads_session(const struct request *req, int argc, const struct sv *argv)
{
    const struct local_command *lc = local_find(req, argc, argv);

    return lc != NULL && lc->session;
}

enum local_in_multi local_in_multi(const struct request *req, int argc, const struct sv *argv)
{
    const struct local_command *lc = local_find(req, argc, argv);

    if (lc == NULL || !lc->queues)
        return LOCAL_MULTI_NOW;
    return local_arity_ok(lc, argc) ? LOCAL_MULTI_QUEUE : LOCAL_MULTI_ERROR;
}

/* Whether LC must wait for a login Redis wants (auth_redis_login_needed),
 * as Redis's own commands do: only QUIT, HELLO (which says so itself),
 * AUTH and PROXY PING go on. */
static int local_waits_for_login(const struct client *c, const struct local_command *lc,
                                 int argc, const struct sv *argv)
{
    if (!auth_redis_login_needed(c))
        return 0;
    if (lc->run == local_proxy)
        return !(argc == 2 && sv_ieq(argv[1], "ping"));
    return lc->run != local_quit && lc->run != local_hello && lc->run != local_auth;
}

static void local_run(struct client *c, struct request *req, int argc, const struct sv *argv,
                      struct evbuffer *out);

/* Run REQ and mark it failed when its reply is an error (the first byte
 * of what it added to OUT, which may hold earlier replies). */
void local_execute(struct client *c, struct request *req, int argc, const struct sv *argv,
                   struct evbuffer *out)
{
    size_t before = evbuffer_get_length(out);
    struct evbuffer_ptr at;
    char first = 0;

    local_run(c, req, argc, argv, out);
    if (evbuffer_get_length(out) > before && evbuffer_ptr_set(out, &at, before, EVBUFFER_PTR_SET) == 0 &&
        evbuffer_copyout_from(out, &at, &first, 1) == 1 && first == '-')
        req->flags |= REQ_FAILED;
}

static void local_run(struct client *c, struct request *req, int argc, const struct sv *argv,
                      struct evbuffer *out)
{
    const struct local_command *lc = local_find(req, argc, argv);

    STAT_INC(total_local);
    if (lc == NULL) {   /* placement.c's table and this one disagree: a bug */
        reply_error(out, "sluice has no handler for this command");
        return;
    }
    /* Redis says "wrong number of arguments" before NOAUTH; PROXY, which
     * Redis does not have, gets NOAUTH first (as auth.c answers it). */
    if (!local_arity_ok(lc, argc) && lc->run != local_proxy) {
        reply_error(out, "wrong number of arguments for '%s' command", lc->name);
        return;
    }
    if (local_waits_for_login(c, lc, argc, argv)) {
        reply_error(out, "%s", USERS_ERR_NOAUTH);
        return;
    }
    if (!local_arity_ok(lc, argc)) {
        reply_error(out, "wrong number of arguments for '%s' command", lc->name);
        return;
    }
    lc->run(c, argc, argv, out);
    if (lc->run == local_client_reply && sv_ieq(argv[2], "on"))
        req->flags &= ~(unsigned)REQ_NOREPLY;   /* Redis writes +OK once ON cleared OFF */
}

/* Redis's rule: a name of printable ASCII without spaces. */
static int local_valid_name(struct sv name)
{
    for (size_t i = 0; i < name.len; i++) {
        if (name.ptr[i] < '!' || name.ptr[i] > '~')
            return 0;
    }
    return 1;
}

static void local_client_setname(struct client *c, int argc, const struct sv *argv,
                                 struct evbuffer *out)
{
    (void)argc;
    if (!local_valid_name(argv[2])) {
        reply_error(out, "Client names cannot contain spaces, newlines or special characters.");
        return;
    }
    free(c->name);
    c->name = argv[2].len > 0 ? strndup(argv[2].ptr, argv[2].len) : NULL;
    throttle_client_changed(c);
    reply_status(out, "OK");
}

static void local_client_getname(struct client *c, int argc, const struct sv *argv,
                                 struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    if (c->name == NULL)
        reply_nil(out, c->resp);
    else
        reply_bulk(out, c->name, strlen(c->name));
}

static void local_client_id(struct client *c, int argc, const struct sv *argv,
                            struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    reply_integer(out, (long long)c->id);
}

static void local_client_list(struct client *c, int argc, const struct sv *argv,
                              struct evbuffer *out)
{
    clientid_list(c, argc, argv, out);
}

static void local_client_info(struct client *c, int argc, const struct sv *argv,
                              struct evbuffer *out)
{
    clientid_info(c, argc, argv, out);
}

/* CLIENT REPLY ON|OFF|SKIP, as Redis 7.0 runs it: ON answers +OK (even
 * under OFF or SKIP: local_execute lets it through), OFF and SKIP answer
 * nothing, SKIP under OFF does nothing. The mode changes here, as the
 * command runs (a refused one changes nothing); client.c drops the
 * replies of the requests framed after it (REQ_NOREPLY): Redis still
 * answers every request sluice sends, so no reply is ever missing on a
 * shared connection. */
static void local_client_reply(struct client *c, int argc, const struct sv *argv,
                               struct evbuffer *out)
{
    (void)argc;
    if (sv_ieq(argv[2], "on")) {
        c->flags &= ~(unsigned)(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
        reply_status(out, "OK");
    } else if (sv_ieq(argv[2], "off")) {
        c->flags |= CLIENT_REPLY_OFF;
    } else if (sv_ieq(argv[2], "skip")) {
        if (!(c->flags & CLIENT_REPLY_OFF))
            c->flags |= CLIENT_REPLY_SKIP;   /* the next request framed: client_reply_mark */
    } else {
        reply_error(out, "syntax error");
    }
}

static void local_quit(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_close_reason(c, "QUIT");
    reply_status(out, "OK");
}

/* AUTH [username] password, answered by sluice (auth.c) with Redis 7.0's
 * replies. */
static void local_auth(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    if (argc > 3) {
        reply_error(out, "syntax error");
        return;
    }
    if (argc == 2 && auth_default_nopass()) {
        reply_error(out, "AUTH <password> called without any password configured for the "
                         "default user. Are you sure your configuration is correct?");
        return;
    }
    if (auth_login(c, argc == 3 ? &argv[1] : NULL, argv[argc - 1]) != 0) {
        reply_error(out, "%s", USERS_ERR_WRONGPASS);
        return;
    }
    throttle_client_changed(c);
    reply_status(out, "OK");
}

static void local_acl_whoami(struct client *c, int argc, const struct sv *argv,
                             struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    reply_bulk(out, c->user, strlen(c->user));
}

/* HELLO's options: SETNAME name, and whether an AUTH option logged in. */
struct local_hello_args {
    long long version;          /* 0: not given */
    const struct sv *name;
    int logged_in;
};

/* Parse HELLO's arguments into A, logging C in at each AUTH option as
 * Redis 7.0 does (so a later bad option leaves C logged in). Returns 0,
 * or -1 with the error in OUT. */
static int local_hello_parse(struct client *c, int argc, const struct sv *argv,
                             struct local_hello_args *a, struct evbuffer *out)
{
    int next = 1;

    memset(a, 0, sizeof(*a));
    if (argc >= 2) {
        if (value_strict_ll(argv[1].ptr, argv[1].len, &a->version) != 0) {
            reply_error(out, "Protocol version is not an integer or out of range");
            return -1;
        }
        next = 2;
        if (a->version < 2 || a->version > 3) {
            reply_error(out, "-NOPROTO unsupported protocol version");
            return -1;
        }
    }
    for (int i = next; i < argc; i++) {
        int more = argc - 1 - i;
        if (sv_ieq(argv[i], "auth") && more >= 2) {
            /* Without users of sluice's own, HELLO 2 AUTH goes to Redis
             * (placement.c); HELLO 3 AUTH cannot: the client's protocol is
             * sluice's to know. */
            if (!auth_local()) {
                reply_error(out, "sluice does not forward HELLO 3 AUTH to Redis: send AUTH, "
                                 "then HELLO 3");
                return -1;
            }
            if (auth_login(c, &argv[i + 1], argv[i + 2]) != 0) {
                reply_error(out, "%s", USERS_ERR_WRONGPASS);
                return -1;
            }
            a->logged_in = 1;
            i += 2;
        } else if (sv_ieq(argv[i], "setname") && more >= 1) {
            a->name = &argv[i + 1];
            i += 1;
        } else {
            reply_error(out, "Syntax error in HELLO option '%.*s'",
                        argv[i].len > 128 ? 128 : (int)argv[i].len, argv[i].ptr);
            return -1;
        }
    }
    return 0;
}

/* HELLO's reply: what Redis says of itself, with sluice's client id and
 * the client's protocol; a map in RESP3, a flat array in RESP2. */
static void local_hello_reply(struct client *c, struct evbuffer *out)
{
    const char *version, *mode, *role;

    backend_server_hello(backend_default_node(), &version, &mode, &role);
    if (c->resp == 3)
        evbuffer_add_printf(out, "%%7\r\n");
    else
        reply_array_header(out, 14);
    reply_bulk(out, "server", 6);
    reply_bulk(out, "redis", 5);
    reply_bulk(out, "version", 7);
    reply_bulk(out, version, strlen(version));
    reply_bulk(out, "proto", 5);
    reply_integer(out, c->resp);
    reply_bulk(out, "id", 2);
    reply_integer(out, (long long)c->id);
    reply_bulk(out, "mode", 4);
    reply_bulk(out, mode[0] != '\0' ? mode : "standalone", mode[0] != '\0' ? strlen(mode) : 10);
    reply_bulk(out, "role", 4);
    reply_bulk(out, role[0] != '\0' ? role : "master", role[0] != '\0' ? strlen(role) : 6);
    reply_bulk(out, "modules", 7);
    reply_array_header(out, 0);
}

/* HELLO [protover [AUTH username password] [SETNAME clientname]], in
 * Redis 7.0's order: version, options, login, then (logged in) the name
 * and the protocol. */
static void local_hello(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    struct local_hello_args a;
    int parsed = local_hello_parse(c, argc, argv, &a, out);

    if (a.logged_in)
        throttle_client_changed(c);   /* rules see the new user, whatever follows */
    if (parsed != 0)
        return;
    if (auth_required(c) || auth_redis_login_needed(c)) {
        reply_error(out, "-NOAUTH HELLO must be called with the client already authenticated, "
                         "otherwise the HELLO AUTH <user> <pass> option can be used to "
                         "authenticate the client and select the RESP protocol version at the "
                         "same time");
        return;
    }
    if (a.name != NULL && !local_valid_name(*a.name)) {
        reply_error(out, "Client names cannot contain spaces, newlines or special characters.");
        return;
    }
    if (a.name != NULL) {
        free(c->name);
        c->name = a.name->len > 0 ? strndup(a.name->ptr, a.name->len) : NULL;
    }
    if (a.name != NULL)
        throttle_client_changed(c);
    if (a.version != 0)
        c->resp = (int)a.version;
    local_hello_reply(c, out);
}

int local_hello_to_resp2_subscribed(const struct client *c, int argc, const struct sv *argv)
{
    return argc >= 2 && c->resp == 3 && argv[1].len == 1 && argv[1].ptr[0] == '2' &&
           client_subscribed_resp3(c);
}

static void local_proxy_ping(int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    reply_status(out, "PONG");
}

static void local_info_proxy(struct evbuffer *text)
{
    evbuffer_add_printf(text, "sluice_version:%s\r\nprocess_id:%d\r\n"
                              "uptime_in_seconds:%lld\r\nconfig_file:%s\r\n"
                              "config_reloads_ok:%llu\r\nconfig_reloads_error:%llu\r\n"
                              "connected_clients:%d\r\n",
                        SLUICE_VERSION, (int)getpid(),
                        (long long)(time(NULL) - server.start_time), server.cfg.path,
                        server.config_reloads_ok, server.config_reloads_error, client_count());
}

static void local_info_rules(struct evbuffer *text)
{
    evbuffer_add_printf(text, "rules_file:%s\r\n", server.cfg.rules != NULL ? server.cfg.rules : "");
    limiter_write_info(text);
}

static void local_info_auth(struct evbuffer *text)
{
    evbuffer_add_printf(text, "users_file:%s\r\n", server.cfg.users != NULL ? server.cfg.users : "");
    auth_write_info(text);
}

static void (*local_locks_writer)(struct evbuffer *text);

void local_set_locks_info(void (*fn)(struct evbuffer *text))
{
    local_locks_writer = fn;
}

static void local_info_locks(struct evbuffer *text)
{
    if (local_locks_writer != NULL)
        local_locks_writer(text);
}

/* PROXY INFO's sections, in their order: name, title, writer, and whether
 * the default (no section named) includes it; as Redis's INFO, latency
 * percentiles are left to who asks for them ("all", "everything" or by
 * name). commandstats stays in the default, where it has always been. */
static const struct {
    const char *name;
    const char *title;
    void (*write)(struct evbuffer *text);
    int in_default;
} local_info_sections[] = {
    {"proxy", "Proxy", local_info_proxy, 1},
    {"stats", "Stats", stats_write_info, 1},
    {"commandstats", "Commandstats", stats_write_commandstats, 1},
    {"latencystats", "Latencystats", stats_write_latencystats, 0},
    {"backends", "Backends", backend_write_info, 1},
    {"replication", "Replication", replicas_write_info, 1},
    {"sentinel", "Sentinel", sentinel_write_info, 1},
    {"tls", "TLS", tls_write_info, 1},
    {"rules", "Rules", local_info_rules, 1},
    {"auth", "Auth", local_info_auth, 1},
    {"locks", "Locks", local_info_locks, 1},
    {"controls", "Controls", control_write_info, 1},
};
#define LOCAL_INFO_SECTIONS (int)(sizeof(local_info_sections) / sizeof(local_info_sections[0]))

/* Whether section I is asked for by the names ARGV[2..ARGC) (none: the
 * default set), matched as Redis's INFO does: case-insensitive, "all" and
 * "everything" for every section, "default" for the default set. */
static int local_info_wanted(int i, int argc, const struct sv *argv)
{
    if (argc <= 2)
        return local_info_sections[i].in_default;
    for (int a = 2; a < argc; a++) {
        if (sv_ieq(argv[a], "all") || sv_ieq(argv[a], "everything") ||
            sv_ieq(argv[a], local_info_sections[i].name) ||
            (sv_ieq(argv[a], "default") && local_info_sections[i].in_default))
            return 1;
    }
    return 0;
}

static void local_proxy_info(int argc, const struct sv *argv, struct evbuffer *out)
{
    struct evbuffer *text = evbuffer_new();
    int any = 0;

    for (int i = 0; i < LOCAL_INFO_SECTIONS; i++) {
        if (!local_info_wanted(i, argc, argv))
            continue;
        evbuffer_add_printf(text, "%s# %s\r\n", any ? "\r\n" : "", local_info_sections[i].title);
        local_info_sections[i].write(text);
        any = 1;
    }
    reply_bulk_buffer(out, text);
    evbuffer_free(text);
}

static void local_proxy_rules(int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    limiter_write_rules(out);
}

/* Re-read sluice.ini, the rule and users files and the TLS certificates,
 * all or nothing: an error changes nothing and the first one (FILE:LINE:
 * message) is the reply. Changed keys that only a restart applies are
 * named in the status ("OK; restart needed for: listen, backend"). */
static void local_proxy_reload(int argc, const struct sv *argv, struct evbuffer *out)
{
    struct errlist errs = {0};
    char first[1024], note[512], status[600];

    (void)argc;
    (void)argv;
    if (server_reload(&errs, note, sizeof(note)) == 0) {
        snprintf(status, sizeof(status), "OK%s%s", note[0] != '\0' ? "; restart needed for: " : "",
                 note);
        reply_status(out, status);
    } else {
        errlist_first(&errs, first, sizeof(first));
        reply_error(out, "not reloaded: %s", first);
    }
    errlist_free(&errs);
}

static void local_proxy_help(int argc, const struct sv *argv, struct evbuffer *out);

static void local_proxy_cluster(int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    cluster_write_map(out);
}

/* PROXY SLOWLOG GET [count] | LEN | RESET, with Redis's SLOWLOG replies
 * and errors (GET's count: 10 when absent, -1 for all). */
static void local_proxy_slowlog(int argc, const struct sv *argv, struct evbuffer *out)
{
    long long count = 10;

    if (argc == 3 && sv_ieq(argv[2], "len")) {
        reply_integer(out, (long long)slowlog_len());
    } else if (argc == 3 && sv_ieq(argv[2], "reset")) {
        slowlog_reset();
        reply_status(out, "OK");
    } else if ((argc == 3 || argc == 4) && sv_ieq(argv[2], "get")) {
        if (argc == 4 && (value_strict_ll(argv[3].ptr, argv[3].len, &count) != 0 || count < -1)) {
            reply_error(out, "count should be greater than or equal to -1");
            return;
        }
        slowlog_write(out, count);
    } else {
        reply_error(out, "unknown subcommand or wrong number of arguments for 'slowlog'. "
                         "Try PROXY HELP.");
    }
}

static void local_proxy_sentinel(int argc, const struct sv *argv, struct evbuffer *out)
{
    struct evbuffer *text = evbuffer_new();

    (void)argc;
    (void)argv;
    evbuffer_add_printf(text, "# Sentinel\r\n");
    sentinel_write_info(text);
    reply_bulk_buffer(out, text);
    evbuffer_free(text);
}

/* PROXY CONFIG's gathering of the keys that match its patterns. */
struct local_config_walk {
    int argc;
    const struct sv *argv;
    struct evbuffer *pairs;
    long long count;
};

static void local_config_pair(void *ctx, const char *name, const char *value)
{
    struct local_config_walk *w = ctx;
    int wanted = w->argc <= 2;

    for (int i = 2; i < w->argc && !wanted; i++)
        wanted = glob_match(w->argv[i].ptr, w->argv[i].len, name, strlen(name));
    if (!wanted)
        return;
    reply_bulk(w->pairs, name, strlen(name));
    reply_bulk(w->pairs, value, strlen(value));
    w->count++;
}

/* PROXY CONFIG [pattern ...]: the running configuration, every key of
 * sluice.ini's [proxy] as it applies now (a key that waits for a restart
 * shows its running value), name and value pairs as Redis's CONFIG GET
 * (a map in RESP3); passwords "(redacted)". */
static void local_proxy_config(struct client *caller, int argc, const struct sv *argv,
                               struct evbuffer *out)
{
    struct local_config_walk w = {argc, argv, evbuffer_new(), 0};
    char header[32];

    config_each(&server.cfg, local_config_pair, &w);
    if (caller->resp == 3) {
        evbuffer_add(out, header, (size_t)reply_format_header(header, '%', w.count));
    } else {
        reply_array_header(out, 2 * w.count);
    }
    evbuffer_add_buffer(out, w.pairs);
    evbuffer_free(w.pairs);
}

/* PROXY subcommands: their names and permissions are proxysub.h's one
 * list (the users module grants from it); here, by its ids, the handler,
 * help line, whether the reply is read from sluice's state and built at
 * its turn (RELOAD acts as framed), and whether it takes arguments after
 * its name. A subcommand of the list without a row here answers as an
 * unknown one. */
static const char *const local_proxy_names[PROXYSUB_COUNT] = {
#define X(name, perm) #name,
    PROXYSUB_LIST(X)
#undef X
};

static const struct {
    void (*run)(int argc, const struct sv *argv, struct evbuffer *out);
    const char *help;
    int at_turn;
    int takes_args;
    /* Instead of run: a control, which needs who asked (its audit line). */
    void (*control)(struct client *caller, int argc, const struct sv *argv,
                    struct evbuffer *out);
} local_proxy_subcommands[PROXYSUB_COUNT] = {
    [PROXYSUB_ping] = {local_proxy_ping, "    Return PONG from sluice itself (not from Redis).", 1, 0},
    [PROXYSUB_info] = {local_proxy_info,
     "    [<section> ...] Counters and states of sluice, its clients, backends and rules; "
     "sections as INFO's (commandstats, latencystats, all...).", 1, 1},
    [PROXYSUB_rules] = {local_proxy_rules, "    Every rate-limit rule with its counters.", 1, 0},
    [PROXYSUB_cluster] = {local_proxy_cluster,
     "    Cluster mode: the slot map as sluice sees it, node states, refresh and redirect counters.",
     1, 0},
    [PROXYSUB_sentinel] = {local_proxy_sentinel,
     "    Sentinel mode: the primary, its replicas, each Sentinel's state, the last switch.", 1,
     0},
    [PROXYSUB_reload] = {local_proxy_reload, "    Read sluice.ini, the rule and users files and the TLS certificates again, all or nothing.", 0, 0},
    [PROXYSUB_slowlog] = {local_proxy_slowlog,
     "    GET [count] | LEN | RESET: requests slower than slowlog_log_slower_than, as Redis's "
     "SLOWLOG, with the user and the time in Redis.", 1, 1},
    [PROXYSUB_top] = {top_command,
     "    CLIENTS|USERS|NAMES|IPS|COMMANDS|KEYS [COUNT n]: the busiest, as [subject, "
     "requests/s over 10 s, requests, rejected, delayed].", 1, 1},
    [PROXYSUB_config] = {NULL,
     "    [<pattern> ...]: the running configuration ([proxy] keys of sluice.ini, as they "
     "apply now), as CONFIG GET; passwords (redacted).", 1, 1, local_proxy_config},
    [PROXYSUB_pause] = {NULL,
     "    [WRITE] [TIMEOUT ms]: hold clients' requests (all, or writes) in sluice, not in "
     "Redis, until PROXY RESUME or the timeout.", 1, 1, control_proxy_pause},
    [PROXYSUB_resume] = {NULL, "    End a PROXY PAUSE: the held requests go on, in order.", 1,
     0, control_proxy_resume},
    [PROXYSUB_drain] = {NULL,
     "    [TIMEOUT ms]: /readyz fails (draining); after the grace (15000 ms) accept no "
     "client and close each between replies.", 1, 1, control_proxy_drain},
    [PROXYSUB_undrain] = {NULL, "    Undo PROXY DRAIN: ready and accepting again.", 1, 0,
     control_proxy_undrain},
    [PROXYSUB_ready] = {NULL,
     "    YES|NO: make /readyz fail (NO), or answer as its checks say (YES).", 1, 1,
     control_proxy_ready},
    [PROXYSUB_node] = {NULL,
     "    host:port MAINTENANCE|ACTIVE: no read goes to that replica until ACTIVE.", 1, 1,
     control_proxy_node},
    [PROXYSUB_help] = {local_proxy_help, "    Print this help.", 1, 0},
};
#define LOCAL_PROXY_COUNT PROXYSUB_COUNT

static void local_proxy_help(int argc, const struct sv *argv, struct evbuffer *out)
{
    char upper[16];

    (void)argc;
    (void)argv;
    reply_array_header(out, 1 + 2 * LOCAL_PROXY_COUNT);
    reply_status(out, "PROXY <subcommand>. Subcommands are:");
    for (int i = 0; i < LOCAL_PROXY_COUNT; i++) {
        size_t n = strlen(local_proxy_names[i]);
        for (size_t k = 0; k <= n && k < sizeof(upper); k++)
            upper[k] = (char)toupper((unsigned char)local_proxy_names[i][k]);
        reply_status(out, upper);
        reply_status(out, local_proxy_subcommands[i].help);
    }
}

static int local_proxy_at_turn(struct sv sub)
{
    for (int i = 0; i < LOCAL_PROXY_COUNT; i++) {
        if (sv_ieq(sub, local_proxy_names[i]))
            return local_proxy_subcommands[i].at_turn;
    }
    return 1;   /* an error reply */
}

static void local_proxy(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    for (int i = 0; i < LOCAL_PROXY_COUNT; i++) {
        if ((local_proxy_subcommands[i].run != NULL ||
             local_proxy_subcommands[i].control != NULL) &&
            (argc == 2 || local_proxy_subcommands[i].takes_args) &&
            sv_ieq(argv[1], local_proxy_names[i])) {
            if (local_proxy_subcommands[i].control != NULL)
                local_proxy_subcommands[i].control(c, argc, argv, out);
            else
                local_proxy_subcommands[i].run(argc, argv, out);
            return;
        }
    }
    int n = argv[1].len < 128 ? (int)argv[1].len : 128;
    reply_error(out, "unknown subcommand or wrong number of arguments for '%.*s'. "
                     "Try PROXY HELP.", n, argv[1].ptr);
}
