/* lock_int.h - what the files of the lock verbs share: one operation
 * (struct lock_op) and a lock a connection holds (struct lock_held), and
 * the functions each lower file offers the ones above it. They call down
 * this order: lock.c (the verbs) -> lockack.c (replica acknowledgements)
 * -> lockheld.c (held locks, KEEP, giving back) -> lockqueue.c (waiters);
 * a lower one reaches an upper one only through a function it was handed.
 * Nothing outside proxy/verbs/ includes it. */
#ifndef SLUICE_LOCK_INT_H
#define SLUICE_LOCK_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct client;
struct event;
struct evbuffer;
struct lock_ack;
struct lock_keep;
struct lock_queue;
struct request;
struct script;

enum lock_verb { LOCK_ACQUIRE, LOCK_RELEASE, LOCK_RENEW };

/* One LOCK, UNLOCK or RENEW of a client, owned by its request (ctx). */
struct lock_op {
    enum lock_verb verb;
    struct request *req;
    char *key;                /* keylen bytes, any bytes */
    size_t keylen;
    char *token;              /* toklen bytes, any bytes */
    size_t toklen;
    int explicit_owner;
    int keep;
    int fence;
    int wait;
    int blocks;               /* it blocked its client: unblock when answered */
    int inflight;             /* its EVALSHA is out */
    int noscript_retried;
    int epoch_retried;        /* sent again once after a fence epoch refusal */
    uint32_t grace_gen;       /* LOCK: its slot's lockgrace_generation when its call went out */
    long long acks;           /* replicas to WAIT for; -1: lock_replica_acks */
    struct lock_ack *ack;     /* set while its script + WAIT are out */
    long long ttl_ms;
    long long wait_ms;
    uint64_t started_us;      /* when it came (lock_wait_seconds) */
    uint64_t deadline_ms;
    int backoff_ms;
    struct event *timer;
    struct lock_queue *queue; /* set while it waits in its key's FIFO */
    TAILQ_ENTRY(lock_op) queue_link;
};

/* A lock a connection took: for UNLOCK without OWNER, KEEP, and release
 * when the connection closes. */
struct lock_held {
    TAILQ_ENTRY(lock_held) link;
    struct client *client;    /* whose it is */
    char *key;                /* both point into text[] */
    size_t keylen;
    char *token;
    size_t toklen;
    int explicit_owner;
    int lost;                 /* KEEP found it lost: UNLOCK / RENEW say NOTOWNER */
    long long fence;          /* its fence, -1 without FENCE */
    long long keep_ttl_ms;
    struct event *keep_timer;
    struct lock_keep *keep;   /* set while KEEP renews it */
    char text[];              /* key, NUL, token, NUL */
};

/* ---- lockqueue.c: the waiters on each key, first come first served ---- */

/* What wakes the head waiter of a key when a release passed through
 * (lock.c's: it tries again now unless its script is out). */
typedef void lockqueue_wake_fn(struct lock_op *head);

/* Register FN once, at lock_init. */
void lockqueue_set_waker(lockqueue_wake_fn *fn);

/* Whether anyone waits for KEY (LEN bytes). */
int lockqueue_has_waiters(const char *key, size_t len);

/* OP joins the end of its key's queue (made when it has none). */
void lockqueue_join(struct lock_op *op);

/* Whether OP is the first waiter of its key's queue. */
int lockqueue_is_head(const struct lock_op *op);

/* OP leaves its key's queue (if in one); the next waiter, now first,
 * is woken at once. */
void lockqueue_leave(struct lock_op *op);

/* The head waiter of KEY (LEN bytes), if any, is woken. */
void lockqueue_wake(const char *key, size_t len);

/* ---- lockheld.c: the locks a connection holds, KEEP, giving back ---- */

/* The scripts sluice sends of its own (KEEP renewals, giving back). At
 * lock_init. */
void lockheld_init(const struct script *release, const struct script *renew);

/* C's record of KEY held with TOKEN (TOKLEN bytes), or with any token when
 * TOKEN is NULL. */
struct lock_held *lockheld_find(struct client *c, const char *key, size_t len,
                                const char *token, size_t toklen);

/* Forget H (its connection no longer holds the lock) and stop its KEEP. */
void lockheld_free(struct lock_held *h);

/* Remember that C holds OP's key with OP's token and FENCE (-1: none);
 * start KEEP renewals if asked. A record of that key found lost goes:
 * the connection holds it again. */
void lockheld_add(struct client *c, const struct lock_op *op, long long fence);

/* Give back the lock KEY holds for TOKEN: one hold (ALL 0) or every one,
 * owner-checked by the release script; a waiter here then tries. */
void lockheld_give_back(const char *key, size_t keylen, const char *token, size_t toklen,
                        int all);

/* Drop every hold of TOKEN on KEY, for a client that is gone. */
void lockheld_release_all(const char *key, size_t keylen, const char *token, size_t toklen);

/* ---- lockack.c: grants and renewals acknowledged by replicas (ACKS) ---- */

/* What came back of a script sent with lockack_send. */
struct lockack_result {
    int granted;              /* the script granted (LOCK) or renewed (RENEW) */
    int enough;               /* WAIT counted at least NEED replicas */
    int refused;              /* the script said -NOREPLICAS */
    int type;                 /* the script's reply type; 0: none came */
    int nvals;                /* its integers (an array reply) */
    const long long *vals;
    long long need;
    const char *text;         /* its reply, first line */
};

/* Answers OP once both replies came (lock.c's). */
typedef void lockack_done_fn(struct lock_op *op, const struct lockack_result *result);

/* Send SCRIPT (OP's script call requiring NEED replicas online; its bytes
 * are used up), and WAIT NEED lock_replica_timeout_ms after it, on a
 * one-shot connection to the lock's primary. A grant too few replicas
 * acknowledged, or that nobody waits for any more, is given back; then
 * DONE answers OP (unless OP went: lockack_orphan). Returns -1, OP and
 * SCRIPT untouched, when there is no connection; else 0, and OP must not
 * be touched after it returns (DONE may have run). */
int lockack_send(struct lock_op *op, long long need, struct evbuffer *script,
                 lockack_done_fn *done);

/* OP of ACK is going: its replies come to nobody (a grant is given back). */
void lockack_orphan(struct lock_ack *ack);

#endif
