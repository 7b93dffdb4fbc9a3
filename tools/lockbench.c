/* lockbench.c - the benchmark client for lock verbs (make bench): CONNS
 * connections each loop "take a lock, give it back" on a key of its own,
 * one request in flight per connection, until PAIRS pairs are done; prints
 * pairs per second.
 *
 *   -m sluice  LOCK bench:<i> 10000  /  UNLOCK bench:<i>        (via sluice)
 *   -m direct  EVALSHA <acquire> 2 bench:<i> <fence> <token> 10000 0 0
 *              EVALSHA <release> 1 bench:<i> <token> one     (straight to Redis)
 *
 * The direct form is what sluice itself sends, so the ratio of the two is
 * what sluice's parsing, rewriting and routing cost.
 *
 *   -m cluster the direct form against a Redis Cluster node, as a
 *              cluster-aware client: a connection answered -MOVED moves to
 *              the named node (on this host) and sends the request again
 *              (a key's slot never changes: each connection moves once).
 *
 *   -k N (with -m sluice) LOCK bench:<i> 10000 ACKS N: each grant waits for
 *              N replicas (a script + WAIT on a one-shot connection)
 *
 *   lockbench -p PORT [-c CONNS] [-n PAIRS] -m sluice|direct|cluster [-a SHA -r SHA] [-k N]
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct bench_conn {
    struct bufferevent *bev;
    redisReader *reader;
    int id;
    int releasing;      /* the request in flight is the release */
};

static struct event_base *bench_base;
static long bench_pairs_wanted = 100000, bench_pairs_started, bench_pairs_done;
static int bench_direct, bench_cluster, bench_open;
static const char *bench_sha_acquire, *bench_sha_release;
static const char *bench_acks;   /* -k: LOCK ... ACKS this */

/* Append one RESP command of ARGC C strings. */
static void bench_write(struct evbuffer *out, int argc, const char **argv)
{
    evbuffer_add_printf(out, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        evbuffer_add_printf(out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

static void bench_send(struct bench_conn *bc)
{
    struct evbuffer *out = bufferevent_get_output(bc->bev);
    char key[32], fence[48], token[32];

    snprintf(key, sizeof(key), "bench:{%d}", bc->id);
    snprintf(fence, sizeof(fence), "bench:fence:{%d}", bc->id);
    snprintf(token, sizeof(token), "tok%d", bc->id);
    if (!bench_direct) {
        const char *lock[] = {"LOCK", key, "10000", "ACKS", bench_acks}, *unlock[] = {"UNLOCK", key};
        if (bc->releasing)
            bench_write(out, 2, unlock);
        else
            bench_write(out, bench_acks != NULL ? 5 : 3, lock);
        return;
    }
    const char *acq[] = {"EVALSHA", bench_sha_acquire, "2", key, fence, token, "10000", "0", "0"};
    const char *rel[] = {"EVALSHA", bench_sha_release, "1", key, token, "one"};
    if (bc->releasing)
        bench_write(out, 6, rel);
    else
        bench_write(out, 9, acq);
}

/* Start the next pair, or close BC when every pair is under way. */
static void bench_next(struct bench_conn *bc)
{
    if (bench_pairs_started >= bench_pairs_wanted) {
        bufferevent_free(bc->bev);
        redisReaderFree(bc->reader);
        free(bc);
        if (--bench_open == 0)
            event_base_loopexit(bench_base, NULL);
        return;
    }
    bench_pairs_started++;
    bc->releasing = 0;
    bench_send(bc);
}

static int bench_follow_moved(struct bench_conn *bc, const char *text);

static void bench_read_cb(struct bufferevent *bev, void *arg)
{
    struct bench_conn *bc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in);
    redisReply *reply;
    void *r;

    redisReaderFeed(bc->reader, (const char *)evbuffer_pullup(in, (ssize_t)len), len);
    evbuffer_drain(in, len);
    while (redisReaderGetReply(bc->reader, &r) == REDIS_OK && r != NULL) {
        reply = r;
        if (reply->type == REDIS_REPLY_ERROR && bench_follow_moved(bc, reply->str)) {
            freeReplyObject(reply);
            return;   /* the rest of this input was the old connection's */
        }
        if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_NIL) {
            fprintf(stderr, "lockbench: unexpected reply: %s\n",
                    reply->type == REDIS_REPLY_NIL ? "(nil)" : reply->str);
            exit(1);
        }
        freeReplyObject(reply);
        if (!bc->releasing) {
            bc->releasing = 1;
            bench_send(bc);
            continue;
        }
        bench_pairs_done++;
        bench_next(bc);
        return;
    }
}

static void bench_event_cb(struct bufferevent *bev, short what, void *arg);

/* A new connection of BC to 127.0.0.1:PORT (its old one, if any, closed). */
static int bench_connect(struct bench_conn *bc, int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};

    if (bc->bev != NULL)
        bufferevent_free(bc->bev);
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bc->bev = bufferevent_socket_new(bench_base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(bc->bev, bench_read_cb, NULL, bench_event_cb, bc);
    bufferevent_enable(bc->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(bc->bev, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        perror("lockbench: connect");
        return -1;
    }
    return 0;
}

/* -m cluster: a -MOVED reply (TEXT) moves BC to the node it names and the
 * request goes again. 1 when it did. */
static int bench_follow_moved(struct bench_conn *bc, const char *text)
{
    const char *colon = strrchr(text, ':');

    if (!bench_cluster || strncmp(text, "MOVED ", 6) != 0 || colon == NULL)
        return 0;
    redisReaderFree(bc->reader);
    bc->reader = redisReaderCreate();
    if (bench_connect(bc, atoi(colon + 1)) != 0)
        exit(1);
    bench_send(bc);
    return 1;
}

static void bench_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)arg;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
        fprintf(stderr, "lockbench: connection lost\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int conns = 50, port = 0, opt;
    struct timespec t0, t1;

    while ((opt = getopt(argc, argv, "p:c:n:m:a:r:k:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'c': conns = atoi(optarg); break;
        case 'n': bench_pairs_wanted = atol(optarg); break;
        case 'm':
            bench_cluster = strcmp(optarg, "cluster") == 0;
            bench_direct = bench_cluster || strcmp(optarg, "direct") == 0;
            break;
        case 'a': bench_sha_acquire = optarg; break;
        case 'r': bench_sha_release = optarg; break;
        case 'k': bench_acks = optarg; break;
        default: return 2;
        }
    }
    if (port <= 0 || conns <= 0 || (bench_direct && (!bench_sha_acquire || !bench_sha_release))) {
        fprintf(stderr, "usage: lockbench -p PORT [-c CONNS] [-n PAIRS] -m sluice|direct|cluster "
                        "[-a SHA -r SHA] [-k N]\n");
        return 2;
    }
    bench_base = event_base_new();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < conns; i++) {
        struct bench_conn *bc = calloc(1, sizeof(*bc));
        bc->id = i;
        bc->reader = redisReaderCreate();
        if (bench_connect(bc, port) != 0)
            return 1;
        bench_open++;
        bench_next(bc);
    }
    event_base_dispatch(bench_base);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f\n", (double)bench_pairs_done / secs);
    event_base_free(bench_base);
    return 0;
}
