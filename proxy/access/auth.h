/* auth.h - who each client is: the users file (users.c) loaded and
 * reloaded, AUTH and HELLO AUTH answered by sluice, and the gate every
 * request passes before the rules (NOAUTH, NOPERM). */
#ifndef SLUICE_AUTH_H
#define SLUICE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "sv.h"

struct backend_login;
struct client;
struct command;
struct config;
struct errlist;
struct evbuffer;

/* What the users file's reload needs of the client code; set once at
 * start (main.c), before the first auth_reload. */
struct auth_client_ops {
    /* The users were replaced: every client takes its user's new entry
     * (client_users_changed). */
    void (*users_changed)(void);
    /* Whether RESP3 client C is (or may be about to be) subscribed
     * (client_subscribed_resp3). */
    int (*subscribed_resp3)(const struct client *c);
};

/* Register OPS (kept, not copied). */
void auth_set_client_ops(const struct auth_client_ops *ops);

/* Load CFG's users file, or stand in for backend_password without one.
 * Returns 0, or -1 with every error (FILE:LINE: message) in ERRS. */
int auth_init(const struct config *cfg, struct errlist *errs);

/* SIGHUP / PROXY RELOAD, in two halves. auth_prepare reads CFG's users
 * file (the next config's) into *OUT, changing nothing: 0 (*OUT NULL
 * without a users file: nothing to apply), or -1 with every error in
 * ERRS. auth_commit makes SET (from auth_prepare; NULL: nothing) the
 * users, from CFG's file: connected clients get their user's new
 * permissions; those whose user was removed or disabled are closed, as
 * Redis's ACL DELUSER does. */
struct user_set;
int auth_prepare(const struct config *cfg, struct user_set **out, struct errlist *errs);
void auth_commit(const struct config *cfg, struct user_set *set);

void auth_shutdown(void);

/* Without users of sluice's own, AUTH goes to Redis: 1 when C has not
 * logged in there and Redis wants a login (backend_wants_auth), so what
 * sluice answers itself must wait for it (-NOAUTH, as Redis). */
int auth_redis_login_needed(const struct client *c);

/* users_in_redis: the login C's scripts run as (its user's Redis user,
 * redisusers.c), or NULL when C's user has none (it may do everything,
 * or may not run scripts through sluice). */
const struct backend_login *auth_script_login(const struct client *c);

/* Redis accepted C's AUTH (or HELLO 2 AUTH): C is logged in there. */
void auth_redis_logged_in(struct client *c);

/* A LOCK that waits, or a KEEP that renews, is checked again before each
 * try: a reload may have narrowed C's user since the gate let it in.
 * NULL when C may still use sluice's verb VERB ("lock", "renew") on KEY
 * (LEN bytes); else the refusal, written into BUF (SIZE bytes). */
const char *auth_lock_refusal(const struct client *c, const char *verb, const char *key,
                              size_t len, char *buf, size_t size);

/* Whether sluice answers AUTH and HELLO AUTH itself (a users file or a
 * backend_password): else they go to Redis as they are. */
int auth_local(void);

/* Whether a user of the users file sets read_from to other than primary. */
int auth_reads_replicas(void);

/* Whether sluice's own users (the users file, or backend_password's one
 * user "default") include the one named NAME (LEN bytes); 0 when sluice
 * has no users of its own. */
int auth_has_user(const char *name, size_t len);

/* A new client, or one after RESET: the user "default", logged in when
 * that needs no password. */
void auth_client_start(struct client *c);

/* A client a hand-over passed on (client_handover.c): it runs as NAME,
 * logged in (AUTHENTICATED) as it was with the old sluice, which checked
 * its password. Returns 0, or -1 when this sluice has no such user (C
 * keeps "default"). */
int auth_adopt(struct client *c, const char *name, int authenticated);

/* AUTH/HELLO AUTH: log C in as USER (NULL: "default") with PASS. Returns
 * 0 (C now runs as that user) or -1: wrong, counted and logged, C keeps
 * the user it had. */
int auth_login(struct client *c, const struct sv *user, struct sv pass);

/* Whether the user "default" needs no password (AUTH <password> is then
 * refused, as Redis does). */
int auth_default_nopass(void);

/* Whether C, not yet logged in, must authenticate first. */
int auth_required(const struct client *c);

/* The gate, for clients whose c->auth_checks is set: 0 when C may run
 * the request CMD (commands_resolve's answer, NULL for a command sluice
 * does not know) with ARGV[0..ARGC-1]; else -1 with Redis's error reply
 * text ('-' included) in ERR. */
int auth_admit(struct client *c, const struct command *cmd, int argc, const struct sv *argv,
               char *err, size_t errlen);

/* Bumped (never 0) each time a reloaded users file replaces the users: a
 * request the gate passed under another generation, and not yet sent, is
 * judged again before it is (permissions apply as a command runs, as in
 * Redis). Read inline on every request. */
extern uint32_t auth_users_generation;

/* The users file was reloaded: point C at its user's new entry; a
 * transaction C has open fails at EXEC when the user lost a grant. Returns
 * -1 when C must be closed (its user is gone or disabled): C then has no
 * user and every request of its is refused until it is. */
int auth_rebind(struct client *c);

/* "auth_*" lines for PROXY INFO: failures per user. */
void auth_write_info(struct evbuffer *out);

#endif
