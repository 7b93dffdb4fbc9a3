/* cluster_slots.c - reads a CLUSTER SLOTS reply: the slot map it gives
 * and the names of every node it lists (the cluster's members). It only
 * parses: cluster.c decides what to do with the result, and nothing here
 * calls cluster.c. */
#include "cluster.h"
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "replicas.h"
#include "respwalk.h"
#include "slot.h"

int cluster_names_has(const struct cluster_names *names, const char *name)
{
    for (int i = 0; i < names->count; i++) {
        if (strcmp(names->name[i], name) == 0)
            return 1;
    }
    return 0;
}

/* Add NAME to NAMES unless it is there. -1 on OOM. */
static int cluster_names_add(struct cluster_names *names, const char *name)
{
    if (cluster_names_has(names, name))
        return 0;
    if (names->count == names->cap) {
        int cap = names->cap ? names->cap * 2 : 16;
        void *grown = realloc(names->name, (size_t)cap * sizeof(*names->name));
        if (grown == NULL)
            return -1;
        names->name = grown;
        names->cap = cap;
    }
    snprintf(names->name[names->count++], CLUSTER_NAME_MAX, "%s", name);
    return 0;
}

void cluster_names_free(struct cluster_names *names)
{
    free(names->name);
    memset(names, 0, sizeof(*names));
}

/* One node entry [ip, port, id, ...] as "host:port" in OUT; an empty or
 * "?" ip means the node that was asked (ASKED's host). */
static int cluster_walk_node(struct respwalk *w, const char *asked, char *out, size_t size)
{
    long long fields, port;
    const char *ip, *colon;
    size_t ip_len;

    if (respwalk_array(w, &fields) != 0 || fields < 2 ||
        respwalk_bulk(w, &ip, &ip_len) != 0 || respwalk_int(w, &port) != 0 ||
        port <= 0 || port > 65535 || ip_len > 255 || respwalk_skip(w, fields - 2) != 0)
        return -1;
    if (ip_len == 0 || (ip_len == 1 && ip[0] == '?')) {
        colon = strrchr(asked, ':');
        snprintf(out, size, "%.*s:%lld", (int)(colon - asked), asked, port);
    } else if (memchr(ip, ':', ip_len) != NULL) {
        snprintf(out, size, "[%.*s]:%lld", (int)ip_len, ip, port);   /* IPv6 */
    } else {
        snprintf(out, size, "%.*s:%lld", (int)ip_len, ip, port);
    }
    return 0;
}

/* Parse a CLUSTER SLOTS reply into MAP (NULL for slots nobody serves)
 * and MEMBERS (every node it names, replicas too). The primaries are
 * made backend nodes. -1 when malformed. */
static int cluster_parse_slots(const char *buf, size_t len, const char *asked,
                               struct backend_node **map, struct cluster_names *members)
{
    struct respwalk w = {buf, buf + len};
    long long ranges, fields, first, last;
    char name[CLUSTER_NAME_MAX];

    if (respwalk_array(&w, &ranges) != 0)
        return -1;
    for (long long i = 0; i < ranges; i++) {
        struct backend_node *node;
        if (respwalk_array(&w, &fields) != 0 || fields < 3 ||
            respwalk_int(&w, &first) != 0 || respwalk_int(&w, &last) != 0 ||
            first < 0 || last >= SLOT_COUNT || first > last ||
            cluster_walk_node(&w, asked, name, sizeof(name)) != 0 ||
            cluster_names_add(members, name) != 0)
            return -1;
        node = backend_node_get(name);
        if (node == NULL)
            return -1;
        for (long long r = 3; r < fields; r++) {   /* the range's replicas */
            char replica[CLUSTER_NAME_MAX];
            if (cluster_walk_node(&w, asked, replica, sizeof(replica)) != 0 ||
                cluster_names_add(members, replica) != 0)
                return -1;
            replicas_cluster_add(node, replica);   /* for read_from */
        }
        for (long long s = first; s <= last; s++)
            map[s] = node;
    }
    return w.p == w.end ? 0 : -1;
}

/* cluster_parse_slots, telling replicas.c the replicas of each primary
 * (read_from): those no longer named are dropped when the map is whole. */
int cluster_parse_map(const char *buf, size_t len, const char *asked,
                      struct backend_node **map, struct cluster_names *members)
{
    int rc;

    replicas_cluster_begin();
    rc = cluster_parse_slots(buf, len, asked, map, members);
    replicas_cluster_end(rc == 0);
    return rc;
}
