/* respscan.c - owns RESP2 framing without a parse tree: a count of values
 * still to come is all the state nesting needs, so depth is unbounded. */
#include "respscan.h"

/* Above this many new bytes, feed the reader one contiguous block. */
#define RESPSCAN_FEED_CONTIGUOUS (64 * 1024)

#include <event2/buffer.h>
#include <hiredis/read.h>
#include <stdlib.h>
#include <string.h>

/* Parse the integer of the header line at BUF[*pos] (after its type byte).
 * Returns 1 with *pos past the CRLF, 0 when incomplete, -1 when malformed. */
static int respscan_line_int(const char *buf, size_t len, size_t *pos, long long *out)
{
    const char *cr = memchr(buf + *pos, '\r', len - *pos);
    size_t i = *pos + 1;
    int neg = 0;
    long long v = 0;

    if (cr == NULL)
        return 0;
    if ((size_t)(cr - buf) + 1 >= len)
        return 0;
    if (i < (size_t)(cr - buf) && buf[i] == '-') {
        neg = 1;
        i++;
    }
    if (i == (size_t)(cr - buf))
        return -1;
    for (; i < (size_t)(cr - buf); i++) {
        if (buf[i] < '0' || buf[i] > '9' || v > (1LL << 50))
            return -1;
        v = v * 10 + (buf[i] - '0');
    }
    *out = neg ? -v : v;
    *pos = (size_t)(cr - buf) + 2;
    return 1;
}

ssize_t respscan_value(const char *buf, size_t len)
{
    size_t pos = 0;
    long long remaining = 1, n;
    int rc;

    while (remaining > 0) {
        if (pos >= len)
            return 0;
        switch (buf[pos]) {
        case '+': case '-': case ':': {
            const char *cr = memchr(buf + pos, '\r', len - pos);
            if (cr == NULL || (size_t)(cr - buf) + 1 >= len)
                return 0;
            pos = (size_t)(cr - buf) + 2;
            break;
        }
        case '$':
            rc = respscan_line_int(buf, len, &pos, &n);
            if (rc <= 0)
                return rc;
            if (n >= 0) {
                if (pos + (size_t)n + 2 > len)
                    return 0;
                pos += (size_t)n + 2;
            }
            break;
        case '*':
            rc = respscan_line_int(buf, len, &pos, &n);
            if (rc <= 0)
                return rc;
            if (n > 0)
                remaining += n;
            break;
        default:
            return -1;
        }
        remaining--;
    }
    return (ssize_t)pos;
}

size_t respscan_reader_bulk_missing(const struct redisReader *r)
{
    const char *start = r->buf + r->pos;
    size_t have = r->len - r->pos, need;
    const char *cr;
    long long len;

    if (r->ridx < 0 || r->rstack[r->ridx].type != REDIS_REPLY_STRING || have == 0)
        return 0;
    cr = memchr(start, '\r', have < 32 ? have : 32);
    if (cr == NULL)
        return 0;
    len = strtoll(start, NULL, 10);
    if (len < 0)
        return 0;
    need = (size_t)(cr - start) + 2 + (size_t)len + 2;
    return need > have ? need - have : 0;
}

size_t respscan_feed(struct redisReader *r, struct evbuffer *in, size_t fed)
{
    struct evbuffer_ptr pos;
    struct evbuffer_iovec iov[64];
    size_t total = evbuffer_get_length(in);
    int n;

    if (total - fed > RESPSCAN_FEED_CONTIGUOUS) {
        const char *base = (const char *)evbuffer_pullup(in, -1);
        redisReaderFeed(r, base + fed, total - fed);
        return total;
    }
    while (fed < total) {
        if (evbuffer_ptr_set(in, &pos, fed, EVBUFFER_PTR_SET) != 0)
            break;
        n = evbuffer_peek(in, -1, &pos, iov, 64);
        for (int i = 0; i < n && i < 64; i++) {
            redisReaderFeed(r, iov[i].iov_base, iov[i].iov_len);
            fed += iov[i].iov_len;
        }
    }
    return fed;
}
