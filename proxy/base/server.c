/* server.c - owns the process-wide state shared by the modules, the
 * monotonic clock they read, and the reload entry point (whose sequence
 * main.c registers, since it names modules of every layer). */
#include "server.h"

#include <time.h>

#include "metrics.h"

struct server server;

/* 0: not read yet in this loop pass. */
static uint64_t server_pass_clock_us;

static server_reload_fn *server_reload_hook;   /* from server_set_reload */

uint64_t server_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t server_now_ms(void)
{
    return server_now_us() / 1000;
}

uint64_t server_pass_now_us(void)
{
    if (server_pass_clock_us == 0)
        server_pass_clock_us = server_now_us();
    return server_pass_clock_us;
}

void server_pass_end(void)
{
    server_pass_clock_us = 0;
}

void server_set_reload(server_reload_fn *fn)
{
    server_reload_hook = fn;
}

int server_reload(struct errlist *errs, char *note, size_t size)
{
    int rc = 0;

    if (size > 0)
        note[0] = '\0';
    if (server_reload_hook != NULL)
        rc = server_reload_hook(errs, note, size);
    if (rc == 0)
        server.config_reloads_ok++;
    else
        server.config_reloads_error++;
    (*metrics_counter(METRIC_config_reloads_total, rc == 0 ? "ok" : "error", NULL))++;
    return rc;
}
