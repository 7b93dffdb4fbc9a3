/* safefile.h - opening a file sluice reads while it serves (config, rules,
 * users, TLS files on reload) so that the read cannot hang the loop: a
 * FIFO, a device (/dev/zero) or a huge file is refused, not read. */
#ifndef SLUICE_SAFEFILE_H
#define SLUICE_SAFEFILE_H

#include <stddef.h>
#include <stdio.h>

/* The most bytes sluice reads from one such file. */
#define SAFEFILE_MAX_BYTES (16 * 1024 * 1024)

/* Open PATH for reading when it is a regular file (symbolic links
 * followed) of at most SAFEFILE_MAX_BYTES; opening never waits (a FIFO
 * without a writer). Returns the stream, or NULL with ERR set: "cannot
 * open: reason", "not a regular file", "larger than 16777216 bytes". */
FILE *safefile_open(const char *path, char *err, size_t errlen);

/* safefile_open, then close: for files a library opens itself by name
 * (OpenSSL's). Returns 0, or -1 with ERR set. */
int safefile_check(const char *path, char *err, size_t errlen);

#endif
