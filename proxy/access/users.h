/* users.h - the users file ([user NAME] sections): who may log in with which
 * password, and which commands, keys and channels each user may use, with
 * Redis 7.0 ACL semantics. Loading builds a whole new set; the checks are
 * cheap (a bit test, globs only when needed) and never allocate. */
#ifndef SLUICE_USERS_H
#define SLUICE_USERS_H

#include <stddef.h>

#include "commands.h"
#include "errlist.h"
#include "sv.h"

/* Redis 7.0's own reply texts for refusals (error replies, '-' included). */
#define USERS_ERR_NOPERM_CMD_FMT "-NOPERM this user has no permissions to run the '%s' command"
#define USERS_ERR_NOPERM_KEYS \
    "-NOPERM this user has no permissions to access one of the keys used as arguments"
#define USERS_ERR_NOPERM_CHANNELS \
    "-NOPERM this user has no permissions to access one of the channels used as arguments"
/* Sentinel's channels (every Sentinel reads "__sentinel__:hello" on each
 * node it monitors): no client publishes there through sluice, and no
 * Redis user sluice mirrors may (users_redis_rules). */
#define USERS_SENTINEL_CHANNELS "__sentinel__:"
#define USERS_ERR_NOPERM_SENTINEL                                                          \
    "-NOPERM no client may publish on Sentinel's channels (__sentinel__:*) through sluice: " \
    "a forged hello could move the primary"
#define USERS_ERR_WRONGPASS "-WRONGPASS invalid username-password pair or user is disabled."
#define USERS_ERR_NOAUTH "-NOAUTH Authentication required."

/* The user Redis and sluice use for AUTH <password> and for clients that
 * never authenticate. */
#define USERS_DEFAULT_NAME "default"

struct user_set;
struct user;
struct evbuffer;

/* Read the users file PATH into a new set. Every problem is added to ERRS
 * as "FILE:LINE: message" (all of them, not only the first); then NULL is
 * returned and nothing is kept. commands_init() must have run. */
struct user_set *users_load(const char *path, struct errlist *errs);
void users_free(struct user_set *set);

int users_count(const struct user_set *set);

/* The set that stands in for the backend's credentials when there is no
 * users file: one user NAME with PASSWORD and every permission. NULL on
 * OOM. */
struct user_set *users_backend_set(const char *name, const char *password);

/* The user at INDEX (0 <= INDEX < users_count). */
const struct user *users_at(const struct user_set *set, int index);

/* 1 when U may run every command on every key and channel: no check is
 * needed per request. */
int users_unrestricted(const struct user *u);

/* 1 when U, enabled, may run a script or function (EVAL, EVALSHA, FCALL
 * or their _RO forms) but lacks some permission: with users_in_redis its
 * scripts run in Redis as a user of its own (redisusers.c). */
int users_scripts_in_redis(const struct user *u);

/* U's command, key and channel grants as items of Redis's ACL SETUSER,
 * sluice's own (@lock, LOCK, UNLOCK, RENEW, PROXY) left out, each added to
 * OUT as a RESP bulk string: "nocommands", U's commands items in order,
 * "resetkeys", "allkeys" or "~glob"..., "resetchannels", then "&glob"...
 * never reaching Sentinel's channels (all channels: every one but those,
 * as globs; a glob of U's that may reach one is left out). Returns how
 * many. */
int users_redis_rules(const struct user *u, struct evbuffer *out);

/* The user named NAME (LEN bytes, case sensitive, as Redis), or NULL. */
const struct user *users_find(const struct user_set *set, const char *name, size_t len);

/* Redis's rule for connections that have not authenticated: 1 when they
 * must (no "default" user, or it has passwords, or it is disabled), 0 when
 * they run as "default" at once. SET NULL (no users file) gives 0. */
int users_auth_required(const struct user_set *set);

const char *users_name(const struct user *u);
int users_enabled(const struct user *u);
int users_nopass(const struct user *u);
/* U's read_from (enum config_read_from), or -1 when its section sets none
 * (the [proxy] one applies). */
int users_read_from(const struct user *u);

/* 1 when U may log in with password PW (LEN bytes): U is enabled and
 * either nopass or PW's SHA-256 equals one of U's digests. Every digest is
 * compared in constant time, whatever matches; never logs PW. U NULL (an
 * unknown user) gives 0 after the same hashing work. */
int users_check_password(const struct user *u, const char *pw, size_t len);

/* 1 when U may run the request ARGV[0..ARGC-1]. CMD is
 * commands_resolve(argc, argv): the subcommand when there is one. CMD NULL:
 * sluice's own verbs (LOCK, UNLOCK, RENEW, PROXY ...) by argv[0]; any other
 * unknown command (a module's) only with +@all. As in Redis, commands
 * flagged no_auth (AUTH, HELLO, QUIT, RESET) always pass, and requests that
 * Redis refuses before its ACL check (wrong arity, a container without a
 * known subcommand) pass so that Redis's own error reaches the client. */
int users_may_run(const struct user *u, const struct command *cmd, const struct sv *argv,
                  int argc);

/* 1 when every key of the request (commands_keys) matches one of U's key
 * globs. Keyless requests and CMD NULL pass; so do SPUBLISH/SSUBSCRIBE's
 * shard channels, which Redis checks as channels, not keys. */
int users_may_access_keys(const struct user *u, const struct command *cmd, int argc,
                          const struct sv *argv);

/* 1 when U may use every key. */
int users_all_keys(const struct user *u);

/* 1 when KEY (LEN bytes) matches one of U's key globs: for keys sluice
 * finds itself (LOCK's name). */
int users_may_access_key(const struct user *u, const char *key, size_t len);

/* SORT's or SORT_RO's option that U may not use: "BY" (with a pattern)
 * or "GET" when U lacks access to every key, as Redis 7.0 refuses them;
 * NULL when the request may go on (other commands always). */
const char *users_sort_denied_option(const struct user *u, const struct command *cmd,
                                     int argc, const struct sv *argv);

/* 1 when CMD (PUBLISH, SPUBLISH) publishes on one of Sentinel's channels
 * (USERS_SENTINEL_CHANNELS): refused to everyone, whatever their grants. */
int users_publishes_reserved(const struct command *cmd, int argc, const struct sv *argv);

/* 1 when the channels of PUBLISH, SPUBLISH, SUBSCRIBE, SSUBSCRIBE and
 * PSUBSCRIBE are allowed: a channel must match one of U's channel globs; a
 * PSUBSCRIBE pattern must equal one of them byte for byte (Redis 7.0's
 * rule). Other commands (the UNSUBSCRIBE family included) pass. */
int users_may_access_channels(const struct user *u, const struct command *cmd, int argc,
                              const struct sv *argv);

/* 1 when NEW may lack a channel grant OLD had (a glob of OLD's that NEW
 * does not have, byte for byte, or all channels taken away). */
int users_channels_narrowed(const struct user *old, const struct user *new_user);

/* 1 when NEW may lack any grant OLD had: a command, a sluice verb, a key
 * or channel glob (compared byte for byte, so a glob rewritten wider also
 * counts), or every command, key or channel. */
int users_narrowed(const struct user *old, const struct user *new_user);

/* CMD's name as Redis writes it in NOPERM replies: lower case, a
 * subcommand as "config|set". */
const char *users_denied_command_name(const struct command *cmd);

/* The same for any request, CMD NULL included: argv[0] in lower case, and
 * "proxy|sub" for PROXY. Writes into BUF (SIZE bytes, truncated) and
 * returns it. */
const char *users_denied_name(const struct command *cmd, int argc, const struct sv *argv,
                              char *buf, size_t size);

#endif
