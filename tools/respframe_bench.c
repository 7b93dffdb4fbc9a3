/* respframe_bench.c - micro-benchmark of reply framing (a tool, not part of
 * sluice): frames N typical small replies arriving in 16 KB reads, with
 * respframe or with hiredis 0.14's reader (NULL functions, as backend.c
 * uses it), draining each reply from the evbuffer as backend.c does.
 * Mode "none" only appends and drains, to subtract.
 *
 *   cc -O2 -Iproxy -o build/respframe_bench tools/respframe_bench.c \
 *      proxy/resp/respframe.c -levent -lhiredis
 *   build/respframe_bench respframe|hiredis|none [N [BULK]]
 * With BULK, every reply is one bulk string of BULK bytes instead of the mix.
 *   valgrind --tool=callgrind build/respframe_bench respframe 1000000
 */
#include <event2/buffer.h>
#include <hiredis/read.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "respframe.h"

#define BENCH_READ (16 * 1024)

/* Typical replies, with their share per 20. */
static const struct {
    const char *bytes;
    int share;
} bench_mix[] = {
    {"+OK\r\n", 6},
    {"$3\r\nbar\r\n", 6},
    {":1\r\n", 4},
    {"*2\r\n$3\r\nfoo\r\n$5\r\nhello\r\n", 2},
    {"$-1\r\n", 1},
    {"$24\r\nsome longer cached value\r\n", 1},
};

static char *bench_corpus(long n, long bulk, size_t *len, size_t **lens)
{
    char *buf = malloc((size_t)n * (32 + (size_t)bulk));
    size_t o = 0;
    long i = 0;

    *lens = malloc((size_t)n * sizeof **lens);
    for (; bulk > 0 && i < n; i++) {
        size_t start = o;
        o += (size_t)sprintf(buf + o, "$%ld\r\n", bulk);
        memset(buf + o, 'v', (size_t)bulk);
        memcpy(buf + o + bulk, "\r\n", 2);
        o += (size_t)bulk + 2;
        (*lens)[i] = o - start;
    }
    while (i < n) {
        for (size_t k = 0; k < sizeof bench_mix / sizeof bench_mix[0] && i < n; k++) {
            for (int s = 0; s < bench_mix[k].share && i < n; s++) {
                size_t l = strlen(bench_mix[k].bytes);
                memcpy(buf + o, bench_mix[k].bytes, l);
                o += l;
                (*lens)[i++] = l;
            }
        }
    }
    *len = o;
    return buf;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "respframe";
    long n = argc > 2 ? atol(argv[2]) : 1000000, replies = 0;
    long bulk = argc > 3 ? atol(argv[3]) : 0;
    size_t len, given = 0, *lens, bytes = 0;
    char *corpus = bench_corpus(n, bulk, &len, &lens);
    struct evbuffer *in = evbuffer_new();
    struct respframe f;
    redisReader *r = redisReaderCreateWithFunctions(NULL);
    size_t fed = 0;    /* hiredis: bytes of IN given to the reader */
    struct timespec t0, t1;

    respframe_init(&f);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (given < len) {
        size_t add = len - given < BENCH_READ ? len - given : BENCH_READ;
        evbuffer_add(in, corpus + given, add);
        given += add;
        if (strcmp(mode, "respframe") == 0) {
            ssize_t got;
            int type;
            while ((got = respframe_next(&f, in, &type)) > 0) {
                evbuffer_drain(in, (size_t)got);
                bytes += (size_t)got;
                replies++;
            }
            if (got < 0)
                return fprintf(stderr, "respframe: %s\n", f.err), 1;
        } else if (strcmp(mode, "hiredis") == 0) {
            void *reply;
            redisReaderFeed(r, corpus + given - add, add);
            fed += add;
            for (;;) {
                if (redisReaderGetReply(r, &reply) != 0)
                    return fprintf(stderr, "hiredis: %s\n", r->errstr), 1;
                if (reply == NULL)
                    break;
                size_t got = fed - (r->len - r->pos);
                fed -= got;
                evbuffer_drain(in, got);
                bytes += got;
                replies++;
            }
        } else {
            while (replies < n && bytes + lens[replies] <= given) {
                evbuffer_drain(in, lens[replies]);
                bytes += lens[replies++];
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s: %ld replies, %zu bytes, %.1f ms, %.1f ns/reply\n", mode, replies, bytes,
           s * 1e3, s * 1e9 / (double)replies);
    redisReaderFree(r);
    evbuffer_free(in);
    free(corpus);
    free(lens);
    return replies == n && bytes == len ? 0 : 1;
}
