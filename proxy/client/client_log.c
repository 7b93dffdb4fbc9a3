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

/* The log_connections lines carry their parts as fields too (log_format
 * = json): client, addr, tls; and at close user, name, reason, duration,
 * commands and bytes. The text is the same at debug and at notice. */
void client_log_connected(const struct client *c)
{
    const struct log_field f[] = {LOG_NUM("client", c->id), LOG_STR("addr", c->addr_text),
                                  LOG_BOOL("tls", c->ssl != NULL)};

    if (server.cfg.log_connections)
        log_event(LOG_NOTICE, "client_connected", f, 3, "client %llu connected from %s%s",
                  (unsigned long long)c->id, c->addr_text, c->ssl != NULL ? " (TLS)" : "");
    else if (log_current_level <= LOG_DEBUG)
        log_event(LOG_DEBUG, "client_connected", f, 3, "client %llu connected from %s",
                  (unsigned long long)c->id, c->addr_text);
}

void client_log_closed(const struct client *c)
{
    uint64_t age_ms = server_now_ms() - c->created_ms;
    const char *reason = c->close_reason != NULL ? c->close_reason : "closed by sluice";
    const char *user = c->user != NULL ? c->user : "default";
    const struct log_field f[] = {
        LOG_NUM("client", c->id), LOG_STR("addr", c->addr_text), LOG_STR("user", user),
        LOG_STR("name", c->name), LOG_STR("reason", reason), LOG_MS("duration", age_ms),
        LOG_NUM("commands", c->commands), LOG_NUM("bytes_in", c->bytes_in),
        LOG_NUM("bytes_out", c->bytes_out)};

    if (!server.cfg.log_connections) {
        if (log_current_level <= LOG_DEBUG)
            log_event(LOG_DEBUG, "client_closed", f, 9, "client %llu closed",
                      (unsigned long long)c->id);
        return;
    }
    log_event(LOG_NOTICE, "client_closed", f, 9,
              "client %llu closed: %s; from %s, user %s, name %s, %llu.%03llu s, %llu commands, "
              "%llu bytes in, %llu bytes out",
              (unsigned long long)c->id, reason, c->addr_text, user,
              c->name != NULL ? c->name : "-", (unsigned long long)(age_ms / 1000),
              (unsigned long long)(age_ms % 1000), (unsigned long long)c->commands,
              (unsigned long long)c->bytes_in, (unsigned long long)c->bytes_out);
}
