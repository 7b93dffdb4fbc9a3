/* respbench.c - a GET/SET benchmark client that can speak RESP3 (make
 * bench): redis-benchmark has no RESP3 switch. CONNS connections each send
 * PIPELINE requests at once and wait for their replies before the next
 * batch, as redis-benchmark does, until REQUESTS are answered; prints
 * requests per second. With -3 every connection first says HELLO 3, so
 * the replies (null as `_`) and sluice's shared connections are RESP3's.
 *
 *   respbench -p PORT [-c CONNS] [-P PIPELINE] [-n REQUESTS] -t get|set [-3]
 *             [-r KEYS] [-z]
 *
 * Keys are respbench:0..99999 in turn, values 3 bytes (redis-benchmark's
 * -r 100000 and -d 3). With -r, keys are key:NNNNNNNNNNNN (redis-benchmark's
 * 16-byte form) drawn at random among KEYS, uniformly, or with -z
 * Zipf-like (rank r drawn with probability ~ 1/r: a few keys take most
 * requests, a long tail the rest). Replies are only counted: a small
 * scanner frames RESP2 and RESP3 (any error reply stops the run).
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct bench_conn {
    struct bufferevent *bev;
    long values;        /* values still to read in the current reply */
    long skip;          /* payload bytes (with CRLF) of a bulk still to skip */
    int batch_left;     /* replies of the current batch still to come */
    int hello;          /* its HELLO 3 reply is still to come */
};

static struct event_base *bench_base;
static long bench_wanted = 100000, bench_sent, bench_done, bench_key;
static int bench_pipeline = 1, bench_open, bench_set, bench_resp3, bench_zipf;
static long bench_keys;            /* -r: distinct keys drawn at random; 0: in turn */
static uint64_t bench_rng = 0x9E3779B97F4A7C15ull;

/* A uniform double in [0, 1) (xorshift64*: fast, and the same run to run). */
static double bench_uniform(void)
{
    bench_rng ^= bench_rng >> 12;
    bench_rng ^= bench_rng << 25;
    bench_rng ^= bench_rng >> 27;
    return (double)((bench_rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

/* The next key's number among bench_keys: uniform, or with -z rank
 * e^(u ln KEYS) - 1, whose density falls as 1/rank (Zipf, s = 1). */
static long bench_pick(void)
{
    double u = bench_uniform();
    long k = bench_zipf ? (long)exp(u * log((double)bench_keys + 1)) - 1
                        : (long)(u * (double)bench_keys);

    return k < bench_keys ? k : bench_keys - 1;
}

static void bench_add_key(struct evbuffer *out)
{
    char key[32];
    int n = bench_keys > 0 ? snprintf(key, sizeof(key), "key:%012ld", bench_pick())
                           : snprintf(key, sizeof(key), "respbench:%ld", bench_key++ % 100000);

    evbuffer_add_printf(out, "$%d\r\n%s\r\n", n, key);
}

/* Send the next batch of BC, or close it when everything is sent. */
static void bench_batch(struct bench_conn *bc)
{
    struct evbuffer *out = bufferevent_get_output(bc->bev);

    if (bench_sent >= bench_wanted) {
        bufferevent_free(bc->bev);
        free(bc);
        if (--bench_open == 0)
            event_base_loopexit(bench_base, NULL);
        return;
    }
    for (bc->batch_left = 0; bc->batch_left < bench_pipeline && bench_sent < bench_wanted;
         bc->batch_left++, bench_sent++) {
        if (bench_set) {
            evbuffer_add(out, "*3\r\n$3\r\nSET\r\n", 13);
            bench_add_key(out);
            evbuffer_add(out, "$3\r\nxxx\r\n", 9);
        } else {
            evbuffer_add(out, "*2\r\n$3\r\nGET\r\n", 13);
            bench_add_key(out);
        }
    }
}

/* One value's header line LINE: how many values it adds to the reply
 * (children of an aggregate, minus itself), or sets BC->skip for a bulk. */
static long bench_line(struct bench_conn *bc, const char *line)
{
    long n = atol(line + 1);

    switch (line[0]) {
    case '-':
        fprintf(stderr, "respbench: error reply: %s\n", line);
        exit(1);
    case '$': case '=': case '!':
        if (n >= 0)
            bc->skip = n + 2;
        return 0;
    case '*': case '~': case '>':
        return n > 0 ? n : 0;
    case '%': case '|':
        return n > 0 ? 2 * n : 0;
    default:
        return 0;
    }
}

/* Count the complete replies at the head of IN; returns how many. */
static int bench_scan(struct bench_conn *bc, struct evbuffer *in)
{
    int replies = 0;
    size_t n;
    char *line;

    for (;;) {
        if (bc->skip > 0) {
            size_t len = evbuffer_get_length(in);
            size_t take = len < (size_t)bc->skip ? len : (size_t)bc->skip;
            evbuffer_drain(in, take);
            bc->skip -= (long)take;
            if (bc->skip > 0)
                break;
        } else {
            line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF_STRICT);
            if (line == NULL)
                break;
            if (bc->values == 0)
                bc->values = 1;
            bc->values += bench_line(bc, line);
            free(line);
            if (bc->skip > 0)
                continue;
        }
        if (--bc->values == 0)
            replies++;
    }
    return replies;
}

static void bench_read_cb(struct bufferevent *bev, void *arg)
{
    struct bench_conn *bc = arg;
    int replies = bench_scan(bc, bufferevent_get_input(bev));

    if (bc->hello && replies > 0) {
        bc->hello = 0;
        replies--;
        if (replies == 0) {
            bench_batch(bc);
            return;
        }
    }
    bench_done += replies;
    bc->batch_left -= replies;
    if (bc->batch_left <= 0)
        bench_batch(bc);
}

static void bench_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)arg;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
        fprintf(stderr, "respbench: connection lost\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int conns = 50, port = 0, opt;
    const char *test = NULL;
    struct timespec t0, t1;

    while ((opt = getopt(argc, argv, "p:c:P:n:t:3r:z")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'c': conns = atoi(optarg); break;
        case 'P': bench_pipeline = atoi(optarg); break;
        case 'n': bench_wanted = atol(optarg); break;
        case 't': test = optarg; break;
        case '3': bench_resp3 = 1; break;
        case 'r': bench_keys = atol(optarg); break;
        case 'z': bench_zipf = 1; break;
        default: return 2;
        }
    }
    if (port <= 0 || conns <= 0 || bench_pipeline <= 0 || test == NULL || bench_keys < 0 ||
        (bench_zipf && bench_keys == 0) ||
        (strcmp(test, "get") != 0 && strcmp(test, "set") != 0)) {
        fprintf(stderr, "usage: respbench -p PORT [-c CONNS] [-P PIPELINE] [-n REQUESTS] "
                        "-t get|set [-3] [-r KEYS [-z]]\n");
        return 2;
    }
    bench_set = strcmp(test, "set") == 0;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bench_base = event_base_new();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < conns; i++) {
        struct bench_conn *bc = calloc(1, sizeof(*bc));
        bc->bev = bufferevent_socket_new(bench_base, -1, BEV_OPT_CLOSE_ON_FREE);
        bufferevent_setcb(bc->bev, bench_read_cb, NULL, bench_event_cb, bc);
        bufferevent_enable(bc->bev, EV_READ | EV_WRITE);
        if (bufferevent_socket_connect(bc->bev, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            perror("respbench: connect");
            return 1;
        }
        bench_open++;
        if (bench_resp3) {
            bc->hello = 1;
            evbuffer_add(bufferevent_get_output(bc->bev), "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", 22);
        } else {
            bench_batch(bc);
        }
    }
    event_base_dispatch(bench_base);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f\n", (double)bench_done / secs);
    event_base_free(bench_base);
    return 0;
}
