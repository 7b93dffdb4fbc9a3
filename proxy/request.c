/* request.c - owns allocation of requests (with a free list, since one is
 * made and freed per command) and their argument arrays. */
#include "request.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#define REQUEST_FREELIST_MAX 4096

static struct request *request_freelist;
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
    memset(req, 0, sizeof(*req));
    req->args = req->args_inline;
    req->args_cap = REQ_ARGS_INLINE;
    return req;
}

void request_free(struct request *req)
{
    if (req == NULL)
        return;
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
    if (request_freelist_len < REQUEST_FREELIST_MAX) {
        req->ctx = request_freelist;
        request_freelist = req;
        request_freelist_len++;
        return;
    }
    free(req);
}

int request_add_arg(struct request *req, uint32_t off, uint32_t len)
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

void request_argv(const struct request *req, const char *base, struct sv *argv)
{
    for (int i = 0; i < req->argc; i++) {
        argv[i].ptr = base + req->args[i].off;
        argv[i].len = req->args[i].len;
    }
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
