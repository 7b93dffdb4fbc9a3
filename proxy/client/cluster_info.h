/* cluster_info.h - INFO and CONFIG GET in cluster mode say what one
 * standalone Redis says of its mode (cluster_info.c). */
#ifndef SLUICE_CLUSTER_INFO_H
#define SLUICE_CLUSTER_INFO_H

struct request;

/* Cluster mode: REQ, an INFO or CONFIG GET a client sends to a node, gets
 * its reply rewritten (redis_mode:standalone, cluster_enabled:0;
 * cluster-enabled no) before it goes to the client. Does nothing in other modes, for other commands, inside a
 * transaction, or for a request another hook already answers. */
void cluster_info_hook(struct request *req);

#endif
