/* cluster.c - owns Redis Cluster mode: the slot map, its refreshes from
 * CLUSTER SLOTS, and following redirections between backend and client.
 * It never writes to a client: a request it takes back from the backend
 * (backend_set_reply_filter) is sent again or delivered with
 * backend_deliver, which hands it on as any reply.
 *
 *   reply -MOVED s host:port -> map[s] = node, refresh soon, send again there
 *   reply -ASK s host:port   -> ASKING + request on that node, map unchanged
 *   reply -TRYAGAIN          -> sent again to the slot's owner at the next tick
 *   at most cluster_max_redirects per request, then an error reply
 *   node down, -CLUSTERDOWN  -> refresh soon; sent again by the map at the
 *                               next tick, for up to cluster_retry_window
 *
 * A reply's text is never trusted on its own: a script, a function or a
 * module command can write any error text, after it has run.
 *   - A redirection is followed only to a member of the cluster as the
 *     cluster reports it (every node of the last CLUSTER SLOTS reply, and
 *     the seeds). One naming another address waits for a new map; if the
 *     new map does not list it either, the client gets the reply as is.
 *     So sluice never connects, nor sends credentials, anywhere else, and
 *     its node list is bounded by the cluster's size.
 *   - A command that may have run is never sent again (cluster_may_forge,
 *     cluster_rerunnable). A client's script or function, or a command
 *     the table does not know: its -TRYAGAIN, -CLUSTERDOWN and -ASK go to
 *     the client as they are; its -MOVED is followed only when a map asked
 *     for after it confirms it (the slot of its keys is now the named
 *     node's, no longer the answering one's: Redis refused it before it
 *     ran). A connection lost under a request sends it again only when its
 *     bytes never reached the socket (REQ_UNWRITTEN) or it only reads.
 *
 * The map is replaced whole, from one CLUSTER SLOTS reply, asked of one
 * node at a time (known nodes in turn), every cluster_refresh_interval and
 * soon after a MOVED (at most every CLUSTER_REFRESH_MIN_MS). Nodes are
 * backend nodes (backend_node_get); a node no longer in the map is
 * retired (backend_node_retire: its shared connections close once
 * answered) until the map or a redirection names it again.
 *
 * cluster_slots.c reads the CLUSTER SLOTS reply for it; a request's slot
 * and sluice's own answers in cluster mode are cluster_request.c's.
 */
#include "cluster.h"
#include "cluster_int.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "commands.h"
#include "config.h"
#include "log.h"
#include "pause.h"
#include "metrics.h"
#include "placement.h"
#include "primary.h"
#include "reply.h"
#include "request.h"
#include "replicas.h"
#include "server.h"
#include "slot.h"
#include "stats.h"

#define CLUSTER_TICK_MS 100
#define CLUSTER_REFRESH_MIN_MS 200        /* between two map requests at most */
#define CLUSTER_REFRESH_TIMEOUT_MS 2000   /* a map request unanswered this long is given up */
#define CLUSTER_TRYAGAIN_DELAY_MS 20
#define CLUSTER_CONFIRM_TIMEOUT_MS 4000  /* a redirection unconfirmed this long goes on as is */

/* One redirection of TYPE ("moved", "ask", "tryagain") followed. */
#define CLUSTER_COUNT_REDIRECT(type) \
    ((*metrics_counter(METRIC_cluster_redirections_total, type, NULL))++)

static const struct config *cluster_cfg;
static struct event *cluster_tick;
static struct backend_node *cluster_owner[SLOT_COUNT];
static uint64_t cluster_version;   /* counts changes of cluster_owner (cluster_map_version) */
static int cluster_have_map;
static uint64_t cluster_map_ms;           /* when the map was last loaded, 0: never */
static uint64_t cluster_asked_ms;         /* when a map was last asked for */
static uint64_t cluster_asked_gen;        /* number of the map request in flight, 0: none */
static uint64_t cluster_next_gen = 1;
static int cluster_refresh_wanted;
static struct backend_node *cluster_last_asked;
static char cluster_last_error[200];

/* Requests waiting to be sent again (TRYAGAIN, no reachable node),
 * oldest first. */
struct cluster_retry {
    struct request *req;
    struct backend_node *node;           /* NULL: the slot's owner by then */
    uint64_t due_ms;
    struct cluster_retry *next;
};
static struct cluster_retry *cluster_retries;
static struct cluster_retry **cluster_retries_tail = &cluster_retries;

enum cluster_redirect { REDIRECT_NONE, REDIRECT_MOVED, REDIRECT_ASK, REDIRECT_TRYAGAIN };

/* The cluster's members: every node, primary or replica, of the last map
 * loaded. With the seeds, the only addresses a redirection may name. */
static struct cluster_names cluster_members;
static uint64_t cluster_loaded_gen;   /* the generation of the map last loaded */

/* Redirections waiting for a map to confirm them, oldest first: REPLY
 * (Redis's bytes) goes to the client as is when none does. */
struct cluster_held {
    struct request *req;
    const struct backend_node *from;     /* the node that answered */
    enum cluster_redirect kind;
    int slot;
    char target[CLUSTER_NAME_MAX];
    struct evbuffer *reply;
    uint64_t gen;                        /* a map asked at or after this confirms */
    uint64_t since_ms;
    struct cluster_held *next;
};
static struct cluster_held *cluster_held;
static struct cluster_held **cluster_held_tail = &cluster_held;

int cluster_enabled(void)
{
    return cluster_cfg != NULL;
}

struct backend_node *cluster_node_for_slot(int slot)
{
    if (slot < 0 || slot >= SLOT_COUNT)
        return NULL;
    return cluster_owner[slot];
}

uint64_t cluster_map_version(void)
{
    return cluster_version;
}

int cluster_has_map(void)
{
    return cluster_have_map;
}

/* SLOT is NODE's from now on. */
static void cluster_set_owner(int slot, struct backend_node *node)
{
    if (cluster_owner[slot] != node)
        cluster_version++;
    cluster_owner[slot] = node;
}

/* SLOT is NODE's from now on, told by a MOVED: a primary change for the
 * locks when another node had it: a migration when NODE is a primary of
 * other slots already, else a failover. */
static void cluster_move_owner(int slot, struct backend_node *node)
{
    struct backend_node *was = cluster_owner[slot];
    int migrated = node != NULL && cluster_node_is_primary(node);

    cluster_set_owner(slot, node);
    if (node != NULL && was != NULL && was != node && migrated)
        primary_migrated(slot, slot, "a MOVED named another primary, one of other slots already "
                         "(a migration)");
    else if (node != NULL && was != NULL && was != node)
        primary_promoted(slot, slot, 0, "a MOVED named another primary");
}

/* Tell the primary-change hook every range of slots that MAP gives to
 * another primary than the map in force (all, for the first map). */
static void cluster_report_changes(struct backend_node *const *map)
{
    int first = -1;

    for (int s = 0; s <= SLOT_COUNT; s++) {
        int changed = s < SLOT_COUNT && map[s] != NULL && map[s] != cluster_owner[s];
        if (changed && first < 0)
            first = s;
        /* A range ends where the change ends, or where its new primary
         * does: in the first map each is asked when it last lost writes;
         * later, a primary of other slots already took them over (a
         * migration), or a node new as a primary (a promoted replica). */
        if (first >= 0 && (!changed || map[s] != map[first])) {
            if (!cluster_have_map)
                primary_first_map(map[first], first, s - 1);
            else if (cluster_node_is_primary(map[first]))
                primary_migrated(first, s - 1, "the slot map gives them to a primary of other "
                                 "slots (a migration)");
            else
                primary_promoted(first, s - 1, 0, "the slot map names another primary");
            first = changed ? s : -1;
        }
    }
}

int cluster_node_is_primary(const struct backend_node *node)
{
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (cluster_owner[s] == node)
            return 1;
    }
    return 0;
}

void cluster_want_refresh(void)
{
    cluster_refresh_wanted = 1;
}

/* Whether NAME is a node the cluster reported, or a seed. */
static int cluster_is_member(const char *name)
{
    for (int i = 0; i < cluster_cfg->cluster_seed_count; i++) {
        if (strcmp(cluster_cfg->cluster_seeds[i], name) == 0)
            return 1;
    }
    return cluster_names_has(&cluster_members, name);
}

/* ---------------------------------------------------------------------
 * Refreshing the map */

static void cluster_refresh_failed(const char *node, const char *why)
{
    STAT_INC(cluster_refresh_failures);
    (*metrics_counter(METRIC_cluster_slot_map_refreshes_total, "error", NULL))++;
    snprintf(cluster_last_error, sizeof(cluster_last_error), "%s: %s", node, why);
    log_info("cluster: no slot map from %s: %s", node, why);
    cluster_asked_gen = 0;
    cluster_refresh_wanted = 1;   /* the next node is asked at the next tick */
}

/* Retire the nodes that serve no slot of the map (seeds that are
 * replicas, demoted or removed primaries); bring back those that do. */
static void cluster_retire_absent(void)
{
    struct backend_node *node;

    for (node = backend_node_next(NULL); node != NULL; node = backend_node_next(node))
        backend_node_retire(node, !cluster_node_is_primary(node) && !replicas_is_replica(node));
}

/* Install MAP and log what changed in coverage. */
static void cluster_install(struct backend_node **map)
{
    int served = 0, changed = 0;

    cluster_report_changes(map);
    for (int s = 0; s < SLOT_COUNT; s++) {
        served += map[s] != NULL;
        changed += map[s] != cluster_owner[s];
        cluster_set_owner(s, map[s]);
    }
    if (!cluster_have_map || changed > 0)
        log_notice("cluster: slot map loaded, %d slots served, %d changed", served, changed);
    cluster_have_map = 1;
    cluster_map_ms = server_now_ms();
    cluster_retire_absent();
    if (served < SLOT_COUNT)
        cluster_refresh_wanted = 1;   /* the cluster may still be forming or failing over */
    STAT_INC(cluster_refreshes);
    (*metrics_counter(METRIC_cluster_slot_map_refreshes_total, "ok", NULL))++;
}

static void cluster_settle_held(uint64_t now_ms);

/* The reply to CLUSTER SLOTS, asked with generation CTX. */
static void cluster_slots_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    uint64_t gen = (uint64_t)(uintptr_t)req->ctx;
    const char *asked = cluster_last_asked != NULL ? backend_node_name(cluster_last_asked) : "?";
    struct backend_node **map = NULL;
    struct cluster_names members = {0};
    const char *buf = (const char *)evbuffer_pullup(src, (ssize_t)len);

    if (gen != cluster_asked_gen) {
        /* a late answer to a request given up on */
    } else if (type == REPLY_ERROR || buf == NULL) {
        char text[160];
        snprintf(text, sizeof(text), "%.*s", (int)(len < 150 ? len : 150), buf ? buf : "?");
        text[strcspn(text, "\r\n")] = '\0';
        cluster_refresh_failed(asked, text);
    } else if ((map = calloc(SLOT_COUNT, sizeof(*map))) == NULL ||
               cluster_parse_map(buf, len, asked, map, &members) != 0) {
        cluster_refresh_failed(asked, "malformed CLUSTER SLOTS reply");
    } else {
        struct cluster_names old = cluster_members;
        cluster_members = members;
        members = old;
        cluster_loaded_gen = gen;
        cluster_install(map);
        cluster_asked_gen = 0;
        cluster_last_error[0] = '\0';
        cluster_settle_held(server_now_ms());
    }
    cluster_names_free(&members);
    free(map);
    evbuffer_drain(src, len);
    request_free(req);
}

/* The node after NODE, round the list. */
static struct backend_node *cluster_node_after(const struct backend_node *node)
{
    struct backend_node *next = backend_node_next(node);

    return next != NULL ? next : backend_node_next(NULL);
}

/* The node to ask next: the first that is up after the last asked, else
 * simply the next one (its connection may come up meanwhile). */
static struct backend_node *cluster_pick_node(void)
{
    struct backend_node *start = cluster_node_after(cluster_last_asked), *node = start;

    do {
        if (node == NULL || backend_node_up(node))
            return node;
        node = cluster_node_after(node);
    } while (node != start);
    return start;
}

static void cluster_ask_map(uint64_t now_ms)
{
    static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    struct evbuffer *buf;
    struct backend_node *node = cluster_pick_node();

    if (node == NULL)
        return;
    if (backend_node_retired(node))
        backend_node_retire(node, 0);   /* nobody else is up: ask it after all */
    cluster_last_asked = node;
    cluster_asked_ms = now_ms;
    cluster_asked_gen = cluster_next_gen++;
    cluster_refresh_wanted = 0;
    buf = evbuffer_new();
    evbuffer_add(buf, slots, sizeof(slots) - 1);
    /* During a CLIENT PAUSE ALL Redis holds it: then on a connection of
     * its own, not ahead of the clients' UNPAUSE on the shared one. */
    if (backend_send_internal(pause_internal_conn(node, 0, 0), buf, cluster_slots_reply,
                              (void *)(uintptr_t)cluster_asked_gen, NULL) != 0)
        cluster_refresh_failed(backend_node_name(node), "connection down");
    evbuffer_free(buf);
}

/* Whether a map should be asked for now. */
static int cluster_refresh_due(uint64_t now_ms)
{
    if (cluster_asked_gen != 0 && now_ms - cluster_asked_ms < CLUSTER_REFRESH_TIMEOUT_MS)
        return 0;   /* one is in flight */
    if (now_ms - cluster_asked_ms < CLUSTER_REFRESH_MIN_MS)
        return 0;
    return cluster_refresh_wanted || !cluster_have_map ||
           now_ms - cluster_map_ms >= (uint64_t)cluster_cfg->cluster_refresh_interval_ms;
}

/* ---------------------------------------------------------------------
 * Redirections */

/* Deliver the error TEXT for REQ as its reply. */
static void cluster_fail(struct request *req, const char *text)
{
    struct evbuffer *err = evbuffer_new();

    reply_error(err, "%s", text);
    backend_deliver(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
}

static void cluster_retry_later(struct request *req, struct backend_node *node);

/* Whether REQ, which found no reachable node, may be tried again: for
 * cluster_retry_window from its first such failure. */
static int cluster_may_retry(struct request *req)
{
    uint64_t now = server_now_ms();

    if (req->retry_since_ms == 0)
        req->retry_since_ms = now;
    return now - req->retry_since_ms < (uint64_t)cluster_cfg->cluster_retry_window_ms;
}

/* REQ found no reachable node (or a node said CLUSTERDOWN): read the map
 * again and send REQ once more later, by its slot. Returns 0 when its
 * window has passed: then nothing was done. */
static int cluster_retry_unreachable(struct request *req)
{
    if (!cluster_may_retry(req))
        return 0;
    STAT_INC(cluster_retries);
    cluster_want_refresh();
    cluster_retry_later(req, NULL);
    return 1;
}

int cluster_take_unsent(struct request *req)
{
    return cluster_enabled() && request_has_bytes(req) && cluster_retry_unreachable(req);
}

int cluster_send_own(struct backend_node *node, const struct backend_login *login,
                     unsigned long long client_id, int resp, int slot, unsigned flags,
                     struct evbuffer *bytes, request_reply_fn *on_reply, void *ctx,
                     void (*ctx_free)(struct request *req))
{
    struct backend_conn *conn = login != NULL
                                    ? backend_login_script_conn(node, login, client_id, resp)
                                    : backend_pool_conn(node, client_id, resp);
    struct request *req = conn != NULL ? request_new() : NULL;
    char err[64];

    if (req == NULL)
        return -1;
    req->login = login;   /* sent again (a redirection), it goes as LOGIN too */
    req->raw_len = evbuffer_get_length(bytes);
    if (req->raw_len <= REQ_KEPT_MAX) {   /* in place: a part of an MGET allocates nothing */
        evbuffer_remove(bytes, req->kept, req->raw_len);
        req->flags |= REQ_KEPT;
    } else if ((req->raw = evbuffer_new()) == NULL) {
        request_free(req);
        return -1;
    } else {
        evbuffer_add_buffer(req->raw, bytes);
    }
    req->on_reply = on_reply;
    req->ctx = ctx;
    req->ctx_free = ctx_free;
    req->slot = slot;
    req->own_client_id = client_id;
    req->own_resp = resp;
    req->flags |= flags & REQ_RERUNNABLE;
    if (backend_send(conn, req, NULL, err, sizeof(err)) == 0 || cluster_take_unsent(req))
        return 0;
    request_free(req);
    return -1;
}

/* Send REQ (the bytes it holds) to NODE's shared connection, after
 * ASKING when ASKING is set. When NODE cannot be reached REQ waits to be
 * sent again (within its window) or gets the error. */
static void cluster_resend(struct request *req, struct backend_node *node, int asking)
{
    static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";
    /* A client's request goes on the shared connection of its client's
     * protocol (a script on a script connection, as client.c sends it);
     * sluice's own (locks, parts, buckets) on the kind it was first sent
     * on (cluster_send_own; else RESP2). */
    struct backend_conn *conn = backend_resend_conn(node, req);
    char err[512];

    if (conn == NULL) {
        cluster_fail(req, "OOM sluice is out of memory");
        return;
    }
    if (asking) {
        struct evbuffer *buf = evbuffer_new();
        evbuffer_add(buf, asking_cmd, sizeof(asking_cmd) - 1);
        backend_send_internal(conn, buf, NULL, NULL, NULL);
        evbuffer_free(buf);
    }
    if (backend_send(conn, req, NULL, err, sizeof(err)) != 0 && !cluster_retry_unreachable(req))
        cluster_fail(req, err);
}

static void cluster_retry_later(struct request *req, struct backend_node *node)
{
    struct cluster_retry *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        cluster_fail(req, "OOM sluice is out of memory");
        return;
    }
    req->flags |= REQ_DETACHED;
    r->req = req;
    r->node = node;
    r->due_ms = server_now_ms() + CLUSTER_TRYAGAIN_DELAY_MS;
    *cluster_retries_tail = r;
    cluster_retries_tail = &r->next;
}

/* Send again the requests whose delay has passed; free those whose
 * client has gone. */
static void cluster_run_retries(uint64_t now_ms)
{
    struct cluster_retry *r;

    while ((r = cluster_retries) != NULL && r->due_ms <= now_ms) {
        struct request *req = r->req;
        struct backend_node *node = r->node != NULL ? r->node : cluster_node_for_slot(req->slot);
        cluster_retries = r->next;
        if (cluster_retries == NULL)
            cluster_retries_tail = &cluster_retries;
        req->flags &= ~(unsigned)REQ_DETACHED;
        if (req->client == NULL && req->on_reply == NULL)
            request_free(req);
        else
            cluster_resend(req, node != NULL ? node : backend_default_node(), 0);
        free(r);
    }
}

/* What the error TEXT asks: MOVED/ASK with *SLOT and TARGET, or TRYAGAIN. */
static enum cluster_redirect cluster_classify(const char *text, int *slot, char *target,
                                              size_t size)
{
    enum cluster_redirect kind;
    const char *p;
    char *end;
    long s;

    if (strncmp(text, "-TRYAGAIN", 9) == 0)
        return REDIRECT_TRYAGAIN;
    if (strncmp(text, "-MOVED ", 7) == 0)
        kind = REDIRECT_MOVED, p = text + 7;
    else if (strncmp(text, "-ASK ", 5) == 0)
        kind = REDIRECT_ASK, p = text + 5;
    else
        return REDIRECT_NONE;
    s = strtol(p, &end, 10);
    if (end == p || *end != ' ' || s < 0 || s >= SLOT_COUNT)
        return REDIRECT_NONE;
    p = end + 1;
    if (strlen(p) == 0 || strlen(p) >= size || strchr(p, ':') == NULL)
        return REDIRECT_NONE;
    snprintf(target, size, "%s", p);
    *slot = (int)s;
    return kind;
}

/* "host:port" of a redirection, with the host of FROM when Redis left it
 * out (":port", when it does not know the address it announces). */
static void cluster_full_target(char *target, size_t size, const struct backend_node *from)
{
    const char *name = backend_node_name(from), *colon = strrchr(name, ':');
    size_t host_len = (size_t)(colon - name), len = strlen(target);

    if (target[0] != ':' || host_len + len >= size)
        return;
    memmove(target + host_len, target, len + 1);
    memcpy(target, name, host_len);
}

/* Whether REQ's error reply may be text its command wrote after it ran:
 * a client's script or function (redis.error_reply can return any text),
 * DEBUG (DEBUG ERROR answers with the text it is given), or a command
 * sluice's table does not know (a module's). sluice's own requests run
 * its own scripts, which write no such text. */
static int cluster_may_forge(const struct request *req)
{
    return req->client != NULL &&
           (req->cmd == NULL || placement_role(req->cmd) == ROLE_SCRIPT ||
            strncmp(req->cmd->name, "debug", 5) == 0);
}

/* Whether REQ may run twice: it only reads (a client's read-only command,
 * read-only script included; sluice's own reading part or question). */
static int cluster_rerunnable(const struct request *req)
{
    if (req->client == NULL)
        return (req->flags & REQ_RERUNNABLE) != 0;
    return req->cmd != NULL && (req->cmd->flags & CMD_READONLY) &&
           !(req->cmd->flags & CMD_WRITE);
}

/* REQ's reply is the client's as Redis wrote it, though it reads like a
 * signal to sluice: counted, and logged for whoever looks into it. */
static int cluster_pass_on(const struct request *req, const char *text)
{
    STAT_INC(cluster_not_rerun);
    log_debug("cluster: client %llu: '%.60s' passed on: the command may have run",
              req->client != NULL ? (unsigned long long)req->client->id : 0ULL, text);
    return 0;
}

/* The node a held redirection H may be followed to, now that a map asked
 * for after it came (or none came in time): NULL when the cluster does
 * not confirm it. A member only; for a command that may have run, a MOVED
 * for its own slot that the map now gives to the named node and no
 * longer to the node that answered (Redis refused it before running). */
static struct backend_node *cluster_confirmed(const struct cluster_held *h)
{
    struct backend_node *owner;

    if (cluster_loaded_gen < h->gen || !cluster_is_member(h->target))
        return NULL;
    if (!cluster_may_forge(h->req))
        return backend_node_get(h->target);
    owner = cluster_owner[h->slot];
    if (h->kind != REDIRECT_MOVED || h->slot != h->req->slot || owner == NULL ||
        owner == h->from || strcmp(backend_node_name(owner), h->target) != 0)
        return NULL;
    return owner;
}

/* Follow a redirection of KIND for SLOT to NODE, which the cluster lists. */
static void cluster_follow(struct request *req, enum cluster_redirect kind, int slot,
                           struct backend_node *node)
{
    if (kind == REDIRECT_MOVED) {
        STAT_INC(cluster_moved);
        CLUSTER_COUNT_REDIRECT("moved");
        cluster_move_owner(slot, node);
        cluster_want_refresh();
    } else {
        STAT_INC(cluster_ask);
        CLUSTER_COUNT_REDIRECT("ask");
    }
    cluster_resend(req, node, kind == REDIRECT_ASK);
}

/* Hold REQ, whose redirection (KIND for SLOT to TARGET, the LEN bytes at
 * the head of SRC, taken) FROM gave, until a map asked for from now on
 * confirms it or not. */
static void cluster_hold(struct request *req, const struct backend_node *from,
                         enum cluster_redirect kind, int slot, const char *target,
                         struct evbuffer *src, size_t len)
{
    struct cluster_held *h = calloc(1, sizeof(*h));

    if (h == NULL || (h->reply = evbuffer_new()) == NULL) {
        free(h);
        evbuffer_drain(src, len);
        cluster_fail(req, "OOM sluice is out of memory");
        return;
    }
    evbuffer_remove_buffer(src, h->reply, len);
    req->flags |= REQ_DETACHED;
    h->req = req;
    h->from = from;
    h->kind = kind;
    h->slot = slot;
    snprintf(h->target, sizeof(h->target), "%s", target);
    h->gen = cluster_next_gen;   /* the next map asked for: asked after this reply */
    h->since_ms = server_now_ms();
    *cluster_held_tail = h;
    cluster_held_tail = &h->next;
    cluster_want_refresh();
}

/* Settle H: follow it where the cluster confirms it, else give the
 * client Redis's reply as it is. */
static void cluster_settle(struct cluster_held *h)
{
    struct request *req = h->req;
    struct backend_node *node;

    req->flags &= ~(unsigned)REQ_DETACHED;
    if (req->client == NULL && req->on_reply == NULL) {
        request_free(req);
        return;
    }
    node = cluster_confirmed(h);
    if (node != NULL) {
        cluster_follow(req, h->kind, h->slot, node);
        return;
    }
    STAT_INC(cluster_unconfirmed);
    log_notice("cluster: a reply named %s for slot %d, which the cluster does not confirm; "
               "passed on to client %llu as it is",
               h->target, h->slot,
               req->client != NULL ? (unsigned long long)req->client->id : 0ULL);
    backend_deliver(req, h->reply, evbuffer_get_length(h->reply), REPLY_ERROR);
}

/* Settle the held redirections a map has confirmed or not since, and
 * those that waited too long for one. */
static void cluster_settle_held(uint64_t now_ms)
{
    struct cluster_held **p = &cluster_held, *h;

    while ((h = *p) != NULL) {
        if (cluster_loaded_gen < h->gen && now_ms - h->since_ms < CLUSTER_CONFIRM_TIMEOUT_MS) {
            p = &h->next;
            continue;
        }
        *p = h->next;
        if (cluster_held_tail == &h->next)
            cluster_held_tail = p;
        cluster_settle(h);
        evbuffer_free(h->reply);
        free(h);
    }
}

/* A MOVED or ASK (TEXT) for REQ on a session's private connection
 * CONN: the request cannot go elsewhere (the session's state is on CONN's
 * node), so the client gets a plain error instead of the redirection;
 * inside MULTI, Redis has flagged the transaction and EXEC aborts it
 * (-EXECABORT). A MOVED to a member updates the slot at once; either way
 * the map is read again soon. A command that may have written the text
 * itself gets it as it is. Returns 1 when it answered REQ. */
static int cluster_session_redirect(struct backend_conn *conn, struct request *req,
                                    struct evbuffer *src, size_t len, const char *text)
{
    static const char moved_err[] =
        "-TRYAGAIN sluice: the key's slot moved to another cluster node while this "
        "connection's session (transaction, WATCH, blocking command) was on the old one; "
        "try again\r\n";
    char target[CLUSTER_NAME_MAX];
    enum cluster_redirect kind;
    struct evbuffer *out;
    int slot = -1;

    kind = cluster_classify(text, &slot, target, sizeof(target));
    if (kind != REDIRECT_MOVED && kind != REDIRECT_ASK)
        return 0;
    cluster_want_refresh();
    if (cluster_may_forge(req))
        return cluster_pass_on(req, text);
    if (kind == REDIRECT_MOVED) {
        STAT_INC(cluster_moved);
        CLUSTER_COUNT_REDIRECT("moved");
        cluster_full_target(target, sizeof(target), backend_conn_node(conn));
        if (cluster_is_member(target)) {
            struct backend_node *node = backend_node_get(target);
            if (node != NULL)
                cluster_move_owner(slot, node);
        }
    } else {
        STAT_INC(cluster_ask);
        CLUSTER_COUNT_REDIRECT("ask");
    }
    out = evbuffer_new();
    if (out == NULL)
        return 0;
    evbuffer_drain(src, len);
    evbuffer_add(out, moved_err, sizeof(moved_err) - 1);
    backend_deliver(req, out, evbuffer_get_length(out), REPLY_ERROR);
    evbuffer_free(out);
    return 1;
}

/* Whether REQ, sent on its client's private connection, is a plain
 * command that only went there because its key's node was that
 * connection's (client_route.c): no transaction, WATCH, blocking command,
 * pub/sub or CLIENT TRACKING (a read must be tracked there) needs it
 * there, so its redirections are followed on the shared connections, and
 * it is sent again there when that connection fails. */
static int cluster_plain_on_private(const struct request *req)
{
    enum placement_role role = placement_role(req->cmd);

    return req->client != NULL && !(req->client->flags & CLIENT_TRACKING) &&
           (req->place == PLACE_SHARED || req->place == PLACE_LOCAL) &&
           (role == ROLE_NONE || role == ROLE_SCRIPT) &&
           !(req->flags & (REQ_IN_MULTI | REQ_UNPAIRED)) && request_has_bytes(req);
}

/* REQ's connection failed under it: sent again by the map later, when
 * Redis cannot have run it or running it twice does no harm. Returns 1
 * when taken (SRC's LEN bytes drained). */
static int cluster_conn_failed(struct request *req, struct evbuffer *src, size_t len,
                               const char *text)
{
    if (!(req->flags & REQ_UNWRITTEN) && !cluster_rerunnable(req))
        return cluster_pass_on(req, text);
    if (!cluster_retry_unreachable(req))
        return 0;
    evbuffer_drain(src, len);
    return 1;
}

/* The backend filter: see cluster.h's contract via backend_reply_filter_fn. */
static int cluster_reply_filter(struct backend_conn *conn, struct request *req,
                                struct evbuffer *src, size_t len, int conn_failed)
{
    char text[CLUSTER_NAME_MAX + 20] = {0}, target[CLUSTER_NAME_MAX];
    enum cluster_redirect kind;
    struct backend_node *node;
    int slot = -1;

    if (!backend_conn_is_shared(conn) && !backend_conn_is_oneshot(conn) &&
        !cluster_plain_on_private(req)) {
        if (conn_failed || req->client == NULL)
            return 0;
        evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
        text[strcspn(text, "\r\n")] = '\0';
        return cluster_session_redirect(conn, req, src, len, text);
    }
    if (!request_has_bytes(req) || (req->client == NULL && req->on_reply == NULL) ||
        req->on_reply == cluster_slots_reply)
        return 0;   /* nobody waits, or the map's own request */
    /* A one-shot connection (a request gone around a stalled one) holds
     * no session: its redirections are followed like a shared one's, on
     * the shared connections. A failure there is the client's to hear:
     * what it carried may have run. */
    if (conn_failed && backend_conn_is_oneshot(conn))
        return 0;
    evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
    text[strcspn(text, "\r\n")] = '\0';
    if (conn_failed)
        return cluster_conn_failed(req, src, len, text);
    kind = cluster_classify(text, &slot, target, sizeof(target));
    if (strncmp(text, "-CLUSTERDOWN", 12) == 0) {
        /* A failover may be under way: again later, by the new map. */
        if (cluster_may_forge(req))
            return cluster_pass_on(req, text);
        if (!cluster_retry_unreachable(req))
            return 0;
        evbuffer_drain(src, len);
        return 1;
    }
    if (kind == REDIRECT_NONE)
        return 0;
    if (cluster_may_forge(req) && kind != REDIRECT_MOVED)
        return cluster_pass_on(req, text);   /* TRYAGAIN, ASK: nothing can confirm them */
    if (++req->redirects > cluster_cfg->cluster_max_redirects) {
        STAT_INC(cluster_redirect_limit);
        log_info("cluster: a request gave up after %lld redirections (last: %s)",
                 cluster_cfg->cluster_max_redirects, text);
        cluster_want_refresh();
        evbuffer_drain(src, len);
        cluster_fail(req, "-TRYAGAIN sluice followed cluster_max_redirects redirections "
                          "without an answer; try again");
        return 1;
    }
    if (kind == REDIRECT_TRYAGAIN) {
        /* Again from the slot's owner: after an ASK, the target's TRYAGAIN
         * is for the source to sort out (it asks again when it must). */
        STAT_INC(cluster_tryagain);
        CLUSTER_COUNT_REDIRECT("tryagain");
        evbuffer_drain(src, len);
        node = cluster_node_for_slot(req->slot);
        cluster_retry_later(req, node != NULL ? node : backend_conn_node(conn));
        return 1;
    }
    cluster_full_target(target, sizeof(target), backend_conn_node(conn));
    if (!cluster_may_forge(req) && cluster_is_member(target) &&
        (node = backend_node_get(target)) != NULL) {
        evbuffer_drain(src, len);
        cluster_follow(req, kind, slot, node);
        return 1;
    }
    cluster_hold(req, backend_conn_node(conn), kind, slot, target, src, len);
    return 1;
}

/* ---------------------------------------------------------------------
 * PROXY CLUSTER */

void cluster_write_map(struct evbuffer *out)
{
    struct evbuffer *text = evbuffer_new();
    uint64_t now = server_now_ms();
    struct backend_node *node = NULL;
    int start = 0;

    evbuffer_add_printf(text, "# Cluster\r\ncluster_enabled:%d\r\ncluster_have_map:%d\r\n",
                        cluster_enabled(), cluster_have_map);
    if (cluster_enabled())
        evbuffer_add_printf(text, "cluster_last_refresh_ms_ago:%lld\r\ncluster_last_error:%s\r\n",
                            cluster_map_ms ? (long long)(now - cluster_map_ms) : -1LL,
                            cluster_last_error);
    evbuffer_add_printf(text, "\r\n# Slots\r\n");
    for (int s = 1; s <= SLOT_COUNT && cluster_enabled(); s++) {
        if (s < SLOT_COUNT && cluster_owner[s] == cluster_owner[start])
            continue;
        evbuffer_add_printf(text, "slots:%d-%d %s\r\n", start, s - 1,
                            cluster_owner[start] ? backend_node_name(cluster_owner[start])
                                                 : "(not served)");
        start = s;
    }
    evbuffer_add_printf(text, "\r\n# Nodes\r\n");
    while (cluster_enabled() && (node = backend_node_next(node)) != NULL) {
        int slots = 0;
        for (int s = 0; s < SLOT_COUNT; s++)
            slots += cluster_owner[s] == node;
        evbuffer_add_printf(text, "node:%s,state=%s,slots=%d\r\n", backend_node_name(node),
                            backend_node_retired(node) ? "closed"
                            : backend_node_up(node)    ? "up"
                                                       : "down",
                            slots);
    }
    evbuffer_add_printf(text, "\r\n# Counters\r\nmoved:%llu\r\nask:%llu\r\ntryagain:%llu\r\n"
                              "retries:%llu\r\nredirect_limit:%llu\r\nrefreshes:%llu\r\n"
                              "refresh_failures:%llu\r\ncrossslot:%llu\r\nclusterdown_replies:%llu\r\n"
                              "unconfirmed:%llu\r\nnot_rerun:%llu\r\n",
                        (unsigned long long)stats[STAT_cluster_moved],
                        (unsigned long long)stats[STAT_cluster_ask],
                        (unsigned long long)stats[STAT_cluster_tryagain],
                        (unsigned long long)stats[STAT_cluster_retries],
                        (unsigned long long)stats[STAT_cluster_redirect_limit],
                        (unsigned long long)stats[STAT_cluster_refreshes],
                        (unsigned long long)stats[STAT_cluster_refresh_failures],
                        (unsigned long long)stats[STAT_cluster_crossslot],
                        (unsigned long long)stats[STAT_cluster_down_replies],
                        (unsigned long long)stats[STAT_cluster_unconfirmed],
                        (unsigned long long)stats[STAT_cluster_not_rerun]);
    reply_bulk_buffer(out, text);
    evbuffer_free(text);
}

/* ---------------------------------------------------------------------
 * Life cycle */

/* Whether a node the map names owner of slots cannot be reached: the
 * cluster may have promoted a replica meanwhile. */
static int cluster_owner_down(void)
{
    const struct backend_node *last = NULL;

    for (int s = 0; s < SLOT_COUNT; s++) {
        if (cluster_owner[s] == last || cluster_owner[s] == NULL)
            continue;
        last = cluster_owner[s];
        if (!backend_node_up(last))
            return 1;
    }
    return 0;
}

static void cluster_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();

    (void)fd;
    (void)what;
    (void)arg;
    cluster_run_retries(now);
    cluster_settle_held(now);
    if (cluster_have_map && cluster_owner_down())
        cluster_refresh_wanted = 1;
    if (cluster_refresh_due(now))
        cluster_ask_map(now);
}

void cluster_init(struct event_base *base, const struct config *cfg)
{
    struct timeval tv = {0, CLUSTER_TICK_MS * 1000};

    if (cfg->cluster_seed_count == 0)
        return;
    cluster_cfg = cfg;
    /* Every series shows from the start, at 0 (rate() sees the first one). */
    metrics_counter(METRIC_cluster_redirections_total, "moved", NULL);
    metrics_counter(METRIC_cluster_redirections_total, "ask", NULL);
    metrics_counter(METRIC_cluster_redirections_total, "tryagain", NULL);
    metrics_counter(METRIC_cluster_slot_map_refreshes_total, "ok", NULL);
    metrics_counter(METRIC_cluster_slot_map_refreshes_total, "error", NULL);
    backend_set_reply_filter(cluster_reply_filter);
    cluster_tick = event_new(base, -1, EV_PERSIST, cluster_tick_cb, NULL);
    evtimer_add(cluster_tick, &tv);
    cluster_ask_map(server_now_ms());
}

void cluster_free(void)
{
    struct cluster_retry *r;
    struct cluster_held *h;

    while ((r = cluster_retries) != NULL) {
        cluster_retries = r->next;
        request_free(r->req);
        free(r);
    }
    cluster_retries_tail = &cluster_retries;
    while ((h = cluster_held) != NULL) {
        cluster_held = h->next;
        request_free(h->req);
        evbuffer_free(h->reply);
        free(h);
    }
    cluster_held_tail = &cluster_held;
    cluster_names_free(&cluster_members);
    if (cluster_tick != NULL)
        event_free(cluster_tick);
    cluster_tick = NULL;
}
