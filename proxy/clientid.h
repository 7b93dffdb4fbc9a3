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

/* REQ of C (CLIENT UNBLOCK, KILL, TRACKING: role ROLE_CLIENT_IDS), with
 * arguments ARGV, its bytes at the head of *SRC or, when *SRC is NULL, in
 * req->raw. Each sluice id it names becomes the Redis id of that client's
 * private connection, or an id no Redis connection has (no such client,
 * or one without a private connection: Redis then answers as for an
 * unknown id). CLIENT KILL ID of a client without a private connection
 * closes that client once Redis has checked the command (its reply :0
 * becomes :1). */
enum clientid_result clientid_translate(struct client *c, struct request *req,
                                        const struct sv *argv, struct evbuffer **src);

/* CLIENT LIST [TYPE type] [ID id...] and CLIENT INFO, for C, into OUT in
 * Redis 7.0's format. */
void clientid_list(struct client *c, int argc, const struct sv *argv, struct evbuffer *out);
void clientid_info(struct client *c, struct evbuffer *out);

#endif
