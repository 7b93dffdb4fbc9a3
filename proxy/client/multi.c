/* multi.c - owns commands sluice answers itself that a transaction
 * queues (CLIENT SETNAME/GETNAME/ID). Inside MULTI such a command is sent
 * to Redis too, which checks it, answers +QUEUED and gives it a slot in
 * EXEC's array; sluice keeps a copy, and when EXEC's reply comes it
 * rewrites that slot with its own reply, run right then, in order, so a
 * SETNAME takes effect at EXEC and a GETNAME after it sees it. Nothing
 * here writes to a client but through client_answer. */
#include "multi.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "local.h"
#include "reply.h"
#include "request.h"
#include "respframe.h"
#include "server.h"

struct multi_slot {
    int index;               /* element of EXEC's array, from 0 */
    struct request *req;     /* copy of the command: owns its bytes */
};

struct multi_locals {
    int count;
    int cap;
    struct multi_slot *slots; /* in index order */
};

int multi_record(struct multi_locals **ml, const struct request *req, int index,
                 struct evbuffer *src)
{
    struct multi_locals *m = *ml;
    struct request *copy;

    if (m == NULL && (m = *ml = calloc(1, sizeof(*m))) == NULL)
        return -1;
    if (m->count == m->cap) {
        int cap = m->cap > 0 ? m->cap * 2 : 4;
        struct multi_slot *slots = realloc(m->slots, (size_t)cap * sizeof(*slots));
        if (slots == NULL)
            return -1;
        m->slots = slots;
        m->cap = cap;
    }
    if ((copy = request_copy(req, src)) == NULL)
        return -1;
    m->slots[m->count++] = (struct multi_slot){index, copy};
    return 0;
}

void multi_locals_free(struct multi_locals **ml)
{
    struct multi_locals *m = *ml;

    if (m == NULL)
        return;
    for (int i = 0; i < m->count; i++)
        request_free(m->slots[i].req);
    free(m->slots);
    free(m);
    *ml = NULL;
}

static void multi_ctx_free(struct request *req)
{
    struct multi_locals *m = req->ctx;

    multi_locals_free(&m);
    req->ctx = NULL;
}

/* Run the command of SLOT for C now, writing its reply into OUT. */
static void multi_run_slot(struct client *c, const struct multi_slot *slot, struct evbuffer *out)
{
    struct req_argv views;

    if (request_argv_open(&views, slot->req, slot->req->raw) != 0)
        reply_error(out, "OOM sluice is out of memory");
    else
        local_execute(c, slot->req, slot->req->argc, views.argv, out);
    request_argv_close(&views);
}

/* Whether the EXEC reply OUT that sluice is filling for C has passed
 * client_output_buffer_limit (a transaction of many CLIENT LISTs): then C
 * is closed (client_output_overflow) and nothing more is built. */
static int multi_over_limit(struct client *c, const struct evbuffer *out)
{
    size_t limit = (size_t)server.cfg.client_output_buffer_limit;

    if (limit == 0 || evbuffer_get_length(out) <= limit)
        return 0;
    client_output_overflow(c, evbuffer_get_length(out));
    return 1;
}

/* Copy EXEC's array reply ALL (whole, header first) into OUT, each element
 * that is a slot of M replaced by sluice's reply. A message push Redis
 * wrote inside the array (a RESP3 subscriber's own PUBLISH) goes as it is
 * and is not one of its elements. Returns -1 when ALL does not frame as
 * expected (then OUT holds what was done). */
static int multi_rewrite(struct client *c, struct multi_locals *m, struct evbuffer *all,
                         struct evbuffer *out)
{
    struct evbuffer_ptr eol = evbuffer_search_eol(all, NULL, NULL, EVBUFFER_EOL_CRLF_STRICT);
    struct respframe f;
    int next = 0, element = 0, type;

    if (eol.pos < 0)
        return -1;
    evbuffer_remove_buffer(all, out, (size_t)eol.pos + 2);   /* "*N\r\n" */
    while (evbuffer_get_length(all) > 0) {
        ssize_t n;
        respframe_init(&f);
        n = respframe_next(&f, all, &type);
        if (n <= 0) {
            respframe_release(&f);
            return -1;
        }
        if (type == REPLY_PUSH && respframe_is_message_push(all, (size_t)n)) {
            evbuffer_remove_buffer(all, out, (size_t)n);
            continue;
        }
        if (next < m->count && m->slots[next].index == element) {
            evbuffer_drain(all, (size_t)n);
            multi_run_slot(c, &m->slots[next++], out);
            if (multi_over_limit(c, out))
                return 0;
        } else {
            evbuffer_remove_buffer(all, out, (size_t)n);
        }
        element++;
    }
    return 0;
}

/* EXEC's reply: an array is rewritten (multi_rewrite); anything else
 * (EXECABORT, a nil for a failed WATCH) goes as it is, and no slot runs. */
static void multi_exec_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = request_hook_client(req, src, len);
    struct evbuffer *all;

    if (c == NULL)   /* its client has gone */
        return;
    if (type != REPLY_ARRAY || (all = evbuffer_new()) == NULL) {
        evbuffer_remove_buffer(src, req->reply, len);
    } else {
        evbuffer_remove_buffer(src, all, len);
        if (multi_rewrite(c, req->ctx, all, req->reply) != 0)
            evbuffer_add_buffer(req->reply, all);   /* cannot happen: Redis framed it */
        evbuffer_free(all);
    }
    client_answer(c, req);
}

void multi_hook_exec(struct multi_locals **ml, struct request *req)
{
    if (*ml == NULL)
        return;
    req->on_reply = multi_exec_reply;
    req->ctx = *ml;
    req->ctx_free = multi_ctx_free;
    *ml = NULL;
}
