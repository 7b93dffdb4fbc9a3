/* listener.h - the listening sockets. */
#ifndef SLUICE_LISTENER_H
#define SLUICE_LISTENER_H

#include <stddef.h>

struct event_base;
struct config;

/* Listen on every configured address. Returns 0, or -1 with ERR set. */
int listener_start(struct event_base *base, const struct config *cfg, char *err, size_t errlen);
/* Stop accepting (shutdown); existing clients are not touched. */
void listener_stop(void);

#endif
