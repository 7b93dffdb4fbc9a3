/* router.h - which backend node serves a request or a key. Standalone:
 * always the one node. Redis Cluster will map a key's slot to its owner
 * here, and nothing else in the request path has to change. */
#ifndef SLUICE_ROUTER_H
#define SLUICE_ROUTER_H

#include <stddef.h>

#include "sv.h"

struct backend_node;
struct request;

/* The node owning KEY's hash slot. */
struct backend_node *router_node_for_key(const char *key, size_t len);

/* The node for REQ with its ARGV: that of its first key, or any node for
 * keyless commands. */
struct backend_node *router_node_for_request(const struct request *req, const struct sv *argv);

#endif
