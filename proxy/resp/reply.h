/* reply.h - writing RESP replies that sluice makes itself. */
#ifndef SLUICE_REPLY_H
#define SLUICE_REPLY_H

#include <stddef.h>

struct evbuffer;

/* An error reply. A message that starts with '-' carries its own code
 * ("-NOPROTO ..."); any other gets "-ERR ". CR and LF become spaces. */
void reply_error(struct evbuffer *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void reply_status(struct evbuffer *out, const char *status);
void reply_bulk(struct evbuffer *out, const char *data, size_t len);
/* TEXT's bytes as one bulk string; they are moved (TEXT is left empty). */
void reply_bulk_buffer(struct evbuffer *out, struct evbuffer *text);
/* The null reply in protocol RESP (2 or 3): "$-1" or "_". */
void reply_nil(struct evbuffer *out, int resp);
void reply_integer(struct evbuffer *out, long long value);
void reply_array_header(struct evbuffer *out, long long count);

/* Decimal V at OUT (room for 21 bytes), not terminated; returns its length. */
int reply_format_ll(char *out, long long v);

/* "<TYPE><N>\r\n" at OUT (room for 24 bytes), as RESP headers and integer
 * replies are written; returns its length. */
int reply_format_header(char *out, char type, long long n);

/* The integers of a small reply ":n" or "*k :a :b ..." (nil, $-1 or _, counts as 0)
 * into VALS, at most MAX. Returns how many, or -1 when it is neither. */
int reply_parse_ints(const char *buf, size_t len, long long *vals, int max);

#endif
