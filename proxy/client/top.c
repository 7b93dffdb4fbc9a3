/* top.c - owns PROXY TOP's sketches, one per kind of subject, and what a
 * request counts in each. Reads clients and requests, changes neither.
 *
 *   client_handle -> top_count: client ("id=.. addr=.. name=.. user=.."),
 *                    user, name (named clients only), ip, command, each key
 *                    -> topk_hit (a hash lookup; a new subject takes the
 *                       place of the least counted one)
 */
#include "top.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "reply.h"
#include "request.h"
#include "server.h"
#include "value.h"

enum top_kind { TOP_CLIENTS, TOP_USERS, TOP_NAMES, TOP_IPS, TOP_COMMANDS, TOP_KEYS, TOP_KINDS };

static const char *const top_kind_names[TOP_KINDS] = {
    "clients", "users", "names", "ips", "commands", "keys",
};

static struct topk top_sketches[TOP_KINDS];
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

/* Apply FN (topk_hit, or a note) to each key of REQ. */
static void top_each_key(const struct request *req, const struct sv *argv, uint64_t now_s,
                         enum topk_outcome outcome, int note)
{
    int on_stack[TOP_KEYS_ON_STACK], *keys = on_stack, n, fixed;
    struct topk *t = &top_sketches[TOP_KEYS];

    if (req->cmd == NULL || req->cmd->key_spec_count == 0)
        return;
    fixed = commands_fixed_key(req->cmd);
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
            topk_hit(t, k->ptr, k->len, now_s, outcome);
    }
    if (keys != on_stack)
        free(keys);
}

/* Count or (NOTE) note REQ of C in every sketch. */
static void top_apply_on(const struct client *c, const struct request *req, const struct sv *argv,
                      enum topk_outcome outcome, int note)
{
    char subject[TOP_CLIENT_SUBJECT_MAX], cmd[64];
    const char *user = c->user != NULL ? c->user : "default";
    uint64_t now_s = server_pass_now_us() / 1000000;
    struct {
        enum top_kind kind;
        const char *s;
        size_t len;
    } subjects[] = {
        {TOP_CLIENTS, subject, top_client_subject(c, subject)},
        {TOP_USERS, user, strlen(user)},
        {TOP_NAMES, c->name, c->name != NULL ? strlen(c->name) : 0},
        {TOP_IPS, c->ip_text, strlen(c->ip_text)},
        {TOP_COMMANDS, cmd, top_command_name(req, argv, cmd)},
    };

    for (size_t i = 0; i < sizeof(subjects) / sizeof(subjects[0]); i++) {
        struct topk *t = &top_sketches[subjects[i].kind];
        if (subjects[i].s == NULL)
            continue;   /* a client without a name */
        if (note)
            topk_note(t, subjects[i].s, subjects[i].len, outcome);
        else
            topk_hit(t, subjects[i].s, subjects[i].len, now_s, outcome);
    }
    top_each_key(req, argv, now_s, outcome, note);
}

static void top_apply(const struct client *c, const struct request *req, const struct sv *argv,
                      enum topk_outcome outcome, int note)
{
    if (top_sketches[0].capacity > 0)
        top_apply_on(c, req, argv, outcome, note);
}

void top_count(const struct client *c, const struct request *req, const struct sv *argv,
               enum topk_outcome outcome)
{
    top_apply(c, req, argv, outcome, 0);
}

void top_note(const struct client *c, const struct request *req, const struct sv *argv,
              enum topk_outcome outcome)
{
    top_apply(c, req, argv, outcome, 1);
}

void top_cron(uint64_t now_ms)
{
    if (now_ms - top_last_decay_ms < TOPK_WINDOW_S * 1000)
        return;
    top_last_decay_ms = now_ms;
    for (int k = 0; k < TOP_KINDS; k++)
        topk_decay(&top_sketches[k]);
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
    n = topk_list(&top_sketches[kind], now_s, 0, rows, (int)count);
    reply_array_header(out, n);
    for (int i = 0; i < n; i++)
        top_write_row(out, rows[i], now_s);
    free(rows);
}
