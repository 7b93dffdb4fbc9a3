/* request.c - owns allocation of requests (with a free list, since one is
 * made and freed per command), their argument arrays, and the views of
 * their arguments (never a copy of a large value). */
#include "request.h"

#include <event2/buffer.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* Requests up to this size are made contiguous; larger arguments are
 * copied only when sluice reads them. */
#define REQUEST_PULLUP_MAX (64 * 1024)

#define REQUEST_FREELIST_MAX 4096

static struct request *request_freelist;
static request_slots_fn *request_slots_drop;   /* request_set_slots_drop */
static int request_freelist_len;

struct request *request_new(void)
{
    struct request *req = request_freelist;

    if (req != NULL) {
        request_freelist = req->ctx;
        request_freelist_len--;
    } else {
        req = malloc(sizeof(*req));
        if (req == NULL)
            return NULL;
    }
    /* kept and slow_inline are read only under REQ_KEPT / through slow_args */
    memset(req, 0, offsetof(struct request, kept));
    req->slot = -1;
    req->args = req->args_inline;
    req->args_cap = REQ_ARGS_INLINE;
    return req;
}

void request_free(struct request *req)
{
    if (req == NULL)
        return;
    if (req->slots != NULL && request_slots_drop != NULL)
        request_slots_drop(req);   /* never freed with a slot held: none can leak */
    if (req->ctx_free != NULL)
        req->ctx_free(req);
    if (req->args != req->args_inline)
        free(req->args);
    if (req->raw != NULL)
        evbuffer_free(req->raw);
    if (req->reply != NULL)
        evbuffer_free(req->reply);
    free(req->ok_user);
    free(req->ok_name);
    if (req->slow_args != req->slow_inline)
        free(req->slow_args);
    if (request_freelist_len < REQUEST_FREELIST_MAX) {
        req->ctx = request_freelist;
        request_freelist = req;
        request_freelist_len++;
        return;
    }
    free(req);
}

void request_set_slots_drop(request_slots_fn *drop)
{
    request_slots_drop = drop;
}

int request_add_arg(struct request *req, size_t off, size_t len)
{
    if (req->argc == req->args_cap) {
        int cap = req->args_cap * 2;
        struct req_arg *grown;

        if (req->args == req->args_inline) {
            grown = malloc(sizeof(*grown) * (size_t)cap);
            if (grown != NULL)
                memcpy(grown, req->args_inline, sizeof(req->args_inline));
        } else {
            grown = realloc(req->args, sizeof(*grown) * (size_t)cap);
        }
        if (grown == NULL)
            return -1;
        req->args = grown;
        req->args_cap = cap;
    }
    req->args[req->argc].off = off;
    req->args[req->argc].len = len;
    req->argc++;
    return 0;
}

/* Where the request's bytes lie: the chains of SRC that hold them. */
struct request_chains {
    struct evbuffer_iovec *vec;
    int n;
    size_t *start;                 /* offset of each chain's first byte */
};

/* The chain holding offset OFF (binary search over the chain starts). */
static int request_chain_of(const struct request_chains *ch, size_t off)
{
    int lo = 0, hi = ch->n - 1;

    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ch->start[mid] <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Point argument I's view at its bytes: where they lie when in one chain,
 * else (with COPY) at a copy, else at NULL. Returns -1 when out of memory. */
static int request_view_arg(struct req_argv *a, const struct request *req,
                            const struct request_chains *ch, int i, int copy)
{
    size_t off = req->args[i].off, len = req->args[i].len, done = 0;
    int c = request_chain_of(ch, off);
    char *dst;

    a->argv[i].len = len;
    if (off + len <= ch->start[c] + ch->vec[c].iov_len) {
        a->argv[i].ptr = (const char *)ch->vec[c].iov_base + (off - ch->start[c]);
        return 0;
    }
    a->argv[i].ptr = NULL;
    if (!copy)
        return 0;
    if (a->copies == NULL && (a->copies = calloc((size_t)req->argc, sizeof(char *))) == NULL)
        return -1;
    dst = a->copies[i] = malloc(len);
    if (dst == NULL)
        return -1;
    for (; done < len; c++) {
        size_t from = off + done - ch->start[c], n = ch->vec[c].iov_len - from;
        if (n > len - done)
            n = len - done;
        memcpy(dst + done, (const char *)ch->vec[c].iov_base + from, n);
        done += n;
    }
    a->argv[i].ptr = dst;
    return 0;
}

/* Whether sluice reads every argument of CMD (NULL: one the table does not
 * know): connection commands, pub/sub commands (the gate checks their
 * channels, and a NULL view there would be read as a channel) and SORT
 * (the gate checks its BY and GET patterns). */
static int request_reads_all_args(const struct command *cmd)
{
    return cmd == NULL || (cmd->acl_categories & ACL_CONNECTION) || (cmd->flags & CMD_PUBSUB) ||
           strcmp(cmd->name, "sort") == 0 || strcmp(cmd->name, "sort_ro") == 0;
}

/* Copy the arguments left NULL that sluice reads (see request_argv_open):
 * all of them for the commands of request_reads_all_args, else the keys. */
static int request_view_read_args(struct req_argv *a, const struct request *req,
                                  const struct request_chains *ch)
{
    const struct command *cmd = commands_resolve(req->argc, a->argv);
    int *keys, n, rc = 0;

    if (request_reads_all_args(cmd)) {
        for (int i = 0; i < req->argc && rc == 0; i++) {
            if (a->argv[i].ptr == NULL)
                rc = request_view_arg(a, req, ch, i, 1);
        }
        return rc;
    }
    keys = malloc(sizeof(*keys) * (size_t)req->argc);
    if (keys == NULL)
        return -1;
    n = commands_keys(cmd, req->argc, a->argv, keys, req->argc);
    for (int k = 0; k < n && rc == 0; k++) {
        if (a->argv[keys[k]].ptr == NULL)
            rc = request_view_arg(a, req, ch, keys[k], 1);
    }
    free(keys);
    return rc;
}

/* request_argv_open for a request over REQUEST_PULLUP_MAX bytes. */
static int request_argv_spread(struct req_argv *a, const struct request *req,
                               struct evbuffer *src)
{
    struct request_chains ch = {NULL, 0, NULL};
    int rc = -1, deferred = 0;

    ch.n = evbuffer_peek(src, (ssize_t)req->raw_len, NULL, NULL, 0);
    ch.vec = malloc(sizeof(*ch.vec) * (size_t)ch.n);
    ch.start = malloc(sizeof(*ch.start) * (size_t)ch.n);
    if (ch.n < 1 || ch.vec == NULL || ch.start == NULL)
        goto out;
    evbuffer_peek(src, (ssize_t)req->raw_len, NULL, ch.vec, ch.n);
    for (int c = 0; c < ch.n; c++)
        ch.start[c] = c == 0 ? 0 : ch.start[c - 1] + ch.vec[c - 1].iov_len;
    for (int i = 0; i < req->argc; i++) {
        int copy = i < 2 || req->args[i].len <= REQUEST_PULLUP_MAX;
        if (request_view_arg(a, req, &ch, i, copy) != 0)
            goto out;
        deferred |= a->argv[i].ptr == NULL;
    }
    rc = deferred ? request_view_read_args(a, req, &ch) : 0;
out:
    free(ch.vec);
    free(ch.start);
    return rc;
}

int request_argv_open(struct req_argv *a, const struct request *req, struct evbuffer *src)
{
    const char *base;

    a->copies = NULL;
    a->argc = req->argc;
    a->argv = req->argc > REQ_ARGV_STACK ? malloc(sizeof(*a->argv) * (size_t)req->argc)
                                         : a->stack;
    if (a->argv == NULL)
        return -1;
    if (req->raw_len > REQUEST_PULLUP_MAX)
        return request_argv_spread(a, req, src);
    base = (const char *)evbuffer_pullup(src, (ssize_t)req->raw_len);
    if (base == NULL && req->raw_len > 0)
        return -1;
    for (int i = 0; i < req->argc; i++) {
        a->argv[i].ptr = base + req->args[i].off;
        a->argv[i].len = req->args[i].len;
    }
    return 0;
}

void request_argv_close(struct req_argv *a)
{
    if (a->copies != NULL) {
        for (int i = 0; i < a->argc; i++)
            free(a->copies[i]);
        free(a->copies);
        a->copies = NULL;
    }
    if (a->argv != a->stack)
        free(a->argv);
    a->argv = a->stack;
}

struct request *request_copy(const struct request *req, struct evbuffer *src)
{
    struct evbuffer *from = src != NULL ? src : req->raw;
    struct request *copy = request_new();
    char *bytes = malloc(req->raw_len > 0 ? req->raw_len : 1);

    if (copy == NULL || bytes == NULL) {
        request_free(copy);
        free(bytes);
        return NULL;
    }
    copy->cmd = req->cmd;
    copy->raw_len = req->raw_len;
    copy->raw = evbuffer_new();
    /* Copied out, never pulled up: the caller's argument views may point
     * into FROM's chains, which a pullup would free and move. */
    if (copy->raw == NULL ||
        evbuffer_copyout(from, bytes, req->raw_len) != (ev_ssize_t)req->raw_len ||
        evbuffer_add(copy->raw, bytes, req->raw_len) != 0) {
        free(bytes);
        request_free(copy);
        return NULL;
    }
    free(bytes);
    for (int i = 0; i < req->argc; i++) {
        if (request_add_arg(copy, req->args[i].off, req->args[i].len) != 0) {
            request_free(copy);
            return NULL;
        }
    }
    return copy;
}

void request_take_bytes(struct request *req, struct request *from)
{
    if (req->raw != NULL)
        evbuffer_free(req->raw);
    req->raw = from->raw;
    req->raw_len = from->raw_len;
    from->raw = NULL;
    if (req->args != req->args_inline)
        free(req->args);
    req->args = from->args != from->args_inline ? from->args : req->args_inline;
    req->args_cap = from->args != from->args_inline ? from->args_cap : REQ_ARGS_INLINE;
    if (from->args == from->args_inline)
        memcpy(req->args_inline, from->args_inline, sizeof(req->args_inline));
    req->argc = from->argc;
    from->args = from->args_inline;
    from->args_cap = REQ_ARGS_INLINE;
    from->argc = 0;
}

int request_take_raw(struct request *req, struct evbuffer *src)
{
    if (req->raw == NULL) {
        req->raw = evbuffer_new();
        if (req->raw == NULL)
            return -1;
    }
    return evbuffer_remove_buffer(src, req->raw, req->raw_len) == (int)req->raw_len ? 0 : -1;
}

void request_move_kept(struct request *req, struct evbuffer *src, struct evbuffer *out)
{
    if (req->raw == NULL && req->raw_len <= REQ_KEPT_MAX) {
        evbuffer_copyout(src, req->kept, req->raw_len);
        req->flags |= REQ_KEPT;
        evbuffer_remove_buffer(src, out, req->raw_len);
        return;
    }
    if (req->raw == NULL)
        req->raw = evbuffer_new();
    if (req->raw == NULL) {
        /* Out of memory: sent, not kept (it cannot be sent again). */
        evbuffer_remove_buffer(src, out, req->raw_len);
        return;
    }
    evbuffer_drain(req->raw, evbuffer_get_length(req->raw));
    evbuffer_remove_buffer(src, req->raw, req->raw_len);
    request_copy_bytes(req, out);
}

int request_has_bytes(const struct request *req)
{
    return req->raw != NULL || (req->flags & REQ_KEPT);
}

void request_copy_bytes(const struct request *req, struct evbuffer *out)
{
    struct evbuffer_ptr pos;
    size_t total, copied = 0;

    if (req->raw == NULL) {
        if (req->flags & REQ_KEPT)
            evbuffer_add(out, req->kept, req->raw_len);
        return;
    }
    /* Chunk by chunk, sixteen at a time: one copy, and no allocation that
     * could fail half way. evbuffer_peek with a length of -1 fills at most
     * the vectors it is given and returns their count, never more: so go
     * on until every byte is copied, not until it returns fewer than 16
     * (that stopped a request of more than 16 chunks, about 2 MB, after
     * its first 16, and the backend waited for the rest forever). */
    total = evbuffer_get_length(req->raw);
    if (evbuffer_ptr_set(req->raw, &pos, 0, EVBUFFER_PTR_SET) != 0)
        return;
    while (copied < total) {
        struct evbuffer_iovec vec[16];
        size_t done = 0;
        int n = evbuffer_peek(req->raw, -1, &pos, vec, 16);

        for (int i = 0; i < n && i < 16; i++) {
            evbuffer_add(out, vec[i].iov_base, vec[i].iov_len);
            done += vec[i].iov_len;
        }
        copied += done;
        if (n <= 0 || (copied < total &&
                       evbuffer_ptr_set(req->raw, &pos, done, EVBUFFER_PTR_ADD) != 0))
            return;
    }
}

void request_replace_raw(struct request *req, struct evbuffer *out, struct evbuffer **src)
{
    if (*src != NULL)
        evbuffer_drain(*src, req->raw_len);
    *src = NULL;
    if (req->raw != NULL)
        evbuffer_free(req->raw);
    req->raw = out;
    req->raw_len = evbuffer_get_length(out);
}

struct client *request_hook_client(struct request *req, struct evbuffer *src, size_t len)
{
    if (req->client == NULL) {
        evbuffer_drain(src, len);
        request_free(req);
        return NULL;
    }
    req->on_reply = NULL;
    if (req->reply == NULL)
        req->reply = evbuffer_new();
    return req->client;
}
