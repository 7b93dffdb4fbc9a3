/* local.h - commands sluice answers itself: CLIENT SETNAME/GETNAME/ID,
 * QUIT, HELLO 3 (refused), and the PROXY command. */
#ifndef SLUICE_LOCAL_H
#define SLUICE_LOCAL_H

#include "sv.h"

struct client;
struct request;
struct evbuffer;

/* Build the lookup from command id to handler. After commands_init. */
void local_init(void);

/* Non-zero when REQ (with its ARGV) is for sluice rather than Redis. */
int local_wants(const struct request *req, int argc, const struct sv *argv);

/* Answer REQ into OUT. May set client flags (QUIT closes after the reply). */
void local_execute(struct client *c, struct request *req, int argc, const struct sv *argv,
                   struct evbuffer *out);

#endif
