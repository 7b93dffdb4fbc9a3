/* client_failover.c - owns what a client with a private connection sees
 * when Sentinel mode switches the primary (README "Sentinel"): its
 * transaction ends in -EXECABORT, a blocked command got its error and the
 * client goes on, and a RESP2 subscriber is subscribed again by sluice to
 * every channel, pattern and shard channel it had, on the new primary.
 * It keeps the names a subscriber subscribed to; it never sends a
 * client's own request.
 *
 *   private conn lost --> in MULTI:   CLIENT_MULTI_LOST; until EXEC/DISCARD
 *                                     each command gets an error, EXEC
 *                                     -EXECABORT (nothing ran there)
 *                     --> subscriber: resubscribe_pending; client_cron sends
 *                                     SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE on a
 *                                     new private connection once the
 *                                     primary is up (confirmations dropped)
 *                     --> otherwise:  the connection is made again when
 *                                     needed (a blocked command had its error)
 *
 *   a request that needs a new private connection while the primary is
 *   down (BLPOP, MULTI, WAIT...) waits, stalled, for a primary that is up
 *   (client_failover_wait), as requests on the shared connections do: it
 *   is sent to the new primary, or fails past failover_retry_window; it
 *   never meets a refused connect.
 */
#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "client_int.h"
#include "config.h"
#include "log.h"
#include "multi.h"
#include "placement.h"
#include "request.h"
#include "sentinel.h"
#include "server.h"
#include "sv.h"

#include "client_failover.h"

/* The three kinds of subscription, in the order of struct
 * client_sub_names's lists. */
enum { SUB_CHANNEL, SUB_PATTERN, SUB_SHARD, SUB_KINDS };

static const char *const client_sub_verbs[SUB_KINDS] = {"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"};

/* One kind's names: a plain array, searched in order (a subscriber has
 * few; README "Known limits"). */
struct client_name_list {
    char **names;
    size_t *lens;
    int count, cap;
};

struct client_sub_names {
    struct client_name_list kinds[SUB_KINDS];
};

static int client_names_find(const struct client_name_list *l, const char *s, size_t n)
{
    for (int i = 0; i < l->count; i++) {
        if (l->lens[i] == n && memcmp(l->names[i], s, n) == 0)
            return i;
    }
    return -1;
}

static void client_names_add(struct client_name_list *l, const char *s, size_t n)
{
    char *copy;

    if (s == NULL || client_names_find(l, s, n) >= 0)
        return;
    if (l->count == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        char **names = realloc(l->names, sizeof(*names) * (size_t)cap);
        size_t *lens;
        if (names == NULL)
            return;
        l->names = names;
        lens = realloc(l->lens, sizeof(*lens) * (size_t)cap);
        if (lens == NULL)
            return;
        l->lens = lens;
        l->cap = cap;
    }
    if ((copy = malloc(n + 1)) == NULL)
        return;
    memcpy(copy, s, n);
    copy[n] = '\0';
    l->names[l->count] = copy;
    l->lens[l->count++] = n;
}

static void client_names_remove(struct client_name_list *l, const char *s, size_t n)
{
    int i = client_names_find(l, s, n);

    if (i < 0)
        return;
    free(l->names[i]);
    l->names[i] = l->names[--l->count];
    l->lens[i] = l->lens[l->count];
}

static void client_names_clear(struct client_name_list *l)
{
    for (int i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
    free(l->lens);
    memset(l, 0, sizeof(*l));
}

void client_failover_forget(struct client *c)
{
    if (c->sub_names == NULL)
        return;
    for (int k = 0; k < SUB_KINDS; k++)
        client_names_clear(&c->sub_names->kinds[k]);
    free(c->sub_names);
    c->sub_names = NULL;
}

/* The kind and direction of a (un)subscribe command NAME: the kind, with
 * *ADD 1 to subscribe, 0 to unsubscribe; -1 for any other command. */
static int client_sub_kind(const char *name, int *add)
{
    static const struct {
        const char *name;
        int kind, add;
    } table[] = {
        {"subscribe", SUB_CHANNEL, 1},   {"unsubscribe", SUB_CHANNEL, 0},
        {"psubscribe", SUB_PATTERN, 1},  {"punsubscribe", SUB_PATTERN, 0},
        {"ssubscribe", SUB_SHARD, 1},    {"sunsubscribe", SUB_SHARD, 0},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(name, table[i].name) == 0) {
            *add = table[i].add;
            return table[i].kind;
        }
    }
    return -1;
}

void client_failover_note(struct client *c, const struct request *req, struct evbuffer *src)
{
    struct client_name_list *l;
    struct req_argv a;
    int add, kind;

    /* Kept in every mode: a hand-over restart passes them on too
     * (client_handover.c). */
    if (req->cmd == NULL)
        return;
    if (client_role(req) == ROLE_RESET) {
        client_failover_forget(c);
        return;
    }
    if ((kind = client_sub_kind(req->cmd->name, &add)) < 0)
        return;
    if (c->sub_names == NULL && (c->sub_names = calloc(1, sizeof(*c->sub_names))) == NULL)
        return;
    l = &c->sub_names->kinds[kind];
    if (request_argv_open(&a, req, src != NULL ? src : req->raw) == 0) {
        if (!add && a.argc == 1)
            client_names_clear(l);   /* every one of its kind */
        for (int i = 1; i < a.argc; i++) {
            if (add)
                client_names_add(l, a.argv[i].ptr, a.argv[i].len);
            else
                client_names_remove(l, a.argv[i].ptr, a.argv[i].len);
        }
    }
    request_argv_close(&a);
}

/* The confirmation of a SUBSCRIBE sluice sent again: the client has had
 * its own long ago. */
static void client_failover_swallow(struct request *req, struct evbuffer *src, size_t len,
                                    int type)
{
    (void)type;
    evbuffer_drain(src, len);
    request_free(req);
}

/* Subscribe C again to every name it had, on a new private connection to
 * the primary. Returns 0, or -1 when it must be tried later. */
static int client_failover_resubscribe(struct client *c)
{
    struct backend_conn *conn;
    struct evbuffer *buf;
    int total = 0;

    if (!backend_node_up(backend_default_node()))
        return -1;
    /* One it made meanwhile (a command it sent while waiting) is the one
     * when it is to the primary: a client owns one private connection at
     * most. One to the old primary goes. */
    if (c->private_conn != NULL && backend_conn_node(c->private_conn) != backend_default_node()) {
        backend_release_private(c->private_conn);
        c->private_conn = NULL;
    }
    conn = c->private_conn != NULL ? c->private_conn
                                   : backend_private_conn(backend_default_node(), c);
    if (conn == NULL)
        return -1;
    c->private_conn = conn;
    backend_set_passthrough(conn, 1);
    buf = evbuffer_new();
    for (int k = 0; k < SUB_KINDS && c->sub_names != NULL; k++) {
        const struct client_name_list *l = &c->sub_names->kinds[k];
        /* One name a command: each confirmation pairs with its request. */
        for (int i = 0; i < l->count; i++) {
            const char *verb = client_sub_verbs[k];
            evbuffer_add_printf(buf, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(verb), verb,
                                l->lens[i]);
            evbuffer_add(buf, l->names[i], l->lens[i]);
            evbuffer_add(buf, "\r\n", 2);
            backend_send_internal(conn, buf, client_failover_swallow, NULL, NULL);
            total++;
        }
    }
    evbuffer_free(buf);
    log_notice("client %llu subscribed again to %d channels and patterns on the new primary %s",
               (unsigned long long)c->id, total, backend_node_name(backend_default_node()));
    return 0;
}

int client_failover_replay(const struct client *c, struct evbuffer *out)
{
    int total = 0;

    for (int k = 0; k < SUB_KINDS && c->sub_names != NULL; k++) {
        const struct client_name_list *l = &c->sub_names->kinds[k];
        const char *verb = client_sub_verbs[k];

        if (l->count == 0)
            continue;
        evbuffer_add_printf(out, "*%d\r\n$%zu\r\n%s\r\n", l->count + 1, strlen(verb), verb);
        for (int i = 0; i < l->count; i++) {
            evbuffer_add_printf(out, "$%zu\r\n", l->lens[i]);
            evbuffer_add(out, l->names[i], l->lens[i]);
            evbuffer_add(out, "\r\n", 2);
        }
        total += l->count;
    }
    return total;
}

int client_failover_wait(struct client *c, struct request *req)
{
    uint64_t now;

    if (!sentinel_enabled() || c->private_conn != NULL ||
        (req->place != PLACE_PRIVATE && !(c->flags & CLIENT_MULTI_DEFERRED)) ||
        backend_node_up(backend_default_node()))
        return 0;
    now = server_now_ms();
    if (req->retry_since_ms == 0) {
        req->retry_since_ms = now;
        log_debug("client %llu: its request waits for the primary (failover_retry_window)",
                  (unsigned long long)c->id);
    }
    return now - req->retry_since_ms < (uint64_t)client_cfg->failover_retry_window_ms ? 1 : -1;
}

void client_failover_cron(struct client *c)
{
    if (c->resubscribe_pending && !c->closing && client_failover_resubscribe(c) == 0)
        c->resubscribe_pending = 0;
}

int client_failover_private_lost(struct client *c)
{
    if (!sentinel_enabled() || (c->flags & (CLIENT_TUNNEL | CLIENT_MONITOR)))
        return 0;
    if (c->flags & CLIENT_PASSTHROUGH) {
        /* A RESP2 subscriber: streaming goes on from a new connection. */
        c->private_conn = NULL;
        c->inflight_conn = NULL;
        c->resubscribe_pending = 1;
        return 1;
    }
    if (c->subs.total > 0 || c->subs.shards > 0)
        return 0;   /* RESP3 (README "Known limits") */
    if ((c->flags & CLIENT_IN_MULTI) && !(c->flags & CLIENT_MULTI_DEFERRED)) {
        c->flags |= CLIENT_MULTI_LOST | CLIENT_MULTI_DIRTY;
        c->flags &= ~(unsigned)(CLIENT_WATCHING | CLIENT_SESSION);
    } else if (c->flags & (CLIENT_SESSION | CLIENT_WATCHING)) {
        return 0;   /* SELECT, TRACKING...: another connection would mean another thing */
    }
    if (c->inflight_conn == c->private_conn)
        c->inflight_conn = NULL;
    c->private_conn = NULL;
    return 1;
}

int client_failover_check(struct client *c, struct request *req, struct evbuffer *src,
                          const char **line)
{
    enum placement_role role;

    if (!(c->flags & CLIENT_MULTI_LOST))
        return 0;
    role = client_role(req);
    if (role == ROLE_RESET) {
        c->flags &= ~(unsigned)(CLIENT_MULTI_LOST | CLIENT_MULTI_DIRTY | CLIENT_IN_MULTI);
        multi_locals_free(&c->multi);
        return 0;
    }
    if (src != NULL)
        evbuffer_drain(src, req->raw_len);
    if (role == ROLE_EXEC || role == ROLE_DISCARD) {
        c->flags &= ~(unsigned)(CLIENT_MULTI_LOST | CLIENT_MULTI_DIRTY | CLIENT_IN_MULTI);
        multi_locals_free(&c->multi);
        *line = role == ROLE_EXEC ? "-EXECABORT Transaction discarded because of previous errors."
                                  : "+OK";
    } else if (role == ROLE_MULTI) {
        *line = "-ERR MULTI calls can not be nested";
    } else {
        *line = "-ERR backend unavailable during failover; the transaction will be discarded";
    }
    return 1;
}
