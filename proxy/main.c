/* main.c - owns the process: command line, config check, start-up order,
 * signals, the periodic tick and an orderly shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "cluster_split.h"
#include "commands.h"
#include "config.h"
#include "control.h"
#include "handover.h"
#include "handpass.h"
#include "sentinel.h"
#include "sentinel_failover.h"
#include "glob.h"
#include "listener.h"
#include "learn.h"
#include "httpd.h"
#include "metrics.h"
#include "slot.h"
#include "local.h"
#include "lock.h"
#include "lockgrace.h"
#include "redisusers.h"
#include "replicas.h"
#include "resolve.h"
#include "rules.h"
#include "scripts.h"
#include "sdnotify.h"
#include "log.h"
#include "pidfile.h"
#include "primary.h"
#include "server.h"
#include "sockaddr.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"
#include "build_info.h"   /* generated: tools/build_info.sh */
#include "users.h"
#include "slowlog.h"
#include "top.h"

/* The lock verbs, the layer above the clients', as the client layer
 * asks them (client_set_verbs). */
static const struct client_verbs main_lock_verbs = {
    .wants = lock_wants,
    .handle = lock_handle,
    .client_closed = lock_client_closed,
};


#define MAIN_DEFAULT_CONFIG "conf/sluice.ini"
#define MAIN_TICK_MS 100

static uint64_t main_shutdown_deadline_ms;
static int main_leases_returned;   /* at shutdown, once no client is left */
static int main_handed_over;        /* a new sluice took the listening sockets */
static pid_t main_upgrade_pid;      /* the sluice SIGUSR2 started, until it took over */
static int main_upgrade_report = -1; /* its report pipe's end we read (log_set_report) */
/* The descriptor a sluice started by SIGUSR2 finds its report pipe on. */
#define MAIN_REPORT_ENV "SLUICE_UPGRADE_REPORT_FD"
#define MAIN_REPORT_FD 3
static char **main_argv;            /* for SIGUSR2: the same command line... */
static char main_exe[PATH_MAX];     /* ...of the binary now on disk at this path */

static void main_usage(FILE *out)
{
    fprintf(out,
            "Usage: sluice [-c FILE] [-t] [-v] [-h]\n"
            "  Started while a sluice with the same listen address runs, it takes\n"
            "  over its listening sockets (sluice(8), docs/operations.md).\n"
            "  -c FILE  config file (default %s)\n"
            "  -t       check the config and every file it names, then exit (0: fine,\n"
            "           perhaps with warnings; 1: errors); each is printed on stderr as\n"
            "           FILE:LINE: message or FILE:LINE: warning: message\n"
            "  -v, --version  print the version and build details, then exit\n"
            "  -h, --help     print this help and exit\n",
            MAIN_DEFAULT_CONFIG);
}

/* `sluice --version`: the version, then how this binary was built and
 * the libraries it runs with (a difference from the build's headers is
 * shown: a library upgraded under the binary). */
static void main_version(void)
{
    printf("sluice %s\n", SLUICE_VERSION);
    printf("commit %s, built %s\n", SLUICE_BUILD_COMMIT, SLUICE_BUILD_DAY);
    printf("compiler %s\n", SLUICE_BUILD_COMPILER);
    printf("libevent %s (built with %s)\n", event_get_version(), LIBEVENT_VERSION);
    printf("%s (built with %s)\n", OpenSSL_version(OPENSSL_VERSION), OPENSSL_VERSION_TEXT);
    printf("hiredis %d.%d.%d\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
}

/* rules_warn's question: whether GLOB matches a user of the set CTX. */
static int main_user_known(void *ctx, struct sv glob)
{
    const struct user_set *set = ctx;

    for (int i = 0; i < users_count(set); i++) {
        const char *name = users_name(users_at(set, i));
        if (glob_match(glob.ptr, glob.len, name, strlen(name)))
            return 1;
    }
    return 0;
}

/* sluice -t: a backend or seed that does not resolve now, or Sentinels
 * that do not know the master (ERRS: a Sentinel that answered and does not
 * know it; WARNS: one that could not be asked). (getaddrinfo may block:
 * fine here, no loop runs.) Only for a config without errors: the probes
 * read keys that a config with errors may lack (sentinel_master). */
static void main_warn_unresolved(const struct config *cfg, struct errlist *errs,
                                 struct errlist *warns)
{
    if (config_sentinel_mode(cfg)) {
        sentinel_check(cfg, errs, warns);
        return;
    }
    const char *key = cfg->backend != NULL ? "backend" : "cluster";
    char *const *addrs = cfg->backend != NULL ? &cfg->backend : cfg->cluster_seeds;
    int count = cfg->backend != NULL ? 1 : cfg->cluster_seed_count;
    struct sockaddr_storage ss;
    socklen_t len;
    char err[512];

    for (int i = 0; i < count; i++) {
        if (sockaddr_resolve(addrs[i], 0, key, &ss, &len, err, sizeof(err)) != 0)
            errlist_add(warns, cfg->path, config_key_line(cfg, key), "warning: %s", err);
    }
}

/* sluice -t: a failover grace shorter than the longest lock: a lock the
 * old primary granted and lost can outlive it (README "Locks across a
 * failover"). 0 (off) is a choice, not a mistake. */
static void main_warn_lock_grace(const struct config *cfg, struct errlist *warns)
{
    if (cfg->lock_failover_grace_ms > 0 && cfg->lock_failover_grace_ms < cfg->lock_max_ttl_ms)
        errlist_add(warns, cfg->path, config_key_line(cfg, "lock_failover_grace_ms"),
                    "warning: lock_failover_grace_ms %lld is shorter than lock_max_ttl_ms %lld: "
                    "after a failover, a lock can be granted while a lost one is still held",
                    cfg->lock_failover_grace_ms, cfg->lock_max_ttl_ms);
}

/* sluice -t: a password written in a sluice.ini that other users may read
 * (the shipped unit's DynamicUser needs it readable): say where it
 * belongs instead. */
static void main_warn_secrets(const struct config *cfg, struct errlist *warns)
{
    static const char *const keys[] = {"backend_password", "sentinel_password"};
    struct stat st;

    if (stat(cfg->path, &st) != 0 || (st.st_mode & S_IROTH) == 0)
        return;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        int line = config_key_line(cfg, keys[i]);
        if (line > 0)
            errlist_add(warns, cfg->path, line,
                        "warning: %s is in a file every user may read (mode %04o): put it in "
                        "%s_file, readable by sluice's user only (systemd: LoadCredential=)",
                        keys[i], (unsigned)(st.st_mode & 07777), keys[i]);
    }
}

/* sluice -t: a hand-over socket path another user could take is an
 * error (handover_check, as at start: sluice refuses to start). */
static void main_check_handover(const struct config *cfg, struct errlist *errs)
{
    char err[512];

    if (handover_check(cfg, 0, err, sizeof(err)) != 0)
        errlist_add(errs, cfg->path, config_key_line(cfg, "handover_socket"), "%s", err);
}

/* sluice -t: what is valid but cannot work as written (rules_warn,
 * main_warn_unresolved, main_warn_lock_grace), into WARNS; what the
 * Sentinels say cannot work, into ERRS. RULES, USERS: the files as loaded
 * (NULL: none, or they have errors). */
static void main_warn(const struct config *cfg, const struct rule_set *rules,
                      struct user_set *users, struct errlist *errs, struct errlist *warns)
{
    struct user_set *backend_user = NULL;
    /* The probes need a whole config (sentinel_master, the addresses). */
    int config_ok = errs->count == 0;

    /* Without a users file, backend_password makes one user; without
     * either, users are Redis's own: not known here. */
    if (cfg->users == NULL && cfg->backend_password != NULL)
        users = backend_user = users_backend_set(
            cfg->backend_user != NULL ? cfg->backend_user : USERS_DEFAULT_NAME,
            cfg->backend_password);
    if (rules != NULL)
        rules_warn(rules, cfg->rules, users != NULL ? main_user_known : NULL, users, warns);
    if (config_ok)
        main_warn_unresolved(cfg, errs, warns);
    main_warn_lock_grace(cfg, warns);
    main_warn_secrets(cfg, warns);
    users_free(backend_user);
}

/* Load the config into server.cfg and check every file it names: the rule
 * and users files even when the config has errors (one file's errors must
 * not hide another's), the TLS files when it has none. Print every error,
 * and with CHECK_ONLY (sluice -t) the warnings too. Returns 0 when usable. */
static int main_load_config(const char *path, int check_only)
{
    struct errlist errs = {0}, warns = {0};
    struct rule_set *rules = NULL;
    struct user_set *users = NULL;
    int rc;

    if (config_load(path, &server.cfg, &errs) == 0)
        tls_check(&server.cfg, &errs);
    if (server.cfg.rules != NULL)
        rules = rules_load(server.cfg.rules, &errs);
    if (server.cfg.users != NULL)
        users = users_load(server.cfg.users, &errs);
    if (check_only && server.cfg.path != NULL)
        main_warn(&server.cfg, rules, users, &errs, &warns);
    if (check_only && errs.count == 0)
        main_check_handover(&server.cfg, &errs);
    rc = errs.count == 0 ? 0 : -1;
    if (errs.text != NULL) {
        fputs(errs.text, stderr);
        log_report_text(errs.text);   /* a hand-over's: the old sluice logs them */
    }
    if (warns.text != NULL)
        fputs(warns.text, stderr);
    rules_free(rules);
    users_free(users);
    errlist_free(&errs);
    errlist_free(&warns);
    return rc;
}

/* Descriptors besides the clients' and their backend connections: the
 * listeners, the log, the event loop and one-shot control connections. */
#define MAIN_FD_SPARE 64

/* Open files that MAXCLIENTS clients may need: each one's socket and a
 * private backend connection, though in standalone mode no more of those
 * than backend_max_connections; then the shared pool and its spares. */
static long long main_fds_needed(long long maxclients)
{
    long long private_max = maxclients;

    if (!config_cluster_mode(&server.cfg) && server.cfg.backend_max_connections < private_max)
        private_max = server.cfg.backend_max_connections;
    return maxclients + private_max + server.cfg.backend_connections +
           server.cfg.backend_spare_connections + MAIN_FD_SPARE;
}

/* The largest maxclients whose main_fds_needed fits in LIMIT (at least 1). */
static long long main_clients_fitting(rlim_t limit)
{
    long long room = (long long)limit - main_fds_needed(0);
    long long half = room / 2;

    if (half < 1)
        return 1;
    if (config_cluster_mode(&server.cfg) || half <= server.cfg.backend_max_connections)
        return half;
    return room - server.cfg.backend_max_connections;
}

/* Raise the soft open-file limit to what maxclients needs, as far as the
 * hard limit allows. When it does not allow enough, maxclients is lowered
 * to what fits (as Redis does) so that a full house is told "max number of
 * clients reached" rather than failing to accept: the default maxclients
 * quietly (a notice: nobody asked for that number), one set in sluice.ini
 * with a warning. */
static void main_raise_fd_limit(void)
{
    long long want = main_fds_needed(server.cfg.maxclients), fit;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    /* Compared as rlim_t: RLIM_INFINITY is its largest value. */
    if (rl.rlim_cur >= (rlim_t)want)
        return;
    rl.rlim_cur = (rlim_t)want > rl.rlim_max ? rl.rlim_max : (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur >= (rlim_t)want)
        return;
    fit = main_clients_fitting(rl.rlim_cur);
    if (config_key_line(&server.cfg, "maxclients") > 0)
        log_warning("maxclients %lld needs %lld open files but the limit is %llu (hard %llu): "
                    "maxclients lowered to %lld; raise the hard limit (ulimit -Hn, systemd "
                    "LimitNOFILE=) to allow more", server.cfg.maxclients, want,
                    (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, fit);
    else
        log_notice("open file limit %llu (hard %llu): maxclients adjusted from the default "
                   "%lld to %lld", (unsigned long long)rl.rlim_cur,
                   (unsigned long long)rl.rlim_max, server.cfg.maxclients, fit);
    server.cfg.maxclients = fit;
}

/* The event loop. With a changelist, an event turned on and off again in
 * one loop pass costs no epoll_ctl: client_write_now relies on it. */
static struct event_base *main_event_base(void)
{
    struct event_config *ec = event_config_new();
    struct event_base *base;

    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
}

/* Run the loop one pass at a time; after each pass, what it produced is
 * written at once (netio.h). Ends at event_base_loopbreak. */
static void main_loop(void)
{
    while (!event_base_got_break(server.base)) {
        if (event_base_loop(server.base, EVLOOP_ONCE) != 0)
            break;
        backend_write_now();
        client_write_now();
        server_pass_end();
    }
}

/* Every line of ERRS as a warning in the log. */
static void main_log_errors(const struct errlist *errs)
{
    const char *p = errs->text;

    while (p != NULL && *p != '\0') {
        const char *nl = strchr(p, '\n');
        int n = nl != NULL ? (int)(nl - p) : (int)strlen(p);
        log_warning("%.*s", n, p);
        p = nl != NULL ? nl + 1 : NULL;
    }
}

/* What a reload has read and checked, not yet applied. */
struct main_staged {
    struct config cfg;
    struct rule_set *rules;
    struct user_set *users;
    struct tls_contexts *tls;
};

/* Read every file of a reload into ST, changing nothing; the keys that
 * wait for a restart keep their running values in ST->cfg (their names
 * into NOTE). Returns 0, or -1 with every error in ERRS. */
static int main_reload_read(struct main_staged *st, struct errlist *errs, char *note,
                            size_t size)
{
    int config_ok = config_load(server.cfg.path, &st->cfg, errs) == 0 &&
                    config_keep_restart_keys(&st->cfg, &server.cfg, note, size, errs) >= 0;

    /* The rule and users files are read even when sluice.ini has errors,
     * as sluice -t does: the operator sees every error of every file in
     * one reload, not the first file's alone. */
    throttle_prepare(st->cfg.rules, &st->rules, errs);
    auth_prepare(&st->cfg, &st->users, errs);
    if (!config_ok || errs->count > 0)
        return -1;
    if (tls_prepare(&st->cfg, &st->tls, errs) != 0)
        return -1;
    /* Last: on success it has switched the log already (nothing after
     * it can fail). The same name is opened afresh too, for logrotate. */
    if (log_reopen(st->cfg.log_file) != 0) {
        errlist_add(errs, st->cfg.path, config_key_line(&st->cfg, "log_file"),
                    "log_file %s: %s", st->cfg.log_file, strerror(errno));
        return -1;
    }
    return 0;
}

static void main_staged_free(struct main_staged *st)
{
    rules_free(st->rules);
    users_free(st->users);
    tls_staged_free(st->tls);
    config_free(&st->cfg);
}

/* Keep replicas found and connected when some client may read from one:
 * [proxy] read_from or a user's (README "Reading from replicas"). */
static void main_want_replicas(void)
{
    replicas_want(server.cfg.read_from != CONFIG_READ_PRIMARY || auth_reads_replicas());
}

/* The reload behind server_reload (SIGHUP, PROXY RELOAD): sluice.ini, the
 * rule file, the users file and the TLS files are all read and checked
 * first; any error changes nothing. Then everything applies at once: the
 * modules read server.cfg where they use a value (client_config_changed
 * for the copies the clients keep). */
static int main_reload(struct errlist *errs, char *note, size_t size)
{
    struct main_staged st = {0};
    struct config old;
    long long old_maxclients = server.cfg.maxclients;

    if (main_reload_read(&st, errs, note, size) != 0) {
        log_warning("reload failed; nothing changed:");
        main_log_errors(errs);
        main_staged_free(&st);
        note[0] = '\0';
        return -1;
    }
    /* Modules hold &server.cfg, not its strings: it is swapped in place. */
    old = server.cfg;
    server.cfg = st.cfg;
    config_free(&old);
    throttle_commit(server.cfg.rules, st.rules);
    auth_commit(&server.cfg, st.users);
    tls_commit(st.tls);
    log_current_level = (enum log_level)server.cfg.log_level;
    log_set_format((enum log_format)server.cfg.log_format);
    slowlog_configure(server.cfg.slowlog_log_slower_than, server.cfg.slowlog_max_len);
    httpd_set_max_connections(server.cfg.metrics_max_connections);
    client_config_changed();
    main_want_replicas();
    if (server.cfg.maxclients > old_maxclients)
        main_raise_fd_limit();
    if (note[0] != '\0')
        log_warning("%s: changed but only a restart applies them (the hand-over); "
                    "the running values stay: %s", server.cfg.path, note);
    log_notice("config reloaded from %s", server.cfg.path);
    return 0;
}

/* The client layer's side of the seams lower layers call up through:
 * registered once at start, before anything can call them. */
static const struct backend_client_ops main_backend_client_ops = {
    .on_reply = client_on_reply,
    .on_push = client_on_push,
    .on_passthrough = client_on_passthrough,
    .on_tunnel = client_on_tunnel,
    .on_private_lost = client_on_private_lost,
    .resume = client_resume,
};
static const struct auth_client_ops main_auth_client_ops = {
    .users_changed = client_users_changed,
    .subscribed_resp3 = client_subscribed_resp3,
};
static const struct learn_client_ops main_learn_client_ops = {
    .block = client_block,
    .release_held = client_release_held,
};

/* ---- metrics_listen: what /metrics and /readyz read (httpd.h) ---- */

static double main_connected_clients(void)
{
    return client_count();
}

static double main_lock_keep_active(void)
{
    return lock_keep_active();
}

/* The slow log's length (PROXY SLOWLOG LEN). */
static double main_slowlog_length(void)
{
    return (double)slowlog_len();
}

/* The gauges set afresh at each scrape: PROXY TOP's busiest subjects; the
 * backends' (a node's role may change and a node out of the cluster's
 * slot map is left out). */
static void main_metrics_refresh(void)
{
    static const char *const kinds[BACKEND_KINDS] = {
        [BACKEND_KIND_SHARED] = "shared", [BACKEND_KIND_PRIVATE] = "private",
        [BACKEND_KIND_SCRIPT] = "script", [BACKEND_KIND_SPARE] = "spare"};
    const struct backend_node *node = NULL;
    int counts[BACKEND_KINDS];
    char why[8];

    lockgrace_metrics_refresh();
    top_metrics_refresh((int)server.cfg.top_metrics_count, server.cfg.top_metrics_keys);
    metrics_family_clear(METRIC_backend_up);
    metrics_family_clear(METRIC_backend_connections);
    while ((node = backend_node_next(node)) != NULL) {
        const char *name = backend_node_name(node);
        if (backend_node_retired(node))
            continue;
        metrics_gauge(METRIC_backend_up, name, backend_node_role(node),
                      backend_node_ready(node, why, sizeof(why)));
        backend_node_connections(node, counts);
        for (int k = 0; k < BACKEND_KINDS; k++)
            metrics_gauge(METRIC_backend_connections, name, kinds[k], counts[k]);
    }
}

/* Whether the backends serve now: the backend (standalone, Sentinel's
 * primary) or the primary of every slot (cluster) connected and logged
 * in; WHY says which is not. */
static int main_backends_ready(char *why, size_t len)
{
    const struct backend_node *last = NULL;

    if (!cluster_enabled())
        return backend_node_ready(backend_default_node(), why, len);
    for (int slot = 0; slot < SLOT_COUNT; slot++) {
        const struct backend_node *node = cluster_node_for_slot(slot);
        if (node == NULL) {
            snprintf(why, len, "cluster: no node serves slot %d (no slot map yet, or a slot "
                               "without a primary)", slot);
            return 0;
        }
        if (node != last && !backend_node_ready(node, why, len))
            return 0;
        last = node;
    }
    return 1;
}

/* Since when the backends have not served (0: they serve): a Sentinel or
 * cluster failover holds requests for failover_retry_window or
 * cluster_retry_window, and sluice is doing its job meanwhile. */
static uint64_t main_unready_since_ms;

static void main_note_readiness(uint64_t now)
{
    char why[512];

    if (main_backends_ready(why, sizeof(why)))
        main_unready_since_ms = 0;
    else if (main_unready_since_ms == 0)
        main_unready_since_ms = now;
}

/* /readyz: the config is loaded (it is, once sluice runs), sluice is not
 * shutting down or drained by the operator, and the backends serve, or
 * have stopped only for less than the window in which sluice holds
 * requests for a new primary (Sentinel: failover_retry_window; cluster:
 * cluster_retry_window): a probe that pulled every sluice out of its load
 * balancer exactly then would turn a held request into a refused client.
 * Standalone mode holds nothing: 503 at once. */
static int main_readyz(char *why, size_t len)
{
    uint64_t now = server_now_ms(), window;
    char down[400];

    /* After a hand-over the new sluice serves the same sockets: a probe
     * this one accepted just before is answered as the service stands. */
    if (server.shutting_down && !main_handed_over) {
        snprintf(why, len, "shutting down");
        return 0;
    }
    if (!control_ready(why, len))
        return 0;
    if (main_backends_ready(why, len))
        return 1;
    window = (uint64_t)(config_sentinel_mode(&server.cfg) ? server.cfg.failover_retry_window_ms
                        : cluster_enabled() ? server.cfg.cluster_retry_window_ms : 0);
    main_note_readiness(now);
    /* A refused login is no failover: the operator must act, now. */
    if (window == 0 || now - main_unready_since_ms >= window ||
        strstr(why, "refused sluice's login") != NULL)
        return 0;
    snprintf(down, sizeof(down), "%s", why);
    snprintf(why, len, "holding requests for %llu of %llu ms (%s)",
             (unsigned long long)(now - main_unready_since_ms), (unsigned long long)window, down);
    return 1;
}

/* sluice_ready: what /readyz would answer now, for alerts and graphs. */
static double main_ready_gauge(void)
{
    char why[512];

    return main_readyz(why, sizeof(why));
}

static const struct httpd_ops main_httpd_ops = {
    .metrics = metrics_write,
    .ready = main_readyz,
};

/* The metrics that read other modules' state, and the build's own. */
static void main_metrics_init(void)
{
    metrics_init();
    metrics_gauge(METRIC_build_info, SLUICE_VERSION, SLUICE_BUILD_COMMIT, 1);
    metrics_gauge_fn(METRIC_ready, main_ready_gauge);
    if (config_sentinel_mode(&server.cfg))
        metrics_gauge(METRIC_sentinels_configured, NULL, NULL, server.cfg.sentinel_count);
    metrics_gauge(METRIC_start_time_seconds, NULL, NULL, (double)server.start_time);
    metrics_gauge_fn(METRIC_connected_clients, main_connected_clients);
    metrics_gauge_fn(METRIC_lock_keep_active, main_lock_keep_active);
    metrics_gauge_fn(METRIC_slowlog_length, main_slowlog_length);
    metrics_set_refresh(main_metrics_refresh);
    metrics_counter(METRIC_config_reloads_total, "ok", NULL);
    metrics_counter(METRIC_config_reloads_total, "error", NULL);
    /* Every reason from the start: a dashboard's rate() then has a zero
     * to show, not a missing series. */
    metrics_counter(METRIC_rejected_connections_total, "maxclients", NULL);
    metrics_counter(METRIC_rejected_connections_total, "out_of_resources", NULL);
    metrics_counter(METRIC_rejected_connections_total, "accept_error", NULL);
}

/* A node's first shared connection connected: Redis users of sluice's
 * own log in there, and the standalone primary's replid is checked. */
static void main_node_up(struct backend_node *node)
{
    backend_limits_node_up(node);   /* first: a client's bulk is judged by it */
    redisusers_node_up(node);
    primary_node_up(node);
}

static void main_register_hooks(void)
{
    server_set_reload(main_reload);
    backend_set_client_ops(&main_backend_client_ops);
    auth_set_client_ops(&main_auth_client_ops);
    learn_set_client_ops(&main_learn_client_ops);
    throttle_set_release(client_release_held);
    cluster_set_split_wants(cluster_split_wants);
    backend_set_node_up_hook(main_node_up);
    sentinel_failover_set_hold_hook(control_failover_hold);
    primary_set_changed_hook(lockgrace_primary_changed);
    local_set_locks_info(lockgrace_write_info);
    primary_set_checked_hook(lockgrace_checked);
    primary_set_epoch_hook(lockgrace_adopt_epoch);
}

/* Stop accepting and drain: every client is answered up to a request
 * boundary and closed between replies (client_shutdown_all); the tick
 * ends the loop once none is left or shutdown_timeout passed. The
 * listening sockets are closed on the next tick (listener_disable_all). */
static void main_begin_shutdown(void)
{
    if (server.shutting_down) {
        log_warning("second signal: exiting now");
        event_base_loopbreak(server.base);
        return;
    }
    if (!main_handed_over) {
        log_notice("shutting down: no new connections, answering requests in flight");
        sdnotify_send("STOPPING=1");   /* not on a hand-over: the service goes on */
    }
    server.shutting_down = 1;
    main_shutdown_deadline_ms = server_now_ms() + (uint64_t)server.cfg.shutdown_timeout_ms;
    listener_disable_all();
    handover_serve_stop();
    client_shutdown_all();
}

/* The hand-over channel (handpass.h): both sides hand it to the clients. */
static const struct handpass_ops main_handpass_ops = {
    .on_conn = client_handover_adopt,
    .on_word = client_handover_word,
    .on_end = client_handover_ended,
};

/* A new sluice is listening on the sockets this one handed over; on
 * CHANNEL_FD (-1: none, a sluice of the version before) it takes the
 * subscribers, which are then not drained here (client_handover.c). */
static void main_takeover(pid_t new_pid, int channel_fd)
{
    if (main_upgrade_report >= 0) {
        close(main_upgrade_report);   /* it started: nothing to report */
        main_upgrade_report = -1;
    }
    (void)new_pid;
    main_handed_over = 1;
    httpd_pause();   /* the new sluice answers scrapes and probes on the same socket */
    if (channel_fd >= 0) {
        handpass_start(server.base, channel_fd, &main_handpass_ops);
        client_handover_offer();
    }
    main_begin_shutdown();
}

/* What a new sluice taking over should know (handover_state_fn): in
 * standalone and Sentinel mode, the primary's master_replid as last seen,
 * its epoch, the lock grace left and the fence epoch, as
 * "lock=REPLID,EPOCH,GRACE_MS,FENCE_EPOCH". With them the new one need
 * not begin the start-up lock grace when it finds the same primary. */
static void main_handover_state(char *buf, size_t size)
{
    char replid[PRIMARY_REPLID_LEN + 1];
    long long epoch, grace_ms, fence_epoch;

    buf[0] = '\0';
    if (primary_export(replid, &epoch) != 0)
        return;
    lockgrace_export(&grace_ms, &fence_epoch);
    /* Cut words would pass a wrong number on: then none at all (the new
     * sluice begins the start-up grace). */
    if ((size_t)snprintf(buf, size, "lock=%s,%lld,%lld,%lld", replid, epoch, grace_ms,
                         fence_epoch) >= size)
        buf[0] = '\0';
}

/* New sluice: take what the running one passed on (TAKE's state words),
 * before the backend is first asked. Cluster mode keeps the start-up
 * grace (README "Restart and upgrade"). */
static void main_inherit(const struct handover_take *take)
{
    char replid[PRIMARY_REPLID_LEN + 1];
    long long epoch, grace_ms, fence_epoch;
    int end = 0;

    if (strncmp(take->state, "lock=", 5) != 0 || server.cfg.cluster_seed_count > 0)
        return;
    if (sscanf(take->state + 5, "%40[0-9a-f],%lld,%lld,%lld%n", replid, &epoch, &grace_ms,
               &fence_epoch, &end) != 4 ||
        strlen(replid) != PRIMARY_REPLID_LEN || epoch < 0 || grace_ms < 0 || fence_epoch < 0 ||
        (take->state[5 + end] != '\0' && take->state[5 + end] != ' ')) {
        log_warning("hand-over: cannot read the old sluice's lock state '%s': the start-up "
                    "lock grace applies", take->state);
        return;
    }
    lockgrace_inherit(grace_ms, fence_epoch);
    primary_inherit(replid, epoch);
}

/* SIGUSR2: start the binary on disk with this command line (an upgrade,
 * or a restart with a changed config); it takes over through the control
 * socket and tells systemd its pid. Until then this one serves on. */
static void main_upgrade(void)
{
    pid_t pid;

    if (server.shutting_down || main_upgrade_pid > 0) {
        log_warning("SIGUSR2 ignored: %s", server.shutting_down ? "shutting down"
                                                                 : "a new sluice is starting");
        return;
    }
    int report[2] = {-1, -1};

    /* Why the new sluice could not start (a bad sluice.ini...) comes back
     * through this pipe and goes to this sluice's log: its own stderr may
     * be nobody's. */
    if (pipe2(report, O_CLOEXEC) != 0)
        report[0] = report[1] = -1;
    pid = fork();
    if (pid == 0) {
        int keep = report[1] >= 0 && (report[1] == MAIN_REPORT_FD
                                          ? fcntl(MAIN_REPORT_FD, F_SETFD, 0) == 0
                                          : dup2(report[1], MAIN_REPORT_FD) == MAIN_REPORT_FD);

        /* Nothing else of this process's may stay open in the new one (a
         * backend connection held there would never close for Redis). */
        if (close_range(keep ? MAIN_REPORT_FD + 1 : 3, ~0U, 0) != 0) {
            for (int fd = keep ? MAIN_REPORT_FD + 1 : 3; fd < 65536; fd++)
                close(fd);
        }
        if (keep)
            setenv(MAIN_REPORT_ENV, "3", 1);
        execvp(main_exe, main_argv);
        _exit(127);
    }
    if (report[1] >= 0)
        close(report[1]);
    if (pid < 0) {
        log_warning("SIGUSR2: cannot start a new sluice: %s", strerror(errno));
        if (report[0] >= 0)
            close(report[0]);
        return;
    }
    main_upgrade_report = report[0];
    main_upgrade_pid = pid;
    sdnotify_sendf("RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)server_now_us());
    log_notice("SIGUSR2: started %s as pid %d; it takes over once ready", main_exe, (int)pid);
}

/* SIGCHLD: the sluice SIGUSR2 started exited. Before taking over, it
 * could not start (its own log says why): this one goes on. */
/* The new sluice's report (MAIN_REPORT_ENV), which it wrote before it
 * exited: each line into this sluice's log, then the pipe closed. */
static void main_log_upgrade_report(pid_t pid)
{
    char buf[8192];
    size_t have = 0;
    ssize_t n;

    if (main_upgrade_report < 0)
        return;
    /* The writer has exited: read until EOF, a bounded amount. */
    while (have < sizeof(buf) - 1 &&
           (n = read(main_upgrade_report, buf + have, sizeof(buf) - 1 - have)) > 0)
        have += (size_t)n;
    buf[have] = '\0';
    for (char *line = buf, *nl; line != NULL && *line != '\0'; line = nl) {
        nl = strchr(line, '\n');
        if (nl != NULL)
            *nl++ = '\0';
        if (*line != '\0')
            log_warning("the new sluice (pid %d): %s", (int)pid, line);
    }
    close(main_upgrade_report);
    main_upgrade_report = -1;
}

static void main_reap(void)
{
    int status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid != main_upgrade_pid)
            continue;
        main_upgrade_pid = 0;
        if (main_handed_over)
            continue;
        main_log_upgrade_report(pid);
        log_warning("the new sluice (pid %d) exited with status %d before taking over; "
                    "this one goes on serving", (int)pid,
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        sdnotify_send("READY=1");
    }
}

static void main_signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    (void)arg;
    if (sig == SIGINT || sig == SIGTERM) {
        main_begin_shutdown();
    } else if (sig == SIGHUP) {
        struct errlist errs = {0};
        char note[512];

        sdnotify_sendf("RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)server_now_us());
        server_reload(&errs, note, sizeof(note));
        errlist_free(&errs);
        sdnotify_send("READY=1");
    } else if (sig == SIGUSR1) {
        /* Bound to nothing yet; never fatal, as its default would be. */
        log_notice("SIGUSR1 received: ignored");
    } else if (sig == SIGUSR2) {
        main_upgrade();
    } else if (sig == SIGCHLD) {
        main_reap();
    }
}

static void main_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();

    (void)fd;
    (void)what;
    (void)arg;
    client_cron(now);
    backend_forget_departed(now);
    throttle_cron();
    top_cron(now);
    control_cron(now);
    main_note_readiness(now);
    log_repeats_flush();
    if (!server.shutting_down)
        return;
    listener_stop();   /* the loop has taken them off epoll by now */
    if (client_count() == 0 || now >= main_shutdown_deadline_ms) {
        if (client_count() > 0)
            log_warning("shutdown_timeout passed with %d clients still waiting", client_count());
        /* Leased tokens go back to Redis; one more tick sends them. */
        if (!main_leases_returned) {
            main_leases_returned = 1;
            if (throttle_return_leases() > 0)
                return;
        }
        event_base_loopbreak(server.base);
    }
}

/* The signals the loop handles (main_signal_cb). */
static const int main_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD};
#define MAIN_SIGNAL_COUNT (sizeof(main_signals) / sizeof(main_signals[0]))

/* Listen (on what a running sluice hands over, TAKE, and new sockets for
 * the other addresses), then connect the backend. On failure TAKE is
 * abandoned: the running sluice goes on as before. Returns 0 or -1. */
static int main_start_serving(struct handover_take *take)
{
    char paths[HANDOVER_MAX_FDS][HANDOVER_PATH_MAX];
    int path_count = handover_paths(&server.cfg, paths, HANDOVER_MAX_FDS);
    char err[1024];

    if (handover_check(&server.cfg, 1, err, sizeof(err)) != 0) {
        log_error("%s", err);
        memset(take, 0, sizeof(*take));
        take->ctrl_fd = -1;
        return -1;
    }
    if (handover_connect(paths, path_count, take, err, sizeof(err)) != 0)
        log_warning("%s; starting without it", err);
    main_inherit(take);
    httpd_set_max_connections(server.cfg.metrics_max_connections);
    if (tls_init(&server.cfg, err, sizeof(err)) != 0 ||
        resolve_init(server.base, err, sizeof(err)) != 0 ||
        sentinel_start(server.base, &server.cfg, err, sizeof(err)) != 0 ||
        backend_init(server.base, &server.cfg, err, sizeof(err)) != 0 ||
        listener_start(server.base, &server.cfg, client_accept, take->fds, take->fd_count, err,
                       sizeof(err)) != 0 ||
        (server.cfg.metrics_listen != NULL &&
         httpd_start(server.base, server.cfg.metrics_listen, &main_httpd_ops, take->fds,
                     take->fd_count, err, sizeof(err)) != 0) ||
        (server.cfg.pidfile != NULL && pidfile_write(server.cfg.pidfile, err, sizeof(err)) != 0)) {
        log_error("%s", err);
        handover_abandon(take);
        return -1;
    }
    replicas_init(server.base, &server.cfg);
    backend_forget_set_in_use(replicas_is_replica);
    main_want_replicas();
    cluster_init(server.base, &server.cfg);
    sentinel_run();
    return 0;
}

/* Listening, the backend connected or being retried: tell systemd, and
 * the sluice that handed its sockets over (TAKE) that it may stop; then
 * serve the control socket for the next one. MAINPID goes first: systemd
 * must know this process before the old one exits. */
static void main_ready(struct handover_take *take)
{
    char paths[HANDOVER_MAX_FDS][HANDOVER_PATH_MAX];
    int path_count = handover_paths(&server.cfg, paths, HANDOVER_MAX_FDS);
    char err[1024];

    if (take->ctrl_fd >= 0) {
        sdnotify_sendf("MAINPID=%d\nREADY=1", (int)getpid());
        if (handover_commit(take, err, sizeof(err)) != 0)
            log_warning("%s", err);
        else if (take->ctrl_fd >= 0)   /* the old one passes its subscribers on it */
            handpass_start(server.base, take->ctrl_fd, &main_handpass_ops);
        take->ctrl_fd = -1;
    } else {
        sdnotify_send("READY=1");
    }
    if (path_count > 0 &&
        handover_serve(server.base, paths[0], main_takeover, main_handover_state, err,
                       sizeof(err)) != 0)
        log_warning("%s; a new sluice will not be able to take over", err);
}

static int main_run(void)
{
    struct errlist errs = {0};
    struct event *signals[MAIN_SIGNAL_COUNT], *tick;
    struct timeval tick_tv = {0, MAIN_TICK_MS * 1000};
    struct handover_take take;

    signal(SIGPIPE, SIG_IGN);
    /* SIGUSR1 and SIGUSR2 end a process by default: ignored until their
     * handlers are in place (main_signal_cb). */
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    main_raise_fd_limit();
    server.base = main_event_base();
    server.start_time = time(NULL);
    if (scripts_init() != 0 || lock_init() != 0) {
        log_error("a Lua script is missing from the build");
        return 1;
    }
    main_metrics_init();
    stats_init();
    local_init();
    main_register_hooks();
    if (throttle_init(server.cfg.rules, &errs) != 0 || auth_init(&server.cfg, &errs) != 0) {
        log_error("%s", errs.text != NULL ? errs.text : "cannot load the rule file\n");
        errlist_free(&errs);
        return 1;
    }
    client_module_init(server.base, &server.cfg);
    client_set_verbs(&main_lock_verbs);
    slowlog_configure(server.cfg.slowlog_log_slower_than, server.cfg.slowlog_max_len);
    if (top_init(server.cfg.top_keys_capacity) != 0) {
        log_error("out of memory for top_keys_capacity = %lld", server.cfg.top_keys_capacity);
        return 1;
    }
    if (main_start_serving(&take) != 0)
        return 1;
    for (size_t i = 0; i < MAIN_SIGNAL_COUNT; i++) {
        signals[i] = evsignal_new(server.base, main_signals[i], main_signal_cb, NULL);
        evsignal_add(signals[i], NULL);
    }
    tick = event_new(server.base, -1, EV_PERSIST, main_tick_cb, NULL);
    evtimer_add(tick, &tick_tv);
    if (server.cfg.cluster_seed_count > 0)
        log_notice("sluice %s started, pid %d, cluster seeds %d (first %s)", SLUICE_VERSION,
                   (int)getpid(), server.cfg.cluster_seed_count, server.cfg.cluster_seeds[0]);
    else if (config_sentinel_mode(&server.cfg))
        log_notice("sluice %s started, pid %d, sentinel master %s at %s", SLUICE_VERSION,
                   (int)getpid(), server.cfg.sentinel_master,
                   backend_node_name(backend_default_node()));
    else
        log_notice("sluice %s started, pid %d, backend %s", SLUICE_VERSION, (int)getpid(),
                   server.cfg.backend);
    log_set_startup(0);   /* running: from now on the log file alone */
    main_ready(&take);
    main_loop();

    handover_serve_stop();
    listener_stop();
    httpd_stop();
    client_free_all();
    handpass_close();
    learn_free_all();
    cluster_free();
    replicas_free();
    sentinel_free();
    primary_free();
    lockgrace_free();
    backend_free_all();
    resolve_shutdown();
    tls_free();
    throttle_shutdown();
    auth_shutdown();
    slowlog_reset();
    top_free();
    for (size_t i = 0; i < MAIN_SIGNAL_COUNT; i++)
        event_free(signals[i]);
    event_free(tick);
    event_base_free(server.base);
    if (server.cfg.pidfile != NULL)
        pidfile_remove(server.cfg.pidfile);
    metrics_free_all();
    log_notice(main_handed_over ? "sluice stopped (handed over)" : "sluice stopped");
    return 0;
}

/* Where SIGUSR2 finds the binary: ARGV0 made absolute (the binary at that
 * path then, an upgrade's), or a bare name searched in PATH. */
static void main_note_exe(char **argv)
{
    main_argv = argv;
    if (strchr(argv[0], '/') == NULL || realpath(argv[0], main_exe) == NULL)
        snprintf(main_exe, sizeof(main_exe), "%s", argv[0]);
}

/* Started by a sluice's SIGUSR2: its report pipe (log_set_report). The
 * variable goes, so that a hand-over from this one starts afresh. */
static void main_take_report(void)
{
    const char *env = getenv(MAIN_REPORT_ENV);

    if (env != NULL && strcmp(env, "3") == 0 && fcntl(MAIN_REPORT_FD, F_GETFD) >= 0) {
        fcntl(MAIN_REPORT_FD, F_SETFD, FD_CLOEXEC);
        log_set_report(MAIN_REPORT_FD);
    }
    unsetenv(MAIN_REPORT_ENV);
}

int main(int argc, char **argv)
{
    const char *config_path = MAIN_DEFAULT_CONFIG;
    static const struct option long_options[] = {
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int check_only = 0, opt, rc;

    main_note_exe(argv);
    main_take_report();
    while ((opt = getopt_long(argc, argv, "c:tvh", long_options, NULL)) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 't': check_only = 1; break;
        case 'v': main_version(); return 0;
        case 'h': main_usage(stdout); return 0;
        default: main_usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        main_usage(stderr);
        return 1;
    }
    commands_init();   /* the rule file names commands */
    if (main_load_config(config_path, check_only) != 0) {
        config_free(&server.cfg);
        return 1;
    }
    if (check_only) {
        printf("%s: configuration is fine\n", config_path);
        config_free(&server.cfg);
        return 0;
    }
    log_current_level = (enum log_level)server.cfg.log_level;
    log_set_format((enum log_format)server.cfg.log_format);
    log_set_startup(1);   /* until sluice runs, errors reach stderr too */
    if (log_open(server.cfg.log_file) != 0) {
        fprintf(stderr, "%s: cannot open log_file %s\n", config_path, server.cfg.log_file);
        log_report_text("cannot open log_file\n");
        config_free(&server.cfg);
        return 1;
    }
    rc = main_run();
    config_free(&server.cfg);
    log_close();
    return rc;
}
