/* auth.c - owns who each client is: the current user set (the users file,
 * or one user standing in for backend_password), logging in (AUTH, HELLO
 * AUTH), and the gate before the rules, with Redis 7.0's own replies:
 *
 *   request -> placement -> auth_admit -> rules (throttle) -> dispatch
 *                not logged in, login needed -> -NOAUTH (unknown command and
 *                                               arity errors first, as Redis)
 *                logged in -> command bits -> key globs -> channel globs
 *                          -> SORT's BY/GET only with every key
 *                          -> scripts only with every permission, or
 *                             (users_in_redis) as the user's Redis user
 *                          -> -NOPERM ..., nothing sent, no token taken
 *
 * A client whose user may do everything has c->auth_checks off: then the
 * gate costs one branch per request. It must not decide where a request
 * runs (placement.c) or answer it (local.c).
 */
#include "auth.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "commands.h"
#include "config.h"
#include "errlist.h"
#include "learned.h"
#include "log.h"
#include "metrics.h"
#include "placement.h"
#include "redisusers.h"
#include "server.h"
#include "users.h"

/* A restricted user's script or function call (auth_runs_script). */
#define AUTH_ERR_NOPERM_SCRIPTS                                                              \
    "-NOPERM this user has no permissions to run scripts through sluice: a script runs as " \
    "sluice's backend user and could reach any key or command; scripts need commands = "    \
    "+@all, keys = * and channels = *"

/* users_in_redis: a script of a restricted user where it would run on
 * the client's own connection, logged in as sluice's backend user. */
#define AUTH_ERR_NOPERM_SCRIPTS_PRIVATE                                                      \
    "-NOPERM this user's scripts run through sluice only on its Redis user's shared "       \
    "connections: not inside MULTI, nor once the connection holds session state (SELECT, " \
    "WATCH, CLIENT TRACKING, pub/sub...); use another connection"

/* Redis's reply to SORT's BY (with a pattern) or GET from a user without
 * access to every key (users_sort_denied_option): those read other keys.
 * A Redis 7.0 cluster node refuses them to everyone, and says so first. */
#define AUTH_ERR_SORT_OPTION_FMT \
    "-ERR %s option of SORT denied due to insufficient ACL permissions."
#define AUTH_ERR_SORT_OPTION_CLUSTER_FMT "-ERR %s option of SORT denied in Cluster mode."

/* Failed logins of one user name of the current set. */
struct auth_failures {
    char *name;
    unsigned long long count;
};

static struct user_set *auth_users;          /* NULL: AUTH goes to Redis */
static char *auth_users_path;                /* the users file; NULL: none */
static struct auth_failures *auth_failed;    /* per user of auth_users, same index */
static unsigned long long auth_failed_unknown; /* for names that are no user */
static uint64_t auth_last_log_ms;
static unsigned long long auth_unlogged;     /* failures since the last log line */
static const struct auth_client_ops *auth_client; /* from auth_set_client_ops */

void auth_set_client_ops(const struct auth_client_ops *ops)
{
    auth_client = ops;
}

int auth_local(void)
{
    return auth_users != NULL;
}

int auth_reads_replicas(void)
{
    for (int i = 0; auth_users != NULL && i < users_count(auth_users); i++) {
        if (users_read_from(users_at(auth_users, i)) > CONFIG_READ_PRIMARY)
            return 1;
    }
    return 0;
}

/* Counters for SET's users, carried over by name from OLD (may be NULL). */
static struct auth_failures *auth_failures_for(const struct user_set *set,
                                               const struct auth_failures *old,
                                               const struct user_set *old_set)
{
    int n = users_count(set);
    struct auth_failures *f = calloc((size_t)n + 1, sizeof(*f));

    for (int i = 0; f != NULL && i < n; i++) {
        f[i].name = strdup(users_name(users_at(set, i)));
        for (int k = 0; old != NULL && k < users_count(old_set); k++) {
            if (strcmp(old[k].name, f[i].name) == 0)
                f[i].count = old[k].count;
        }
    }
    return f;
}

static void auth_failures_free(struct auth_failures *f, int n)
{
    for (int i = 0; f != NULL && i < n; i++)
        free(f[i].name);
    free(f);
}

static struct user_set *auth_load(const struct config *cfg, struct errlist *errs)
{
    if (cfg->users != NULL)
        return users_load(cfg->users, errs);
    if (cfg->backend_password == NULL)
        return NULL;
    /* No users file: the backend's own credentials, and every permission,
     * so clients that sent Redis its password go on as before and nobody
     * without it gets in. */
    struct user_set *set = users_backend_set(
        cfg->backend_user != NULL ? cfg->backend_user : USERS_DEFAULT_NAME,
        cfg->backend_password);
    if (set == NULL)
        errlist_add(errs, cfg->path, 0, "out of memory");
    return set;
}

int auth_init(const struct config *cfg, struct errlist *errs)
{
    int before = errs->count;

    auth_users = auth_load(cfg, errs);
    if (errs->count != before)
        return -1;
    auth_users_path = cfg->users != NULL ? strdup(cfg->users) : NULL;
    if (auth_users != NULL)
        auth_failed = auth_failures_for(auth_users, NULL, NULL);
    redisusers_init(cfg->users_in_redis && cfg->users != NULL);
    redisusers_sync(auth_users);
    return 0;
}

int auth_prepare(const struct config *cfg, struct user_set **out, struct errlist *errs)
{
    *out = NULL;
    if (cfg->users == NULL)
        return 0;   /* no users file: nothing to read again */
    *out = users_load(cfg->users, errs);
    return *out != NULL ? 0 : -1;
}

/* metrics_family_retain's question: whether the user VALUES[0] is in
 * the set CTX ("default", a client not logged in yet, always is). */
static int auth_user_kept(void *ctx, const char *const *values)
{
    return strcmp(values[0], "default") == 0 ||
           users_find(ctx, values[0], strlen(values[0])) != NULL;
}

uint32_t auth_users_generation = 1;

void auth_commit(const struct config *cfg, struct user_set *set)
{
    struct user_set *old = auth_users;
    struct auth_failures *failed;

    if (set == NULL)
        return;
    free(auth_users_path);
    auth_users_path = strdup(cfg->users);
    failed = auth_failures_for(set, auth_failed, old);
    auth_failures_free(auth_failed, users_count(old));
    auth_failed = failed;
    auth_users = set;
    if (++auth_users_generation == 0)
        auth_users_generation = 1;
    redisusers_sync(set);   /* before any client's next script */
    auth_client->users_changed();   /* every client lets go of OLD's users */
    /* A removed user's series goes: /metrics stays bounded by the users
     * there are (a kept one's counts go on; the clients of a removed one
     * were closed just now). */
    metrics_family_retain(METRIC_user_commands_total, auth_user_kept, set);
    users_free(old);
    log_notice("users file %s reloaded: %d users", auth_users_path, users_count(set));
}

void auth_shutdown(void)
{
    auth_failures_free(auth_failed, users_count(auth_users));
    auth_failed = NULL;
    users_free(auth_users);
    auth_users = NULL;
    free(auth_users_path);
    auth_users_path = NULL;
    redisusers_free();
}

const struct backend_login *auth_script_login(const struct client *c)
{
    const struct user *u = c->auth_user;

    if (auth_users_path == NULL || u == NULL || !c->auth_checks || users_unrestricted(u))
        return NULL;
    return redisusers_login(users_name(u));
}

/* Whether C's requests must pass auth_admit: it is not logged in, or its
 * user may not do everything. */
static void auth_update_checks(struct client *c)
{
    c->auth_checks = auth_users != NULL &&
                     (c->auth_user == NULL || !users_unrestricted(c->auth_user) ||
                      (!c->authenticated && auth_required(c)));
}

/* Make C run as NAME (the user itself, for the rules' match_user). */
static void auth_set_user(struct client *c, const char *name, int authenticated)
{
    if (c->user == NULL || strcmp(c->user, name) != 0) {
        char *copy = strdup(name);
        if (copy != NULL) {
            free(c->user);
            c->user = copy;
        }
    }
    c->authenticated = authenticated;
    c->auth_user = users_find(auth_users, name, strlen(name));
    auth_update_checks(c);
}

int auth_has_user(const char *name, size_t len)
{
    return auth_users != NULL && users_find(auth_users, name, len) != NULL;
}

void auth_client_start(struct client *c)
{
    auth_set_user(c, USERS_DEFAULT_NAME, 0);
}

int auth_adopt(struct client *c, const char *name, int authenticated)
{
    if (auth_users != NULL && users_find(auth_users, name, strlen(name)) == NULL)
        return -1;
    auth_set_user(c, name, authenticated);
    return 0;
}

int auth_default_nopass(void)
{
    const struct user *def = users_find(auth_users, USERS_DEFAULT_NAME,
                                        sizeof(USERS_DEFAULT_NAME) - 1);

    return def != NULL && users_nopass(def);
}

int auth_required(const struct client *c)
{
    return !c->authenticated && users_auth_required(auth_users);
}

int auth_redis_login_needed(const struct client *c)
{
    return auth_users == NULL && !c->authenticated && backend_wants_auth();
}

void auth_redis_logged_in(struct client *c)
{
    if (auth_users == NULL)
        c->authenticated = 1;
}

const char *auth_lock_refusal(const struct client *c, const char *verb, const char *key,
                              size_t len, char *buf, size_t size)
{
    const struct user *u = c->auth_user;
    struct sv name = {verb, strlen(verb)};

    if (!c->auth_checks)
        return NULL;
    if (auth_required(c) || u == NULL || !users_enabled(u))
        snprintf(buf, size, "%s", USERS_ERR_NOAUTH);
    else if (!users_may_run(u, NULL, &name, 1))
        snprintf(buf, size, USERS_ERR_NOPERM_CMD_FMT, verb);
    else if (!users_may_access_key(u, key, len))
        snprintf(buf, size, "%s", USERS_ERR_NOPERM_KEYS);
    else
        return NULL;
    return buf;
}

/* A user name fit for the log: printable, not too long. */
static void auth_log_name(char *out, size_t size, const char *name, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len && n + 1 < size && i < 64; i++)
        out[n++] = name[i] >= ' ' && name[i] <= '~' ? name[i] : '?';
    out[n] = '\0';
}

/* Count a failed login of NAME (LEN bytes) by C; log at most once a
 * second, never the password. */
static void auth_count_failure(const struct client *c, const char *name, size_t len)
{
    uint64_t now = server_now_ms();
    char shown[80];
    int found = 0;

    for (int i = 0; auth_failed != NULL && i < users_count(auth_users); i++) {
        if (strlen(auth_failed[i].name) == len && memcmp(auth_failed[i].name, name, len) == 0) {
            auth_failed[i].count++;
            (*metrics_counter(METRIC_auth_failures_total, auth_failed[i].name, NULL))++;
            found = 1;
        }
    }
    if (!found) {
        auth_failed_unknown++;   /* a name from the wire is no label value: unbounded */
        (*metrics_counter(METRIC_auth_failures_total, "unknown", NULL))++;
    }
    auth_unlogged++;
    if (now - auth_last_log_ms < 1000)
        return;
    auth_log_name(shown, sizeof(shown), name, len);
    log_notice("authentication failed for user '%s' from %s (%llu failures in the last "
               "log interval)", shown, c->addr_text, auth_unlogged);
    auth_last_log_ms = now;
    auth_unlogged = 0;
}

int auth_login(struct client *c, const struct sv *user, struct sv pass)
{
    struct sv name = user != NULL ? *user : (struct sv){USERS_DEFAULT_NAME,
                                                         sizeof(USERS_DEFAULT_NAME) - 1};
    const struct user *u = users_find(auth_users, name.ptr, name.len);
    char copy[512];

    /* Checked (and hashed) the same way for an unknown user. */
    if (!users_check_password(u, pass.ptr, pass.len) || name.len >= sizeof(copy)) {
        auth_count_failure(c, name.ptr, name.len);
        return -1;
    }
    memcpy(copy, name.ptr, name.len);
    copy[name.len] = '\0';
    auth_set_user(c, copy, 1);
    return 0;
}

/* Whether subscriber C may have lost a channel it listens to when its
 * user becomes U: Redis closes such clients. sluice does not keep the
 * channels, so any channel grant taken away closes every subscriber. */
static int auth_subscriber_lost_channels(const struct client *c, const struct user *u)
{
    int subscribed = ((c->flags & CLIENT_PASSTHROUGH) && !(c->flags & CLIENT_MONITOR)) ||
                     (c->resp == 3 && auth_client->subscribed_resp3(c));

    return subscribed && c->auth_user != NULL && u != NULL &&
           users_channels_narrowed(c->auth_user, u);
}

int auth_rebind(struct client *c)
{
    const char *name = c->user != NULL ? c->user : USERS_DEFAULT_NAME;
    const struct user *u = users_find(auth_users, name, strlen(name));

    if ((c->authenticated && (u == NULL || !users_enabled(u))) ||
        auth_subscriber_lost_channels(c, u)) {
        log_notice("client %llu (%s) closed: its user '%s' was removed or disabled, or "
                   "lost channels it may be subscribed to",
                   (unsigned long long)c->id, c->addr_text, name);
        c->auth_user = NULL;   /* the old set is freed next: refuse all until closed */
        c->auth_checks = 1;
        return -1;
    }
    /* Redis checks queued commands again at EXEC; sluice checked them as
     * they were queued, so a narrowed user's transaction must fail. */
    if ((c->flags & CLIENT_IN_MULTI) && c->auth_user != NULL && u != NULL &&
        users_narrowed(c->auth_user, u))
        c->flags |= CLIENT_MULTI_DIRTY;
    auth_set_user(c, name, c->authenticated);
    return 0;
}

/* Redis's "unknown command" reply: the name and the first arguments, up
 * to 128 bytes of them, quoted. */
static void auth_unknown_command(char *err, size_t errlen, int argc, const struct sv *argv)
{
    size_t n = (size_t)snprintf(err, errlen, "-ERR unknown command '%.*s', with args beginning "
                                "with: ", argv[0].len > 128 ? 128 : (int)argv[0].len,
                                argv[0].ptr);
    size_t args = 0;

    for (int i = 1; i < argc && args < 128 && n < errlen; i++) {
        int room = 128 - (int)args;
        int len = argv[i].len < (size_t)room ? (int)argv[i].len : room;
        int w = snprintf(err + n, errlen - n, "'%.*s' ", len, argv[i].ptr != NULL ? argv[i].ptr : "");
        n += (size_t)w;
        args += (size_t)w;
    }
}

/* What Redis answers before it looks at authentication: an unknown
 * command, an unknown subcommand, a wrong number of arguments. Returns
 * -1 with the reply in ERR, 0 when the request gets that far. */
static int auth_precheck(const struct command *cmd, int argc, const struct sv *argv, char *err,
                         size_t errlen)
{
    if (cmd == NULL) {
        const struct learned_command *learned = learned_lookup(argv[0].ptr, argv[0].len);
        if (learned != NULL && learned->known)
            return 0;
        auth_unknown_command(err, errlen, argc, argv);
        return -1;
    }
    if (cmd->subcommand_count > 0 && argc >= 2) {
        char upper[32];
        size_t n = 0;
        for (; cmd->name[n] != '\0' && n + 1 < sizeof(upper); n++)
            upper[n] = cmd->name[n] >= 'a' && cmd->name[n] <= 'z' ? (char)(cmd->name[n] - 32)
                                                                  : cmd->name[n];
        upper[n] = '\0';
        snprintf(err, errlen, "-ERR unknown subcommand '%.*s'. Try %s HELP.",
                 argv[1].len > 128 ? 128 : (int)argv[1].len, argv[1].ptr, upper);
        return -1;
    }
    if (cmd->arity >= 0 ? argc != cmd->arity : argc < -cmd->arity) {
        snprintf(err, errlen, "-ERR wrong number of arguments for '%s' command", cmd->name);
        return -1;
    }
    return 0;
}

/* PROXY and the lock verbs: sluice's own, in no command table. */
static int auth_is_sluice_verb(struct sv name)
{
    return sv_ieq(name, "proxy") || sv_ieq(name, "lock") || sv_ieq(name, "unlock") ||
           sv_ieq(name, "renew");
}

/* A client not logged in where a login is needed: only AUTH, HELLO, QUIT,
 * RESET (flagged no_auth by Redis) and PROXY PING get through. */
static int auth_admit_anonymous(const struct command *cmd, int argc, const struct sv *argv,
                                char *err, size_t errlen)
{
    if (cmd == NULL && sv_ieq(argv[0], "proxy") && argc == 2 && sv_ieq(argv[1], "ping"))
        return 0;
    if (cmd == NULL && auth_is_sluice_verb(argv[0])) {
        snprintf(err, errlen, "%s", USERS_ERR_NOAUTH);
        return -1;
    }
    if (auth_precheck(cmd, argc, argv, err, errlen) != 0)
        return -1;
    if (cmd != NULL && (cmd->flags & CMD_NO_AUTH))
        return 0;
    snprintf(err, errlen, "%s", USERS_ERR_NOAUTH);
    return -1;
}

/* LOCK, UNLOCK and RENEW name their key first. */
static int auth_is_lock_verb(const struct command *cmd, int argc, const struct sv *argv)
{
    return cmd == NULL && argc >= 2 && !sv_ieq(argv[0], "proxy") && auth_is_sluice_verb(argv[0]);
}

/* Whether sluice will ask Redis about NAME (learn.c) before running it:
 * a name it has not learned yet, which a module could have. */
static int auth_will_learn(struct sv name)
{
    return name.len <= LEARN_MAX_NAME && memchr(name.ptr, '\0', name.len) == NULL &&
           learned_lookup(name.ptr, name.len) == NULL;
}

/* Every key of a module's command LC (its legacy positions, as COMMAND
 * INFO gives them) matches U's globs. A command whose keys only the module
 * can find (movablekeys) needs every key. */
static int auth_learned_keys_ok(const struct user *u, const struct learned_command *lc, int argc,
                                const struct sv *argv)
{
    int last = lc->last_key < 0 ? argc + lc->last_key : lc->last_key;
    int step = lc->key_step > 0 ? lc->key_step : 1;

    if (users_all_keys(u))
        return 1;
    if (lc->flags & CMD_MOVABLEKEYS)
        return 0;
    for (int i = lc->first_key; i > 0 && i <= last && i < argc; i += step) {
        if (!users_may_access_key(u, argv[i].ptr, argv[i].len))
            return 0;
    }
    return 1;
}

/* A logged-in user's request for a command sluice does not know: a
 * module's, judged once learned (client.c asks again after learning). */
static int auth_admit_module(const struct user *u, int argc, const struct sv *argv, char *err,
                             size_t errlen)
{
    const struct learned_command *lc;
    char name[128];

    if (auth_will_learn(argv[0]))
        return 0;
    if (!users_may_run(u, NULL, argv, argc)) {
        if (auth_precheck(NULL, argc, argv, err, errlen) != 0)
            return -1;   /* Redis does not know it either */
        snprintf(err, errlen, USERS_ERR_NOPERM_CMD_FMT,
                 users_denied_name(NULL, argc, argv, name, sizeof(name)));
        return -1;
    }
    lc = learned_lookup(argv[0].ptr, argv[0].len);
    if (lc != NULL && lc->known && !auth_learned_keys_ok(u, lc, argc, argv)) {
        snprintf(err, errlen, "%s", USERS_ERR_NOPERM_KEYS);
        return -1;
    }
    return 0;
}

/* Whether CMD runs a script or function. In Redis a script's calls are
 * checked against the user running it, and through sluice that is always
 * sluice's backend user: so only a user who may do everything anyway may
 * run one (else EVAL "return redis.call('flushall')" 0 would get around
 * every grant). */
static int auth_runs_script(const struct command *cmd)
{
    return placement_role(cmd) == ROLE_SCRIPT;
}

/* Whether C's next request goes to its own connection (client_route),
 * where a script would run as sluice's backend user. */
static int auth_script_on_private(const struct client *c)
{
    return c->private_conn != NULL ||
           (c->flags & (CLIENT_IN_MULTI | CLIENT_MULTI_DEFERRED | CLIENT_PASSTHROUGH)) != 0;
}

/* auth_admit's decision, with the refusal in ERR. */
static int auth_decide(struct client *c, const struct command *cmd, int argc,
                       const struct sv *argv, char *err, size_t errlen)
{
    const struct user *u = c->auth_user;
    const char *option;
    char name[128];

    if (argc < 1)
        return 0;
    if (auth_required(c))
        return auth_admit_anonymous(cmd, argc, argv, err, errlen);
    if (u == NULL || !users_enabled(u)) {
        /* Logged out ("default" is gone or disabled): as Redis, which
         * asks such a client to authenticate again. */
        return auth_admit_anonymous(cmd, argc, argv, err, errlen);
    }
    if (cmd == NULL && !auth_is_sluice_verb(argv[0]))
        return auth_admit_module(u, argc, argv, err, errlen);
    /* Wrong arity, unknown subcommand: Redis says so before its ACL check. */
    if (cmd != NULL && auth_precheck(cmd, argc, argv, err, errlen) != 0)
        return -1;
    if (!users_may_run(u, cmd, argv, argc)) {
        snprintf(err, errlen, USERS_ERR_NOPERM_CMD_FMT,
                 users_denied_name(cmd, argc, argv, name, sizeof(name)));
        return -1;
    }
    if (!users_may_access_keys(u, cmd, argc, argv) ||
        (auth_is_lock_verb(cmd, argc, argv) && !users_may_access_key(u, argv[1].ptr, argv[1].len))) {
        snprintf(err, errlen, "%s", USERS_ERR_NOPERM_KEYS);
        return -1;
    }
    if (!users_may_access_channels(u, cmd, argc, argv)) {
        snprintf(err, errlen, "%s", USERS_ERR_NOPERM_CHANNELS);
        return -1;
    }
    if ((option = users_sort_denied_option(u, cmd, argc, argv)) != NULL) {
        snprintf(err, errlen, cluster_enabled() ? AUTH_ERR_SORT_OPTION_CLUSTER_FMT
                                                : AUTH_ERR_SORT_OPTION_FMT, option);
        return -1;
    }
    if (auth_runs_script(cmd) && !users_unrestricted(u)) {
        const char *why = auth_script_login(c) == NULL ? AUTH_ERR_NOPERM_SCRIPTS
                          : auth_script_on_private(c)  ? AUTH_ERR_NOPERM_SCRIPTS_PRIVATE
                                                       : NULL;
        if (why != NULL) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
    }
    return 0;
}

int auth_admit(struct client *c, const struct command *cmd, int argc, const struct sv *argv,
               char *err, size_t errlen)
{
    char why[400];

    if (auth_decide(c, cmd, argc, argv, err, errlen) == 0)
        return 0;
    /* Redis answers a refused EXEC with EXECABORT and the reason (its
     * code dropped when that is ERR). */
    if (cmd != NULL && strcmp(cmd->name, "exec") == 0) {
        snprintf(why, sizeof(why), "%s",
                 strncmp(err, "-ERR ", 5) == 0 ? err + 5 : err[0] == '-' ? err + 1 : err);
        snprintf(err, errlen, "-EXECABORT Transaction discarded because of: %s", why);
    }
    return -1;
}

void auth_write_info(struct evbuffer *out)
{
    evbuffer_add_printf(out, "auth_mode:%s\r\nauth_users:%d\r\n",
                        auth_users == NULL ? "redis"
                                           : auth_users_path != NULL ? "users_file"
                                                                     : "backend_password",
                        users_count(auth_users));
    for (int i = 0; auth_failed != NULL && i < users_count(auth_users); i++)
        evbuffer_add_printf(out, "auth_failures_user_%s:%llu\r\n", auth_failed[i].name,
                            auth_failed[i].count);
    evbuffer_add_printf(out, "auth_failures_unknown_user:%llu\r\n", auth_failed_unknown);
    redisusers_write_info(out);
}
