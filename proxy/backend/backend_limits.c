/* backend_limits.c - owns what sluice learns of each node's own limits on
 * what a connection may send it (proto-max-bulk-len), so that no client's
 * request makes Redis close a shared connection with "Protocol error:
 * invalid bulk length": clients' bulks are refused by sluice past the
 * lowest of them. It asks on a node's first shared connection when that
 * connects (main.c's node-up hook); it decides nothing about routing. */
#include "backend.h"
#include "backend_int.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "request.h"
#include "respframe.h"

/* The lowest limit learned over every node; 0 while none is known. */
static long long backend_limits_bulk;

static void backend_limits_recompute(void)
{
    struct backend_node *node;
    long long low = 0;

    TAILQ_FOREACH(node, &backend_nodes, link) {
        if (node->proto_max_bulk_len > 0 && (low == 0 || node->proto_max_bulk_len < low))
            low = node->proto_max_bulk_len;
    }
    backend_limits_bulk = low;
}

/* The value of a CONFIG GET reply of one parameter in TEXT (RESP2
 * "*2\r\n$N\r\nname\r\n$M\r\nvalue\r\n", or RESP3's map): the fifth line;
 * 0 when there is none (an error, an empty array: an older Redis). */
static long long backend_limits_value(const char *text)
{
    const char *p = text;
    char *end;
    long long v;

    for (int line = 0; line < 4; line++) {
        p = strstr(p, "\r\n");
        if (p == NULL)
            return 0;
        p += 2;
    }
    v = strtoll(p, &end, 10);
    return end != p && *end == '\r' && v > 0 ? v : 0;
}

/* The reply to CONFIG GET proto-max-bulk-len (CTX: the node). A refusal
 * (the backend user lacks +config|get) is logged once: sluice then
 * relies on its own proto_max_bulk_len being no more than Redis's. */
static void backend_limits_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    static int warned;
    struct backend_node *node = req->ctx;
    char text[256] = {0};
    long long v;

    evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
    evbuffer_drain(src, len);
    request_free(req);
    if (type == REPLY_ERROR || (v = backend_limits_value(text)) == 0) {
        if (!warned)
            log_notice("backend %s: cannot learn Redis's proto-max-bulk-len (%.*s): keep "
                       "sluice's proto_max_bulk_len no higher, or a larger bulk makes Redis "
                       "close a shared connection", node->name,
                       (int)strcspn(text, "\r\n"), text);
        warned = 1;
        return;
    }
    if (v != node->proto_max_bulk_len && backend_cfg->proto_max_bulk_len > v)
        log_notice("backend %s: Redis's proto-max-bulk-len is %lld, below sluice's "
                   "proto_max_bulk_len (%lld): larger bulks are refused", node->name, v,
                   backend_cfg->proto_max_bulk_len);
    node->proto_max_bulk_len = v;
    backend_limits_recompute();
}

void backend_limits_node_up(struct backend_node *node)
{
    static const char ask[] =
        "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$18\r\nproto-max-bulk-len\r\n";
    struct evbuffer *buf = evbuffer_new();

    if (buf == NULL)
        return;
    evbuffer_add(buf, ask, sizeof(ask) - 1);
    backend_send_internal(backend_pool_conn(node, 0, 2), buf, backend_limits_reply, node, NULL);
    evbuffer_free(buf);
}

long long backend_max_bulk_len(long long own)
{
    return backend_limits_bulk > 0 && backend_limits_bulk < own ? backend_limits_bulk : own;
}
