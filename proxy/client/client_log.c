/* client_log.c - owns what the log and the accounting say of a client's
 * life: the log_connections lines (one at connect, one at close, with
 * who, why, how long and how much) and each request's accounting when its
 * reply is done or refused (statistics, the slow log). It never closes or
 * answers a client. */
#include "client.h"
#include "client_int.h"

#include "config.h"
#include "log.h"
#include "server.h"
#include "slowlog.h"
#include "stats.h"

void client_note_rejected(struct request *req, int reason)
{
    req->flags |= REQ_REJECTED;
    stats_command_rejected(req->stat_row, (enum stats_reject)reason);
}

void client_note_done(struct client *c, struct request *req)
{
    uint64_t now, took;

    if (req->framed_us == 0)
        return;
    now = server_pass_now_us();
    took = now > req->framed_us ? now - req->framed_us : 0;
    stats_command_done(req->stat_row, took,
                       (req->flags & (REQ_FAILED | REQ_REJECTED)) == REQ_FAILED,
                       (req->flags & REQ_WAITS) != 0);
    /* Blocking commands stay out, as Redis leaves blocked time out. */
    if (req->slow_args != NULL && slowlog_slow(took) && !(req->flags & REQ_WAITS) &&
        !stats_row_blocks(req->stat_row))
        slowlog_note(req, now, c->addr_text, c->name, c->user);
    req->framed_us = 0;   /* counted once, whichever way its reply went */
}

void client_log_connected(const struct client *c)
{
    if (server.cfg.log_connections)
        log_notice("client %llu connected from %s%s", (unsigned long long)c->id, c->addr_text,
                   c->ssl != NULL ? " (TLS)" : "");
    else
        log_debug("client %llu connected from %s", (unsigned long long)c->id, c->addr_text);
}

void client_log_closed(const struct client *c)
{
    uint64_t age_ms = server_now_ms() - c->created_ms;

    if (!server.cfg.log_connections) {
        log_debug("client %llu closed", (unsigned long long)c->id);
        return;
    }
    log_notice("client %llu closed: %s; from %s, user %s, name %s, %llu.%03llu s, %llu commands, "
               "%llu bytes in, %llu bytes out",
               (unsigned long long)c->id,
               c->close_reason != NULL ? c->close_reason : "closed by sluice", c->addr_text,
               c->user != NULL ? c->user : "default", c->name != NULL ? c->name : "-",
               (unsigned long long)(age_ms / 1000), (unsigned long long)(age_ms % 1000),
               (unsigned long long)c->commands, (unsigned long long)c->bytes_in,
               (unsigned long long)c->bytes_out);
}
