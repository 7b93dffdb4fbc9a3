/* fuzz_hiredis.h - hiredis 0.14's reader as the reference for reply
 * framing: the replies at the head of an input, one by one, with their
 * lengths and hiredis's type numbers. */
#ifndef SLUICE_FUZZ_HIREDIS_H
#define SLUICE_FUZZ_HIREDIS_H

#include <hiredis/read.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"

#define FUZZ_MAX_REPLIES 4096

/* How the replies of an input end. */
enum fuzz_end {
    FUZZ_END_MORE,          /* the rest is an incomplete reply (or nothing) */
    FUZZ_END_ERROR,         /* the next reply is not RESP */
    FUZZ_END_UNSUPPORTED,   /* the next one is beyond hiredis: nested deeper
                             * than 7 or a RESP3 type byte; compare no further */
    FUZZ_END_FULL,          /* FUZZ_MAX_REPLIES replies: compare no further */
};

struct fuzz_reply {
    size_t len;
    int type;
};

struct fuzz_replies {
    struct fuzz_reply reply[FUZZ_MAX_REPLIES];
    int count;
    enum fuzz_end end;
};

/* Frame DATA/LEN with hiredis's reader (no reply objects) into OUT. */
static inline void fuzz_hiredis_frame(const uint8_t *data, size_t len, struct fuzz_replies *out)
{
    redisReader *r = redisReaderCreateWithFunctions(NULL);
    size_t consumed = 0;

    FUZZ_CHECK(r != NULL, "out of memory");
    out->count = 0;
    out->end = FUZZ_END_MORE;
    if (len > 0)
        redisReaderFeed(r, (const char *)data, len);
    while (out->count < FUZZ_MAX_REPLIES) {
        void *reply = NULL;
        size_t now;

        if (redisReaderGetReply(r, &reply) != 0) {
            int unsupported = strstr(r->errstr, "nested multi bulk") != NULL ||
                              strstr(r->errstr, "reply type byte") != NULL;
            out->end = unsupported ? FUZZ_END_UNSUPPORTED : FUZZ_END_ERROR;
            break;
        }
        if (reply == NULL)
            break;
        /* The reader drops consumed bytes now and then: count from the end. */
        now = len - (r->len - r->pos);
        out->reply[out->count].len = now - consumed;
        out->reply[out->count].type = (int)(intptr_t)reply;
        out->count++;
        consumed = now;
    }
    if (out->count == FUZZ_MAX_REPLIES)
        out->end = FUZZ_END_FULL;
    redisReaderFree(r);
}

#endif
