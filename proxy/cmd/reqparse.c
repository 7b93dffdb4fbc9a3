/* reqparse.c - owns request framing. A RESP request is framed here by
 * reading its length lines and skipping its payloads by arithmetic, so no
 * byte is copied: each argument is recorded as an offset into the client's
 * input buffer, and framing resumes where it stopped when more bytes come.
 * Inline commands are split here and rewritten as RESP, so the rest of
 * sluice sees one form. Lines are read as Redis reads them: up to the first
 * '\r', whatever byte follows it.
 *
 *   input evbuffer: | request 1 | request 2 | partial ...  |
 *                   ^ offset 0               ^ p->pos (framed up to)
 */
#include "reqparse.h"

#include <event2/buffer.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "value.h"

#define REQPARSE_MAX_INLINE (64 * 1024)
/* A bulk length line holds at most this many bytes after the '$': no valid
 * length is longer, so a longer one is refused without waiting for more. */
#define REQPARSE_LEN_LINE 32

/* The head of the input as one contiguous piece (its first chain), where
 * small requests are framed without asking libevent for each line. */
struct reqparse_head {
    const char *ptr;
    size_t len;
};

static int reqparse_fail(struct reqparse *p, const char *fmt, char got)
{
    snprintf(p->err, sizeof(p->err), fmt, got);
    return REQPARSE_ERROR;
}

/* Parse LEN bytes as Redis's string2ll does: an optional '-', then digits
 * without a leading zero (or just "0"), no overflow. Returns 1 and sets *V,
 * or 0. */
static int reqparse_ll(const char *s, size_t len, long long *v)
{
    unsigned long long n = 0, limit = (unsigned long long)LLONG_MAX;
    size_t i = 0;
    int neg = 0;

    if (len == 1 && s[0] == '0') {
        *v = 0;
        return 1;
    }
    if (len > 0 && s[0] == '-') {
        neg = 1;
        limit++;
        i++;
    }
    if (i >= len || s[i] < '1' || s[i] > '9')
        return 0;
    if (len - i <= 18) {
        /* Every length on the wire: 18 digits cannot overflow, so no
         * check per digit beyond being one. */
        for (; i < len; i++) {
            if ((unsigned char)(s[i] - '0') > 9)
                return 0;
            n = n * 10 + (unsigned)(s[i] - '0');
        }
    }
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || n > (limit - (unsigned)(s[i] - '0')) / 10)
            return 0;
        n = n * 10 + (unsigned)(s[i] - '0');
    }
    *v = neg ? (long long)(0 - n) : (long long)n;
    return 1;
}

/* The line at offset POS of IN, looked for in at most LIMIT bytes. Points
 * *LINE at it (in the head chain, or at its first REQPARSE_LEN_LINE bytes
 * copied into BUF) and returns its length before the '\r'; -1 when the '\r'
 * has not come yet; -2 when LIMIT bytes have come without one. */
static long reqparse_line(struct evbuffer *in, const struct reqparse_head *h, size_t pos,
                          size_t limit, char *buf, const char **line)
{
    size_t avail = evbuffer_get_length(in) - pos, look = avail < limit ? avail : limit, len;
    struct evbuffer_ptr at, end;
    const char *cr;

    if (look == 0)
        return -1;
    if (pos < h->len) {
        size_t n = h->len - pos < look ? h->len - pos : look;
        *line = h->ptr + pos;
        cr = memchr(*line, '\r', n);
        if (cr != NULL)
            return (long)(cr - *line);
        if (n == look)
            return avail >= limit ? -2 : -1;
    }
    /* The line goes on past the head chain: find its end, and copy what
     * a valid line can hold. */
    if (evbuffer_ptr_set(in, &at, pos, EVBUFFER_PTR_SET) != 0)
        return -1;
    end = evbuffer_search(in, "\r", 1, &at);
    if (end.pos < 0 || (size_t)end.pos - pos >= look)
        return avail >= limit ? -2 : -1;
    len = (size_t)end.pos - pos;
    evbuffer_copyout_from(in, &at, buf, len < REQPARSE_LEN_LINE ? len : REQPARSE_LEN_LINE);
    *line = buf;
    return (long)len;
}

/* reqparse_bulk_header's answer when the length line was read. */
#define REQPARSE_HEADER_READ (-1)

/* Read the length line of the next bulk string at p->pos: sets p->bulk_len
 * and moves p->pos to its payload. Returns REQPARSE_HEADER_READ,
 * REQPARSE_MORE or REQPARSE_ERROR. */
static int reqparse_bulk_header(struct reqparse *p, struct evbuffer *in,
                                const struct reqparse_head *h)
{
    size_t have = evbuffer_get_length(in);
    char buf[REQPARSE_LEN_LINE];
    struct evbuffer_ptr at;
    const char *line;
    long long n;
    long len;

    if (p->pos >= have)
        return REQPARSE_MORE;
    if (p->pos < h->len)
        buf[0] = h->ptr[p->pos];
    else if (evbuffer_ptr_set(in, &at, p->pos, EVBUFFER_PTR_SET) != 0 ||
             evbuffer_copyout_from(in, &at, buf, 1) != 1)
        return REQPARSE_MORE;
    if (buf[0] != '$')
        return reqparse_fail(p, "Protocol error: expected '$', got '%c'", buf[0]);
    len = reqparse_line(in, h, p->pos + 1, REQPARSE_LEN_LINE, buf, &line);
    if (len == -2)
        return reqparse_fail(p, "Protocol error: invalid bulk length%c", '\0');
    if (len < 0)
        return REQPARSE_MORE;
    if (!reqparse_ll(line, (size_t)len, &n) || n < 0 || n > p->limits->max_bulk_len)
        return reqparse_fail(p, "Protocol error: invalid bulk length%c", '\0');
    if (p->must_login && n > REQPARSE_LOGIN_MAX_BULK_LEN)
        return reqparse_fail(p, "Protocol error: unauthenticated bulk length%c", '\0');
    if (p->pos + 1 + (size_t)len + 2 > have)
        return REQPARSE_MORE;   /* the byte after '\r' is not there yet */
    p->pos += 1 + (size_t)len + 2;
    p->bulk_len = n;
    return REQPARSE_HEADER_READ;
}

/* Frame the arguments of p->cur from p->pos on, as far as IN goes. */
static int reqparse_args(struct reqparse *p, struct evbuffer *in, const struct reqparse_head *h,
                         struct request **out)
{
    size_t have = evbuffer_get_length(in);
    struct request *req;

    while (p->args_left > 0) {
        if (p->bulk_len < 0) {
            int rc = reqparse_bulk_header(p, in, h);
            if (rc != REQPARSE_HEADER_READ)
                return rc;
        }
        if (have - p->pos < (size_t)p->bulk_len + 2)
            return REQPARSE_MORE;
        if (request_add_arg(p->cur, p->pos, (size_t)p->bulk_len) != 0)
            return reqparse_fail(p, "Protocol error: out of memory%c", '\0');
        p->pos += (size_t)p->bulk_len + 2;
        p->bulk_len = -1;
        p->args_left--;
    }
    req = p->cur;
    req->raw_len = p->pos;
    p->cur = NULL;
    p->pos = 0;
    *out = req;
    return REQPARSE_REQUEST;
}

/* A request's first line, "*<count>\r\n", at the head of IN. Like Redis,
 * a line longer than an inline command may be is refused; *0 and *-1 are
 * empty commands. */
static int reqparse_count(struct reqparse *p, struct evbuffer *in, const struct reqparse_head *h,
                          struct request **out)
{
    char buf[REQPARSE_LEN_LINE];
    const char *line;
    long long n;
    long len = reqparse_line(in, h, 0, REQPARSE_MAX_INLINE + 1, buf, &line);

    if (len == -2)
        return reqparse_fail(p, "Protocol error: too big mbulk count string%c", '\0');
    if (len < 0 || (size_t)len + 2 > evbuffer_get_length(in))
        return REQPARSE_MORE;
    if (len > REQPARSE_LEN_LINE || !reqparse_ll(line + 1, (size_t)len - 1, &n) ||
        n > INT_MAX || n > p->limits->max_multibulk_len)
        return reqparse_fail(p, "Protocol error: invalid multibulk length%c", '\0');
    if (p->must_login && n > REQPARSE_LOGIN_MAX_ARGS)
        return reqparse_fail(p, "Protocol error: unauthenticated multibulk length%c", '\0');
    if (n <= 0) {   /* *0, *-1, *-10...: Redis skips any count up to 0 silently */
        evbuffer_drain(in, (size_t)len + 2);
        return REQPARSE_SKIP;
    }
    p->cur = request_new();
    if (p->cur == NULL)
        return reqparse_fail(p, "Protocol error: out of memory%c", '\0');
    p->pos = (size_t)len + 2;
    p->args_left = n;
    p->bulk_len = -1;
    return reqparse_args(p, in, h, out);
}

int reqparse_init(struct reqparse *p, const struct reqparse_limits *limits)
{
    memset(p, 0, sizeof(*p));
    p->limits = limits;
    p->bulk_len = -1;
    return 0;
}

void reqparse_free(struct reqparse *p)
{
    request_free(p->cur);
    p->cur = NULL;
}

static int reqparse_resp(struct reqparse *p, struct evbuffer *in, struct request **out)
{
    struct reqparse_head h = {NULL, 0};
    struct evbuffer_iovec v;

    /* Waiting for a payload: nothing to look at until all of it is here. */
    if (p->cur != NULL && p->bulk_len >= 0 &&
        evbuffer_get_length(in) - p->pos < (size_t)p->bulk_len + 2)
        return REQPARSE_MORE;
    if (evbuffer_peek(in, -1, NULL, &v, 1) >= 1) {
        h.ptr = v.iov_base;
        h.len = v.iov_len;
    }
    if (p->cur == NULL)
        return reqparse_count(p, in, &h, out);
    return reqparse_args(p, in, &h, out);
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
            if (e == 'x' && *i + 2 < len && value_hex_digit(line[*i + 1]) >= 0 &&
                value_hex_digit(line[*i + 2]) >= 0) {
                out[(*o)++] = (char)(value_hex_digit(line[*i + 1]) * 16 + value_hex_digit(line[*i + 2]));
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
        return reqparse_inline(p, in, out);
    }
    return reqparse_resp(p, in, out);
}
