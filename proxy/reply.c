/* reply.c - owns the RESP encoding of replies sluice answers itself; the
 * one place error replies get their code and lose stray CR/LF. */
#include "reply.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>

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
