/* top.h - PROXY TOP: who loads Redis right now. Every request a client
 * sends is counted for its client, user, name, ip, command and keys, each
 * in a bounded heavy-hitter sketch (topk.h) of top_keys_capacity
 * subjects: memory does not grow with the number of distinct subjects. */
#ifndef SLUICE_TOP_H
#define SLUICE_TOP_H

#include <stdint.h>

#include "sv.h"
#include "topk.h"

struct client;
struct request;
struct evbuffer;

/* Make the sketches, CAPACITY subjects each (0: PROXY TOP is off and
 * nothing is counted). Returns 0, or -1 when out of memory. */
int top_init(long long capacity);
void top_free(void);

/* Count REQ (framed, ARGV its arguments) of client C, as passed (a rule's
 * refusal or delay is noted after, top_note). Its keys (and a command
 * sluice does not know) are counted at once; its client, user, name, ip
 * and known command show after the next flush (each tick, and before
 * PROXY TOP answers). Never allocates. */
void top_count(struct client *c, const struct request *req, const struct sv *argv);
/* REQ, counted already, was rejected or delayed after all: note OUTCOME
 * for those of its subjects still held. */
void top_note(struct client *c, const struct request *req, const struct sv *argv,
              enum topk_outcome outcome);

/* C is closing: what it sent since the last flush is counted now. */
void top_client_closed(struct client *c);

/* Periodic (each tick): the clients' counters go to the sketches; and
 * the sketches' weights decay every TOPK_WINDOW_S seconds, so
 * subjects busy long ago give way to those busy now. */
void top_cron(uint64_t now_ms);

/* Set the gauge sluice_top_requests_per_second afresh (at each scrape):
 * for each list (clients, users, names, ips, commands; keys too with
 * KEYS), its COUNT busiest subjects, ranked 1..COUNT, at their rate of
 * PROXY TOP. At most 6 * COUNT series at a time, whatever the traffic. */
void top_metrics_refresh(int count, int keys);

/* PROXY TOP ARGV[2] [COUNT n] (ARGC arguments in all) into OUT. */
void top_command(int argc, const struct sv *argv, struct evbuffer *out);

#endif
