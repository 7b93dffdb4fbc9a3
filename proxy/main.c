/* main.c - owns the process: command line, config check, start-up order,
 * signals, the periodic tick and an orderly shutdown. */
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "client.h"
#include "cluster.h"
#include "cluster_split.h"
#include "commands.h"
#include "config.h"
#include "listener.h"
#include "learn.h"
#include "local.h"
#include "lock.h"
#include "redisusers.h"
#include "resolve.h"
#include "scripts.h"
#include "log.h"
#include "server.h"
#include "slowlog.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"
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

static void main_usage(FILE *out)
{
    fprintf(out,
            "Usage: sluice [-c FILE] [-t] [-v] [-h]\n"
            "  -c FILE  config file (default %s)\n"
            "  -t       check the config and the rule file it names, then exit\n"
            "           (0: fine; 1: errors, printed as FILE:LINE: message)\n"
            "  -v       print the version and exit\n"
            "  -h       print this help and exit\n",
            MAIN_DEFAULT_CONFIG);
}

/* Load and check the config and the rule file it names; print every
 * error. Returns 0 when usable. */
static int main_load_config(const char *path)
{
    struct errlist errs = {0};
    int rc = config_load(path, &server.cfg, &errs);

    if (rc == 0 && server.cfg.rules != NULL)
        rc = limiter_check(server.cfg.rules, &errs);
    if (rc == 0)
        rc = auth_check(&server.cfg, &errs);
    if (rc == 0)
        rc = tls_check(&server.cfg, &errs);

    if (errs.text != NULL)
        fputs(errs.text, stderr);
    errlist_free(&errs);
    return rc;
}

/* Raise the soft open-file limit to what a full house needs: each of
 * maxclients clients may own a private backend connection besides its own
 * socket, then the shared pool, and 64 spare for the listeners, the log,
 * the event loop and one-shot control connections. Capped by the hard
 * limit, with a warning when that is too low. */
static void main_raise_fd_limit(void)
{
    rlim_t want = (rlim_t)(2 * server.cfg.maxclients + server.cfg.backend_connections + 64);
    struct rlimit rl;

    /* Compared as rlim_t: RLIM_INFINITY is its largest value. */
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = want > rl.rlim_max ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        log_warning("open file limit is %llu, below the %llu that maxclients %lld clients "
                    "with a private backend connection each may need",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)want,
                    server.cfg.maxclients);
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

/* The reload sequence behind server_reload (SIGHUP, PROXY RELOAD). Each
 * file on its own: a bad one keeps its old contents. */
static int main_reload(struct errlist *errs)
{
    int rc = 0;

    if (throttle_reload(errs) != 0)
        rc = -1;
    if (auth_reload(errs) != 0)
        rc = -1;
    if (tls_reload(&server.cfg, errs) != 0)
        rc = -1;
    return rc;
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

static void main_register_hooks(void)
{
    server_set_reload(main_reload);
    backend_set_client_ops(&main_backend_client_ops);
    auth_set_client_ops(&main_auth_client_ops);
    learn_set_client_ops(&main_learn_client_ops);
    throttle_set_release(client_release_held);
    cluster_set_split_wants(cluster_split_wants);
    backend_set_node_up_hook(redisusers_node_up);
}

static void main_begin_shutdown(void)
{
    if (server.shutting_down) {
        log_warning("second signal: exiting now");
        event_base_loopbreak(server.base);
        return;
    }
    log_notice("shutting down: no new connections, answering requests in flight");
    server.shutting_down = 1;
    main_shutdown_deadline_ms = server_now_ms() + (uint64_t)server.cfg.shutdown_timeout_ms;
    listener_stop();
    client_shutdown_all();
}

static void main_signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    (void)arg;
    if (sig == SIGINT || sig == SIGTERM) {
        main_begin_shutdown();
    } else if (sig == SIGHUP) {
        struct errlist errs = {0};
        server_reload(&errs);
        errlist_free(&errs);
    }
}

static void main_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    uint64_t now = server_now_ms();

    (void)fd;
    (void)what;
    (void)arg;
    client_cron(now);
    throttle_cron();
    top_cron(now);
    if (!server.shutting_down)
        return;
    if (client_count() == 0 || now >= main_shutdown_deadline_ms) {
        if (client_count() > 0)
            log_warning("shutdown_timeout passed with %d clients still waiting", client_count());
        event_base_loopbreak(server.base);
    }
}

static int main_run(void)
{
    struct errlist errs = {0};
    struct event *sigint, *sigterm, *sighup, *tick;
    struct timeval tick_tv = {0, MAIN_TICK_MS * 1000};
    char err[1024];

    signal(SIGPIPE, SIG_IGN);
    main_raise_fd_limit();
    server.base = main_event_base();
    server.start_time = time(NULL);
    if (scripts_init() != 0 || lock_init() != 0) {
        log_warning("a Lua script is missing from the build");
        return 1;
    }
    stats_init();
    local_init();
    main_register_hooks();
    if (throttle_init(server.cfg.rules, &errs) != 0 || auth_init(&server.cfg, &errs) != 0) {
        log_warning("%s", errs.text != NULL ? errs.text : "cannot load the rule file\n");
        errlist_free(&errs);
        return 1;
    }
    client_module_init(server.base, &server.cfg);
    client_set_verbs(&main_lock_verbs);
    slowlog_configure(server.cfg.slowlog_log_slower_than, server.cfg.slowlog_max_len);
    if (top_init(server.cfg.top_keys_capacity) != 0) {
        log_warning("out of memory for top_keys_capacity = %lld", server.cfg.top_keys_capacity);
        return 1;
    }
    if (tls_init(&server.cfg, err, sizeof(err)) != 0 ||
        resolve_init(server.base, err, sizeof(err)) != 0 ||
        backend_init(server.base, &server.cfg, err, sizeof(err)) != 0 ||
        listener_start(server.base, &server.cfg, client_accept, err, sizeof(err)) != 0) {
        log_warning("%s", err);
        return 1;
    }
    cluster_init(server.base, &server.cfg);
    sigint = evsignal_new(server.base, SIGINT, main_signal_cb, NULL);
    sigterm = evsignal_new(server.base, SIGTERM, main_signal_cb, NULL);
    sighup = evsignal_new(server.base, SIGHUP, main_signal_cb, NULL);
    tick = event_new(server.base, -1, EV_PERSIST, main_tick_cb, NULL);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    evsignal_add(sighup, NULL);
    evtimer_add(tick, &tick_tv);
    if (server.cfg.cluster_seed_count > 0)
        log_notice("sluice %s started, pid %d, cluster seeds %d (first %s)", SLUICE_VERSION,
                   (int)getpid(), server.cfg.cluster_seed_count, server.cfg.cluster_seeds[0]);
    else
        log_notice("sluice %s started, pid %d, backend %s", SLUICE_VERSION, (int)getpid(),
                   server.cfg.backend);
    main_loop();

    listener_stop();
    client_free_all();
    learn_free_all();
    cluster_free();
    backend_free_all();
    resolve_shutdown();
    tls_free();
    throttle_shutdown();
    auth_shutdown();
    slowlog_reset();
    top_free();
    event_free(sigint);
    event_free(sighup);
    event_free(sigterm);
    event_free(tick);
    event_base_free(server.base);
    log_notice("sluice stopped");
    return 0;
}

int main(int argc, char **argv)
{
    const char *config_path = MAIN_DEFAULT_CONFIG;
    int check_only = 0, opt, rc;

    while ((opt = getopt(argc, argv, "c:tvh")) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 't': check_only = 1; break;
        case 'v': printf("sluice %s\n", SLUICE_VERSION); return 0;
        case 'h': main_usage(stdout); return 0;
        default: main_usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        main_usage(stderr);
        return 1;
    }
    commands_init();   /* the rule file names commands */
    if (main_load_config(config_path) != 0) {
        config_free(&server.cfg);
        return 1;
    }
    if (check_only) {
        printf("%s: configuration is fine\n", config_path);
        config_free(&server.cfg);
        return 0;
    }
    log_current_level = (enum log_level)server.cfg.log_level;
    if (log_open(server.cfg.log_file) != 0) {
        fprintf(stderr, "%s: cannot open log_file %s\n", config_path, server.cfg.log_file);
        config_free(&server.cfg);
        return 1;
    }
    rc = main_run();
    config_free(&server.cfg);
    log_close();
    return rc;
}
