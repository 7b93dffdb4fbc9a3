/* respwalk.h - reads the values of one complete RESP2 reply held in
 * contiguous memory (CLUSTER SLOTS, a sub-reply of a split command): a
 * header at a time, every length checked against the end, aggregates
 * skipped by counting what is still to come rather than by recursion.
 * Framing and validation of replies off the wire is respframe's job. */
#ifndef SLUICE_RESPWALK_H
#define SLUICE_RESPWALK_H

#include <stddef.h>

struct respwalk {
    const char *p, *end;   /* next byte; end of the reply */
};

/* Each returns 0, or -1 when the next value is not of that kind, is
 * malformed or is cut short (then W is left anywhere). */

/* One header line: its type byte and, for '*', ':' and '$', its number. */
int respwalk_line(struct respwalk *w, char *type, long long *n);
int respwalk_int(struct respwalk *w, long long *v);
/* An array header with COUNT >= 0 elements. */
int respwalk_array(struct respwalk *w, long long *count);
/* A bulk string: *S points into the reply, *LEN bytes. */
int respwalk_bulk(struct respwalk *w, const char **s, size_t *len);
/* Skip COUNT whole values, aggregates included. */
int respwalk_skip(struct respwalk *w, long long count);

#endif
