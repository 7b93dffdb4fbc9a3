/* safefile.c - owns the checks before a file is read on the loop: a
 * regular file of bounded size, opened without waiting. It does not read
 * or parse anything itself. */
#include "safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *safefile_open(const char *path, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    FILE *f = NULL;

    if (fd < 0)
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
    else if (fstat(fd, &st) != 0)
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        snprintf(err, errlen, "not a regular file");
    else if (st.st_size > SAFEFILE_MAX_BYTES)
        snprintf(err, errlen, "larger than %d bytes", SAFEFILE_MAX_BYTES);
    else if ((f = fdopen(fd, "r")) == NULL)
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
    if (f == NULL && fd >= 0)
        close(fd);
    return f;
}

int safefile_check(const char *path, char *err, size_t errlen)
{
    FILE *f = safefile_open(path, err, errlen);

    if (f == NULL)
        return -1;
    fclose(f);
    return 0;
}
