/* cluster_split.c - owns commands that cluster mode runs in parts: a
 * multi-key command whose keys hash to several slots (MGET, MSET, DEL,
 * UNLINK, EXISTS, TOUCH) becomes one command per slot, and DBSIZE one per
 * primary; the parts go out at once and their replies are merged into the
 * one reply the client gets, in its request order.
 *
 *   client req (parent, in the client's queue, REQ_DETACHED)
 *      |-- part: MGET k1 k4   (slot 12)  --> node A  --\
 *      |-- part: MGET k2      (slot 900) --> node B  ---+-> merged: *4 v1 v2 v3 v4
 *      '-- part: MGET k3      (slot 77)  --> node A  --/
 *
 * Parts are sluice's own requests on the client's shared connection of
 * each node (so its later commands to that node run after them), and are
 * redirected like any request (cluster.c). The first error of any part is
 * the reply. The split lives while any part does: parts freed unanswered
 * (at exit) free it, and the parent when its client has gone. */
#include "cluster_split.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "commands.h"
#include "reply.h"
#include "request.h"
#include "respwalk.h"
#include "router.h"
#include "slot.h"

enum split_merge {
    MERGE_ARRAY,   /* MGET: one element per key, in key order */
    MERGE_SUM,     /* DEL, UNLINK, EXISTS, TOUCH, DBSIZE: integers added */
    MERGE_OK,      /* MSET: +OK when every part said so */
};

/* Commands split by slot: name, merge, arguments per key (MSET: 2). */
static const struct split_command {
    const char *name;
    enum split_merge merge;
    int step;
} split_commands[] = {
    {"mget", MERGE_ARRAY, 1}, {"mset", MERGE_OK, 2}, {"del", MERGE_SUM, 1},
    {"unlink", MERGE_SUM, 1}, {"exists", MERGE_SUM, 1}, {"touch", MERGE_SUM, 1},
    {"dbsize", MERGE_SUM, 0},
};

struct split {
    struct request *parent;
    enum split_merge merge;
    int pending;                 /* parts not yet answered */
    int parts;                   /* parts not yet freed */
    long long sum;
    int nkeys;
    struct evbuffer **elems;     /* MERGE_ARRAY: each key's reply element */
    struct evbuffer *error;      /* the first error reply of a part */
};

struct split_part {
    struct split *split;
    int count;                   /* keys in this part */
    int *key_index;              /* their positions in the parent's key order */
};

static const struct split_command *split_find(const struct command *cmd)
{
    for (size_t i = 0; cmd != NULL && i < sizeof(split_commands) / sizeof(split_commands[0]); i++) {
        if (strcmp(cmd->name, split_commands[i].name) == 0)
            return &split_commands[i];
    }
    return NULL;
}

int cluster_split_wants(const struct command *cmd, int slot)
{
    const struct split_command *sc = split_find(cmd);

    if (sc == NULL)
        return 0;
    return sc->step == 0 || slot == CLUSTER_SLOT_CROSS;
}

/* ---------------------------------------------------------------------
 * Merging */

static void split_free(struct split *s)
{
    for (int i = 0; s->elems != NULL && i < s->nkeys; i++) {
        if (s->elems[i] != NULL)
            evbuffer_free(s->elems[i]);
    }
    free(s->elems);
    if (s->error != NULL)
        evbuffer_free(s->error);
    free(s);
}

/* Every part has answered: the merged reply goes to the parent's client
 * (or the parent is freed, its client gone). */
static void split_answer(struct split *s)
{
    struct request *parent = s->parent;
    struct client *c = parent->client;
    struct evbuffer *out;

    s->parent = NULL;
    parent->flags &= ~(unsigned)REQ_DETACHED;
    if (c == NULL) {
        request_free(parent);
        return;
    }
    out = client_reply_buffer(c, parent);
    if (s->error != NULL) {
        evbuffer_add_buffer(out, s->error);
    } else if (s->merge == MERGE_SUM) {
        evbuffer_add_printf(out, ":%lld\r\n", s->sum);
    } else if (s->merge == MERGE_OK) {
        evbuffer_add(out, "+OK\r\n", 5);
    } else {
        evbuffer_add_printf(out, "*%d\r\n", s->nkeys);
        for (int i = 0; i < s->nkeys; i++)
            evbuffer_add_buffer(out, s->elems[i]);
    }
    client_answer(c, parent);
}

static void split_part_error(struct split *s, const char *text, size_t len)
{
    if (s->error != NULL)
        return;
    s->error = evbuffer_new();
    evbuffer_add(s->error, text, len);
}

/* Take PART's array reply (LEN bytes at BUF): element i is key i's. */
static int split_take_elements(struct split_part *part, const char *buf, size_t len)
{
    struct respwalk w = {buf, buf + len};
    long long n;

    if (respwalk_array(&w, &n) != 0 || n != part->count)
        return -1;
    for (int i = 0; i < part->count; i++) {
        const char *start = w.p;
        if (respwalk_skip(&w, 1) != 0)
            return -1;
        evbuffer_add(part->split->elems[part->key_index[i]], start, (size_t)(w.p - start));
    }
    return 0;
}

static void split_part_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct split_part *part = req->ctx;
    struct split *s = part->split;
    const char *buf = (const char *)evbuffer_pullup(src, (ssize_t)len);
    static const char bad[] = "-ERR sluice could not merge a cluster node's reply\r\n";

    if (buf == NULL || type == REPLY_ERROR) {
        split_part_error(s, buf != NULL ? buf : bad, buf != NULL ? len : sizeof(bad) - 1);
    } else if (s->merge == MERGE_SUM && type == REPLY_INTEGER) {
        s->sum += strtoll(buf + 1, NULL, 10);
    } else if (s->merge == MERGE_OK && type == REPLY_STATUS) {
        /* +OK */
    } else if (s->merge != MERGE_ARRAY || type != REPLY_ARRAY ||
               split_take_elements(part, buf, len) != 0) {
        split_part_error(s, bad, sizeof(bad) - 1);
    }
    evbuffer_drain(src, len);
    if (--s->pending == 0 && s->parent != NULL)
        split_answer(s);
    request_free(req);
}

static void split_part_free(struct request *req)
{
    struct split_part *part = req->ctx;
    struct split *s = part->split;

    free(part->key_index);
    free(part);
    req->ctx = NULL;
    if (--s->parts > 0)
        return;
    if (s->parent != NULL && s->parent->client == NULL)
        request_free(s->parent);   /* never answered (exit), and nobody waits */
    else if (s->parent != NULL)
        s->parent->flags &= ~(unsigned)REQ_DETACHED;
    split_free(s);
}

/* ---------------------------------------------------------------------
 * Splitting */

/* Send PART, the command NAME with the arguments of its keys (ARGV at
 * KEYS[key_index[i]], STEP arguments each), to NODE on the shared
 * connection of CLIENT_ID. A part that cannot be sent is answered with
 * the error at once. */
static void split_send(struct split_part *part, struct backend_node *node,
                       unsigned long long client_id, const char *name, int step,
                       const struct sv *argv, const int *keys)
{
    struct evbuffer *buf = evbuffer_new();
    struct backend_conn *conn = backend_pool_conn(node, client_id);
    struct split *s = part->split;
    size_t name_len = strlen(name);

    evbuffer_add_printf(buf, "*%d\r\n$%zu\r\n%s\r\n", 1 + part->count * step, name_len, name);
    for (int i = 0; i < part->count; i++) {
        for (int a = 0; a < step; a++) {
            const struct sv *v = &argv[keys[part->key_index[i]] + a];
            evbuffer_add_printf(buf, "$%zu\r\n", v->len);
            evbuffer_add(buf, v->ptr, v->len);
            evbuffer_add(buf, "\r\n", 2);
        }
    }
    s->parts++;
    s->pending++;
    if (backend_send_internal(conn, buf, split_part_reply, part, split_part_free) != 0) {
        static const char down[] = "-ERR backend unavailable: a cluster node is down\r\n";
        /* ctx_free ran: PART is gone; S lives on (the caller holds it). */
        s->pending--;
        split_part_error(s, down, sizeof(down) - 1);
    }
    evbuffer_free(buf);
}

static struct split_part *split_part_new(struct split *s, int max)
{
    struct split_part *part = calloc(1, sizeof(*part));

    if (part == NULL)
        return NULL;
    part->split = s;
    part->key_index = malloc((size_t)(max > 0 ? max : 1) * sizeof(int));
    if (part->key_index == NULL) {
        free(part);
        return NULL;
    }
    return part;
}

/* One part per slot among the keys KEYS (NKEYS of them) of ARGV. */
static int split_by_slot(struct split *s, unsigned long long client_id,
                         const struct split_command *sc, const struct sv *argv,
                         const int *keys, int nkeys)
{
    char *done = calloc((size_t)nkeys, 1);

    if (done == NULL)
        return -1;
    for (int i = 0; i < nkeys; i++) {
        struct split_part *part;
        int slot;
        if (done[i])
            continue;
        part = split_part_new(s, nkeys - i);
        if (part == NULL) {
            free(done);
            return -1;
        }
        slot = slot_for_key(argv[keys[i]].ptr, argv[keys[i]].len);
        for (int j = i; j < nkeys; j++) {
            if (!done[j] && slot_for_key(argv[keys[j]].ptr, argv[keys[j]].len) == slot) {
                done[j] = 1;
                part->key_index[part->count++] = j;
            }
        }
        split_send(part, router_node_for_key(argv[keys[i]].ptr, argv[keys[i]].len), client_id,
                   sc->name, sc->step, argv, keys);
    }
    free(done);
    return 0;
}

/* One part per primary of the map (DBSIZE). */
static void split_by_primary(struct split *s, unsigned long long client_id,
                             const struct split_command *sc)
{
    struct backend_node *node = NULL;

    while ((node = backend_node_next(node)) != NULL) {
        struct split_part *part;
        if (!cluster_node_is_primary(node) || (part = split_part_new(s, 0)) == NULL)
            continue;
        split_send(part, node, client_id, sc->name, 0, NULL, NULL);
    }
}

/* Drop the hold cluster_split_run took; answer when every part already has. */
static void split_release(struct split *s)
{
    if (s->pending == 0 && s->parent != NULL)
        split_answer(s);
    if (--s->parts == 0) {
        if (s->parent != NULL)
            s->parent->flags &= ~(unsigned)REQ_DETACHED;
        split_free(s);
    }
}

int cluster_split_run(struct request *req, int argc, const struct sv *argv)
{
    const struct split_command *sc = split_find(req->cmd);
    struct split *s;
    int *keys = NULL, nkeys = 0, rc = 0;

    if (sc == NULL || (s = calloc(1, sizeof(*s))) == NULL)
        return -1;
    if (sc->step > 0 && (keys = malloc((size_t)argc * sizeof(int))) != NULL)
        nkeys = commands_keys(req->cmd, argc, argv, keys, argc);
    s->parent = req;
    s->merge = sc->merge;
    s->nkeys = nkeys;
    s->parts = 1;   /* held while the parts are made: none may free S meanwhile */
    req->flags |= REQ_DETACHED;
    if (s->merge == MERGE_ARRAY) {
        s->elems = calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(*s->elems));
        for (int i = 0; s->elems != NULL && i < nkeys; i++)
            if ((s->elems[i] = evbuffer_new()) == NULL)
                rc = -1;
    }
    if (sc->step == 0)
        split_by_primary(s, req->client->id, sc);
    else if (keys == NULL || (s->merge == MERGE_ARRAY && s->elems == NULL) || rc != 0 ||
             split_by_slot(s, req->client->id, sc, argv, keys, nkeys) != 0)
        split_part_error(s, "-OOM sluice is out of memory\r\n", 30);
    free(keys);
    split_release(s);
    return 0;
}
