/* test_respframe.c - reply framing: every RESP2/RESP3 type, nesting,
 * attributes, every split point, chains of one byte, pipelines, malformed
 * input of every kind, a 10 MB bulk in 16 KB chunks, resuming without
 * rescanning, and agreement with hiredis 0.14's reader. */
#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>

#include "request.h"
#include "respframe.h"
#include "respframe_diff.h"
#include "unit.h"

#define MAX_FRAMES 256

/* The replies found in an input, and how framing it ended. */
struct frames {
    int count;
    size_t len[MAX_FRAMES];
    int type[MAX_FRAMES];
    int end;                /* 0: wants more at the end of the input, -1: error */
    char err[128];
};

/* Frame INPUT fed STEP bytes at a time (0: all at once), calling
 * respframe_next after each append. With ONE_BYTE_CHAINS every byte is its
 * own evbuffer chain, so every line straddles chains. */
/* The line limit frame_all gives its framer (0: the default). */
static size_t test_line_max;

static void frame_all(const char *input, size_t len, size_t step, int one_byte_chains,
                      struct frames *out)
{
    struct respframe f;
    struct evbuffer *in = evbuffer_new();
    size_t given = 0;

    respframe_init(&f);
    if (test_line_max != 0)
        f.line_max = test_line_max;
    memset(out, 0, sizeof *out);
    while (out->count < MAX_FRAMES) {
        int type = 0;
        ssize_t n = respframe_next(&f, in, &type);
        if (n > 0) {
            out->len[out->count] = (size_t)n;
            out->type[out->count++] = type;
            evbuffer_drain(in, (size_t)n);
            continue;
        }
        if (n < 0) {
            out->end = -1;
            snprintf(out->err, sizeof out->err, "%s", f.err);
            CHECK(respframe_next(&f, in, &type) == -1);   /* stays failed */
            break;
        }
        CHECK(respframe_missing(&f) > 0);
        if (given == len)
            break;
        size_t add = step == 0 || len - given < step ? len - given : step;
        if (one_byte_chains) {
            for (size_t i = 0; i < add; i++)
                evbuffer_add_reference(in, input + given + i, 1, NULL, NULL);
        } else {
            evbuffer_add(in, input + given, add);
        }
        given += add;
    }
    respframe_release(&f);   /* input that ends inside a deep reply */
    evbuffer_free(in);
}

static int frames_equal(const struct frames *a, const struct frames *b)
{
    if (a->count != b->count || a->end != b->end)
        return 0;
    for (int i = 0; i < a->count; i++)
        if (a->len[i] != b->len[i] || a->type[i] != b->type[i])
            return 0;
    return 1;
}

struct one_reply {
    const char *bytes;
    int type;
};

static const struct one_reply good_replies[] = {
    {"+OK\r\n", REPLY_STATUS},
    {"+\r\n", REPLY_STATUS},
    {"-ERR unknown command 'x'\r\n", REPLY_ERROR},
    {":0\r\n", REPLY_INTEGER},
    {":-42\r\n", REPLY_INTEGER},
    {":9223372036854775807\r\n", REPLY_INTEGER},
    {":-9223372036854775808\r\n", REPLY_INTEGER},
    {"$3\r\nbar\r\n", REPLY_STRING},
    {"$0\r\n\r\n", REPLY_STRING},
    {"$4\r\na\r\nb\r\n", REPLY_STRING},          /* CRLF inside a payload is data */
    {"$-1\r\n", REPLY_NIL},
    {"*-1\r\n", REPLY_NIL},
    {"*0\r\n", REPLY_ARRAY},
    {"*2\r\n$3\r\nfoo\r\n:1\r\n", REPLY_ARRAY},
    {"*3\r\n*1\r\n+a\r\n*0\r\n$-1\r\n", REPLY_ARRAY},
    {",3.14\r\n", REPLY_DOUBLE},
    {",-1.5e-10\r\n", REPLY_DOUBLE},
    {",1E+300\r\n", REPLY_DOUBLE},
    {",10\r\n", REPLY_DOUBLE},
    {",inf\r\n", REPLY_DOUBLE},
    {",-inf\r\n", REPLY_DOUBLE},
    {",nan\r\n", REPLY_DOUBLE},
    {"(3492890328409238509324850943850943825024385\r\n", REPLY_BIGNUM},
    {"(-7\r\n", REPLY_BIGNUM},
    /* Redis passes a script's big_number through as it is, CRLF made
     * spaces: EVAL "return {big_number='123\\r\\n123'}" replies this. */
    {"(123  123\r\n", REPLY_BIGNUM},
    {"(\r\n", REPLY_BIGNUM},
    {"(12a\r\n", REPLY_BIGNUM},
    {"#t\r\n", REPLY_BOOL},
    {"#f\r\n", REPLY_BOOL},
    {"_\r\n", REPLY_NIL},
    {"!21\r\nSYNTAX invalid syntax\r\n", REPLY_ERROR},
    {"!0\r\n\r\n", REPLY_ERROR},
    {"=15\r\ntxt:Some string\r\n", REPLY_VERB},
    {"=4\r\nmkd:\r\n", REPLY_VERB},
    {"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", REPLY_MAP},
    {"%0\r\n", REPLY_MAP},
    {"~3\r\n+a\r\n#t\r\n_\r\n", REPLY_SET},
    {"~0\r\n", REPLY_SET},
    {">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", REPLY_PUSH},
    {">0\r\n", REPLY_PUSH},
    /* An attribute and the reply it annotates are one unit, typed as the reply. */
    {"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n"
     "*2\r\n:2039123\r\n:9543892\r\n", REPLY_ARRAY},
    {"|0\r\n:5\r\n", REPLY_INTEGER},
    {"|1\r\n+a\r\n+b\r\n|1\r\n+c\r\n+d\r\n$-1\r\n", REPLY_NIL},
    {"*2\r\n|1\r\n+ttl\r\n:3600\r\n$1\r\nx\r\n:7\r\n", REPLY_ARRAY},
    {"|1\r\n|1\r\n+k\r\n+v\r\n*1\r\n:1\r\n+x\r\n+real\r\n", REPLY_STATUS},
    {"%1\r\n*1\r\n~1\r\n%1\r\n:1\r\n:2\r\n>1\r\n=5\r\ntxt:x\r\n", REPLY_MAP},
};

#define N_GOOD (sizeof good_replies / sizeof good_replies[0])

static void test_every_type(void)
{
    for (size_t i = 0; i < N_GOOD; i++) {
        const char *s = good_replies[i].bytes;
        struct frames out;
        frame_all(s, strlen(s), 0, 0, &out);
        if (out.count != 1 || out.len[0] != strlen(s) || out.type[0] != good_replies[i].type ||
            out.end != 0)
            fprintf(stderr, "reply %zu (%.20s): count %d type %d end %d %s\n", i, s, out.count,
                    out.type[0], out.end, out.err);
        CHECK(out.count == 1 && out.end == 0);
        CHECK(out.len[0] == strlen(s));
        CHECK(out.type[0] == good_replies[i].type);
    }
}

/* All the good replies back to back, then a partial one. */
static size_t build_pipeline(char *buf, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < N_GOOD; i++) {
        size_t n = strlen(good_replies[i].bytes);
        if (o + n < cap) {
            memcpy(buf + o, good_replies[i].bytes, n);
            o += n;
        }
    }
    memcpy(buf + o, "*2\r\n$3\r\nfo", 10);
    return o + 10;
}

static void test_pipelined(void)
{
    char buf[4096];
    size_t len = build_pipeline(buf, sizeof buf);
    struct frames out;

    frame_all(buf, len, 0, 0, &out);
    CHECK(out.count == (int)N_GOOD);
    CHECK(out.end == 0);
    for (size_t i = 0; i < N_GOOD && i < (size_t)out.count; i++) {
        CHECK(out.len[i] == strlen(good_replies[i].bytes));
        CHECK(out.type[i] == good_replies[i].type);
    }
}

/* Feeding byte by byte, in two pieces split at every offset, in steps of
 * 2..7 bytes, and as one-byte chains all give what all-at-once gives. */
static void test_every_split(void)
{
    char buf[4096];
    size_t len = build_pipeline(buf, sizeof buf);
    struct frames whole, part;

    frame_all(buf, len, 0, 0, &whole);
    for (size_t step = 1; step <= 7; step++) {
        frame_all(buf, len, step, 0, &part);
        CHECK(frames_equal(&whole, &part));
    }
    frame_all(buf, len, 0, 1, &part);
    CHECK(frames_equal(&whole, &part));
    frame_all(buf, len, 1, 1, &part);
    CHECK(frames_equal(&whole, &part));
    for (size_t cut = 1; cut < len; cut++) {
        struct respframe f;
        struct evbuffer *in = evbuffer_new();
        int type = 0, i = 0, ok = 1;
        ssize_t n;

        respframe_init(&f);
        evbuffer_add(in, buf, cut);
        for (size_t given = cut;;) {
            n = respframe_next(&f, in, &type);
            if (n > 0) {
                ok &= i < whole.count && (size_t)n == whole.len[i] && type == whole.type[i];
                i++;
                evbuffer_drain(in, (size_t)n);
            } else if (n == 0 && given < len) {
                evbuffer_add(in, buf + given, len - given);
                given = len;
            } else {
                break;
            }
        }
        CHECK(ok && i == whole.count && n == 0);
        evbuffer_free(in);
    }
}

/* Malformed replies: each must be refused, whether it comes at once, byte
 * by byte or as one-byte chains (never "wants more" for ever). */
static const char *const bad_replies[] = {
    "$-2\r\n", "$abc\r\n", "$+3\r\nfoo\r\n", "$ 3\r\nfoo\r\n", "$3 \r\nfoo\r\n", "$03\r\nfoo\r\n",
    "$-0\r\n", "$\r\n\r\n", "$1099511627777\r\n", "$99999999999999999999\r\n",
    "*-2\r\n", "*2147483649\r\n", "*-0\r\n", "*1x\r\n",
    "%-1\r\n", "~-1\r\n", ">-1\r\n", "|-1\r\n", "%2147483649\r\n",
    "!-1\r\n", "=-1\r\n", "=3\r\nabc\r\n", "=5\r\nab:cd\r\n", "=4\r\ntxt;\r\n",
    "$3\r\nfooXY", "$3\r\nfoo\n\r", "$3\r\nfoo\rX", "*1\r\n$1\r\nab\r\n",
    "+O\nK\r\n", "+OK\rX\r\n", "-ERR\n\r\n", "+OK\n\n\r\n",
    ":\r\n", ":-\r\n", ":+1\r\n", ":12a\r\n", ": 1\r\n", ":01\r\n", ":-0\r\n",
    ":9223372036854775808\r\n", ":-9223372036854775809\r\n", ":99999999999999999999\r\n",
    ",\r\n", ",abc\r\n", ",1e\r\n", ",.\r\n", ",-\r\n", ",1.5x\r\n", ",infinity\r\n", ",0x10\r\n",
    "(1\n2\r\n",
    "#x\r\n", "#tt\r\n", "#\r\n", "#T\r\n", "_x\r\n",
    "$?\r\n;4\r\nabcd\r\n;0\r\n", "*?\r\n:1\r\n.\r\n", ";4\r\nabcd\r\n", ".\r\n",
    "?\r\n", "\r\n", "x\r\n", "OK\r\n", "\n\r\n", "\r\r\n",
};

static void test_malformed(void)
{
    for (size_t i = 0; i < sizeof bad_replies / sizeof bad_replies[0]; i++) {
        const char *s = bad_replies[i];
        struct frames whole, bytes, chains;
        frame_all(s, strlen(s), 0, 0, &whole);
        frame_all(s, strlen(s), 1, 0, &bytes);
        frame_all(s, strlen(s), 1, 1, &chains);
        if (whole.end != -1 || whole.count != 0)
            fprintf(stderr, "bad reply %zu accepted: \"%s\"\n", i, s);
        CHECK(whole.end == -1 && whole.count == 0 && whole.err[0] != '\0');
        CHECK(frames_equal(&whole, &bytes));
        CHECK(frames_equal(&whole, &chains));
    }
}

static void test_error_texts(void)
{
    struct frames out;

    frame_all("#x\r\n", 4, 0, 0, &out);
    CHECK_STR(out.err, "invalid boolean in a '#' line");
    frame_all("$3\r\nfooXY", 9, 0, 0, &out);
    CHECK_STR(out.err, "payload not followed by CRLF");
    frame_all("$?\r\n", 4, 0, 0, &out);
    CHECK_STR(out.err, "streamed RESP3 '$?' replies are not supported");
    frame_all("*-2\r\n", 5, 0, 0, &out);
    CHECK_STR(out.err, "invalid count in a '*' line");
    frame_all("@\r\n", 3, 0, 0, &out);
    CHECK_STR(out.err, "invalid reply type byte 0x40");
}

/* DEPTH nested one-element arrays around ":1". */
static char *nested(int depth, size_t *len)
{
    char *s = malloc((size_t)depth * 4 + 5);
    for (int i = 0; i < depth; i++)
        memcpy(s + 4 * i, "*1\r\n", 4);
    memcpy(s + 4 * depth, ":1\r\n", 5);
    *len = (size_t)depth * 4 + 4;
    return s;
}

static void test_depth(void)
{
    size_t len;
    struct frames out;
    char *s = nested(128, &len);

    frame_all(s, len, 0, 0, &out);
    CHECK(out.count == 1 && out.len[0] == len && out.type[0] == REPLY_ARRAY);
    frame_all(s, len, 1, 0, &out);
    CHECK(out.count == 1 && out.len[0] == len);
    free(s);
    /* Past the inline levels the stack grows: a script returning a
     * recursive table makes Redis nest about 8,000 deep, and one client's
     * reply must not close a shared connection. */
    s = nested(129, &len);
    frame_all(s, len, 0, 0, &out);
    CHECK(out.count == 1 && out.len[0] == len);
    free(s);
    s = nested(8000, &len);
    frame_all(s, len, 0, 0, &out);
    CHECK(out.count == 1 && out.len[0] == len && out.type[0] == REPLY_ARRAY);
    frame_all(s, len, 7, 1, &out);   /* in pieces, across chains */
    CHECK(out.count == 1 && out.len[0] == len);
    frame_all(s, len - 4, 5, 0, &out);   /* cut off inside: nothing, nothing held */
    CHECK(out.count == 0 && out.end == 0);
    free(s);
    s = nested(RESPFRAME_MAX_DEPTH + 1, &len);
    frame_all(s, len, 0, 0, &out);
    CHECK(out.count == 0 && out.end == -1);
    CHECK_STR(out.err, "replies nested deeper than 65536");
    free(s);
    /* An attribute counts as a level while it is open. */
    s = nested(128, &len);
    memcpy(s + 4 * 127, "|1\r\n", 4);
    frame_all(s, len, 0, 0, &out);
    CHECK(out.count == 0 && out.end == 0);    /* ":1" is its key; its value is to come */
    free(s);
}

/* A line may hold line_max bytes before its CRLF, no more; a longer one
 * is refused before its CRLF arrives. (Checked with a 64 KB limit: the
 * default is as large as a bulk; see test_long_status_line.) */
static void test_line_limit(void)
{
    size_t max = 64 * 1024;
    char *s = malloc(max + 16);
    struct frames out;

    test_line_max = max;

    s[0] = '+';
    memset(s + 1, 'a', max - 1);
    memcpy(s + max, "\r\n", 2);
    frame_all(s, max + 2, 0, 0, &out);
    CHECK(out.count == 1 && out.len[0] == max + 2);
    frame_all(s, max + 2, 1000, 1, &out);
    CHECK(out.count == 1 && out.len[0] == max + 2);
    frame_all(s, max + 2, 1, 0, &out);
    CHECK(out.count == 1 && out.len[0] == max + 2);
    s[max] = 'a';
    frame_all(s, max + 1, 0, 0, &out);          /* no CR in sight yet */
    CHECK(out.end == -1);
    CHECK_STR(out.err, "line too long");
    frame_all(s, max + 1, 4096, 0, &out);
    CHECK(out.end == -1);
    test_line_max = 0;
    free(s);
}

/* A script can make Redis send a status or error line of any length: a
 * 1 MB one is a reply like any other, whole or in pieces. */
static void test_long_status_line(void)
{
    size_t n = 1024 * 1024;
    char *s = malloc(n + 3);
    struct frames out;

    CHECK(RESPFRAME_LINE_MAX >= 512LL * 1024 * 1024);
    for (int kind = 0; kind < 2; kind++) {
        s[0] = kind == 0 ? '+' : '-';
        memset(s + 1, 'x', n - 1);
        memcpy(s + n, "\r\n", 2);
        frame_all(s, n + 2, 0, 0, &out);
        CHECK(out.count == 1 && out.len[0] == n + 2);
        frame_all(s, n + 2, 16 * 1024, 0, &out);
        CHECK(out.count == 1 && out.len[0] == n + 2);
    }
    free(s);
}

/* The 10 MB bulk arrives in 16 KB chunks: respframe_missing says exactly
 * how much is still to come, and the buffer is never pulled up. */
static void test_big_bulk(void)
{
    const size_t body = 10 * 1024 * 1024, chunk = 16 * 1024;
    char header[32], *data;
    size_t hlen = (size_t)snprintf(header, sizeof header, "$%zu\r\n", body);
    size_t total = hlen + body + 2 + 4, given = 0;
    struct respframe f;
    struct evbuffer *in = evbuffer_new();
    int type = 0, zero_returns = 0, exact = 1;
    ssize_t n = 0;

    data = malloc(total);
    memcpy(data, header, hlen);
    memset(data + hlen, 'x', body);
    memcpy(data + hlen + body, "\r\n:7\r\n", 6);
    respframe_init(&f);
    while (given < total) {
        size_t add = total - given < chunk ? total - given : chunk;
        evbuffer_add(in, data + given, add);
        given += add;
        n = respframe_next(&f, in, &type);
        if (n != 0)
            break;
        zero_returns++;
        exact &= respframe_missing(&f) == hlen + body + 2 - given;
    }
    CHECK(exact);
    CHECK(zero_returns == (int)((hlen + body + 2) / chunk));
    CHECK(n == (ssize_t)(hlen + body + 2) && type == REPLY_STRING);
    CHECK(evbuffer_get_contiguous_space(in) < 1024 * 1024);   /* not pulled up */
    evbuffer_drain(in, (size_t)n);
    CHECK(respframe_next(&f, in, &type) == 4 && type == REPLY_INTEGER);
    free(data);
    evbuffer_free(in);
}

/* A big array of small elements in 16 KB chunks: each call resumes at the
 * partial element (pos stays with the input, nothing is rescanned) and
 * respframe_missing counts 3 bytes for each element still to come. */
static void test_big_array_resumes(void)
{
    const long elements = 1000000;
    const size_t chunk = 16 * 1024;
    size_t len = 0, given = 0;
    char *data = malloc((size_t)elements * 4 + 32);
    struct respframe f;
    struct evbuffer *in = evbuffer_new();
    int type = 0, resumed_at_end = 1, bound_ok = 1;
    ssize_t n = 0;

    len = (size_t)sprintf(data, "*%ld\r\n", elements);
    for (long i = 0; i < elements; i++) {
        memcpy(data + len, ":7\r\n", 4);
        len += 4;
    }
    respframe_init(&f);
    while (given < len) {
        size_t add = len - given < chunk ? len - given : chunk;
        evbuffer_add(in, data + given, add);
        given += add;
        n = respframe_next(&f, in, &type);
        if (n != 0)
            break;
        resumed_at_end &= given - f.pos < 4;
        bound_ok &= respframe_missing(&f) <= len - given &&
                    respframe_missing(&f) >= 3 * (len - given) / 4 - 3;
    }
    CHECK(resumed_at_end);
    CHECK(bound_ok);
    CHECK(n == (ssize_t)len && type == REPLY_ARRAY);
    free(data);
    evbuffer_free(in);
}

/* At every prefix of every good reply, respframe_missing is a true lower
 * bound on what is missing. */
static void test_missing_is_a_lower_bound(void)
{
    int ok = 1;

    for (size_t i = 0; i < N_GOOD; i++) {
        const char *s = good_replies[i].bytes;
        size_t len = strlen(s);
        struct respframe f;
        struct evbuffer *in = evbuffer_new();
        int type;

        respframe_init(&f);
        for (size_t given = 0; given < len; given++) {
            ok &= respframe_next(&f, in, &type) == 0;
            ok &= respframe_missing(&f) >= 1 && respframe_missing(&f) <= len - given;
            evbuffer_add(in, s + given, 1);
        }
        ok &= respframe_next(&f, in, &type) == (ssize_t)len;
        evbuffer_free(in);
    }
    CHECK(ok);
}

/* A tiny deterministic PRNG so the corpus is the same on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Append a random well-formed RESP2 reply, nested at most MAXDEPTH deep. */
static size_t gen_resp2(char *buf, size_t o, int maxdepth)
{
    static const char *const statuses[] = {"+OK", "+QUEUED", "-ERR no such key", ":0", ":-1",
                                           ":9223372036854775807", "$-1", "*-1", "*0", "+"};
    uint32_t kind = rng() % (maxdepth > 0 ? 5 : 4);

    if (kind == 0) {
        return o + (size_t)sprintf(buf + o, "%s\r\n", statuses[rng() % 10]);
    } else if (kind == 1) {
        return o + (size_t)sprintf(buf + o, ":%lld\r\n", (long long)rng() - 2147483648LL);
    } else if (kind <= 3) {
        size_t n = rng() % 4 == 0 ? rng() % 300 : rng() % 12;
        o += (size_t)sprintf(buf + o, "$%zu\r\n", n);
        for (size_t i = 0; i < n; i++)
            buf[o++] = (char)("ab\r\n\0xyz"[rng() % 8]);
        memcpy(buf + o, "\r\n", 2);
        return o + 2;
    }
    size_t n = rng() % 5;
    o += (size_t)sprintf(buf + o, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        o = gen_resp2(buf, o, maxdepth - 1);
    return o;
}

/* hiredis 0.14 and respframe agree on a corpus of RESP2 pipelines (depth
 * up to 7), fed at once or in small steps; and on mutated copies of them,
 * where they either agree or differ only as respframe_diff.h expects. */
static void test_agrees_with_hiredis(void)
{
    static char buf[1 << 20], mutated[1 << 20];
    char why[256];
    int agree = 1, mismatches = 0, expected = 0;

    for (int round = 0; round < 300; round++) {
        size_t len = 0;
        int replies = 1 + (int)(rng() % 8);
        for (int i = 0; i < replies && len < sizeof buf / 2; i++)
            len = gen_resp2(buf, len, (int)(rng() % 8));
        if (respframe_diff(buf, len, 0, why, sizeof why) != RFDIFF_AGREE ||
            respframe_diff(buf, len, 1 + rng() % 9, why, sizeof why) != RFDIFF_AGREE ||
            respframe_diff(buf, len - rng() % len, 3, why, sizeof why) != RFDIFF_AGREE) {
            fprintf(stderr, "round %d: %s\n", round, why);
            agree = 0;
        }
        for (int m = 0; m < 20; m++) {
            size_t mlen = len;
            memcpy(mutated, buf, len);
            for (int k = 1 + (int)(rng() % 3); k > 0; k--)
                mutated[rng() % mlen] = "*$:+-\r\n0129x "[rng() % 13];
            int rc = respframe_diff(mutated, mlen, 1 + rng() % 5, why, sizeof why);
            if (rc == RFDIFF_MISMATCH) {
                fprintf(stderr, "mutation %d/%d: %s\n", round, m, why);
                mismatches++;
            }
            expected += rc == RFDIFF_EXPECTED;
        }
    }
    CHECK(agree);
    CHECK(mismatches == 0);
    CHECK(expected > 0);     /* the mutations do reach hiredis's leniencies */
}

/* RESP3 (which hiredis 0.14 cannot read) against the strict reader of
 * respframe_diff.h: the good replies, and mutations of them. */
static void test_resp3_matches_strict_reader(void)
{
    static char buf[4096], mutated[4096];
    size_t len = build_pipeline(buf, sizeof buf);
    char why[256];
    int mismatches = 0;

    for (size_t i = 0; i < N_GOOD; i++) {
        const char *s = good_replies[i].bytes;
        mismatches += respframe_diff(s, strlen(s), 0, why, sizeof why) == RFDIFF_MISMATCH;
        mismatches += respframe_diff(s, strlen(s), 1, why, sizeof why) == RFDIFF_MISMATCH;
    }
    for (int m = 0; m < 5000; m++) {
        memcpy(mutated, buf, len);
        for (int k = 1 + (int)(rng() % 3); k > 0; k--)
            mutated[rng() % len] = "*$:+-\r\n0129x%|~>=!,(#_.te-"[rng() % 27];
        if (respframe_diff(mutated, len, rng() % 6, why, sizeof why) == RFDIFF_MISMATCH) {
            fprintf(stderr, "resp3 mutation %d: %s\n", m, why);
            mismatches++;
        }
    }
    CHECK(mismatches == 0);
}

/* Replies where hiredis 0.14 is lenient or limited: respframe_diff calls
 * them expected divergences, not agreement and not bugs. */
static void test_known_divergences(void)
{
    static const char *const lenient[] = {
        "$3\r\nfooXY", "+O\nK\r\n", ":abc\r\n", "+O\rK\r\n",
        "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*0\r\n",
        "%1\r\n+a\r\n+b\r\n",
    };
    char why[256];

    for (size_t i = 0; i < sizeof lenient / sizeof lenient[0]; i++)
        CHECK(respframe_diff(lenient[i], strlen(lenient[i]), 0, why, sizeof why) ==
              RFDIFF_EXPECTED);
    CHECK(respframe_diff("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*0\r\n", 32, 0, why,
                         sizeof why) == RFDIFF_AGREE);
    CHECK(respframe_diff("x\r\n", 3, 0, why, sizeof why) == RFDIFF_AGREE);
}

/* A message, pmessage or smessage push Redis 7.0 writes inside EXEC's
 * array is framed with it but not counted as one of its values (nor are
 * attributes annotating it); any other push, and a push whose first value
 * is not a bulk string (a blob error, or a bulk behind an attribute), is
 * counted. Each whole
 * input is one reply, also fed a byte at a time, and the strict reader of
 * respframe_diff.h agrees. */
static void test_push_in_aggregate(void)
{
    static const char *const one_reply[] = {
        "*2\r\n+OK\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n:1\r\n",
        "*1\r\n>4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\nm\r\n:1\r\n",
        "*1\r\n>3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$1\r\nm\r\n:1\r\n",
        /* counted: a subscribe confirmation, kinds Redis does not write */
        "*2\r\n>3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n:1\r\n",
        "*2\r\n>2\r\n!7\r\nmessage\r\n+x\r\n+y\r\n",
        "*2\r\n>2\r\n+message\r\n+x\r\n+y\r\n",
        "*2\r\n>2\r\n*1\r\n$7\r\nmessage\r\n+x\r\n+y\r\n",
        "*2\r\n>2\r\n$-1\r\n$7\r\nmessage\r\n+y\r\n",
        "*1\r\n>2\r\n|1\r\n+a\r\n+b\r\n$7\r\nmessage\r\n+x\r\n",
        "*2\r\n>2\r\n|0\r\n$7\r\nmessage\r\n+x\r\n+y\r\n",
        /* uncounted with the attribute annotating it */
        "*1\r\n|1\r\n+k\r\n+v\r\n>1\r\n$7\r\nmessage\r\n+x\r\n",
        "*1\r\n|0\r\n>1\r\n$8\r\nsmessage\r\n|0\r\n+x\r\n",
    };
    char why[256];

    for (size_t i = 0; i < sizeof one_reply / sizeof one_reply[0]; i++) {
        const char *s = one_reply[i];
        struct frames whole, bytes;
        frame_all(s, strlen(s), 0, 0, &whole);
        frame_all(s, strlen(s), 1, 1, &bytes);
        if (whole.count != 1 || whole.len[0] != strlen(s))
            fprintf(stderr, "push case %zu: %d replies, first %zu bytes of %zu\n", i,
                    whole.count, whole.len[0], strlen(s));
        CHECK(whole.count == 1 && whole.len[0] == strlen(s) && whole.type[0] == REPLY_ARRAY);
        CHECK(frames_equal(&whole, &bytes));
        CHECK(respframe_diff(s, strlen(s), 0, why, sizeof why) != RFDIFF_MISMATCH);
        CHECK(respframe_diff(s, strlen(s), 1, why, sizeof why) != RFDIFF_MISMATCH);
    }
}

/* respframe_is_message_push: the pushes a caller walking EXEC's values
 * skips, as respframe does not count them. */
static void test_is_message_push(void)
{
    static const struct {
        const char *bytes;
        int message;
    } cases[] = {
        {">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", 1},
        {">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\nm\r\n", 1},
        {">3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", 1},
        {">1\r\n$7\r\nmessage\r\n", 1},
        {">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", 0},
        {">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", 0},
        {">2\r\n$7\r\nmessagX\r\n+x\r\n", 0},
        {">2\r\n!7\r\nmessage\r\n+x\r\n", 0},
        {">2\r\n+message\r\n+x\r\n", 0},
        {">0\r\n", 0},
        {"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", 0},
        {"|1\r\n+a\r\n+b\r\n>1\r\n$7\r\nmessage\r\n", 0},
    };
    static const char next[] = ">1\r\n$7\r\nmessage\r\n";

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct evbuffer *in = evbuffer_new();
        size_t len = strlen(cases[i].bytes);
        evbuffer_add(in, cases[i].bytes, len);
        evbuffer_add(in, next, strlen(next));   /* the next reply: not read */
        if (respframe_is_message_push(in, len) != cases[i].message)
            fprintf(stderr, "is_message_push case %zu wrong\n", i);
        CHECK(respframe_is_message_push(in, len) == cases[i].message);
        evbuffer_free(in);
    }
}

UNIT_MAIN("respframe",
          {"every_type", test_every_type},
          {"pipelined", test_pipelined},
          {"every_split", test_every_split},
          {"malformed", test_malformed},
          {"error_texts", test_error_texts},
          {"depth", test_depth},
          {"line_limit", test_line_limit},
          {"long_status_line", test_long_status_line},
          {"big_bulk", test_big_bulk},
          {"big_array_resumes", test_big_array_resumes},
          {"missing_is_a_lower_bound", test_missing_is_a_lower_bound},
          {"agrees_with_hiredis", test_agrees_with_hiredis},
          {"resp3_matches_strict_reader", test_resp3_matches_strict_reader},
          {"known_divergences", test_known_divergences},
          {"push_in_aggregate", test_push_in_aggregate},
          {"is_message_push", test_is_message_push})
