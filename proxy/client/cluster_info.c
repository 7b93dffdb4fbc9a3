/* cluster_info.c - owns how INFO and CONFIG GET look in cluster mode:
 * sluice shows its clients one Redis, so the node's INFO says
 * redis_mode:standalone and cluster_enabled:0, and CONFIG GET says
 * cluster-enabled no, as a standalone Redis's do (a client that picks its
 * mode from them, as redis-py's own test setup does from INFO, stays a
 * plain client and never meets the refused CLUSTER commands). It changes
 * those lines only, and nothing but those two commands' replies. */
#include "cluster_info.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cluster.h"
#include "commands.h"
#include "request.h"
#include "respframe.h"
#include "respwalk.h"

/* The lines of a cluster node's INFO that one standalone Redis writes
 * otherwise (Redis 7.0's "# Server" and "# Cluster" sections). */
static const struct {
    const char *node;
    const char *standalone;
} cluster_info_lines[] = {
    {"redis_mode:cluster\r\n", "redis_mode:standalone\r\n"},
    {"cluster_enabled:1\r\n", "cluster_enabled:0\r\n"},
};
#define CLUSTER_INFO_LINES (sizeof(cluster_info_lines) / sizeof(cluster_info_lines[0]))

/* Where the whole line LINE starts in TEXT (LEN bytes), or NULL. */
static const char *cluster_info_find(const char *text, size_t len, const char *line)
{
    size_t n = strlen(line);
    const char *p = text, *end = text + len;

    while (p != NULL && (size_t)(end - p) >= n) {
        const char *hit = memmem(p, (size_t)(end - p), line, n);
        if (hit == NULL || hit == text || hit[-1] == '\n')
            return hit;
        p = hit + 1;
    }
    return NULL;
}

/* Append BODY (LEN bytes, a node's INFO text) to OUT with its mode lines
 * made standalone ones. */
static void cluster_info_rewrite(const char *body, size_t len, struct evbuffer *out)
{
    const char *at = body, *end = body + len;

    /* The lines come in the table's order, each once (Server, then Cluster). */
    for (size_t i = 0; i < CLUSTER_INFO_LINES; i++) {
        const char *hit = cluster_info_find(at, (size_t)(end - at), cluster_info_lines[i].node);
        if (hit == NULL)
            continue;
        evbuffer_add(out, at, (size_t)(hit - at));
        evbuffer_add(out, cluster_info_lines[i].standalone,
                     strlen(cluster_info_lines[i].standalone));
        at = hit + strlen(cluster_info_lines[i].node);
    }
    evbuffer_add(out, at, (size_t)(end - at));
}

/* INFO's reply of LEN bytes at the head of SRC: a bulk string (RESP2) or
 * a verbatim one (RESP3, "txt:" first), rewritten into REQ's reply; any
 * other reply (an error: NOPERM...) goes as it is. */
static void cluster_info_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = request_hook_client(req, src, len);
    struct evbuffer *body;
    char *text, *crlf;

    if (c == NULL)
        return;
    text = (type == REPLY_STRING || type == REPLY_VERB) && len >= 4 ? malloc(len) : NULL;
    crlf = text != NULL && evbuffer_copyout(src, text, len) == (ssize_t)len
               ? memchr(text, '\r', len) : NULL;
    if (crlf == NULL || crlf + 2 > text + len - 2 || (body = evbuffer_new()) == NULL) {
        if (type == REPLY_ERROR)
            req->flags |= REQ_FAILED;
        evbuffer_remove_buffer(src, req->reply, len);
        free(text);
        client_answer(c, req);
        return;
    }
    evbuffer_drain(src, len);
    cluster_info_rewrite(crlf + 2, (size_t)(text + len - 2 - (crlf + 2)), body);
    evbuffer_add_printf(req->reply, "%c%zu\r\n", text[0], evbuffer_get_length(body));
    evbuffer_add_buffer(req->reply, body);
    evbuffer_add(req->reply, "\r\n", 2);
    evbuffer_free(body);
    free(text);
    client_answer(c, req);
}

/* Append the pairs of a CONFIG GET reply (the bytes from W.p on: bulk
 * name, bulk value...) to OUT, cluster-enabled's value made "no". -1 when
 * they are not such pairs. */
static int cluster_info_config_pairs(struct respwalk *w, struct evbuffer *out)
{
    static const char name[] = "cluster-enabled";

    while (w->p < w->end) {
        const char *key, *value, *start = w->p;
        size_t key_len, value_len;
        if (respwalk_bulk(w, &key, &key_len) != 0)
            return -1;
        evbuffer_add(out, start, (size_t)(w->p - start));
        start = w->p;
        if (respwalk_bulk(w, &value, &value_len) != 0)
            return -1;
        if (key_len == sizeof(name) - 1 && memcmp(key, name, key_len) == 0)
            evbuffer_add(out, "$2\r\nno\r\n", 8);
        else
            evbuffer_add(out, start, (size_t)(w->p - start));
    }
    return 0;
}

/* CONFIG GET's reply of LEN bytes at the head of SRC (an array of pairs,
 * or a map in RESP3) into REQ's reply, cluster-enabled said "no"; any
 * other reply goes as it is. */
static void cluster_info_config_reply(struct request *req, struct evbuffer *src, size_t len,
                                      int type)
{
    struct client *c = request_hook_client(req, src, len);
    char *text = NULL, *crlf = NULL;
    struct evbuffer *pairs = NULL;

    if (c == NULL)
        return;
    if ((type == REPLY_ARRAY || type == REPLY_MAP) && (text = malloc(len)) != NULL &&
        evbuffer_copyout(src, text, len) == (ssize_t)len)
        crlf = memchr(text, '\r', len);
    if (crlf != NULL && crlf + 2 <= text + len && (pairs = evbuffer_new()) != NULL) {
        struct respwalk w = {crlf + 2, text + len};
        if (cluster_info_config_pairs(&w, pairs) == 0) {
            evbuffer_drain(src, len);
            evbuffer_add(req->reply, text, (size_t)(crlf + 2 - text));   /* its header */
            evbuffer_add_buffer(req->reply, pairs);
        }
    }
    if (evbuffer_get_length(req->reply) == 0) {
        if (type == REPLY_ERROR)
            req->flags |= REQ_FAILED;
        evbuffer_remove_buffer(src, req->reply, len);
    }
    if (pairs != NULL)
        evbuffer_free(pairs);
    free(text);
    client_answer(c, req);
}

void cluster_info_hook(struct request *req)
{
    static const struct command *info, *config_get;

    if (!cluster_enabled() || req->cmd == NULL || req->on_reply != NULL ||
        (req->flags & (REQ_NOREPLY | REQ_IN_MULTI)) ||
        (req->client != NULL && (req->client->flags & CLIENT_IN_MULTI)))
        return;
    if (info == NULL) {
        static const struct sv words[] = {{"config", 6}, {"get", 3}};
        info = commands_lookup("info", 4);
        config_get = commands_resolve(2, words);
    }
    if (req->cmd == info)
        req->on_reply = cluster_info_reply;
    else if (req->cmd == config_get && config_get != NULL)
        req->on_reply = cluster_info_config_reply;
}
