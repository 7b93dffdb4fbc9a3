/* primaryage.c - owns the decision of when a primary seen for the first
 * time may last have lost writes it acknowledged, from what Redis says
 * (INFO, and sluice's record in it: lua/primary_record.lua), and the
 * record's reads and writes. It decides nothing about locks: the caller
 * reports what it says through the primary-change hook.
 *
 *   role:master, second_repl_offset:-1 (never promoted)
 *       loaded (loading) a data set from disk -> lost at its start (uptime ago)
 *       else                        -> nothing lost (new, or restarted empty)
 *   promoted -> EVAL primary_record {replid} -> {first seen, now}
 *       -> lost when first seen (now - seen), at most uptime ago
 *       refused / no reply          -> lost now
 */
#include "primaryage.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"
#include "pause.h"
#include "request.h"
#include "respframe.h"
#include "scripts.h"
#include "slot.h"

#define PRIMARYAGE_KEY "sluice:primary-seen"
#define PRIMARYAGE_WHY 256

/* A record's read or write on its way. */
struct primaryage_ask {
    primaryage_done_fn *done;
    void *arg;
    int answered;
    struct primaryage_facts facts;
};

int primaryage_field(const char *text, const char *field, char *out, size_t size)
{
    size_t flen = strlen(field), n;
    const char *p = text;

    while ((p = strstr(p, field)) != NULL) {
        if (p == text || p[-1] == '\n') {
            p += flen;
            n = strcspn(p, "\r\n");
            if (n >= size)
                n = size - 1;
            memcpy(out, p, n);
            out[n] = '\0';
            return 1;
        }
        p += flen;
    }
    return 0;
}

long long primaryage_number(const char *text, const char *field, long long def)
{
    char v[32];

    return primaryage_field(text, field, v, sizeof(v)) ? atoll(v) : def;
}

int primaryage_parse(const char *text, struct primaryage_facts *f)
{
    char role[16];

    memset(f, 0, sizeof(*f));
    if (!primaryage_field(text, "role:", role, sizeof(role)) || strcmp(role, "master") != 0 ||
        !primaryage_field(text, "master_replid:", f->replid, sizeof(f->replid)))
        return -1;
    if (!primaryage_field(text, "master_replid2:", f->replid2, sizeof(f->replid2)))
        f->replid2[0] = '\0';
    /* second_repl_offset is -1 until a promotion gives replid2 a meaning
     * (a start from an RDB that kept replication data does too: Redis
     * keeps the replid it loaded as replid2; taken as a promotion, whose
     * time the record tells); without the field (an old Redis), a replid2
     * other than zeros. */
    if (primaryage_number(text, "second_repl_offset:", -2) != -2)
        f->promoted = primaryage_number(text, "second_repl_offset:", -1) != -1;
    else
        f->promoted = f->replid2[0] != '\0' && strspn(f->replid2, "0") != strlen(f->replid2);
    /* Loaded from disk: AOF on, or an RDB with keys loaded; a Redis that
     * does not say (before 7.0) may have. */
    f->loaded = primaryage_number(text, "aof_enabled:", 0) != 0 ||
                primaryage_number(text, "loading:", 0) != 0 ||
                primaryage_number(text, "async_loading:", 0) != 0 ||
                primaryage_number(text, "rdb_last_load_keys_loaded:", 1) != 0;
    f->uptime_ms = primaryage_number(text, "uptime_in_seconds:", 0) * 1000;
    f->now_ms = primaryage_number(text, "server_time_usec:", 0) / 1000;
    return 0;
}

/* Tell ASK's caller, once. */
static void primaryage_answer(struct primaryage_ask *ask, long long lost_ago_ms, const char *why)
{
    if (ask->answered)
        return;
    ask->answered = 1;
    ask->done(ask->arg, lost_ago_ms, why);
}

/* The record's reply: {first seen, now}, or an error (refused: no EVAL
 * for sluice's user, a write refused, a replica). */
static void primaryage_record_reply(struct request *req, struct evbuffer *src, size_t len,
                                    int type)
{
    struct primaryage_ask *ask = req->ctx;
    const struct primaryage_facts *f = &ask->facts;
    char text[128], why[PRIMARYAGE_WHY];
    size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
    long long seen, now, ago;

    evbuffer_remove(src, text, n);
    evbuffer_drain(src, len - n);
    text[n] = '\0';
    if (type != REPLY_ARRAY || sscanf(text, "*2\r\n:%lld\r\n:%lld", &seen, &now) != 2) {
        snprintf(why, sizeof(why), "master_replid %s, promoted (master_replid2 %s), and "
                 "sluice's record of when could not be read (%.*s): lost now", f->replid,
                 f->replid2, (int)strcspn(text, "\r\n"), text);
        primaryage_answer(ask, 0, why);
        request_free(req);
        return;
    }
    /* Seen first after the promotion (never before it): the promotion
     * was at most that long ago, and never before its start. */
    ago = now - seen;
    if (ago < 0)
        ago = 0;
    if (ago > f->uptime_ms)
        ago = f->uptime_ms;
    snprintf(why, sizeof(why), "master_replid %s, promoted (master_replid2 %s), first seen "
             "%lld ms ago by sluice's record %s%s", f->replid, f->replid2, now - seen,
             PRIMARYAGE_KEY, ago == 0 ? " (this sluice is the first)" : "");
    primaryage_answer(ask, ago, why);
    request_free(req);
}

static void primaryage_ask_free(struct request *req)
{
    struct primaryage_ask *ask = req->ctx;
    char why[PRIMARYAGE_WHY];

    snprintf(why, sizeof(why), "master_replid %s, promoted, and sluice's record of when got "
             "no reply: lost now", ask->facts.replid);
    primaryage_answer(ask, 0, why);
    free(ask);
}

/* The record's key into OUT: in cluster mode (SLOT >= 0) with a hash tag
 * of SLOT, so that it is NODE's. */
static void primaryage_key(int slot, char *out, size_t size)
{
    char tag[8];

    if (slot < 0) {
        snprintf(out, size, "%s", PRIMARYAGE_KEY);
        return;
    }
    for (unsigned i = 0;; i++) {
        int n = snprintf(tag, sizeof(tag), "%u", i);
        if ((slot_crc16(tag, (size_t)n) & (SLOT_COUNT - 1)) == slot)
            break;
    }
    snprintf(out, size, "%s:{%s}", PRIMARYAGE_KEY, tag);
}

/* Read (and at the first time write) the record of F's replid on NODE. */
static void primaryage_record(struct backend_node *node, int slot, struct primaryage_ask *ask)
{
    const struct script *s = scripts_find("primary_record");
    char key[64];
    struct evbuffer *buf;
    struct sv keys[1], args[1];

    primaryage_key(slot, key, sizeof(key));
    keys[0] = (struct sv){key, strlen(key)};
    args[0] = (struct sv){ask->facts.replid, strlen(ask->facts.replid)};
    buf = evbuffer_new();
    scripts_write_eval(buf, s, 1, keys, 1, args);
    /* primaryage_ask_free answers (lost now) when no reply comes. */
    backend_send_internal(pause_internal_conn(node, 0, 1), buf, primaryage_record_reply, ask,
                          primaryage_ask_free);
    evbuffer_free(buf);
}

void primaryage_judge(struct backend_node *node, int slot, const struct primaryage_facts *f,
                      primaryage_done_fn *done, void *arg)
{
    struct primaryage_ask *ask;
    char why[PRIMARYAGE_WHY];

    if (!f->promoted) {
        if (f->loaded) {
            snprintf(why, sizeof(why), "master_replid %s, never promoted, started %lld s ago "
                     "with its data set from disk (writes after its last save may be lost)",
                     f->replid, f->uptime_ms / 1000);
            done(arg, f->uptime_ms, why);
        } else {
            snprintf(why, sizeof(why), "master_replid %s, never promoted, started %lld s ago "
                     "without a data set from disk: nothing it acknowledged is lost",
                     f->replid, f->uptime_ms / 1000);
            done(arg, PRIMARY_LOST_NEVER, why);
        }
        return;
    }
    ask = calloc(1, sizeof(*ask));
    ask->done = done;
    ask->arg = arg;
    ask->facts = *f;
    primaryage_record(node, slot, ask);
}
