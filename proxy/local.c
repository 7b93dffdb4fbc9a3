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

#include "backend.h"
#include "client.h"
#include "commands.h"
#include "reply.h"
#include "request.h"
#include "server.h"
#include "stats.h"
#include "throttle.h"

typedef void local_handler(struct client *c, int argc, const struct sv *argv,
                           struct evbuffer *out);

struct local_command {
    const char *name;      /* as in the command table ("client|setname") or sluice's own */
    int arity;             /* Redis-style: negative means at least -arity */
    local_handler *run;
};

static local_handler local_client_setname, local_client_getname, local_client_id,
    local_client_reply, local_quit, local_hello, local_proxy;

static const struct local_command local_commands[] = {
    {"client|setname", 3, local_client_setname},
    {"client|getname", 2, local_client_getname},
    {"client|id", 2, local_client_id},
    {"client|reply", 3, local_client_reply},
    {"quit", -1, local_quit},
    {"hello", -1, local_hello},   /* only HELLO 3: see placement.c */
    {"proxy", -2, local_proxy},
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

void local_execute(struct client *c, struct request *req, int argc, const struct sv *argv,
                   struct evbuffer *out)
{
    const struct local_command *lc = local_find(req, argc, argv);

    STAT_INC(total_local);
    if (lc == NULL) {   /* placement.c's table and this one disagree: a bug */
        reply_error(out, "sluice has no handler for this command");
        return;
    }
    if ((lc->arity > 0 && argc != lc->arity) || (lc->arity < 0 && argc < -lc->arity)) {
        reply_error(out, "wrong number of arguments for '%s' command", lc->name);
        return;
    }
    lc->run(c, argc, argv, out);
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

/* CLIENT REPLY ON|OFF|SKIP. client.c has set the mode as the request was
 * framed (its NOREPLY flag drops this reply under OFF and SKIP): Redis
 * still answers every request sluice sends, so no reply is ever missing
 * on a shared connection. */
static void local_client_reply(struct client *c, int argc, const struct sv *argv,
                               struct evbuffer *out)
{
    (void)c;
    (void)argc;
    if (sv_ieq(argv[2], "on") || sv_ieq(argv[2], "off") || sv_ieq(argv[2], "skip"))
        reply_status(out, "OK");
    else
        reply_error(out, "syntax error");
}

static void local_quit(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)argc;
    (void)argv;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    reply_status(out, "OK");
}

/* TEMPORARY (h-resp3, until issue 10's HELLO lands): HELLO [2|3]
 * [SETNAME name] sets the client's protocol and answers as Redis does,
 * with sluice's client id. HELLO 3 AUTH is refused; HELLO 2 AUTH goes to
 * Redis as before (placement.c). */

/* HELLO's reply for C, in its protocol: a map in RESP3, flat in RESP2. */
static void local_hello_reply(struct client *c, struct evbuffer *out)
{
    static const char *const fields[] = {"server", "sluice", "version", SLUICE_VERSION,
                                         "proto", NULL, "id", NULL, "mode", "standalone",
                                         "role", "master", "modules", NULL};
    static const char map_head[] = "%7\r\n";

    if (c->resp == 3)
        evbuffer_add(out, map_head, sizeof(map_head) - 1);
    else
        reply_array_header(out, 14);
    for (int i = 0; i < 14; i += 2) {
        reply_bulk(out, fields[i], strlen(fields[i]));
        if (fields[i + 1] != NULL)
            reply_bulk(out, fields[i + 1], strlen(fields[i + 1]));
        else if (i == 4)
            reply_integer(out, c->resp);
        else if (i == 6)
            reply_integer(out, (long long)c->id);
        else
            reply_array_header(out, 0);
    }
}

/* HELLO's protocol version ARG into *RESP; 0, or -1 with the error written. */
static int local_hello_version(struct sv arg, int *resp, struct evbuffer *out)
{
    char digits[24];
    char *end;
    long long ver;

    snprintf(digits, sizeof(digits), "%.*s", arg.len < 23 ? (int)arg.len : 23, arg.ptr);
    ver = strtoll(digits, &end, 10);
    if (arg.len == 0 || arg.len > 20 || *end != '\0') {
        reply_error(out, "Protocol version is not an integer or out of range");
        return -1;
    }
    if (ver != 2 && ver != 3) {
        reply_error(out, "-NOPROTO unsupported protocol version");
        return -1;
    }
    *resp = (int)ver;
    return 0;
}

/* Why C may not switch to protocol RESP now (NULL: it may). */
static const char *local_hello_refusal(const struct client *c, int resp)
{
    if ((c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR))
        return "Can't execute 'hello': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / "
               "RESET are allowed in this context";
    /* Redis would put the connection in RESP2 pub/sub mode, whose messages
     * sluice would take for replies (README: known limits). */
    if (resp == 2 && c->resp == 3 && client_subscribed_resp3(c))
        return "sluice does not support HELLO 2 while subscribed in RESP3; "
               "unsubscribe or RESET first";
    return NULL;
}

static void local_hello(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    const struct sv *name = NULL;
    const char *refusal;
    int resp = c->resp;

    if (argc >= 2 && local_hello_version(argv[1], &resp, out) != 0)
        return;
    for (int i = 2; i < argc; i++) {
        if (sv_ieq(argv[i], "auth")) {
            reply_error(out, "sluice does not take AUTH in HELLO 3 yet: send AUTH, then HELLO 3");
            return;
        }
        if (!sv_ieq(argv[i], "setname") || i + 1 >= argc) {
            int n = argv[i].len < 64 ? (int)argv[i].len : 64;
            reply_error(out, "Syntax error in HELLO option '%.*s'", n, argv[i].ptr);
            return;
        }
        name = &argv[++i];
    }
    refusal = local_hello_refusal(c, resp);
    if (refusal != NULL) {
        reply_error(out, "%s", refusal);
        return;
    }
    if (name != NULL && !local_valid_name(*name)) {
        reply_error(out, "Client names cannot contain spaces, newlines or special characters.");
        return;
    }
    if (name != NULL) {
        free(c->name);
        c->name = name->len > 0 ? strndup(name->ptr, name->len) : NULL;
        throttle_client_changed(c);
    }
    c->resp = resp;
    local_hello_reply(c, out);
}

static void local_proxy_ping(struct evbuffer *out)
{
    reply_status(out, "PONG");
}

static void local_proxy_info(struct evbuffer *out)
{
    struct evbuffer *text = evbuffer_new();

    evbuffer_add_printf(text, "# Proxy\r\nsluice_version:%s\r\nprocess_id:%d\r\n"
                              "uptime_in_seconds:%lld\r\nconfig_file:%s\r\n"
                              "connected_clients:%d\r\n\r\n# Stats\r\n",
                        SLUICE_VERSION, (int)getpid(),
                        (long long)(time(NULL) - server.start_time), server.cfg.path,
                        client_count());
    stats_write_info(text);
    evbuffer_add_printf(text, "\r\n# Backends\r\n");
    backend_write_info(text);
    evbuffer_add_printf(text, "\r\n# Rules\r\nrules_file:%s\r\n",
                        server.cfg.rules != NULL ? server.cfg.rules : "");
    limiter_write_info(text);
    evbuffer_add_printf(out, "$%zu\r\n", evbuffer_get_length(text));
    evbuffer_add_buffer(out, text);
    evbuffer_add(out, "\r\n", 2);
    evbuffer_free(text);
}

static void local_proxy_rules(struct evbuffer *out)
{
    limiter_write_rules(out);
}

/* Re-read the rule file; a bad one changes nothing and its first error
 * (FILE:LINE: message) is the reply. */
static void local_proxy_reload(struct evbuffer *out)
{
    struct errlist errs = {0};
    char first[512];

    if (throttle_reload(&errs) == 0) {
        reply_status(out, "OK");
    } else {
        errlist_first(&errs, first, sizeof(first));
        reply_error(out, "rules not reloaded: %s", first);
    }
    errlist_free(&errs);
}

static void local_proxy_help(struct evbuffer *out);

/* PROXY subcommands: name, handler, help line. */
static const struct {
    const char *name;
    void (*run)(struct evbuffer *out);
    const char *help;
} local_proxy_subcommands[] = {
    {"ping", local_proxy_ping, "    Return PONG from sluice itself (not from Redis)."},
    {"info", local_proxy_info, "    Counters and states of sluice, its clients, backends and rules."},
    {"rules", local_proxy_rules, "    Every rate-limit rule with its counters."},
    {"reload", local_proxy_reload, "    Read the rule file again (a bad file changes nothing)."},
    {"help", local_proxy_help, "    Print this help."},
};
#define LOCAL_PROXY_COUNT (int)(sizeof(local_proxy_subcommands) / sizeof(local_proxy_subcommands[0]))

static void local_proxy_help(struct evbuffer *out)
{
    char upper[16];

    reply_array_header(out, 1 + 2 * LOCAL_PROXY_COUNT);
    reply_status(out, "PROXY <subcommand>. Subcommands are:");
    for (int i = 0; i < LOCAL_PROXY_COUNT; i++) {
        size_t n = strlen(local_proxy_subcommands[i].name);
        for (size_t k = 0; k <= n && k < sizeof(upper); k++)
            upper[k] = (char)toupper((unsigned char)local_proxy_subcommands[i].name[k]);
        reply_status(out, upper);
        reply_status(out, local_proxy_subcommands[i].help);
    }
}

static void local_proxy(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    (void)c;
    for (int i = 0; i < LOCAL_PROXY_COUNT && argc == 2; i++) {
        if (sv_ieq(argv[1], local_proxy_subcommands[i].name)) {
            local_proxy_subcommands[i].run(out);
            return;
        }
    }
    int n = argv[1].len < 128 ? (int)argv[1].len : 128;
    reply_error(out, "unknown subcommand or wrong number of arguments for '%.*s'. "
                     "Try PROXY HELP.", n, argv[1].ptr);
}
