/* local.h - commands sluice answers itself: CLIENT SETNAME/GETNAME/ID/
 * LIST/INFO/REPLY, QUIT, HELLO 3 (refused), and the PROXY command. Which
 * commands those are is placement.c's table (PLACE_LOCAL). */
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

/* Whether REQ reads or sets session state that a reply Redis still owes
 * for an earlier command may change (EXEC running CLIENT SETNAME, RESET,
 * HELLO SETNAME): then it runs once those are in (client.c defers it). */
int local_reads_session(const struct request *req, int argc, const struct sv *argv);

/* Whether REQ's reply is read from sluice's state and REQ changes nothing
 * (CLIENT LIST/INFO/GETNAME/ID, PROXY INFO/RULES...): client.c builds it at
 * its turn, under the client's output limits, not as it is framed. */
int local_at_turn(const struct request *req, int argc, const struct sv *argv);

/* Whether ARGV (a HELLO of C) is a HELLO 2 of a client subscribed in
 * RESP3: it puts the connection in RESP2 pub/sub (client_enter_resp2_pubsub),
 * so it runs at its turn with nothing framed after it. */
int local_hello_to_resp2_subscribed(const struct client *c, int argc, const struct sv *argv);

/* Whether Redis would refuse REQ in a RESP2 subscribed context (CLIENT
 * SETNAME/GETNAME/ID/REPLY; not QUIT, nor sluice's own PROXY; nor one
 * with the wrong number of arguments, which Redis answers first). */
int local_subscribed_refuses(const struct request *req, int argc, const struct sv *argv);

/* What happens to REQ (a command answered here) inside MULTI: answered
 * at once (QUIT, PROXY), or queued by Redis too, to run at EXEC (CLIENT
 * SETNAME/GETNAME/ID: see multi.c), or refused for its arity, which
 * aborts the transaction as in Redis. */
enum local_in_multi { LOCAL_MULTI_NOW, LOCAL_MULTI_QUEUE, LOCAL_MULTI_ERROR };
enum local_in_multi local_in_multi(const struct request *req, int argc, const struct sv *argv);

/* PROXY INFO's "# Locks" section: FN writes its lines (the lock verbs,
 * an upper layer: registered by main.c). None: the section is empty. */
void local_set_locks_info(void (*fn)(struct evbuffer *text));

/* Answer REQ into OUT. May set client flags (QUIT closes after the reply). */
void local_execute(struct client *c, struct request *req, int argc, const struct sv *argv,
                   struct evbuffer *out);

#endif
