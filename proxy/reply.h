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
void reply_nil(struct evbuffer *out);
void reply_integer(struct evbuffer *out, long long value);
void reply_array_header(struct evbuffer *out, long long count);

#endif
