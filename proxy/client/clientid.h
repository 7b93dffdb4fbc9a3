/* clientid.h - sluice's clients as Redis commands name and list them:
 * the ids in CLIENT UNBLOCK, CLIENT KILL ID and CLIENT TRACKING REDIRECT
 * are sluice's (CLIENT ID), and CLIENT LIST / CLIENT INFO show sluice's
 * clients, never its backend connections. */
#ifndef SLUICE_CLIENTID_H
#define SLUICE_CLIENTID_H

#include "sv.h"

struct client;
struct request;
struct evbuffer;

enum clientid_result {
    CLIENTID_FORWARD,   /* forward REQ (its ids rewritten): the bytes are in req->raw
                           when *SRC was set to NULL */
    CLIENTID_HELD,      /* held, C blocked, until Redis ids are learned: then it is
                           dispatched again (client_release_held) */
};

/* REQ of C (role ROLE_CLIENT_IDS), with arguments ARGV, its bytes at the
 * head of *SRC or, when *SRC is NULL, in req->raw (*SRC is set to NULL
 * when they are rewritten). CLIENT UNBLOCK and TRACKING REDIRECT: each
 * sluice id becomes the Redis id of that client's private connection, or
 * an id no Redis connection has (no such client, or one without a private
 * connection: Redis then answers as for an unknown id). CLIENT KILL, LIST
 * and INFO: Redis gets a form that matches or lists none of its
 * connections, only to check the client may run it; REQ's hook then kills
 * or lists sluice's clients (outside MULTI; unpaired in pub/sub, where
 * Redis's own answer goes through). */
enum clientid_result clientid_translate(struct client *c, struct request *req,
                                        const struct sv *argv, struct evbuffer **src);

/* Move C's RESP3 push of KIND, LEN bytes at SRC, to OUT: a
 * tracking-redir-broken push names the redirect target by the sluice id
 * C gave in CLIENT TRACKING ... REDIRECT, not by its Redis id. */
void clientid_push(const struct client *c, const char *kind, struct evbuffer *src, size_t len,
                   struct evbuffer *out);

/* CLIENT LIST [TYPE type] [ID id...] and CLIENT INFO, for C, into OUT in
 * Redis 7.0's format. Called inside C's callbacks: a listing past
 * client_output_buffer_limit closes C (client_output_overflow) at their end. */
void clientid_list(struct client *c, int argc, const struct sv *argv, struct evbuffer *out);
void clientid_info(struct client *c, int argc, const struct sv *argv, struct evbuffer *out);

#endif
