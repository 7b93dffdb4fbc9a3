/* slowlog.h - the slow log (PROXY SLOWLOG): requests that took longer than
 * slowlog_log_slower_than from framed to their reply queued to the client,
 * kept as Redis's SLOWLOG keeps its entries (arguments cut as Redis cuts
 * them), plus the user and the time the request spent in Redis. */
#ifndef SLUICE_SLOWLOG_H
#define SLUICE_SLOWLOG_H

#include <stddef.h>
#include <stdint.h>

#include "sv.h"

struct evbuffer;
struct request;

/* Redis's limits for an entry's arguments (SLOWLOG_ENTRY_MAX_ARGC/STRING). */
#define SLOWLOG_MAX_ARGC 32
#define SLOWLOG_MAX_STRING 128

/* Apply slowlog_log_slower_than (µs; 0: every request; negative: off) and
 * slowlog_max_len; a shorter max_len drops the oldest entries now. */
void slowlog_configure(long long log_slower_than_us, long long max_len);

/* Whether requests are to be timed and their arguments kept. */
int slowlog_enabled(void);

/* slowlog_configure's threshold (µs; negative: off), read by slowlog_slow
 * on every request's reply: inline, no call. */
extern long long slowlog_slower_than_us;

/* Whether a request that took DURATION_US goes to the slow log. */
static inline int slowlog_slow(uint64_t duration_us)
{
    return slowlog_slower_than_us >= 0 && duration_us >= (uint64_t)slowlog_slower_than_us;
}

/* Keep what the slow log would show of REQ's arguments ARGV (views over
 * SRC, where REQ's bytes are; an argument sluice does not read has a NULL
 * view and is read from SRC): a request of at most REQ_SLOW_INLINE bytes
 * as its bytes, copied once into REQ (cut and rendered only if logged);
 * a larger one, or one with a password, as at most SLOWLOG_MAX_STRING
 * bytes of each of the first SLOWLOG_MAX_ARGC arguments. Kept in REQ
 * (req->slow_args), inline when small; request_free releases it. Does
 * nothing when out of memory. */
void slowlog_capture(struct request *req, const struct sv *argv, struct evbuffer *src);

/* REQ's reply was queued to its client at NOW_US (server_pass_now_us):
 * log REQ if it was slow. ADDR, NAME (may be NULL), USER: its client's. */
void slowlog_note(const struct request *req, uint64_t now_us, const char *addr,
                  const char *name, const char *user);

/* PROXY SLOWLOG GET: the newest COUNT entries (-1: all), newest first, as
 * Redis's SLOWLOG GET replies, each with the user and the µs in Redis
 * after the client name. */
void slowlog_write(struct evbuffer *out, long long count);
/* Entries held (PROXY SLOWLOG LEN; the sluice_slowlog_length gauge). */
size_t slowlog_len(void);
void slowlog_reset(void);

#endif
