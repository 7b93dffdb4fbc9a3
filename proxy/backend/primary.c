/* primary.c - owns the "primary changed" hook and, in standalone and
 * Sentinel mode, the watch of the primary's master_replid and run_id
 * (INFO server replication persistence, on each reconnect and every
 * PRIMARY_WATCH_MS), with what a hand-over passes on of it; in cluster
 * mode, the first look at each primary of the first slot map. How long ago
 * a primary seen first may have lost writes is primaryage.c's. It knows
 * nothing of locks: it only calls the hooks an upper layer registered.
 *
 *   node up / every second -> INFO server replication persistence
 *   role:master, master_replid X first seen -> primaryage -> hook(lost N ms ago)
 *   X != last (a promotion, or a restart: INFO cannot tell) -> hook(now)
 *   same X, another run_id (a restart keeping its replid) -> hook(now)
 *   first seen == the replid a hand-over passed on -> checked hook (same)
 *   after a Sentinel switch, replid2 == the last replid -> epoch hook only
 */
#include "primary.h"
#include "primaryage.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_int.h"
#include "log.h"
#include "pause.h"
#include "request.h"
#include "respframe.h"
#include "slot.h"

#define PRIMARY_WATCH_MS 1000
/* INFO server replication persistence: the replid, and for a first
 * contact the facts primaryage.c decides from. */
#define INFO_CALL "*4\r\n$4\r\nINFO\r\n$6\r\nserver\r\n$11\r\nreplication\r\n" \
                  "$11\r\npersistence\r\n"
#define PRIMARY_INFO_MAX 16384   /* bytes of INFO read: the fields are near its start */

static primary_changed_fn *primary_hook;
static char primary_replid[PRIMARY_REPLID_LEN + 1];   /* "" until first seen */
static long long primary_epoch;   /* the last epoch reported */
static struct event *primary_timer;
static struct backend_node *primary_node;
static struct backend_node *primary_asking;   /* the node an INFO is out to (NULL: none) */
static primary_checked_fn *primary_checked_hook;
static char primary_inherited[PRIMARY_REPLID_LEN + 1];   /* handed over; "" once settled */
static int primary_real_changes;   /* changes reported other than the first contact */
static int primary_info_refused;   /* Redis refused INFO, and the log said so */
static int primary_switch_reported;   /* the next new replid is a switch already reported */
static primary_epoch_fn *primary_epoch_hook;
static char primary_runid[PRIMARY_REPLID_LEN + 1];   /* of the primary last seen */
static long long primary_first_epoch;   /* the epoch of the first contact */

void primary_set_changed_hook(primary_changed_fn *fn)
{
    primary_hook = fn;
}

void primary_set_checked_hook(primary_checked_fn *fn)
{
    primary_checked_hook = fn;
}

/* Report a change to the hook: writes lost LOST_AGO_MS ago. */
static void primary_report(int first, int last, long long epoch, long long lost_ago_ms,
                           const char *why)
{
    if (primary_hook != NULL)
        primary_hook(first, last, epoch, lost_ago_ms, why);
    else
        log_notice("primary of slots %d-%d changed: %s", first, last, why);
}

void primary_changed(int first, int last, long long epoch, const char *why)
{
    primary_real_changes++;
    primary_report(first, last, epoch, 0, why);
}

void primary_promoted(int first, int last, long long epoch, const char *why)
{
    primary_real_changes++;
    primary_report(first, last, epoch, PRIMARY_LOST_UNACKED, why);
}

void primary_migrated(int first, int last, const char *why)
{
    primary_real_changes++;
    primary_report(first, last, 0, PRIMARY_LOST_NEVER, why);
}

void primary_switched(const char *why)
{
    primary_promoted(0, SLOT_COUNT - 1, 0, why);
    primary_switch_reported = 1;
}

void primary_set_epoch_hook(primary_epoch_fn *fn)
{
    primary_epoch_hook = fn;
}

int primary_export(char *replid, long long *epoch)
{
    if (backend_cluster_mode || primary_replid[0] == '\0')
        return -1;
    memcpy(replid, primary_replid, sizeof(primary_replid));
    *epoch = primary_epoch;
    return 0;
}

/* Settle an inherited replid against the one seen (not "" here) and tell
 * the checked hook. Returns 1 when it is the same and nothing changed
 * since start. */
static int primary_settle_inherited(void)
{
    int same = strcmp(primary_inherited, primary_replid) == 0 && primary_real_changes == 0;

    if (primary_inherited[0] == '\0')
        return 0;
    if (same) {
        log_notice("primary: master_replid %s is the one the sluice before this one watched: "
                   "no failover between the two", primary_replid);
    } else {
        log_notice("primary: master_replid %s, the sluice before this one saw %s: the primary "
                   "changed", primary_replid, primary_inherited);
    }
    primary_inherited[0] = '\0';
    if (primary_checked_hook != NULL)
        primary_checked_hook(same);
    return same;
}

void primary_inherit(const char *replid, long long epoch)
{
    if (backend_cluster_mode || strlen(replid) != PRIMARY_REPLID_LEN)
        return;
    memcpy(primary_inherited, replid, sizeof(primary_inherited));
    if (epoch > primary_epoch)
        primary_epoch = epoch;
    if (primary_replid[0] != '\0')
        primary_settle_inherited();
}

/* The standalone first contact decided (primaryage_judge). */
static void primary_first_decided(void *arg, long long lost_ago_ms, const char *why)
{
    char text[320];

    (void)arg;
    snprintf(text, sizeof(text), "first contact with the primary: %s", why);
    primary_report(0, SLOT_COUNT - 1, primary_first_epoch, lost_ago_ms, text);
}

static void primary_recorded(void *arg, long long lost_ago_ms, const char *why)
{
    (void)arg;
    (void)lost_ago_ms;
    log_debug("primary: %s", why);
}

/* A promoted primary seen while sluice runs (INFO TEXT): its replid goes
 * into sluice's record now, so that a sluice that starts later knows how
 * long ago it came (primaryage.h). The change itself is reported as seen. */
static void primary_record_promotion(const char *text)
{
    struct primaryage_facts f;

    if (primaryage_parse(text, &f) == 0 && f.promoted)
        primaryage_judge(primary_node, -1, &f, primary_recorded, NULL);
}

/* The first primary seen in standalone and Sentinel mode (INFO TEXT):
 * reported once Redis said when it may last have lost writes. */
static void primary_first_contact(const char *text, long long epoch)
{
    struct primaryage_facts f;

    primary_first_epoch = epoch;
    if (primaryage_parse(text, &f) != 0) {
        primary_report(0, SLOT_COUNT - 1, primary_first_epoch, 0, "first contact with the primary");
        return;
    }
    primaryage_judge(primary_node, -1, &f, primary_first_decided, NULL);
}

/* The primary's run_id in INFO TEXT, when another than the one seen
 * before with the same master_replid: Redis restarted and kept its
 * replid (7.0 takes a new one, keeping the loaded one as replid2; a
 * version or fork that keeps it would hide the restart), but the writes
 * after its last save are lost. Reported as a change; returns 1 then. FIRST: no primary seen
 * yet (nothing to compare). */
static int primary_restarted(const char *text, int first)
{
    char runid[PRIMARY_REPLID_LEN + 1], replid[PRIMARY_REPLID_LEN + 1];
    int restarted;

    if (!primaryage_field(text, "run_id:", runid, sizeof(runid)))
        return 0;
    primaryage_field(text, "master_replid:", replid, sizeof(replid));
    restarted = !first && primary_runid[0] != '\0' && strcmp(runid, primary_runid) != 0 &&
                strcmp(replid, primary_replid) == 0;
    memcpy(primary_runid, runid, sizeof(primary_runid));
    if (!restarted)
        return 0;
    /* A counter lost with the writes: fences go on above, as after any
     * change (primary_seen). */
    primary_epoch = primary_epoch + 1 > primaryage_number(text, "server_time_usec:", 0) / 1000000
                        ? primary_epoch + 1
                        : primaryage_number(text, "server_time_usec:", 0) / 1000000;
    primary_changed(0, SLOT_COUNT - 1, primary_epoch, "the primary restarted (its run_id "
                    "changed, its master_replid did not): writes after its last save may be lost");
    return restarted;
}

/* What INFO TEXT says of the primary: report it when it is new. A node
 * that is no primary (role:slave) says nothing of one. */
static void primary_seen(const char *text)
{
    char role[16], replid[PRIMARY_REPLID_LEN + 1], replid2[PRIMARY_REPLID_LEN + 1], usec[32];
    int first = primary_replid[0] == '\0', promoted, continues;
    int handed = first && primary_inherited[0] != '\0';   /* a hand-over passed one on */
    long long epoch;

    if (!primaryage_field(text, "role:", role, sizeof(role)) || strcmp(role, "master") != 0 ||
        !primaryage_field(text, "master_replid:", replid, sizeof(replid)))
        return;
    if (primary_restarted(text, first) || strcmp(replid, primary_replid) == 0)
        return;
    if (!primaryage_field(text, "master_replid2:", replid2, sizeof(replid2)))
        replid2[0] = '\0';
    if (!primaryage_field(text, "server_time_usec:", usec, sizeof(usec)))
        usec[0] = '\0';
    /* A replid2 other than zeros: this primary was promoted once. Then
     * (and on any change seen) the epoch is its clock in seconds, but
     * above the last one reported; a primary never failed over keeps
     * epoch 0 (fences 1, 2, ...). */
    promoted = replid2[0] != '\0' && strspn(replid2, "0") != strlen(replid2);
    epoch = !first || handed || promoted ? atoll(usec) / 1000000 : 0;
    /* Two changes within one second of the clock (planned failovers can
     * be that quick): the second must still have a higher epoch, or a
     * counter lost with it could hand out the first one's fences again. */
    if (epoch > 0 && epoch <= primary_epoch)
        epoch = primary_epoch + 1;
    if (epoch > 0)
        primary_epoch = epoch;
    /* After a switch already reported: a replica promoted from the primary
     * seen before (its replid2 is that one's replid) is that switch; any
     * other replid (a restart without the data, failovers missed) is one
     * more change. */
    continues = primary_switch_reported && !first && strcmp(replid2, primary_replid) == 0;
    primary_switch_reported = 0;
    memcpy(primary_replid, replid, sizeof(primary_replid));
    if (!first || handed)
        primary_record_promotion(text);
    /* The primary the sluice before this one watched: nothing to report. */
    if (first && primary_settle_inherited())
        return;
    if (continues) {
        log_info("primary: the new primary's master_replid is %s, epoch %lld", replid, epoch);
        if (epoch > 0 && primary_epoch_hook != NULL)
            primary_epoch_hook(epoch);
        return;
    }
    if (handed)
        primary_changed(0, SLOT_COUNT - 1, epoch, "the primary's master_replid is not the one "
                        "the sluice before this one watched");
    else if (first)
        primary_first_contact(text, epoch);
    else   /* a promoted replica, or a restart (from an RDB too: its replid2 is the old one) */
        primary_changed(0, SLOT_COUNT - 1, epoch, "the primary's master_replid changed");
}

static void primary_info_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    size_t n = len < PRIMARY_INFO_MAX ? len : PRIMARY_INFO_MAX;
    char *text = malloc(n + 1);

    evbuffer_remove(src, text, n);
    evbuffer_drain(src, len - n);
    text[n] = '\0';
    /* From a node that is no longer the primary (Sentinel switched while
     * it was out): what it says is not the primary's. */
    if (req->ctx != primary_node) {
        free(text);
        request_free(req);
        return;
    }
    if (type == REPLY_STRING) {
        primary_info_refused = 0;
        primary_seen(text);
    } else if (type == REPLY_ERROR && !primary_info_refused) {
        /* Said once (again after INFO worked): the operator must know
         * that the locks' failover watch is off, and why. */
        primary_info_refused = 1;
        log_warning("primary: Redis refuses INFO to sluice's backend user (%.*s): the "
                    "master_replid watch is blind, and in standalone mode a failover begins "
                    "no lock grace; allow +info to that user",
                    (int)strcspn(text + 1, "\r\n"), text + 1);
    }
    free(text);
    request_free(req);
}

static void primary_ctx_free(struct request *req)
{
    if (req->ctx == primary_asking)
        primary_asking = NULL;
}

static void primary_ask(void)
{
    static const char info[] = INFO_CALL;
    struct evbuffer *buf;

    /* One INFO at a time to the primary; a new primary (a Sentinel
     * switch) is asked at once, also while one to the old is out: its
     * epoch must be known before the switch's grace ends. */
    if (primary_node == NULL || primary_asking == primary_node)
        return;
    buf = evbuffer_new();
    evbuffer_add(buf, info, sizeof(info) - 1);
    primary_asking = primary_node;
    /* primary_ctx_free clears primary_asking, also when it cannot go. */
    backend_send_internal(pause_internal_conn(primary_node, 0, 0), buf, primary_info_reply,
                          primary_node, primary_ctx_free);
    evbuffer_free(buf);
}

static void primary_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (backend_node_up(primary_node))
        primary_ask();
}

void primary_node_up(struct backend_node *node)
{
    struct timeval tv = {PRIMARY_WATCH_MS / 1000, (PRIMARY_WATCH_MS % 1000) * 1000};

    /* Only the primary: a replica kept for reads (read_from) says
     * role:slave, and watching it would stop the watch of the primary. */
    if (backend_cluster_mode || node != backend_default_node())
        return;
    primary_node = node;
    if (primary_timer == NULL) {
        primary_timer = event_new(backend_base, -1, EV_PERSIST, primary_timer_cb, NULL);
        evtimer_add(primary_timer, &tv);
    }
    primary_ask();
}

/* ---- cluster mode: the first slot map ---- */

/* Slots FIRST..LAST of a first map, their primary being asked. */
struct primary_range {
    struct backend_node *node;   /* nodes live until exit (retired, never freed) */
    int first, last;
    int reported;
};

static void primary_range_decided(void *arg, long long lost_ago_ms, const char *why)
{
    struct primary_range *r = arg;
    char text[320];

    snprintf(text, sizeof(text), "first slot map: %s", why);
    primary_report(r->first, r->last, 0, lost_ago_ms, text);
    free(r);
}

static void primary_range_info(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct primary_range *r = req->ctx;
    size_t n = len < PRIMARY_INFO_MAX ? len : PRIMARY_INFO_MAX;
    char *text = malloc(n + 1);
    struct primaryage_facts f;

    evbuffer_remove(src, text, n);
    evbuffer_drain(src, len - n);
    text[n] = '\0';
    r->reported = 1;
    if (type == REPLY_STRING && primaryage_parse(text, &f) == 0) {
        req->ctx = NULL;   /* primary_range_decided frees R */
        primaryage_judge(r->node, r->first, &f, primary_range_decided, r);
    } else {
        primary_report(r->first, r->last, 0, 0, "first slot map: the primary's INFO could not "
                       "be read");
    }
    free(text);
    request_free(req);
}

static void primary_range_free(struct request *req)
{
    struct primary_range *r = req->ctx;

    if (r == NULL)
        return;
    if (!r->reported)
        primary_report(r->first, r->last, 0, 0, "first slot map: no INFO reply from the primary");
    free(r);
}

void primary_first_map(struct backend_node *node, int first, int last)
{
    struct primary_range *r = calloc(1, sizeof(*r));
    struct evbuffer *buf = evbuffer_new();

    r->node = node;
    r->first = first;
    r->last = last;
    evbuffer_add(buf, INFO_CALL, sizeof(INFO_CALL) - 1);
    backend_send_internal(pause_internal_conn(node, 0, 0), buf, primary_range_info, r,
                          primary_range_free);
    evbuffer_free(buf);
}

void primary_free(void)
{
    if (primary_timer != NULL)
        event_free(primary_timer);
    primary_timer = NULL;
}
