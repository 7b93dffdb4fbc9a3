/* glob.c - owns glob matching for rules (key, user and client name
 * patterns). Follows Redis's stringmatchlen() semantics, but iterates
 * instead of recursing, so no pattern can blow the stack or the clock. */
#include "glob.h"

#include <stdint.h>

/* Match the class that starts after the '[' at P[*PI] against byte C.
 * Leaves *PI just past the closing ']' (or at PLEN when the class is not
 * closed: like Redis, the end of the pattern closes it). As in Redis,
 * "[]" is an empty class, '\' escapes inside a class, "z-a" is "a-z". */
static int glob_class(const char *p, size_t plen, size_t *pi, unsigned char c)
{
    size_t i = *pi + 1;
    int negate = 0, match = 0;

    if (i < plen && p[i] == '^') {
        negate = 1;
        i++;
    }
    while (i < plen && p[i] != ']') {
        unsigned char lo = (unsigned char)p[i], hi;

        if (p[i] == '\\' && i + 1 < plen) {
            i++;
            lo = (unsigned char)p[i];
            hi = lo;
        } else if (i + 2 < plen && p[i + 1] == '-') {
            hi = (unsigned char)p[i + 2];
            i += 2;
        } else {
            hi = lo;
        }
        if (lo > hi) {
            unsigned char t = lo;
            lo = hi;
            hi = t;
        }
        if (c >= lo && c <= hi)
            match = 1;
        i++;
    }
    *pi = i < plen ? i + 1 : plen;
    return negate ? !match : match;
}

/* Match the one pattern element at P[*PI] (not '*') against byte C and
 * move *PI past it. */
static int glob_one(const char *p, size_t plen, size_t *pi, unsigned char c)
{
    size_t i = *pi;

    switch (p[i]) {
    case '?':
        *pi = i + 1;
        return 1;
    case '[':
        return glob_class(p, plen, pi, c);
    case '\\':
        if (i + 1 < plen)    /* a lone trailing '\' matches itself */
            i++;
        /* fall through */
    default:
        *pi = i + 1;
        return (unsigned char)p[i] == c;
    }
}

/* Greedy with backtracking to the last '*' only. That is complete for
 * globs: every element other than '*' eats exactly one byte, so a later
 * '*' can absorb whatever an earlier one would have, and retrying the
 * earlier star never finds a match the last one misses. */
int glob_match(const char *pattern, size_t plen, const char *s, size_t slen)
{
    size_t pi = 0, si = 0;
    size_t star_pi = SIZE_MAX, star_si = 0;

    while (si < slen) {
        if (pi < plen && pattern[pi] == '*') {
            while (pi < plen && pattern[pi] == '*')
                pi++;
            if (pi == plen)
                return 1;
            star_pi = pi;
            star_si = si;
            continue;
        }
        if (pi < plen && glob_one(pattern, plen, &pi, (unsigned char)s[si])) {
            si++;
            continue;
        }
        if (star_pi == SIZE_MAX)
            return 0;
        pi = star_pi;
        si = ++star_si;
    }
    while (pi < plen && pattern[pi] == '*')
        pi++;
    return pi == plen;
}

int glob_can_match(const char *pattern, size_t plen)
{
    size_t i = 0;

    while (i < plen) {
        if (pattern[i] == '\\') {
            i += 2;
        } else if (pattern[i] != '[') {
            i++;
        } else if (i + 1 == plen || pattern[i + 1] == ']') {
            return 0;   /* "[]", or "[" last: a class of no byte */
        } else {
            glob_class(pattern, plen, &i, 0);   /* only to step past it */
        }
    }
    return 1;
}
