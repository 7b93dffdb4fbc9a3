/* respframe_diff.h - differential check of respframe against hiredis 0.14's
 * reader (and against a small strict RESP2/RESP3 reader written here, so that a
 * reply respframe wrongly refuses or wrongly accepts is caught even where
 * hiredis is lenient). For tests and fuzz targets only; include it in one
 * .c file and link the sluice library objects and -lhiredis -levent.
 *
 *   int rc = respframe_diff(data, len, step, why, sizeof why);
 *
 * Frames DATA with respframe (fed STEP bytes at a time, each piece its own
 * evbuffer chain, calling respframe_next after each append; 0 = all at
 * once, in one chain), with hiredis (all at
 * once) and with the strict reader, and returns:
 *   RFDIFF_AGREE     same replies (lengths, types) and the same ending;
 *   RFDIFF_EXPECTED  a known, accepted divergence (see below) was reached;
 *   RFDIFF_MISMATCH  a bug: WHY says which reply and how.
 *
 * Expected divergences (respframe is stricter, or hiredis cannot follow):
 *  - hiredis 0.14 does not check the CRLF after a bulk payload ("$3\r\nfooXY"),
 *    accepts a bare CR or LF inside + - : lines, and does not parse ':'
 *    integers at all (":abc" is an integer to it); respframe refuses these.
 *  - hiredis refuses any aggregate nested below 8 others ("depth > 7");
 *    respframe allows RESPFRAME_MAX_DEPTH open aggregates.
 *  - hiredis accepts counts up to INT_MAX and bulk lengths up to SIZE_MAX;
 *    respframe counts up to 1<<31 and lengths up to 1<<40.
 *  - hiredis refuses RESP3 type bytes; respframe frames them (RESP3 replies
 *    are compared with the strict reader only, which knows RESP3 too).
 *  - hiredis errors on a bad type byte as soon as it sees it; respframe waits
 *    for the line's CRLF (and errors then), so with the input cut short
 *    respframe may want more where hiredis has already failed.
 *  - hiredis has no line length limit; respframe refuses lines over
 *    RESPFRAME_LINE_MAX (as long as a bulk may be).
 * Everything else must agree, and every reply respframe accepts must be
 * valid RESP2 (or RESP3) of exactly that length. */
#ifndef SLUICE_RESPFRAME_DIFF_H
#define SLUICE_RESPFRAME_DIFF_H

#include <errno.h>
#include <event2/buffer.h>
#include <hiredis/read.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "request.h"
#include "respframe.h"

enum { RFDIFF_AGREE = 0, RFDIFF_EXPECTED = 1, RFDIFF_MISMATCH = 2 };
enum { RFD_INVALID = -1, RFD_INCOMPLETE = 0, RFD_VALID = 1 };

#define RFDIFF_MAX_FRAMES 64
#define RFDIFF_HIREDIS_MAX_LEVEL 8   /* an aggregate inside 8 others is refused */

struct rfdiff_frames {
    int count;
    size_t len[RFDIFF_MAX_FRAMES];
    int type[RFDIFF_MAX_FRAMES];
    int level[RFDIFF_MAX_FRAMES];    /* strict reader: deepest aggregate header */
    int resp3[RFDIFF_MAX_FRAMES];    /* strict reader: uses RESP3 types */
    int end;                         /* RFD_INVALID or RFD_INCOMPLETE */
    char err[128];
};

/* Strict reader: one line at S[0..N); *LINE_LEN excludes the CRLF. */
static int rfdiff_line(const char *s, size_t n, size_t *line_len)
{
    size_t max = n < RESPFRAME_LINE_MAX + 1 ? n : RESPFRAME_LINE_MAX + 1;

    for (size_t i = 0; i < max; i++) {
        if (s[i] != '\r')
            continue;
        if (i + 1 >= n)
            return RFD_INCOMPLETE;
        if (s[i + 1] != '\n')
            return RFD_INVALID;
        *line_len = i;
        return RFD_VALID;
    }
    return n > RESPFRAME_LINE_MAX ? RFD_INVALID : RFD_INCOMPLETE;
}

/* Strict reader: S[0..N) as Redis prints an integer, via strtoll. */
static int rfdiff_int(const char *s, size_t n, long long *out)
{
    char buf[32], *end;
    size_t digits = n > 0 && s[0] == '-' ? n - 1 : n;
    const char *first = s + (n - digits);

    if (digits == 0 || n >= sizeof buf || (first[0] == '0' && (digits > 1 || digits != n)))
        return -1;
    for (size_t i = 0; i < digits; i++)
        if (first[i] < '0' || first[i] > '9')
            return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return errno == 0 && end == buf + n ? 0 : -1;
}

/* Strict reader: a RESP3 double, via strtod on a copy (digits, '.', 'e',
 * signs only: strtod's hex, "infinity" and spaces are not RESP). */
static int rfdiff_double(const char *s, size_t n)
{
    char *buf, *end;
    int ok;

    if ((n == 3 || n == 4) && (strncasecmp(s, "inf", n) == 0 || strncasecmp(s, "nan", n) == 0 ||
                               strncasecmp(s, "-inf", n) == 0 || strncasecmp(s, "-nan", n) == 0))
        return n == 3 ? s[0] != '-' : s[0] == '-';
    if (n == 0 || strspn(s, "0123456789.eE+-") < n || s[0] == '+' || (buf = malloc(n + 1)) == NULL)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    strtod(buf, &end);
    ok = end == buf + n;
    free(buf);
    return ok;
}

/* Whether the value at S[0..N) is a push whose kind (its first value, a
 * bulk) is message, pmessage or smessage: inside an aggregate (EXEC's
 * array) Redis 7.0 does not count it, and neither does respframe; nor
 * the attributes annotating it (S is the push itself, behind them). */
static int rfdiff_uncounted_push(const char *s, size_t n)
{
    static const char *const kinds[] = {"$7\r\nmessage\r\n", "$8\r\npmessage\r\n",
                                        "$8\r\nsmessage\r\n"};
    const char *lf = memchr(s, '\n', n);

    if (n == 0 || s[0] != '>' || lf == NULL)
        return 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        size_t k = strlen(kinds[i]);
        if ((size_t)(s + n - (lf + 1)) >= k && memcmp(lf + 1, kinds[i], k) == 0)
            return 1;
    }
    return 0;
}

/* Strict reader: one RESP2/RESP3 value at S[0..N) inside LEVEL open
 * aggregates. Sets *USED, *TYPE, *BARE (the offset of the value behind
 * its attributes, if any), raises *MAXLEVEL to the deepest aggregate
 * header and sets *RESP3 when a RESP3 type byte was used. */
static int rfdiff_value(const char *s, size_t n, int level, size_t *used, int *type,
                        size_t *bare, int *maxlevel, int *resp3)
{
    size_t ll, off = 0;
    long long v;
    int rc, t;

again:
    *bare = off;
    rc = rfdiff_line(s + off, n - off, &ll);
    if (rc != RFD_VALID)
        return rc;
    const char *p = s + off, c = p[0];
    off += ll + 2;
    if (strchr(",(#_!=%~>|", c) != NULL && c != '\0')
        *resp3 = 1;
    switch (c) {
    case '+': case '-':
        if (memchr(p + 1, '\n', ll - 1) != NULL)
            return RFD_INVALID;
        *type = c == '+' ? REPLY_STATUS : REPLY_ERROR;
        break;
    case ':':
        if (rfdiff_int(p + 1, ll - 1, &v) < 0)
            return RFD_INVALID;
        *type = REPLY_INTEGER;
        break;
    case ',':
        if (!rfdiff_double(p + 1, ll - 1))
            return RFD_INVALID;
        *type = REPLY_DOUBLE;
        break;
    case '(':   /* what a script returns as {big_number=...}: any line */
        if (ll > 1 && memchr(p + 1, '\n', ll - 1) != NULL)
            return RFD_INVALID;
        *type = REPLY_BIGNUM;
        break;
    case '#':
        if (ll != 2 || (p[1] != 't' && p[1] != 'f'))
            return RFD_INVALID;
        *type = REPLY_BOOL;
        break;
    case '_':
        if (ll != 1)
            return RFD_INVALID;
        *type = REPLY_NIL;
        break;
    case '$': case '!': case '=':
        if (rfdiff_int(p + 1, ll - 1, &v) < 0 || v < (c == '$' ? -1 : c == '=' ? 4 : 0) ||
            v > RESPFRAME_BULK_MAX)
            return RFD_INVALID;
        *type = v == -1 ? REPLY_NIL : c == '$' ? REPLY_STRING : c == '!' ? REPLY_ERROR : REPLY_VERB;
        if (v == -1)
            break;
        if (n - off < (size_t)v + 2)
            return RFD_INCOMPLETE;
        if ((c == '=' && s[off + 3] != ':') || s[off + v] != '\r' || s[off + v + 1] != '\n')
            return RFD_INVALID;
        off += (size_t)v + 2;
        break;
    case '*': case '%': case '~': case '>': case '|':
        if (rfdiff_int(p + 1, ll - 1, &v) < 0 || v < (c == '*' ? -1 : 0) || v > RESPFRAME_COUNT_MAX)
            return RFD_INVALID;
        if (level + 1 > *maxlevel)
            *maxlevel = level + 1;
        *type = v == -1 ? REPLY_NIL : c == '*' ? REPLY_ARRAY : c == '%' ? REPLY_MAP :
                c == '~' ? REPLY_SET : c == '>' ? REPLY_PUSH : REPLY_ATTR;
        if (v > 0 && level == RESPFRAME_MAX_DEPTH)
            return RFD_INVALID;
        if (c == '%' || c == '|')
            v *= 2;
        for (long long i = 0; i < v; i++) {
            size_t u, b;
            rc = rfdiff_value(s + off, n - off, level + 1, &u, &t, &b, maxlevel, resp3);
            if (rc != RFD_VALID)
                return rc;
            if (rfdiff_uncounted_push(s + off + b, u - b))
                i--;   /* a message Redis wrote inside the aggregate: not one of its values */
            off += u;
        }
        if (c == '|')
            goto again;     /* the value the attribute annotates */
        break;
    default:
        return RFD_INVALID;
    }
    *used = off;
    return RFD_VALID;
}

static void rfdiff_strict(const char *data, size_t len, struct rfdiff_frames *out)
{
    size_t off = 0;

    out->count = 0;
    while (out->count < RFDIFF_MAX_FRAMES) {
        int i = out->count;
        size_t bare;
        out->level[i] = 0;
        out->resp3[i] = 0;
        out->end = rfdiff_value(data + off, len - off, 0, &out->len[i], &out->type[i],
                                &bare, &out->level[i], &out->resp3[i]);
        if (out->end != RFD_VALID)
            return;
        off += out->len[i];
        out->count++;
    }
    out->end = RFD_INCOMPLETE;
}

static void rfdiff_respframe(const char *data, size_t len, size_t step, struct rfdiff_frames *out)
{
    struct respframe f;
    struct evbuffer *in = evbuffer_new();
    size_t given = 0;

    respframe_init(&f);
    out->count = 0;
    out->end = RFD_INCOMPLETE;
    out->err[0] = '\0';
    while (out->count < RFDIFF_MAX_FRAMES) {
        int type = 0;
        ssize_t n = respframe_next(&f, in, &type);
        if (n > 0) {
            out->len[out->count] = (size_t)n;
            out->type[out->count++] = type;
            evbuffer_drain(in, (size_t)n);
        } else if (n < 0) {
            out->end = RFD_INVALID;
            snprintf(out->err, sizeof out->err, "%s", f.err);
            break;
        } else if (given == len) {
            break;
        } else {
            size_t add = step == 0 || len - given < step ? len - given : step;
            /* A chain of its own: lines and payloads straddle chains. */
            evbuffer_add_reference(in, data + given, add, NULL, NULL);
            given += add;
        }
    }
    respframe_release(&f);
    evbuffer_free(in);
}

static void rfdiff_hiredis(const char *data, size_t len, struct rfdiff_frames *out)
{
    redisReader *r = redisReaderCreateWithFunctions(NULL);
    size_t consumed = 0;

    redisReaderFeed(r, data, len);
    out->count = 0;
    out->end = RFD_INCOMPLETE;
    out->err[0] = '\0';
    while (out->count < RFDIFF_MAX_FRAMES) {
        void *reply = NULL;
        if (redisReaderGetReply(r, &reply) != 0) {
            out->end = RFD_INVALID;
            snprintf(out->err, sizeof out->err, "%s", r->errstr);
            break;
        }
        if (reply == NULL)
            break;
        out->len[out->count] = len - (r->len - r->pos) - consumed;
        out->type[out->count++] = (int)(intptr_t)reply;
        consumed = len - (r->len - r->pos);
    }
    redisReaderFree(r);
}

static int respframe_diff(const char *data, size_t len, size_t step, char *why, size_t whylen)
{
    struct rfdiff_frames rf, hr, st;
    int i, hiredis_follows = 1;

    rfdiff_respframe(data, len, step, &rf);
    rfdiff_hiredis(data, len, &hr);
    rfdiff_strict(data, len, &st);
    why[0] = '\0';
    for (i = 0; i < rf.count; i++) {
        if (i >= st.count || st.len[i] != rf.len[i] || st.type[i] != rf.type[i]) {
            snprintf(why, whylen, "reply %d: respframe framed %zu bytes type %d, strict reader %s",
                     i, rf.len[i], rf.type[i], i >= st.count ? "refuses it" : "differs");
            return RFDIFF_MISMATCH;
        }
        if (st.resp3[i] || st.level[i] > RFDIFF_HIREDIS_MAX_LEVEL)
            hiredis_follows = 0;
        if (hiredis_follows &&
            (i >= hr.count || hr.len[i] != rf.len[i] || hr.type[i] != rf.type[i])) {
            snprintf(why, whylen, "reply %d: respframe framed %zu bytes type %d, hiredis %s%s",
                     i, rf.len[i], rf.type[i], i >= hr.count ? "did not: " : "differs",
                     i >= hr.count ? hr.err : "");
            return RFDIFF_MISMATCH;
        }
    }
    if (rf.count == RFDIFF_MAX_FRAMES)
        return hiredis_follows ? RFDIFF_AGREE : RFDIFF_EXPECTED;
    if (st.count != i || st.end != rf.end) {
        snprintf(why, whylen, "after %d replies: respframe %s (%s), strict reader %s", i,
                 rf.end == RFD_INVALID ? "refuses" : "wants more", rf.err,
                 st.count != i ? "has a reply" : st.end == RFD_INVALID ? "refuses" : "wants more");
        return RFDIFF_MISMATCH;
    }
    if (!hiredis_follows)
        return RFDIFF_EXPECTED;
    if (rf.end == RFD_INCOMPLETE && hr.count > i) {
        snprintf(why, whylen, "after %d replies: respframe wants more, hiredis has a reply", i);
        return RFDIFF_MISMATCH;
    }
    if (hr.count == i && hr.end == rf.end)
        return RFDIFF_AGREE;
    return RFDIFF_EXPECTED;
}

#endif
