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

/* The reply to a request that waited failover_retry_window for a primary
 * (the text sentinel.c gives one held on a shared connection). */
#define CLIENT_FAILOVER_NO_PRIMARY_ERR \
    "-ERR backend unavailable: no primary for master within failover_retry_window"

/* Sentinel mode: REQ of C needs a new private connection (C has none: the
 * last went with the old primary, or it never had one) while the primary
 * is down. Returns 1: REQ waits (the caller stalls it; client_try_unstall
 * asks again from each tick), -1: it waited failover_retry_window (the
 * caller fails it with CLIENT_FAILOVER_NO_PRIMARY_ERR: it never ran), 0:
 * it goes on. */
int client_failover_wait(struct client *c, struct request *req);

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
