/* pidfile.h - the `pidfile` key: the process id written where an init
 * script or monitor looks for it. */
#ifndef SLUICE_PIDFILE_H
#define SLUICE_PIDFILE_H

#include <stddef.h>

/* Write this process's id and a newline to PATH, atomically: into a
 * temporary file beside it, then renamed over it, so a reader never sees
 * a half-written or empty file. Returns 0, or -1 with ERR filled. */
int pidfile_write(const char *path, char *err, size_t errlen);

/* Remove PATH if it still holds this process's id: a newer sluice that
 * took over (hand-over restart) has written its own, which stays. */
void pidfile_remove(const char *path);

#endif
