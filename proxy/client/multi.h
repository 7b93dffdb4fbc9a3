/* multi.h - commands sluice answers itself (CLIENT SETNAME/GETNAME/ID)
 * queued inside MULTI: they run in order at EXEC, in their slot of EXEC's
 * reply. */
#ifndef SLUICE_MULTI_H
#define SLUICE_MULTI_H

#include <stddef.h>

struct evbuffer;
struct request;
struct multi_locals;

/* REQ, queued inside MULTI, is to run at EXEC as element INDEX (from 0)
 * of EXEC's reply: remember a copy of it in *ML (made on first use). Its
 * bytes are the first raw_len bytes of SRC, or req->raw when SRC is NULL.
 * The caller still sends REQ to Redis, which queues it like any command
 * and so keeps its place in EXEC's array. Returns 0, or -1 when out of
 * memory (nothing recorded). */
int multi_record(struct multi_locals **ml, const struct request *req, int index,
                 struct evbuffer *src);

/* EXEC (REQ, of a client) is sent: when *ML holds slots, REQ's reply
 * goes through a hook that answers those slots with sluice's own replies,
 * run in order then, and passes the others on as Redis sent them. Takes
 * *ML over (it is NULL after). */
void multi_hook_exec(struct multi_locals **ml, struct request *req);

/* Forget what *ML holds (DISCARD, RESET, an aborted EXEC, a new MULTI). */
void multi_locals_free(struct multi_locals **ml);

#endif
