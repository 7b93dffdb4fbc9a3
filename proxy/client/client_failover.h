/* client_failover.h - a client's private connection across a primary
 * switch in Sentinel mode (client_failover.c). */
#ifndef SLUICE_CLIENT_FAILOVER_H
#define SLUICE_CLIENT_FAILOVER_H

struct client;
struct request;
struct evbuffer;

/* REQ (its bytes at the head of SRC, or req->raw when SRC is NULL) goes on
 * C's private connection: remember the names it subscribes to or
 * unsubscribes from (every mode: a failover and a hand-over use them). */
void client_failover_note(struct client *c, const struct request *req, struct evbuffer *src);

/* C's private connection is gone (Sentinel mode): returns 1 when C goes
 * on (a subscriber waits to be subscribed again, a transaction is marked
 * lost, an idle connection is made again when needed), 0 when it is to be
 * closed as before (a tunnel, MONITOR, session state, RESP3 pub/sub). */
int client_failover_private_lost(struct client *c);

/* From client_cron: subscribe C again once the primary is up. */
void client_failover_cron(struct client *c);

/* REQ of C, whose transaction was lost with its connection: 1 with *LINE
 * the answer (EXEC: -EXECABORT; DISCARD: +OK; others an error), SRC's
 * bytes of REQ drained; 0 when REQ goes on as usual. */
int client_failover_check(struct client *c, struct request *req, struct evbuffer *src,
                          const char **line);

/* Append to OUT the commands that subscribe a connection to every name C
 * is subscribed to: one SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE each (those
 * with names). Returns how many names, each one confirmation from Redis. */
int client_failover_replay(const struct client *c, struct evbuffer *out);

/* C is closing: free the names it kept. */
void client_failover_forget(struct client *c);

#endif
