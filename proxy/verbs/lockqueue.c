/* lockqueue.c - owns the waiters of each lock key on this sluice, first
 * come first served: a LOCK ... WAIT that found its key taken joins the
 * key's queue; only the head polls, and a release wakes it. It keeps the
 * order only: what waking means is lock.c's (lockqueue_set_waker).
 *
 *   waiters on k:  [op1 (head, retries)] [op2] [op3]   woken by an UNLOCK
 */
#include "lock_int.h"

#include <stdlib.h>
#include <string.h>

#define LOCK_QUEUE_BUCKETS 1024

/* The waiters on one key, first come first served. */
struct lock_queue {
    char *key;
    size_t keylen;
    TAILQ_HEAD(, lock_op) ops;
    struct lock_queue *next;  /* hash chain */
};

static struct lock_queue *lockqueue_buckets[LOCK_QUEUE_BUCKETS];
static lockqueue_wake_fn *lockqueue_waker;   /* from lockqueue_set_waker */

static unsigned lockqueue_hash(const char *key, size_t len)
{
    unsigned h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 16777619u;
    return h % LOCK_QUEUE_BUCKETS;
}

/* KEY's queue, or NULL; one made (empty) when CREATE and there is none. */
static struct lock_queue *lockqueue_find(const char *key, size_t len, int create)
{
    struct lock_queue **slot = &lockqueue_buckets[lockqueue_hash(key, len)], *q;

    for (q = *slot; q != NULL; q = q->next) {
        if (q->keylen == len && memcmp(q->key, key, len) == 0)
            return q;
    }
    if (!create)
        return NULL;
    q = calloc(1, sizeof(*q));
    q->key = malloc(len + 1);
    memcpy(q->key, key, len);
    q->key[len] = '\0';
    q->keylen = len;
    TAILQ_INIT(&q->ops);
    q->next = *slot;
    *slot = q;
    return q;
}

static void lockqueue_drop_if_empty(struct lock_queue *q)
{
    struct lock_queue **p = &lockqueue_buckets[lockqueue_hash(q->key, q->keylen)];

    if (!TAILQ_EMPTY(&q->ops))
        return;
    while (*p != q)
        p = &(*p)->next;
    *p = q->next;
    free(q->key);
    free(q);
}

void lockqueue_set_waker(lockqueue_wake_fn *fn)
{
    lockqueue_waker = fn;
}

int lockqueue_has_waiters(const char *key, size_t len)
{
    struct lock_queue *q = lockqueue_find(key, len, 0);

    return q != NULL && !TAILQ_EMPTY(&q->ops);
}

void lockqueue_join(struct lock_op *op)
{
    op->queue = lockqueue_find(op->key, op->keylen, 1);
    TAILQ_INSERT_TAIL(&op->queue->ops, op, queue_link);
}

int lockqueue_is_head(const struct lock_op *op)
{
    return TAILQ_FIRST(&op->queue->ops) == op;
}

void lockqueue_wake(const char *key, size_t len)
{
    struct lock_queue *q = lockqueue_find(key, len, 0);
    struct lock_op *head = q != NULL ? TAILQ_FIRST(&q->ops) : NULL;

    if (head != NULL)
        lockqueue_waker(head);
}

void lockqueue_leave(struct lock_op *op)
{
    struct lock_queue *q = op->queue;
    int was_head;

    if (q == NULL)
        return;
    was_head = TAILQ_FIRST(&q->ops) == op;
    TAILQ_REMOVE(&q->ops, op, queue_link);
    op->queue = NULL;
    if (was_head && !TAILQ_EMPTY(&q->ops))
        lockqueue_wake(q->key, q->keylen);
    else
        lockqueue_drop_if_empty(q);
}
