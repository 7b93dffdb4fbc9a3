/* sentinel_failover.c - owns what a failover announced by Sentinel does to
 * writes: the hold (asked of the client layer through the hold hook, never
 * called directly), its bounds, and the check that what the old primary
 * acknowledged is on the promoted replica. It sends nothing but INFO
 * replication, and decides no primary (sentinel.c does, by majority).
 *
 *   any Sentinel: +try-failover ... +failover-state-send-slaveof-noone
 *        --> hold writes (reads go on); INFO replication on each shared
 *            connection of the old primary, behind what is in flight:
 *            its master_replid and master_repl_offset (O) once they drain
 *   majority-confirmed switch (sentinel_confirm)
 *        --> release the held writes to the new primary; its INFO:
 *            master_replid2 and second_repl_offset (S, promotion + 1)
 *   O < S and replid2 = the old replid: every acknowledged write is there;
 *   else: the writes acknowledged from FAILOVER_LOOKBACK_MS before the
 *         hold to the switch are counted unconfirmed (and logged)
 *   -failover-abort-* by every Sentinel that began one, or no switch in
 *   failover_retry_window: the held writes go to the primary of then; a
 *   Sentinel whose failover never switched holds nothing more until a
 *   switch (one that lies, or is stuck, cannot hold writes for ever).
 *   +switch-master alone holds nothing (the promotion is past, and one
 *   Sentinel could repeat it): it only times Sentinel's switch.
 */
#include "sentinel_failover.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_int.h"
#include "commands.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "request.h"
#include "respframe.h"
#include "sentinel_vote.h"
#include "server.h"

#define FAILOVER_SAMPLE_MS 100      /* the write count is sampled this often, */
#define FAILOVER_SAMPLES 64         /* this many kept (6.4 s) */
#define FAILOVER_LOOKBACK_MS 2000   /* unconfirmed: writes acknowledged from this long before
                                       the hold (a replica's lag; a sign that came late) */
#define FAILOVER_INFO_MAX 16384
#define FAILOVER_REPLID_LEN 40

/* What a channel's event says. */
enum failover_sign {
    SIGN_EARLY,   /* before Sentinel sends REPLICAOF NO ONE */
    SIGN_LATE,    /* the replica may be a primary already */
    SIGN_ABORT,   /* this Sentinel's failover stopped */
};

static const struct {
    const char *channel;
    enum failover_sign sign;
} failover_events[] = {
    {"+try-failover", SIGN_EARLY},
    {"+elected-leader", SIGN_EARLY},
    {"+failover-state-select-slave", SIGN_EARLY},
    {"+selected-slave", SIGN_EARLY},
    {"+failover-state-send-slaveof-noone", SIGN_EARLY},
    {"+failover-state-wait-promotion", SIGN_LATE},
    {"+promoted-slave", SIGN_LATE},
    {"+failover-state-reconf-slaves", SIGN_LATE},
    {"+failover-end-for-timeout", SIGN_LATE},
    {"+failover-end", SIGN_LATE},
    {"-failover-abort-not-elected", SIGN_ABORT},
    {"-failover-abort-no-good-slave", SIGN_ABORT},
    {"-failover-abort-slave-timeout", SIGN_ABORT},
};

static struct {
    const struct config *cfg;
    sentinel_failover_hold_fn *hold_hook;
    /* The hold. */
    int holding;
    uint64_t since_ms, until_ms, cap_ms;
    uint64_t switch_heard_ms;        /* first +switch-master of this hold, 0: none */
    char first_sign[64];
    char first_peer[SENTINEL_VOTE_NAME_MAX];
    int late;                        /* its first sign came after REPLICAOF NO ONE */
    long long epoch;                 /* the last +new-epoch heard, -1: none */
    long long hold_epoch;
    char active[CONFIG_MAX_SEEDS][SENTINEL_VOTE_NAME_MAX]; /* Sentinels failing over */
    char distrusted[CONFIG_MAX_SEEDS][SENTINEL_VOTE_NAME_MAX]; /* announced, never switched:
                                                                  not heard until a switch */
    /* The check of what the old primary acknowledged. */
    unsigned gen;                    /* replies of an older check are ignored */
    int checking;
    struct backend_node *old;
    int barrier_out, barrier_ok;
    long long old_offset;
    char old_replid[FAILOVER_REPLID_LEN + 1];
    int new_state;                   /* 0: not asked or waiting, 1: read, -1: failed */
    long long new_second;
    char new_replid2[FAILOVER_REPLID_LEN + 1];
    char new_name[SENTINEL_VOTE_NAME_MAX];
    int switched;
    uint64_t check_deadline_ms;
    uint64_t acked_from, acked_at_switch;
    /* Writes the primary acknowledged, and their count over time. */
    uint64_t acked;
    struct {
        uint64_t ms, acked;
    } samples[FAILOVER_SAMPLES];
    int sample_next;
    /* PROXY INFO. */
    uint64_t holds, confirmed, unconfirmed_checks, last_released;
    long long last_pause_ms, last_sentinel_ms;
    const char *last_verdict;
    uint64_t *metric_unconfirmed;
} fo = {.epoch = -1, .last_pause_ms = -1, .last_sentinel_ms = -1,
        .last_verdict = "none"};

void sentinel_failover_set_hold_hook(sentinel_failover_hold_fn *fn)
{
    fo.hold_hook = fn;
}

void sentinel_failover_start(const struct config *cfg)
{
    fo.cfg = cfg;
    fo.metric_unconfirmed = metrics_counter(METRIC_failover_writes_unconfirmed_total, NULL, NULL);
    backend_set_reply_note(sentinel_failover_note_reply);
}

/* ---------------------------------------------------------------------
 * The check */

/* The number after "FIELD:" in the INFO text TEXT into *N. */
static int failover_info_ll(const char *text, const char *field, long long *n)
{
    const char *p = strstr(text, field);

    if (p == NULL)
        return -1;
    *n = strtoll(p + strlen(field), NULL, 10);
    return 0;
}

/* The 40-character replication id after "FIELD:" into OUT. */
static int failover_info_replid(const char *text, const char *field, char *out)
{
    const char *p = strstr(text, field);

    out[0] = '\0';
    if (p == NULL || strlen(p + strlen(field)) < FAILOVER_REPLID_LEN)
        return -1;
    memcpy(out, p + strlen(field), FAILOVER_REPLID_LEN);
    out[FAILOVER_REPLID_LEN] = '\0';
    return 0;
}

/* The writes counted (fo.acked) at AT_MS, from the samples: the last one
 * at or before it (the oldest kept when none is). */
static uint64_t failover_acked_at(uint64_t at_ms)
{
    uint64_t best_ms = 0, best = fo.acked, oldest_ms = UINT64_MAX, oldest = fo.acked;

    for (int i = 0; i < FAILOVER_SAMPLES; i++) {
        uint64_t ms = fo.samples[i].ms;
        if (ms == 0)
            continue;
        if (ms <= at_ms && ms >= best_ms) {
            best_ms = ms;
            best = fo.samples[i].acked;
        }
        if (ms < oldest_ms) {
            oldest_ms = ms;
            oldest = fo.samples[i].acked;
        }
    }
    return best_ms != 0 ? best : oldest;
}

/* Both answers are in (or will not come): say whether what the old
 * primary acknowledged is on the new one; what cannot be ruled out lost
 * is counted. Ends the check. */
static void failover_judge(void)
{
    const char *master = fo.cfg->sentinel_master;
    uint64_t n = fo.acked_at_switch - fo.acked_from;

    fo.checking = 0;
    fo.gen++;
    if (fo.barrier_ok && fo.new_state == 1 && strcmp(fo.old_replid, fo.new_replid2) == 0 &&
        fo.old_offset < fo.new_second) {
        fo.confirmed++;
        fo.last_verdict = "confirmed";
        log_notice("sentinel: failover of '%s': confirmed, every write the old primary "
                   "acknowledged is on %s (its offset %lld; the new one has all up to %lld)",
                   master, fo.new_name, fo.old_offset, fo.new_second - 1);
        return;
    }
    if (n == 0) {
        fo.confirmed++;
        fo.last_verdict = "confirmed";
        log_notice("sentinel: failover of '%s': confirmed, no write was acknowledged by the "
                   "old primary in the %d ms before the hold", master, FAILOVER_LOOKBACK_MS);
        return;
    }
    fo.unconfirmed_checks++;
    fo.last_verdict = "unconfirmed";
    *fo.metric_unconfirmed += n;
    log_warning("sentinel: failover of '%s': NOT confirmed that the writes the old primary "
                "acknowledged are on %s (%s): %llu writes acknowledged from %d ms before the "
                "hold to the switch may be lost (sluice_failover_writes_unconfirmed_total)",
                master, fo.new_name,
                !fo.barrier_ok ? "the old primary's offset is unknown"
                : fo.new_state != 1 ? "the new primary's offsets are unknown"
                : strcmp(fo.old_replid, fo.new_replid2) != 0
                    ? "it does not continue the old primary's history"
                    : "it was promoted before all of them reached it",
                (unsigned long long)n, FAILOVER_LOOKBACK_MS);
}

static void failover_maybe_judge(void)
{
    if (fo.checking && fo.switched && fo.barrier_out == 0 && fo.new_state != 0)
        failover_judge();
}

/* The reply of LEN bytes at the head of SRC into TEXT (cut to fit); REQ,
 * sluice's own, drained and freed. Returns the check it belongs to. */
static unsigned failover_take_reply(struct request *req, struct evbuffer *src, size_t len,
                                    char *text, size_t size)
{
    unsigned gen = (unsigned)(uintptr_t)req->ctx;

    memset(text, 0, size);
    evbuffer_copyout(src, text, len < size - 1 ? len : size - 1);
    evbuffer_drain(src, len);
    request_free(req);
    return gen;
}

/* The old primary's INFO replication, behind what was in flight on one
 * of its connections. */
static void failover_old_info_cb(struct request *req, struct evbuffer *src, size_t len, int type)
{
    char *text = malloc(FAILOVER_INFO_MAX);
    long long offset;
    char replid[FAILOVER_REPLID_LEN + 1];

    if (text == NULL) {
        evbuffer_drain(src, len);
        request_free(req);
        return;
    }
    if (failover_take_reply(req, src, len, text, FAILOVER_INFO_MAX) == fo.gen && fo.checking) {
        fo.barrier_out--;
        if (type != REPLY_ERROR && failover_info_ll(text, "master_repl_offset:", &offset) == 0 &&
            failover_info_replid(text, "master_replid:", replid) == 0 &&
            (!fo.barrier_ok || offset > fo.old_offset)) {
            fo.old_offset = offset;
            memcpy(fo.old_replid, replid, sizeof(replid));
            fo.barrier_ok = 1;
        }
        failover_maybe_judge();
    }
    free(text);
}

/* The new primary's INFO replication: where it was promoted. */
static void failover_new_info_cb(struct request *req, struct evbuffer *src, size_t len, int type)
{
    char *text = malloc(FAILOVER_INFO_MAX);

    if (text == NULL) {
        evbuffer_drain(src, len);
        request_free(req);
        return;
    }
    if (failover_take_reply(req, src, len, text, FAILOVER_INFO_MAX) == fo.gen && fo.checking) {
        fo.new_state = type != REPLY_ERROR &&
                               failover_info_ll(text, "second_repl_offset:", &fo.new_second) == 0 &&
                               failover_info_replid(text, "master_replid2:", fo.new_replid2) == 0
                           ? 1
                           : -1;
        failover_maybe_judge();
    }
    free(text);
}

static int failover_send_info(struct backend_conn *conn, request_reply_fn *cb)
{
    struct evbuffer *bytes = evbuffer_new();
    int rc;

    if (bytes == NULL)
        return -1;
    evbuffer_add_printf(bytes, "*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n");
    rc = backend_send_internal(conn, bytes, cb, (void *)(uintptr_t)fo.gen, NULL);
    evbuffer_free(bytes);
    return rc;
}

/* Begin the check of OLD: INFO on each of its shared connections up (each
 * answers after the requests before it, so the largest offset covers every
 * write acknowledged so far); a one-shot connection when none is up.
 * ACKED_FROM_MS: from when acknowledged writes are at stake. */
static void failover_check_begin(struct backend_node *old, uint64_t acked_from_ms)
{
    struct backend_conn *conn;

    if (fo.checking)
        failover_judge();   /* the previous one, with what came */
    fo.gen++;
    fo.checking = 1;
    fo.old = old;
    fo.barrier_out = fo.barrier_ok = fo.switched = fo.new_state = 0;
    fo.old_replid[0] = fo.new_replid2[0] = fo.new_name[0] = '\0';
    fo.acked_from = failover_acked_at(acked_from_ms);
    if (old == NULL)
        return;
    TAILQ_FOREACH(conn, &old->conns, node_link) {
        if (conn->owner == NULL && !conn->oneshot && !conn->spare && !conn->tunnel &&
            !conn->passthrough && conn->state == BACKEND_UP &&
            failover_send_info(conn, failover_old_info_cb) == 0)
            fo.barrier_out++;
    }
    conn = fo.barrier_out == 0 ? backend_control_conn(old, NULL) : NULL;
    if (conn != NULL && failover_send_info(conn, failover_old_info_cb) == 0)
        fo.barrier_out++;
}

/* ---------------------------------------------------------------------
 * The hold */

static void failover_active_clear(void)
{
    memset(fo.active, 0, sizeof(fo.active));
}

/* Put PEER in the set SET (ON 1) or take it out; returns how many are in. */
static int failover_set_put(char set[][SENTINEL_VOTE_NAME_MAX], const char *peer, int on)
{
    int count = 0, slot = -1;

    for (int i = 0; i < CONFIG_MAX_SEEDS; i++) {
        if (set[i][0] != '\0' && strcmp(set[i], peer) == 0) {
            if (!on)
                set[i][0] = '\0';
            slot = -2;
        } else if (set[i][0] == '\0' && slot == -1) {
            slot = i;
        }
    }
    if (on && slot >= 0)
        snprintf(set[slot], SENTINEL_VOTE_NAME_MAX, "%s", peer);
    for (int i = 0; i < CONFIG_MAX_SEEDS; i++)
        count += set[i][0] != '\0';
    return count;
}

static int failover_set_has(char set[][SENTINEL_VOTE_NAME_MAX], const char *peer)
{
    for (int i = 0; i < CONFIG_MAX_SEEDS; i++) {
        if (set[i][0] != '\0' && strcmp(set[i], peer) == 0)
            return 1;
    }
    return 0;
}

/* End the hold for WHY: the held writes go to the primary of now. */
static void failover_release(const char *why)
{
    uint64_t now = server_now_ms();
    int released = fo.hold_hook != NULL ? fo.hold_hook(0) : 0;

    fo.holding = 0;
    fo.last_released = (uint64_t)released;
    fo.last_pause_ms = (long long)(now - fo.since_ms);
    fo.last_sentinel_ms = fo.switch_heard_ms ? (long long)(fo.switch_heard_ms - fo.since_ms) : -1;
    failover_active_clear();
    log_notice("sentinel: failover of '%s': %s; %d held requests released after a write pause "
               "of %lld ms (Sentinel's own switch, first event to +switch-master: %lld ms)",
               fo.cfg->sentinel_master, why, released, fo.last_pause_ms, fo.last_sentinel_ms);
}

/* SIGN on CHANNEL from PEER: a failover of our master is under way. */
static void failover_sign(const char *peer, const char *channel, enum failover_sign sign)
{
    uint64_t now = server_now_ms();
    uint64_t window = (uint64_t)fo.cfg->failover_retry_window_ms;

    if (failover_set_has(fo.distrusted, peer))
        return;   /* its last failover held writes and never switched */
    failover_set_put(fo.active, peer, 1);
    if (fo.holding) {
        if (fo.epoch > fo.hold_epoch) {   /* another failover began meanwhile */
            fo.hold_epoch = fo.epoch;
            fo.until_ms = now + window < fo.cap_ms ? now + window : fo.cap_ms;
            log_warning("sentinel: another failover of '%s' (epoch %lld, %s from sentinel %s) "
                        "while writes are held: holding on, at most %lld ms more",
                        fo.cfg->sentinel_master, fo.epoch, channel, peer,
                        (long long)(fo.until_ms - now));
        }
        return;
    }
    if (window == 0 || fo.hold_hook == NULL)
        return;
    fo.holding = 1;
    fo.holds++;
    fo.since_ms = now;
    fo.until_ms = now + window;
    fo.cap_ms = now + 2 * window;
    fo.switch_heard_ms = 0;
    fo.hold_epoch = fo.epoch;
    fo.late = sign == SIGN_LATE;
    snprintf(fo.first_sign, sizeof(fo.first_sign), "%s", channel);
    snprintf(fo.first_peer, sizeof(fo.first_peer), "%s", peer);
    fo.hold_hook(1);
    log_write(fo.late ? LOG_WARNING : LOG_NOTICE,
        "sentinel: failover of '%s' detected (%s from sentinel %s%s): holding writes in sluice "
        "until the switch, at most %llu ms; reads go on", fo.cfg->sentinel_master, channel, peer,
        fo.late ? ", after the promotion began: writes just before may be unconfirmed" : "",
        (unsigned long long)window);
    failover_check_begin(backend_default_node(), now - FAILOVER_LOOKBACK_MS);
}

/* "master NAME ip port", or "slave ip:port ip port @ NAME mip mport": is
 * BODY about our master at CURRENT, the primary sluice uses? A Sentinel's
 * late events of a failover sluice already followed (the leader may say
 * +failover-end after the others' +switch-master) name the old address. */
static int failover_ours(const char *body, const char *current)
{
    const char *at = strstr(body, " @ ");
    const char *p = strncmp(body, "master ", 7) == 0 ? body + 7 : at != NULL ? at + 3 : NULL;
    char name[256], ip[256], port[16], addr[SENTINEL_VOTE_NAME_MAX];

    if (p == NULL || sscanf(p, "%255s %255s %15s", name, ip, port) != 3 ||
        strcmp(name, fo.cfg->sentinel_master) != 0)
        return 0;
    sentinel_vote_hostport(addr, sizeof(addr), ip, port);
    return strcmp(addr, current) == 0;
}

void sentinel_failover_on_message(const char *peer, const char *channel, const char *body,
                                  const char *current)
{
    char name[256], newip[256], newport[16], addr[SENTINEL_VOTE_NAME_MAX];
    size_t i;

    if (fo.cfg == NULL)
        return;
    if (strcmp(channel, "+new-epoch") == 0) {
        fo.epoch = strtoll(body, NULL, 10);
        return;
    }
    if (strcmp(channel, "+switch-master") == 0) {
        /* "name oldip oldport newip newport": when Sentinel switched. */
        if (sscanf(body, "%255s %*s %*s %255s %15s", name, newip, newport) != 3 ||
            strcmp(name, fo.cfg->sentinel_master) != 0)
            return;
        sentinel_vote_hostport(addr, sizeof(addr), newip, newport);
        if (fo.holding && fo.switch_heard_ms == 0 && strcmp(addr, current) != 0)
            fo.switch_heard_ms = server_now_ms();
        return;
    }
    for (i = 0; i < sizeof(failover_events) / sizeof(failover_events[0]); i++) {
        if (strcmp(failover_events[i].channel, channel) == 0)
            break;
    }
    if (i == sizeof(failover_events) / sizeof(failover_events[0]) || !failover_ours(body, current))
        return;
    if (failover_events[i].sign != SIGN_ABORT) {
        failover_sign(peer, channel, failover_events[i].sign);
        return;
    }
    log_notice("sentinel %s: %s %s", peer, channel, body);
    /* The hold ends when every Sentinel that began a failover stopped, and
     * none said the master switched. */
    if (failover_set_put(fo.active, peer, 0) == 0 && fo.holding && fo.switch_heard_ms == 0) {
        fo.checking = 0;   /* no switch: the old primary keeps what it has */
        fo.gen++;
        failover_release("aborted by Sentinel, no switch");
    }
}

void sentinel_failover_switching(struct backend_node *old, struct backend_node *node)
{
    uint64_t now = server_now_ms();

    if (fo.cfg == NULL)
        return;
    if (!fo.holding && !(fo.checking && fo.old == old)) {
        /* No event came before the switch: all since the promotion, which
         * sluice did not see, is at stake. */
        log_warning("sentinel: master '%s' switched with no failover event heard before: "
                    "writes acknowledged just before may be unconfirmed",
                    fo.cfg->sentinel_master);
        failover_check_begin(old, now - FAILOVER_LOOKBACK_MS);
    }
    fo.switched = 1;
    fo.acked_at_switch = fo.acked;
    fo.check_deadline_ms = now + (uint64_t)fo.cfg->failover_retry_window_ms;
    snprintf(fo.new_name, sizeof(fo.new_name), "%s", backend_node_name(node));
    struct backend_conn *conn = backend_control_conn(node, NULL);
    fo.new_state = conn != NULL && failover_send_info(conn, failover_new_info_cb) == 0 ? 0 : -1;
}

void sentinel_failover_switched(void)
{
    if (fo.cfg == NULL)
        return;
    if (fo.holding) {
        char why[400];
        snprintf(why, sizeof(why), "switched to %s", fo.new_name);
        failover_release(why);
    }
    memset(fo.distrusted, 0, sizeof(fo.distrusted));
    failover_maybe_judge();
}

void sentinel_failover_tick(uint64_t now_ms)
{
    int last = (fo.sample_next + FAILOVER_SAMPLES - 1) % FAILOVER_SAMPLES;

    if (fo.cfg == NULL)
        return;
    if (now_ms - fo.samples[last].ms >= FAILOVER_SAMPLE_MS) {
        fo.samples[fo.sample_next].ms = now_ms;
        fo.samples[fo.sample_next].acked = fo.acked;
        fo.sample_next = (fo.sample_next + 1) % FAILOVER_SAMPLES;
    }
    if (fo.holding && now_ms >= fo.until_ms) {
        /* A failover that never completes (or a Sentinel that only says
         * so) holds writes no longer than the window, and this one's
         * events hold them no more. */
        for (int i = 0; i < CONFIG_MAX_SEEDS; i++) {
            if (fo.active[i][0] != '\0')
                failover_set_put(fo.distrusted, fo.active[i], 1);
        }
        fo.checking = 0;
        fo.gen++;
        log_warning("sentinel: failover of '%s' announced (%s from sentinel %s) but no switch "
                    "within failover_retry_window; the Sentinels that announced it hold no "
                    "writes until a switch", fo.cfg->sentinel_master, fo.first_sign,
                    fo.first_peer);
        failover_release("gave up waiting");
    }
    if (fo.checking && fo.switched && now_ms >= fo.check_deadline_ms)
        failover_judge();
}

void sentinel_failover_note_reply(const struct backend_conn *conn, const struct request *req,
                                  int type)
{
    const struct command *cmd = req->cmd;

    if (fo.cfg == NULL || req->client == NULL || type == REPLY_ERROR ||
        conn->node != backend_default_node())
        return;
    if (cmd == NULL || (cmd->flags & (CMD_WRITE | CMD_MAY_REPLICATE)) ||
        strcmp(cmd->name, "exec") == 0)
        fo.acked++;
}

void sentinel_failover_write_info(struct evbuffer *out)
{
    if (fo.cfg == NULL)
        return;
    evbuffer_add_printf(out, "sentinel_failover_holding:%d\r\n"
                             "sentinel_failover_holds:%llu\r\n"
                             "sentinel_failover_last_write_pause_ms:%lld\r\n"
                             "sentinel_failover_last_sentinel_switch_ms:%lld\r\n"
                             "sentinel_failover_last_released:%llu\r\n"
                             "sentinel_failover_last_check:%s\r\n"
                             "sentinel_failover_confirmed:%llu\r\n"
                             "sentinel_failover_unconfirmed:%llu\r\n",
                        fo.holding, (unsigned long long)fo.holds, fo.last_pause_ms,
                        fo.last_sentinel_ms, (unsigned long long)fo.last_released,
                        fo.checking ? "checking" : fo.last_verdict,
                        (unsigned long long)fo.confirmed,
                        (unsigned long long)fo.unconfirmed_checks);
}

void sentinel_failover_free(void)
{
    fo.gen++;
    fo.checking = 0;
    fo.holding = 0;
    fo.cfg = NULL;
}
