/* router.h - which backend node serves a request or a key. Standalone:
 * always the one node. Redis Cluster maps a key's slot to its owner
 * (cluster.c). Never NULL. */
#ifndef SLUICE_ROUTER_H
#define SLUICE_ROUTER_H

#include <stddef.h>

#include "sv.h"

struct backend_node;
struct request;

/* The node owning KEY's hash slot. */
struct backend_node *router_node_for_key(const char *key, size_t len);

/* The node for REQ: req->node when set (a replica it reads from, or
 * cluster.c's choice); in cluster mode that of req->slot (set when it was
 * framed), or any node for keyless commands. ARGV is unused (may be NULL). */
struct backend_node *router_node_for_request(const struct request *req, const struct sv *argv);

#endif
