/* slowlog.c - owns the slow log's entries and the copy of a request's
 * arguments it may need (taken as the request is framed, since its bytes
 * are gone to Redis by the time its reply is in). Knows nothing of
 * clients: their address, name and user are handed in.
 *
 *   framed: slowlog_capture -> req->slow_args: a small request's RESP bytes
 *           (one copy into the request), else its arguments packed and cut
 *   reply queued: slowlog_note -> slower than the threshold? -> newest entry
 *                 (the copy, the address, name and user in one block: the
 *                 oldest entry's, when the log is full and it is large enough)
 *   PROXY SLOWLOG GET: slowlog_write cuts and renders the arguments
 *
 * The packed layout (a request over REQ_SLOW_INLINE bytes, or one with a
 * password to hide): argc (u32), kept (u16), then per kept argument its
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
#include "metrics.h"
#include "redact.h"
#include "reply.h"
#include "request.h"

struct slowlog_entry {
    TAILQ_ENTRY(slowlog_entry) link;
    long long id;
    long long unix_time;
    uint64_t duration_us;
    uint64_t redis_us;
    int raw;                         /* the arguments are RESP bytes, else packed */
    size_t cap;                      /* bytes text[] has room for */
    size_t args_len, addr_len, name_len, user_len;
    char text[];                     /* the arguments, address, name, user in a row */
};

TAILQ_HEAD(slowlog_list, slowlog_entry);

static struct slowlog_list slowlog_entries = TAILQ_HEAD_INITIALIZER(slowlog_entries);
static size_t slowlog_count;
static long long slowlog_next_id;
static uint64_t *slowlog_entries_total;   /* sluice_slowlog_entries_total */
long long slowlog_slower_than_us = 10000;
static size_t slowlog_max_len = 128;

/* An entry's text room at least: a small request's entry fits, so that
 * a full slow log takes each new entry in the place of its oldest, with
 * no allocation. */
#define SLOWLOG_TEXT_MIN 384

/* Take the oldest entry out; returns it (the caller frees or reuses it). */
static struct slowlog_entry *slowlog_take_oldest(void)
{
    struct slowlog_entry *e = TAILQ_LAST(&slowlog_entries, slowlog_list);

    TAILQ_REMOVE(&slowlog_entries, e, link);
    slowlog_count--;
    return e;
}

static void slowlog_drop_oldest(void)
{
    free(slowlog_take_oldest());
}

/* Room for an entry with SIZE bytes of text: the oldest one's when the
 * slow log is full and it is large enough, else new. NULL when out of
 * memory. */
static struct slowlog_entry *slowlog_new_entry(size_t size)
{
    struct slowlog_entry *e = NULL;

    if (slowlog_count >= slowlog_max_len) {
        e = slowlog_take_oldest();
        if (e->cap >= size)
            return e;
        free(e);
    }
    size = size > SLOWLOG_TEXT_MIN ? size : SLOWLOG_TEXT_MIN;
    e = malloc(sizeof(*e) + size);
    if (e != NULL)
        e->cap = size;
    return e;
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

#define SLOWLOG_REDACTED REDACT_TEXT

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

/* REQ's arguments ARGV packed (the layout above) into the heap or
 * req->slow_inline: each cut to SLOWLOG_MAX_STRING bytes, passwords
 * (REDACTED's bits) replaced. */
static void slowlog_pack(struct request *req, const struct sv *argv, struct evbuffer *src,
                         int kept, uint32_t redacted)
{
    size_t size = slowlog_copy_size(argv, kept, redacted);
    unsigned char *p = size <= sizeof(req->slow_inline) ? req->slow_inline : malloc(size);
    uint32_t u32 = (uint32_t)req->argc;
    uint16_t u16 = (uint16_t)kept;

    if (p == NULL)
        return;
    req->slow_args = p;
    req->slow_len = (uint32_t)size;
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

/* N bytes (at most REQ_SLOW_INLINE) from SRC to DST in 16-byte words, the
 * last one overlapping, or two overlapping shorter ones: no call for a
 * size known only now. */
static inline void slowlog_copy_small(unsigned char *dst, const char *src, size_t n)
{
    if (n >= 16) {
        for (size_t i = 0; i + 16 < n; i += 16)
            memcpy(dst + i, src + i, 16);
        memcpy(dst + n - 16, src + n - 16, 16);
    } else if (n >= 8) {
        memcpy(dst, src, 8);
        memcpy(dst + n - 8, src + n - 8, 8);
    } else {
        memcpy(dst, src, n);
    }
}

void slowlog_capture(struct request *req, const struct sv *argv, struct evbuffer *src)
{
    /* Redis keeps the first 31 and says how many more in the 32nd. */
    int kept = req->argc > SLOWLOG_MAX_ARGC ? SLOWLOG_MAX_ARGC - 1 : req->argc;
    uint32_t redacted;

    if (req->cmd != NULL && (req->cmd->flags & CMD_SKIP_SLOWLOG))
        return;   /* EXEC...: as Redis, never in the slow log */
    redacted = redact_args(argv, req->argc, kept);   /* redact.c's table */
    if (redacted == 0 && req->raw_len <= sizeof(req->slow_inline) && req->argc > 0) {
        /* Small: its bytes, contiguous (request_argv_open pulls up a
         * request this small), copied whole; nothing in it to cut. */
        slowlog_copy_small(req->slow_inline, argv[0].ptr - req->args[0].off, req->raw_len);
        req->slow_args = req->slow_inline;
        req->slow_len = (uint32_t)req->raw_len;
        req->slow_raw = 1;
        return;
    }
    slowlog_pack(req, argv, src, kept, redacted);
}

void slowlog_note(const struct request *req, uint64_t now_us, const char *addr,
                  const char *name, const char *user)
{
    struct slowlog_entry *e;
    uint64_t duration;
    size_t addr_len, name_len, user_len;

    if (req->framed_us == 0 || req->slow_args == NULL || slowlog_slower_than_us < 0 ||
        slowlog_max_len == 0)
        return;
    duration = now_us > req->framed_us ? now_us - req->framed_us : 0;
    if (duration < (uint64_t)slowlog_slower_than_us)
        return;
    name = name != NULL ? name : "";
    user = user != NULL ? user : "default";
    addr_len = strlen(addr);
    name_len = strlen(name);
    user_len = strlen(user);
    e = slowlog_new_entry(req->slow_len + addr_len + name_len + user_len);
    if (e == NULL)
        return;   /* out of memory: not logged */
    e->raw = req->slow_raw;
    e->args_len = req->slow_len;
    e->addr_len = addr_len;
    e->name_len = name_len;
    e->user_len = user_len;
    memcpy(e->text, req->slow_args, req->slow_len);
    memcpy(e->text + e->args_len, addr, addr_len);
    memcpy(e->text + e->args_len + addr_len, name, name_len);
    memcpy(e->text + e->args_len + addr_len + name_len, user, user_len);
    e->id = slowlog_next_id++;
    e->unix_time = (long long)time(NULL);
    e->duration_us = duration;
    e->redis_us = req->redis_us;
    TAILQ_INSERT_HEAD(&slowlog_entries, e, link);
    slowlog_count++;
    /* A counter, not only the length (capped at slowlog_max_len): the
     * rate of slow requests is what an alert wants. */
    if (slowlog_entries_total == NULL)
        slowlog_entries_total = metrics_counter(METRIC_slowlog_entries_total, NULL, NULL);
    (*slowlog_entries_total)++;
}

/* The arguments of a small request's RESP bytes ARGS (LEN), framed by
 * sluice and so well formed, as bulk strings into OUT: at most
 * REQ_SLOW_INLINE bytes hold fewer than SLOWLOG_MAX_ARGC arguments of
 * fewer than SLOWLOG_MAX_STRING bytes, nothing to cut. */
static void slowlog_write_raw(struct evbuffer *out, const char *args, size_t len)
{
    const char *p = args, *end = args + len;
    long long argc = 0;

    for (p++; p < end && *p != '\r'; p++)
        argc = argc * 10 + (*p - '0');
    p += 2;
    reply_array_header(out, argc);
    for (long long i = 0; i < argc; i++) {
        size_t n = 0;
        for (p++; p < end && *p != '\r'; p++)
            n = n * 10 + (size_t)(*p - '0');
        p += 2;
        if (p + n > end)
            n = p < end ? (size_t)(end - p) : 0;   /* cannot happen: framed */
        reply_bulk(out, p, n);
        p += n + 2;
    }
}

/* The packed arguments ARGS as Redis's SLOWLOG shows them, into OUT. */
static void slowlog_write_packed(struct evbuffer *out, const unsigned char *args)
{
    char buf[SLOWLOG_MAX_STRING + 48];
    uint32_t argc, full;
    uint16_t kept;

    memcpy(&argc, args, 4);
    memcpy(&kept, args + 4, 2);
    args += 6;
    reply_array_header(out, kept + (argc > kept));
    for (int i = 0; i < kept; i++) {
        int n = args[4];
        memcpy(&full, args, 4);
        memcpy(buf, args + 5, (size_t)n);
        if (full > (uint32_t)n)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, "... (%lu more bytes)",
                          (unsigned long)(full - (uint32_t)n));
        reply_bulk(out, buf, (size_t)n);
        args += 5 + args[4];
    }
    if (argc > kept) {
        int n = snprintf(buf, sizeof(buf), "... (%lu more arguments)",
                         (unsigned long)(argc - kept));
        reply_bulk(out, buf, (size_t)n);
    }
}

void slowlog_write(struct evbuffer *out, long long count)
{
    struct slowlog_entry *e;
    size_t n = count < 0 || (size_t)count > slowlog_count ? slowlog_count : (size_t)count;

    reply_array_header(out, (long long)n);
    TAILQ_FOREACH(e, &slowlog_entries, link) {
        const char *t = e->text + e->args_len;
        if (n-- == 0)
            break;
        reply_array_header(out, 8);
        reply_integer(out, e->id);
        reply_integer(out, e->unix_time);
        reply_integer(out, (long long)e->duration_us);
        if (e->raw)
            slowlog_write_raw(out, e->text, e->args_len);
        else
            slowlog_write_packed(out, (const unsigned char *)e->text);
        reply_bulk(out, t, e->addr_len);
        reply_bulk(out, t + e->addr_len, e->name_len);
        reply_bulk(out, t + e->addr_len + e->name_len, e->user_len);
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
