/* sentinel_failover.h - Sentinel mode: a failover announced by Sentinel
 * loses no write sluice acknowledged. From the first event of a failover
 * of sentinel_master (any one Sentinel's word: holding only delays),
 * writes are held in sluice (through the hold hook the client layer
 * registers) until the majority-confirmed switch, then sent to the new
 * primary; what the old primary acknowledged before is checked against
 * the promoted replica's replication offsets. A loss sluice cannot rule
 * out is counted (sluice_failover_writes_unconfirmed_total) and logged
 * (docs/sentinel-and-replicas.md "Planned failovers"). */
#ifndef SLUICE_SENTINEL_FAILOVER_H
#define SLUICE_SENTINEL_FAILOVER_H

#include <stdint.h>

struct backend_conn;
struct backend_node;
struct config;
struct evbuffer;
struct request;

/* The Sentinel channels that tell a failover's progress, subscribed to
 * with +switch-master (Redis 7.0 sentinel.c's event names). */
#define SENTINEL_FAILOVER_CHANNELS                                                          \
    "+try-failover", "+elected-leader", "+failover-state-select-slave", "+selected-slave",  \
        "+failover-state-send-slaveof-noone", "+failover-state-wait-promotion",             \
        "+promoted-slave", "+failover-state-reconf-slaves", "+failover-end-for-timeout",    \
        "+failover-end", "-failover-abort-not-elected", "-failover-abort-no-good-slave",     \
        "-failover-abort-slave-timeout"

/* What the client layer does for a hold (main.c registers it): ON 1
 * holds every later write in sluice (reads go on); ON 0 ends that and
 * sends the held ones on (to the primary of then). Returns how many
 * requests it released (ON 0), else 0. */
typedef int sentinel_failover_hold_fn(int on);
void sentinel_failover_set_hold_hook(sentinel_failover_hold_fn *fn);

/* Sentinel mode runs (sentinel_run): CFG for the window and the master. */
void sentinel_failover_start(const struct config *cfg);

/* A pub/sub message of Sentinel PEER on CHANNEL with BODY. A failover's
 * event for our master at CURRENT (the primary's "host:port" sluice uses
 * now) holds writes; an abort by every Sentinel that started one ends
 * the hold. */
void sentinel_failover_on_message(const char *peer, const char *channel, const char *body,
                                  const char *current);

/* The majority-confirmed switch from OLD (NULL: none) to NODE, NODE the
 * default node already and OLD's connections not yet retired: the check
 * of what OLD acknowledged goes on (or begins, when no event came). */
void sentinel_failover_switching(struct backend_node *old, struct backend_node *node);

/* The same switch, OLD's private connections dropped: the held writes go
 * to the primary (NODE) now. */
void sentinel_failover_switched(void);

/* Every Sentinel tick: a hold past failover_retry_window ends. */
void sentinel_failover_tick(uint64_t now_ms);

/* CONN delivers a reply of TYPE (enum reply_type) for REQ: a client's
 * write answered by the primary is counted (what a loss would cost).
 * The backend's reply note (backend_set_reply_note), set by _start. */
void sentinel_failover_note_reply(const struct backend_conn *conn, const struct request *req,
                                  int type);

/* "sentinel_failover_*" lines of PROXY INFO's Sentinel section. */
void sentinel_failover_write_info(struct evbuffer *out);

void sentinel_failover_free(void);

#endif
