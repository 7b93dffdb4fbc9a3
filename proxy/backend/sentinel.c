/* sentinel.c - owns Sentinel mode: asking the Sentinels which address is
 * sentinel_master's primary, checking it with ROLE, following
 * +switch-master, and the requests that wait while the primary changes.
 * It never writes to a client: a request it takes back from the backend
 * (backend_set_reply_filter) is sent again or delivered with
 * backend_deliver, as cluster.c does.
 *
 *   Sentinel 1..N  <-- cmd link: [AUTH] SENTINEL GET-MASTER-ADDR-BY-NAME,
 *                                SENTINEL REPLICAS (a round: all at once)
 *                  <-- sub link: [AUTH] SUBSCRIBE +switch-master +new-epoch
 *                                (only a reason to ask all again), and the
 *                                failover's events (sentinel_failover.c:
 *                                writes held until the switch)
 *   round's end    --> sentinel_vote: an address a majority of the
 *                      configured Sentinels name, else nothing moves
 *   candidate      <-- role link: [AUTH] ROLE (nothing else goes there
 *                                 before it says "master"; no AUTH goes to
 *                                 an address the majority did not name)
 *   confirmed      --> backend_primary_set: the default node; the old one
 *                      retired (its shared connections close once answered);
 *                      the replicas the same majority list -> replicas_listed
 *
 * A primary connection that fails under a request: a request never
 * written, or one that only reads, waits and goes to the primary once one
 * is up (failover_retry_window); a write that may have run gets
 * SENTINEL_FAILOVER_ERROR. A -READONLY is only a hint (a script can write
 * any error text): the Sentinels are asked again; the reply goes to the
 * client unless the command cannot have run (no script, a known command).
 */
#include "sentinel.h"
#include "sentinel_vote.h"
#include "sentinel_failover.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "client.h"
#include "commands.h"
#include "config.h"
#include "errlist.h"
#include "log.h"
#include "metrics.h"
#include "placement.h"
#include "primary.h"
#include "replicas.h"
#include "reply.h"
#include "request.h"
#include "resolve.h"
#include "respframe.h"
#include "respwalk.h"
#include "server.h"
#include "slot.h"
#include "sockaddr.h"
#include "tls.h"
#include "value.h"

#define SENTINEL_TICK_MS 20
#define SENTINEL_ANSWER_TIMEOUT_MS 1000   /* a question unanswered this long: next Sentinel */
#define SENTINEL_RECONNECT_MS 500
#define SENTINEL_RETRY_ASK_MS 1000        /* after a round without an answer, or an address
                                             ROLE refuted (+switch-master still acts at once) */
#define SENTINEL_SPLIT_RETRY_MS 200       /* after a round without a majority where some
                                             named an address: a change going round */
#define SENTINEL_NAME_MAX SENTINEL_VOTE_NAME_MAX
#define SENTINEL_EXPECT_MAX 8
#define SENTINEL_FAILOVER_ERROR \
    "-ERR backend unavailable during failover; the command may or may not have run"

enum sentinel_expect { EXPECT_AUTH, EXPECT_ADDR, EXPECT_REPLICAS, EXPECT_ROLE, EXPECT_SUB };
enum sentinel_link_kind { LINK_CMD, LINK_SUB, LINK_ROLE };

struct sentinel_peer;

/* One connection of sluice's own: to a Sentinel, or the ROLE check. */
struct sentinel_link {
    struct sentinel_peer *peer;      /* NULL: the role link */
    enum sentinel_link_kind kind;
    struct bufferevent *bev;
    struct respframe frame;
    struct resolve_lookup *lookup;
    int up;
    enum sentinel_expect expect[SENTINEL_EXPECT_MAX];
    int expect_count;
    uint64_t down_ms;                /* when it last went down (reconnect after) */
    char host[256];
    int port;
};

struct sentinel_peer {
    char name[SENTINEL_NAME_MAX];
    struct sentinel_link cmd, sub;
    int subscribed;
    uint64_t last_answer_ms;         /* server_now_ms, 0: never */
    char last_answer[400];           /* what it last said of the master */
    int asked;                       /* its answers to this round are still out */
    struct sentinel_ballot ballot;   /* its answers of this round */
    char dissent[SENTINEL_NAME_MAX]; /* the other address it named, logged once */
};

/* A request waiting for a primary (sentinel_take_unsent). */
struct sentinel_held {
    struct request *req;
    struct sentinel_held *next;
};

static struct event_base *sentinel_base;
static const struct config *sentinel_cfg;
static struct sentinel_peer *sentinel_peers;
static int sentinel_peer_count;
static struct event *sentinel_tick;
static int sentinel_running;         /* sentinel_run was called: backend nodes exist */
static char sentinel_primary[SENTINEL_NAME_MAX];   /* confirmed, "" until then */
static char sentinel_candidate[SENTINEL_NAME_MAX]; /* under the ROLE check */
static struct sentinel_link sentinel_role;
static uint64_t sentinel_role_sent_ms;
static int sentinel_round;           /* a round's answers are out */
static int sentinel_again;           /* +switch-master heard: a new round once free */
static uint64_t sentinel_asked_ms;
static int sentinel_ask_wanted;
static uint64_t sentinel_hint_ms;     /* the last -READONLY taken as a hint to ask */
static uint64_t sentinel_next_ask_ms;
static char sentinel_split[400];     /* the last round without a majority, logged once */
static int sentinel_failed;          /* start: every Sentinel that answered does not know it */
static long long sentinel_epoch = -1;
static uint64_t sentinel_switches;
static time_t sentinel_last_switch;  /* wall clock, 0: never */
static char sentinel_replicas[SENTINEL_VOTE_REPLICAS][SENTINEL_NAME_MAX];   /* agreed */
static int sentinel_replica_count;
static int sentinel_all_down_logged;
static uint64_t *sentinel_metric_switches;
static struct sentinel_held *sentinel_held_first, **sentinel_held_tail = &sentinel_held_first;

int sentinel_enabled(void)
{
    return sentinel_cfg != NULL;
}

/* ---------------------------------------------------------------------
 * Links */

static void sentinel_link_connect(struct sentinel_link *link);
static void sentinel_on_reply(struct sentinel_link *link, enum sentinel_expect what,
                              const char *text, size_t len);
static void sentinel_on_message(struct sentinel_peer *peer, const char *text, size_t len);
static void sentinel_peer_done(struct sentinel_peer *peer);
static void sentinel_want_ask(const char *why);
static void sentinel_count_up(void);

static void sentinel_link_close(struct sentinel_link *link)
{
    if (link->bev != NULL)
        bufferevent_free(link->bev);
    link->bev = NULL;
    if (link->lookup != NULL)
        resolve_cancel(link->lookup);
    link->lookup = NULL;
    respframe_release(&link->frame);
    respframe_init(&link->frame);
    link->up = 0;
    link->expect_count = 0;
    link->down_ms = server_now_ms();
    if (link->peer != NULL && link->kind == LINK_SUB)
        link->peer->subscribed = 0;
}

/* LINK went down for WHY: logged once, its question passed on. */
static void sentinel_link_down(struct sentinel_link *link, const char *why)
{
    if (link->peer != NULL && link->up)
        log_warning("sentinel %s: connection lost: %s", link->peer->name, why);
    else if (link->peer != NULL)
        log_info("sentinel %s: cannot connect: %s", link->peer->name, why);
    sentinel_link_close(link);
    if (link->peer != NULL)
        sentinel_count_up();   /* the last one down is said at once */
    if (link->peer != NULL && link->kind == LINK_CMD)
        sentinel_peer_done(link->peer);
    if (link->kind == LINK_ROLE && sentinel_candidate[0] != '\0') {
        log_warning("sentinel: cannot check the role of %s: %s", sentinel_candidate, why);
        sentinel_candidate[0] = '\0';
        /* Soon, not at once: an address that refuses connections would
         * loop at the speed of a refused connect. */
        sentinel_ask_wanted = 1;
        sentinel_next_ask_ms = server_now_ms() + SENTINEL_SPLIT_RETRY_MS;
    }
}

/* Append to OUT the command of ARGC words ARGV. */
static void sentinel_write_cmd(struct evbuffer *out, int argc, const char *const *argv)
{
    evbuffer_add_printf(out, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        evbuffer_add_printf(out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

/* Send the command ARGV on LINK and expect its reply as WHAT. */
static void sentinel_send(struct sentinel_link *link, enum sentinel_expect what, int argc,
                          const char *const *argv)
{
    if (link->bev == NULL || link->expect_count == SENTINEL_EXPECT_MAX)
        return;
    sentinel_write_cmd(bufferevent_get_output(link->bev), argc, argv);
    link->expect[link->expect_count++] = what;
}

/* The AUTH a new LINK sends first: the Sentinels' own credentials, or the
 * data nodes' for the role link. */
static void sentinel_send_auth(struct sentinel_link *link)
{
    const char *user = link->peer != NULL ? sentinel_cfg->sentinel_user : sentinel_cfg->backend_user;
    const char *pass = link->peer != NULL ? sentinel_cfg->sentinel_password
                                          : sentinel_cfg->backend_password;
    const char *argv[3] = {"AUTH", user, pass};

    if (pass == NULL)
        return;
    if (user != NULL)
        sentinel_send(link, EXPECT_AUTH, 3, argv);
    else
        sentinel_send(link, EXPECT_AUTH, 2, (const char *const[]){"AUTH", pass});
}

/* What a link sends once connected. */
static void sentinel_link_greet(struct sentinel_link *link)
{
    static const char *const subscribe[] = {"SUBSCRIBE", "+switch-master", "+new-epoch",
                                            SENTINEL_FAILOVER_CHANNELS};
    static const char *const role[] = {"ROLE"};

    sentinel_send_auth(link);
    if (link->kind == LINK_SUB) {
        sentinel_send(link, EXPECT_SUB, (int)(sizeof(subscribe) / sizeof(subscribe[0])),
                      subscribe);
    } else if (link->kind == LINK_ROLE) {
        sentinel_send(link, EXPECT_ROLE, 1, role);
        sentinel_role_sent_ms = server_now_ms();
    }
}

static void sentinel_read_cb(struct bufferevent *bev, void *arg)
{
    struct sentinel_link *link = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    ssize_t len;
    int type;

    while (link->bev == bev && (len = respframe_next(&link->frame, in, &type)) > 0) {
        char *text = malloc((size_t)len + 1);
        if (text == NULL)
            break;
        evbuffer_remove(in, text, (size_t)len);
        text[len] = '\0';
        if (link->peer != NULL)
            link->peer->last_answer_ms = server_now_ms();
        if (link->expect_count > 0) {
            enum sentinel_expect what = link->expect[0];
            memmove(link->expect, link->expect + 1, sizeof(link->expect[0]) * (size_t)--link->expect_count);
            if (what == EXPECT_SUB)   /* one confirmation per channel */
                link->expect[link->expect_count++] = EXPECT_AUTH;
            sentinel_on_reply(link, what, text, (size_t)len);
        } else if (link->peer != NULL && link->kind == LINK_SUB) {
            sentinel_on_message(link->peer, text, (size_t)len);
        }
        free(text);
    }
    if (link->bev == bev && respframe_next(&link->frame, in, &type) < 0)
        sentinel_link_down(link, "protocol error");
}

static void sentinel_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct sentinel_link *link = arg;
    char why[300] = "";
    int one = 1;

    if (what & BEV_EVENT_CONNECTED) {
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        link->up = 1;
        if (link->peer != NULL && link->kind == LINK_CMD)
            log_notice("sentinel %s connected", link->peer->name);
        sentinel_link_greet(link);
        return;
    }
    if (what & BEV_EVENT_EOF)
        snprintf(why, sizeof(why), "connection closed by server");
    else if (link->peer != NULL ? sentinel_cfg->sentinel_tls : sentinel_cfg->backend_tls)
        tls_bev_error(bev, why, sizeof(why));
    if (why[0] == '\0')
        snprintf(why, sizeof(why), "%s", strerror(EVUTIL_SOCKET_ERROR()));
    sentinel_link_down(link, why);
}

static void sentinel_link_start(struct sentinel_link *link, const struct sockaddr *sa,
                                socklen_t len)
{
    int tls = link->peer != NULL ? sentinel_cfg->sentinel_tls : sentinel_cfg->backend_tls;

    link->bev = tls ? tls_backend_bev(sentinel_base)
                    : bufferevent_socket_new(sentinel_base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (link->bev == NULL) {
        sentinel_link_down(link, "out of memory");
        return;
    }
    bufferevent_setcb(link->bev, sentinel_read_cb, NULL, sentinel_event_cb, link);
    bufferevent_enable(link->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(link->bev, (struct sockaddr *)sa, (int)len) != 0)
        sentinel_link_down(link, strerror(errno));
}

static void sentinel_lookup_done(void *arg, const struct sockaddr *sa, socklen_t len,
                                 const char *err)
{
    struct sentinel_link *link = arg;

    link->lookup = NULL;
    if (sa == NULL)
        sentinel_link_down(link, err);
    else
        sentinel_link_start(link, sa, len);
}

/* Connect LINK to its host and port; a host name is looked up first,
 * off the loop. */
static void sentinel_link_connect(struct sentinel_link *link)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    char hostport[300], err[300];
    int rc;

    sentinel_link_close(link);
    snprintf(hostport, sizeof(hostport), strchr(link->host, ':') ? "[%s]:%d" : "%s:%d",
             link->host, link->port);
    rc = sockaddr_resolve(hostport, SOCKADDR_NUMERIC, "sentinel", &ss, &len, err, sizeof(err));
    if (rc == 0) {
        sentinel_link_start(link, (struct sockaddr *)&ss, len);
        return;
    }
    link->lookup = resolve_start(link->host, link->port, sentinel_lookup_done, link);
    if (link->lookup == NULL)
        sentinel_link_down(link, "cannot start a DNS lookup");
}

/* ---------------------------------------------------------------------
 * Replies */

/* The bulk string at the head of W into OUT ("" when not one). */
static int sentinel_bulk(struct respwalk *w, char *out, size_t size)
{
    const char *s;
    size_t n;

    out[0] = '\0';
    if (respwalk_bulk(w, &s, &n) != 0 || n >= size)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

#define sentinel_hostport sentinel_vote_hostport

static void sentinel_check_role(const char *name);

/* A Sentinel's answer to GET-MASTER-ADDR-BY-NAME: PEER's ballot. */
static void sentinel_on_addr(struct sentinel_peer *peer, const char *text, size_t len)
{
    struct respwalk w = {text, text + len};
    char host[256], port[16];
    long long n;

    if (text[0] == '-') {
        snprintf(peer->last_answer, sizeof(peer->last_answer), "%.*s", (int)strcspn(text, "\r\n"),
                 text);
        log_warning("sentinel %s: %s", peer->name, peer->last_answer);
    } else if (respwalk_array(&w, &n) != 0 || n != 2 || sentinel_bulk(&w, host, sizeof(host)) ||
               sentinel_bulk(&w, port, sizeof(port))) {
        peer->ballot.answer = SENTINEL_ANSWER_UNKNOWN;
        snprintf(peer->last_answer, sizeof(peer->last_answer), "does not know master %s",
                 sentinel_cfg->sentinel_master);
        log_warning("sentinel %s does not know master '%s'", peer->name,
                    sentinel_cfg->sentinel_master);
    } else {
        peer->ballot.answer = SENTINEL_ANSWER_ADDR;
        sentinel_hostport(peer->ballot.addr, sizeof(peer->ballot.addr), host, port);
        snprintf(peer->last_answer, sizeof(peer->last_answer), "master at %s", peer->ballot.addr);
    }
}

static void sentinel_confirm(const char *name);

/* The candidate's answer to ROLE: "master" confirms it. */
static void sentinel_on_role(const char *text, size_t len)
{
    struct respwalk w = {text, text + len};
    char role[32], name[SENTINEL_NAME_MAX];
    long long n;

    snprintf(name, sizeof(name), "%s", sentinel_candidate);
    sentinel_candidate[0] = '\0';
    sentinel_link_close(&sentinel_role);
    if (text[0] != '-' && respwalk_array(&w, &n) == 0 && n > 0 &&
        sentinel_bulk(&w, role, sizeof(role)) == 0 && strcmp(role, "master") == 0) {
        sentinel_confirm(name);
        return;
    }
    log_warning("sentinel: %s was named primary of '%s' but says it is %.*s; asking again",
                name, sentinel_cfg->sentinel_master, text[0] == '-' ? (int)strcspn(text, "\r\n")
                                                                   : (int)strlen(role),
                text[0] == '-' ? text : role);
    sentinel_next_ask_ms = server_now_ms() + SENTINEL_RETRY_ASK_MS;
    sentinel_ask_wanted = 1;
}

static void sentinel_on_reply(struct sentinel_link *link, enum sentinel_expect what,
                              const char *text, size_t len)
{
    switch (what) {
    case EXPECT_AUTH:
        if (text[0] == '-')
            log_warning("%s %s refused sluice's AUTH: %.*s",
                        link->peer != NULL ? "sentinel" : "backend",
                        link->peer != NULL ? link->peer->name : sentinel_candidate,
                        (int)strcspn(text, "\r\n"), text);
        break;
    case EXPECT_SUB:
        if (text[0] != '-') {
            link->peer->subscribed = 1;
            sentinel_all_down_logged = 0;
        }
        break;
    case EXPECT_ADDR:
        if (link->peer->asked)
            sentinel_on_addr(link->peer, text, len);
        break;
    case EXPECT_REPLICAS:
        /* The round's last question to it. */
        if (link->peer->asked) {
            sentinel_vote_parse_replicas(&link->peer->ballot, text, len);
            sentinel_peer_done(link->peer);
        }
        break;
    case EXPECT_ROLE:
        sentinel_on_role(text, len);
        break;
    }
}

/* A pub/sub message on PEER's sub link: +switch-master names the new
 * primary ("name oldip oldport newip newport"), +new-epoch the epoch. */
static void sentinel_on_message(struct sentinel_peer *peer, const char *text, size_t len)
{
    struct respwalk w = {text, text + len};
    char kind[16], channel[48], body[600], name[256], oldip[256], newip[256], newport[16];
    char addr[SENTINEL_NAME_MAX];
    long long n;

    if (respwalk_array(&w, &n) != 0 || n != 3 || sentinel_bulk(&w, kind, sizeof(kind)) ||
        sentinel_bulk(&w, channel, sizeof(channel)) || sentinel_bulk(&w, body, sizeof(body)) ||
        strcmp(kind, "message") != 0)
        return;
    sentinel_failover_on_message(peer->name, channel, body, sentinel_primary);
    if (strcmp(channel, "+new-epoch") == 0) {
        sentinel_epoch = strtoll(body, NULL, 10);
        return;
    }
    if (strcmp(channel, "+switch-master") != 0 ||
        sscanf(body, "%255s %255s %*s %255s %15s", name, oldip, newip, newport) != 4 ||
        strcmp(name, sentinel_cfg->sentinel_master) != 0)
        return;
    sentinel_hostport(addr, sizeof(addr), newip, newport);
    log_notice("sentinel %s: +switch-master %s", peer->name, body);
    /* One Sentinel's word: a reason to ask them all, no more (it may have
     * believed a forged hello). */
    if (strcmp(addr, sentinel_primary) != 0) {
        sentinel_again = 1;
        sentinel_next_ask_ms = 0;
    }
}

/* ---------------------------------------------------------------------
 * Asking */

static void sentinel_want_ask(const char *why)
{
    if (sentinel_ask_wanted || sentinel_round)
        return;
    log_notice("sentinel: asking the Sentinels for master '%s' again: %s",
             sentinel_cfg->sentinel_master, why);
    sentinel_ask_wanted = 1;
    sentinel_next_ask_ms = 0;
}

/* Check with ROLE that NAME is a primary before anything else goes
 * there (sentinel_on_role). */
static void sentinel_check_role(const char *name)
{
    char host[256];
    int port;
    char err[200];

    if (value_hostport(name, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        log_warning("sentinel: bad address %s: %s", name, err);
        return;
    }
    snprintf(sentinel_candidate, sizeof(sentinel_candidate), "%s", name);
    snprintf(sentinel_role.host, sizeof(sentinel_role.host), "%s", host);
    sentinel_role.port = port;
    sentinel_role_sent_ms = server_now_ms();
    sentinel_link_connect(&sentinel_role);
}

/* Log, once per address, each Sentinel that names another primary than
 * the majority's AGREED (a forged hello may have convinced it). */
static void sentinel_note_dissent(const char *agreed)
{
    for (int i = 0; i < sentinel_peer_count; i++) {
        struct sentinel_peer *p = &sentinel_peers[i];
        if (p->ballot.answer != SENTINEL_ANSWER_ADDR || strcmp(p->ballot.addr, agreed) == 0) {
            p->dissent[0] = '\0';
            continue;
        }
        if (strcmp(p->dissent, p->ballot.addr) == 0)
            continue;
        snprintf(p->dissent, sizeof(p->dissent), "%s", p->ballot.addr);
        log_warning("sentinel %s names %s the primary of '%s', but a majority name %s: "
                    "not followed", p->name, p->ballot.addr, sentinel_cfg->sentinel_master,
                    agreed);
    }
}

/* A round without a majority: said once while it stays the same; asked
 * again soon when some named an address (a change going round). */
static void sentinel_no_majority(int votes, const char *best, int answered, int unknown)
{
    char what[sizeof(sentinel_split)];

    snprintf(what, sizeof(what), "%d of %d Sentinels name %s, %d answered, %d do not know it",
             votes, sentinel_peer_count, best[0] != '\0' ? best : "no address", answered, unknown);
    if (strcmp(what, sentinel_split) != 0 && answered > 0)
        log_warning("sentinel: no majority (%d of %d) names one primary for master '%s' (%s); "
                    "keeping %s", sentinel_vote_needed(sentinel_peer_count), sentinel_peer_count,
                    sentinel_cfg->sentinel_master, what,
                    sentinel_primary[0] != '\0' ? sentinel_primary : "none");
    snprintf(sentinel_split, sizeof(sentinel_split), "%s", what);
    if (answered > 0 && unknown == answered) {
        log_error("sentinel: every Sentinel that answered (%d of %d) does not know master '%s'",
                  answered, sentinel_peer_count, sentinel_cfg->sentinel_master);
        if (!sentinel_running)
            sentinel_failed = 1;
    }
    sentinel_next_ask_ms = server_now_ms() + (votes > 0 ? SENTINEL_SPLIT_RETRY_MS
                                                        : SENTINEL_RETRY_ASK_MS);
    sentinel_ask_wanted = 1;
}

/* Every Sentinel asked answered, or gave up: count the ballots. Only an
 * address a majority of the configured Sentinels name is checked (ROLE)
 * and followed; their agreed replicas go to replicas.c. */
static void sentinel_round_end(void)
{
    const struct sentinel_ballot *ballots[CONFIG_MAX_SEEDS];
    char agreed[SENTINEL_NAME_MAX];
    int answered = 0, unknown = 0, votes;

    sentinel_round = 0;
    for (int i = 0; i < sentinel_peer_count; i++) {
        ballots[i] = &sentinel_peers[i].ballot;
        answered += ballots[i]->answer != SENTINEL_ANSWER_NONE;
        unknown += ballots[i]->answer == SENTINEL_ANSWER_UNKNOWN;
    }
    votes = sentinel_vote_primary(ballots, sentinel_peer_count, agreed, sizeof(agreed));
    if (votes < sentinel_vote_needed(sentinel_peer_count)) {
        sentinel_no_majority(votes, agreed, answered, unknown);
        return;
    }
    sentinel_split[0] = '\0';
    sentinel_note_dissent(agreed);
    sentinel_replica_count = sentinel_vote_replicas(ballots, sentinel_peer_count, agreed,
                                                    sentinel_replicas, SENTINEL_VOTE_REPLICAS);
    sentinel_check_role(agreed);   /* the same one too: is it still a primary? */
}

/* PEER's answers to this round are in, or will not come. */
static void sentinel_peer_done(struct sentinel_peer *peer)
{
    if (!peer->asked)
        return;
    peer->asked = 0;
    for (int i = 0; i < sentinel_peer_count; i++) {
        if (sentinel_peers[i].asked)
            return;
    }
    if (sentinel_round)
        sentinel_round_end();
}

/* A round: every Sentinel whose link is up is asked at once; none while
 * fewer than a majority are up (no answer could be followed: the tick
 * tries again). */
static void sentinel_ask(uint64_t now)
{
    const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinel_cfg->sentinel_master};
    const char *replicas[3] = {"SENTINEL", "REPLICAS", sentinel_cfg->sentinel_master};
    int asked = 0, up = 0;

    for (int i = 0; i < sentinel_peer_count; i++)
        up += sentinel_peers[i].cmd.up;
    if (up < sentinel_vote_needed(sentinel_peer_count))
        return;
    sentinel_round = 1;
    sentinel_again = 0;
    sentinel_ask_wanted = 0;
    sentinel_asked_ms = now;
    for (int i = 0; i < sentinel_peer_count; i++) {
        struct sentinel_peer *p = &sentinel_peers[i];
        memset(&p->ballot, 0, sizeof(p->ballot));
        p->asked = p->cmd.up && p->cmd.expect_count + 2 <= SENTINEL_EXPECT_MAX;
        if (!p->asked)
            continue;
        sentinel_send(&p->cmd, EXPECT_ADDR, 3, argv);
        sentinel_send(&p->cmd, EXPECT_REPLICAS, 3, replicas);
        asked++;
    }
    if (asked == 0)
        sentinel_round_end();
}

/* ---------------------------------------------------------------------
 * Switching */

/* NAME answered ROLE "master": it is the primary from now on. */
static void sentinel_confirm(const char *name)
{
    struct backend_node *old, *node;
    char was[SENTINEL_NAME_MAX];
    char epoch[32] = "unknown";
    const char *names[SENTINEL_VOTE_REPLICAS];

    /* The replicas the same majority listed with it (sentinel_round_end). */
    for (int i = 0; i < sentinel_replica_count; i++)
        names[i] = sentinel_replicas[i];
    replicas_listed(name, names, sentinel_replica_count);
    sentinel_ask_wanted = 0;
    sentinel_next_ask_ms = server_now_ms() + (uint64_t)sentinel_cfg->sentinel_refresh_interval_ms;
    if (strcmp(name, sentinel_primary) == 0)
        return;
    snprintf(was, sizeof(was), "%s", sentinel_primary);
    snprintf(sentinel_primary, sizeof(sentinel_primary), "%s", name);
    if (!sentinel_running) {
        log_notice("sentinel: master '%s' is at %s", sentinel_cfg->sentinel_master, name);
        return;
    }
    old = backend_default_node();
    node = backend_node_get(name);
    if (node == NULL)
        return;
    backend_primary_set(node);
    sentinel_failover_switching(old, node);   /* before old's connections retire */
    if (old != NULL && old != node) {
        backend_node_retire(old, 1);
        backend_node_drop_private(old, "the primary failed over");
    }
    if (sentinel_epoch >= 0)
        snprintf(epoch, sizeof(epoch), "%lld", sentinel_epoch);
    log_warning("sentinel: master '%s' switched from %s to %s (epoch %s)",
                sentinel_cfg->sentinel_master, was, name, epoch);
    /* Locks the old primary granted may be lost: the grace starts now,
     * before anything goes to the new one. Its fence epoch (its clock, as
     * for any new master_replid) follows from its INFO: Sentinel's config
     * epoch is no time, and need not be above the one the last change
     * used. */
    primary_switched("sentinel switched the primary");
    primary_node_up(node);
    sentinel_switches++;
    (*sentinel_metric_switches)++;
    sentinel_last_switch = time(NULL);
    /* Last: the held writes go to NODE, none to OLD's sessions, and a held
     * LOCK meets the grace just begun. */
    sentinel_failover_switched();
}

/* ---------------------------------------------------------------------
 * Requests during a failover */

static void sentinel_fail(struct request *req, const char *text)
{
    struct evbuffer *err = evbuffer_new();

    reply_error(err, "%s", text);
    backend_deliver(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
}

/* Whether REQ may wait for the primary: for failover_retry_window from
 * its first failure. */
static int sentinel_hold(struct request *req)
{
    uint64_t now = server_now_ms();
    struct sentinel_held *h;

    if (req->retry_since_ms == 0)
        req->retry_since_ms = now;
    if (now - req->retry_since_ms >= (uint64_t)sentinel_cfg->failover_retry_window_ms ||
        (h = calloc(1, sizeof(*h))) == NULL)
        return 0;
    req->flags |= REQ_DETACHED;
    h->req = req;
    *sentinel_held_tail = h;
    sentinel_held_tail = &h->next;
    return 1;
}

int sentinel_take_unsent(struct request *req)
{
    return sentinel_enabled() && request_has_bytes(req) && sentinel_hold(req);
}

/* Whether REQ may run twice: it only reads. */
static int sentinel_rerunnable(const struct request *req)
{
    if (req->client == NULL)
        return (req->flags & REQ_RERUNNABLE) != 0;
    return req->cmd != NULL && (req->cmd->flags & CMD_READONLY) && !(req->cmd->flags & CMD_WRITE);
}

/* Whether REQ's error may be text its command wrote after it ran: a
 * script or function, DEBUG, or a command the table does not know. */
static int sentinel_may_forge(const struct request *req)
{
    return req->client != NULL &&
           (req->cmd == NULL || placement_role(req->cmd) == ROLE_SCRIPT ||
            strncmp(req->cmd->name, "debug", 5) == 0);
}

/* Send REQ (its bytes) to the primary's shared connection of its kind,
 * or hold it again when that is down. */
static void sentinel_resend(struct request *req)
{
    struct backend_node *node = backend_default_node();
    struct backend_conn *conn = backend_resend_conn(node, req);
    char err[512];

    if (conn == NULL) {
        sentinel_fail(req, "-ERR out of memory");
        return;
    }
    if (backend_send(conn, req, NULL, err, sizeof(err)) != 0 && !sentinel_hold(req))
        sentinel_fail(req, err);
}

/* Send the held requests once the primary is up and sure; give up on
 * those whose window passed; free those whose client went. */
static void sentinel_run_held(uint64_t now)
{
    struct sentinel_held *h, *list = sentinel_held_first;
    int ready = backend_node_up(backend_default_node()) && sentinel_candidate[0] == '\0' &&
                !sentinel_ask_wanted && !sentinel_round && !sentinel_again;

    sentinel_held_first = NULL;
    sentinel_held_tail = &sentinel_held_first;
    while ((h = list) != NULL) {
        struct request *req = h->req;
        list = h->next;
        if (req->client == NULL && req->on_reply == NULL) {
            request_free(req);
            free(h);
            continue;
        }
        if (ready || now - req->retry_since_ms >= (uint64_t)sentinel_cfg->failover_retry_window_ms) {
            req->flags &= ~(unsigned)REQ_DETACHED;
            if (ready)
                sentinel_resend(req);
            else
                sentinel_fail(req, "-ERR backend unavailable: no primary for master within "
                                   "failover_retry_window");
            free(h);
            continue;
        }
        *sentinel_held_tail = h;
        sentinel_held_tail = &h->next;
        h->next = NULL;
    }
}

/* The backend filter (backend_reply_filter_fn). */
static int sentinel_reply_filter(struct backend_conn *conn, struct request *req,
                                 struct evbuffer *src, size_t len, int conn_failed)
{
    char text[16] = {0};

    if (!backend_conn_is_shared(conn) || !request_has_bytes(req) ||
        (req->client == NULL && req->on_reply == NULL))
        return 0;
    if (conn_failed) {
        sentinel_want_ask("a connection to the primary failed");
        evbuffer_drain(src, len);
        if (((req->flags & REQ_UNWRITTEN) || sentinel_rerunnable(req)) && sentinel_hold(req))
            return 1;
        sentinel_fail(req, SENTINEL_FAILOVER_ERROR);
        return 1;
    }
    evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
    if (strncmp(text, "-READONLY", 9) != 0)
        return 0;
    /* Only a hint: a script can return this text. Ask again, at most once
     * per SENTINEL_RETRY_ASK_MS (a client looping over such a script must
     * not keep the Sentinels busy nor fill the log); a command that cannot
     * have run waits for the answer. */
    if (server_now_ms() - sentinel_hint_ms >= SENTINEL_RETRY_ASK_MS) {
        sentinel_hint_ms = server_now_ms();
        sentinel_want_ask("a node answered -READONLY");
    }
    if (sentinel_may_forge(req) || !sentinel_hold(req))
        return 0;
    evbuffer_drain(src, len);
    return 1;
}

/* ---------------------------------------------------------------------
 * Life cycle */

/* Sentinels up now; the all-down state is logged once. */
static void sentinel_count_up(void)
{
    int up = 0;

    for (int i = 0; i < sentinel_peer_count; i++)
        up += sentinel_peers[i].cmd.up;
    metrics_gauge(METRIC_sentinels_up, NULL, NULL, up);
    if (up == 0 && sentinel_running && !sentinel_all_down_logged) {
        log_warning("sentinel: no Sentinel reachable; serving the last known primary %s",
                    sentinel_primary);
        sentinel_all_down_logged = 1;
    } else if (up > 0 && sentinel_all_down_logged) {
        log_notice("sentinel: %d Sentinel(s) reachable again", up);
        sentinel_all_down_logged = 0;
    }
}

static void sentinel_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();

    (void)fd;
    (void)what;
    (void)arg;
    for (int i = 0; i < sentinel_peer_count; i++) {
        struct sentinel_link *links[2] = {&sentinel_peers[i].cmd, &sentinel_peers[i].sub};
        for (int k = 0; k < 2; k++) {
            if (links[k]->bev == NULL && links[k]->lookup == NULL &&
                now - links[k]->down_ms >= SENTINEL_RECONNECT_MS)
                sentinel_link_connect(links[k]);
        }
    }
    /* A Sentinel that does not answer in time: its link is dropped (it
     * reconnects), its ballot blank. */
    for (int i = 0; sentinel_round && now - sentinel_asked_ms > SENTINEL_ANSWER_TIMEOUT_MS &&
                    i < sentinel_peer_count; i++) {
        if (sentinel_peers[i].asked)
            sentinel_link_down(&sentinel_peers[i].cmd, "no answer in time");
    }
    if (sentinel_candidate[0] != '\0' && now - sentinel_role_sent_ms > SENTINEL_ANSWER_TIMEOUT_MS)
        sentinel_link_down(&sentinel_role, "no answer in time");
    if (sentinel_running && !sentinel_round && !sentinel_ask_wanted &&
        !backend_node_up(backend_default_node()))
        sentinel_want_ask("the primary is down");
    /* +switch-master asks at once, though at most every
     * SENTINEL_SPLIT_RETRY_MS / 2 (a Sentinel repeating it is no storm). */
    if (((sentinel_again && now - sentinel_asked_ms >= SENTINEL_SPLIT_RETRY_MS / 2) ||
         now >= sentinel_next_ask_ms) && !sentinel_round &&
        sentinel_candidate[0] == '\0')
        sentinel_ask(now);
    if (sentinel_running) {
        sentinel_run_held(now);
        sentinel_failover_tick(now);
    }
    sentinel_count_up();
}

int sentinel_start(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
    struct timeval tv = {0, SENTINEL_TICK_MS * 1000};
    long long wait_ms = cfg->failover_retry_window_ms > 1000 ? cfg->failover_retry_window_ms : 1000;
    uint64_t deadline;

    if (!config_sentinel_mode(cfg))
        return 0;
    sentinel_base = base;
    sentinel_cfg = cfg;
    sentinel_metric_switches = metrics_counter(METRIC_sentinel_switches_total, NULL, NULL);
    metrics_gauge(METRIC_sentinels_up, NULL, NULL, 0);
    sentinel_peers = calloc((size_t)cfg->sentinel_count, sizeof(*sentinel_peers));
    if (sentinel_peers == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    sentinel_peer_count = cfg->sentinel_count;
    for (int i = 0; i < sentinel_peer_count; i++) {
        struct sentinel_peer *p = &sentinel_peers[i];
        snprintf(p->name, sizeof(p->name), "%s", cfg->sentinels[i]);
        p->cmd = (struct sentinel_link){.peer = p, .kind = LINK_CMD};
        p->sub = (struct sentinel_link){.peer = p, .kind = LINK_SUB};
        value_hostport(p->name, p->cmd.host, sizeof(p->cmd.host), &p->cmd.port, err, errlen);
        memcpy(p->sub.host, p->cmd.host, sizeof(p->sub.host));
        p->sub.port = p->cmd.port;
        respframe_init(&p->cmd.frame);
        respframe_init(&p->sub.frame);
    }
    sentinel_role.kind = LINK_ROLE;
    respframe_init(&sentinel_role.frame);
    sentinel_ask_wanted = 1;
    sentinel_tick = event_new(base, -1, EV_PERSIST, sentinel_tick_cb, NULL);
    evtimer_add(sentinel_tick, &tv);
    /* Nothing is served before the primary is known: run the loop (only
     * these connections are on it) until it is, or all say they do not
     * know the master. */
    deadline = server_now_ms() + (uint64_t)wait_ms;
    while (sentinel_primary[0] == '\0' && !sentinel_failed && server_now_ms() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    if (sentinel_primary[0] != '\0') {
        backend_primary_preset(sentinel_primary);
        return 0;
    }
    if (sentinel_failed)
        snprintf(err, errlen, "sentinel: every Sentinel that answered does not know master "
                              "'%s'", cfg->sentinel_master);
    else
        snprintf(err, errlen, "sentinel: no Sentinel of %d named a primary for master '%s' "
                              "within %lld ms", sentinel_peer_count, cfg->sentinel_master,
                 wait_ms);
    return -1;
}

void sentinel_run(void)
{
    if (!sentinel_enabled())
        return;
    sentinel_running = 1;
    backend_set_reply_filter(sentinel_reply_filter);
    sentinel_failover_start(sentinel_cfg);
    sentinel_next_ask_ms = server_now_ms() + (uint64_t)sentinel_cfg->sentinel_refresh_interval_ms;
}

void sentinel_free(void)
{
    struct sentinel_held *h;

    while ((h = sentinel_held_first) != NULL) {
        sentinel_held_first = h->next;
        request_free(h->req);
        free(h);
    }
    sentinel_held_tail = &sentinel_held_first;
    sentinel_failover_free();
    for (int i = 0; i < sentinel_peer_count; i++) {
        sentinel_link_close(&sentinel_peers[i].cmd);
        sentinel_link_close(&sentinel_peers[i].sub);
        respframe_release(&sentinel_peers[i].cmd.frame);
        respframe_release(&sentinel_peers[i].sub.frame);
    }
    sentinel_link_close(&sentinel_role);
    respframe_release(&sentinel_role.frame);
    free(sentinel_peers);
    sentinel_peers = NULL;
    sentinel_peer_count = 0;
    if (sentinel_tick != NULL)
        event_free(sentinel_tick);
    sentinel_tick = NULL;
    sentinel_cfg = NULL;
}

void sentinel_write_info(struct evbuffer *out)
{
    uint64_t now = server_now_ms();
    int up = 0;

    for (int i = 0; i < sentinel_peer_count; i++)
        up += sentinel_peers[i].cmd.up;
    evbuffer_add_printf(out, "sentinel_enabled:%d\r\n", sentinel_enabled());
    if (!sentinel_enabled())
        return;
    evbuffer_add_printf(out, "sentinel_master:%s\r\nsentinel_primary:%s\r\n"
                             "sentinel_sentinels:%d\r\nsentinel_sentinels_up:%d\r\n"
                             "sentinel_majority:%d\r\n"
                             "sentinel_state:%s\r\nsentinel_switches:%llu\r\n"
                             "sentinel_last_switch:%lld\r\nsentinel_epoch:%lld\r\n"
                             "sentinel_held_requests:%d\r\n",
                        sentinel_cfg->sentinel_master, sentinel_primary, sentinel_peer_count, up,
                        sentinel_vote_needed(sentinel_peer_count),
                        up == 0 ? "all_sentinels_down_serving_last_known_primary" : "ok",
                        (unsigned long long)sentinel_switches, (long long)sentinel_last_switch,
                        sentinel_epoch, sentinel_held_first != NULL);
    sentinel_failover_write_info(out);
    for (int i = 0; i < sentinel_replica_count; i++)
        evbuffer_add_printf(out, "sentinel_replica%d:%s\r\n", i, sentinel_replicas[i]);
    for (int i = 0; i < sentinel_peer_count; i++) {
        const struct sentinel_peer *p = &sentinel_peers[i];
        evbuffer_add_printf(out, "sentinel%d:addr=%s,connected=%d,subscribed=%d,"
                                 "last_answer_ms_ago=%lld,last_answer=%s\r\n",
                            i, p->name, p->cmd.up, p->subscribed,
                            p->last_answer_ms ? (long long)(now - p->last_answer_ms) : -1LL,
                            p->last_answer);
    }
}

/* ---------------------------------------------------------------------
 * sluice -t */

/* Ask ADDR, blocking (at most a second each way), GET-MASTER-ADDR-BY-NAME
 * for CFG's master. Returns 1 when it names an address, 0 when it does not
 * know the master, -1 (WHY set) when it could not be asked. */
static int sentinel_probe(const struct config *cfg, const char *addr, char *why, size_t size)
{
    const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", cfg->sentinel_master};
    struct evbuffer *out = evbuffer_new();
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[4096];
    size_t have = 0;
    int fd = -1, rc = -1, auth = cfg->sentinel_password != NULL;
    struct pollfd pfd;

    if (sockaddr_resolve(addr, 0, "sentinel", &ss, &len, why, size) != 0)
        goto done;
    fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) != 0) {
        snprintf(why, size, "cannot connect: %s", strerror(errno));
        goto done;
    }
    if (auth)
        sentinel_write_cmd(out, cfg->sentinel_user != NULL ? 3 : 2,
                           cfg->sentinel_user != NULL
                               ? (const char *const[]){"AUTH", cfg->sentinel_user,
                                                       cfg->sentinel_password}
                               : (const char *const[]){"AUTH", cfg->sentinel_password});
    sentinel_write_cmd(out, 3, argv);
    if (write(fd, evbuffer_pullup(out, -1), evbuffer_get_length(out)) < 0) {
        snprintf(why, size, "cannot write: %s", strerror(errno));
        goto done;
    }
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    while (have < sizeof(buf) - 1 && poll(&pfd, 1, 1000) == 1) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *p = auth ? strstr(buf, "\r\n") : buf;
        if (p == NULL)
            continue;
        if (auth && strncmp(buf, "-", 1) == 0) {
            snprintf(why, size, "refused sluice's AUTH: %.*s", (int)(p - buf), buf);
            goto done;
        }
        p = auth ? p + 2 : p;
        if (strncmp(p, "*-1\r\n", 5) == 0 || strncmp(p, "_\r\n", 3) == 0) {
            rc = 0;
            goto done;
        }
        if (p[0] == '-') {
            snprintf(why, size, "%.*s", (int)strcspn(p, "\r\n"), p);
            goto done;
        }
        if (p[0] == '*' && strstr(p, "\r\n$") != NULL) {
            rc = 1;
            goto done;
        }
    }
    snprintf(why, size, "no answer");
done:
    if (fd >= 0)
        close(fd);
    evbuffer_free(out);
    return rc;
}

void sentinel_check(const struct config *cfg, struct errlist *errs, struct errlist *warns)
{
    int line = config_key_line(cfg, "sentinel"), unknown = 0, answered = 0;
    char why[300];

    if (!config_sentinel_mode(cfg))
        return;
    if (cfg->sentinel_count % 2 == 0)
        errlist_add(warns, cfg->path, line,
                    "warning: %d Sentinels: sluice follows only a primary a majority (%d) of "
                    "them name, so it tolerates %d down; %d would tolerate %d",
                    cfg->sentinel_count, sentinel_vote_needed(cfg->sentinel_count),
                    cfg->sentinel_count - sentinel_vote_needed(cfg->sentinel_count),
                    cfg->sentinel_count + 1,
                    cfg->sentinel_count + 1 - sentinel_vote_needed(cfg->sentinel_count + 1));
    if (cfg->sentinel_tls) {
        errlist_add(warns, cfg->path, line, "warning: Sentinels behind TLS are not asked by -t");
        return;
    }
    for (int i = 0; i < cfg->sentinel_count; i++) {
        int rc = sentinel_probe(cfg, cfg->sentinels[i], why, sizeof(why));
        if (rc < 0)
            errlist_add(warns, cfg->path, line, "warning: sentinel %s: %s", cfg->sentinels[i],
                        why);
        answered += rc >= 0;
        unknown += rc == 0;
    }
    /* A Sentinel that answers and does not know the master is a config
     * that cannot work (a misspelt name): an error, so that an
     * ExecStartPre=sluice -t stops the unit. A Sentinel that is down is
     * only a warning: it may be back by the time sluice runs. */
    if (unknown > 0)
        errlist_add(errs, cfg->path, config_key_line(cfg, "sentinel_master"),
                    "%d of the %d Sentinels that answered do not know master '%s'",
                    unknown, answered, cfg->sentinel_master);
}
