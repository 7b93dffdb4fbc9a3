/* learn.c - owns the commands learned from Redis with COMMAND INFO: the
 * cache, the questions in flight and the clients waiting for them. It
 * asks on a shared connection and hands waiting requests back to the
 * client code (client_release_held); it never routes anything itself.
 *
 *   FOO.BAR k  -> not in the table, not learned -> client waits
 *              -> MODULE LIST (none loaded: Redis does not know it either)
 *              -> COMMAND INFO foo.bar (once, however many clients ask)
 *              <- flags, key positions (or nil: Redis does not know it)
 *              -> every waiter dispatched again, now with an answer
 */
#include "learn.h"

#include <ctype.h>
#include <event2/buffer.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include "backend.h"
#include "client.h"
#include "commands.h"
#include "log.h"
#include "reply.h"
#include "pause.h"
#include "request.h"
#include "server.h"

/* Names Redis does not know are asked again after this long (a module may
 * be loaded meanwhile); known ones are kept. */
#define LEARN_UNKNOWN_TTL_MS 5000
/* At most this many names are kept; junk names go first. */
#define LEARN_MAX_ENTRIES 1024

struct learn_waiter {
    struct client *c;
    struct request *req;
    TAILQ_ENTRY(learn_waiter) link;
};

struct learn_entry {
    struct learned_command cmd;
    int pending;                   /* COMMAND INFO is out */
    uint64_t learned_ms;
    TAILQ_HEAD(, learn_waiter) waiters;
    TAILQ_ENTRY(learn_entry) link;
};

static TAILQ_HEAD(, learn_entry) learn_entries = TAILQ_HEAD_INITIALIZER(learn_entries);
static int learn_entry_count;

static void learn_entry_free(struct learn_entry *e)
{
    TAILQ_REMOVE(&learn_entries, e, link);
    learn_entry_count--;
    free(e->cmd.name);
    free(e);
}

static struct learn_entry *learn_find(const char *name, size_t len)
{
    struct learn_entry *e;

    TAILQ_FOREACH(e, &learn_entries, link) {
        if (e->cmd.len == len && strncasecmp(e->cmd.name, name, len) == 0)
            return e;
    }
    return NULL;
}

const struct learned_command *learn_lookup(const char *name, size_t len)
{
    struct learn_entry *e = learn_find(name, len);

    if (e == NULL || e->pending)
        return NULL;
    if (!e->cmd.known && server_now_ms() - e->learned_ms > LEARN_UNKNOWN_TTL_MS)
        return NULL;
    return &e->cmd;
}

/* Make room for one more entry: drop the oldest idle entry, preferring
 * one Redis did not know. */
static void learn_make_room(void)
{
    struct learn_entry *e, *victim = NULL;

    if (learn_entry_count < LEARN_MAX_ENTRIES)
        return;
    TAILQ_FOREACH(e, &learn_entries, link) {
        if (!e->pending && TAILQ_EMPTY(&e->waiters) && (victim == NULL || !e->cmd.known)) {
            victim = e;
            if (!e->cmd.known)
                break;
        }
    }
    if (victim != NULL)
        learn_entry_free(victim);
}

static uint32_t learn_flag_bit(const char *name, size_t len)
{
#define X(id, text) if (len == sizeof(text) - 1 && memcmp(name, text, len) == 0) return CMD_##id;
    CMD_FLAG_LIST(X)
#undef X
    return 0;
}

/* Read COMMAND INFO's reply (LEN bytes of SRC) into E. An answer sluice
 * cannot read counts as a known command that may block: it then takes a
 * private connection, which is always correct, only dearer. */
static void learn_parse(struct learn_entry *e, struct evbuffer *src, size_t len)
{
    redisReader *r = redisReaderCreate();
    redisReply *reply = NULL, *info;

    e->cmd.known = 1;
    e->cmd.flags = CMD_BLOCKING;
    if (r == NULL)
        return;
    redisReaderFeed(r, (const char *)evbuffer_pullup(src, (ssize_t)len), len);
    if (redisReaderGetReply(r, (void **)&reply) != REDIS_OK || reply == NULL ||
        reply->type != REDIS_REPLY_ARRAY || reply->elements != 1)
        goto done;
    info = reply->element[0];
    if (info->type == REDIS_REPLY_NIL) {
        e->cmd.known = 0;
        e->cmd.flags = 0;
        goto done;
    }
    if (info->type != REDIS_REPLY_ARRAY || info->elements < 6 ||
        info->element[2]->type != REDIS_REPLY_ARRAY)
        goto done;
    e->cmd.flags = 0;
    for (size_t i = 0; i < info->element[2]->elements; i++) {
        redisReply *flag = info->element[2]->element[i];
        if (flag->type == REDIS_REPLY_STATUS || flag->type == REDIS_REPLY_STRING)
            e->cmd.flags |= learn_flag_bit(flag->str, flag->len);
    }
    e->cmd.first_key = (int)info->element[3]->integer;
    e->cmd.last_key = (int)info->element[4]->integer;
    e->cmd.key_step = (int)info->element[5]->integer;
done:
    if (reply != NULL)
        freeReplyObject(reply);
    redisReaderFree(r);
}

/* E is answered (ERROR set when it could not be learned): every waiter
 * goes on. */
static void learn_settle(struct learn_entry *e, const char *error)
{
    TAILQ_HEAD(, learn_waiter) waiters = TAILQ_HEAD_INITIALIZER(waiters);
    struct learn_waiter *w;

    e->pending = 0;
    e->learned_ms = server_now_ms();
    /* The waiters go on only once E is settled: dispatching them may ask
     * again, or make room by dropping E. */
    TAILQ_CONCAT(&waiters, &e->waiters, link);
    if (error != NULL)
        learn_entry_free(e);   /* not learned: the next request asks again */
    while ((w = TAILQ_FIRST(&waiters)) != NULL) {
        TAILQ_REMOVE(&waiters, w, link);
        struct client *c = w->c;
        struct request *held = w->req;
        free(w);
        client_release_held(c, held, error);
    }
}

/* The answer to COMMAND INFO for the entry in CTX: learn it, then let
 * every waiter go on. */
static void learn_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct learn_entry *e = req->ctx;
    char error[160] = {0};

    req->ctx = NULL;
    if (type == REPLY_ERROR) {
        evbuffer_copyout(src, error, len < sizeof(error) - 1 ? len : sizeof(error) - 1);
        error[strcspn(error, "\r\n")] = '\0';
        log_info("could not learn command '%s' from the backend: %s", e->cmd.name, error + 1);
    } else {
        learn_parse(e, src, len);
        log_debug("learned command '%s': known=%d flags=%#x", e->cmd.name, e->cmd.known,
                  (unsigned)e->cmd.flags);
    }
    evbuffer_drain(src, len);
    request_free(req);
    learn_settle(e, error[0] ? error + 1 : NULL);
}

/* Send COMMAND INFO for E. Returns -1 when no backend takes it. */
static int learn_ask_command(struct learn_entry *e)
{
    struct evbuffer *buf = evbuffer_new();
    int rc;

    evbuffer_add_printf(buf, "*3\r\n$7\r\nCOMMAND\r\n$4\r\nINFO\r\n$%zu\r\n", e->cmd.len);
    evbuffer_add(buf, e->cmd.name, e->cmd.len);
    evbuffer_add(buf, "\r\n", 2);
    rc = backend_send_internal(pause_internal_conn(backend_default_node(), 0, 0), buf,
                               learn_on_reply, e, NULL);
    evbuffer_free(buf);
    return rc;
}

/* The answer to MODULE LIST for the entry in CTX: with no module loaded,
 * a name outside sluice's table is unknown to Redis too; else (or when
 * sluice may not ask: NOPERM) COMMAND INFO says what it is. A name with a
 * '|' is never a command Redis runs, though COMMAND INFO describes
 * "config|set" (a subcommand): unknown too. */
static void learn_on_modules(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct learn_entry *e = req->ctx;
    char head[4] = {0};

    req->ctx = NULL;
    evbuffer_copyout(src, head, len < sizeof(head) - 1 ? len : sizeof(head) - 1);
    evbuffer_drain(src, len);
    request_free(req);
    if ((type == REPLY_ARRAY && strcmp(head, "*0\r") == 0) ||
        memchr(e->cmd.name, '|', e->cmd.len) != NULL) {
        e->cmd.known = 0;
        e->cmd.flags = 0;
        learn_settle(e, NULL);
    } else if (learn_ask_command(e) != 0) {
        learn_settle(e, "ERR backend unavailable: cannot learn the command");
    }
}

/* Ask Redis about E: first MODULE LIST, an admin command that MONITOR
 * never shows (COMMAND INFO would show there, for every typo of a
 * client's), then, when modules are loaded, COMMAND INFO. Returns -1 when
 * no backend takes it. */
static int learn_ask(struct learn_entry *e)
{
    static const char modules[] = "*2\r\n$6\r\nMODULE\r\n$4\r\nLIST\r\n";
    struct evbuffer *buf = evbuffer_new();
    int rc;

    evbuffer_add(buf, modules, sizeof(modules) - 1);
    rc = backend_send_internal(pause_internal_conn(backend_default_node(), 0, 0), buf,
                               learn_on_modules, e, NULL);
    evbuffer_free(buf);
    return rc;
}

static struct learn_entry *learn_entry_new(const char *name, size_t len)
{
    struct learn_entry *e = calloc(1, sizeof(*e));

    learn_make_room();
    e->cmd.name = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        e->cmd.name[i] = (char)tolower((unsigned char)name[i]);
    e->cmd.name[len] = '\0';
    e->cmd.len = len;
    TAILQ_INIT(&e->waiters);
    TAILQ_INSERT_TAIL(&learn_entries, e, link);
    learn_entry_count++;
    return e;
}

void learn_request(struct client *c, struct request *req, const char *name, size_t len)
{
    struct learn_entry *e = learn_find(name, len);
    struct learn_waiter *w;

    if (e == NULL)
        e = learn_entry_new(name, len);
    if (!e->pending) {
        if (learn_ask(e) != 0) {
            learn_entry_free(e);
            client_release_held(c, req, "ERR backend unavailable: cannot learn the command");
            return;
        }
        e->pending = 1;
    }
    w = calloc(1, sizeof(*w));
    w->c = c;
    w->req = req;
    TAILQ_INSERT_TAIL(&e->waiters, w, link);
    client_block(c);
}

void learn_client_closed(struct client *c)
{
    struct learn_entry *e;
    struct learn_waiter *w;

    TAILQ_FOREACH(e, &learn_entries, link) {
        TAILQ_FOREACH(w, &e->waiters, link) {
            if (w->c == c) {
                TAILQ_REMOVE(&e->waiters, w, link);
                request_free(w->req);
                free(w);
                return;
            }
        }
    }
}

void learn_free_all(void)
{
    struct learn_entry *e;

    while ((e = TAILQ_FIRST(&learn_entries)) != NULL) {
        struct learn_waiter *w;
        while ((w = TAILQ_FIRST(&e->waiters)) != NULL) {
            TAILQ_REMOVE(&e->waiters, w, link);
            request_free(w->req);
            free(w);
        }
        learn_entry_free(e);
    }
}
