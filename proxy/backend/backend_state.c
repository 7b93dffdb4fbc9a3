/* backend_state.c - what the layers above read of a backend node or
 * connection (its name, role, readiness for /readyz, its connections by
 * kind for the metrics) and the switches they set on a connection (a
 * tunnel, streaming, reading held, clients waiting for room). Plain reads
 * and writes of backend_int.h's structures: it calls no other backend
 * file. */
#include "backend.h"
#include "backend_int.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "server.h"

int backend_node_ready(const struct backend_node *node, char *why, size_t len)
{
    const struct backend_conn *conn = node->pools[BACKEND_POOL_RESP2][0];

    if (conn->state != BACKEND_UP) {
        snprintf(why, len, "backend %s is not connected%s%s", node->name,
                 conn->error[0] != '\0' ? ": " : "", conn->error);
        return 0;
    }
    if (conn->auth_failed) {
        snprintf(why, len, "backend %s refused sluice's login (backend_user/backend_password)",
                 node->name);
        return 0;
    }
    return 1;
}

const char *backend_node_role(const struct backend_node *node)
{
    if (strcmp(node->redis_role, "master") == 0)
        return "primary";
    if (strcmp(node->redis_role, "slave") == 0 || strcmp(node->redis_role, "replica") == 0)
        return "replica";
    return "unknown";   /* not told yet (HELLO), or by a Redis too old for HELLO */
}

void backend_node_connections(const struct backend_node *node, int counts[BACKEND_KINDS])
{
    const struct backend_conn *conn;

    memset(counts, 0, BACKEND_KINDS * sizeof(counts[0]));
    TAILQ_FOREACH(conn, &node->conns, node_link) {
        if (conn->state != BACKEND_UP || conn->released)
            continue;
        if (conn->spare)
            counts[BACKEND_KIND_SPARE]++;
        else if (conn->owner != NULL || conn->oneshot)
            counts[BACKEND_KIND_PRIVATE]++;
        else if (conn->scripts)
            counts[BACKEND_KIND_SCRIPT]++;
        else
            counts[BACKEND_KIND_SHARED]++;
    }
}

int backend_congested(const struct backend_conn *conn)
{
    return conn->bev != NULL &&
           evbuffer_get_length(bufferevent_get_output(conn->bev)) +
                   evbuffer_get_length(conn->staged) > BACKEND_HIGH_WATER;
}

int backend_conn_is_oneshot(const struct backend_conn *conn)
{
    return conn->oneshot;
}

struct backend_node *backend_conn_node(const struct backend_conn *conn)
{
    return conn->node;
}

int backend_conn_runs_scripts(const struct backend_conn *conn)
{
    return conn->scripts;
}

void backend_hold_reading(struct backend_conn *conn, int hold)
{
    if (conn->bev == NULL)
        return;
    if (hold)
        bufferevent_disable(conn->bev, EV_READ);
    else
        bufferevent_enable(conn->bev, EV_READ);
}

const char *backend_node_name(const struct backend_node *node)
{
    return node->name;
}

int backend_node_up(const struct backend_node *node)
{
    return node->pools[BACKEND_POOL_RESP2][0]->state == BACKEND_UP;
}

void backend_set_passthrough(struct backend_conn *conn, int on)
{
    conn->passthrough = on;
}

void backend_set_tunnel(struct backend_conn *conn)
{
    conn->tunnel = 1;
}

int backend_stalled(const struct backend_conn *conn)
{
    return conn->inflight_count > 0 &&
           server_pass_now_us() / 1000 - conn->progress_ms > BACKEND_STALL_MS;
}

void backend_unwait(struct backend_conn *conn, struct client *c)
{
    TAILQ_REMOVE(&conn->waiters, c, wait_link);
    c->waiting_on = NULL;
}

void backend_wait(struct backend_conn *conn, struct client *c)
{
    c->waiting_on = conn;
    TAILQ_INSERT_TAIL(&conn->waiters, c, wait_link);
}

void backend_node_quiet(struct backend_node *node)
{
    node->quiet_connects = 1;
}
