/* clientid.c - owns the meaning of client ids and client listings in the
 * commands sluice forwards or answers: sluice's ids (CLIENT ID) mean
 * nothing to Redis, whose connections are sluice's. An id is translated
 * to the Redis id of its client's private connection, which is learned
 * lazily with CLIENT LIST (an admin command: MONITOR never shows it, while
 * a CLIENT ID sent as a connection's prelude would show in any MONITOR
 * running then). Nothing here writes to a client but through client.c. */
#include "clientid.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "commands.h"
#include "reply.h"
#include "pause.h"
#include "request.h"
#include "router.h"
#include "server.h"
#include "sockaddr.h"

/* An id Redis never gives (it counts up from 1): names nobody. */
#define CLIENTID_NOBODY LLONG_MAX
#define CLIENTID_MAX_ARGS 8

/* A positive integer argument, as Redis reads client ids; 0 otherwise. */
static uint64_t clientid_parse(struct sv arg)
{
    uint64_t v = 0;

    if (arg.ptr == NULL || arg.len == 0 || arg.len > 19)
        return 0;
    for (size_t i = 0; i < arg.len; i++) {
        if (arg.ptr[i] < '0' || arg.ptr[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(arg.ptr[i] - '0');
    }
    return v;
}

static int clientid_is(const struct request *req, const char *name)
{
    return req->cmd != NULL && strcmp(req->cmd->name, name) == 0;
}

/* Where REQ names client ids: argument positions into POS. */
static int clientid_positions(const struct request *req, int argc, const struct sv *argv, int *pos)
{
    int n = 0;

    if (clientid_is(req, "client|unblock") && argc >= 3) {
        pos[n++] = 2;
    } else if (clientid_is(req, "client|tracking")) {
        for (int i = 3; i + 1 < argc && n < CLIENTID_MAX_ARGS; i++) {
            if (sv_ieq(argv[i], "redirect"))
                pos[n++] = ++i;
        }
    }
    return n;
}

/* Whether CONN is on the node REQ goes to: its client's private
 * connection's, else its own (cluster mode: each node has ids of its own,
 * and an id of another node's connection may name a stranger here). */
static int clientid_same_node(const struct request *req, const struct backend_conn *conn)
{
    const struct client *c = req->client;
    struct backend_node *node;

    if (!cluster_enabled())
        return 1;
    node = c != NULL && c->private_conn != NULL ? backend_conn_node(c->private_conn)
                                                : router_node_for_request(req, NULL);
    return node == backend_conn_node(conn);
}

/* The Redis id for sluice id ID: its private connection's, NOBODY (also
 * when that is on another node than REQ goes to), or 0 when that is not
 * known yet (and not looked up for REQ already). A
 * client named by CLIENT TRACKING ... REDIRECT gets a private connection
 * (OPEN) if it has none: Redis needs one to send its invalidations to. */
static long long clientid_resolve(const struct request *req, uint64_t id, int open)
{
    struct client *t = client_find(id);
    long long rid;

    if (t != NULL && t->private_conn == NULL && open && !(req->flags & REQ_IDS_SOUGHT))
        client_private_now(t);
    if (t == NULL || t->private_conn == NULL || !clientid_same_node(req, t->private_conn))
        return CLIENTID_NOBODY;
    rid = backend_conn_redis_id(t->private_conn);
    if (rid > 0)
        return rid;
    return (req->flags & REQ_IDS_SOUGHT) ? CLIENTID_NOBODY : 0;
}

/* Cluster mode: Redis ids are a node's own, and a client's private
 * connection may be on any node (a worker's moves to each queue's node):
 * CLIENT UNBLOCK of sluice id ID goes to (and learns ids from) the node of
 * that client's private connection, never names a client of another. */
static void clientid_unblock_node(struct request *req, uint64_t id)
{
    struct client *t = client_find(id);

    req->node = t != NULL && t->private_conn != NULL ? backend_conn_node(t->private_conn) : NULL;
}

/* ---- learning Redis ids: CLIENT LIST on a shared connection ---- */

struct clientid_lookup {
    uint64_t client_id;      /* who waits */
    struct request *held;    /* its request, owned here until released */
    struct backend_node *node;   /* asked: the ids are its connections' */
};

static void clientid_lookup_free(struct request *ireq)
{
    struct clientid_lookup *l = ireq->ctx;

    if (l != NULL)
        request_free(l->held);
    free(l);
    ireq->ctx = NULL;
}

static void clientid_lookup_reply(struct request *ireq, struct evbuffer *src, size_t len, int type)
{
    struct clientid_lookup *l = ireq->ctx;
    struct request *held = l->held;
    struct client *c;
    unsigned char *text;

    if (type == REPLY_STRING && (text = evbuffer_pullup(src, (ssize_t)len)) != NULL) {
        const unsigned char *body = memchr(text, '\n', len);
        if (body != NULL && len >= (size_t)(body + 1 - text) + 2)
            backend_learn_redis_ids(l->node, (const char *)body + 1,
                                    len - (size_t)(body + 1 - text) - 2);
    }
    evbuffer_drain(src, len);
    l->held = NULL;
    held->flags |= REQ_IDS_SOUGHT;   /* an id still unknown now names nobody */
    c = client_find(l->client_id);
    request_free(ireq);
    if (c != NULL)
        client_release_held(c, held, NULL);
    else
        request_free(held);
}

/* Hold REQ of C while CLIENT LIST tells the Redis ids. Returns -1 when
 * it cannot be sent (then REQ goes on with the ids it has). */
static int clientid_lookup(struct client *c, struct request *req, struct evbuffer **src)
{
    static const char list[] = "*2\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n";
    struct clientid_lookup *l = calloc(1, sizeof(*l));
    struct evbuffer *bytes = evbuffer_new();
    int rc = -1;

    if (l != NULL && bytes != NULL) {
        l->client_id = c->id;
        l->node = req->node != NULL ? req->node : backend_default_node();
        evbuffer_add(bytes, list, sizeof(list) - 1);
        rc = backend_send_internal(pause_internal_conn(l->node, c->id, 0), bytes,
                                   clientid_lookup_reply, l, clientid_lookup_free);
        if (rc != 0)
            l = NULL;   /* freed by clientid_lookup_free */
    }
    if (bytes != NULL)
        evbuffer_free(bytes);
    if (rc != 0) {
        free(l);
        return -1;
    }
    if (*src != NULL)
        request_take_raw(req, *src);
    *src = NULL;
    l->held = req;
    client_block(c);
    return 0;
}

/* ---- CLIENT KILL: sluice's clients, as CLIENT LIST shows them ---- */

/* The kinds of client that CLIENT LIST TYPE and CLIENT KILL TYPE name. */
enum clientid_kind {
    CLIENTID_MASTER,    /* Redis's link to its master: sluice has none */
    CLIENTID_NORMAL,
    CLIENTID_PUBSUB,
    CLIENTID_REPLICA,   /* sent SYNC or PSYNC: a tunnel */
};

static enum clientid_kind clientid_kind_of(const struct client *c)
{
    if (c->flags & CLIENT_TUNNEL)
        return CLIENTID_REPLICA;
    if ((c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR))
        return CLIENTID_PUBSUB;
    return CLIENTID_NORMAL;
}

/* The kind TYPE names; -1 for a type Redis does not know. */
static int clientid_kind_named(struct sv type)
{
    if (sv_ieq(type, "normal"))
        return CLIENTID_NORMAL;
    if (sv_ieq(type, "pubsub"))
        return CLIENTID_PUBSUB;
    if (sv_ieq(type, "replica") || sv_ieq(type, "slave"))
        return CLIENTID_REPLICA;
    if (sv_ieq(type, "master"))
        return CLIENTID_MASTER;
    return -1;
}

/* CLIENT KILL's arguments whose USER filters sluice can take out (a
 * longer one keeps them: 2 words and 64 filter pairs is far past any real
 * use, each filter many times over). */
#define CLIENTID_KILL_MAX_ARGS 130

/* CLIENT KILL's filters, as Redis 7.0 reads them. */
struct clientid_kill {
    int old_form;            /* CLIENT KILL ip:port: +OK or No such client */
    uint64_t id;             /* 0: any */
    int type;                /* -1: any; else an enum clientid_kind */
    char user[128];          /* "": any */
    char addr[64];
    char laddr[64];
    int skipme;
    long long maxage_s;      /* 0: any */
};

static void clientid_copy(char *out, size_t size, struct sv v)
{
    size_t n = v.len < size - 1 ? v.len : size - 1;

    memcpy(out, v.ptr != NULL ? v.ptr : "", v.ptr != NULL ? n : 0);
    out[v.ptr != NULL ? n : 0] = '\0';
}

/* Read the filters of ARGV into K. Returns -1 on anything Redis would
 * refuse: Redis says so itself (sluice's rewrite keeps the arguments). */
static int clientid_kill_parse(struct clientid_kill *k, int argc, const struct sv *argv)
{
    memset(k, 0, sizeof(*k));
    k->type = -1;
    k->skipme = 1;
    if (argc == 3) {
        k->old_form = 1;
        k->skipme = 0;
        clientid_copy(k->addr, sizeof(k->addr), argv[2]);
        return 0;
    }
    if (argc < 3 || argc % 2 != 0)
        return -1;
    for (int i = 2; i + 1 < argc; i += 2) {
        struct sv key = argv[i], val = argv[i + 1];
        if (sv_ieq(key, "id") && (k->id = clientid_parse(val)) != 0)
            continue;
        if (sv_ieq(key, "type") && clientid_kind_named(val) >= 0)
            k->type = clientid_kind_named(val);
        else if (sv_ieq(key, "user"))
            clientid_copy(k->user, sizeof(k->user), val);
        else if (sv_ieq(key, "addr"))
            clientid_copy(k->addr, sizeof(k->addr), val);
        else if (sv_ieq(key, "laddr"))
            clientid_copy(k->laddr, sizeof(k->laddr), val);
        else if (sv_ieq(key, "skipme") && (sv_ieq(val, "yes") || sv_ieq(val, "no")))
            k->skipme = sv_ieq(val, "yes");
        else if (sv_ieq(key, "maxage") && clientid_parse(val) != 0)
            k->maxage_s = (long long)clientid_parse(val);
        else
            return -1;
    }
    return 0;
}

static void clientid_laddr(const struct client *c, char *out, size_t size);
static void clientid_checked_listing(struct client *c, struct request *req, const struct sv *argv,
                                     struct evbuffer **src);
static int clientid_append_nobody(struct request *req, const struct sv *argv, int argc,
                                  struct evbuffer **src);

/* Whether T, seen by C, matches K. */
static int clientid_kill_matches(const struct clientid_kill *k, const struct client *c,
                                 const struct client *t)
{
    char laddr[80];

    if ((k->skipme && t == c) || (k->id != 0 && t->id != k->id))
        return 0;
    if (k->type >= 0 && k->type != (int)clientid_kind_of(t))
        return 0;
    if ((k->user[0] && strcmp(k->user, t->user != NULL ? t->user : "default") != 0) ||
        (k->addr[0] && strcmp(k->addr, t->addr_text) != 0))
        return 0;
    if (k->laddr[0]) {
        clientid_laddr(t, laddr, sizeof(laddr));
        if (strcmp(k->laddr, laddr) != 0)
            return 0;
    }
    return k->maxage_s == 0 ||
           (long long)((server_now_ms() - t->created_ms) / 1000) > k->maxage_s;
}

/* Close every client K matches, for C; returns how many. Ids first, then
 * closes: a close must not pull the list from under the walk. */
static long long clientid_kill_run(const struct clientid_kill *k, struct client *c)
{
    uint64_t *ids = NULL;
    long long n = 0, cap = 0;
    struct client *t;

    for (t = client_next(NULL); t != NULL; t = client_next(t)) {
        if (!clientid_kill_matches(k, c, t))
            continue;
        if (n == cap) {
            uint64_t *more = realloc(ids, (size_t)(cap = cap ? cap * 2 : 16) * sizeof(*ids));
            if (more == NULL)
                break;
            ids = more;
        }
        ids[n++] = t->id;
    }
    for (long long i = 0; i < n; i++) {
        if ((t = client_find(ids[i])) != NULL)
            client_kill(t, c);
    }
    free(ids);
    return n;
}

static void clientid_kill_free(struct request *req)
{
    free(req->ctx);
    req->ctx = NULL;
}

/* Redis checked the command (ACL, syntax, its users) and, with the filter
 * sluice added, killed nobody (:0): now the filters run on sluice's
 * clients. Any other reply (an error) goes to the client as it is. */
static void clientid_kill_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct clientid_kill *k = req->ctx;   /* read before REQ may be freed */
    struct client *c = request_hook_client(req, src, len);
    long long n;

    if (c == NULL)
        return;
    if (type != REPLY_INTEGER) {
        evbuffer_remove_buffer(src, req->reply, len);
        client_answer(c, req);
        return;
    }
    evbuffer_drain(src, len);
    n = clientid_kill_run(k, c);
    if (!k->old_form)
        reply_integer(req->reply, n);
    else if (n > 0)
        reply_status(req->reply, "OK");
    else
        reply_error(req->reply, "No such client");
    client_answer(c, req);
}

/* Whether filter pair I of ARGV is "USER name" naming one of sluice's
 * own users: Redis does not know that name ("No such user"), so the pair
 * is sluice's alone and Redis never sees it. */
static int clientid_kill_sluice_user(const struct sv *argv, int i)
{
    return sv_ieq(argv[i], "user") && argv[i + 1].ptr != NULL &&
           auth_has_user(argv[i + 1].ptr, argv[i + 1].len);
}

/* How many of ARGC arguments Redis gets (clientid_kill_for_redis). */
static int clientid_kill_kept(int argc, const struct sv *argv)
{
    int n = argc;

    for (int i = 2; argc % 2 == 0 && i + 1 < argc; i += 2) {
        if (clientid_kill_sluice_user(argv, i))
            n -= 2;
    }
    return n;
}

/* ARGV as Redis gets it, in OUT (ARGC entries at most): the filters
 * without those that name sluice's users. Returns OUT. */
static const struct sv *clientid_kill_for_redis(int argc, const struct sv *argv, struct sv *out)
{
    int n = 0;

    for (int i = 0; i < argc; i++) {
        if (i >= 2 && argc % 2 == 0 && i % 2 == 0 && i + 1 < argc &&
            clientid_kill_sluice_user(argv, i)) {
            i++;   /* the pair, both words */
            continue;
        }
        out[n++] = argv[i];
    }
    return out;
}

/* CLIENT KILL: Redis sees the command with "ID <nobody>" added (the old
 * form becomes "ID <nobody>" alone), so it checks permissions and syntax
 * as for any client and can match none of its connections, sluice's own
 * or others'; sluice then applies the filters to its clients. A USER
 * filter naming one of sluice's users is left out of what Redis sees
 * (Redis would answer "No such user"); a name that is neither sluice's
 * nor Redis's gets Redis's "No such user 'x'". Inside
 * MULTI it is only queued there (it kills nothing at EXEC). */
static void clientid_kill(struct client *c, struct request *req, const struct sv *argv,
                          struct evbuffer **src)
{
    struct clientid_kill *k = malloc(sizeof(*k));
    int old_form = req->argc == 3;
    struct sv kept[CLIENTID_KILL_MAX_ARGS];
    const struct sv *to_redis = argv;
    int to_redis_argc = req->argc;

    if (k == NULL || req->argc < 3)
        goto unchanged;
    if (clientid_kill_parse(k, req->argc, argv) != 0)
        goto rewrite_only;   /* Redis answers the error */
    if (!(c->flags & CLIENT_IN_MULTI)) {
        req->on_reply = clientid_kill_reply;
        req->ctx = k;
        req->ctx_free = clientid_kill_free;
        k = NULL;
    }
rewrite_only:
    free(k);
    if (req->argc <= CLIENTID_KILL_MAX_ARGS) {
        to_redis = clientid_kill_for_redis(req->argc, argv, kept);
        to_redis_argc = clientid_kill_kept(req->argc, argv);
    }
    if (clientid_append_nobody(req, to_redis, old_form ? 2 : to_redis_argc, src) != 0 &&
        req->on_reply == clientid_kill_reply) {
        req->on_reply = NULL;   /* not rewritten: nothing to run after it */
        clientid_kill_free(req);
        req->ctx_free = NULL;
    }
    return;
unchanged:
    free(k);
}

/* ---- CLIENT LIST / INFO: sluice's answer, once Redis allows it ---- */

/* Redis's reply says whether the client may list (NOPERM otherwise):
 * then REQ takes back the command the client sent (req->ctx) and sluice's
 * listing is built at its turn (client_answer_at_turn), under the client's
 * output limits, like any reply sluice makes. */
static void clientid_listing_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = request_hook_client(req, src, len);

    if (c == NULL)
        return;
    if (type == REPLY_ERROR) {
        evbuffer_remove_buffer(src, req->reply, len);
        client_answer(c, req);
        return;
    }
    evbuffer_drain(src, len);
    request_take_bytes(req, req->ctx);
    client_answer_at_turn(c, req);
}

static void clientid_listing_free(struct request *req)
{
    request_free(req->ctx);
    req->ctx = NULL;
}

/* CLIENT LIST or INFO of C: Redis gets CLIENT LIST ID <nobody> (CLIENT
 * INFO as it is) only to check the client may run it, as its ACL says,
 * and lists none of its connections; a copy of the command as sent waits
 * in req->ctx for Redis's yes. Nothing is listed yet. */
static void clientid_checked_listing(struct client *c, struct request *req, const struct sv *argv,
                                     struct evbuffer **src)
{
    struct request *sent = request_copy(req, *src);

    (void)c;
    if (sent == NULL)
        return;
    if (clientid_is(req, "client|list") && req->argc >= 2 &&
        clientid_append_nobody(req, argv, 2, src) != 0) {
        request_free(sent);
        return;
    }
    req->on_reply = clientid_listing_reply;
    req->ctx = sent;
    req->ctx_free = clientid_listing_free;
}

/* ---- rewriting ---- */

/* Replace REQ's bytes with ARGV[0..ARGC) then "ID <nobody>": Redis then
 * checks the command as usual but matches none of its connections, sluice's
 * own or others'. Arguments are ones sluice has in memory (views of ARGV are
 * never NULL for the CLIENT commands). Returns 0, or -1 (nothing changed). */
static int clientid_append_nobody(struct request *req, const struct sv *argv, int argc,
                                  struct evbuffer **src)
{
    struct evbuffer *out = evbuffer_new();
    char nobody[24];

    if (out == NULL)
        return -1;
    reply_array_header(out, argc + 2);
    for (int i = 0; i < argc; i++) {
        if (argv[i].ptr == NULL) {
            evbuffer_free(out);
            return -1;
        }
        reply_bulk(out, argv[i].ptr, argv[i].len);
    }
    reply_bulk(out, "ID", 2);
    reply_bulk(out, nobody, (size_t)snprintf(nobody, sizeof(nobody), "%lld", CLIENTID_NOBODY));
    request_replace_raw(req, out, src);
    req->argc = argc + 2;
    return 0;
}

/* Replace REQ's bytes with its arguments, those at POS[k] set to IDS[k].
 * Returns -1 when an argument is not in memory (never for these). */
static int clientid_rewrite(struct request *req, const struct sv *argv, const int *pos,
                            const long long *ids, int n, struct evbuffer **src)
{
    struct evbuffer *out = evbuffer_new();
    char num[24];

    if (out == NULL)
        return -1;
    reply_array_header(out, req->argc);
    for (int i = 0; i < req->argc; i++) {
        int k = 0;
        while (k < n && pos[k] != i)
            k++;
        if (k < n) {
            reply_bulk(out, num, (size_t)snprintf(num, sizeof(num), "%lld", ids[k]));
        } else if (argv[i].ptr == NULL) {
            evbuffer_free(out);
            return -1;
        } else {
            reply_bulk(out, argv[i].ptr, argv[i].len);
        }
    }
    request_replace_raw(req, out, src);
    return 0;
}

/* ---- CLIENT GETREDIR / TRACKINGINFO: the redirect id, sluice's again ---- */

/* Where the id C's tracking redirects to starts in Redis's reply or push
 * TEXT (LEN bytes): GETREDIR's integer, the one after TRACKINGINFO's
 * "redirect" field or in a tracking-redir-broken push; NULL when there is
 * none (an error, QUEUED). */
static const char *clientid_redirect_field(const char *text, size_t len)
{
    static const char *const fields[] = {"\r\nredirect\r\n:", "tracking-redir-broken\r\n:"};
    const char *at;

    if (len > 0 && text[0] == ':')
        return text + 1;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if ((at = memmem(text, len, fields[i], strlen(fields[i]))) != NULL)
            return at + strlen(fields[i]);
    }
    return NULL;
}

/* Move the reply or push of LEN bytes at SRC to OUT, the Redis id of C's
 * redirect target in it (the Redis id of the target's private connection,
 * remembered when CLIENT TRACKING ... REDIRECT was translated; it stays
 * after the target is gone: "broken_redirect") made the sluice id C gave.
 * Anything else passes as it is. */
static void clientid_move_redirect(const struct client *c, struct evbuffer *src, size_t len,
                                   struct evbuffer *out)
{
    const char *text = (const char *)evbuffer_pullup(src, (ssize_t)len);
    const char *num = text != NULL ? clientid_redirect_field(text, len) : NULL;
    const char *end = num != NULL ? memchr(num, '\r', len - (size_t)(num - text)) : NULL;
    char id[24];

    snprintf(id, sizeof(id), "%lld", c->redirect_redis_id);
    if (end == NULL || c->redirect_redis_id <= 0 || (size_t)(end - num) != strlen(id) ||
        memcmp(num, id, (size_t)(end - num)) != 0) {
        evbuffer_remove_buffer(src, out, len);
        return;
    }
    evbuffer_add(out, text, (size_t)(num - text));
    evbuffer_add_printf(out, "%llu", (unsigned long long)c->redirect_id);
    evbuffer_add(out, end, len - (size_t)(end - text));
    evbuffer_drain(src, len);
}

/* CLIENT GETREDIR, CLIENT TRACKINGINFO: Redis names the target by its id. */
static void clientid_redirect_reply(struct request *req, struct evbuffer *src, size_t len,
                                    int type)
{
    struct client *c = request_hook_client(req, src, len);

    if (c == NULL)
        return;
    if (type == REPLY_ERROR)
        evbuffer_remove_buffer(src, req->reply, len);
    else
        clientid_move_redirect(c, src, len, req->reply);
    client_answer(c, req);
}

void clientid_push(const struct client *c, const char *kind, struct evbuffer *src, size_t len,
                   struct evbuffer *out)
{
    if (c->redirect_id != 0 && strcmp(kind, "tracking-redir-broken") == 0)
        clientid_move_redirect(c, src, len, out);
    else
        evbuffer_remove_buffer(src, out, len);
}

enum clientid_result clientid_translate(struct client *c, struct request *req,
                                        const struct sv *argv, struct evbuffer **src)
{
    int pos[CLIENTID_MAX_ARGS];
    long long ids[CLIENTID_MAX_ARGS];
    int n = clientid_positions(req, req->argc, argv, pos);
    int translated = 0;

    if (clientid_is(req, "client|kill")) {
        clientid_kill(c, req, argv, src);
        return CLIENTID_FORWARD;
    }
    if (clientid_is(req, "client|getredir") || clientid_is(req, "client|trackinginfo")) {
        if (c->redirect_id != 0)
            req->on_reply = clientid_redirect_reply;
        return CLIENTID_FORWARD;
    }
    if (clientid_is(req, "client|list") || clientid_is(req, "client|info")) {
        if (!(c->flags & CLIENT_IN_MULTI))   /* in MULTI: multi.c runs it at EXEC */
            clientid_checked_listing(c, req, argv, src);
        return CLIENTID_FORWARD;
    }

    for (int k = 0; k < n; k++) {
        uint64_t id = clientid_parse(argv[pos[k]]);
        if (clientid_is(req, "client|unblock"))
            clientid_unblock_node(req, id);
        ids[k] = id == 0 ? 0 : clientid_resolve(req, id, clientid_is(req, "client|tracking"));
        if (id == 0) {
            pos[k] = -1;   /* not an id: Redis answers the error */
            continue;
        }
        if (ids[k] == 0) {
            if (clientid_lookup(c, req, src) == 0)
                return CLIENTID_HELD;
            req->flags |= REQ_IDS_SOUGHT;   /* cannot ask: unknown ids name nobody */
            return clientid_translate(c, req, argv, src);
        }
        translated = 1;
        if (clientid_is(req, "client|tracking")) {   /* for GETREDIR, TRACKINGINFO */
            c->redirect_id = id;
            c->redirect_redis_id = ids[k];
        }
    }
    if (translated)
        clientid_rewrite(req, argv, pos, ids, n, src);   /* else forwarded as it came */
    return CLIENTID_FORWARD;
}

/* ---- CLIENT LIST / CLIENT INFO ---- */

/* C's local address as CLIENT LIST's laddr= shows it and CLIENT KILL
 * LADDR matches it: "ip:port" ("?:0" when the socket has none). */
static void clientid_laddr(const struct client *c, char *out, size_t size)
{
    sockaddr_format_local(c->fd, 0, out, size);
}

static void clientid_flags(const struct client *c, char *out)
{
    int n = 0;

    if (c->flags & CLIENT_TUNNEL)
        out[n++] = 'S';
    else if (c->flags & CLIENT_MONITOR)
        out[n++] = 'O';
    else if (c->flags & CLIENT_PASSTHROUGH)
        out[n++] = 'P';
    if (c->flags & CLIENT_IN_MULTI)
        out[n++] = 'x';
    if (c->flags & CLIENT_CLOSE_AFTER_REPLY)
        out[n++] = 'c';
    if (n == 0)
        out[n++] = 'N';
    out[n] = '\0';
}

/* The bytes of the command ARGV (ARGC arguments) as a client sends it in
 * RESP: "*2\r\n$6\r\nclient\r\n$4\r\ninfo\r\n" is 26. */
static size_t clientid_command_len(int argc, const struct sv *argv)
{
    char digits[24];
    size_t len = 3 + (size_t)snprintf(digits, sizeof(digits), "%d", argc);

    for (int i = 0; i < argc; i++)
        len += 5 + (size_t)snprintf(digits, sizeof(digits), "%zu", argv[i].len) + argv[i].len;
    return len;
}

/* C's line, as Redis 7.0's CLIENT LIST writes one (fields in its order;
 * what sluice does not know is given as Redis shows it for an idle
 * client: sub=0, obl=0...). RUNNING: the bytes of the command C is
 * running (the listing's own, for its caller; else 0): Redis's qbuf holds
 * it while it runs, with what C sent after it (still in C's input here). */
static void clientid_line(const struct client *c, struct evbuffer *out, size_t running)
{
    uint64_t now_ms = server_now_ms();
    char laddr[INET6_ADDRSTRLEN + 8], flags[8];
    size_t qbuf = evbuffer_get_length(c->input) + running;
    size_t omem = evbuffer_get_length(c->output) + c->held_reply_bytes;

    clientid_laddr(c, laddr, sizeof(laddr));
    clientid_flags(c, flags);
    evbuffer_add_printf(out,
        "id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%llu flags=%s db=%d "
        "sub=0 psub=0 ssub=0 multi=%d qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 "
        "rbs=16384 rbp=0 obl=0 oll=0 omem=%zu tot-mem=%zu events=r%s cmd=%s user=%s "
        "redir=-1 resp=%d\n",
        (unsigned long long)c->id, c->addr_text, laddr, c->fd, c->name != NULL ? c->name : "",
        (unsigned long long)((now_ms - c->created_ms) / 1000),
        (unsigned long long)((now_ms - c->last_active_ms) / 1000), flags, c->db,
        (c->flags & CLIENT_IN_MULTI) ? c->multi_queued : -1, qbuf, omem, qbuf + omem,
        c->write_on ? "w" : "", c->last_cmd != NULL ? c->last_cmd->name : "NULL",
        c->user != NULL ? c->user : "default", c->resp);
}

/* TEXT as Redis replies CLIENT LIST/INFO: a bulk string, verbatim in RESP3. */
static void clientid_reply_text(const struct client *c, struct evbuffer *text, struct evbuffer *out)
{
    if (c->resp != 3) {
        reply_bulk_buffer(out, text);
        return;
    }
    evbuffer_add_printf(out, "=%zu\r\ntxt:", evbuffer_get_length(text) + 4);
    evbuffer_add_buffer(out, text);
    evbuffer_add(out, "\r\n", 2);
}

void clientid_info(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    struct evbuffer *text = evbuffer_new();

    clientid_line(c, text, clientid_command_len(argc, argv));
    clientid_reply_text(c, text, out);
    evbuffer_free(text);
}

/* Whether client C is of TYPE (as CLIENT LIST TYPE names them); -1 for a
 * type Redis does not know. */
static int clientid_of_type(const struct client *c, struct sv type)
{
    int kind = clientid_kind_named(type);

    return kind < 0 ? -1 : kind == (int)clientid_kind_of(c);
}

void clientid_list(struct client *c, int argc, const struct sv *argv, struct evbuffer *out)
{
    struct evbuffer *text;
    struct client *t;
    int by_type = argc == 4 && sv_ieq(argv[2], "type");
    int by_id = argc > 3 && sv_ieq(argv[2], "id");
    size_t limit = (size_t)server.cfg.client_output_buffer_limit;

    if (argc != 2 && !by_type && !by_id) {
        reply_error(out, "syntax error");
        return;
    }
    if (by_type && clientid_of_type(c, argv[3]) < 0) {
        int n = argv[3].len < 64 ? (int)argv[3].len : 64;
        reply_error(out, "Unknown client type '%.*s'", n, argv[3].ptr);
        return;
    }
    for (int i = 3; by_id && i < argc; i++) {
        if (clientid_parse(argv[i]) == 0) {
            reply_error(out, "Invalid client ID");
            return;
        }
    }
    text = evbuffer_new();
    if (by_id) {
        /* An id may be repeated (Redis lists it each time): a short
         * request can ask for a huge listing. Past the output limit the
         * client goes, as it would once the listing was queued. */
        for (int i = 3; i < argc; i++) {
            if ((t = client_find(clientid_parse(argv[i]))) != NULL)
                clientid_line(t, text, t == c ? clientid_command_len(argc, argv) : 0);
            if (limit > 0 && evbuffer_get_length(text) > limit) {
                client_output_overflow(c, evbuffer_get_length(text));
                break;
            }
        }
    } else {
        for (t = client_next(NULL); t != NULL; t = client_next(t))
            if (!by_type || clientid_of_type(t, argv[3]) == 1)
                clientid_line(t, text, t == c ? clientid_command_len(argc, argv) : 0);
    }
    clientid_reply_text(c, text, out);
    evbuffer_free(text);
}
