/* router.c - owns the choice of backend node. Standalone mode has one
 * node. In cluster mode a key's slot picks its primary from cluster.c's
 * map; keyless requests, and slots the map does not name, go to any
 * reachable node (which redirects, or says CLUSTERDOWN). */
#include "router.h"

#include "backend.h"
#include "cluster.h"
#include "request.h"
#include "slot.h"

/* The node serving SLOT (-1: none in particular). */
static struct backend_node *router_node_for_slot(int slot)
{
    struct backend_node *node = slot >= 0 ? cluster_node_for_slot(slot) : NULL;

    return node != NULL ? node : backend_default_node();
}

struct backend_node *router_node_for_key(const char *key, size_t len)
{
    int slot = slot_for_key(key, len);

    if (!cluster_enabled())
        return backend_default_node();
    return router_node_for_slot(slot);
}

struct backend_node *router_node_for_request(const struct request *req, const struct sv *argv)
{
    (void)argv;
    if (req->node != NULL)   /* a replica it reads from (read_from), or cluster's choice */
        return req->node;
    if (!cluster_enabled())
        return backend_default_node();
    return router_node_for_slot(req->slot);
}
