/* respframe.c - owns framing of Redis replies (RESP2 and RESP3) where they
 * lie, in the connection's evbuffer: it reads header lines, skips payloads
 * by arithmetic and never copies or pulls up a reply (a line that straddles
 * two chains is the one thing copied, and it is at most 64 KB).
 *
 * The hot path (respframe_fast) is a new reply in the buffer's first chain:
 * it is read through a plain pointer, lengths parsed as they are scanned,
 * short lines checked byte by byte. Anything else, or anything unusual, goes
 * to the general path (respframe_scan), which resumes at f->pos through a
 * cursor that walks the chains forward: a reply of any size costs time
 * linear in its bytes, plus one walk over the chains of the reply seen so
 * far per call that returns 0 (libevent cannot seek other than from the
 * head; respframe_missing lets a caller make those calls rare). */
#include "respframe.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


/* Results inside the scanner. RF_ERR, RF_MORE, RF_DONE are also the scan's. */
enum {
    RF_ERR = -1,
    RF_MORE = 0,      /* the reply is not all there yet */
    RF_DONE = 1,      /* the reply ends at f->pos */
    RF_VALUE = 2,     /* the line was a whole value */
    RF_OPEN = 3,      /* the line opened an aggregate (or an empty attribute) */
    RF_BULK = 4,      /* the line announced a payload, ending at f->bulk_end */
};

enum respframe_kind {
    RK_BAD, RK_SIMPLE, RK_INT, RK_DOUBLE, RK_BIGNUM, RK_BOOL, RK_NULL, RK_BULK, RK_AGG,
};

/* What each type byte introduces. */
struct respframe_byte {
    unsigned char kind;      /* enum respframe_kind */
    unsigned char type;      /* enum reply_type */
    unsigned char nil_ok;    /* -1 means null (RESP2's $-1 and *-1) */
    unsigned char min_len;   /* shortest payload: a verbatim string has "txt:" */
    unsigned char per;       /* elements per count: 2 for maps and attributes */
    unsigned char attr;      /* annotates the value after it */
};

static const struct respframe_byte respframe_bytes[256] = {
    ['+'] = {RK_SIMPLE, REPLY_STATUS, 0, 0, 0, 0},
    ['-'] = {RK_SIMPLE, REPLY_ERROR, 0, 0, 0, 0},
    [':'] = {RK_INT, REPLY_INTEGER, 0, 0, 0, 0},
    [','] = {RK_DOUBLE, REPLY_DOUBLE, 0, 0, 0, 0},
    ['('] = {RK_BIGNUM, REPLY_BIGNUM, 0, 0, 0, 0},
    ['#'] = {RK_BOOL, REPLY_BOOL, 0, 0, 0, 0},
    ['_'] = {RK_NULL, REPLY_NIL, 0, 0, 0, 0},
    ['$'] = {RK_BULK, REPLY_STRING, 1, 0, 0, 0},
    ['!'] = {RK_BULK, REPLY_ERROR, 0, 0, 0, 0},
    ['='] = {RK_BULK, REPLY_VERB, 0, 4, 0, 0},
    ['*'] = {RK_AGG, REPLY_ARRAY, 1, 0, 1, 0},
    ['~'] = {RK_AGG, REPLY_SET, 0, 0, 1, 0},
    ['>'] = {RK_AGG, REPLY_PUSH, 0, 0, 1, 0},
    ['%'] = {RK_AGG, REPLY_MAP, 0, 0, 2, 0},
    ['|'] = {RK_AGG, REPLY_ATTR, 0, 0, 2, 1},
};

/* A window on the input: the contiguous bytes [run_off, run_off + run_len)
 * of IN. It only moves forward within one call. */
struct respframe_cur {
    struct evbuffer *in;
    size_t total;                /* bytes in IN */
    const char *run;
    size_t run_off, run_len;
    struct evbuffer_ptr ptr;     /* at run_off, once has_ptr */
    int has_ptr;                 /* 0: run is the first chain, found without a ptr */
};

void respframe_init(struct respframe *f)
{
    f->pos = 0;
    f->line_seen = 0;
    f->bulk_end = 0;
    f->bulk_start = 0;
    f->push_kind_wait = 0;
    f->verb_colon = 0;
    f->missing = 0;
    f->type = 0;
    f->depth = 0;
    f->deep = NULL;
    f->deep_cap = 0;
    f->line_max = RESPFRAME_LINE_MAX;
    f->err[0] = '\0';
}

void respframe_release(struct respframe *f)
{
    free(f->deep);
    f->deep = NULL;
    f->deep_cap = 0;
}

/* Level I of the open aggregates (0 <= I < depth). */
static inline struct respframe_level *respframe_level_at(struct respframe *f, int i)
{
    return i < RESPFRAME_STACK_INLINE ? &f->stack[i] : &f->deep[i - RESPFRAME_STACK_INLINE];
}

/* Room for one more open aggregate: the inline stack, then the heap,
 * grown by doubling. NULL past RESPFRAME_MAX_DEPTH or out of memory. */
static struct respframe_level *respframe_push(struct respframe *f)
{
    int i = f->depth - RESPFRAME_STACK_INLINE;

    if (i < 0)
        return &f->stack[f->depth];
    if (f->depth >= RESPFRAME_MAX_DEPTH)
        return NULL;
    if (i >= f->deep_cap) {
        int cap = f->deep_cap > 0 ? 2 * f->deep_cap : RESPFRAME_STACK_INLINE;
        struct respframe_level *grown = realloc(f->deep, sizeof(*grown) * (size_t)cap);
        if (grown == NULL)
            return NULL;
        f->deep = grown;
        f->deep_cap = cap;
    }
    return &f->deep[i];
}

size_t respframe_missing(const struct respframe *f)
{
    return f->missing;
}

static int respframe_fail(struct respframe *f, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    if (f->err[0] == '\0')
        snprintf(f->err, sizeof f->err, "protocol error");
    respframe_release(f);
    return RF_ERR;
}

/* Parse S[0..N) as a decimal int64 the way Redis writes one: an optional
 * '-', then digits without leading zeros ("0" itself, but not "-0").
 * Returns 0 and *OUT, or -1. */
static int respframe_int(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    int neg = 0;

    if (n > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || n - i > 19 || (s[i] == '0' && (n - i > 1 || neg)))
        return -1;
    for (; i < n; i++) {
        unsigned digit = (unsigned)(unsigned char)s[i] - '0';
        if (digit > 9)
            return -1;
        v = v * 10 + digit;      /* 19 digits cannot overflow 64 bits */
    }
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static size_t respframe_digits(const char *s, size_t n)
{
    size_t i = 0;

    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

/* A RESP3 double: inf, -inf, nan (any case, as hiredis 1.x allows, and its
 * -nan), or [-]digits[.digits][e[+-]digits] with a digit in the mantissa. */
static int respframe_double_ok(const char *s, size_t n)
{
    size_t i = 0, mant;

    if ((n == 3 && (strncasecmp(s, "inf", 3) == 0 || strncasecmp(s, "nan", 3) == 0)) ||
        (n == 4 && (strncasecmp(s, "-inf", 4) == 0 || strncasecmp(s, "-nan", 4) == 0)))
        return 1;
    if (i < n && s[i] == '-')
        i++;
    mant = respframe_digits(s + i, n - i);
    i += mant;
    if (i < n && s[i] == '.') {
        size_t frac = respframe_digits(s + i + 1, n - i - 1);
        i += 1 + frac;
        mant += frac;
    }
    if (mant == 0)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        exp = respframe_digits(s + i, n - i);
        if (exp == 0)
            return 0;
        i += exp;
    }
    return i == n;
}

static int respframe_bad_number(struct respframe *f, const char *p, size_t n, const char *what)
{
    if (n == 2 && p[1] == '?')
        return respframe_fail(f, "streamed RESP3 '%c?' replies are not supported", p[0]);
    return respframe_fail(f, "invalid %s in a '%c' line", what, p[0]);
}

/* Take in the header line P[0..N) (its CRLF excluded) of the value at
 * f->pos; NEXT is the offset just past its CRLF. Returns RF_VALUE, RF_OPEN
 * (a level pushed, or an empty attribute), RF_BULK (f->bulk_end set) or
 * RF_ERR. */
static int respframe_line(struct respframe *f, const char *p, size_t n, size_t next)
{
    const struct respframe_byte *b = &respframe_bytes[(unsigned char)p[0]];
    /* Redis names a push's kind with a bulk string, its first value: a
     * blob error or verbatim string saying "message", or one behind an
     * attribute (even an empty one), is a counted value like any. */
    int kind_next = f->push_kind_wait && p[0] == '$';
    struct respframe_level *level;
    int64_t v;

    f->push_kind_wait = 0;
    if (f->depth == 0)
        f->type = b->type;
    switch (b->kind) {
    case RK_SIMPLE:
    case RK_BIGNUM:
        /* A big number's digits are not checked: Redis passes on what a
         * script returns as {big_number=...} as it is ("123  123"). */
        if (n > 1 && memchr(p + 1, '\n', n - 1) != NULL)
            return respframe_fail(f, "bare LF in a '%c' line", p[0]);
        return RF_VALUE;
    case RK_INT:
        if (respframe_int(p + 1, n - 1, &v) < 0)
            return respframe_bad_number(f, p, n, "integer");
        return RF_VALUE;
    case RK_DOUBLE:
        if (!respframe_double_ok(p + 1, n - 1))
            return respframe_bad_number(f, p, n, "double");
        return RF_VALUE;
    case RK_BOOL:
        if (n != 2 || (p[1] != 't' && p[1] != 'f'))
            return respframe_fail(f, "invalid boolean in a '#' line");
        return RF_VALUE;
    case RK_NULL:
        if (n != 1)
            return respframe_fail(f, "junk after '_'");
        return RF_VALUE;
    case RK_BULK:
        if (respframe_int(p + 1, n - 1, &v) < 0)
            return respframe_bad_number(f, p, n, "length");
        if (v == -1 && b->nil_ok) {
            if (f->depth == 0)
                f->type = REPLY_NIL;
            return RF_VALUE;
        }
        if (v < b->min_len || v > RESPFRAME_BULK_MAX)
            return respframe_bad_number(f, p, n, "length");
        f->bulk_end = next + (size_t)v + 2;
        f->bulk_start = next;
        f->push_kind_wait = kind_next;
        if (b->min_len != 0)
            f->verb_colon = next + 3;
        return RF_BULK;
    case RK_AGG:
        if (respframe_int(p + 1, n - 1, &v) < 0)
            return respframe_bad_number(f, p, n, "count");
        if (v == -1 && b->nil_ok) {
            if (f->depth == 0)
                f->type = REPLY_NIL;
            return RF_VALUE;
        }
        if (v < 0 || v > RESPFRAME_COUNT_MAX)
            return respframe_bad_number(f, p, n, "count");
        if (v == 0)
            return b->attr ? RF_OPEN : RF_VALUE;
        if ((level = respframe_push(f)) == NULL)
            return respframe_fail(f, "replies nested deeper than %d", RESPFRAME_MAX_DEPTH);
        level->left = (uint64_t)v * b->per;
        level->attr = b->attr;
        level->uncounted = 0;
        f->push_kind_wait = b->type == REPLY_PUSH && f->depth > 0;
        f->depth++;
        return RF_OPEN;
    default:
        return respframe_fail(f, "invalid reply type byte 0x%02x", (unsigned char)p[0]);
    }
}

/* A value ended: count it off the open aggregates, closing those it
 * completes. Returns 1 when that finishes the whole reply. */
static inline int respframe_value_done(struct respframe *f)
{
    while (f->depth > 0) {
        struct respframe_level *l = respframe_level_at(f, f->depth - 1);
        if (--l->left > 0)
            return 0;
        f->depth--;
        if (l->attr)
            return 0;   /* the value it annotates comes next, in the same place */
        if (l->uncounted)
            return 0;   /* not one of its aggregate's values */
    }
    return 1;
}

/* Move the run forward to start at OFF (run_off <= OFF < total). */
static int respframe_seek(struct respframe_cur *c, size_t off)
{
    struct evbuffer_iovec v;
    int rc;

    if (c->has_ptr)
        rc = evbuffer_ptr_set(c->in, &c->ptr, off - c->run_off, EVBUFFER_PTR_ADD);
    else
        rc = evbuffer_ptr_set(c->in, &c->ptr, off, EVBUFFER_PTR_SET);
    c->has_ptr = 1;
    if (rc < 0 || evbuffer_peek(c->in, -1, &c->ptr, &v, 1) < 1 || v.iov_len == 0)
        return -1;
    c->run = v.iov_base;
    c->run_off = off;
    c->run_len = v.iov_len;
    return 0;
}

/* Set *OUT to point at OFF (run_off <= OFF < total). */
static int respframe_ptr_at(struct respframe_cur *c, size_t off, struct evbuffer_ptr *out)
{
    if (off - c->run_off >= c->run_len) {
        if (respframe_seek(c, off) < 0)
            return -1;
        *out = c->ptr;
        return 0;
    }
    if (!c->has_ptr)    /* OFF is in the first chain: a one-step walk */
        return evbuffer_ptr_set(c->in, out, off, EVBUFFER_PTR_SET);
    *out = c->ptr;
    return evbuffer_ptr_set(c->in, out, off - c->run_off, EVBUFFER_PTR_ADD);
}

/* Copy the N bytes at OFF (run_off <= OFF, OFF + N <= total) into OUT. */
static int respframe_copy(struct respframe_cur *c, size_t off, char *out, size_t n)
{
    size_t at = off - c->run_off;
    struct evbuffer_ptr p;

    if (at < c->run_len && c->run_len - at >= n) {
        memcpy(out, c->run + at, n);
        return 0;
    }
    if (respframe_ptr_at(c, off, &p) < 0 ||
        evbuffer_copyout_from(c->in, &p, out, n) != (ev_ssize_t)n)
        return -1;
    return 0;
}

/* The end of a payload: once all of it is in, check the CRLF after it (and
 * a verbatim string's ':'). Returns RF_VALUE, RF_MORE or RF_ERR. */
static int respframe_bulk_tail(struct respframe *f, struct respframe_cur *c)
{
    char tail[2];

    if (f->bulk_end > c->total)
        return RF_MORE;
    if (f->verb_colon != 0) {
        if (respframe_copy(c, f->verb_colon, tail, 1) < 0)
            return respframe_fail(f, "cannot read the input buffer");
        if (tail[0] != ':')
            return respframe_fail(f, "verbatim string without a 3-byte format and ':'");
        f->verb_colon = 0;
    }
    if (respframe_copy(c, f->bulk_end - 2, tail, 2) < 0)
        return respframe_fail(f, "cannot read the input buffer");
    if (tail[0] != '\r' || tail[1] != '\n')
        return respframe_fail(f, "payload not followed by CRLF");
    f->pos = f->bulk_end;
    f->bulk_end = 0;
    return RF_VALUE;
}

/* Fast path: the digits at P up to END, as a length or count Redis writes:
 * 1..MAXDIGITS digits, no sign, no leading zero, then CRLF. Returns the
 * byte past the CRLF with *OUT, or NULL for anything else (the general path
 * judges it). */
static inline const char *respframe_fast_uint(const char *p, const char *end, long maxdigits,
                                              uint64_t *out)
{
    const char *q = p;
    uint64_t v = 0;

    while (q < end && (unsigned)(*q - '0') <= 9) {
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (q == p || q - p > maxdigits || (*p == '0' && q - p > 1) || end - q < 2 ||
        q[0] != '\r' || q[1] != '\n')
        return NULL;
    *out = v;
    return q + 2;
}

/* Fast path: a short simple line's content at P. Returns the byte past its
 * CRLF, or NULL when it is long, not all there, or has a bare CR or LF. */
static inline const char *respframe_fast_simple(const char *p, const char *end)
{
    const char *lim = end - p > 32 ? p + 32 : end;

    for (; p < lim; p++) {
        if (*p == '\r')
            return p + 1 < end && p[1] == '\n' ? p + 2 : NULL;
        if (*p == '\n')
            return NULL;
    }
    return NULL;
}

/* Read values from P, the start of a line, up to END, the end of a
 * contiguous run, with plain pointer arithmetic: the common small replies
 * (RESP2 types, and RESP3's null, boolean, map, set and push) in their usual
 * form. Returns 1 when that completes the reply, with *STOP just past it and
 * *TYPE set; 0 when it meets anything else or the end of the run, with
 * *STOP at the line it did not take (f->depth and the stack are kept up to
 * date), for the general path to judge. */
static inline __attribute__((always_inline))   /* in the hot path's frame */
int respframe_fast(struct respframe *f, const char *p, const char *end, const char **stop,
                   int *type)
{
    const char *q;
    uint64_t v;

    while (end - p >= 3) {
        const struct respframe_byte *b = &respframe_bytes[(unsigned char)*p];
        int t = b->type;

        switch (b->kind) {
        case RK_SIMPLE:
            q = respframe_fast_simple(p + 1, end);
            break;
        case RK_INT:
            q = respframe_fast_uint(p + 1 + (p[1] == '-'), end, 18, &v);
            if (q != NULL && v == 0 && p[1] == '-')
                q = NULL;
            break;
        case RK_NULL:
            q = p[1] == '\r' && p[2] == '\n' ? p + 3 : NULL;
            break;
        case RK_BOOL:
            q = end - p >= 4 && (p[1] == 't' || p[1] == 'f') && p[2] == '\r' && p[3] == '\n'
                    ? p + 4 : NULL;
            break;
        case RK_BULK:
        case RK_AGG:
            if (p[1] == '-') {
                q = b->nil_ok && end - p >= 5 && memcmp(p + 1, "-1\r\n", 4) == 0 ? p + 5 : NULL;
                t = REPLY_NIL;
                break;
            }
            if (b->min_len != 0 || b->attr || (t == REPLY_PUSH && f->depth > 0))
                goto out;   /* verbatim strings, attributes, nested pushes: the general path */
            q = respframe_fast_uint(p + 1, end, b->kind == RK_BULK ? 12 : 9, &v);
            if (q == NULL)
                break;
            if (b->kind == RK_BULK) {
                if ((size_t)(end - q) < v + 2 || q[v] != '\r' || q[v + 1] != '\n')
                    goto out;
                q += v + 2;
            } else if (v > 0) {
                if (f->depth >= RESPFRAME_STACK_INLINE)
                    goto out;   /* deeper: the general path grows the stack */
                if (f->depth == 0)
                    f->type = t;
                f->stack[f->depth].left = v * b->per;
                f->stack[f->depth].attr = 0;
                f->stack[f->depth].uncounted = 0;
                f->depth++;
                p = q;
                continue;
            }
            break;
        default:
            goto out;
        }
        if (q == NULL)
            goto out;
        p = q;
        if (f->depth == 0) {
            *type = t;
            *stop = p;
            return 1;
        }
        if (respframe_value_done(f)) {
            *type = f->type;
            *stop = p;
            return 1;
        }
    }
out:
    *stop = p;
    return 0;
}

int respframe_is_message_kind(const char *kind, size_t len)
{
    static const char *const kinds[] = {"message", "pmessage", "smessage"};

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strlen(kinds[i]) == len && memcmp(kind, kinds[i], len) == 0)
            return 1;
    }
    return 0;
}

/* The first value of a push inside an aggregate, a bulk that just ended
 * at f->pos, is its kind. Redis 7.0 writes a message to a RESP3 subscriber
 * where it is, even inside EXEC's array (its own PUBLISH in the
 * transaction), and does not count it there: neither does sluice, or the
 * array would end early and its last value pair with the next request.
 * A queued SUBSCRIBE's confirmation is the value of its slot: counted.
 * The kind lies behind the cursor: it is read from the head of the input
 * (rare: only pushes inside aggregates). Returns 0, or -1 (RF_ERR set). */
static int respframe_push_kind(struct respframe *f, struct respframe_cur *c)
{
    struct respframe_level *l = respframe_level_at(f, f->depth - 1);
    size_t len = f->pos - 2 - f->bulk_start;
    struct evbuffer_ptr at;
    char kind[RESPFRAME_KIND_MAX];

    if (len > sizeof(kind))
        return 0;
    if (evbuffer_ptr_set(c->in, &at, f->bulk_start, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(c->in, &at, kind, len) != (ev_ssize_t)len)
        return respframe_fail(f, "cannot read the input buffer");
    l->uncounted = respframe_is_message_kind(kind, len);
    return 0;
}

int respframe_is_message_push(struct evbuffer *in, size_t len)
{
    /* ">N\r\n$L\r\nkind": a count of up to 10 digits, a length of 1 */
    char head[16 + 4 + RESPFRAME_KIND_MAX];
    size_t n = len < sizeof(head) ? len : sizeof(head);
    const char *lf;

    if (evbuffer_copyout(in, head, n) != (ev_ssize_t)n || n == 0 || head[0] != '>' ||
        (lf = memchr(head, '\n', n)) == NULL)
        return 0;
    n -= (size_t)(lf + 1 - head);
    lf++;
    if (n < 6 || lf[0] != '$' || lf[1] < '1' || lf[1] > '0' + RESPFRAME_KIND_MAX ||
        memcmp(lf + 2, "\r\n", 2) != 0 || n < 4 + (size_t)(lf[1] - '0'))
        return 0;
    return respframe_is_message_kind(lf + 4, (size_t)(lf[1] - '0'));
}

/* The line at f->pos where it is not whole in the run: find its CR across
 * chains (from line_seen on, which is remembered when the line is still
 * open), then copy it out to parse it. Returns respframe_line's result, or
 * RF_MORE, or RF_ERR (also for a line longer than f->line_max). */
static int respframe_line_slow(struct respframe *f, struct respframe_cur *c)
{
    size_t off = f->pos + f->line_seen, limit = f->pos + f->line_max + 1, len;
    struct evbuffer_ptr start;
    char small[256], *line;
    int rc;

    if (respframe_ptr_at(c, f->pos, &start) < 0)
        return respframe_fail(f, "cannot read the input buffer");
    for (;;) {
        const char *cr;
        size_t at, n;

        if (off >= limit)
            return respframe_fail(f, "line too long");
        if (off >= c->total) {
            f->line_seen = off - f->pos;
            return RF_MORE;
        }
        at = off - c->run_off;
        if (at >= c->run_len) {
            if (respframe_seek(c, off) < 0)
                return respframe_fail(f, "cannot read the input buffer");
            at = 0;
        }
        n = c->run_len - at < limit - off ? c->run_len - at : limit - off;
        cr = memchr(c->run + at, '\r', n);
        if (cr != NULL) {
            off += (size_t)(cr - (c->run + at));
            break;
        }
        off += n;
    }
    f->line_seen = off - f->pos;
    if (off + 1 >= c->total)
        return RF_MORE;
    len = off - f->pos;
    line = len + 2 <= sizeof small ? small : malloc(len + 2);
    if (line == NULL)
        return respframe_fail(f, "out of memory");
    if (evbuffer_copyout_from(c->in, &start, line, len + 2) != (ev_ssize_t)(len + 2)) {
        rc = respframe_fail(f, "cannot read the input buffer");
    } else if (line[len + 1] != '\n') {
        rc = respframe_fail(f, "bare CR in a line");
    } else {
        f->line_seen = 0;
        rc = respframe_line(f, line, len, f->pos + len + 2);
        f->pos += len + 2;
    }
    if (line != small)
        free(line);
    return rc;
}

/* Read values from f->pos until the reply is complete (RF_DONE), the input
 * runs out (RF_MORE) or it is malformed (RF_ERR). */
static int respframe_scan(struct respframe *f, struct respframe_cur *c)
{
    for (;;) {
        const char *p, *cr = NULL;
        size_t at, avail;
        int rc;

        if (f->bulk_end != 0) {
            rc = respframe_bulk_tail(f, c);
            if (rc == RF_VALUE && f->push_kind_wait && respframe_push_kind(f, c) < 0)
                return RF_ERR;
        } else {
            if (f->pos >= c->total)
                return RF_MORE;
            at = f->pos - c->run_off;
            if (at >= c->run_len) {
                if (respframe_seek(c, f->pos) < 0)
                    return respframe_fail(f, "cannot read the input buffer");
                at = 0;
            }
            p = c->run + at;
            if (f->line_seen == 0 && !f->push_kind_wait) {
                const char *stop;
                rc = respframe_fast(f, p, c->run + c->run_len, &stop, &f->type);
                f->pos += (size_t)(stop - p);
                if (rc == 1)
                    return RF_DONE;
                if (stop != p)
                    continue;
            }
            avail = c->run_len - at;
            if (avail > f->line_max + 2)
                avail = f->line_max + 2;
            if (f->line_seen < avail)
                cr = memchr(p + f->line_seen, '\r', avail - f->line_seen);
            if (cr != NULL && cr + 1 < p + avail) {
                size_t len = (size_t)(cr - p);
                if (cr[1] != '\n')
                    return respframe_fail(f, "bare CR in a line");
                f->line_seen = 0;
                rc = respframe_line(f, p, len, f->pos + len + 2);
                f->pos += len + 2;
            } else {
                rc = respframe_line_slow(f, c);
            }
        }
        if (rc == RF_VALUE) {
            f->push_kind_wait = 0;
            if (respframe_value_done(f))
                return RF_DONE;
        } else if (rc != RF_OPEN && rc != RF_BULK) {
            return rc;
        }
    }
}

/* A lower bound on the bytes still to come: the rest of the current value,
 * then at least a type byte and a CRLF for each value known to follow. */
static size_t respframe_min_missing(const struct respframe *f, size_t total)
{
    uint64_t values = 0;
    size_t now;

    for (int i = 0; i < f->depth; i++) {
        const struct respframe_level *l = respframe_level_at((struct respframe *)f, i);
        values += l->left - 1 + (uint64_t)l->attr;
    }
    if (f->bulk_end != 0)
        now = f->bulk_end - total;
    else if (f->pos < total)
        now = 1;             /* a line's CR or LF at least */
    else
        now = 3;
    return now + 3 * values;
}

/* The general path: resume the scan at f->pos over all of IN's chains.
 * Kept out of line so the hot path's frame stays small. */
__attribute__((noinline)) static ssize_t respframe_resume(struct respframe *f,
                                                          struct evbuffer *in, int *type)
{
    struct respframe_cur c;
    struct evbuffer_iovec v;
    size_t len;
    int rc;

    c.in = in;
    c.total = evbuffer_get_length(in);
    c.has_ptr = 0;
    c.run_off = 0;
    c.run = NULL;
    c.run_len = 0;
    if (c.total > 0 && evbuffer_peek(in, -1, NULL, &v, 1) == 1) {
        c.run = v.iov_base;
        c.run_len = v.iov_len;
    }
    rc = respframe_scan(f, &c);
    if (rc == RF_DONE) {
        len = f->pos;
        *type = f->type;
        f->pos = 0;
        if (f->deep != NULL)
            respframe_release(f);   /* a very deep reply is rare: hold nothing after it */
        return (ssize_t)len;
    }
    if (rc == RF_MORE)
        f->missing = respframe_min_missing(f, c.total);
    return rc;
}

ssize_t respframe_next(struct respframe *f, struct evbuffer *in, int *type)
{
    if (f->err[0] != '\0')
        return -1;
    if ((f->pos | f->line_seen) == 0) {     /* a new reply */
        size_t first = evbuffer_get_contiguous_space(in);
        /* Pulling up no more than the first chain holds copies nothing. */
        const char *head = first > 0 ? (const char *)evbuffer_pullup(in, (ev_ssize_t)first) : NULL;
        if (head != NULL) {
            const char *stop;
            if (respframe_fast(f, head, head + first, &stop, type))
                return stop - head;
            f->pos = (size_t)(stop - head);
        }
    }
    return respframe_resume(f, in, type);
}
