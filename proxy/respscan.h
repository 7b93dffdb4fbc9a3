/* respscan.h - find the end of one RESP2 value of any nesting depth, for
 * the replies hiredis 0.14's reader refuses (deeper than 7 levels, such as
 * COMMAND and COMMAND DOCS). */
#ifndef SLUICE_RESPSCAN_H
#define SLUICE_RESPSCAN_H

#include <stddef.h>
#include <sys/types.h>

/* Length of the complete RESP2 value at the start of BUF; 0 when more bytes
 * are needed; -1 when BUF is not RESP2. */
ssize_t respscan_value(const char *buf, size_t len);


struct redisReader;

/* When hiredis's reader R waits for the body of a bulk string whose length
 * line it holds, the number of bytes still missing to complete it, so the
 * caller can hold them back and feed them in one go (feeding a large bulk
 * piecewise makes the reader grow its buffer 1 MB at a time). 0 otherwise. */
size_t respscan_reader_bulk_missing(const struct redisReader *r);

struct evbuffer;

/* Give R the bytes of IN past the first FED (those it has already), and
 * return the new count fed: all of IN. A large amount goes in one call so
 * the reader grows its buffer once. */
size_t respscan_feed(struct redisReader *r, struct evbuffer *in, size_t fed);

#endif
