/* backend_log.c - owns what the log says of a backend connection that
 * goes down or whose login Redis refuses: the text lines, and their
 * fields (backend, reason...) for log_format = json. Decides nothing and
 * calls no other backend file. */
#include "backend_int.h"

#include "log.h"

/* Log that Redis refused CONN's login: "backend NAME" HOW WHY (JSON:
 * event backend_login_refused, backend, reason WHY). */
void backend_log_refusal(const struct backend_conn *conn, const char *how, const char *why)
{
    const struct log_field f[] = {LOG_STR("backend", conn->node->name), LOG_STR("reason", why)};

    log_event(LOG_WARNING, "backend_login_refused", f, 2, "backend %s%s%s", conn->node->name,
              how, why);
}

/* Log that a pool connection is down: one line per attempt, naming the
 * cause, and when it will try again (JSON: backend, reason, retry_ms). */
void backend_log_down(const struct backend_conn *conn, const char *why)
{
    const char *name = conn->node->name;
    int down = conn->state != BACKEND_UP;
    int ms = down && conn->refused ? BACKEND_REFUSED_RETRY_MS : conn->backoff_ms;
    const struct log_field f[] = {LOG_STR("backend", name), LOG_STR("reason", why),
                                  LOG_NUM("retry_ms", ms)};

    if (!down)
        log_event(LOG_WARNING, "backend_lost", f, 3,
                  "backend %s connection lost: %s; reconnecting in %d ms", name, why, ms);
    else if (conn->refused && !conn->node->quiet_connects &&
             conn->refused_in_row % BACKEND_REFUSED_WARN_EVERY == 1)
        log_event(LOG_WARNING, "backend_connect_failed", f, 3, "backend %s: cannot connect: "
                  "%s; next try in %d ms (refused %d times in a row)", name, why, ms,
                  conn->refused_in_row);
    else   /* quiet: sluice expects it; refused again: said every Nth time */
        log_event(conn->node->quiet_connects || conn->refused ? LOG_INFO : LOG_WARNING,
                  "backend_connect_failed", f, 3, "backend %s: cannot connect: %s; next try in "
                  "%d ms", name, why, ms);
}
