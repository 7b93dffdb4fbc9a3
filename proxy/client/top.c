/* top.c - owns PROXY TOP's sketches, one per kind of subject, and what a
 * request counts in each. Reads clients and requests, changes neither.
 *
 *   client_handle -> top_count: client ("id=.. addr=.. name=.. user=.."),
 *                    user, name (named clients only), ip: the client's own
 *                    counter; a known command: its per-command stats row;
 *                    an unknown one and each key -> topk_hit (a hash, one
 *                    bucket of TOPK_WAYS; a new subject takes the place
 *                    of the least counted one of its bucket)
 *   each tick, PROXY TOP -> top_flush_all: the clients' and commands'
 *                    counters go to the sketches' rates and weights
 */
#include "top.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "metrics.h"
#include "reply.h"
#include "request.h"
#include "server.h"
#include "stats.h"
#include "value.h"

enum top_kind { TOP_CLIENTS, TOP_USERS, TOP_NAMES, TOP_IPS, TOP_COMMANDS, TOP_KEYS, TOP_KINDS };

static const char *const top_kind_names[TOP_KINDS] = {
    "clients", "users", "names", "ips", "commands", "keys",
};

static struct topk top_sketches[TOP_KINDS];
/* Per command id: where the command is in the COMMANDS sketch; its
 * requests counted there so far (its per-command stats row counts them
 * all: a flush hands the difference over, so a request of a known command
 * costs PROXY TOP nothing here); where its one key is (commands_fixed_key,
 * worked out once). */
static struct topk_ref *top_command_refs;
static uint64_t *top_command_seen;
static int *top_fixed_keys;
static uint64_t top_last_decay_ms;

/* Keys of one request found on the stack; a larger one allocates. */
#define TOP_KEYS_ON_STACK 64
/* Room for a client's subject: its user and name are cut to fit. */
#define TOP_CLIENT_SUBJECT_MAX 320
#define TOP_DEFAULT_COUNT 10

int top_init(long long capacity)
{
    if (capacity == 0)
        return 0;   /* PROXY TOP off: nothing counted */
    top_command_refs = calloc((size_t)commands_count(), sizeof(*top_command_refs));
    top_command_seen = calloc((size_t)commands_count(), sizeof(*top_command_seen));
    top_fixed_keys = calloc((size_t)commands_count(), sizeof(*top_fixed_keys));
    if (top_command_refs == NULL || top_command_seen == NULL || top_fixed_keys == NULL) {
        top_free();
        return -1;
    }
    for (int id = 0; id < commands_count(); id++) {
        top_command_seen[id] = stats_command_total(id);   /* the table's ids are its rows */
        top_fixed_keys[id] = commands_fixed_key(commands_by_id(id));
    }
    for (int k = 0; k < TOP_KINDS; k++) {
        if (topk_init(&top_sketches[k], (int)capacity) != 0) {
            top_free();
            return -1;
        }
    }
    return 0;
}

void top_free(void)
{
    free(top_command_refs);
    free(top_command_seen);
    free(top_fixed_keys);
    top_command_refs = NULL;
    top_command_seen = NULL;
    top_fixed_keys = NULL;
    for (int k = 0; k < TOP_KINDS; k++)
        topk_free(&top_sketches[k]);
}

/* Append LEN bytes of S (at most MAX) to BUF at *N. */
static void top_put(char *buf, size_t *n, const char *s, size_t len, size_t max)
{
    if (len > max)
        len = max;
    memcpy(buf + *n, s, len);
    *n += len;
}

/* C's subject, "id=7 addr=127.0.0.1:5000 name=x user=default", into BUF
 * (TOP_CLIENT_SUBJECT_MAX bytes). Returns its length. */
static size_t top_client_subject(const struct client *c, char *buf)
{
    char id[24];
    size_t n = 0;
    const char *user = c->user != NULL ? c->user : "default";
    const char *name = c->name != NULL ? c->name : "";

    top_put(buf, &n, "id=", 3, 3);
    top_put(buf, &n, id, (size_t)reply_format_ll(id, (long long)c->id), sizeof(id));
    top_put(buf, &n, " addr=", 6, 6);
    top_put(buf, &n, c->addr_text, strlen(c->addr_text), 64);
    top_put(buf, &n, " name=", 6, 6);
    top_put(buf, &n, name, strlen(name), 96);
    top_put(buf, &n, " user=", 6, 6);
    top_put(buf, &n, user, strlen(user), 96);
    return n;
}

/* REQ's command as TOP COMMANDS names it: the table's name, else its
 * first argument in lower case (cut at 64 bytes). Returns its length. */
static size_t top_command_name(const struct request *req, const struct sv *argv, char *buf)
{
    size_t n;

    if (req->cmd != NULL) {
        n = strlen(req->cmd->name);
        memcpy(buf, req->cmd->name, n);
        return n;
    }
    n = req->argc > 0 ? (argv[0].len < 64 ? argv[0].len : 64) : 0;
    for (size_t i = 0; i < n; i++) {
        char ch = argv[0].ptr[i];
        buf[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch | 0x20) : ch;
    }
    return n;
}

/* Count each key of REQ (topk_hit), or note OUTCOME for it. */
static void top_each_key(const struct request *req, const struct sv *argv, uint64_t now_s,
                         enum topk_outcome outcome, int note)
{
    int on_stack[TOP_KEYS_ON_STACK], *keys = on_stack, n, fixed;
    struct topk *t = &top_sketches[TOP_KEYS];

    if (req->cmd == NULL || (fixed = top_fixed_keys[req->cmd->id]) < 0)
        return;
    if (fixed > 0) {   /* GET, SET...: no key walk */
        on_stack[0] = fixed;
        n = fixed < req->argc ? 1 : 0;
    } else {
        if (req->argc > TOP_KEYS_ON_STACK && (keys = malloc(sizeof(*keys) * (size_t)req->argc)) == NULL)
            return;   /* a huge MSET when memory ran out: its keys go uncounted */
        n = commands_keys(req->cmd, req->argc, argv, keys,
                          req->argc > TOP_KEYS_ON_STACK ? req->argc : TOP_KEYS_ON_STACK);
    }
    for (int i = 0; i < n; i++) {
        const struct sv *k = &argv[keys[i]];
        if (note)
            topk_note(t, k->ptr, k->len, outcome);
        else
            topk_hit(t, k->ptr, k->len, now_s, TOPK_PASSED);
    }
    if (keys != on_stack)
        free(keys);
}

/* The subject of kind K (CLIENTS..IPS) of C into *S and *LEN: in BUF, or
 * C's own strings. *S is NULL for a client without a name (NAMES). */
static void top_client_kind(const struct client *c, int k, char *buf, const char **s,
                            size_t *len)
{
    switch (k) {
    case TOP_CLIENTS: *s = buf; *len = top_client_subject(c, buf); return;
    case TOP_USERS: *s = c->user != NULL ? c->user : "default"; break;
    case TOP_NAMES: *s = c->name; break;
    default: *s = c->ip_text; break;
    }
    *len = *s != NULL ? strlen(*s) : 0;
}

/* Count N requests of C for its client, user, name and ip subjects,
 * found through the places remembered for them (no hash, no subject
 * built) while those places hold them; else looked up, or given a place. */
static void top_add_client(struct client *c, uint64_t now_s, uint64_t n)
{
    char subject[TOP_CLIENT_SUBJECT_MAX];
    const char *s;
    size_t len;

    for (int k = TOP_CLIENTS; k <= TOP_IPS; k++) {
        if (topk_add_ref(&top_sketches[k], &c->top_refs[k], now_s, n) != NULL)
            continue;
        top_client_kind(c, k, subject, &s, &len);
        if (s != NULL)
            topk_ref_set(&top_sketches[k], &c->top_refs[k],
                         topk_add(&top_sketches[k], s, len, now_s, n));
    }
}

/* Hand C's requests counted since the last flush (c->top_pending) to its
 * subjects' sketches. Their places were made when the first of them came
 * (top_count_on), so they go to the name and user they were sent under. */
static void top_flush_client(struct client *c, uint64_t now_s)
{
    if (c->top_pending == 0)
        return;
    top_add_client(c, now_s, c->top_pending);
    c->top_pending = 0;
}

/* Hand the requests of command ID counted by its stats row since the
 * last flush to its subject in the COMMANDS sketch. */
static void top_flush_command(int id, uint64_t now_s)
{
    struct topk *t = &top_sketches[TOP_COMMANDS];
    uint64_t total = stats_command_total(id);
    const char *name;

    if (total == top_command_seen[id])
        return;
    if (topk_add_ref(t, &top_command_refs[id], now_s, total - top_command_seen[id]) == NULL) {
        name = commands_by_id(id)->name;
        topk_ref_set(t, &top_command_refs[id],
                     topk_add(t, name, strlen(name), now_s, total - top_command_seen[id]));
    }
    top_command_seen[id] = total;
}

/* Count REQ of C: in C's own counter (its client, user, name and ip
 * subjects get it at the next flush: a tick, PROXY TOP, a note, its
 * close); a known command in its stats row (top_flush_command), a name
 * sluice does not know and its keys in their sketches now. */
static void top_count_on(struct client *c, const struct request *req, const struct sv *argv)
{
    uint64_t now_s = server_pass_now_us() / 1000000;
    int fixed = req->cmd != NULL ? top_fixed_keys[req->cmd->id] : -1;

    if (c->top_refs_changes != c->identity_changes) {
        /* A new user or name: what came before goes to the subjects it
         * was sent under (through their places; one that lost its place
         * meanwhile is counted under the new). */
        top_flush_client(c, now_s);
        memset(c->top_refs, 0, sizeof(c->top_refs));
        c->top_refs_changes = c->identity_changes;
    }
    if (c->top_pending++ == 0)
        top_add_client(c, now_s, 0);   /* its subjects have places: a flush finds them */
    if (req->cmd == NULL) {
        char cmd[64];
        topk_hit(&top_sketches[TOP_COMMANDS], cmd, top_command_name(req, argv, cmd), now_s,
                 TOPK_PASSED);
    }
    if (fixed > 0 && fixed < req->argc)   /* GET, SET...: the common case, inline */
        topk_hit(&top_sketches[TOP_KEYS], argv[fixed].ptr, argv[fixed].len, now_s, TOPK_PASSED);
    else if (fixed == 0)
        top_each_key(req, argv, now_s, TOPK_PASSED, 0);
}

/* Note OUTCOME of REQ of C, counted already, in every sketch that still
 * holds its subjects (rare: a rule's refusal or delay). */
static void top_note_on(struct client *c, const struct request *req, const struct sv *argv,
                        enum topk_outcome outcome)
{
    char subject[TOP_CLIENT_SUBJECT_MAX], cmd[64];
    const char *s;
    size_t len;
    uint64_t now_s = server_pass_now_us() / 1000000;

    top_flush_client(c, now_s);   /* REQ is among them */
    if (req->cmd != NULL)
        top_flush_command(req->cmd->id, now_s);
    for (int k = TOP_CLIENTS; k <= TOP_IPS; k++) {
        top_client_kind(c, k, subject, &s, &len);
        if (s != NULL)
            topk_note(&top_sketches[k], s, len, outcome);
    }
    topk_note(&top_sketches[TOP_COMMANDS], cmd, top_command_name(req, argv, cmd), outcome);
    top_each_key(req, argv, 0, outcome, 1);
}

void top_count(struct client *c, const struct request *req, const struct sv *argv)
{
    if (top_sketches[0].capacity > 0)
        top_count_on(c, req, argv);
}

void top_note(struct client *c, const struct request *req, const struct sv *argv,
              enum topk_outcome outcome)
{
    if (top_sketches[0].capacity > 0)
        top_note_on(c, req, argv, outcome);
}

void top_client_closed(struct client *c)
{
    if (top_sketches[0].capacity > 0)
        top_flush_client(c, server_pass_now_us() / 1000000);
}

/* Flush every client's counter (top_flush_client) and every command's
 * (top_flush_command). */
static void top_flush_all(void)
{
    uint64_t now_s = server_pass_now_us() / 1000000;

    for (struct client *c = client_next(NULL); c != NULL; c = client_next(c))
        top_flush_client(c, now_s);
    for (int id = 0; id < commands_count(); id++)
        top_flush_command(id, now_s);
}

void top_cron(uint64_t now_ms)
{
    if (top_sketches[0].capacity == 0)
        return;
    top_flush_all();
    if (now_ms - top_last_decay_ms < TOPK_WINDOW_S * 1000)
        return;
    top_last_decay_ms = now_ms;
    for (int k = 0; k < TOP_KINDS; k++)
        topk_decay(&top_sketches[k]);
}

/* Most ranks of each list in sluice_top_requests_per_second
 * (top_metrics_count's bound). */
#define TOP_METRICS_MAX 20

void top_metrics_refresh(int count, int keys)
{
    const struct topk_entry *rows[TOP_METRICS_MAX];
    char subject[TOPK_SUBJECT_MAX + 1], rank[16];
    uint64_t now_s = server_pass_now_us() / 1000000;

    metrics_family_clear(METRIC_top_requests_per_second);
    if (top_sketches[0].capacity == 0 || count <= 0)
        return;
    if (count > TOP_METRICS_MAX)
        count = TOP_METRICS_MAX;
    top_flush_all();
    for (int k = 0; k < TOP_KINDS; k++) {
        /* Keys only when asked: a key's name may be data (an e-mail, a
         * token) that a metrics store should not keep. */
        int n = k == TOP_KEYS && !keys ? 0 : topk_list(&top_sketches[k], now_s, 0, rows, count);
        for (int i = 0; i < n; i++) {
            const char *values[3] = {top_kind_names[k], rank, subject};
            subject[topk_subject(rows[i], subject)] = '\0';
            snprintf(rank, sizeof(rank), "%d", i + 1);
            metrics_series_set(metrics_series(METRIC_top_requests_per_second, values),
                               (double)topk_recent(rows[i], now_s) / (double)TOPK_WINDOW_S);
        }
    }
}

/* One row: [subject, requests per second over the window, requests,
 * rejected, delayed]. The rate is a bulk string ("12.30"), as Redis
 * writes floating-point numbers in RESP2. */
static void top_write_row(struct evbuffer *out, const struct topk_entry *e, uint64_t now_s)
{
    char subject[TOPK_SUBJECT_MAX], rate[32];
    size_t n = topk_subject(e, subject);
    int rn = snprintf(rate, sizeof(rate), "%.2f",
                      (double)topk_recent(e, now_s) / (double)TOPK_WINDOW_S);

    reply_array_header(out, 5);
    reply_bulk(out, subject, n);
    reply_bulk(out, rate, (size_t)rn);
    reply_integer(out, (long long)e->requests);
    reply_integer(out, (long long)e->rejected);
    reply_integer(out, (long long)e->delayed);
}

void top_command(int argc, const struct sv *argv, struct evbuffer *out)
{
    long long count = TOP_DEFAULT_COUNT;
    const struct topk_entry **rows;
    uint64_t now_s = server_pass_now_us() / 1000000;
    int kind = -1, n;

    for (int k = 0; k < TOP_KINDS && argc >= 3; k++) {
        if (sv_ieq(argv[2], top_kind_names[k]))
            kind = k;
    }
    if (kind < 0 || (argc != 3 && argc != 5)) {
        reply_error(out, "syntax error: PROXY TOP CLIENTS|USERS|NAMES|IPS|COMMANDS|KEYS [COUNT n]");
        return;
    }
    if (argc == 5 && (!sv_ieq(argv[3], "count") ||
                      value_strict_ll(argv[4].ptr, argv[4].len, &count) != 0 || count < 0)) {
        reply_error(out, "COUNT must be a non-negative integer");
        return;
    }
    if (top_sketches[kind].capacity == 0) {
        reply_error(out, "PROXY TOP is off (top_keys_capacity = 0)");
        return;
    }
    if (count > top_sketches[kind].capacity)
        count = top_sketches[kind].capacity;
    rows = malloc(sizeof(*rows) * (size_t)(count > 0 ? count : 1));
    if (rows == NULL) {
        reply_error(out, "OOM sluice is out of memory");
        return;
    }
    top_flush_all();
    n = topk_list(&top_sketches[kind], now_s, 0, rows, (int)count);
    reply_array_header(out, n);
    for (int i = 0; i < n; i++)
        top_write_row(out, rows[i], now_s);
    free(rows);
}
