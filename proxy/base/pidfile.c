/* pidfile.c - owns the pid file: written whole by rename, removed only by
 * the process it names. Knows nothing of the config or the log. */
#include "pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pidfile_write(const char *path, char *err, size_t errlen)
{
    char tmp[4096], text[32];
    int fd, ok, len = snprintf(text, sizeof(text), "%d\n", (int)getpid());

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
        snprintf(err, errlen, "pidfile %s: name too long", path);
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "pidfile %s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    ok = write(fd, text, (size_t)len) == len;
    if (close(fd) != 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errlen, "pidfile %s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "pidfile %s: cannot rename %s over it: %s", path, tmp,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

void pidfile_remove(const char *path)
{
    char text[32] = "";
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return;
    if (fgets(text, sizeof(text), f) != NULL && atoi(text) == (int)getpid())
        unlink(path);
    fclose(f);
}
