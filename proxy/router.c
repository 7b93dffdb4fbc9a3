/* router.c - owns the choice of backend node. Standalone mode has one
 * node; the slot is still computed so that the path is the one Cluster
 * mode will take. */
#include "router.h"

#include "backend.h"
#include "slot.h"

struct backend_node *router_node_for_key(const char *key, size_t len)
{
    (void)slot_for_key(key, len);
    return backend_default_node();
}

struct backend_node *router_node_for_request(const struct request *req, const struct sv *argv)
{
    (void)req;
    (void)argv;
    return backend_default_node();
}
