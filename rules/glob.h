/* glob.h - Redis-style glob matching (as KEYS and ACL key patterns do it):
 * '*' any run of bytes, '?' one byte, '[abc]' '[a-z]' '[^x]' a class,
 * '\' takes the next byte literally. Patterns and subjects are byte views,
 * not C strings: keys may hold any byte, NUL included. */
#ifndef SLUICE_GLOB_H
#define SLUICE_GLOB_H

#include <stddef.h>

/* 1 when S (SLEN bytes) matches PATTERN (PLEN bytes), else 0. Case
 * sensitive. Runs in O(PLEN * SLEN) at worst, without recursion. */
int glob_match(const char *pattern, size_t plen, const char *s, size_t slen);

/* 0 when no subject can match PATTERN (PLEN bytes): it holds an empty
 * class, "[]" or a '[' that ends it (the end closes a class, as in
 * Redis), which no byte is in; else 1. */
int glob_can_match(const char *pattern, size_t plen);

#endif
