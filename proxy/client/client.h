/* client.h - one application connection to sluice. */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "reqparse.h"
#include "request.h"
#include "topk.h"

struct backend_conn;
struct event_base;
struct ssl_st;
struct config;
struct lock_client;
struct limiter_client;
struct throttle_hold;
struct user;
struct command;
struct multi_locals;
struct request;
struct sv;

enum client_flag {
    CLIENT_CLOSE_AFTER_REPLY = 1 << 0, /* answer what is pending, then close */
    CLIENT_PASSTHROUGH = 1 << 1,       /* pub/sub or MONITOR: backend bytes stream through */
    CLIENT_PAUSED = 1 << 2,            /* not reading: a backend is congested */
    CLIENT_REPLY_OFF = 1 << 3,         /* CLIENT REPLY OFF */
    CLIENT_REPLY_SKIP = 1 << 4,        /* CLIENT REPLY SKIP: the next command gets none */
    CLIENT_BLOCKED = 1 << 5,           /* a LOCK, or a request a rule holds back, is pending:
                                          read no further commands */
    CLIENT_MONITOR = 1 << 6,           /* MONITOR: every status reply is a monitor line */
    CLIENT_IN_MULTI = 1 << 7,          /* MULTI sent, no EXEC/DISCARD/RESET yet */
    CLIENT_MULTI_DIRTY = 1 << 8,       /* a rule refused a command inside MULTI */
    CLIENT_OVER_LIMIT = 1 << 9,        /* over client_max_inflight or _pending_bytes:
                                          not read until its replies drain */
    CLIENT_MULTI_DEFERRED = 1 << 10,   /* cluster: MULTI answered by sluice, sent with the
                                          first command (on its key's node) */
    CLIENT_TUNNEL = 1 << 11,           /* sent SYNC/PSYNC: bytes pass unparsed both ways
                                          between it and its private connection */
    CLIENT_TUNNEL_HELD = 1 << 12,      /* its output is full: its private connection
                                          is not read until it drains */
    CLIENT_SESSION = 1 << 13,          /* its private connection holds state (more than
                                          answered blocking commands): it stays put */
    CLIENT_TUNNEL_FED = 1 << 14,       /* its tunnel has passed bytes from Redis */
    CLIENT_WATCHING = 1 << 15,         /* WATCH sent on its private connection, not yet
                                          ended by EXEC, DISCARD, UNWATCH or RESET */
    CLIENT_TRACKING = 1 << 16,         /* cluster: CLIENT TRACKING ON sent and not refused:
                                          invalidations come from one node only */
    CLIENT_DRAINING = 1 << 17,         /* shutdown or hand-over: answered up to a request
                                          boundary, then closed between replies */
    CLIENT_MULTI_LOST = 1 << 18,       /* Sentinel: its transaction was on a primary that
                                          failed over: EXEC gets -EXECABORT */
    CLIENT_HANDOVER_OUT = 1 << 19,     /* old sluice: its connection was passed to the new
                                          one (client_handover.c): not read, not drained;
                                          messages go on until the new one subscribed */
    CLIENT_HANDOVER_IN = 1 << 20,      /* new sluice: taken from the old one, subscribing:
                                          not read, its output held until the old one let go */
    CLIENT_WAITS_REPLICA = 1 << 21,    /* Sentinel, read_from = replica: its stalled read
                                          waits for a healthy replica (client_replica_wait) */
};

struct client {
    uint64_t id;
    int fd;                             /* its socket, closed by client_close */
    struct evbuffer *input;             /* bytes read, not yet framed */
    struct evbuffer *output;            /* replies not yet written */
    struct event *read_ev;              /* the socket is readable (netio_read) */
    struct event *write_ev;             /* the socket takes data again (netio_write) */
    int eof_seen;                       /* its socket met end of file */
    int read_on;                        /* read_ev is added */
    int write_on;                       /* write_ev is added: output did not all go */
    struct ssl_st *ssl;                 /* came in on a tls_listen address; NULL: plain */
    int tls_handshaking;                /* its TLS handshake is not done: nothing read yet */
    int tls_read_wants_write;           /* a TLS read waits for the socket to be writable */
    int tls_write_wants_read;           /* a TLS write waits for the socket to be readable */
    uint64_t tls_deadline_ms;           /* closed if the handshake is not done by then */
    struct reqparse parser;
    struct request_queue requests;      /* every request not yet answered, in order */
    struct backend_conn *private_conn;  /* own backend connection, once stateful */
    uint64_t redirect_id;               /* CLIENT TRACKING ... REDIRECT's sluice id, */
    long long redirect_redis_id;        /* and the Redis id sent for it (clientid.c) */
    struct backend_conn *inflight_conn; /* where its sent requests are */
    int inflight;                       /* requests sent and not yet answered */
    int split_parts;                    /* cluster: parts of its split requests (one each in
                                           inflight) sent and not yet answered */
    uint64_t inflight_map_version;      /* cluster: the slot map's version they were sent under */
    int fences;                         /* fences sent, not yet back (client_fence) */
    int resets_unanswered;              /* RESETs sent on a connection streaming unpaired
                                           whose +RESET has not come: only then is a
                                           +RESET the session's end (a script can
                                           return that status too) */
    long long subscriptions;            /* channels + patterns, as Redis last counted */
    long long shard_subscriptions;      /* shard channels, likewise */
    int multi_queued;                   /* commands sent that Redis queues in this MULTI */
    int multi_slot;                     /* cluster: the slot of this MULTI's keys so far
                                           (CLUSTER_SLOT_NONE before its first key) */
    struct multi_locals *multi;         /* sluice's own commands queued in it (multi.c) */
    struct evbuffer *multi_held;        /* cluster: keyless commands of a deferred MULTI,
                                           sent behind it on its first key's node; */
    size_t *multi_held_lens;            /* the length of each */
    int multi_held_count;
    struct request *stalled;            /* must be sent once inflight is 0 */
    struct backend_conn *waiting_on;    /* congested connection it waits for */
    unsigned flags;                     /* enum client_flag */
    int busy;                           /* > 0 inside its own callbacks */
    int in_input;                       /* inside client_process_input */
    int closing;                        /* close when no longer busy */
    size_t held_reply_bytes;            /* replies waiting behind earlier ones, and the
                                           bytes of requests waiting for their turn */
    int deferred;                       /* requests sluice answers itself, waiting for
                                           their turn (REQ_DEFERRED): they count against
                                           client_max_inflight */
    uint64_t last_active_ms;
    struct sockaddr_storage addr;
    char addr_text[64];                 /* "ip:port" */
    char ip_text[INET6_ADDRSTRLEN];     /* "ip", what rules match */
    char *name;                         /* CLIENT SETNAME, NULL when none */
    char *user;                         /* the user it runs as (rules match it):
                                           "default" until a login */
    int resp;                           /* protocol it negotiated with HELLO: 2 or 3 */
    struct client_subs {                /* RESP3: its subscriptions, as the confirmations
                                           count them (client_on_push) */
        long long total;                /* channels + patterns: the count Redis sends */
        long long channels, patterns, shards;
    } subs;
    const struct user *auth_user;       /* its user in the current user set (auth.c) */
    unsigned char authenticated;        /* logged in with AUTH or HELLO AUTH */
    unsigned char auth_checks;          /* its requests must pass auth_admit */
    unsigned char local_peer;           /* connected from 127.0.0.1 or ::1, as Redis's
                                           "local" for DEBUG and MODULE */
    int db;                             /* database it selected (CLIENT LIST) */
    const struct command *last_cmd;     /* its latest command (CLIENT LIST's cmd=) */
    uint64_t created_ms;                /* when it connected (CLIENT LIST's age=) */
    uint64_t wrote_ms;                  /* when it last sent a command that may write:
                                           its reads stay on the primary a while */
    struct lock_client *locks;          /* locks it holds (lockheld.c owns this) */
    struct limiter_client *limiter;     /* its rules and buckets (rules/limiter.c) */
    struct throttle_hold *throttle_hold; /* a request held by a rule (throttle.c) */
    unsigned identity_changes;          /* its user or name changed this often
                                           (throttle_client_changed counts) */
    struct topk_ref top_refs[4];        /* its places in PROXY TOP's clients, users, names
                                           and ips sketches (top.c), */
    unsigned top_refs_changes;          /* taken at this identity_changes */
    uint64_t top_pending;               /* requests not yet in those sketches (top.c) */
    uint64_t *user_commands;            /* sluice_user_commands_total of its user */
    unsigned user_commands_changes;     /* taken at identity_changes */
    uint64_t bytes_in, bytes_out;       /* read from it, written to it (log_connections) */
    uint64_t commands;                  /* requests framed */
    const char *close_reason;           /* the first cause of its close (a literal) */
    TAILQ_ENTRY(client) link;           /* in the list of all clients */
    TAILQ_ENTRY(client) wait_link;      /* in waiting_on's list */
    struct client_sub_names *sub_names; /* Sentinel: what it subscribed to (client_failover.c) */
    int resubscribe_pending;            /* Sentinel: to be subscribed again on the primary */
    struct client_handover *handover;   /* a hand-over of its connection (client_handover.c) */
    TAILQ_ENTRY(client) write_link;     /* in the list client_write_now writes */
    int write_listed;                   /* in that list */
};

TAILQ_HEAD(client_list, client);

/* Set up client handling for the whole process. */
void client_module_init(struct event_base *base, const struct config *cfg);
/* The config given to client_module_init was reloaded: take the values
 * the clients keep copies of (proto_max_bulk_len, proto_max_multibulk_len);
 * the others are read where used. */
void client_config_changed(void);

/* Verbs sluice adds (LOCK, UNLOCK, RENEW), from the layer above: WANTS
 * says whether a request that sluice answers itself is one of theirs,
 * HANDLE answers it (client_answer, or client_forward to Redis), and
 * CLIENT_CLOSED lets go of what they hold for a client that leaves. */
struct client_verbs {
    int (*wants)(const struct request *req, int argc, const struct sv *argv);
    void (*handle)(struct client *c, struct request *req, int argc, const struct sv *argv);
    void (*client_closed)(struct client *c);
};
void client_set_verbs(const struct client_verbs *verbs);

/* Take over an accepted socket FD (speaking TLS when TLS is set: the
 * handshake comes first). Closes it when it cannot be served. */
void client_accept(int fd, const struct sockaddr *addr, socklen_t addrlen, int tls);

/* A backend reply for REQ (whose client is set): LEN bytes at the head of
 * SRC, which this moves to the client or keeps with REQ. */
void client_on_reply(struct request *req, struct evbuffer *src, size_t len, int type);

/* Send REQ, already in C's queue, whose bytes are in req->raw: on the
 * connection C's requests use, at once or once earlier replies are in. */
void client_forward(struct client *c, struct request *req);

/* Where to write the reply to REQ (in C's queue), before client_answer:
 * C's output when REQ is first in the queue (nothing to keep order with),
 * else REQ's own reply buffer, made here. */
struct evbuffer *client_reply_buffer(struct client *c, struct request *req);

/* REQ (in C's queue) has its reply in req->reply: write it in order.
 * Returns -1 when C was closed meanwhile (over its output limit). */
int client_answer(struct client *c, struct request *req);

/* REQ (in C's queue, its command's bytes in req->raw) is one sluice
 * answers itself: its reply is built by local.c at its turn, when every
 * earlier reply is written to C's output and that output is below
 * client_max_pending_bytes; until then it counts against C's limits.
 * Returns -1 when C was closed meanwhile. */
int client_answer_at_turn(struct client *c, struct request *req);

/* A reply sluice is building for C has passed client_output_buffer_limit
 * (BYTES so far): C is closed as client_check_output_limit closes it
 * (logged, counted), at the end of its callbacks; what was built is never
 * written. */
void client_output_overflow(struct client *c, size_t bytes);

/* Cluster mode: DELTA more (or fewer) parts of C's split requests are in
 * flight (cluster_split.c). They count against client_max_inflight, as
 * the requests they stand for: past it, C is not read until they drain. */
void client_note_parts(struct client *c, int delta);

/* REQ, held back by the rules (client blocked meanwhile), may go on:
 * answered with the error ERROR, or, when ERROR is NULL, checked by the
 * gate again (auth.c: a reload may have narrowed C's user) and
 * dispatched. Then C reads on. */
void client_release_held(struct client *c, struct request *req, const char *error);

/* Stop or resume reading commands of C while a LOCK (or a request held by
 * a rule) waits. */
void client_block(struct client *c);
void client_unblock(struct client *c);

/* Write the replies this loop pass produced, one writev per client (see
 * netio.h). Called by the loop after each pass. */
void client_write_now(void);

/* A pub/sub or MONITOR message for C: LEN bytes at the head of SRC. */
void client_on_passthrough(struct client *c, struct evbuffer *src, size_t len);

/* A RESP3 push for C (pub/sub message or confirmation, invalidation): LEN
 * bytes at the head of SRC, which this moves to C as they come. HEAD is the
 * request first in line on C's private connection (or NULL). Returns 1
 * when the push was the last one HEAD (REQ_PUSHES) waited for: then the
 * caller completes HEAD with an empty reply. */
int client_on_push(struct client *c, struct request *head, struct evbuffer *src, size_t len);

/* Whether C, a RESP3 client, is (or may be about to be) subscribed:
 * confirmations counted, or a (un)subscribe still waiting for them. */
int client_subscribed_resp3(const struct client *c);

/* C's private connection, a tunnel (CLIENT_TUNNEL), brought the bytes at
 * SRC: all of them go to C as they are. */
void client_on_tunnel(struct client *c, struct evbuffer *src);

/* C's private backend connection is gone: pending replies are errors
 * already; C is closed once they are written, since its session is lost. */
void client_on_private_lost(struct client *c);

/* The congested connection C waited for has drained: read again. */
void client_resume(struct client *c);

/* Hand-over restart (client_handover.c, docs/operations.md "Restart and
 * upgrade"). Old sluice, once the new one took over with a channel open
 * (handpass.h): pass every subscriber it can to the new one; returns how
 * many. Those are then not drained: each stays until the new one has
 * subscribed it again. */
int client_handover_offer(void);
/* Both sides: what the other said about the client it knew as ID. */
void client_handover_word(char word, uint64_t id);
/* New sluice: the old one passed connection FD (its client ID) with BLOB. */
void client_handover_adopt(uint64_t id, int fd, const char *blob, size_t len);
/* Both sides: the channel ended; every client still between the two goes
 * on as if there had been none (old: drained; new: closed). */
void client_handover_ended(void);

/* The connected client with sluice id ID, or NULL. */
struct client *client_find(uint64_t id);

/* Every connected client, oldest first: pass NULL for the first. */
struct client *client_next(struct client *prev);

/* Close C as Redis closes a client CLIENT KILL names: at once, or, when it
 * is CURRENT (the client that asked), once its replies are written. */
void client_kill(struct client *c, struct client *current);

/* Number of connected clients; and stop (shutdown, hand-over): each
 * client is answered up to a request boundary, what it began is read to
 * its end, then it is read no more and closed after its last reply, with
 * an orderly FIN (what it sent after that boundary is dropped unread). */
int client_count(void);
int client_pending_total(void);
void client_shutdown_all(void);
/* Free every client at exit. */
void client_free_all(void);

/* Give C its own backend connection now, speaking C's protocol, when it
 * has none: another client's CLIENT TRACKING ... REDIRECT names it, and
 * Redis sends invalidations to a connection. Returns it, or NULL at
 * backend_max_connections. */
struct backend_conn *client_private_now(struct client *c);

/* The users file was reloaded: every client takes its user's new entry,
 * and those whose user is gone are closed (auth_rebind). */
void client_users_changed(void);

/* Periodic work: idle timeouts. */
void client_cron(uint64_t now_ms);

#endif
