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

int reply_format_ll(char *out, long long v)
{
    /* Digits from the low end, as unsigned so LLONG_MIN has a magnitude. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    char digits[20];
    int n = 0, len = 0;

    if (v >= 0 && v < 10) {   /* most RESP lengths and counts */
        out[0] = (char)('0' + v);
        return 1;
    }
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        out[len++] = '-';
    while (n > 0)
        out[len++] = digits[--n];
    return len;
}

int reply_format_header(char *out, char type, long long n)
{
    int len = 1;

    out[0] = type;
    len += reply_format_ll(out + 1, n);
    out[len++] = '\r';
    out[len++] = '\n';
    return len;
}

void reply_status(struct evbuffer *out, const char *status)
{
    evbuffer_add(out, "+", 1);
    evbuffer_add(out, status, strlen(status));
    evbuffer_add(out, "\r\n", 2);
}

void reply_bulk(struct evbuffer *out, const char *data, size_t len)
{
    char head[24];

    evbuffer_add(out, head, (size_t)reply_format_header(head, '$', (long long)len));
    evbuffer_add(out, data, len);
    evbuffer_add(out, "\r\n", 2);
}

void reply_bulk_buffer(struct evbuffer *out, struct evbuffer *text)
{
    char head[24];
    size_t len = evbuffer_get_length(text);

    evbuffer_add(out, head, (size_t)reply_format_header(head, '$', (long long)len));
    evbuffer_add_buffer(out, text);
    evbuffer_add(out, "\r\n", 2);
}

void reply_nil(struct evbuffer *out, int resp)
{
    if (resp == 3)
        evbuffer_add(out, "_\r\n", 3);
    else
        evbuffer_add(out, "$-1\r\n", 5);
}

void reply_integer(struct evbuffer *out, long long value)
{
    char text[24];

    evbuffer_add(out, text, (size_t)reply_format_header(text, ':', value));
}

void reply_array_header(struct evbuffer *out, long long count)
{
    char text[24];

    evbuffer_add(out, text, (size_t)reply_format_header(text, '*', count));
}

/* The decimal at P (before END), up to its first non-digit: what Redis
 * writes after ':' or '*'. Overflow is not checked: Redis sent it. */
static long long reply_scan_ll(const char *p, const char *end)
{
    int neg = p < end && *p == '-';
    unsigned long long u = 0;

    for (p += neg; p < end && *p >= '0' && *p <= '9'; p++)
        u = u * 10 + (unsigned long long)(*p - '0');
    return neg ? (long long)(0ULL - u) : (long long)u;
}

int reply_parse_ints(const char *buf, size_t len, long long *vals, int max)
{
    int count = 0;
    long long want = 1;
    const char *p = buf, *end = buf + len;

    if (len > 0 && buf[0] == '*') {
        want = reply_scan_ll(buf + 1, end);
        p = memchr(buf, '\n', len);
        if (p == NULL)
            return -1;
        p++;
    }
    while (count < want && count < max && p < end) {
        if (*p == ':')
            vals[count] = reply_scan_ll(p + 1, end);
        else if ((*p == '$' && p + 1 < end && p[1] == '-') || *p == '_')
            vals[count] = 0;   /* null: RESP2's $-1, RESP3's _ */
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
