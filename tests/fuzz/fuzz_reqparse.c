/* fuzz_reqparse.c - libFuzzer target for request framing (reqparse.c).
 * The input, cut at points its head chooses, is fed to a parser piece by
 * piece the way client.c does; the requests must be the same as when the
 * whole input is parsed at once, and each must be exactly one command
 * whose arguments and key positions lie inside its own bytes. */
#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "fuzz.h"
#include "reqparse.h"
#include "request.h"

/* Redis's defaults, and small limits that inputs this size can pass. */
static const struct reqparse_limits fuzz_limits_default = {512LL * 1024 * 1024, 1024 * 1024};
static const struct reqparse_limits fuzz_limits_small = {64, 8};

#define FUZZ_MAX_KEYS 64

/* What one parse produced, as bytes to compare:
 *   'R' argc (4 bytes) then per argument its length (4 bytes) and bytes;
 *   'S' for a skipped empty command; 'E' and the error text. */
struct fuzz_log {
    char *buf;
    size_t len, cap;
};

static void fuzz_log_add(struct fuzz_log *log, const void *bytes, size_t n)
{
    if (log->len + n > log->cap) {
        log->cap = (log->len + n) * 2 + 64;
        log->buf = realloc(log->buf, log->cap);
        FUZZ_CHECK(log->buf != NULL, "out of memory");
    }
    memcpy(log->buf + log->len, bytes, n);
    log->len += n;
}

static void fuzz_log_u32(struct fuzz_log *log, uint32_t v)
{
    fuzz_log_add(log, &v, sizeof(v));
}

/* The keys commands.c finds for ARGV are positions inside it, and no more
 * than asked for. */
static void fuzz_check_keys(int argc, const struct sv *argv)
{
    const struct command *cmd = commands_resolve(argc, argv);
    int keys[FUZZ_MAX_KEYS], n;

    if (cmd == NULL)
        return;
    n = commands_keys(cmd, argc, argv, keys, FUZZ_MAX_KEYS);
    FUZZ_CHECK(n >= 0 && n <= FUZZ_MAX_KEYS, "%s: %d keys", cmd->name, n);
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(keys[i] > 0 && keys[i] < argc, "%s: key at %d of %d", cmd->name, keys[i], argc);
    n = commands_keys(cmd, argc, argv, keys, 1);
    FUZZ_CHECK(n >= 0 && n <= 1, "%s: %d keys with room for 1", cmd->name, n);
}

/* One parser for fuzz_check_alone, kept from input to input: making a
 * reader per request halved the executions per second. It must be back
 * at rest after each request, which checks reuse too. */
static struct reqparse fuzz_alone;
static struct evbuffer *fuzz_alone_in;

/* BASE/LEN, a request's own bytes, framed alone, must be one request with
 * the same arguments at the same places, and nothing left over. */
static void fuzz_check_alone(const struct request *req, const char *base)
{
    struct request *again = NULL;
    int rc;

    evbuffer_add(fuzz_alone_in, base, req->raw_len);
    rc = reqparse_next(&fuzz_alone, fuzz_alone_in, &again);
    FUZZ_CHECK(rc == REQPARSE_REQUEST, "a request's bytes alone give %d (%s)", rc,
               fuzz_alone.err);
    FUZZ_CHECK(again->raw == NULL && again->raw_len == req->raw_len,
               "a request's bytes alone frame %zu of %zu", again->raw_len, req->raw_len);
    FUZZ_CHECK(again->argc == req->argc, "argc %d alone, %d in the stream", again->argc,
               req->argc);
    for (int i = 0; i < req->argc; i++) {
        FUZZ_CHECK(again->args[i].off == req->args[i].off && again->args[i].len == req->args[i].len,
                   "argument %d moved", i);
    }
    evbuffer_drain(fuzz_alone_in, again->raw_len);
    request_free(again);
    FUZZ_CHECK(reqparse_next(&fuzz_alone, fuzz_alone_in, &again) == REQPARSE_MORE &&
                   fuzz_alone.cur == NULL,
               "the parser is not at rest after a request");
}

/* Check REQ (framed from IN) and log it. */
static void fuzz_check_request(const struct request *req, struct evbuffer *in,
                               struct fuzz_log *log)
{
    struct evbuffer *src = req->raw != NULL ? req->raw : in;
    struct req_argv views;
    char *base;
    struct sv *argv;
    size_t end = 0;

    FUZZ_CHECK(req->argc > 0, "a request without arguments");
    FUZZ_CHECK(req->raw_len <= evbuffer_get_length(src), "raw_len %zu past the buffer",
               req->raw_len);
    if (req->raw != NULL)
        FUZZ_CHECK(req->raw_len == evbuffer_get_length(req->raw), "inline raw_len");
    /* A copy of the request's bytes: what every view must show. */
    base = malloc(req->raw_len + 1);
    FUZZ_CHECK(base != NULL && evbuffer_copyout(src, base, req->raw_len) == (ssize_t)req->raw_len,
               "copyout");
    /* Two bytes end each argument; like Redis (and hiredis), reqparse does
     * not insist that they are CRLF. */
    for (int i = 0; i < req->argc; i++) {
        size_t off = req->args[i].off, len = req->args[i].len;
        FUZZ_CHECK(off >= end && off + len + 2 <= req->raw_len, "argument %d at %zu+%zu of %zu",
                   i, off, len, req->raw_len);
        end = off + len + 2;
    }
    FUZZ_CHECK(end == req->raw_len, "bytes after the last argument");
    /* The views client.c uses: each the argument's bytes, or {NULL, len}
     * for a large one sluice never reads (request.h). */
    FUZZ_CHECK(request_argv_open(&views, req, src) == 0, "request_argv_open");
    for (int i = 0; i < req->argc; i++) {
        const struct sv *v = &views.argv[i];
        FUZZ_CHECK(v->len == req->args[i].len, "view %d has the wrong length", i);
        FUZZ_CHECK(v->ptr == NULL || memcmp(v->ptr, base + req->args[i].off, v->len) == 0,
                   "view %d shows other bytes", i);
        FUZZ_CHECK(v->ptr != NULL || v->len > 64 * 1024, "small argument %d not viewed", i);
    }
    request_argv_close(&views);
    argv = malloc(sizeof(*argv) * (size_t)req->argc);
    FUZZ_CHECK(argv != NULL, "out of memory");
    for (int i = 0; i < req->argc; i++)
        argv[i] = (struct sv){base + req->args[i].off, req->args[i].len};
    fuzz_check_keys(req->argc, argv);
    fuzz_check_alone(req, base);
    fuzz_log_add(log, "R", 1);
    fuzz_log_u32(log, (uint32_t)req->argc);
    for (int i = 0; i < req->argc; i++) {
        fuzz_log_u32(log, (uint32_t)argv[i].len);
        fuzz_log_add(log, argv[i].ptr, argv[i].len);
    }
    free(argv);
    free(base);
}

/* Frame everything IN holds, handling each result as client.c does.
 * Returns 0 when more input may follow, -1 after a protocol error. */
static int fuzz_drain(struct reqparse *p, struct evbuffer *in, struct fuzz_log *log)
{
    struct request *req;

    for (;;) {
        switch (reqparse_next(p, in, &req)) {
        case REQPARSE_MORE:
            return 0;
        case REQPARSE_SKIP:
            fuzz_log_add(log, "S", 1);
            break;
        case REQPARSE_ERROR:
            fuzz_log_add(log, "E", 1);
            fuzz_log_add(log, p->err, strlen(p->err) + 1);
            return -1;
        case REQPARSE_REQUEST:
            fuzz_check_request(req, in, log);
            if (req->raw == NULL)
                evbuffer_drain(in, req->raw_len);
            request_free(req);
            break;
        default:
            FUZZ_CHECK(0, "unknown result");
        }
    }
}

/* Parse DATA/LEN in the pieces SPLITS gives, logging what comes out. */
static void fuzz_parse(const uint8_t *data, size_t len, struct fuzz_splits *splits,
                       const struct reqparse_limits *limits, struct fuzz_log *log)
{
    struct reqparse p;
    struct evbuffer *in = evbuffer_new();
    size_t given = 0;

    FUZZ_CHECK(in != NULL && reqparse_init(&p, limits) == 0, "out of memory");
    while (given < len) {
        size_t n = fuzz_splits_next(splits, len - given);
        evbuffer_add(in, data + given, n);
        given += n;
        if (fuzz_drain(&p, in, log) != 0)
            break;
    }
    reqparse_free(&p);
    evbuffer_free(in);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    commands_init();
    fuzz_alone_in = evbuffer_new();
    FUZZ_CHECK(fuzz_alone_in != NULL && reqparse_init(&fuzz_alone, &fuzz_limits_default) == 0,
               "out of memory");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct fuzz_splits splits, whole = {.count = 0};
    struct fuzz_log split_log = {0}, whole_log = {0};
    const struct reqparse_limits *limits;

    if (len == 0)
        return 0;
    limits = (data[0] & 0x80) ? &fuzz_limits_small : &fuzz_limits_default;
    fuzz_splits_take(&splits, &data, &len);
    fuzz_parse(data, len, &whole, limits, &whole_log);
    fuzz_parse(data, len, &splits, limits, &split_log);
    FUZZ_CHECK(whole_log.len == split_log.len &&
                   (whole_log.len == 0 || memcmp(whole_log.buf, split_log.buf, whole_log.len) == 0),
               "pieces frame differently from the whole (%zu vs %zu log bytes)", split_log.len,
               whole_log.len);
    free(whole_log.buf);
    free(split_log.buf);
    return 0;
}
