/* value.h - parsers for config and rule values: integers with bounds, byte
 * sizes (512mb), durations (250ms), host:port. Each returns 0 on success or
 * -1 with a message for the user in ERR. */
#ifndef SLUICE_VALUE_H
#define SLUICE_VALUE_H

#include <stddef.h>

/* PTR (LEN bytes, not NUL-terminated) as a whole decimal 64-bit integer,
 * as Redis's string2ll reads one: an optional '-', digits, nothing else,
 * no overflow. 0 and *OUT set, or -1. */
int value_strict_ll(const char *ptr, size_t len, long long *out);

/* The value of the hexadecimal digit C (either case), or -1. */
int value_hex_digit(char c);

int value_int(const char *text, long long min, long long max, long long *out,
              char *err, size_t errlen);
/* Bytes with an optional k/kb/m/mb/g/gb suffix (powers of 1024). */
int value_bytes(const char *text, long long min, long long max, long long *out,
                char *err, size_t errlen);
/* Microseconds from a number with a us/ms/s suffix. */
int value_duration_us(const char *text, long long *out, char *err, size_t errlen);
/* "host:port" or "[v6addr]:port" into HOST (NUL-terminated) and PORT. */
int value_hostport(const char *text, char *host, size_t hostlen, int *port,
                   char *err, size_t errlen);

#endif
