/* replicas.c - owns the list of replicas of each primary and their lag.
 * Standalone: the current primary's (backend_default_node, whichever node
 * that is now) are those replicas_listed names (`replicas =`, or the
 * Sentinels' majority), never one the primary's INFO announces (any user
 * with +replconf +psync can announce one); cluster mode: cluster_slots.c
 * passes on CLUSTER SLOTS's. It must not route anything itself.
 *
 * Lag, as measured here (README "Reading from replicas"): every
 * REPLICAS_POLL_MS sluice asks the primary and each replica INFO
 * replication. Each answer of the primary is a sample (the time the
 * question was sent, its master_repl_offset). A replica's answer gives its
 * slave_repl_offset; the newest primary sample whose offset it has reached
 * tells that the replica had, when it answered, everything the primary had
 * at that sample's time. Its lag is now minus that time (an upper bound:
 * about one poll interval when it keeps up), and at least the age of a
 * question it has not answered yet (a replica that hangs). */
#include "replicas.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_int.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "request.h"
#include "respframe.h"
#include "server.h"

/* Primary samples kept: this many polls back (16 s). A replica behind all
 * of them is "lagging" with an unknown lag. */
#define REPLICAS_SAMPLES 64
/* A replica that has not been connected this long after it was named is
 * logged (once, until it connects). */
#define REPLICAS_UNREACHABLE_MS 2000

struct replica {
    struct backend_node *node;
    long long offset;          /* its slave_repl_offset, last answer; -1: none yet */
    int link_up;               /* its last answer: a replica whose link to the primary is up */
    uint64_t synced_ms;        /* the newest primary sample its offset reaches; 0: none */
    uint64_t asked_ms;         /* its question out, unanswered; 0: none */
    uint64_t named_ms;         /* when it was (last) named */
    int named;                 /* named by the primary / the map this round */
    int unreachable_logged;
    uint64_t *metric_reads;
};

struct replica_sample {
    uint64_t ms;               /* when the question was sent */
    long long offset;          /* the primary's master_repl_offset then (or after) */
};

struct replica_set {
    struct backend_node *primary;
    struct replica replicas[REPLICAS_MAX];
    int count;
    struct replica_sample samples[REPLICAS_SAMPLES];
    int sample_count;          /* valid samples, the newest at sample_next - 1 */
    int sample_next;
    uint64_t asked_ms;         /* the primary's question out; 0: none */
    int overflow_logged;
    struct replica_set *next;
};

/* One question out: whose answer it is (nodes are never freed). */
struct replicas_ask {
    struct replica_set *set;
    struct backend_node *node; /* the primary or one of the set's replicas */
    uint64_t sent_ms;
};

static const struct config *replicas_cfg;
static struct event *replicas_tick_ev;
static struct replica_set *replicas_sets;
static int replicas_wanted;
static int replicas_gone;      /* replicas_free ran: late ctx_free calls do nothing */

/* replicas_listed's list. */
static char replicas_list_primary[REPLICAS_NAME_MAX];   /* "": whichever is the primary */
static char replicas_list[REPLICAS_MAX][REPLICAS_NAME_MAX];
/* Replicas the operator put in maintenance (PROXY NODE): no read goes
 * there until ACTIVE. By name, so that a replica named again after a
 * topology change stays out. */
static char replicas_maint[REPLICAS_MAX][REPLICAS_NAME_MAX];
static int replicas_list_count;

static const char replicas_info_cmd[] = "*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";

/* ---------------------------------------------------------------------
 * The sets */

static struct replica_set *replicas_set_for(const struct backend_node *primary, int make)
{
    struct replica_set *set;

    for (set = replicas_sets; set != NULL; set = set->next) {
        if (set->primary == primary)
            return set;
    }
    if (!make || (set = calloc(1, sizeof(*set))) == NULL)
        return NULL;
    set->primary = (struct backend_node *)primary;
    set->next = replicas_sets;
    replicas_sets = set;
    return set;
}

static struct replica *replicas_find(struct replica_set *set, const struct backend_node *node)
{
    for (int i = 0; i < set->count; i++) {
        if (set->replicas[i].node == node)
            return &set->replicas[i];
    }
    return NULL;
}

/* The backend node named NAME, made (connecting) when new. NULL when NAME
 * is no "host:port" (logged). */
static struct backend_node *replicas_node(const char *name)
{
    struct backend_node *node;
    char err[300];

    for (node = backend_node_next(NULL); node != NULL; node = backend_node_next(node)) {
        if (strcmp(backend_node_name(node), name) == 0) {
            backend_node_retire(node, 0);
            return node;
        }
    }
    node = backend_node_new(name, err, sizeof(err));
    if (node == NULL)
        log_warning("replica %s: %s", name, err);
    else
        backend_node_quiet(node);   /* replicas_note_unreachable warns once */
    return node;
}

/* NAME is a replica of SET's primary: add it (a node of its own, its
 * connections made like the primary's), or mark it named again. */
static void replicas_name(struct replica_set *set, const char *name)
{
    struct backend_node *node = replicas_node(name);
    struct replica *r;

    if (node == NULL || node == set->primary)
        return;
    if ((r = replicas_find(set, node)) != NULL) {
        r->named = 1;
        return;
    }
    if (set->count == REPLICAS_MAX) {
        if (!set->overflow_logged)
            log_warning("primary %s has more than %d replicas: reads use the first %d",
                        backend_node_name(set->primary), REPLICAS_MAX, REPLICAS_MAX);
        set->overflow_logged = 1;
        return;
    }
    r = &set->replicas[set->count++];
    memset(r, 0, sizeof(*r));
    r->node = node;
    r->offset = -1;
    r->named = 1;
    r->named_ms = server_now_ms();
    r->metric_reads = metrics_counter(METRIC_replica_reads_total, name, NULL);
    if (config_cluster_mode(replicas_cfg))
        backend_node_set_readonly(node);
    log_notice("replica %s of %s: reads may go there", name, backend_node_name(set->primary));
}

/* Forget SET's replicas not named this round; their nodes stop
 * reconnecting (unless one is a primary now). */
static void replicas_drop_unnamed(struct replica_set *set)
{
    int kept = 0;

    for (int i = 0; i < set->count; i++) {
        struct replica *r = &set->replicas[i];
        if (!r->named) {
            log_notice("replica %s of %s: no longer named, reads leave it",
                       backend_node_name(r->node), backend_node_name(set->primary));
            /* Standalone: it died, or left; it comes back named again. */
            if (!config_cluster_mode(replicas_cfg) && r->node != backend_default_node())
                backend_node_retire(r->node, 1);
            continue;
        }
        set->replicas[kept++] = *r;
    }
    set->count = kept;
}

int replicas_is_replica(const struct backend_node *node)
{
    for (struct replica_set *set = replicas_sets; set != NULL; set = set->next) {
        if (replicas_find(set, node) != NULL)
            return 1;
    }
    return 0;
}

void replicas_cluster_begin(void)
{
    for (struct replica_set *set = replicas_sets; set != NULL; set = set->next) {
        for (int i = 0; i < set->count; i++)
            set->replicas[i].named = 0;
    }
}

void replicas_cluster_add(struct backend_node *primary, const char *replica)
{
    struct replica_set *set;

    if (!replicas_wanted || (set = replicas_set_for(primary, 1)) == NULL)
        return;
    replicas_name(set, replica);
}

void replicas_cluster_end(int ok)
{
    for (struct replica_set *set = replicas_sets; set != NULL; set = set->next) {
        if (ok)
            replicas_drop_unnamed(set);
        for (int i = 0; i < set->count; i++)
            set->replicas[i].named = 1;
    }
}

/* ---------------------------------------------------------------------
 * Lag */

/* R's sync point from the samples: the newest sample whose offset R's
 * offset has reached (samples only grow, so the newest such one). */
static void replicas_sync_point(struct replica_set *set, struct replica *r)
{
    for (int k = 1; k <= set->sample_count && r->offset >= 0; k++) {
        const struct replica_sample *s =
            &set->samples[(set->sample_next - k + REPLICAS_SAMPLES) % REPLICAS_SAMPLES];
        if (s->offset <= r->offset) {
            if (s->ms > r->synced_ms)
                r->synced_ms = s->ms;
            return;
        }
    }
}

/* R's lag in ms at NOW: -1 when unknown (no answer, or behind every
 * sample kept). */
static long long replicas_lag_ms(const struct replica *r, uint64_t now)
{
    long long lag;

    if (r->synced_ms == 0)
        return -1;
    /* NOW may be the loop pass's clock, read before a sample of the same
     * pass was taken: never below 0. */
    lag = now > r->synced_ms ? (long long)(now - r->synced_ms) : 0;
    if (r->asked_ms != 0 && now > r->asked_ms && (long long)(now - r->asked_ms) > lag)
        lag = (long long)(now - r->asked_ms);
    return lag;
}

/* R's state: "ok" (reads may go there), "down" (not connected),
 * "no_link" (its link to the primary is down), "lagging" or "unknown". */
static int replicas_in_maintenance(const char *name)
{
    for (int i = 0; i < REPLICAS_MAX; i++) {
        if (replicas_maint[i][0] != '\0' && strcmp(replicas_maint[i], name) == 0)
            return 1;
    }
    return 0;
}

static const char *replicas_state(const struct replica *r, uint64_t now, long long *lag)
{
    char why[8];

    *lag = replicas_lag_ms(r, now);
    if (replicas_in_maintenance(backend_node_name(r->node)))
        return "maintenance";
    if (!backend_node_ready(r->node, why, sizeof(why)))
        return "down";
    if (r->offset >= 0 && !r->link_up)
        return "no_link";
    if (*lag < 0)
        return "unknown";
    return *lag > replicas_cfg->replica_max_lag_ms ? "lagging" : "ok";
}

struct backend_node *replicas_pick(const struct backend_node *primary,
                                   unsigned long long client_id)
{
    struct replica_set *set = replicas_set_for(primary, 0);
    struct replica *healthy[REPLICAS_MAX];
    uint64_t now = server_pass_now_us() / 1000;   /* per read: the pass's clock */
    int n = 0;
    long long lag;

    if (set == NULL)
        return NULL;
    for (int i = 0; i < set->count; i++) {
        if (strcmp(replicas_state(&set->replicas[i], now, &lag), "ok") == 0)
            healthy[n++] = &set->replicas[i];
    }
    if (n == 0)
        return NULL;
    /* The same replica for one client while the healthy ones stay: its
     * pipelined reads keep their order on one connection. */
    (*healthy[client_id % (unsigned)n]->metric_reads)++;
    return healthy[client_id % (unsigned)n]->node;
}

/* ---------------------------------------------------------------------
 * The poll */

/* The value of FIELD ("name:") in INFO text TEXT, or -1. */
static long long replicas_info_number(const char *text, const char *field)
{
    const char *p = strstr(text, field);

    return p != NULL ? strtoll(p + strlen(field), NULL, 10) : -1;
}

/* The primary of SET answered (TEXT: its INFO replication, sent at
 * SENT_MS): a new sample, and every replica's sync point again. The
 * replicas it names are not looked at (replicas_listed). */
static void replicas_primary_answer(struct replica_set *set, const char *text, uint64_t sent_ms)
{
    long long offset = replicas_info_number(text, "master_repl_offset:");

    if (strstr(text, "role:master") == NULL || offset < 0)
        return;   /* not a primary (any more): S1's code will say which is */
    set->samples[set->sample_next] = (struct replica_sample){sent_ms, offset};
    set->sample_next = (set->sample_next + 1) % REPLICAS_SAMPLES;
    if (set->sample_count < REPLICAS_SAMPLES)
        set->sample_count++;
    for (int i = 0; i < set->count; i++)
        replicas_sync_point(set, &set->replicas[i]);
}

/* Replica R answered with TEXT. */
static void replicas_replica_answer(struct replica_set *set, struct replica *r, const char *text)
{
    r->link_up = strstr(text, "role:slave") != NULL &&
                 strstr(text, "master_link_status:up") != NULL;
    r->offset = replicas_info_number(text, "slave_repl_offset:");
    replicas_sync_point(set, r);
}

static void replicas_ask_free(struct request *req)
{
    struct replicas_ask *ask = req->ctx;
    struct replica *r;

    if (!replicas_gone) {
        if (ask->node == ask->set->primary && ask->set->asked_ms == ask->sent_ms)
            ask->set->asked_ms = 0;
        else if ((r = replicas_find(ask->set, ask->node)) != NULL && r->asked_ms == ask->sent_ms)
            r->asked_ms = 0;
    }
    free(ask);
}

/* An answer to INFO replication (a bulk string), for CTX's node. */
static void replicas_answer(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct replicas_ask *ask = req->ctx;
    char *text = type == REPLY_ERROR ? NULL : malloc(len + 1);
    struct replica *r;

    if (text != NULL) {
        evbuffer_copyout(src, text, len);
        text[len] = '\0';
        if (ask->node == ask->set->primary)
            replicas_primary_answer(ask->set, text, ask->sent_ms);
        else if ((r = replicas_find(ask->set, ask->node)) != NULL)
            replicas_replica_answer(ask->set, r, text);
        free(text);
    }
    evbuffer_drain(src, len);
    request_free(req);   /* replicas_ask_free clears the question */
}

/* Ask NODE (SET's primary or one of its replicas) INFO replication
 * unless its last question is still out; *ASKED_MS notes it. */
static void replicas_ask(struct replica_set *set, struct backend_node *node, uint64_t *asked_ms)
{
    struct replicas_ask *ask;
    struct evbuffer *buf;
    char why[8];

    if (*asked_ms != 0 || !backend_node_ready(node, why, sizeof(why)) ||
        (ask = calloc(1, sizeof(*ask))) == NULL)
        return;
    if ((buf = evbuffer_new()) == NULL) {
        free(ask);
        return;
    }
    *ask = (struct replicas_ask){set, node, server_now_ms()};
    *asked_ms = ask->sent_ms;
    evbuffer_add(buf, replicas_info_cmd, sizeof(replicas_info_cmd) - 1);
    backend_send_internal(backend_pool_conn(node, 0, 2), buf, replicas_answer, ask,
                          replicas_ask_free);   /* on failure ask is freed, asked_ms cleared */
    evbuffer_free(buf);
}

/* Log, once until it connects, a replica sluice cannot reach (an address
 * announced that is not reachable from here, or a replica that died). */
static void replicas_note_unreachable(const struct replica_set *set, struct replica *r,
                                      uint64_t now)
{
    char why[400];

    if (backend_node_ready(r->node, why, sizeof(why))) {
        r->unreachable_logged = 0;
        return;
    }
    if (r->unreachable_logged || now - r->named_ms < REPLICAS_UNREACHABLE_MS)
        return;
    r->unreachable_logged = 1;
    log_warning("replica %s of %s: reads skip it: %s", backend_node_name(r->node),
                backend_node_name(set->primary), why);
}

void replicas_listed(const char *primary, const char *const *names, int count)
{
    snprintf(replicas_list_primary, sizeof(replicas_list_primary), "%s",
             primary != NULL ? primary : "");
    replicas_list_count = count < REPLICAS_MAX ? count : REPLICAS_MAX;
    for (int i = 0; i < replicas_list_count; i++)
        snprintf(replicas_list[i], sizeof(replicas_list[i]), "%s", names[i]);
}

/* Standalone mode: SET (the current primary's) gets the listed replicas,
 * when the list is of its primary; those no longer listed leave. */
static void replicas_name_listed(struct replica_set *set)
{
    int ours = replicas_list_primary[0] == '\0' ||
               strcmp(replicas_list_primary, backend_node_name(set->primary)) == 0;

    for (int i = 0; i < set->count; i++)
        set->replicas[i].named = 0;
    for (int i = 0; ours && i < replicas_list_count; i++)
        replicas_name(set, replicas_list[i]);
    replicas_drop_unnamed(set);
}

/* Standalone mode: the set of the primary sluice uses now. When that
 * changed (a failover) the old one's replicas are forgotten: the new
 * primary's are those listed for it. */
static void replicas_follow_primary(void)
{
    struct backend_node *primary = backend_default_node();
    struct replica_set *set;

    if (config_cluster_mode(replicas_cfg) || primary == NULL)
        return;
    for (set = replicas_sets; set != NULL; set = set->next) {
        if (set->primary != primary && set->count > 0) {
            log_notice("primary is now %s: replicas of %s are forgotten",
                       backend_node_name(primary), backend_node_name(set->primary));
            for (int i = 0; i < set->count; i++)
                set->replicas[i].named = 0;
            replicas_drop_unnamed(set);
        }
    }
    if ((set = replicas_set_for(primary, 1)) != NULL)
        replicas_name_listed(set);
}

static void replicas_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();

    (void)fd;
    (void)what;
    (void)arg;
    if (!replicas_wanted)
        return;
    replicas_follow_primary();
    for (struct replica_set *set = replicas_sets; set != NULL; set = set->next) {
        /* Cluster: the primaries with replicas; standalone: the current
         * primary only (an old one's answers would name its replicas). */
        if (config_cluster_mode(replicas_cfg) ? set->count == 0
                                              : set->primary != backend_default_node())
            continue;
        replicas_ask(set, set->primary, &set->asked_ms);
        for (int i = 0; i < set->count; i++) {
            replicas_note_unreachable(set, &set->replicas[i], now);
            replicas_ask(set, set->replicas[i].node, &set->replicas[i].asked_ms);
        }
    }
}

void replicas_want(int on)
{
    replicas_wanted = on;
}

void replicas_init(struct event_base *base, const struct config *cfg)
{
    struct timeval tv = {0, REPLICAS_POLL_MS * 1000};

    replicas_cfg = cfg;
    /* Standalone: sluice.ini's list, whichever node is the primary;
     * Sentinel mode: sentinel.c's, once a majority agrees. */
    if (!config_sentinel_mode(cfg))
        replicas_listed(NULL, (const char *const *)cfg->replicas, cfg->replica_count);
    replicas_tick_ev = event_new(base, -1, EV_PERSIST, replicas_tick_cb, NULL);
    if (replicas_tick_ev != NULL)
        evtimer_add(replicas_tick_ev, &tv);
}

void replicas_free(void)
{
    struct replica_set *set;

    if (replicas_tick_ev != NULL)
        event_free(replicas_tick_ev);
    replicas_tick_ev = NULL;
    while ((set = replicas_sets) != NULL) {
        replicas_sets = set->next;
        free(set);
    }
    replicas_gone = 1;
}

int replicas_set_maintenance(const char *name, int on)
{
    int known = 0, free_slot = -1;

    for (const struct replica_set *set = replicas_sets; set != NULL && !known; set = set->next) {
        for (int i = 0; i < set->count && !known; i++)
            known = strcmp(backend_node_name(set->replicas[i].node), name) == 0;
    }
    for (int i = 0; i < REPLICAS_MAX; i++) {
        if (replicas_maint[i][0] != '\0' && strcmp(replicas_maint[i], name) == 0) {
            if (!on)
                replicas_maint[i][0] = '\0';
            return 0;
        }
        if (replicas_maint[i][0] == '\0' && free_slot < 0)
            free_slot = i;
    }
    if (!on)
        return known ? 0 : -1;
    if (!known || free_slot < 0 || strlen(name) >= REPLICAS_NAME_MAX)
        return -1;
    snprintf(replicas_maint[free_slot], REPLICAS_NAME_MAX, "%s", name);
    return 0;
}

/* ---------------------------------------------------------------------
 * PROXY INFO */

void replicas_write_info(struct evbuffer *out)
{
    uint64_t now = server_now_ms();
    int n = 0;

    evbuffer_add_printf(out, "read_from:%s\r\nreplica_max_lag_ms:%lld\r\n"
                             "replica_read_after_write_ms:%lld\r\n",
                        config_read_from_names[replicas_cfg->read_from],
                        replicas_cfg->replica_max_lag_ms,
                        replicas_cfg->replica_read_after_write_ms);
    for (const struct replica_set *set = replicas_sets; set != NULL; set = set->next) {
        for (int i = 0; i < set->count; i++) {
            const struct replica *r = &set->replicas[i];
            long long lag;
            const char *state = replicas_state(r, now, &lag);
            evbuffer_add_printf(out, "replica%d:addr=%s,primary=%s,state=%s,lag_ms=%lld,"
                                     "offset=%lld,reads=%llu\r\n",
                                n++, backend_node_name(r->node), backend_node_name(set->primary),
                                state, lag, r->offset, (unsigned long long)*r->metric_reads);
        }
    }
    evbuffer_add_printf(out, "replicas:%d\r\n", n);
}
