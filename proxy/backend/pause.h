/* pause.h - what sluice knows of a CLIENT PAUSE it forwarded to Redis, so
 * that requests Redis would hold never wait on a shared connection. */
#ifndef SLUICE_PAUSE_H
#define SLUICE_PAUSE_H

#include <stdint.h>

#include "sv.h"

struct command;
struct backend_node;
struct backend_conn;

/* A CLIENT PAUSE (PAUSE set) or CLIENT UNPAUSE with ARGC arguments ARGV
 * is being forwarded. A PAUSE that Redis will take (a timeout in ms, then
 * optionally WRITE or ALL) turns the pause on now, before its reply:
 * the requests that follow must already avoid the shared connections.
 * As in Redis, a pause never shortens or relaxes one that is on.
 * Returns how many PAUSEs were noted so far, for pause_note_reply. */
uint64_t pause_note_request(int pause, int argc, const struct sv *argv);

/* Redis answered a CLIENT PAUSE (PAUSE set) or UNPAUSE with a reply of
 * TYPE (enum reply_type). An error to PAUSE takes back what it noted;
 * UNPAUSE's +OK ends the pause, unless a PAUSE was noted since the
 * UNPAUSE came (PAUSES_BEFORE, what pause_note_request returned then):
 * Redis may have taken that PAUSE after the UNPAUSE, so it is kept (to its
 * end). IN_MULTI: the reply is +QUEUED, which says nothing yet. */
void pause_note_reply(int pause, int in_multi, int type, uint64_t pauses_before);

/* Whether Redis holds a command CMD (NULL: one sluice does not know) while
 * the pause is on: in ALL mode every command, in WRITE mode those flagged
 * write and those that may replicate (scripts, PFCOUNT, PUBLISH...). 0 when
 * no pause is on (or it has ended). */
int pause_holds(const struct command *cmd);

/* The connection to NODE for a request of sluice's own (a lock's or a
 * rule's script: WRITES set; CLIENT LIST, COMMAND INFO: WRITES 0): a
 * one-shot connection while a pause holds it, so that it never blocks a
 * shared connection; else (or at backend_max_connections) the shared
 * (RESP2) one backend_pool_conn gives CLIENT_ID. */
struct backend_conn *pause_internal_conn(struct backend_node *node, unsigned long long client_id,
                                        int writes);

/* Whether a pause is on now. */
int pause_active(void);

#endif
