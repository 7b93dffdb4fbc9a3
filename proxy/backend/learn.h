/* learn.h - learning, from Redis, the commands sluice's table does not
 * know (modules): asked once with MODULE LIST and COMMAND INFO, kept in
 * the cache of learned.h. Until a command is known it goes nowhere: its
 * client waits for the answer. */
#ifndef SLUICE_LEARN_H
#define SLUICE_LEARN_H

#include <stddef.h>

#include "learned.h"
#include "request.h"

struct client;

/* What learning needs of the client code; set once at start (main.c). */
struct learn_client_ops {
    void (*block)(struct client *c);   /* stop reading C's commands (client_block) */
    request_release_fn *release_held;  /* hand a waiting request back (client_release_held) */
};

/* Register OPS (kept, not copied) before the first learn_request. */
void learn_set_client_ops(const struct learn_client_ops *ops);

/* Ask Redis about REQ's command (argv[0] = NAME, LEN bytes) unless a
 * question is out already. Takes REQ (which owns its bytes) and blocks C
 * until the answer: then the ops' release_held gets REQ back, to dispatch
 * it, or with the error to answer when Redis could not be asked. */
void learn_request(struct client *c, struct request *req, const char *name, size_t len);

/* C is closing: forget (and free) the request it has waiting here. */
void learn_client_closed(struct client *c);

/* Free everything at exit, the cache too. */
void learn_free_all(void);

#endif
