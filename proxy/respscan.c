/* respscan.c - owns RESP2 framing without a parse tree: a count of values
 * still to come is all the state nesting needs, so depth is unbounded. */
#include "respscan.h"

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
