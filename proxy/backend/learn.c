/* learn.c - owns the questions to Redis about commands sluice's table does
 * not know, and the clients waiting for their answers. It asks on a shared
 * connection, records each answer in the cache (learned.c, cmd/) and
 * hands waiting requests back to the client code through the ops main.c
 * registers; it never routes anything itself.
 *
 *   FOO.BAR k  -> not in the table, not learned -> client waits
 *              -> MODULE LIST (none loaded: Redis does not know it either)
 *              -> COMMAND INFO foo.bar (once, however many clients ask)
 *              <- flags, key positions (or nil: Redis does not know it)
 *              -> every waiter dispatched again, now with an answer
 */
#include "learn.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "backend.h"
#include "log.h"
#include "pause.h"
#include "request.h"
#include "server.h"

struct learn_waiter {
    struct client *c;
    struct request *req;
    TAILQ_ENTRY(learn_waiter) link;
};

/* A question out about one cache entry (pending while it lives). */
struct learn_question {
    struct learned_entry *e;
    TAILQ_HEAD(, learn_waiter) waiters;
    TAILQ_ENTRY(learn_question) link;
};

static TAILQ_HEAD(, learn_question) learn_questions = TAILQ_HEAD_INITIALIZER(learn_questions);
static const struct learn_client_ops *learn_ops;

void learn_set_client_ops(const struct learn_client_ops *ops)
{
    learn_ops = ops;
}

static struct learn_question *learn_question_of(const struct learned_entry *e)
{
    struct learn_question *q;

    TAILQ_FOREACH(q, &learn_questions, link) {
        if (q->e == e)
            return q;
    }
    return NULL;
}

/* Q is answered (ERROR set when it could not be learned): its entry is
 * settled and every waiter goes on. */
static void learn_settle(struct learn_question *q, const char *error)
{
    TAILQ_HEAD(, learn_waiter) waiters = TAILQ_HEAD_INITIALIZER(waiters);
    struct learned_entry *e = q->e;
    struct learn_waiter *w;

    e->pending = 0;
    e->learned_ms = server_now_ms();
    /* The waiters go on only once E is settled: dispatching them may ask
     * again, or make room by dropping E. */
    TAILQ_CONCAT(&waiters, &q->waiters, link);
    TAILQ_REMOVE(&learn_questions, q, link);
    free(q);
    if (error != NULL)
        learned_free(e);   /* not learned: the next request asks again */
    while ((w = TAILQ_FIRST(&waiters)) != NULL) {
        TAILQ_REMOVE(&waiters, w, link);
        struct client *c = w->c;
        struct request *held = w->req;
        free(w);
        learn_ops->release_held(c, held, error);
    }
}

/* The answer to COMMAND INFO for the question in CTX: learn it, then let
 * every waiter go on. */
static void learn_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct learn_question *q = req->ctx;
    struct learned_entry *e = q->e;
    char error[160] = {0};

    req->ctx = NULL;
    if (type == REPLY_ERROR) {
        evbuffer_copyout(src, error, len < sizeof(error) - 1 ? len : sizeof(error) - 1);
        error[strcspn(error, "\r\n")] = '\0';
        log_info("could not learn command '%s' from the backend: %s", e->cmd.name, error + 1);
    } else {
        learned_parse(e, src, len);
        log_debug("learned command '%s': known=%d flags=%#x", e->cmd.name, e->cmd.known,
                  (unsigned)e->cmd.flags);
    }
    evbuffer_drain(src, len);
    request_free(req);
    learn_settle(q, error[0] ? error + 1 : NULL);
}

/* Send COMMAND INFO for Q's entry. Returns -1 when no backend takes it. */
static int learn_ask_command(struct learn_question *q)
{
    struct evbuffer *buf = evbuffer_new();
    int rc;

    evbuffer_add_printf(buf, "*3\r\n$7\r\nCOMMAND\r\n$4\r\nINFO\r\n$%zu\r\n", q->e->cmd.len);
    evbuffer_add(buf, q->e->cmd.name, q->e->cmd.len);
    evbuffer_add(buf, "\r\n", 2);
    rc = backend_send_internal(pause_internal_conn(backend_default_node(), 0, 0), buf,
                               learn_on_reply, q, NULL);
    evbuffer_free(buf);
    return rc;
}

/* The answer to MODULE LIST for the question in CTX: with no module
 * loaded, a name outside sluice's table is unknown to Redis too; else (or
 * when sluice may not ask: NOPERM) COMMAND INFO says what it is. A name
 * with a '|' is never a command Redis runs, though COMMAND INFO describes
 * "config|set" (a subcommand): unknown too. */
static void learn_on_modules(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct learn_question *q = req->ctx;
    struct learned_entry *e = q->e;
    char head[4] = {0};

    req->ctx = NULL;
    evbuffer_copyout(src, head, len < sizeof(head) - 1 ? len : sizeof(head) - 1);
    evbuffer_drain(src, len);
    request_free(req);
    if ((type == REPLY_ARRAY && strcmp(head, "*0\r") == 0) ||
        memchr(e->cmd.name, '|', e->cmd.len) != NULL) {
        e->cmd.known = 0;
        e->cmd.flags = 0;
        learn_settle(q, NULL);
    } else if (learn_ask_command(q) != 0) {
        learn_settle(q, "ERR backend unavailable: cannot learn the command");
    }
}

/* Ask Redis about Q's entry: first MODULE LIST, an admin command that
 * MONITOR never shows (COMMAND INFO would show there, for every typo of a
 * client's), then, when modules are loaded, COMMAND INFO. Returns -1 when
 * no backend takes it. */
static int learn_ask(struct learn_question *q)
{
    static const char modules[] = "*2\r\n$6\r\nMODULE\r\n$4\r\nLIST\r\n";
    struct evbuffer *buf = evbuffer_new();
    int rc;

    evbuffer_add(buf, modules, sizeof(modules) - 1);
    rc = backend_send_internal(pause_internal_conn(backend_default_node(), 0, 0), buf,
                               learn_on_modules, q, NULL);
    evbuffer_free(buf);
    return rc;
}

/* Ask about E, which no question is out about. Returns its question, or
 * NULL when no backend takes it. */
static struct learn_question *learn_question_new(struct learned_entry *e)
{
    struct learn_question *q = calloc(1, sizeof(*q));

    q->e = e;
    TAILQ_INIT(&q->waiters);
    if (learn_ask(q) != 0) {
        free(q);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&learn_questions, q, link);
    return q;
}

void learn_request(struct client *c, struct request *req, const char *name, size_t len)
{
    struct learned_entry *e = learned_find(name, len);
    struct learn_question *q;
    struct learn_waiter *w;

    if (e == NULL)
        e = learned_new(name, len);
    if (!e->pending) {
        q = learn_question_new(e);
        if (q == NULL) {
            learned_free(e);
            learn_ops->release_held(c, req, "ERR backend unavailable: cannot learn the command");
            return;
        }
        e->pending = 1;
    } else {
        q = learn_question_of(e);
    }
    w = calloc(1, sizeof(*w));
    w->c = c;
    w->req = req;
    TAILQ_INSERT_TAIL(&q->waiters, w, link);
    learn_ops->block(c);
}

void learn_client_closed(struct client *c)
{
    struct learn_question *q;
    struct learn_waiter *w;

    TAILQ_FOREACH(q, &learn_questions, link) {
        TAILQ_FOREACH(w, &q->waiters, link) {
            if (w->c == c) {
                TAILQ_REMOVE(&q->waiters, w, link);
                request_free(w->req);
                free(w);
                return;
            }
        }
    }
}

void learn_free_all(void)
{
    struct learn_question *q;

    while ((q = TAILQ_FIRST(&learn_questions)) != NULL) {
        struct learn_waiter *w;
        while ((w = TAILQ_FIRST(&q->waiters)) != NULL) {
            TAILQ_REMOVE(&q->waiters, w, link);
            request_free(w->req);
            free(w);
        }
        TAILQ_REMOVE(&learn_questions, q, link);
        free(q);
    }
    learned_free_all();
}
