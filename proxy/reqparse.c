/* reqparse.c - owns request framing. hiredis's reader finds where a RESP
 * request ends; its callbacks record each argument as an offset into the
 * client's input buffer, so no argument is copied. Inline commands are
 * split here and rewritten as RESP, so the rest of sluice sees one form.
 *
 *   input evbuffer: | request 1 | request 2 | partial ... |
 *                   ^ offset 0    (all of it up to `fed` is in the reader)
 */
#include "reqparse.h"

#include <event2/buffer.h>
#include <hiredis/read.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "respscan.h"

/* Redis's PROTO_INLINE_MAX_SIZE. It is the only bound on an inline
 * command: its argument count follows from it. */
#define REQPARSE_MAX_INLINE (64 * 1024)
/* Bulk strings missing more than this are fed to the reader in one piece. */
#define REQPARSE_FEED_WHOLE (64 * 1024)

/* The parser whose reader is running: the reader's callbacks get only a
 * task, and sluice is single-threaded. */
static struct reqparse *reqparse_active;
static char reqparse_dummy;

static void *reqparse_fail(const char *fmt, char got)
{
    struct reqparse *p = reqparse_active;

    if (p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), fmt, got);
    return &reqparse_dummy;
}

static void *reqparse_on_string(const redisReadTask *task, char *str, size_t len)
{
    struct reqparse *p = reqparse_active;
    redisReader *r = p->reader;
    size_t off;

    if (task->type == REDIS_REPLY_STATUS)
        return reqparse_fail("Protocol error: expected '$', got '%c'", '+');
    if (task->type == REDIS_REPLY_ERROR)
        return reqparse_fail("Protocol error: expected '$', got '%c'", '-');
    if (task->parent == NULL || p->cur == NULL)
        return reqparse_fail("Protocol error: expected '%c'", '*');
    /* reqparse_check_pending_bulk refuses a long one by its header while
     * the body is on its way; this catches one that came all at once. */
    if ((long long)len > p->limits->max_bulk_len)
        return reqparse_fail("Protocol error: invalid bulk length%c", '\0');
    /* r->buf[0] is input offset fed - r->len, whatever the reader compacted. */
    off = p->fed - r->len + (size_t)(str - r->buf);
    if (request_add_arg(p->cur, (uint32_t)off, (uint32_t)len) != 0)
        return NULL;
    return &reqparse_dummy;
}

static void *reqparse_on_array(const redisReadTask *task, size_t elements)
{
    struct reqparse *p = reqparse_active;

    if (task->parent != NULL)
        return reqparse_fail("Protocol error: expected '$', got '%c'", '*');
    if ((long long)elements > p->limits->max_multibulk_len)
        return reqparse_fail("Protocol error: invalid multibulk length%c", '\0');
    if (elements > 0 && p->cur == NULL) {
        p->cur = request_new();
        if (p->cur == NULL)
            return NULL;
    }
    return &reqparse_dummy;
}

static void *reqparse_on_integer(const redisReadTask *task, long long value)
{
    (void)task;
    (void)value;
    return reqparse_fail("Protocol error: expected '$', got '%c'", ':');
}

static void *reqparse_on_nil(const redisReadTask *task)
{
    if (task->parent == NULL)
        return &reqparse_dummy;  /* *-1: an empty command, like Redis skips */
    return reqparse_fail("Protocol error: invalid bulk length%c", '\0');
}

static void reqparse_free_object(void *obj)
{
    (void)obj;
}

/* hiredis 0.14 declares createArray with an int count. */
static void *reqparse_on_array_int(const redisReadTask *task, int elements)
{
    return reqparse_on_array(task, elements < 0 ? 0 : (size_t)elements);
}

static redisReplyObjectFunctions reqparse_functions = {
    .createString = reqparse_on_string,
    .createArray = reqparse_on_array_int,
    .createInteger = reqparse_on_integer,
    .createNil = reqparse_on_nil,
    .freeObject = reqparse_free_object,
};

int reqparse_init(struct reqparse *p, const struct reqparse_limits *limits)
{
    memset(p, 0, sizeof(*p));
    p->limits = limits;
    p->reader = redisReaderCreateWithFunctions(&reqparse_functions);
    return p->reader != NULL ? 0 : -1;
}

void reqparse_free(struct reqparse *p)
{
    if (p->reader != NULL)
        redisReaderFree(p->reader);
    request_free(p->cur);
    p->reader = NULL;
    p->cur = NULL;
}

/* Drop whatever the reader holds: the bytes after a finished request are
 * not RESP (an inline command follows), so start it afresh. */
static int reqparse_reset_reader(struct reqparse *p)
{
    redisReaderFree(p->reader);
    p->reader = redisReaderCreateWithFunctions(&reqparse_functions);
    p->fed = 0;
    return p->reader != NULL ? 0 : -1;
}


/* Check the header of a bulk string the reader is waiting for, so that a
 * too long one is refused before its body is buffered. The reader has
 * consumed the '$' already; its length line starts at r->pos. Returns -1
 * when the header is bad, else 0 with *LINE_DONE set when the length line
 * has ended, so that the size of the body is known. */
static int reqparse_check_pending_bulk(struct reqparse *p, int *line_done)
{
    redisReader *r = p->reader;
    const char *start = r->buf + r->pos;
    size_t avail = r->len - r->pos;
    const char *cr;
    long long len;

    *line_done = 0;
    if (r->ridx < 0 || r->rstack[r->ridx].type != REDIS_REPLY_STRING || avail == 0)
        return 0;
    /* A length line is short: look no further than its longest form. */
    cr = memchr(start, '\r', avail < 32 ? avail : 32);
    if (cr == NULL)
        return avail >= 32 ? -1 : 0;
    if ((size_t)(cr - start) + 1 == avail)
        return 0;   /* its '\n' is yet to come */
    /* The reader ends lines only at CRLF: a lone CR dooms this header, so
     * say so now rather than wait for a body of a size it never had. */
    if (cr[1] != '\n')
        return -1;
    *line_done = 1;
    len = strtoll(start, NULL, 10);
    return len > p->limits->max_bulk_len ? -1 : 0;
}

/* A request's first line (*<count>) longer than an inline command may be,
 * with no end in sight: Redis gives up on it, and so do we. */
static int reqparse_header_too_long(const struct reqparse *p, struct evbuffer *in)
{
    struct evbuffer_ptr eol;

    if (p->cur != NULL || evbuffer_get_length(in) <= REQPARSE_MAX_INLINE)
        return 0;
    eol = evbuffer_search(in, "\n", 1, NULL);
    return eol.pos < 0 || eol.pos > REQPARSE_MAX_INLINE;
}

static const char *reqparse_reader_error(redisReader *r)
{
    const char *e = r->errstr;

    /* hiredis's own words for what Redis calls these. */
    if (strstr(e, "Bad multi-bulk length") || strstr(e, "Multi-bulk length out of range"))
        return "Protocol error: invalid multibulk length";
    if (strstr(e, "Bad bulk string length") || strstr(e, "Bulk string length out of range"))
        return "Protocol error: invalid bulk length";
    if (strstr(e, "nested multi bulk"))
        return "Protocol error: expected '$', got '*'";
    return "Protocol error: invalid request";
}

static int reqparse_resp(struct reqparse *p, struct evbuffer *in, struct request **out)
{
    redisReader *r = p->reader;
    void *reply = NULL;
    struct request *req;
    size_t len;

    if (evbuffer_get_length(in) < p->hold_until)
        return REQPARSE_MORE;
    p->hold_until = 0;
    p->fed = respscan_feed(p->reader, in, p->fed);
    reqparse_active = p;
    if (redisReaderGetReply(r, &reply) != 0) {
        if (p->err[0] == '\0')
            snprintf(p->err, sizeof(p->err), "%s", reqparse_reader_error(r));
        return REQPARSE_ERROR;
    }
    if (p->err[0] != '\0')
        return REQPARSE_ERROR;
    if (reply == NULL) {
        int line_done;
        if (reqparse_check_pending_bulk(p, &line_done) != 0) {
            snprintf(p->err, sizeof(p->err), "Protocol error: invalid bulk length");
            return REQPARSE_ERROR;
        }
        if (reqparse_header_too_long(p, in)) {
            snprintf(p->err, sizeof(p->err), "Protocol error: too big mbulk count string");
            return REQPARSE_ERROR;
        }
        size_t missing = respscan_reader_bulk_missing(r);
        if (line_done && missing > REQPARSE_FEED_WHOLE)
            p->hold_until = p->fed + missing;
        return REQPARSE_MORE;
    }
    len = p->fed - (r->len - r->pos);
    req = p->cur;
    p->cur = NULL;
    p->fed -= len;
    if (req == NULL) {
        evbuffer_drain(in, len);
        return REQPARSE_SKIP;
    }
    req->raw_len = len;
    *out = req;
    return REQPARSE_REQUEST;
}

static int reqparse_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One quoted argument starting at line[*i] (the quote). Appends the
 * unescaped bytes to OUT at *o. Returns 0, or -1 on unbalanced quotes. */
static int reqparse_split_quoted(const char *line, size_t len, size_t *i, char *out, size_t *o)
{
    char quote = line[(*i)++];
    static const char escapes[] = "n\nr\rt\tb\ba\a";

    for (; *i < len; (*i)++) {
        char c = line[*i];
        if (c == quote) {
            (*i)++;
            /* The closing quote must be followed by a space or the end. */
            return (*i < len && line[*i] != ' ' && line[*i] != '\t') ? -1 : 0;
        }
        if (c == '\\' && quote == '"' && *i + 1 < len) {
            char e = line[++(*i)];
            const char *m;
            if (e == 'x' && *i + 2 < len && reqparse_hex(line[*i + 1]) >= 0 &&
                reqparse_hex(line[*i + 2]) >= 0) {
                out[(*o)++] = (char)(reqparse_hex(line[*i + 1]) * 16 + reqparse_hex(line[*i + 2]));
                *i += 2;
                continue;
            }
            m = e != '\0' ? strchr(escapes, e) : NULL;
            out[(*o)++] = (m != NULL && (m - escapes) % 2 == 0) ? m[1] : e;
            continue;
        }
        if (c == '\\' && quote == '\'' && *i + 1 < len && line[*i + 1] == '\'') {
            out[(*o)++] = '\'';
            (*i)++;
            continue;
        }
        out[(*o)++] = c;
    }
    return -1;
}

int reqparse_split_inline(const char *line, size_t len, char *out, size_t *offs,
                          size_t *lens, int max)
{
    size_t i = 0, o = 0;
    int argc = 0;

    for (;;) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i >= len)
            return argc;
        if (argc == max)
            return -1;
        offs[argc] = o;
        if (line[i] == '"' || line[i] == '\'') {
            if (reqparse_split_quoted(line, len, &i, out, &o) != 0)
                return -1;
        } else {
            while (i < len && line[i] != ' ' && line[i] != '\t')
                out[o++] = line[i++];
        }
        lens[argc] = o - offs[argc];
        argc++;
    }
}

/* Rewrite ARGC arguments into a RESP request owned by a new request. */
static struct request *reqparse_inline_request(const char *buf, const size_t *offs,
                                               const size_t *lens, int argc)
{
    struct request *req = request_new();
    size_t pos;
    char head[32];

    if (req == NULL)
        return NULL;
    req->raw = evbuffer_new();
    pos = (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc);
    evbuffer_add(req->raw, head, pos);
    for (int i = 0; i < argc; i++) {
        int n = snprintf(head, sizeof(head), "$%zu\r\n", lens[i]);
        evbuffer_add(req->raw, head, (size_t)n);
        pos += (size_t)n;
        request_add_arg(req, (uint32_t)pos, (uint32_t)lens[i]);
        evbuffer_add(req->raw, buf + offs[i], lens[i]);
        evbuffer_add(req->raw, "\r\n", 2);
        pos += lens[i] + 2;
    }
    req->raw_len = pos;
    return req;
}

/* The most arguments a LEN-byte line can hold: one byte each, a blank
 * between two. */
static size_t reqparse_inline_max_args(size_t len)
{
    return len / 2 + 1;
}

/* Split LINE (LEN bytes, without its line end) into a new request
 * rewritten as RESP. The scratch space it needs is sized for this line.
 * Returns REQPARSE_REQUEST with *OUT set, REQPARSE_SKIP for a blank line,
 * or REQPARSE_ERROR with P->err set. */
static int reqparse_inline_line(struct reqparse *p, const char *line, size_t len,
                                struct request **out)
{
    size_t max_args = reqparse_inline_max_args(len);
    char *args = malloc(len + 1);
    size_t *offs = malloc(2 * max_args * sizeof(*offs));
    int argc = -2;

    if (args != NULL && offs != NULL)
        argc = reqparse_split_inline(line, len, args, offs, offs + max_args, (int)max_args);
    if (argc > 0) {
        *out = reqparse_inline_request(args, offs, offs + max_args, argc);
        if (*out == NULL)
            argc = -2;
    }
    free(args);
    free(offs);
    if (argc == -1)
        snprintf(p->err, sizeof(p->err), "Protocol error: unbalanced quotes in request");
    else if (argc < 0)
        snprintf(p->err, sizeof(p->err), "Protocol error: out of memory");
    return argc < 0 ? REQPARSE_ERROR : argc > 0 ? REQPARSE_REQUEST : REQPARSE_SKIP;
}

static int reqparse_inline(struct reqparse *p, struct evbuffer *in, struct request **out)
{
    struct evbuffer_ptr eol = evbuffer_search(in, "\n", 1, NULL);
    const char *line;
    size_t len;
    int rc;

    if (eol.pos < 0) {
        if (evbuffer_get_length(in) > REQPARSE_MAX_INLINE) {
            snprintf(p->err, sizeof(p->err), "Protocol error: too big inline request");
            return REQPARSE_ERROR;
        }
        return REQPARSE_MORE;
    }
    len = (size_t)eol.pos;
    line = (const char *)evbuffer_pullup(in, (ssize_t)len + 1);
    if (line == NULL) {
        snprintf(p->err, sizeof(p->err), "Protocol error: out of memory");
        return REQPARSE_ERROR;
    }
    rc = reqparse_inline_line(p, line, (len > 0 && line[len - 1] == '\r') ? len - 1 : len, out);
    if (rc != REQPARSE_ERROR)
        evbuffer_drain(in, len + 1);
    return rc;
}

int reqparse_next(struct reqparse *p, struct evbuffer *in, struct request **out)
{
    unsigned char first;

    *out = NULL;
    if (evbuffer_get_length(in) == 0)
        return REQPARSE_MORE;
    if (p->cur == NULL && evbuffer_copyout(in, &first, 1) == 1 && first != '*') {
        if (p->fed > 0 && reqparse_reset_reader(p) != 0)
            return REQPARSE_ERROR;
        return reqparse_inline(p, in, out);
    }
    return reqparse_resp(p, in, out);
}
