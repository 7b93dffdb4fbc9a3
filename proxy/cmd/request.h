/* request.h - one client command on its way through sluice.
 *
 * A request sits in two FIFO queues at once: its client's queue (replies go
 * back in this order) and, once sent, its backend connection's in-flight
 * queue (replies come back in this order). Arguments are offsets into the
 * request's raw RESP bytes, which live at the head of the client's input
 * buffer until they are moved to a backend (or into req->raw when the
 * request must wait). */
#ifndef SLUICE_REQUEST_H
#define SLUICE_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "respframe.h"
#include "sv.h"

struct evbuffer;
struct client;
struct backend_conn;
struct backend_node;
struct command;
struct request;

/* Called with the complete reply to an internal or rewritten request: LEN
 * bytes at the head of SRC, which the callback must remove (move or drain).
 * For a client's request (req->client set) the callback answers it with
 * client_answer or sends it again; for an internal one, or one whose client
 * has gone (req->client NULL), it must free REQ. */
typedef void request_reply_fn(struct request *req, struct evbuffer *src, size_t len, int type);

/* Hands REQ, held back from client C (C blocked meanwhile), to the client
 * code again: answered with the error ERROR, or, when ERROR is NULL,
 * checked and dispatched (client_release_held). Lower layers that hold a
 * client's request get it from their owner. */
typedef void request_release_fn(struct client *c, struct request *req, const char *error);

enum request_flag {
    REQ_DONE = 1 << 0,        /* the reply is complete, in req->reply */
    REQ_NOREPLY = 1 << 1,     /* its reply is dropped (CLIENT REPLY OFF/SKIP): Redis still
                                 answers, sluice writes nothing */
    REQ_PASSTHROUGH = 1 << 2, /* enters pub/sub or MONITOR: replies stream unpaired */
    REQ_PRIVATE = 1 << 3,     /* needs the client's own backend connection */
    REQ_LOCAL = 1 << 4,       /* answered by sluice itself */
    REQ_RESET = 1 << 5,       /* on success, reset the client's name and user */
    REQ_QUEUED = 1 << 6,      /* in its client's reply queue */
    REQ_UNPAIRED = 1 << 7,    /* sent on a connection whose replies stream unpaired
                                 (pub/sub, MONITOR): nothing waits for a reply */
    REQ_DEFERRED = 1 << 9,    /* answered by sluice once every earlier reply is in, since
                                 they may change what it reads (CLIENT GETNAME after EXEC) */
    REQ_IDS_SOUGHT = 1 << 10, /* names clients whose Redis ids were looked up for it */
    REQ_FENCED = 1 << 8,      /* answered by sluice in pub/sub or MONITOR: its reply waits
                                 for its fence to come back from Redis (client.c) */
    REQ_PROTECTED = 1 << 11,  /* DEBUG, MODULE LOAD...: only from a local client */
    REQ_PUSHES = 1 << 12,     /* RESP3 (un)subscribe: answered by pushes, not a reply;
                                 done after pushes_left of them (client_on_push) */
    REQ_DETACHED = 1 << 13,   /* cluster: waits to be sent again (TRYAGAIN, node down) or for
                                 its parts; a closing client clears req->client, not frees it */
    REQ_TUNNEL = 1 << 14,     /* SYNC/PSYNC: once sent, the client's connection is a byte
                                 tunnel to its private backend connection (client.c) */
    REQ_PAUSE_HELD = 1 << 15, /* sent on a one-shot connection because a CLIENT PAUSE holds
                                 it: if its client goes, that connection closes */
    REQ_KEPT = 1 << 16,       /* cluster: a copy of its raw_len bytes is in req->kept (sent
                                 again from there after a redirection) */
    REQ_REPLY_KEPT = 1 << 17, /* its complete reply, kept_reply_len bytes, is in req->kept
                                 (not req->reply): a small one that waits for earlier ones */
    REQ_SPLIT = 1 << 18,      /* cluster: runs in parts (cluster_split.c); counts as one in
                                 flight for its client until client_answer */
    REQ_WAIT_BLIND = 1 << 19, /* WAIT whose connection could not take the client's replication
                                 offset (client_wait_offset): answered with an error */
    REQ_LOGIN_WAIT = 1 << 20, /* AUTH to a Redis that wants a login (auth_redis_login_needed):
                                 its client frames nothing more until the reply */
    REQ_TRACKING_ON = 1 << 21,  /* cluster: CLIENT TRACKING ON; an error clears CLIENT_TRACKING */
    REQ_TRACKING_OFF = 1 << 22, /* cluster: CLIENT TRACKING OFF; success clears it */
    REQ_IN_MULTI = 1 << 23,     /* sent inside MULTI: Redis queues it (or flags the
                                   transaction with its error) */
    REQ_UNWRITTEN = 1 << 24,    /* its connection went down before all of its bytes reached
                                   the socket: Redis cannot have run it (backend.c) */
    REQ_RERUNNABLE = 1 << 25,   /* sluice's own request that only reads: it may be sent again
                                   after its connection failed (cluster_send_own) */
    REQ_FRAMES_AFTER = 1 << 26, /* answered by sluice at its turn; its client frames nothing
                                   more until it has run (CLIENT REPLY; HELLO in RESP2
                                   pub/sub, which may end the streaming) */
    REQ_FAILED = 1 << 27,     /* its reply is an error (counted as failed when queued) */
    REQ_REJECTED = 1 << 28,   /* refused before it ran (counted as rejected, not failed) */
    REQ_HOLDS_INPUT = 1 << 29, /* a blocking command (BLPOP...) when users are sluice's: its
                                  client frames nothing more until its reply, so what
                                  follows passes the gate when Redis would run it, after
                                  a reload that came meanwhile (client_on_reply) */
    REQ_WAITS = 1u << 30,      /* it may wait on purpose (LOCK ... WAIT): its time is a
                                  blocking command's (stats_command_done) */
};

struct req_arg {
    size_t off;                    /* from the start of the request's bytes */
    size_t len;
};

#define REQ_ARGS_INLINE 6

/* Cluster mode keeps a sent request's bytes for a redirection: up to this
 * many in the request itself (a GET or a small SET: no allocation). A reply
 * that must wait for earlier ones is kept there too when it fits. */
#define REQ_KEPT_MAX 96

/* A small request's bytes, as the slow log keeps them, fit in the request
 * itself (GET key, SET key value): one copy, no allocation. */
#define REQ_SLOW_INLINE 128

struct request {
    TAILQ_ENTRY(request) client_link;
    TAILQ_ENTRY(request) conn_link;
    struct client *client;         /* NULL: internal request, or its client is gone */
    struct backend_conn *conn;     /* set while awaiting a backend reply */
    const struct command *cmd;     /* NULL for commands sluice does not know */
    unsigned flags;                /* enum request_flag */
    int place;                     /* enum placement_kind, decided when framed */
    int slot;                      /* cluster: its keys' hash slot, or -1 (none) */
    struct backend_node *node;     /* cluster: the node it goes to whatever its slot (NULL:
                                      by its slot); CLIENT UNBLOCK: its target's */
    int redirects;                 /* cluster: redirections followed so far */
    const struct backend_login *login; /* a script run as its user's Redis user (users_in_redis):
                                      sent again, it goes on that login's connections */
    uint64_t own_client_id;        /* cluster, sluice's own request: the client whose shared
                                      connections it goes on (0: sluice's), */
    int own_resp;                  /* and their protocol (0: RESP2) */
    uint64_t retry_since_ms;       /* cluster: first failed for want of a node (0: never) */
    int pushes_left;               /* REQ_PUSHES: confirmations still to come; -1: until
                                      none of its kind is left (UNSUBSCRIBE, no argument) */
    int argc;
    int args_cap;
    struct req_arg *args;          /* args_inline or heap */
    struct req_arg args_inline[REQ_ARGS_INLINE];
    size_t raw_len;                /* bytes of the RESP request */
    struct evbuffer *raw;          /* the bytes, when the request owns them */
    struct evbuffer *reply;        /* complete reply waiting for earlier ones */
    request_reply_fn *on_reply;    /* NULL: the reply goes to the client as is */
    void *ctx;                     /* for on_reply */
    void (*ctx_free)(struct request *req); /* releases ctx when REQ is freed */
    char *ok_user;                 /* AUTH/HELLO: user to record if Redis says OK */
    char *ok_name;                 /* HELLO SETNAME: name to record if Redis says OK */
    int ok_db;                     /* SELECT: database + 1 to record if Redis says OK */
    uint64_t pauses_before;        /* CLIENT UNPAUSE: pauses noted when it came (pause.c) */
    size_t kept_reply_len;         /* REQ_REPLY_KEPT: the reply's length */
    int stat_row;                  /* its row of the per-command stats (stats_command_row) */
    uint64_t framed_us;            /* a client's: the loop pass that framed it
                                      (server_pass_now_us); 0: not timed, or done
                                      (client_note_done) */
    uint64_t sent_us;              /* the pass that last handed it to a backend connection */
    uint32_t auth_gen;             /* a client's: auth_users_generation when framed (0:
                                      sluice's own); another at its send: the gate
                                      judges it again (client_send) */
    uint64_t redis_us;             /* µs from sent to its reply read, summed over its sends */
    uint64_t service_us;           /* the same from when Redis could start on it: the later of
                                      its send and the reply before it on its connection */
    unsigned char *slow_args;      /* its arguments as the slow log keeps them (slowlog.c):
                                      slow_inline or the heap; NULL: not kept */
    uint32_t slow_len;             /* bytes at slow_args */
    int slow_raw;                  /* slow_args is its RESP bytes, else packed (slowlog.c) */
    void *slots;                   /* the concurrency slots it holds or waits for (access/
                                      throttle.c): given back when it leaves Redis, and
                                      by request_free at the latest */
    /* From here on request_new leaves the bytes as they are. */
    char kept[REQ_KEPT_MAX];       /* REQ_KEPT: its bytes; REQ_REPLY_KEPT: its reply */
    unsigned char slow_inline[REQ_SLOW_INLINE]; /* slow_args of a small request */
};

TAILQ_HEAD(request_queue, request);

struct request *request_new(void);
/* Free REQ and what it owns. It must be out of every queue. Its slots
 * (req->slots) go back through the function request_set_slots_drop gave. */
void request_free(struct request *req);

/* How request_free gives a request's concurrency slots back: set once at
 * start by their owner (throttle_init), which sets req->slots to NULL. */
typedef void request_slots_fn(struct request *req);
void request_set_slots_drop(request_slots_fn *drop);

/* Record argument N at OFF/LEN, growing the argument array. -1 on OOM. */
int request_add_arg(struct request *req, size_t off, size_t len);

#define REQ_ARGV_STACK 32

/* A request's arguments as views (argv[0..req->argc)), and what backs the
 * views that could not point into the request's bytes. */
struct req_argv {
    struct sv *argv;               /* stack, or the heap for many arguments */
    struct sv stack[REQ_ARGV_STACK];
    char **copies;                 /* per argument: its copy, or NULL */
    int argc;
};

/* Views of REQ's arguments over SRC, whose first raw_len bytes are the
 * request. A request of up to 64 KB is made contiguous in SRC (pulled up).
 * A larger one is never copied whole: an argument lying in one chain of SRC
 * is viewed where it lies; one spanning chains is copied, except one over
 * 64 KB that sluice never reads: then its view is {NULL, len}. sluice reads
 * the command name, argv[1] (subcommand or first key), every key, and every
 * argument of a command the table does not know (LOCK, PROXY...), of a
 * connection command (AUTH, HELLO, CLIENT SETNAME), of a pub/sub command
 * (the gate checks its channels) and of SORT (its BY and GET patterns); so
 * a NULL view is only
 * ever a data value, which sluice forwards and compares with nothing
 * (sv_ieq and numkeys parsing check the length first). The views stay valid
 * while SRC's bytes stay. Returns 0, or -1 when out of memory. Release
 * with request_argv_close, either way. */
int request_argv_open(struct req_argv *a, const struct request *req, struct evbuffer *src);
void request_argv_close(struct req_argv *a);

/* A copy of REQ's command (its cmd, bytes and arguments) that owns its
 * bytes: taken from the head of SRC, or from req->raw when SRC is NULL.
 * NULL when out of memory. */
struct request *request_copy(const struct request *req, struct evbuffer *src);

/* REQ takes FROM's bytes and arguments (its own are dropped); FROM keeps
 * none. */
void request_take_bytes(struct request *req, struct request *from);

/* Make the request own its bytes: move raw_len bytes from the head of SRC
 * into req->raw. */
int request_take_raw(struct request *req, struct evbuffer *src);

/* Move REQ's bytes (the raw_len bytes at the head of SRC) to OUT, keeping
 * a copy with REQ: in req->kept when they fit, else in req->raw. */
void request_move_kept(struct request *req, struct evbuffer *src, struct evbuffer *out);

/* Whether REQ holds its bytes (req->raw or req->kept): it can be sent
 * (again) without its client's input. */
int request_has_bytes(const struct request *req);

/* Append a copy of the bytes REQ holds to OUT (REQ keeps them). */
void request_copy_bytes(const struct request *req, struct evbuffer *out);

/* Make OUT (taken) REQ's bytes; raw_len becomes its length. REQ's old bytes
 * are dropped: its own, or the raw_len bytes at the head of *SRC when it did
 * not own them. *SRC is set to NULL either way: the caller takes nothing
 * more from it for REQ. */
void request_replace_raw(struct request *req, struct evbuffer *out, struct evbuffer **src);

/* The start of an on_reply hook that answers REQ's client from Redis's
 * reply (LEN bytes at the head of SRC). When the client has gone: drops
 * those bytes, frees REQ, returns NULL (the hook just returns). Else
 * unhooks REQ (on_reply = NULL), makes sure req->reply exists, and returns
 * the client; the reply's bytes are still in SRC for the hook. */
struct client *request_hook_client(struct request *req, struct evbuffer *src, size_t len);

#endif
