/* server.h - process-wide state: the event loop, the loaded config, the
 * start time and whether sluice is shutting down. */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <stddef.h>
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
    /* Reloads (SIGHUP, PROXY RELOAD) that applied and that failed and
     * changed nothing: config_reloads_total{result="ok"|"error"}. */
    unsigned long long config_reloads_ok;
    unsigned long long config_reloads_error;
};

extern struct server server;

/* Microseconds and milliseconds of the one monotonic clock. */
uint64_t server_now_us(void);
uint64_t server_now_ms(void);

/* The same clock read once per loop pass, at its first use: for what runs
 * per request (rule buckets, idle times), where a clock read each time
 * costs more than the microseconds a pass lasts matter. The main loop
 * calls server_pass_end after every pass. */
uint64_t server_pass_now_us(void);
void server_pass_end(void);

struct errlist;

/* Reads again what a reload reads, adding every error to ERRS; returns 0
 * when all loaded and applied, else -1 (nothing changed). NOTE (SIZE
 * bytes) gets the keys that changed but wait for a restart ("" if none). */
typedef int server_reload_fn(struct errlist *errs, char *note, size_t size);

/* Set once at start (main.c, which may name every layer): what
 * server_reload runs. */
void server_set_reload(server_reload_fn *fn);

/* SIGHUP and PROXY RELOAD: read sluice.ini, the rule file, the users file
 * and the TLS certificates and keys again (through the function
 * server_set_reload gave; none set: nothing to read, 0), all or nothing:
 * with any error nothing changes and every error is in ERRS (FILE:LINE:
 * message). NOTE as server_reload_fn. Counts the reload in
 * config_reloads_ok or config_reloads_error. Returns 0 when applied, else
 * -1. */
int server_reload(struct errlist *errs, char *note, size_t size);

#endif
