/* respwalk.c - owns reading values out of one complete, contiguous RESP2
 * reply (see respwalk.h); it never allocates. */
#include "respwalk.h"

#include <stdlib.h>
#include <string.h>

int respwalk_line(struct respwalk *w, char *type, long long *n)
{
    const char *cr = memchr(w->p, '\r', (size_t)(w->end - w->p));
    char *num_end;

    if (cr == NULL || cr + 1 >= w->end || cr[1] != '\n' || cr == w->p)
        return -1;
    *type = w->p[0];
    *n = 0;
    if (*type == '*' || *type == ':' || *type == '$') {
        *n = strtoll(w->p + 1, &num_end, 10);
        if (num_end != cr || num_end == w->p + 1)
            return -1;
    }
    w->p = cr + 2;
    return 0;
}

int respwalk_int(struct respwalk *w, long long *v)
{
    char type;

    return respwalk_line(w, &type, v) == 0 && type == ':' ? 0 : -1;
}

int respwalk_array(struct respwalk *w, long long *count)
{
    char type;

    return respwalk_line(w, &type, count) == 0 && type == '*' && *count >= 0 ? 0 : -1;
}

int respwalk_bulk(struct respwalk *w, const char **s, size_t *len)
{
    char type;
    long long n;

    if (respwalk_line(w, &type, &n) != 0 || type != '$' || n < 0 || n > w->end - w->p - 2)
        return -1;
    *s = w->p;
    *len = (size_t)n;
    w->p += n + 2;
    return 0;
}

int respwalk_skip(struct respwalk *w, long long count)
{
    char type;
    long long n;

    while (count > 0) {
        if (respwalk_line(w, &type, &n) != 0)
            return -1;
        count--;
        if (type == '*' && n > 0) {
            count += n;
        } else if (type == '$' && n >= 0) {
            if (n > w->end - w->p - 2)
                return -1;
            w->p += n + 2;
        }
    }
    return 0;
}
