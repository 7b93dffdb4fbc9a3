/* learned.c - owns the cache of commands learned from Redis with COMMAND
 * INFO: the entries by name, what each answer said, how long an
 * "unknown" holds, and which entry gives way when the cache is full. It
 * asks nothing itself: learn.c (backend/) asks and fills it. */
#include "learned.h"

#include <ctype.h>
#include <event2/buffer.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands.h"
#include "server.h"

/* Names Redis does not know are asked again after this long (a module may
 * be loaded meanwhile); known ones are kept. */
#define LEARNED_UNKNOWN_TTL_MS 5000
/* At most this many names are kept; junk names go first. */
#define LEARNED_MAX_ENTRIES 1024

static TAILQ_HEAD(, learned_entry) learned_entries = TAILQ_HEAD_INITIALIZER(learned_entries);
static int learned_entry_count;

void learned_free(struct learned_entry *e)
{
    TAILQ_REMOVE(&learned_entries, e, link);
    learned_entry_count--;
    free(e->cmd.name);
    free(e);
}

struct learned_entry *learned_find(const char *name, size_t len)
{
    struct learned_entry *e;

    TAILQ_FOREACH(e, &learned_entries, link) {
        if (e->cmd.len == len && strncasecmp(e->cmd.name, name, len) == 0)
            return e;
    }
    return NULL;
}

const struct learned_command *learned_lookup(const char *name, size_t len)
{
    struct learned_entry *e = learned_find(name, len);

    if (e == NULL || e->pending)
        return NULL;
    if (!e->cmd.known && server_now_ms() - e->learned_ms > LEARNED_UNKNOWN_TTL_MS)
        return NULL;
    return &e->cmd;
}

/* Make room for one more entry: drop the oldest idle entry, preferring
 * one Redis did not know. Clients wait only on pending entries (learn.c),
 * so an entry not pending is idle. */
static void learned_make_room(void)
{
    struct learned_entry *e, *victim = NULL;

    if (learned_entry_count < LEARNED_MAX_ENTRIES)
        return;
    TAILQ_FOREACH(e, &learned_entries, link) {
        if (!e->pending && (victim == NULL || !e->cmd.known)) {
            victim = e;
            if (!e->cmd.known)
                break;
        }
    }
    if (victim != NULL)
        learned_free(victim);
}

static uint32_t learned_flag_bit(const char *name, size_t len)
{
#define X(id, text) if (len == sizeof(text) - 1 && memcmp(name, text, len) == 0) return CMD_##id;
    CMD_FLAG_LIST(X)
#undef X
    return 0;
}

void learned_parse(struct learned_entry *e, struct evbuffer *src, size_t len)
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
            e->cmd.flags |= learned_flag_bit(flag->str, flag->len);
    }
    e->cmd.first_key = (int)info->element[3]->integer;
    e->cmd.last_key = (int)info->element[4]->integer;
    e->cmd.key_step = (int)info->element[5]->integer;
done:
    if (reply != NULL)
        freeReplyObject(reply);
    redisReaderFree(r);
}

struct learned_entry *learned_new(const char *name, size_t len)
{
    struct learned_entry *e = calloc(1, sizeof(*e));

    learned_make_room();
    e->cmd.name = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        e->cmd.name[i] = (char)tolower((unsigned char)name[i]);
    e->cmd.name[len] = '\0';
    e->cmd.len = len;
    TAILQ_INSERT_TAIL(&learned_entries, e, link);
    learned_entry_count++;
    return e;
}

void learned_free_all(void)
{
    struct learned_entry *e;

    while ((e = TAILQ_FIRST(&learned_entries)) != NULL)
        learned_free(e);
}
