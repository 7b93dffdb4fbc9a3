/* fuzz.h - what the libFuzzer targets share: a check that aborts with a
 * message (libFuzzer saves the input as a crash), reading split sizes
 * from the head of an input, and handing an input to a loader that only
 * takes a path. */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_CHECK(cond, ...)                                                \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, \
                    #cond);                                                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            abort();                                                         \
        }                                                                    \
    } while (0)

#define FUZZ_MAX_SPLITS 16

/* How an input is cut into pieces: its first byte says how many split
 * bytes follow (0..FUZZ_MAX_SPLITS-1); each gives a piece size 1..256,
 * used in turn until the data runs out. No split bytes: one piece. */
struct fuzz_splits {
    size_t size[FUZZ_MAX_SPLITS];
    int count;
    int next;
};

/* Take the split header off *DATA / *LEN. */
static inline void fuzz_splits_take(struct fuzz_splits *s, const uint8_t **data, size_t *len)
{
    memset(s, 0, sizeof(*s));
    if (*len == 0)
        return;
    s->count = (*data)[0] % FUZZ_MAX_SPLITS;
    if ((size_t)s->count + 1 > *len)
        s->count = (int)*len - 1;
    for (int i = 0; i < s->count; i++)
        s->size[i] = (size_t)(*data)[1 + i] + 1;
    *data += 1 + s->count;
    *len -= 1 + (size_t)s->count;
}

/* The size of the next piece, at most LEFT. */
static inline size_t fuzz_splits_next(struct fuzz_splits *s, size_t left)
{
    size_t n;

    if (s->count == 0)
        return left;
    n = s->size[s->next++ % s->count];
    return n < left ? n : left;
}

/* A file of this process's own for loaders that read a path: in memory
 * (/dev/shm) where there is one, since a disk file written per input
 * makes the loaders' targets several times slower. */
static inline const char *fuzz_file_path(void)
{
    static char path[64];

    if (path[0] == '\0') {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof(path), "%s/sluice-fuzz-%d.ini", dir, (int)getpid());
    }
    return path;
}

static inline void fuzz_remove_file(void)
{
    unlink(fuzz_file_path());
}

/* Write the input to fuzz_file_path() afresh (removed at exit) and return
 * the path. */
static inline const char *fuzz_write_file(const uint8_t *data, size_t len)
{
    static int registered;
    const char *path = fuzz_file_path();
    FILE *f = fopen(path, "wb");

    FUZZ_CHECK(f != NULL, "cannot write %s", path);
    FUZZ_CHECK(fwrite(data, 1, len, f) == len, "short write to %s", path);
    fclose(f);
    if (!registered) {
        registered = 1;
        atexit(fuzz_remove_file);
    }
    return path;
}

/* Every line of TEXT (errlist text) starts with "PATH:LINE: ". */
static inline void fuzz_check_errlines(const char *text, const char *path)
{
    size_t plen = strlen(path);

    while (text != NULL && *text != '\0') {
        const char *p = text, *eol = strchr(text, '\n');
        FUZZ_CHECK(eol != NULL, "error text does not end in a newline: %s", text);
        FUZZ_CHECK(strncmp(p, path, plen) == 0 && p[plen] == ':', "no path: %.*s",
                   (int)(eol - text), text);
        p += plen + 1;
        FUZZ_CHECK(*p >= '0' && *p <= '9', "no line number: %.*s", (int)(eol - text), text);
        while (*p >= '0' && *p <= '9')
            p++;
        FUZZ_CHECK(p[0] == ':' && p[1] == ' ', "no ': ' after the line: %.*s",
                   (int)(eol - text), text);
        text = eol + 1;
    }
}

#endif
