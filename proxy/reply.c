/* reply.c - owns the RESP encoding of replies sluice answers itself; the
 * one place error replies get their code and lose stray CR/LF. */
#include "reply.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void reply_error(struct evbuffer *out, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;
    for (int i = 0; i < n; i++) {
        if (msg[i] == '\r' || msg[i] == '\n')
            msg[i] = ' ';
    }
    if (msg[0] == '-')
        evbuffer_add(out, msg, (size_t)n);
    else
        evbuffer_add_printf(out, "-ERR %s", msg);
    evbuffer_add(out, "\r\n", 2);
}

void reply_status(struct evbuffer *out, const char *status)
{
    evbuffer_add_printf(out, "+%s\r\n", status);
}

void reply_bulk(struct evbuffer *out, const char *data, size_t len)
{
    evbuffer_add_printf(out, "$%zu\r\n", len);
    evbuffer_add(out, data, len);
    evbuffer_add(out, "\r\n", 2);
}

void reply_nil(struct evbuffer *out)
{
    evbuffer_add(out, "$-1\r\n", 5);
}

void reply_integer(struct evbuffer *out, long long value)
{
    evbuffer_add_printf(out, ":%lld\r\n", value);
}

void reply_array_header(struct evbuffer *out, long long count)
{
    evbuffer_add_printf(out, "*%lld\r\n", count);
}

int reply_parse_ints(const char *buf, size_t len, long long *vals, int max)
{
    int count = 0, want = 1;
    const char *p = buf, *end = buf + len;

    if (len > 0 && buf[0] == '*') {
        want = atoi(buf + 1);
        p = memchr(buf, '\n', len);
        if (p == NULL)
            return -1;
        p++;
    }
    while (count < want && count < max && p < end) {
        if (*p == ':')
            vals[count] = strtoll(p + 1, NULL, 10);
        else if (*p == '$' && p + 1 < end && p[1] == '-')
            vals[count] = 0;
        else
            return -1;
        count++;
        p = memchr(p, '\n', (size_t)(end - p));
        if (p == NULL)
            break;
        p++;
    }
    return count;
}
