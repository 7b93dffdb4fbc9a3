/* slowlog.c - owns the slow log's entries and the compact copy of a
 * request's arguments it may need (taken as the request is framed, since
 * its bytes are gone to Redis by the time its reply is in). Knows nothing
 * of clients: their address, name and user are handed in.
 *
 *   framed: slowlog_capture -> req->slow_args (inline when small)
 *   reply queued: slowlog_note -> slower than the threshold? -> newest entry
 *
 * The copy's layout: argc (u32), kept (u16), then per kept argument its
 * whole length (u32), the bytes kept (u8) and those bytes.
 */
#include "slowlog.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "commands.h"
#include "reply.h"
#include "request.h"

struct slowlog_entry {
    TAILQ_ENTRY(slowlog_entry) link;
    long long id;
    long long unix_time;
    uint64_t duration_us;
    uint64_t redis_us;
    int argc;                        /* arguments shown (the last may say how many more) */
    struct sv *argv;                 /* into text */
    struct sv addr, name, user;      /* into text */
    char *text;
};

TAILQ_HEAD(slowlog_list, slowlog_entry);

static struct slowlog_list slowlog_entries = TAILQ_HEAD_INITIALIZER(slowlog_entries);
static size_t slowlog_count;
static long long slowlog_next_id;
static long long slowlog_slower_than_us = 10000;
static size_t slowlog_max_len = 128;

static void slowlog_drop_oldest(void)
{
    struct slowlog_entry *e = TAILQ_LAST(&slowlog_entries, slowlog_list);

    TAILQ_REMOVE(&slowlog_entries, e, link);
    slowlog_count--;
    free(e->text);
    free(e->argv);
    free(e);
}

void slowlog_configure(long long log_slower_than_us, long long max_len)
{
    slowlog_slower_than_us = log_slower_than_us;
    slowlog_max_len = max_len > 0 ? (size_t)max_len : 0;
    while (slowlog_count > slowlog_max_len)
        slowlog_drop_oldest();
}

int slowlog_enabled(void)
{
    return slowlog_slower_than_us >= 0;
}

/* Up to SLOWLOG_MAX_STRING bytes of argument I of REQ into BUF; returns
 * how many. */
static size_t slowlog_arg_head(const struct request *req, const struct sv *argv, int i,
                               struct evbuffer *src, unsigned char *buf)
{
    size_t n = argv[i].len < SLOWLOG_MAX_STRING ? argv[i].len : SLOWLOG_MAX_STRING;
    struct evbuffer_ptr pos;

    if (argv[i].ptr != NULL) {
        memcpy(buf, argv[i].ptr, n);
        return n;
    }
    /* A large value sluice never reads: its head is still in SRC. */
    if (src == NULL || evbuffer_ptr_set(src, &pos, req->args[i].off, EVBUFFER_PTR_SET) != 0)
        return 0;
    return evbuffer_copyout_from(src, &pos, buf, n) == (ev_ssize_t)n ? n : 0;
}

#define SLOWLOG_REDACTED "(redacted)"

/* The arguments of REQ that Redis shows as "(redacted)" (passwords: AUTH,
 * HELLO ... AUTH, MIGRATE ... AUTH/AUTH2), as bits by position. */
static uint32_t slowlog_redacted(const struct request *req, const struct sv *argv, int kept)
{
    const char *name = req->cmd != NULL ? req->cmd->name : "";
    uint32_t bits = 0;

    if (name[0] != 'a' && name[0] != 'h' && name[0] != 'm')
        return 0;   /* the common case, without a string compare */
    if (strcmp(name, "auth") == 0)
        return ~(uint32_t)1;
    for (int j = 2; j < kept && strcmp(name, "hello") == 0; j++) {
        if (sv_ieq(argv[j], "auth") && j + 2 < req->argc) {
            bits |= 3u << (j + 1);
            j += 2;
        }
    }
    for (int j = 6; j < kept && strcmp(name, "migrate") == 0; j++) {
        if (sv_ieq(argv[j], "auth") && j + 1 < req->argc)
            bits |= 1u << (j + 1);
        else if (sv_ieq(argv[j], "auth2") && j + 2 < req->argc)
            bits |= 3u << (j + 1);
    }
    return bits;
}

/* The length of argument I as the slow log shows it. */
static size_t slowlog_shown_len(const struct sv *argv, int i, uint32_t redacted)
{
    if (redacted & (1u << i))
        return sizeof(SLOWLOG_REDACTED) - 1;
    return argv[i].len;
}

/* The bytes the copy of REQ's arguments takes. */
static size_t slowlog_copy_size(const struct sv *argv, int kept, uint32_t redacted)
{
    size_t size = 6;

    for (int i = 0; i < kept; i++) {
        size_t len = slowlog_shown_len(argv, i, redacted);
        size += 5 + (len < SLOWLOG_MAX_STRING ? len : SLOWLOG_MAX_STRING);
    }
    return size;
}

void slowlog_capture(struct request *req, const struct sv *argv, struct evbuffer *src)
{
    /* Redis keeps the first 31 and says how many more in the 32nd. */
    int kept = req->argc > SLOWLOG_MAX_ARGC ? SLOWLOG_MAX_ARGC - 1 : req->argc;
    uint32_t redacted;
    size_t size;
    unsigned char *p;
    uint32_t u32;
    uint16_t u16 = (uint16_t)kept;

    if (req->cmd != NULL && (req->cmd->flags & CMD_SKIP_SLOWLOG))
        return;   /* EXEC...: as Redis, never in the slow log */
    redacted = slowlog_redacted(req, argv, kept);
    size = slowlog_copy_size(argv, kept, redacted);
    p = size <= sizeof(req->slow_inline) ? req->slow_inline : malloc(size);
    if (p == NULL)
        return;
    req->slow_args = p;
    u32 = (uint32_t)req->argc;
    memcpy(p, &u32, 4);
    memcpy(p + 4, &u16, 2);
    p += 6;
    for (int i = 0; i < kept; i++) {
        size_t len = slowlog_shown_len(argv, i, redacted);
        u32 = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
        memcpy(p, &u32, 4);
        if (redacted & (1u << i)) {
            p[4] = (unsigned char)len;
            memcpy(p + 5, SLOWLOG_REDACTED, len);
        } else {
            p[4] = (unsigned char)slowlog_arg_head(req, argv, i, src, p + 5);
        }
        p += 5 + p[4];
    }
}

/* Append to TEXT the arguments kept in ARGS as Redis's SLOWLOG shows them,
 * recording each one's offset and length in VIEWS. Returns how many. */
static int slowlog_render_args(const unsigned char *args, struct evbuffer *text,
                               struct sv *views)
{
    uint32_t argc, full;
    uint16_t kept;
    int n = 0;

    memcpy(&argc, args, 4);
    memcpy(&kept, args + 4, 2);
    args += 6;
    for (int i = 0; i < kept; i++, n++) {
        size_t start = evbuffer_get_length(text);
        memcpy(&full, args, 4);
        evbuffer_add(text, args + 5, args[4]);
        if (full > args[4])
            evbuffer_add_printf(text, "... (%lu more bytes)", (unsigned long)(full - args[4]));
        views[n] = (struct sv){(const char *)start, evbuffer_get_length(text) - start};
        args += 5 + args[4];
    }
    if (argc > kept) {
        size_t start = evbuffer_get_length(text);
        evbuffer_add_printf(text, "... (%lu more arguments)", (unsigned long)(argc - kept));
        views[n++] = (struct sv){(const char *)start, evbuffer_get_length(text) - start};
    }
    return n;
}

/* Add S to TEXT and note where it went in VIEW (an offset until fixed). */
static void slowlog_add_text(struct evbuffer *text, const char *s, struct sv *view)
{
    size_t start = evbuffer_get_length(text);

    evbuffer_add(text, s, strlen(s));
    *view = (struct sv){(const char *)start, strlen(s)};
}

/* Turn a view holding an offset into TEXT into a pointer into BASE. */
static void slowlog_fix(struct sv *view, const char *base)
{
    view->ptr = base + (size_t)view->ptr;
}

void slowlog_note(const struct request *req, uint64_t now_us, const char *addr,
                  const char *name, const char *user)
{
    struct slowlog_entry *e;
    struct evbuffer *text;
    uint64_t duration;

    if (req->framed_us == 0 || req->slow_args == NULL || slowlog_slower_than_us < 0 ||
        slowlog_max_len == 0)
        return;
    duration = now_us > req->framed_us ? now_us - req->framed_us : 0;
    if (duration < (uint64_t)slowlog_slower_than_us)
        return;
    e = calloc(1, sizeof(*e));
    text = evbuffer_new();
    if (e != NULL)
        e->argv = malloc(sizeof(*e->argv) * SLOWLOG_MAX_ARGC);
    if (e == NULL || text == NULL || e->argv == NULL)
        goto oom;
    e->argc = slowlog_render_args(req->slow_args, text, e->argv);
    slowlog_add_text(text, addr, &e->addr);
    slowlog_add_text(text, name != NULL ? name : "", &e->name);
    slowlog_add_text(text, user != NULL ? user : "default", &e->user);
    e->text = malloc(evbuffer_get_length(text) + 1);
    if (e->text == NULL)
        goto oom;
    evbuffer_remove(text, e->text, evbuffer_get_length(text));
    evbuffer_free(text);
    for (int i = 0; i < e->argc; i++)
        slowlog_fix(&e->argv[i], e->text);
    slowlog_fix(&e->addr, e->text);
    slowlog_fix(&e->name, e->text);
    slowlog_fix(&e->user, e->text);
    e->id = slowlog_next_id++;
    e->unix_time = (long long)time(NULL);
    e->duration_us = duration;
    e->redis_us = req->redis_us;
    TAILQ_INSERT_HEAD(&slowlog_entries, e, link);
    if (++slowlog_count > slowlog_max_len)
        slowlog_drop_oldest();
    return;
oom:
    if (text != NULL)
        evbuffer_free(text);
    if (e != NULL)
        free(e->argv);
    free(e);
}

void slowlog_write(struct evbuffer *out, long long count)
{
    struct slowlog_entry *e;
    size_t n = count < 0 || (size_t)count > slowlog_count ? slowlog_count : (size_t)count;

    reply_array_header(out, (long long)n);
    TAILQ_FOREACH(e, &slowlog_entries, link) {
        if (n-- == 0)
            break;
        reply_array_header(out, 8);
        reply_integer(out, e->id);
        reply_integer(out, e->unix_time);
        reply_integer(out, (long long)e->duration_us);
        reply_array_header(out, e->argc);
        for (int i = 0; i < e->argc; i++)
            reply_bulk(out, e->argv[i].ptr, e->argv[i].len);
        reply_bulk(out, e->addr.ptr, e->addr.len);
        reply_bulk(out, e->name.ptr, e->name.len);
        reply_bulk(out, e->user.ptr, e->user.len);
        reply_integer(out, (long long)e->redis_us);
    }
}

size_t slowlog_len(void)
{
    return slowlog_count;
}

void slowlog_reset(void)
{
    while (slowlog_count > 0)
        slowlog_drop_oldest();
}
