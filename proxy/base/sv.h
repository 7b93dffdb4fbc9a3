/* sv.h - a borrowed view of bytes (pointer + length), used for request
 * arguments. A view never owns its bytes. */
#ifndef SLUICE_SV_H
#define SLUICE_SV_H

#include <stddef.h>
#include <strings.h>

struct sv {
    const char *ptr;
    size_t len;
};

/* Case-insensitive comparison of a view with a NUL-terminated word. */
static inline int sv_ieq(struct sv s, const char *word)
{
    size_t n = 0;
    while (word[n] != '\0')
        n++;
    return s.len == n && strncasecmp(s.ptr, word, n) == 0;
}

#endif
