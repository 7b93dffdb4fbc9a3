/* backend_int.h - what the files of the backend connections share
 * (backend.c, backend_extra.c): the node and connection structures and
 * the few functions and globals both use. Nothing outside proxy/backend/
 * includes it. */
#ifndef SLUICE_BACKEND_INT_H
#define SLUICE_BACKEND_INT_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "backend.h"
#include "metrics.h"
#include "respframe.h"
#include "request.h"

struct bufferevent;
struct event;
struct event_base;
struct client;
#include "client.h"   /* struct client_list: the clients waiting for a congested conn */

#define BACKEND_HIGH_WATER (4 * 1024 * 1024)
#define BACKEND_LOW_WATER (1024 * 1024)
#define BACKEND_BACKOFF_MIN_MS 50
#define BACKEND_BACKOFF_MAX_MS 2000
/* A node whose port refuses (ECONNREFUSED: the host is up, Redis is not
 * listening yet) is tried again this often, not on the backoff: a Redis
 * that restarts is used within this long of accepting. A refusal costs a
 * SYN and a RST. */
#define BACKEND_REFUSED_RETRY_MS 50
/* Of the refusals in a row, the first and each this many-th one are
 * warnings (about 2 s apart); the others are logged at info. */
#define BACKEND_REFUSED_WARN_EVERY 40
/* A reply still missing more than this is not looked at again until that
 * much more has come (a large bulk arrives in many reads). */
#define BACKEND_FRAME_WAIT (64 * 1024)
/* libevent reads 16 KB a callback by default: large replies want more. */
#define BACKEND_MAX_SINGLE_READ (256 * 1024)

enum backend_state { BACKEND_CONNECTING, BACKEND_UP, BACKEND_DOWN };

/* The kinds of sluice_backend_errors_total. */
enum backend_error_kind {
    BACKEND_ERROR_CONNECT,
    BACKEND_ERROR_CLOSED,
    BACKEND_ERROR_TIMEOUT,
    BACKEND_ERROR_AUTH,
    BACKEND_ERROR_PROTOCOL,
    BACKEND_ERROR_KINDS
};

/* Count an error of KIND for NODE. */
#define BACKEND_COUNT_ERROR(node, kind) ((*(node)->metric_errors[kind])++)
extern const char *const backend_state_names[];

struct backend_conn {
    struct backend_node *node;
    struct bufferevent *bev;
    struct evbuffer *staged;         /* requests of this pass: moved to bev's output once a
                                        pass, as its output runs callbacks on every add */
    struct respframe frame;          /* where the reply at the head of the input ends */
    size_t hold_until;               /* frame nothing until the input has this many */
    struct request_queue inflight;
    int inflight_count;
    uint64_t progress_ms;            /* last reply, or first request sent while idle */
    uint64_t last_reply_us;          /* the pass that read its last reply (service time) */
    enum backend_state state;
    struct client *owner;            /* private connection's client; NULL: pool */
    int oneshot;                     /* a control connection: freed once answered */
    int spare;                       /* a private connection nobody owns yet */
    int scripts;                     /* a shared one for clients' scripts */
    const struct backend_login *login; /* logged in as this user, not sluice's; NULL */
    int login_wait;                  /* sends nothing more until Redis accepted its AUTH */
    int login_refused;               /* its last AUTH was refused (logged once) */
    int auth_failed;                 /* Redis refused sluice's own login (backend_password) */
    int passthrough;
    int tunnel;                      /* a SYNC went: past the replies in flight, raw bytes */
    int awaiting_addr;               /* connecting: its node's host name is being looked up */
    int resp;                        /* protocol it speaks: 2, or 3 after HELLO 3 */
    int busy;                        /* inside its read callback */
    int released;                    /* free once not busy */
    struct event *retry;
    int backoff_ms;
    int refused;                     /* the last connect was refused: retried soon */
    int refused_in_row;              /* refusals since it was last up */
    struct client_list waiters;      /* clients paused while congested */
    TAILQ_ENTRY(backend_conn) write_link; /* in backend_write_list */
    int write_listed;
    int write_off;                   /* write event off: output empty (netio.h) */
    char error[400];                 /* why it is down */
    long long redis_id;              /* CLIENT ID on Redis's side; 0 until known */
    char local_addr[64];             /* "ip:port" as Redis sees this connection */
    TAILQ_ENTRY(backend_conn) node_link; /* in node->conns */
};

TAILQ_HEAD(backend_conn_list, backend_conn);

/* The kinds of shared connection. RESP2 and RESP3 clients never share
 * one; clients' scripts have their own (backend_script_conn). */
enum backend_pool_kind {
    BACKEND_POOL_RESP2,
    BACKEND_POOL_RESP3,
    BACKEND_POOL_SCRIPTS_RESP2,
    BACKEND_POOL_SCRIPTS_RESP3,
    BACKEND_POOL_KINDS
};

struct backend_node {
    char name[280];                  /* "host:port" as configured or learned */
    char host[256];                  /* NAME's host and port */
    int port;
    int host_is_name;                /* a host name, not an IP address: looked up (resolve.h) */
    struct sockaddr_storage addr;
    socklen_t addrlen;               /* 0: a host name not looked up yet */
    struct resolve_lookup *lookup;   /* the lookup in flight, or NULL */
    /* Shared connections by kind (enum backend_pool_kind), pool_size of
     * each: RESP2 ones made with the node, the others when first needed. */
    struct backend_conn **pools[BACKEND_POOL_KINDS];
    int pool_size;
    int private_count;               /* private and one-shot connections */
    int spare_count;                 /* spare connections, not in private_count */
    struct event *spare_ev;          /* replenish the spares (backend_spares_cb) */
    struct backend_conn_list conns;  /* every connection, pool included */
    int retired;                     /* cluster: out of the slot map, shared ones closed */
    int readonly;                    /* cluster: a replica reads go to: READONLY first */
    int quiet_connects;              /* failed connects logged at info (backend_node_quiet) */
    TAILQ_ENTRY(backend_node) link;  /* in backend_nodes */
    /* What Redis says of itself in HELLO, which sluice's HELLO repeats. */
    char redis_version[32];
    char redis_mode[16];
    char redis_role[16];
    int wants_auth;                  /* a pool connection's CLIENT ID met -NOAUTH */
    int auth_refusal_logged;         /* its refusal of sluice's login is logged (once, until
                                        a login succeeds again) */
    /* Its metric series (metrics.h), made with the node, forgotten once it
     * has been out of the topology for BACKEND_FORGET_MS (then they point
     * at metric_void), made again if it comes back. */
    uint64_t *metric_requests;
    struct metrics_hist *metric_duration;
    uint64_t *metric_errors[BACKEND_ERROR_KINDS];
    uint64_t retired_ms;             /* when it left the topology (retired set) */
    int forgotten;                   /* its series are freed (backend_forget_departed) */
    struct {
        uint64_t requests, errors[BACKEND_ERROR_KINDS];
        struct metrics_hist duration;
    } metric_void;                   /* where a forgotten node's counting goes */
    struct backend_login_pool *login_pools;
    long long proto_max_bulk_len;    /* Redis's, learned at connect (backend_limits.c); 0:
                                        not known */
};

TAILQ_HEAD(backend_node_list, backend_node);

/* The script connections of one node logged in as LOGIN, pool_size of
 * each protocol, made on first use (backend_login_script_conn). */
struct backend_login_pool {
    const struct backend_login *login;
    struct backend_conn **conns[2];  /* RESP2, RESP3 */
    struct backend_login_pool *next;
};

/* Connections with requests this loop pass added: backend_write_now. */

extern struct event_base *backend_base;
extern const struct config *backend_cfg;
extern struct backend_node_list backend_nodes;
extern int backend_cluster_mode;
extern int backend_keep_bytes;       /* cluster or Sentinel: requests keep their bytes */

/* backend.c */
struct backend_conn *backend_conn_new(struct backend_node *node, struct client *owner);
/* The log lines of a connection down (a pool connection: lost, or a
 * connect that failed, and when it tries again) and of a login Redis
 * refused ("backend NAME" HOW WHY), at their levels (backend_log.c). */
void backend_log_down(const struct backend_conn *conn, const char *why);
void backend_log_refusal(const struct backend_conn *conn, const char *how, const char *why);
void backend_connect(struct backend_conn *conn);
void backend_conn_down(struct backend_conn *conn, const char *why);
void backend_conn_release(struct backend_conn *conn);
void backend_spares_refill(struct backend_node *node);
struct backend_node *backend_node_new(const char *hostport, char *err, size_t errlen);
void backend_node_metrics(struct backend_node *node);
void backend_close_if_retired(struct backend_conn *conn);
void backend_conn_free(struct backend_conn *conn);
int backend_retired_closable(const struct backend_conn *conn);
/* CONN says READONLY (cluster mode: a replica reads go to). */
void backend_send_readonly(struct backend_conn *conn);

#endif
