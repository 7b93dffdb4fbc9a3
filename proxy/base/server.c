/* server.c - owns the process-wide state shared by the modules and the
 * monotonic clock they read. */
#include "server.h"

#include <time.h>

#include "auth.h"
#include "errlist.h"
#include "throttle.h"
#include "tls.h"

struct server server;

/* 0: not read yet in this loop pass. */
static uint64_t server_pass_clock_us;

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

int server_reload(struct errlist *errs)
{
    int rc = 0;

    /* Each file on its own: a bad one keeps its old contents. */
    if (throttle_reload(errs) != 0)
        rc = -1;
    if (auth_reload(errs) != 0)
        rc = -1;
    if (tls_reload(&server.cfg, errs) != 0)
        rc = -1;
    return rc;
}
