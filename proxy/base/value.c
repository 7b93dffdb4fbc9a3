/* value.c - owns the syntax of scalar values in config and rule files. */
#include "value.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct value_unit {
    const char *suffix;
    long long factor;
};

static const struct value_unit value_byte_units[] = {
    {"", 1}, {"b", 1}, {"k", 1024}, {"kb", 1024}, {"m", 1024 * 1024},
    {"mb", 1024 * 1024}, {"g", 1024LL * 1024 * 1024}, {"gb", 1024LL * 1024 * 1024},
};

static const struct value_unit value_time_units[] = {
    {"us", 1}, {"ms", 1000}, {"s", 1000000},
};

/* Split TEXT into a non-negative decimal number and a suffix from UNITS. */
static int value_with_unit(const char *text, const struct value_unit *units, size_t n,
                           long long *out)
{
    char *end;
    long long num;

    if (text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    num = strtoll(text, &end, 10);
    if (errno != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (num > 0 && units[i].factor > __LONG_LONG_MAX__ / num)
                return -1;
            *out = num * units[i].factor;
            return 0;
        }
    }
    return -1;
}

int value_int(const char *text, long long min, long long max, long long *out,
              char *err, size_t errlen)
{
    char *end;
    long long num;

    errno = 0;
    num = strtoll(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno != 0) {
        snprintf(err, errlen, "'%s' is not an integer", text);
        return -1;
    }
    if (num < min || num > max) {
        snprintf(err, errlen, "%lld is out of range (%lld to %lld)", num, min, max);
        return -1;
    }
    *out = num;
    return 0;
}

int value_bytes(const char *text, long long min, long long max, long long *out,
                char *err, size_t errlen)
{
    long long num;

    if (value_with_unit(text, value_byte_units,
                        sizeof(value_byte_units) / sizeof(value_byte_units[0]), &num) != 0) {
        snprintf(err, errlen, "'%s' is not a size (e.g. 512mb, 64kb, 1048576)", text);
        return -1;
    }
    if (num < min || num > max) {
        snprintf(err, errlen, "%s is out of range (%lld to %lld bytes)", text, min, max);
        return -1;
    }
    *out = num;
    return 0;
}

int value_duration_us(const char *text, long long *out, char *err, size_t errlen)
{
    if (value_with_unit(text, value_time_units,
                        sizeof(value_time_units) / sizeof(value_time_units[0]), out) != 0) {
        snprintf(err, errlen, "'%s' is not a duration (e.g. 500us, 250ms, 2s)", text);
        return -1;
    }
    return 0;
}

int value_hostport(const char *text, char *host, size_t hostlen, int *port,
                   char *err, size_t errlen)
{
    const char *colon = strrchr(text, ':');
    const char *h = text;
    size_t hlen;
    long long p;
    char perr[128];

    if (colon == NULL) {
        snprintf(err, errlen, "'%s' is not host:port", text);
        return -1;
    }
    hlen = (size_t)(colon - text);
    if (hlen >= 2 && text[0] == '[' && text[hlen - 1] == ']') {
        h = text + 1;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= hostlen) {
        snprintf(err, errlen, "'%s' has no valid host", text);
        return -1;
    }
    if (value_int(colon + 1, 1, 65535, &p, perr, sizeof(perr)) != 0) {
        snprintf(err, errlen, "'%s' has no valid port (1 to 65535)", text);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)p;
    return 0;
}

int value_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int value_strict_ll(const char *ptr, size_t len, long long *out)
{
    char buf[24];
    char *end;
    long long v;

    if (len == 0 || len >= sizeof(buf) || ptr == NULL)
        return -1;
    memcpy(buf, ptr, len);
    buf[len] = '\0';
    if (buf[0] != '-' && (buf[0] < '0' || buf[0] > '9'))
        return -1;
    if (buf[0] == '-' && (len == 1 || buf[1] < '0' || buf[1] > '9'))
        return -1;
    /* string2ll takes "0" but no other leading zero, and no "-0". */
    if ((buf[0] == '0' && len > 1) || (buf[0] == '-' && buf[1] == '0'))
        return -1;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}
