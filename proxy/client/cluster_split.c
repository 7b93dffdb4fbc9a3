/* cluster_split.c - owns commands that cluster mode runs in parts: a
 * multi-key command whose keys hash to several slots (MGET, MSET, DEL,
 * UNLINK, EXISTS, TOUCH) becomes one command per slot, and a whole-keyspace
 * command (DBSIZE, KEYS, RANDOMKEY, FLUSHALL, FLUSHDB, SCRIPT LOAD/EXISTS/
 * FLUSH/KILL, FUNCTION LOAD/DELETE/FLUSH/RESTORE/KILL, and admin commands
 * such as CONFIG SET, CLIENT PAUSE/UNPAUSE) is sent as it is to every primary; the
 * parts go out at once and their replies are merged into the one reply the
 * client gets, in its request order.
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
#include "pause.h"
#include "placement.h"
#include "reply.h"
#include "request.h"
#include "respwalk.h"
#include "router.h"
#include "slot.h"

enum split_merge {
    MERGE_ARRAY,   /* MGET: one element per key, in key order */
    MERGE_SUM,     /* DEL, UNLINK, EXISTS, TOUCH, DBSIZE, SLOWLOG LEN...: integers added */
    MERGE_OK,      /* MSET, FLUSHALL...: +OK when every part said so */
    MERGE_CONCAT,  /* KEYS: every part's elements, one array */
    MERGE_AND,     /* SCRIPT EXISTS: 1 where every part says 1 */
    MERGE_SAME,    /* SCRIPT LOAD, FUNCTION LOAD: one part's reply (all agree) */
    MERGE_ANY,     /* RANDOMKEY: a part's non-nil reply, else nil */
    MERGE_SCAN,    /* SCAN: a page of one node, or of the next ones too while short of
                      COUNT; the cursor made sluice's */
    MERGE_KILL,    /* SCRIPT KILL, FUNCTION KILL: +OK when a part killed one (the script
                      runs on one node); else a part's error, NOTBUSY last */
    MERGE_SLOWLOG, /* SLOWLOG GET: every node's entries, newest first, as many as asked */
};

/* SCAN walks the primaries in the order of the first slot each serves.
 * Its cursor for the client: the node's own cursor shifted left by 14
 * bits, and that first slot in the low 14. A node keeps its place while
 * it serves the same slots: a failover changes only its address. */
#define SPLIT_SCAN_SLOT_BITS 14

/* Commands run in parts: name, merge, arguments per key (0: the whole
 * command to every primary). */
static const struct split_command {
    const char *name;
    enum split_merge merge;
    int step;
} split_commands[] = {
    {"mget", MERGE_ARRAY, 1}, {"mset", MERGE_OK, 2}, {"del", MERGE_SUM, 1},
    {"unlink", MERGE_SUM, 1}, {"exists", MERGE_SUM, 1}, {"touch", MERGE_SUM, 1},
    {"dbsize", MERGE_SUM, 0}, {"keys", MERGE_CONCAT, 0}, {"randomkey", MERGE_ANY, 0},
    {"flushall", MERGE_OK, 0}, {"flushdb", MERGE_OK, 0},
    {"script|load", MERGE_SAME, 0}, {"script|exists", MERGE_AND, 0},
    {"script|flush", MERGE_OK, 0}, {"function|load", MERGE_SAME, 0},
    {"function|delete", MERGE_OK, 0}, {"function|flush", MERGE_OK, 0},
    {"function|restore", MERGE_OK, 0}, {"script|kill", MERGE_KILL, 0},
    {"function|kill", MERGE_KILL, 0},
    {"scan", MERGE_SCAN, 0},
    /* Admin commands that change or reset what every node has (README,
     * "Admin commands in cluster mode"): the others reach one node. */
    {"config|set", MERGE_OK, 0}, {"config|resetstat", MERGE_OK, 0},
    {"config|rewrite", MERGE_OK, 0}, {"slowlog|reset", MERGE_OK, 0},
    {"slowlog|len", MERGE_SUM, 0}, {"slowlog|get", MERGE_SLOWLOG, 0},
    {"latency|reset", MERGE_SUM, 0},
    {"memory|purge", MERGE_OK, 0}, {"save", MERGE_OK, 0}, {"bgsave", MERGE_SAME, 0},
    {"bgrewriteaof", MERGE_SAME, 0}, {"acl|setuser", MERGE_OK, 0},
    /* Users are the same on every primary: ACL DELUSER's count is one's. */
    {"acl|deluser", MERGE_SAME, 0}, {"acl|load", MERGE_OK, 0}, {"acl|save", MERGE_OK, 0},
    /* One Redis paused pauses everything: every primary (pause.c follows
     * it as in standalone mode: split_answer). */
    {"client|pause", MERGE_OK, 0}, {"client|unpause", MERGE_OK, 0},
};

struct split {
    struct request *parent;
    enum split_merge merge;
    int pending;                 /* parts not yet answered */
    int parts;                   /* parts not yet freed, plus the maker's hold */
    long long sum;               /* MERGE_SUM; MERGE_KILL: parts that said OK */
    int nkeys;                   /* MERGE_ARRAY: keys; MERGE_AND: scripts asked */
    size_t *elem_at;             /* MERGE_ARRAY: key i's reply element in concat: offset
                                    [2i], length [2i+1] (no buffer per key: an MGET of
                                    thousands of keys would cost a chain each) */
    long long *all_ones;         /* MERGE_AND: per script, 1 while every part said 1 */
    long long concat_count;      /* MERGE_CONCAT: elements in concat */
    struct evbuffer *concat;     /* MERGE_CONCAT: elements; ARRAY: elements as they come;
                                    SAME/ANY: the reply kept; KILL: the first NOTBUSY */
    struct evbuffer *error;      /* the first error reply of a part */
    int resp;                    /* the client's protocol: its parts speak it too */
    int scan_slot;               /* MERGE_SCAN: the first slot of the node scanned, */
    int scan_next;               /* and of the node after it (0: none); */
    long long scan_count;        /* the client's COUNT (10 without one), */
    struct evbuffer *scan_args;  /* and its arguments after the cursor, as sent */
    struct split_entry *entries; /* MERGE_SLOWLOG: the entries kept in concat, */
    size_t nentries, entries_cap;
    long long limit;             /* and how many the client asked for (-1: all) */
    int scan_argc;               /* MERGE_SCAN: the client's arguments */
};

/* A SLOWLOG GET entry of a node: its bytes in concat, its time and id. */
struct split_entry {
    size_t at, len;
    long long time, id;
};

struct split_part {
    struct split *split;
    int count;                   /* keys in this part */
    int *key_index;              /* their positions in the parent's key order */
    int counted;                 /* in its client's split_parts (client_note_parts) */
};

/* PART is answered or gone: its client (if still there) has one part
 * fewer in flight. */
static void split_part_uncount(struct split_part *part)
{
    struct request *parent = part->split->parent;

    if (part->counted && parent != NULL && parent->client != NULL)
        client_note_parts(parent->client, -1);
    part->counted = 0;
}

/* split_commands by command id (NULL: not split): looked up on every
 * request in cluster mode, so made once, on first use. */
static const struct split_command **split_by_id;

static void split_index(void)
{
    int n = commands_count();

    split_by_id = calloc((size_t)n, sizeof(*split_by_id));
    for (int id = 0; split_by_id != NULL && id < n; id++) {
        for (size_t i = 0; i < sizeof(split_commands) / sizeof(split_commands[0]); i++) {
            if (strcmp(commands_by_id(id)->name, split_commands[i].name) == 0)
                split_by_id[id] = &split_commands[i];
        }
    }
}

static const struct split_command *split_find(const struct command *cmd)
{
    if (cmd == NULL)
        return NULL;
    if (split_by_id == NULL)
        split_index();
    return split_by_id != NULL ? split_by_id[cmd->id] : NULL;
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
    if (s->scan_args != NULL)
        evbuffer_free(s->scan_args);
    free(s->entries);
    free(s->elem_at);
    free(s->all_ones);
    if (s->concat != NULL)
        evbuffer_free(s->concat);
    if (s->error != NULL)
        evbuffer_free(s->error);
    free(s);
}

/* Newest first (a later time, then a higher id): as one Redis lists its
 * slow log. Ids are each node's own: two nodes may show the same id. */
static int split_entry_cmp(const void *a, const void *b)
{
    const struct split_entry *x = a, *y = b;

    if (x->time != y->time)
        return x->time > y->time ? -1 : 1;
    return x->id > y->id ? -1 : x->id < y->id;
}

/* SLOWLOG GET merged: the newest s->limit entries of every node's. */
static void split_write_slowlog(struct split *s, struct evbuffer *out)
{
    const char *data = (const char *)evbuffer_pullup(s->concat, -1);
    size_t n = s->nentries;

    if (s->limit >= 0 && (unsigned long long)s->limit < n)
        n = (size_t)s->limit;
    if (s->nentries > 0)
        qsort(s->entries, s->nentries, sizeof(*s->entries), split_entry_cmp);
    evbuffer_add_printf(out, "*%zu\r\n", data != NULL ? n : 0);
    for (size_t i = 0; i < n && data != NULL; i++)
        evbuffer_add(out, data + s->entries[i].at, s->entries[i].len);
}

/* Write the merged reply of S to OUT. */
static void split_write_reply(struct split *s, struct evbuffer *out)
{
    if (s->merge == MERGE_KILL && s->sum > 0) {
        evbuffer_add(out, "+OK\r\n", 5);   /* the node that ran it killed it */
    } else if (s->error != NULL) {
        evbuffer_add_buffer(out, s->error);
    } else if (s->merge == MERGE_SUM) {
        evbuffer_add_printf(out, ":%lld\r\n", s->sum);
    } else if (s->merge == MERGE_OK) {
        evbuffer_add(out, "+OK\r\n", 5);
    } else if (s->merge == MERGE_ARRAY) {
        const char *data = (const char *)evbuffer_pullup(s->concat, -1);
        evbuffer_add_printf(out, "*%d\r\n", s->nkeys);
        for (int i = 0; i < s->nkeys && data != NULL; i++)
            evbuffer_add(out, data + s->elem_at[2 * i], s->elem_at[2 * i + 1]);
    } else if (s->merge == MERGE_AND) {
        evbuffer_add_printf(out, "*%d\r\n", s->nkeys);
        for (int i = 0; i < s->nkeys; i++)
            evbuffer_add_printf(out, ":%lld\r\n", s->all_ones[i]);
    } else if (s->merge == MERGE_SLOWLOG) {
        split_write_slowlog(s, out);
    } else if (s->merge == MERGE_CONCAT) {
        evbuffer_add_printf(out, "*%lld\r\n", s->concat_count);
        evbuffer_add_buffer(out, s->concat);
    } else if (s->merge == MERGE_SCAN) {
        char cursor[32];
        int n = snprintf(cursor, sizeof(cursor), "%llu", (unsigned long long)s->sum);
        evbuffer_add_printf(out, "*2\r\n$%d\r\n%s\r\n*%lld\r\n", n, cursor, s->concat_count);
        evbuffer_add_buffer(out, s->concat);
    } else if (evbuffer_get_length(s->concat) > 0) {
        evbuffer_add_buffer(out, s->concat);   /* SAME, ANY, KILL's NOTBUSY */
    } else {
        evbuffer_add(out, s->resp == 3 ? "_\r\n" : "$-1\r\n", s->resp == 3 ? 3 : 5);   /* no key */
    }
}

/* A CLIENT PAUSE or UNPAUSE sent to every primary is answered: pause.c
 * learns it as from the one Redis of standalone mode (an error takes a
 * PAUSE back; UNPAUSE's +OK ends the pause). */
static void split_note_pause(const struct split *s, const struct request *parent)
{
    enum placement_role role = placement_role(parent->cmd);

    if (role == ROLE_PAUSE || role == ROLE_UNPAUSE)
        pause_note_reply(role == ROLE_PAUSE, 0, s->error != NULL ? REPLY_ERROR : REPLY_STATUS,
                         parent->pauses_before);
}

/* Every part has answered: the merged reply goes to the parent's client
 * (or the parent is freed, its client gone). */
static void split_answer(struct split *s)
{
    struct request *parent = s->parent;
    struct client *c = parent->client;

    s->parent = NULL;
    parent->flags &= ~(unsigned)REQ_DETACHED;
    split_note_pause(s, parent);
    if (c == NULL) {
        request_free(parent);
        return;
    }
    split_write_reply(s, client_reply_buffer(c, parent));
    client_answer(c, parent);
}

static void split_part_error(struct split *s, const char *text, size_t len)
{
    if (s->error != NULL)
        return;
    s->error = evbuffer_new();
    evbuffer_add(s->error, text, len);
}

/* MGET's reply element for key KEY, LEN bytes at ELEM, kept in S. */
static void split_keep_element(struct split *s, int key, const char *elem, size_t len)
{
    s->elem_at[2 * key] = evbuffer_get_length(s->concat);
    s->elem_at[2 * key + 1] = len;
    evbuffer_add(s->concat, elem, len);
}

/* Take PART's array reply (LEN bytes at BUF) into S: MGET's element i is
 * key i's; KEYS' elements are appended; SCRIPT EXISTS' are ANDed. */
static int split_take_array(struct split *s, struct split_part *part, const char *buf,
                            size_t len)
{
    struct respwalk w = {buf, buf + len};
    long long n, v;

    if (respwalk_array(&w, &n) != 0)
        return -1;
    if (s->merge == MERGE_CONCAT) {
        s->concat_count += n;
        evbuffer_add(s->concat, w.p, (size_t)(w.end - w.p));
        return 0;
    }
    if (n != (s->merge == MERGE_AND ? s->nkeys : part->count))
        return -1;
    for (int i = 0; i < n; i++) {
        const char *start = w.p;
        if (s->merge == MERGE_AND) {
            if (respwalk_int(&w, &v) != 0)
                return -1;
            s->all_ones[i] = s->all_ones[i] && v == 1;
            continue;
        }
        if (respwalk_skip(&w, 1) != 0)
            return -1;
        split_keep_element(s, part->key_index[i], start, (size_t)(w.p - start));
    }
    return 0;
}

static void split_scan_send(struct split *s, unsigned long long client_id,
                            unsigned long long node_cursor);
static int split_scan_next_start(int after);

/* SCAN's page [cursor, [keys...]] from the node of s->scan_slot: the
 * keys as they are, the cursor made sluice's. A node that is done, with
 * fewer keys than COUNT so far, hands on to the next node within the same
 * call, as one Redis finishes a small keyspace in one SCAN; else the
 * cursor is the next node's start (0 after the last). */
static int split_take_scan(struct split *s, const char *buf, size_t len)
{
    struct respwalk w = {buf, buf + len};
    unsigned long long next;
    long long n, keys;
    const char *text;
    size_t text_len;
    char digits[24];

    if (respwalk_array(&w, &n) != 0 || n != 2 || respwalk_bulk(&w, &text, &text_len) != 0 ||
        text_len == 0 || text_len >= sizeof(digits) || respwalk_array(&w, &keys) != 0)
        return -1;
    memcpy(digits, text, text_len);
    digits[text_len] = '\0';
    next = strtoull(digits, NULL, 10);
    if (next >> (64 - SPLIT_SCAN_SLOT_BITS) != 0)
        return -1;   /* a cursor too large to carry the node as well */
    s->concat_count += keys;
    evbuffer_add(s->concat, w.p, (size_t)(w.end - w.p));
    if (next != 0) {
        s->sum = (long long)((next << SPLIT_SCAN_SLOT_BITS) | (unsigned)s->scan_slot);
        return 0;
    }
    s->sum = s->scan_next;
    if (s->scan_next == 0 || s->concat_count >= s->scan_count || s->parent == NULL ||
        s->parent->client == NULL)
        return 0;
    /* On into the next node, from its start (s->sum says so until it answers). */
    s->scan_slot = s->scan_next;
    s->scan_next = split_scan_next_start(s->scan_slot);
    split_scan_send(s, s->parent->client->id, 0);
    return 0;
}

/* One node's SLOWLOG GET reply (LEN bytes at BUF): each entry ([id, time,
 * duration, args, addr, name]) kept with its time and id. */
static int split_take_slowlog(struct split *s, const char *buf, size_t len)
{
    struct respwalk w = {buf, buf + len};
    long long n, fields, id, time;

    if (respwalk_array(&w, &n) != 0)
        return -1;
    for (long long i = 0; i < n; i++) {
        const char *start = w.p;
        if (respwalk_array(&w, &fields) != 0 || fields < 2 || respwalk_int(&w, &id) != 0 ||
            respwalk_int(&w, &time) != 0 || respwalk_skip(&w, fields - 2) != 0)
            return -1;
        if (s->nentries == s->entries_cap) {
            size_t cap = s->entries_cap > 0 ? 2 * s->entries_cap : 16;
            struct split_entry *more = realloc(s->entries, cap * sizeof(*more));
            if (more == NULL)
                return -1;
            s->entries = more;
            s->entries_cap = cap;
        }
        s->entries[s->nentries++] = (struct split_entry){
            evbuffer_get_length(s->concat), (size_t)(w.p - start), time, id};
        evbuffer_add(s->concat, start, (size_t)(w.p - start));
    }
    return 0;
}

/* Merge one part's reply (not an error), LEN bytes at BUF of TYPE, into
 * S. -1 when it is not what the command answers. */
static int split_take(struct split *s, struct split_part *part, const char *buf, size_t len,
                      int type)
{
    switch (s->merge) {
    case MERGE_SUM:
        if (type != REPLY_INTEGER)
            return -1;
        s->sum += strtoll(buf + 1, NULL, 10);
        return 0;
    case MERGE_OK:
        return type == REPLY_STATUS ? 0 : -1;
    case MERGE_KILL:
        s->sum++;
        return type == REPLY_STATUS ? 0 : -1;
    case MERGE_SCAN:
        return type == REPLY_ARRAY ? split_take_scan(s, buf, len) : -1;
    case MERGE_SLOWLOG:
        return type == REPLY_ARRAY ? split_take_slowlog(s, buf, len) : -1;
    case MERGE_SAME:
    case MERGE_ANY:
        if (evbuffer_get_length(s->concat) == 0 && type != REPLY_NIL)
            evbuffer_add(s->concat, buf, len);
        return 0;
    default:
        return type == REPLY_ARRAY ? split_take_array(s, part, buf, len) : -1;
    }
}

static void split_part_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct split_part *part = req->ctx;
    struct split *s = part->split;
    const char *buf = (const char *)evbuffer_pullup(src, (ssize_t)len);
    static const char bad[] = "-ERR sluice could not merge a cluster node's reply\r\n";

    split_part_uncount(part);
    if (buf != NULL && s->merge == MERGE_KILL && type == REPLY_ERROR && len >= 8 &&
        memcmp(buf, "-NOTBUSY", 8) == 0) {
        /* Nothing runs there: the answer only if nothing ran anywhere. */
        if (evbuffer_get_length(s->concat) == 0)
            evbuffer_add(s->concat, buf, len);
    } else if (buf == NULL || type == REPLY_ERROR) {
        split_part_error(s, buf != NULL ? buf : bad, buf != NULL ? len : sizeof(bad) - 1);
    } else if (split_take(s, part, buf, len, type) != 0) {
        split_part_error(s, bad, sizeof(bad) - 1);
    }
    evbuffer_drain(src, len);
    if (--s->pending == 0 && s->parent != NULL)
        split_answer(s);
    request_free(req);
}

/* Drop one hold on S (a part freed, or the maker's): the last frees it. */
static void split_unhold(struct split *s)
{
    if (--s->parts > 0)
        return;
    if (s->parent != NULL && s->parent->client == NULL)
        request_free(s->parent);   /* never answered (exit), and nobody waits */
    else if (s->parent != NULL)
        s->parent->flags &= ~(unsigned)REQ_DETACHED;
    split_free(s);
}

static void split_part_free(struct request *req)
{
    struct split_part *part = req->ctx;
    struct split *s = part->split;

    split_part_uncount(part);
    free(part->key_index);
    free(part);
    req->ctx = NULL;
    split_unhold(s);
}

/* ---------------------------------------------------------------------
 * Splitting */

/* REQ_RERUNNABLE when S's command only reads: a part whose connection
 * failed after it was written may be sent again. */
static unsigned split_rerunnable(const struct split *s)
{
    const struct command *cmd = s->parent != NULL ? s->parent->cmd : NULL;

    return cmd != NULL && (cmd->flags & CMD_READONLY) && !(cmd->flags & CMD_WRITE)
               ? REQ_RERUNNABLE
               : 0;
}

/* Send PART, whose bytes are in BUF (freed here), for SLOT (a slot of
 * its keys; of the primary it is for) to NODE on the shared connection of
 * CLIENT_ID: when NODE is down it waits for SLOT's owner, as any request
 * (cluster_send_own). A part that cannot be sent makes the error. */
static void split_send(struct split_part *part, struct backend_node *node, int slot,
                       unsigned long long client_id, struct evbuffer *buf)
{
    struct split *s = part->split;

    s->parts++;
    s->pending++;
    if (s->parent != NULL && s->parent->client != NULL) {
        part->counted = 1;
        client_note_parts(s->parent->client, 1);
    }
    /* A users_in_redis user's SCRIPT LOAD loads as its Redis user on
     * every node, as it does standalone. */
    if (cluster_send_own(node, s->parent != NULL ? s->parent->login : NULL, client_id, s->resp,
                         slot, split_rerunnable(s), buf, split_part_reply, part,
                         split_part_free) != 0) {
        static const char down[] = "-ERR backend unavailable: a cluster node is down\r\n";
        /* ctx_free ran: PART is gone; S lives on (the maker holds it). */
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

/* Key positions ordered by slot, then by position (qsort). */
struct split_key {
    int slot;
    int index;
};

static int split_key_cmp(const void *a, const void *b)
{
    const struct split_key *x = a, *y = b;

    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The part for the run of ORDER[from..to) (one slot): the command NAME
 * with STEP arguments for each of its keys. */
static void split_send_slot(struct split *s, unsigned long long client_id,
                            const struct split_command *sc, const struct sv *argv,
                            const int *keys, const struct split_key *order, int from, int to)
{
    struct split_part *part = split_part_new(s, to - from);
    struct evbuffer *buf = evbuffer_new();
    const struct sv *first = &argv[keys[order[from].index]];

    if (part == NULL || buf == NULL) {
        split_part_error(s, "-OOM sluice is out of memory\r\n", 30);
        free(part != NULL ? part->key_index : NULL);
        free(part);
        if (buf != NULL)
            evbuffer_free(buf);
        return;
    }
    reply_array_header(buf, 1 + (to - from) * sc->step);
    reply_bulk(buf, sc->name, strlen(sc->name));
    for (int i = from; i < to; i++) {
        const struct sv *key = &argv[keys[order[i].index]];
        part->key_index[part->count++] = order[i].index;
        for (int a = 0; a < sc->step; a++)
            reply_bulk(buf, key[a].ptr, key[a].len);
    }
    split_send(part, router_node_for_key(first->ptr, first->len), order[from].slot, client_id,
               buf);
}

/* One part per slot among the keys KEYS (NKEYS of them) of ARGV. */
static int split_by_slot(struct split *s, unsigned long long client_id,
                         const struct split_command *sc, const struct sv *argv,
                         const int *keys, int nkeys)
{
    struct split_key *order = malloc((size_t)nkeys * sizeof(*order));
    int from = 0;

    if (order == NULL)
        return -1;
    for (int i = 0; i < nkeys; i++) {
        order[i].slot = slot_for_key(argv[keys[i]].ptr, argv[keys[i]].len);
        order[i].index = i;
    }
    qsort(order, (size_t)nkeys, sizeof(*order), split_key_cmp);
    for (int i = 1; i <= nkeys; i++) {
        if (i == nkeys || order[i].slot != order[from].slot) {
            split_send_slot(s, client_id, sc, argv, keys, order, from, i);
            from = i;
        }
    }
    free(order);
    return 0;
}

/* The lowest slot NODE serves (-1: none). */
static int split_first_slot(const struct backend_node *node)
{
    for (int slot = 0; slot < SLOT_COUNT; slot++) {
        if (cluster_node_for_slot(slot) == node)
            return slot;
    }
    return -1;
}

/* The whole request, ARGC arguments ARGV, to every primary of the map. */
static void split_by_primary(struct split *s, unsigned long long client_id, int argc,
                             const struct sv *argv)
{
    struct backend_node *node = NULL;

    while ((node = backend_node_next(node)) != NULL) {
        struct split_part *part;
        struct evbuffer *buf;
        if (!cluster_node_is_primary(node) || (part = split_part_new(s, 0)) == NULL)
            continue;
        buf = evbuffer_new();
        reply_array_header(buf, argc);
        for (int i = 0; i < argc; i++)
            reply_bulk(buf, argv[i].ptr, argv[i].len);
        split_send(part, node, split_first_slot(node), client_id, buf);
    }
}

#define SPLIT_SCAN_MAX_NODES 1024

/* The start of the next node in SCAN's walk after slot AFTER (the first
 * node's with AFTER -1): the first slot above AFTER that is the lowest
 * slot of the primary serving it. 0 when there is none. */
static int split_scan_next_start(int after)
{
    static struct backend_node *seen[SPLIT_SCAN_MAX_NODES];
    struct backend_node *prev = NULL;
    int nseen = 0;

    for (int slot = 0; slot < SLOT_COUNT; slot++) {
        struct backend_node *node = cluster_node_for_slot(slot);
        int first = node != NULL && node != prev;
        /* A new range: the node's first slot unless a range before was its. */
        for (int i = 0; first && i < nseen; i++)
            first = seen[i] != node;
        if (first && slot > after)
            return slot;
        if (first && nseen < SPLIT_SCAN_MAX_NODES)
            seen[nseen++] = node;
        prev = node;
    }
    return 0;
}

/* Parse a SCAN cursor as Redis 7.0 does (strtoul, base 10, the whole
 * text): an optional sign, then digits; "" is 0 and "-N" wraps around as
 * strtoul makes it. Returns -1 for what Redis calls an invalid cursor. */
static int split_scan_cursor(struct sv text, unsigned long long *cursor)
{
    size_t i = 0;
    int negative = 0;
    unsigned long long n = 0;

    if (text.len > 0 && (text.ptr[0] == '+' || text.ptr[0] == '-')) {
        negative = text.ptr[0] == '-';
        if (text.len == 1)
            return -1;   /* a sign and no digits */
        i = 1;
    }
    for (; i < text.len; i++) {
        unsigned digit = (unsigned)(text.ptr[i] - '0');

        if (text.ptr[i] < '0' || text.ptr[i] > '9' || n > (~0ULL - digit) / 10)
            return -1;
        n = n * 10 + digit;
    }
    *cursor = negative ? 0 - n : n;
    return 0;
}

/* SCAN's COUNT argument TEXT: how many keys a page should reach before
 * the walk stops at a node's end (10 when not a positive number: Redis
 * then answers the node's error anyway). */
static long long split_scan_count(struct sv text)
{
    char digits[24];
    long long n;

    if (text.len == 0 || text.len >= sizeof(digits))
        return 10;
    memcpy(digits, text.ptr, text.len);
    digits[text.len] = '\0';
    n = strtoll(digits, NULL, 10);
    return n > 0 ? n : 10;
}

/* SCAN with the client's CURSOR (ARGV[1]): the rest of the command to
 * the node the cursor names, with that node's own cursor. */
static void split_scan(struct split *s, unsigned long long client_id, int argc,
                       const struct sv *argv)
{
    unsigned long long cursor = 0;

    if (argc < 2) {
        static const char arity[] = "-ERR wrong number of arguments for 'scan' command\r\n";
        split_part_error(s, arity, sizeof(arity) - 1);
        return;
    }
    if (split_scan_cursor(argv[1], &cursor) != 0) {
        split_part_error(s, "-ERR invalid cursor\r\n", 21);
        return;
    }
    s->scan_slot = (int)(cursor & (SLOT_COUNT - 1));
    if (cursor == 0)
        s->scan_slot = split_scan_next_start(-1);   /* the walk begins */
    s->scan_next = split_scan_next_start(s->scan_slot);
    s->scan_count = 10;
    s->scan_argc = argc;
    for (int i = 2; i < argc; i++)
        reply_bulk(s->scan_args, argv[i].ptr, argv[i].len);
    for (int i = 2; i + 1 < argc; i += 2) {   /* option, value: as Redis reads them */
        if (sv_ieq(argv[i], "count"))
            s->scan_count = split_scan_count(argv[i + 1]);
    }
    split_scan_send(s, client_id, cursor >> SPLIT_SCAN_SLOT_BITS);
}

/* SCAN NODE_CURSOR and the client's other arguments to the node of
 * s->scan_slot, for CLIENT_ID. */
static void split_scan_send(struct split *s, unsigned long long client_id,
                            unsigned long long node_cursor)
{
    struct backend_node *node = cluster_node_for_slot(s->scan_slot);
    struct split_part *part;
    struct evbuffer *buf;
    char text[24];

    if (node == NULL || (part = split_part_new(s, 0)) == NULL) {
        s->sum = 0;   /* the slot is served by nobody now: the last page */
        return;
    }
    snprintf(text, sizeof(text), "%llu", node_cursor);
    buf = evbuffer_new();
    evbuffer_add_printf(buf, "*%d\r\n$4\r\nSCAN\r\n$%zu\r\n%s\r\n", s->scan_argc, strlen(text),
                        text);
    evbuffer_add(buf, evbuffer_pullup(s->scan_args, -1), evbuffer_get_length(s->scan_args));
    split_send(part, node, s->scan_slot, client_id, buf);
}

/* How many entries SLOWLOG GET [count] asks for: 10 without a count, -1
 * (all) for a negative one. A count Redis refuses gets its error from
 * every node, and that error is the reply. */
static long long split_slowlog_count(int argc, const struct sv *argv)
{
    char text[24];
    long long n;

    if (argc < 3 || argv[2].len == 0 || argv[2].len >= sizeof(text))
        return 10;
    memcpy(text, argv[2].ptr, argv[2].len);
    text[argv[2].len] = '\0';
    n = strtoll(text, NULL, 10);
    return n < 0 ? -1 : n;
}

/* Drop the maker's hold; answer when every part already has. */
static void split_release(struct split *s)
{
    if (s->pending == 0 && s->parent != NULL)
        split_answer(s);
    split_unhold(s);
}

/* Make what MERGE needs beyond the split itself. -1 on OOM. */
static int split_prepare(struct split *s, int argc)
{
    if (s->merge == MERGE_ARRAY) {
        s->elem_at = calloc((size_t)(s->nkeys > 0 ? s->nkeys : 1) * 2, sizeof(*s->elem_at));
        if (s->elem_at == NULL || (s->concat = evbuffer_new()) == NULL)
            return -1;
    } else if (s->merge == MERGE_AND) {
        s->nkeys = argc > 2 ? argc - 2 : 0;   /* SCRIPT EXISTS sha1 [sha1 ...] */
        s->all_ones = malloc((size_t)(s->nkeys > 0 ? s->nkeys : 1) * sizeof(*s->all_ones));
        if (s->all_ones == NULL)
            return -1;
        for (int i = 0; i < s->nkeys; i++)
            s->all_ones[i] = 1;
    } else if (s->merge == MERGE_CONCAT || s->merge == MERGE_SAME || s->merge == MERGE_ANY ||
               s->merge == MERGE_SCAN || s->merge == MERGE_KILL || s->merge == MERGE_SLOWLOG) {
        if ((s->concat = evbuffer_new()) == NULL)
            return -1;
    }
    if (s->merge == MERGE_SCAN && (s->scan_args = evbuffer_new()) == NULL)
        return -1;
    return 0;
}

/* Whether each of the NKEYS keys KEYS of ARGC arguments has the STEP
 * arguments that go with it (MSET's key and value): Redis answers an
 * arity error otherwise, and a part must not read past the last one. */
static int split_groups_whole(const struct split_command *sc, int argc, const int *keys,
                              int nkeys)
{
    for (int i = 0; i < nkeys; i++) {
        if (keys[i] + sc->step > argc)
            return 0;
    }
    return 1;
}

/* Redis's arity error for SC in S's error. */
static void split_arity_error(struct split *s, const struct split_command *sc)
{
    char text[120];
    int n = snprintf(text, sizeof(text),
                     "-ERR wrong number of arguments for '%s' command\r\n", sc->name);

    split_part_error(s, text, (size_t)n);
}

int cluster_split_run(struct request *req, int argc, const struct sv *argv)
{
    const struct split_command *sc = split_find(req->cmd);
    struct split *s;
    int *keys = NULL, ok;

    if (sc == NULL || (s = calloc(1, sizeof(*s))) == NULL)
        return -1;
    if (sc->step > 0 && (keys = malloc((size_t)argc * sizeof(int))) != NULL)
        s->nkeys = commands_keys(req->cmd, argc, argv, keys, argc);
    s->parent = req;
    s->merge = sc->merge;
    s->parts = 1;   /* the maker's hold: no part may free S meanwhile */
    s->resp = req->client->resp;
    req->flags |= REQ_DETACHED;
    ok = split_prepare(s, argc) == 0 && (sc->step == 0 || keys != NULL);
    if (s->merge == MERGE_SLOWLOG)
        s->limit = split_slowlog_count(argc, argv);
    if (ok && sc->step > 1 && !split_groups_whole(sc, argc, keys, s->nkeys))
        split_arity_error(s, sc);
    else if (ok && s->merge == MERGE_SCAN)
        split_scan(s, req->client->id, argc, argv);
    else if (ok && sc->step == 0)
        split_by_primary(s, req->client->id, argc, argv);
    else if (ok)
        ok = split_by_slot(s, req->client->id, sc, argv, keys, s->nkeys) == 0;
    if (!ok)
        split_part_error(s, "-OOM sluice is out of memory\r\n", 30);
    free(keys);
    split_release(s);
    return 0;
}
