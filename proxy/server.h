/* server.h - process-wide state: the event loop, the loaded config, the
 * start time and whether sluice is shutting down. */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <stdint.h>
#include <time.h>

#include "config.h"

#define SLUICE_VERSION "0.1.0"

struct event_base;

struct server {
    struct event_base *base;
    struct config cfg;
    time_t start_time;
    int shutting_down;
};

extern struct server server;

/* Microseconds and milliseconds of the one monotonic clock. */
uint64_t server_now_us(void);
uint64_t server_now_ms(void);

#endif
