/* local.h - commands sluice answers itself: CLIENT SETNAME/GETNAME/ID/REPLY,
 * QUIT, HELLO 3 (refused), and the PROXY command. Which commands those are
 * is placement.c's table (PLACE_LOCAL). */
#ifndef SLUICE_LOCAL_H
#define SLUICE_LOCAL_H

#include "sv.h"

struct client;
struct request;
struct evbuffer;

/* Build the lookup from command id to handler. After commands_init. */
void local_init(void);


/* Whether there is a handler here for NAME, as the command table names
 * commands ("client|reply"). */
int local_handles(const char *name);

/* Answer REQ into OUT. May set client flags (QUIT closes after the reply). */
void local_execute(struct client *c, struct request *req, int argc, const struct sv *argv,
                   struct evbuffer *out);

#endif
