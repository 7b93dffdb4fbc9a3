/* backend_extra.c - the backend's nodes as a whole and the connections
 * beyond a node's shared pools: start-up, finding or adding a node,
 * retiring it from the cluster's map, freeing them all; which pool
 * connection a client's requests take, the script pools of users logged
 * in as themselves (users_in_redis), private and one-shot connections
 * (and the spares they are taken from), the Redis ids of connections,
 * and PROXY INFO's backend section. It calls backend.c, never the other
 * way round. */
#include "backend.h"
#include "backend_int.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "netio.h"
#include "placement.h"
#include "reply.h"
#include "request.h"
#include "resolve.h"
#include "respframe.h"
#include "scripts.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "tls.h"
#include "value.h"


/* Shared connection I of KIND: RESP2 ones exist from the start; the
 * others are made on first use, so a deployment whose clients all speak
 * RESP2 and run no scripts keeps backend_connections connections. Made
 * connections are never NULL: a failed one is DOWN and retries. */
static struct backend_conn *backend_pool_kind_conn(struct backend_node *node,
                                                   enum backend_pool_kind kind, int i)
{
    struct backend_conn *conn = node->pools[kind][i];

    if (conn != NULL)
        return conn;
    conn = backend_conn_new(node, NULL);
    if (conn == NULL)   /* out of memory: RESP2 shapes on the first pool beat no reply */
        return node->pools[BACKEND_POOL_RESP2][i];
    conn->resp = kind == BACKEND_POOL_RESP3 || kind == BACKEND_POOL_SCRIPTS_RESP3 ? 3 : 2;
    conn->scripts = kind == BACKEND_POOL_SCRIPTS_RESP2 || kind == BACKEND_POOL_SCRIPTS_RESP3;
    node->pools[kind][i] = conn;
    backend_connect(conn);
    return conn;
}


struct backend_conn *backend_pool_conn(struct backend_node *node, unsigned long long client_id,
                                       int resp)
{
    int i = (int)(client_id % (unsigned long long)node->pool_size);

    return backend_pool_kind_conn(node, resp == 3 ? BACKEND_POOL_RESP3 : BACKEND_POOL_RESP2, i);
}


struct backend_conn *backend_script_conn(struct backend_node *node, unsigned long long client_id,
                                         int resp)
{
    int i = (int)(client_id % (unsigned long long)node->pool_size);

    return backend_pool_kind_conn(node, resp == 3 ? BACKEND_POOL_SCRIPTS_RESP3
                                                  : BACKEND_POOL_SCRIPTS_RESP2, i);
}


int backend_wants_auth(void)
{
    const struct backend_node *node = backend_default_node();

    return node != NULL && node->wants_auth;
}


void backend_server_hello(const struct backend_node *node, const char **version,
                          const char **mode, const char **role)
{
    *version = node->redis_version;
    /* A cluster behind sluice looks like one standalone Redis. */
    *mode = backend_cluster_mode ? "standalone" : node->redis_mode;
    *role = node->redis_role;
}


/* A new connection to NODE that is not in its pool: private (OWNER set)
 * or one-shot, logged in as LOGIN (NULL: sluice's backend user) before
 * anything else goes out on it. NULL when NODE has
 * backend_max_connections already. */
static struct backend_conn *backend_extra_conn(struct backend_node *node, struct client *owner,
                                               int oneshot, const struct backend_login *login)
{
    struct backend_conn *conn;

    if (node->private_count >= backend_cfg->backend_max_connections) {
        log_info("backend %s: backend_max_connections (%lld) reached", node->name,
                 backend_cfg->backend_max_connections);
        return NULL;
    }
    conn = backend_conn_new(node, owner);
    if (conn == NULL)
        return NULL;
    conn->oneshot = oneshot;
    conn->login = login;   /* before it connects: its prelude is that login's AUTH */
    node->private_count++;
    backend_connect(conn);
    return conn;
}


/* A spare of NODE for OWNER: one that is up, else one still connecting
 * (its connect started earlier than a new one would), or NULL. */
static struct backend_conn *backend_take_spare(struct backend_node *node, struct client *owner)
{
    struct backend_conn *conn, *best = NULL;

    TAILQ_FOREACH(conn, &node->conns, node_link) {
        if (!conn->spare || conn->released || conn->state == BACKEND_DOWN)
            continue;
        if (best == NULL || (conn->state == BACKEND_UP && best->state != BACKEND_UP))
            best = conn;
    }
    if (best == NULL)
        return NULL;
    best->spare = 0;
    best->owner = owner;
    node->spare_count--;
    node->private_count++;
    if (best->retry != NULL)
        evtimer_del(best->retry);
    return best;
}


struct backend_conn *backend_private_conn(struct backend_node *node, struct client *owner)
{
    struct backend_conn *conn = backend_take_spare(node, owner);

    if (conn == NULL)
        conn = backend_extra_conn(node, owner, 0, NULL);
    backend_spares_refill(node);
    return conn;
}


struct backend_conn *backend_control_conn(struct backend_node *node,
                                          const struct backend_login *login)
{
    if (login != NULL && login->gone)
        return NULL;   /* its Redis user is deleted: it could not log in */
    return backend_extra_conn(node, NULL, 1, login);
}


void backend_close_orphan(struct backend_conn *conn)
{
    struct request *req;

    if (!conn->oneshot || conn->released)
        return;
    TAILQ_FOREACH(req, &conn->inflight, conn_link) {
        if (req->client != NULL)
            return;
    }
    backend_conn_down(conn, "its client has gone");
}


void backend_release_private(struct backend_conn *conn)
{
    backend_conn_release(conn);
}


long long backend_conn_redis_id(const struct backend_conn *conn)
{
    return conn->redis_id;
}


/* The value of FIELD ("id=") in the CLIENT LIST line LINE (LEN bytes):
 * where it starts, and its length in *VLEN. NULL when absent. */
static const char *backend_list_field(const char *line, size_t len, const char *field, size_t *vlen)
{
    size_t flen = strlen(field);

    for (size_t i = 0; i + flen <= len; i++) {
        if ((i == 0 || line[i - 1] == ' ') && memcmp(line + i, field, flen) == 0) {
            const char *v = line + i + flen;
            const char *end = memchr(v, ' ', len - i - flen);
            *vlen = end != NULL ? (size_t)(end - v) : len - i - flen;
            return v;
        }
    }
    return NULL;
}


void backend_learn_redis_ids(struct backend_node *node, const char *text, size_t len)
{
    struct backend_conn *conn;

    /* Only NODE's connections: two connections to different nodes may
     * share a local address (the kernel keeps 4-tuples apart, not local
     * ports), and an id is a node's own. */
    while (len > 0) {
        const char *nl = memchr(text, '\n', len);
        size_t line_len = nl != NULL ? (size_t)(nl - text) : len;
        size_t id_len, addr_len;
        const char *id = backend_list_field(text, line_len, "id=", &id_len);
        const char *addr = backend_list_field(text, line_len, "addr=", &addr_len);
        TAILQ_FOREACH(conn, &node->conns, node_link) {
            if (id != NULL && addr != NULL && conn->redis_id <= 0 &&
                strlen(conn->local_addr) == addr_len &&
                memcmp(conn->local_addr, addr, addr_len) == 0)
                conn->redis_id = strtoll(id, NULL, 10);
        }
        text += line_len + (nl != NULL);
        len -= line_len + (nl != NULL);
    }
}


/* The shared connections are numbered across nodes (backend_0, 1...), in
 * the order the nodes were added; standalone has only its one node's. */
void backend_write_info(struct evbuffer *out)
{
    struct backend_node *node;
    static const char *const backend_pool_names[BACKEND_POOL_KINDS] = {
        [BACKEND_POOL_RESP2] = "", [BACKEND_POOL_RESP3] = "resp3_",
        [BACKEND_POOL_SCRIPTS_RESP2] = "scripts_", [BACKEND_POOL_SCRIPTS_RESP3] = "scripts_resp3_"};
    int numbers[BACKEND_POOL_KINDS] = {0}, private_count = 0, spare_count = 0;

    TAILQ_FOREACH(node, &backend_nodes, link) {
        for (int k = 0; k < BACKEND_POOL_KINDS; k++) {
            for (int i = 0; i < node->pool_size; i++) {
                struct backend_conn *conn = node->pools[k][i];
                if (conn != NULL)
                    evbuffer_add_printf(out, "backend_%s%d:addr=%s,state=%s,inflight=%d,"
                                        "redis_id=%lld,laddr=%s\r\n", backend_pool_names[k],
                                        numbers[k] + i, node->name,
                                        conn->state == BACKEND_UP && conn->auth_failed
                                            ? "auth_failed" : backend_state_names[conn->state],
                                        conn->inflight_count,
                                        conn->redis_id, conn->local_addr);
            }
            numbers[k] += node->pool_size;
        }
        private_count += node->private_count;
        spare_count += node->spare_count;
    }
    evbuffer_add_printf(out, "backend_private_connections:%d\r\n", private_count);
    evbuffer_add_printf(out, "backend_spare_connections:%d\r\n", spare_count);
}


/* Sentinel mode: the primary's address for backend_init; then its node. */
static char backend_primary_name[300];
static struct backend_node *backend_primary;

void backend_primary_preset(const char *hostport)
{
    snprintf(backend_primary_name, sizeof(backend_primary_name), "%s", hostport);
}

void backend_primary_set(struct backend_node *node)
{
    backend_primary = node;
}

void backend_node_drop_private(struct backend_node *node, const char *why)
{
    struct backend_conn *conn;

    /* Going down frees the connection and may close its client, which
     * releases others: look again from the start each time. */
    for (;;) {
        TAILQ_FOREACH(conn, &node->conns, node_link) {
            if (conn->owner != NULL && !conn->released && conn->state != BACKEND_DOWN)
                break;
        }
        if (conn == NULL)
            return;
        backend_conn_down(conn, why);
    }
}

int backend_init(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
    backend_base = base;
    backend_cfg = cfg;
    backend_cluster_mode = cfg->cluster_seed_count > 0;
    /* Requests keep their bytes until answered, to be sent again: after
     * a redirection, or to the next primary. */
    backend_keep_bytes = backend_cluster_mode || cfg->sentinel_count > 0;
    if (cfg->sentinel_count > 0) {
        backend_primary = backend_node_new(backend_primary_name, err, errlen);
        return backend_primary != NULL ? 0 : -1;
    }
    if (!backend_cluster_mode)
        return backend_node_new(cfg->backend, err, errlen) != NULL ? 0 : -1;
    for (int i = 0; i < cfg->cluster_seed_count; i++) {
        if (backend_node_new(cfg->cluster_seeds[i], err, errlen) == NULL)
            return -1;
    }
    return 0;
}


struct backend_node *backend_default_node(void)
{
    struct backend_node *node;

    if (backend_primary != NULL)
        return backend_primary;
    if (!backend_cluster_mode)
        return TAILQ_FIRST(&backend_nodes);
    /* Not a replica kept for reads (read_from): keyless commands and
     * sluice's own questions are for a primary. */
    TAILQ_FOREACH(node, &backend_nodes, link) {
        if (backend_node_up(node) && !node->readonly)
            return node;
    }
    TAILQ_FOREACH(node, &backend_nodes, link) {
        if (backend_node_up(node))
            return node;
    }
    return TAILQ_FIRST(&backend_nodes);
}


struct backend_node *backend_node_get(const char *hostport)
{
    struct backend_node *node;
    char err[300];

    TAILQ_FOREACH(node, &backend_nodes, link) {
        if (strcmp(node->name, hostport) == 0) {
            backend_node_retire(node, 0);   /* named again: connect again */
            return node;
        }
    }
    node = backend_node_new(hostport, err, sizeof(err));
    if (node == NULL)
        log_warning("%s node %s: %s", backend_cluster_mode ? "cluster" : "backend", hostport,
                    err);
    else
        log_notice("%s node %s added", backend_cluster_mode ? "cluster" : "backend", hostport);
    return node;
}


/* See backend.h. */
void backend_node_retire(struct backend_node *node, int retired)
{
    struct backend_conn *conn;

    if (node->retired == retired)
        return;
    node->retired = retired;
    node->retired_ms = retired ? server_now_ms() : 0;
    if (!retired && node->forgotten) {
        node->forgotten = 0;
        backend_node_metrics(node);   /* back in the topology: counted again */
    }
    if (!retired) {
        log_notice(backend_cluster_mode ? "cluster node %s is back in the slot map"
                                        : "backend node %s is in use again", node->name);
        TAILQ_FOREACH(conn, &node->conns, node_link) {
            if (backend_conn_is_shared(conn) && !conn->spare && conn->state == BACKEND_DOWN &&
                !(conn->login != NULL && conn->login->gone)) {
                if (conn->retry != NULL)
                    evtimer_del(conn->retry);
                conn->backoff_ms = BACKEND_BACKOFF_MIN_MS;
                backend_connect(conn);
            }
        }
        backend_spares_refill(node);
        return;
    }
    log_notice(backend_cluster_mode ? "cluster node %s left the slot map: its shared "
                                      "connections close once answered"
                                    : "backend node %s is no longer in use (a replica the "
                                      "primary stopped naming, or a primary that is no longer "
                                      "one): its shared connections close once answered",
               node->name);
    /* Closing one wakes its waiting clients, which may release other
     * connections of the list: look again from the start each time. */
    for (;;) {
        TAILQ_FOREACH(conn, &node->conns, node_link) {
            if (backend_retired_closable(conn))
                break;
        }
        if (conn == NULL)
            return;
        backend_close_if_retired(conn);
    }
}


int backend_node_retired(const struct backend_node *node)
{
    return node->retired;
}

/* The metric families whose first label is a node's name. */
static const enum metrics_id backend_node_families[] = {
    METRIC_backend_requests_total, METRIC_backend_request_duration_seconds,
    METRIC_backend_errors_total, METRIC_replica_reads_total,
};

/* Free NODE's metric series; what it still counts goes to metric_void. */
static void backend_node_forget(struct backend_node *node)
{
    for (size_t i = 0; i < sizeof(backend_node_families) / sizeof(backend_node_families[0]); i++)
        metrics_forget(backend_node_families[i], node->name);
    node->metric_requests = &node->metric_void.requests;
    node->metric_duration = &node->metric_void.duration;
    for (int k = 0; k < BACKEND_ERROR_KINDS; k++)
        node->metric_errors[k] = &node->metric_void.errors[k];
    node->forgotten = 1;
    log_info("backend node %s: out of the topology for %d s, its metric series are dropped",
             node->name, BACKEND_FORGET_MS / 1000);
}

/* Whether a node out of the topology is still in use elsewhere (a
 * replica reads may use: replicas.c keeps its series); set by main.c. */
static int (*backend_forget_in_use)(const struct backend_node *node);

void backend_forget_set_in_use(int (*in_use)(const struct backend_node *node))
{
    backend_forget_in_use = in_use;
}

void backend_forget_departed(uint64_t now_ms)
{
    static uint64_t last_ms;
    struct backend_node *node;

    if (now_ms - last_ms < 1000)
        return;   /* a sweep a second is plenty */
    last_ms = now_ms;
    TAILQ_FOREACH(node, &backend_nodes, link) {
        /* Still serving a client's own connection, or a replica reads may
         * use (its series is held by replicas.c): not gone yet. */
        if (!node->retired || node->forgotten || now_ms - node->retired_ms < BACKEND_FORGET_MS ||
            node->private_count > 0 ||
            (backend_forget_in_use != NULL && backend_forget_in_use(node)))
            continue;
        backend_node_forget(node);
    }
}


/* At exit: say so when CONN still had requests to write (a Redis that
 * stopped reading, a large request under way): the shutdown does not wait
 * for them past shutdown_timeout, and they are dropped with CONN. */
static void backend_note_unwritten(const struct backend_conn *conn)
{
    size_t unsent = evbuffer_get_length(conn->staged);

    if (conn->bev != NULL)
        unsent += evbuffer_get_length(bufferevent_get_output(conn->bev));
    if (unsent > 0)
        log_warning("backend %s: a connection closed at exit with %zu bytes of requests "
                    "not yet written to Redis", conn->node->name, unsent);
}

void backend_free_all(void)
{
    struct backend_node *node;

    while ((node = TAILQ_FIRST(&backend_nodes)) != NULL) {
        if (node->lookup != NULL)
            resolve_cancel(node->lookup);
        while (!TAILQ_EMPTY(&node->conns)) {
            backend_note_unwritten(TAILQ_FIRST(&node->conns));
            backend_conn_free(TAILQ_FIRST(&node->conns));
        }
        if (node->spare_ev != NULL)
            event_free(node->spare_ev);
        TAILQ_REMOVE(&backend_nodes, node, link);
        for (int k = 0; k < BACKEND_POOL_KINDS; k++)
            free(node->pools[k]);
        while (node->login_pools != NULL) {
            struct backend_login_pool *pool = node->login_pools;
            node->login_pools = pool->next;
            free(pool->conns[0]);
            free(pool->conns[1]);
            free(pool);
        }
        free(node);
    }
}

/* NODE's pool for LOGIN, made when new; NULL on OOM. */
static struct backend_login_pool *backend_login_pool(struct backend_node *node,
                                                     const struct backend_login *login)
{
    struct backend_login_pool *pool;

    for (pool = node->login_pools; pool != NULL; pool = pool->next) {
        if (pool->login == login)
            return pool;
    }
    pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return NULL;
    pool->conns[0] = calloc((size_t)node->pool_size, sizeof(*pool->conns[0]));
    pool->conns[1] = calloc((size_t)node->pool_size, sizeof(*pool->conns[1]));
    if (pool->conns[0] == NULL || pool->conns[1] == NULL) {
        free(pool->conns[0]);
        free(pool->conns[1]);
        free(pool);
        return NULL;
    }
    pool->login = login;
    pool->next = node->login_pools;
    node->login_pools = pool;
    return pool;
}

struct backend_conn *backend_login_script_conn(struct backend_node *node,
                                               const struct backend_login *login,
                                               unsigned long long client_id, int resp)
{
    int i = (int)(client_id % (unsigned long long)node->pool_size);
    struct backend_login_pool *pool;
    struct backend_conn *conn;

    if (login == NULL)
        return backend_script_conn(node, client_id, resp);
    pool = backend_login_pool(node, login);
    if (pool == NULL)
        return NULL;
    if (pool->conns[resp == 3][i] != NULL)
        return pool->conns[resp == 3][i];
    conn = backend_conn_new(node, NULL);
    if (conn == NULL)
        return NULL;
    conn->resp = resp == 3 ? 3 : 2;
    conn->scripts = 1;
    conn->login = login;
    pool->conns[resp == 3][i] = conn;
    backend_connect(conn);
    return conn;
}


void backend_node_set_readonly(struct backend_node *node)
{
    struct backend_conn *conn;

    if (node->readonly || !backend_cluster_mode)
        return;
    node->readonly = 1;
    /* A connection that is not down has sent its prelude already (at
     * connect), without READONLY: it says it now. */
    TAILQ_FOREACH(conn, &node->conns, node_link) {
        if (conn->state != BACKEND_DOWN && conn->owner == NULL && !conn->spare)
            backend_send_readonly(conn);
    }
}


struct backend_conn *backend_resend_conn(struct backend_node *node, const struct request *req)
{
    unsigned long long id = req->client != NULL ? req->client->id : req->own_client_id;
    int resp = req->client != NULL ? req->client->resp : req->own_resp == 3 ? 3 : 2;

    if (req->login != NULL || (req->client != NULL && placement_role(req->cmd) == ROLE_SCRIPT))
        return backend_login_script_conn(node, req->login, id, resp);
    return backend_pool_conn(node, id, resp);
}
