/* control.c - owns the operator's controls over this sluice: a pause that
 * holds clients' requests (all, or writes) in sluice, not in Redis; a
 * drain that fails /readyz, then stops accepting and closes each client
 * between replies; and READY NO|YES. Every control is audited in the log
 * with who asked, from where. It never sends anything to Redis itself.
 *
 *   PAUSE [WRITE] [TIMEOUT ms] --> held: each client's next request that
 *                                  the pause covers, in arrival order
 *   RESUME / TIMEOUT passed    --> every held request given back, in order
 *   DRAIN [TIMEOUT ms]         --> /readyz 503 "draining"; after the grace
 *                                  no accept, clients closed between replies
 *   UNDRAIN                    --> ready again, accepting again
 *   failover hold (Sentinel)   --> writes held as by PAUSE WRITE, until the
 *                                  backend layer ends it (the switch)
 */
#include "control.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "client.h"
#include "commands.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "replicas.h"
#include "reply.h"
#include "request.h"
#include "server.h"
#include "sv.h"

/* The default grace of PROXY DRAIN: long enough for a load balancer's
 * health check to see /readyz fail a few times (every 5 s by default in
 * Kubernetes and most balancers) before the doors close. */
#define CONTROL_DRAIN_GRACE_MS 15000

enum control_pause_mode { CONTROL_PAUSE_NONE, CONTROL_PAUSE_WRITE, CONTROL_PAUSE_ALL };
static const char *const control_pause_names[] = {"no", "write", "all"};

enum control_drain_state { CONTROL_DRAIN_NONE, CONTROL_DRAIN_GRACE, CONTROL_DRAIN_CLOSED };
static const char *const control_drain_names[] = {"no", "grace", "closed"};

struct control_held {
    struct client *c;
    struct request *req;
    TAILQ_ENTRY(control_held) link;
};
TAILQ_HEAD(control_held_list, control_held);

static struct {
    enum control_pause_mode pause;
    int failover_hold;              /* Sentinel mode: a failover holds writes */
    uint64_t pause_until_ms;        /* 0: until RESUME */
    uint64_t pause_since_ms;
    struct control_held_list held;
    int held_count;
    unsigned long long held_total;  /* requests ever held */
    enum control_drain_state drain;
    uint64_t drain_close_at_ms;
    int not_ready;                  /* PROXY READY NO */
} control = {.held = TAILQ_HEAD_INITIALIZER(control.held)};

/* "PROXY PAUSE WRITE TIMEOUT 5000 by user 'admin' from 127.0.0.1:5000
 * (client 12)": every control, as it acts (event "control" in JSON, with
 * user, addr, client, command and result). */
static void control_audit(const struct client *caller, int argc, const struct sv *argv,
                          const char *result)
{
    char words[256];
    size_t at = 0;
    const char *user = caller->user != NULL ? caller->user : "default";
    const struct log_field f[] = {LOG_STR("user", user), LOG_STR("addr", caller->addr_text),
                                  LOG_NUM("client", caller->id), LOG_STR("command", words),
                                  LOG_STR("result", result)};

    for (int i = 0; i < argc && at < sizeof(words) - 1; i++) {
        int n = snprintf(words + at, sizeof(words) - at, "%s%.*s", i > 0 ? " " : "",
                         (int)(argv[i].len < 64 ? argv[i].len : 64), argv[i].ptr);
        at += n > 0 ? (size_t)n : 0;
    }
    for (size_t i = 0; i < at && i < sizeof(words); i++) {
        if ((unsigned char)words[i] < 0x20 || (unsigned char)words[i] == 0x7f)
            words[i] = '?';   /* one line per control, whatever was sent */
    }

    log_event(LOG_NOTICE, "control", f, 5, "%s by user '%s' from %s (client %llu): %s", words,
              user, caller->addr_text, (unsigned long long)caller->id, result);
}

/* The gauges, set at each change. */
static void control_gauges(void)
{
    metrics_gauge(METRIC_paused, NULL, NULL, control.pause != CONTROL_PAUSE_NONE);
    metrics_gauge(METRIC_pause_held_requests, NULL, NULL, control.held_count);
    metrics_gauge(METRIC_draining, NULL, NULL, control.drain != CONTROL_DRAIN_NONE);
}

int control_would_hold(const struct request *req, const struct sv *argv, int verb)
{
    const struct command *cmd = req->cmd;

    (void)argv;
    if (control.pause == CONTROL_PAUSE_NONE && !control.failover_hold)
        return 0;
    if (control.pause == CONTROL_PAUSE_ALL)
        return 1;
    /* WRITE, as Redis's CLIENT PAUSE WRITE: writes, what may replicate
     * (scripts, PUBLISH), EXEC, sluice's lock verbs; a command sluice
     * does not know may write too. */
    return verb || cmd == NULL || (cmd->flags & (CMD_WRITE | CMD_MAY_REPLICATE)) != 0 ||
           strcmp(cmd->name, "exec") == 0;
}

int control_hold(struct client *c, struct request *req, struct evbuffer *src)
{
    struct control_held *h = calloc(1, sizeof(*h));

    if (h == NULL || (src != NULL && request_take_raw(req, src) != 0)) {
        free(h);
        return -1;
    }
    h->c = c;
    h->req = req;
    TAILQ_INSERT_TAIL(&control.held, h, link);
    control.held_count++;
    control.held_total++;
    client_block(c);
    control_gauges();
    return 0;
}

void control_client_closed(struct client *c)
{
    struct control_held *h, *next;

    for (h = TAILQ_FIRST(&control.held); h != NULL; h = next) {
        next = TAILQ_NEXT(h, link);
        if (h->c != c)
            continue;
        TAILQ_REMOVE(&control.held, h, link);
        control.held_count--;
        request_free(h->req);
        free(h);
    }
    control_gauges();
}

/* Give every held request back, in the order held; each runs as if just
 * read, so one that a hold still covers (a failover hold after the
 * pause, or the reverse) is held again, at the end of a fresh list.
 * Returns how many were given back. */
static int control_release_all(void)
{
    struct control_held_list list = TAILQ_HEAD_INITIALIZER(list);
    struct control_held *h;
    int released = 0;

    TAILQ_CONCAT(&list, &control.held, link);
    while ((h = TAILQ_FIRST(&list)) != NULL) {
        TAILQ_REMOVE(&list, h, link);
        control.held_count--;
        released++;
        client_release_held(h->c, h->req, NULL);
        free(h);
    }
    return released;
}

/* End the pause: every held request goes on, in the order held. Each may
 * be held no more (the pause is over) and runs as if just read. */
static void control_end_pause(const char *why)
{
    int released;

    if (control.pause == CONTROL_PAUSE_NONE)
        return;
    control.pause = CONTROL_PAUSE_NONE;
    released = control_release_all();
    log_notice("pause ended (%s) after %llu ms: %d held requests released", why,
               (unsigned long long)(server_now_ms() - control.pause_since_ms), released);
    control_gauges();
}

/* "TIMEOUT ms" at ARGV[*I] (then *I moves past it): the milliseconds into
 * *MS. Returns 0, or -1 with the error in OUT. */
static int control_timeout_arg(int argc, const struct sv *argv, int *i, long long *ms,
                               struct evbuffer *out)
{
    char num[24];

    if (*i + 1 >= argc || argv[*i + 1].len == 0 || argv[*i + 1].len >= sizeof(num)) {
        reply_error(out, "syntax error");
        return -1;
    }
    memcpy(num, argv[*i + 1].ptr, argv[*i + 1].len);
    num[argv[*i + 1].len] = '\0';
    char *end;
    *ms = strtoll(num, &end, 10);
    if (*end != '\0' || *ms <= 0 || *ms > 86400000LL) {
        reply_error(out, "timeout is not an integer or out of range (1 to 86400000 ms)");
        return -1;
    }
    *i += 2;
    return 0;
}

void control_proxy_pause(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out)
{
    enum control_pause_mode mode = CONTROL_PAUSE_ALL;
    long long timeout = 0;
    char result[96];

    for (int i = 2; i < argc;) {
        if (sv_ieq(argv[i], "write") || sv_ieq(argv[i], "all")) {
            mode = sv_ieq(argv[i], "write") ? CONTROL_PAUSE_WRITE : CONTROL_PAUSE_ALL;
            i++;
        } else if (sv_ieq(argv[i], "timeout")) {
            if (control_timeout_arg(argc, argv, &i, &timeout, out) != 0)
                return;
        } else {
            reply_error(out, "syntax error");
            return;
        }
    }
    /* A pause that narrows (ALL to WRITE) lets the reads held go on: end
     * it and begin the new one. */
    if (control.pause == CONTROL_PAUSE_ALL && mode == CONTROL_PAUSE_WRITE)
        control_end_pause("narrowed to WRITE");
    if (control.pause == CONTROL_PAUSE_NONE)
        control.pause_since_ms = server_now_ms();
    control.pause = mode;
    control.pause_until_ms = timeout > 0 ? server_now_ms() + (uint64_t)timeout : 0;
    snprintf(result, sizeof(result), "%s paused%s", mode == CONTROL_PAUSE_ALL ? "all" : "writes",
             timeout > 0 ? " until the timeout or PROXY RESUME" : " until PROXY RESUME");
    control_audit(caller, argc, argv, result);
    control_gauges();
    reply_status(out, "OK");
}

void control_proxy_resume(struct client *caller, int argc, const struct sv *argv,
                          struct evbuffer *out)
{
    control_audit(caller, argc, argv,
                  control.pause == CONTROL_PAUSE_NONE ? "not paused" : "resuming");
    control_end_pause("PROXY RESUME");
    reply_status(out, "OK");
}

void control_proxy_drain(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out)
{
    long long grace = CONTROL_DRAIN_GRACE_MS;
    char result[96];

    for (int i = 2; i < argc;) {
        if (!sv_ieq(argv[i], "timeout")) {
            reply_error(out, "syntax error");
            return;
        }
        if (control_timeout_arg(argc, argv, &i, &grace, out) != 0)
            return;
    }
    if (control.drain == CONTROL_DRAIN_CLOSED) {
        control_audit(caller, argc, argv, "already drained");
        reply_status(out, "OK");
        return;
    }
    control.drain = CONTROL_DRAIN_GRACE;
    control.drain_close_at_ms = server_now_ms() + (uint64_t)grace;
    snprintf(result, sizeof(result), "/readyz fails; doors close in %lld ms", grace);
    control_audit(caller, argc, argv, result);
    control_gauges();
    reply_status(out, "OK");
}

void control_proxy_undrain(struct client *caller, int argc, const struct sv *argv,
                           struct evbuffer *out)
{
    if (control.drain == CONTROL_DRAIN_CLOSED)
        listener_set_accepting(1);
    control_audit(caller, argc, argv,
                  control.drain == CONTROL_DRAIN_NONE ? "not draining"
                  : control.drain == CONTROL_DRAIN_GRACE ? "drain stopped before the close"
                                                         : "accepting again");
    control.drain = CONTROL_DRAIN_NONE;
    control_gauges();
    reply_status(out, "OK");
}

void control_proxy_ready(struct client *caller, int argc, const struct sv *argv,
                         struct evbuffer *out)
{
    if (argc != 3 || (!sv_ieq(argv[2], "yes") && !sv_ieq(argv[2], "no"))) {
        reply_error(out, "syntax error: PROXY READY YES|NO");
        return;
    }
    control.not_ready = sv_ieq(argv[2], "no");
    control_audit(caller, argc, argv, control.not_ready ? "/readyz answers 503" : "/readyz "
                                                                                 "as the checks say");
    reply_status(out, "OK");
}

void control_proxy_node(struct client *caller, int argc, const struct sv *argv,
                        struct evbuffer *out)
{
    char name[300];
    int on;

    if (argc != 4 || argv[2].len == 0 || argv[2].len >= sizeof(name) ||
        (!sv_ieq(argv[3], "maintenance") && !sv_ieq(argv[3], "active"))) {
        reply_error(out, "syntax error: PROXY NODE host:port MAINTENANCE|ACTIVE");
        return;
    }
    memcpy(name, argv[2].ptr, argv[2].len);
    name[argv[2].len] = '\0';
    on = sv_ieq(argv[3], "maintenance");
    if (replicas_set_maintenance(name, on) != 0) {
        control_audit(caller, argc, argv, "refused: no such replica");
        reply_error(out, "no replica %s among those sluice reads from (PROXY INFO replication "
                         "lists them)", name);
        return;
    }
    control_audit(caller, argc, argv, on ? "no read goes there until ACTIVE" : "reads go there again");
    reply_status(out, "OK");
}

int control_failover_hold(int on)
{
    int released = 0;

    if (on) {
        control.failover_hold = 1;
        return 0;
    }
    if (!control.failover_hold)
        return 0;
    control.failover_hold = 0;
    /* An operator's pause still holds what it covers. */
    if (control.pause == CONTROL_PAUSE_NONE)
        released = control_release_all();
    control_gauges();
    return released;
}

int control_ready(char *why, size_t len)
{
    if (control.drain != CONTROL_DRAIN_NONE) {
        snprintf(why, len, "draining (PROXY DRAIN)%s",
                 control.drain == CONTROL_DRAIN_CLOSED ? ": no new connections" : "");
        return 0;
    }
    if (control.not_ready) {
        snprintf(why, len, "not ready by the operator (PROXY READY NO)");
        return 0;
    }
    return 1;
}

int control_drained(void)
{
    return control.drain == CONTROL_DRAIN_CLOSED;
}

void control_cron(uint64_t now_ms)
{
    if (control.pause != CONTROL_PAUSE_NONE && control.pause_until_ms != 0 &&
        now_ms >= control.pause_until_ms)
        control_end_pause("TIMEOUT passed");
    if (control.drain == CONTROL_DRAIN_GRACE && now_ms >= control.drain_close_at_ms) {
        control.drain = CONTROL_DRAIN_CLOSED;
        listener_set_accepting(0);
        log_notice("drain: the grace passed; no new connections, closing %d clients between "
                   "replies", client_count());
        client_shutdown_all();
    }
}

void control_write_info(struct evbuffer *out)
{
    uint64_t now = server_now_ms();

    evbuffer_add_printf(out,
                        "paused:%s\r\n"
                        "pause_remaining_ms:%lld\r\n"
                        "pause_held_requests:%d\r\n"
                        "pause_held_requests_total:%llu\r\n"
                        "draining:%s\r\n"
                        "drain_close_in_ms:%lld\r\n"
                        "ready_by_operator:%s\r\n"
                        "failover_hold:%s\r\n",
                        control_pause_names[control.pause],
                        control.pause != CONTROL_PAUSE_NONE && control.pause_until_ms > now
                            ? (long long)(control.pause_until_ms - now)
                            : (control.pause != CONTROL_PAUSE_NONE ? -1LL : 0LL),
                        control.held_count, control.held_total,
                        control_drain_names[control.drain],
                        control.drain == CONTROL_DRAIN_GRACE && control.drain_close_at_ms > now
                            ? (long long)(control.drain_close_at_ms - now)
                            : 0LL,
                        control.not_ready ? "no" : "yes", control.failover_hold ? "yes" : "no");
}
