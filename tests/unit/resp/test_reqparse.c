/* test_reqparse.c - request framing: RESP split at every byte, pipelines,
 * inline commands, Redis's protocol errors and limits. */
#include <event2/buffer.h>
#include <stdlib.h>

#include "commands.h"
#include "reqparse.h"
#include "request.h"
#include "unit.h"

static const struct reqparse_limits limits = {512LL * 1024 * 1024, 1024 * 1024};

/* Feed INPUT (LEN bytes) to a fresh parser in pieces of at most STEP bytes
 * and collect the arguments of every request as "a|b|c;" into OUT. Returns
 * the last parse result (REQPARSE_ERROR stops). */
static int parse_all(const char *input, size_t len, size_t step, char *out, size_t outlen,
                     char *err, size_t errlen)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req;
    size_t given = 0, o = 0;
    int rc = REQPARSE_MORE;

    reqparse_init(&p, &limits);
    out[0] = '\0';
    while (given < len || rc == REQPARSE_REQUEST || rc == REQPARSE_SKIP) {
        if (rc == REQPARSE_MORE) {
            size_t n = len - given < step ? len - given : step;
            evbuffer_add(in, input + given, n);
            given += n;
        }
        rc = reqparse_next(&p, in, &req);
        if (rc == REQPARSE_ERROR) {
            snprintf(err, errlen, "%s", p.err);
            break;
        }
        if (rc != REQPARSE_REQUEST)
            continue;
        struct evbuffer *src = req->raw != NULL ? req->raw : in;
        const char *base = (const char *)evbuffer_pullup(src, (ssize_t)req->raw_len);
        for (int i = 0; i < req->argc; i++) {
            o += (size_t)snprintf(out + o, outlen - o, "%s%.*s", i ? "|" : "",
                                  (int)req->args[i].len, base + req->args[i].off);
        }
        o += (size_t)snprintf(out + o, outlen - o, ";");
        if (req->raw == NULL)
            evbuffer_drain(in, req->raw_len);
        request_free(req);
    }
    reqparse_free(&p);
    evbuffer_free(in);
    return rc;
}

static void test_resp_every_split(void)
{
    static const char input[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
                                "*2\r\n$3\r\nGET\r\n$0\r\n\r\n"
                                "*1\r\n$4\r\nPING\r\n";
    char out[256], err[128];

    for (size_t step = 1; step <= sizeof(input); step++) {
        int rc = parse_all(input, sizeof(input) - 1, step, out, sizeof(out), err, sizeof(err));
        CHECK(rc == REQPARSE_MORE);
        CHECK_STR(out, "SET|k|hello;GET|;PING;");
    }
}

static void test_binary_args(void)
{
    static const char input[] = "*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n";
    char out[64], err[128];

    parse_all(input, sizeof(input) - 1, 3, out, sizeof(out), err, sizeof(err));
    CHECK_STR(out, "GET|a\r\nb;");
}

static void test_inline(void)
{
    static const char input[] = "PING\r\nSET \"a b\" 'c d'\r\n\r\nGET \"\\x41\\n\"\n"
                                "*1\r\n$4\r\nPING\r\nECHO x\r\n";
    char out[256], err[128];

    for (size_t step = 1; step <= sizeof(input); step++) {
        parse_all(input, sizeof(input) - 1, step, out, sizeof(out), err, sizeof(err));
        CHECK_STR(out, "PING;SET|a b|c d;GET|A\n;PING;ECHO|x;");
    }
}

static void test_empty_commands_skipped(void)
{
    char out[64], err[128];

    parse_all("*0\r\n*-1\r\nPING\r\n", 16, 1, out, sizeof(out), err, sizeof(err));
    CHECK_STR(out, "PING;");
}

static void check_error(const char *input, const char *expected)
{
    char out[256], err[128] = "";

    for (size_t step = 1; step <= strlen(input); step++) {
        int rc = parse_all(input, strlen(input), step, out, sizeof(out), err, sizeof(err));
        CHECK(rc == REQPARSE_ERROR);
        CHECK_STR(err, expected);
    }
}

static void test_protocol_errors(void)
{
    check_error("*1\r\n:1\r\n", "Protocol error: expected '$', got ':'");
    check_error("*1\r\n+OK\r\n", "Protocol error: expected '$', got '+'");
    check_error("*2\r\n*1\r\n$1\r\na\r\n", "Protocol error: expected '$', got '*'");
    check_error("*a\r\n", "Protocol error: invalid multibulk length");
    check_error("*1\r\n$x\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\n$-1\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\nx\r\n", "Protocol error: expected '$', got 'x'");
    check_error("*01\r\n", "Protocol error: invalid multibulk length");
    check_error("*3000000000\r\n", "Protocol error: invalid multibulk length");
    check_error("*1\r\n$01\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\n$123456789012345678901234567890123\r\n",
                "Protocol error: invalid bulk length");
    /* Each side of 18 digits (the lengths parsed without an overflow
     * check), and a non-digit after digits. */
    check_error("*1\r\n$999999999999999999\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\n$9223372036854775808\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\n$1a\r\n", "Protocol error: invalid bulk length");
    check_error("*1\r\n$1/\r\n", "Protocol error: invalid bulk length");
    check_error("*2:\r\n", "Protocol error: invalid multibulk length");
    check_error("SET \"a\r\n", "Protocol error: unbalanced quotes in request");
    check_error("SET 'a'b\r\n", "Protocol error: unbalanced quotes in request");
}

static void test_limits(void)
{
    static const struct reqparse_limits small = {1024 * 1024, 3};
    static const struct reqparse_limits tiny = {4, 3};
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req;
    char *big = malloc(70000);

    /* A bulk longer than proto_max_bulk_len is refused at its header. */
    reqparse_init(&p, &small);
    evbuffer_add_printf(in, "*2\r\n$3\r\nGET\r\n$%d\r\nabc", 2 * 1024 * 1024);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: invalid bulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    /* ...and so is one that arrives whole, body and all. */
    reqparse_init(&p, &tiny);
    evbuffer_add_printf(in, "*2\r\n$3\r\nGET\r\n$5\r\nabcde\r\n");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: invalid bulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    /* A bulk length line ends at its CR, as in Redis (which skips the byte
     * after it unseen): "$100010\rx" is a length, and the body is waited
     * for, whole or in pieces alike. */
    reqparse_init(&p, &small);
    evbuffer_add_printf(in, "*2\r\n$3\r\nGET\r\n$100010\rxyz");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_MORE);
    CHECK_STR(p.err, "");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    /* More arguments than allowed. */
    reqparse_init(&p, &small);
    evbuffer_add_printf(in, "*4\r\n");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: invalid multibulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    /* An inline line without end longer than 64 KB. */
    reqparse_init(&p, &small);
    memset(big, 'a', 70000);
    evbuffer_add(in, big, 70000);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: too big inline request");
    reqparse_free(&p);
    evbuffer_free(in);
    free(big);
}

/* A client that must log in first: Redis 7.0's 10 arguments and 16 KB
 * per argument, with its own texts; the usual limits still come first. */
static void test_login_limits(void)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req;

    reqparse_init(&p, &limits);
    p.must_login = 1;
    evbuffer_add_printf(in, "*11\r\n");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: unauthenticated multibulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    reqparse_init(&p, &limits);
    p.must_login = 1;
    evbuffer_add_printf(in, "*2\r\n$4\r\nAUTH\r\n$16385\r\n");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: unauthenticated bulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    reqparse_init(&p, &limits);
    p.must_login = 1;
    evbuffer_add_printf(in, "*2\r\n$4\r\nAUTH\r\n$%d\r\n", 1024 * 1024 * 1024);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: invalid bulk length");
    reqparse_free(&p);
    evbuffer_drain(in, evbuffer_get_length(in));

    /* At the limits: framed. */
    reqparse_init(&p, &limits);
    p.must_login = 1;
    evbuffer_add_printf(in, "*10\r\n");
    for (int i = 0; i < 10; i++)
        evbuffer_add_printf(in, "$1\r\na\r\n");
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_REQUEST);
    CHECK(req->argc == 10);
    request_free(req);
    reqparse_free(&p);
    evbuffer_free(in);
}

static void test_large_bulk_held_then_whole(void)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req = NULL;
    size_t n = 300000;
    char *body = malloc(n);
    int rc;

    memset(body, 'v', n);
    reqparse_init(&p, &limits);
    evbuffer_add_printf(in, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", n);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_MORE);
    evbuffer_add(in, body, n / 2);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_MORE);
    evbuffer_add(in, body + n / 2, n - n / 2);
    evbuffer_add(in, "\r\n", 2);
    rc = reqparse_next(&p, in, &req);
    CHECK(rc == REQPARSE_REQUEST);
    if (rc == REQPARSE_REQUEST) {
        CHECK(req->argc == 3);
        CHECK(req->args[2].len == n);
        CHECK(req->raw_len == evbuffer_get_length(in));
        request_free(req);
    }
    reqparse_free(&p);
    evbuffer_free(in);
    free(body);
}

/* An inline line of N arguments: FIRST, then "aI" for I = 1..N-1 (or "a"
 * each when SHORT), ending with TAIL and CRLF. Returns a malloc'd string. */
static char *inline_line(const char *first, int n, int short_args, const char *tail)
{
    size_t cap = strlen(first) + strlen(tail) + (size_t)n * 8 + 3, o;
    char *line = malloc(cap);

    o = (size_t)snprintf(line, cap, "%s", first);
    for (int i = 1; i < n; i++)
        o += short_args ? (size_t)snprintf(line + o, cap - o, " a")
                        : (size_t)snprintf(line + o, cap - o, " a%d", i);
    snprintf(line + o, cap - o, "%s\r\n", tail);
    return line;
}

/* Parse LINE as one inline request; returns the parse result, *OUT set on
 * REQPARSE_REQUEST. ERR gets the protocol error text. */
static int parse_inline_once(const char *line, struct request **out, char *err, size_t errlen)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    int rc;

    reqparse_init(&p, &limits);
    evbuffer_add(in, line, strlen(line));
    rc = reqparse_next(&p, in, out);
    snprintf(err, errlen, "%s", p.err);
    if (rc == REQPARSE_REQUEST)
        CHECK(evbuffer_get_length(in) == 0);
    reqparse_free(&p);
    evbuffer_free(in);
    return rc;
}

static int arg_is(struct request *req, int i, const char *want)
{
    const char *raw = (const char *)evbuffer_pullup(req->raw, -1);

    return req->args[i].len == strlen(want) &&
           memcmp(raw + req->args[i].off, want, req->args[i].len) == 0;
}

/* Redis bounds an inline command by its length only: more than 1024
 * arguments are fine. */
static void test_inline_many_args(void)
{
    char *line = inline_line("MSET", 2001, 0, "");
    struct request *req = NULL;
    char err[128];
    int rc = parse_inline_once(line, &req, err, sizeof(err));

    CHECK(rc == REQPARSE_REQUEST);
    CHECK_STR(err, "");
    if (rc == REQPARSE_REQUEST) {
        CHECK(req->argc == 2001);
        CHECK(arg_is(req, 0, "MSET"));
        CHECK(arg_is(req, 1, "a1"));
        CHECK(arg_is(req, 2000, "a2000"));
        CHECK(memcmp(evbuffer_pullup(req->raw, 9), "*2001\r\n$4", 9) == 0);
        CHECK(req->raw_len == evbuffer_get_length(req->raw));
        request_free(req);
    }
    free(line);
}

/* 30000 one-byte arguments fill 60 KB, under the 64 KB line limit. */
static void test_inline_30000_args(void)
{
    char *line = inline_line("a", 30000, 1, "");
    struct request *req = NULL;
    char err[128];
    int rc;

    CHECK(strlen(line) < 64 * 1024);
    rc = parse_inline_once(line, &req, err, sizeof(err));
    CHECK(rc == REQPARSE_REQUEST);
    if (rc == REQPARSE_REQUEST) {
        CHECK(req->argc == 30000);
        CHECK(arg_is(req, 29999, "a"));
        request_free(req);
    }
    free(line);
}

/* The densest line fills exactly LEN / 2 + 1 arguments. */
static void test_inline_split_bound(void)
{
    char out[16];
    size_t offs[4], lens[4];

    CHECK(reqparse_split_inline("a b c d", 7, out, offs, lens, 7 / 2 + 1) == 4);
    CHECK(reqparse_split_inline("a b c d", 7, out, offs, lens, 3) == -1);
    CHECK(reqparse_split_inline("\"\" ''", 5, out, offs, lens, 5 / 2 + 1) == 2);
    CHECK(lens[0] == 0 && lens[1] == 0);
}

/* A quote left open after thousands of arguments is still an error. */
static void test_inline_many_args_unbalanced(void)
{
    char *line = inline_line("MSET", 2001, 0, " \"open");
    struct request *req = NULL;
    char err[128];

    CHECK(parse_inline_once(line, &req, err, sizeof(err)) == REQPARSE_ERROR);
    CHECK_STR(err, "Protocol error: unbalanced quotes in request");
    free(line);
}

/* Every byte in a chain of its own: lines and arguments span chains. */
static void test_one_chain_per_byte(void)
{
    static const char input[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
                                "*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n";
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req;
    char out[64];
    size_t o = 0;
    int rc;

    for (size_t i = 0; i < sizeof(input) - 1; i++) {
        struct evbuffer *one = evbuffer_new();
        evbuffer_add(one, input + i, 1);
        evbuffer_add_buffer(in, one);
        evbuffer_free(one);
    }
    reqparse_init(&p, &limits);
    while ((rc = reqparse_next(&p, in, &req)) == REQPARSE_REQUEST) {
        const char *base = (const char *)evbuffer_pullup(in, (ssize_t)req->raw_len);
        for (int i = 0; i < req->argc; i++)
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%.*s|", (int)req->args[i].len,
                                  base + req->args[i].off);
        evbuffer_drain(in, req->raw_len);
        request_free(req);
    }
    CHECK_STR(out, "SET|k|hello|PING|");
    CHECK(rc == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: invalid bulk length");
    reqparse_free(&p);
    evbuffer_free(in);
}

/* An mbulk count line with no end, longer than an inline command. */
static void test_too_big_count_line(void)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    struct request *req;
    char *big = malloc(70000);

    memset(big, '1', 70000);
    big[0] = '*';
    reqparse_init(&p, &limits);
    evbuffer_add(in, big, 60000);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_MORE);
    evbuffer_add(in, big + 60000, 10000);
    CHECK(reqparse_next(&p, in, &req) == REQPARSE_ERROR);
    CHECK_STR(p.err, "Protocol error: too big mbulk count string");
    reqparse_free(&p);
    evbuffer_free(in);
    free(big);
}

/* Frame one request from IN, given in pieces of at most 1000 bytes so that
 * its arguments span chains. */
static struct request *frame_in_pieces(struct reqparse *p, struct evbuffer *in, const char *data,
                                       size_t len)
{
    struct request *req = NULL;
    int rc = REQPARSE_MORE;

    for (size_t at = 0; at < len && rc == REQPARSE_MORE; at += 1000) {
        evbuffer_add(in, data + at, len - at < 1000 ? len - at : 1000);
        rc = reqparse_next(p, in, &req);
    }
    return rc == REQPARSE_REQUEST ? req : NULL;
}

/* Build "*N" RESP for ARGS (NULL-terminated; an arg of "#<n>" stands for n
 * bytes of 'v') into a new buffer; *LEN gets its length. */
static char *build_request(const char *const *args, size_t *len)
{
    struct evbuffer *b = evbuffer_new();
    int n = 0;
    char *out;

    while (args[n] != NULL)
        n++;
    evbuffer_add_printf(b, "*%d\r\n", n);
    for (int i = 0; i < n; i++) {
        if (args[i][0] == '#') {
            size_t vlen = strtoul(args[i] + 1, NULL, 10);
            char *v = malloc(vlen);
            memset(v, 'v', vlen);
            evbuffer_add_printf(b, "$%zu\r\n", vlen);
            evbuffer_add(b, v, vlen);
            free(v);
        } else {
            evbuffer_add_printf(b, "$%zu\r\n%s", strlen(args[i]), args[i]);
        }
        evbuffer_add(b, "\r\n", 2);
    }
    *len = evbuffer_get_length(b);
    out = malloc(*len);
    evbuffer_remove(b, out, *len);
    evbuffer_free(b);
    return out;
}

static int all_v(struct sv s)
{
    for (size_t i = 0; i < s.len; i++) {
        if (s.ptr[i] != 'v')
            return 0;
    }
    return 1;
}

/* A large request is not pulled up: a large value sluice never reads gets
 * a NULL view; names, keys and small arguments are viewed or copied. */
static void test_argv_large_request(void)
{
    static const char *const set_args[] = {"SET", "key", "#300000", "EX", "100", NULL};
    static const char *const mset_args[] = {"MSET", "k1", "#200000", "#100000", "#5000", NULL};
    static const char *const odd_args[] = {"NOSUCHCMD", "a", "#200000", NULL};
    struct reqparse p;
    struct req_argv a;
    struct evbuffer *in = evbuffer_new();
    struct request *req;
    size_t len;
    char *data;

    commands_init();
    reqparse_init(&p, &limits);

    data = build_request(set_args, &len);
    req = frame_in_pieces(&p, in, data, len);
    CHECK(req != NULL);
    if (req != NULL) {
        CHECK(request_argv_open(&a, req, in) == 0);
        CHECK(evbuffer_get_length(in) == len);   /* nothing was consumed */
        CHECK(sv_ieq(a.argv[0], "set") && sv_ieq(a.argv[1], "key"));
        CHECK(a.argv[2].ptr == NULL && a.argv[2].len == 300000);
        CHECK(sv_ieq(a.argv[3], "ex") && sv_ieq(a.argv[4], "100"));
        request_argv_close(&a);
        evbuffer_drain(in, req->raw_len);
        request_free(req);
    }
    free(data);

    /* MSET k1 v1 k2 v2: the key at argv[3] is large and read, so copied. */
    data = build_request(mset_args, &len);
    req = frame_in_pieces(&p, in, data, len);
    CHECK(req != NULL);
    if (req != NULL) {
        CHECK(request_argv_open(&a, req, in) == 0);
        CHECK(a.argv[2].ptr == NULL && a.argv[2].len == 200000);
        CHECK(a.argv[3].ptr != NULL && a.argv[3].len == 100000 && all_v(a.argv[3]));
        CHECK(a.argv[4].ptr != NULL && a.argv[4].len == 5000 && all_v(a.argv[4]));
        request_argv_close(&a);
        evbuffer_drain(in, req->raw_len);
        request_free(req);
    }
    free(data);

    /* A command the table does not know: every argument is readable. */
    data = build_request(odd_args, &len);
    req = frame_in_pieces(&p, in, data, len);
    CHECK(req != NULL);
    if (req != NULL) {
        CHECK(request_argv_open(&a, req, in) == 0);
        CHECK(a.argv[2].ptr != NULL && a.argv[2].len == 200000 && all_v(a.argv[2]));
        request_argv_close(&a);
        evbuffer_drain(in, req->raw_len);
        request_free(req);
    }
    free(data);
    reqparse_free(&p);
    evbuffer_free(in);
}

UNIT_MAIN("reqparse",
          {"resp split at every byte", test_resp_every_split},
          {"binary arguments", test_binary_args},
          {"inline commands", test_inline},
          {"empty commands skipped", test_empty_commands_skipped},
          {"protocol errors", test_protocol_errors},
          {"limits", test_limits},
          {"limits before login", test_login_limits},
          {"large bulk framed once whole", test_large_bulk_held_then_whole},
          {"inline: 2001 arguments", test_inline_many_args},
          {"inline: 30000 arguments in 60 KB", test_inline_30000_args},
          {"inline: at most len / 2 + 1 arguments", test_inline_split_bound},
          {"inline: unbalanced quotes after 2001 arguments", test_inline_many_args_unbalanced},
          {"too big mbulk count line", test_too_big_count_line},
          {"one chain per byte", test_one_chain_per_byte},
          {"argv of a large request", test_argv_large_request})
