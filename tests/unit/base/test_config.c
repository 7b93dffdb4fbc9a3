/* test_config.c - sluice.ini loading: defaults, every error as FILE:LINE. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "unit.h"

static char path[64];

static int load(const char *text, struct config *cfg, struct errlist *errs)
{
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/sluice-test-config-%d.ini", (int)getpid());
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    memset(errs, 0, sizeof(*errs));
    return config_load(path, cfg, errs);
}

static void expect_error(const char *text, int line, const char *fragment)
{
    struct config cfg;
    struct errlist errs;
    char prefix[128];

    CHECK(load(text, &cfg, &errs) != 0);
    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    CHECK(errs.text != NULL && strncmp(errs.text, prefix, strlen(prefix)) == 0);
    CHECK(errs.text != NULL && strstr(errs.text, fragment) != NULL);
    if (errs.text != NULL && (strncmp(errs.text, prefix, strlen(prefix)) != 0 ||
                              strstr(errs.text, fragment) == NULL))
        fprintf(stderr, "  got: %s  wanted %s...%s\n", errs.text, prefix, fragment);
    errlist_free(&errs);
    config_free(&cfg);
    unlink(path);
}

static void test_good_config(void)
{
    struct config cfg;
    struct errlist errs;

    CHECK(load("; comment\n[proxy]\nlisten = 127.0.0.1:7000\nlisten = [::1]:7001\n"
               "backend = 127.0.0.1:6379\nrules = r.ini ; inline comment\nmaxclients = 50\n"
               "client_output_buffer_limit = 2mb\nlog_level = warning\n",
               &cfg, &errs) == 0);
    CHECK(errs.count == 0);
    CHECK(cfg.listen_count == 2);
    CHECK_STR(cfg.listen[1], "[::1]:7001");
    CHECK_STR(cfg.backend, "127.0.0.1:6379");
    CHECK_STR(cfg.rules, "/tmp/r.ini");
    CHECK(cfg.maxclients == 50);
    CHECK(cfg.client_output_buffer_limit == 2 * 1024 * 1024);
    CHECK(cfg.log_level == LOG_WARNING);
    CHECK(cfg.proto_max_bulk_len == 512LL * 1024 * 1024);
    CHECK(cfg.backend_connections == 1);
    errlist_free(&errs);
    config_free(&cfg);
    unlink(path);
}

static void test_errors_have_lines(void)
{
    expect_error("[proxy]\nbackend = 127.0.0.1:6379\nbogus = 1\n", 3, "unknown key 'bogus'");
    expect_error("[proxy]\nbackend = 127.0.0.1:6379\nmaxclients = abc\n", 3, "not an integer");
    expect_error("[proxy]\nbackend = 127.0.0.1:6379\nmaxclients = 0\n", 3, "out of range");
    expect_error("[proxy]\nbackend = a:1\nbackend = b:2\n", 3, "duplicate key 'backend'");
    expect_error("\n[proxy]\nlisten = 127.0.0.1:7000\n", 2, "missing key 'backend'");
    expect_error("[proxy]\nbackend = nohostport\n", 2, "not host:port");
    expect_error("[proxy]\nbackend = h:99999\n", 2, "no valid port");
    expect_error("[proxy]\nbackend = h:1\nlog_level = loud\n", 3, "log_level must be");
    expect_error("[proxy]\nbackend = h:1\nproto_max_bulk_len = 12zb\n", 3, "not a size");
    expect_error("[proxy]\nbackend = h:1\n[other]\nx = 1\n", 3, "unknown section [other]");
    expect_error("[proxy]\nbackend = h:1\nthis line is wrong\n", 3, "syntax error");
}

static void test_tls_keys(void)
{
    struct config cfg;
    struct errlist errs;

    CHECK(load("[proxy]\nbackend = 127.0.0.1:6379\n", &cfg, &errs) == 0);
    CHECK(cfg.tls_listen_count == 0 && !cfg.backend_tls);
    CHECK(cfg.tls_auth_clients == CONFIG_TLS_AUTH_YES);
    CHECK(cfg.tls_protocols == (CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3));
    config_free(&cfg);
    CHECK(load("[proxy]\nbackend = 127.0.0.1:6379\ntls_listen = 127.0.0.1:7443\n"
               "tls_listen = [::1]:7444\ntls_cert_file = c.crt\ntls_key_file = /k/c.key\n"
               "tls_auth_clients = Optional\ntls_ca_cert_file = ca.crt\n"
               "tls_protocols = tlsv1.3\nbackend_tls = yes\nbackend_tls_server_name = r\n",
               &cfg, &errs) == 0);
    CHECK(cfg.tls_listen_count == 2);
    CHECK_STR(cfg.tls_listen[1], "[::1]:7444");
    CHECK_STR(cfg.tls_cert_file, "/tmp/c.crt");
    CHECK_STR(cfg.tls_key_file, "/k/c.key");
    CHECK(cfg.tls_auth_clients == CONFIG_TLS_AUTH_OPTIONAL);
    CHECK(cfg.tls_protocols == CONFIG_TLS_V1_3);
    CHECK(cfg.backend_tls == 1);
    CHECK_STR(cfg.backend_tls_server_name, "r");
    CHECK(config_key_line(&cfg, "tls_key_file") == 6);
    CHECK(config_key_line(&cfg, "tls_ciphers") == 0);
    config_free(&cfg);
    expect_error("[proxy]\nbackend = h:1\ntls_protocols = TLSv1.2 TLSv9\n", 3,
                 "unknown protocol 'TLSv9'");
    expect_error("[proxy]\nbackend = h:1\ntls_protocols = \"\"\n", 3, "protocol");
    expect_error("[proxy]\nbackend = h:1\ntls_auth_clients = 1\n", 3, "yes, no or optional");
    expect_error("[proxy]\nbackend = h:1\ntls_listen = nope\n", 3, "not host:port");
    expect_error("[proxy]\nbackend = h:1\ntls_listen = 127.0.0.1:1\ntls_auth_clients = no\n",
                 3, "tls_listen needs tls_cert_file and tls_key_file");
    expect_error("[proxy]\nbackend = h:1\nbackend_tls_key_file = k\n", 3, "go together");
}

static void test_missing_file(void)
{
    struct config cfg;
    struct errlist errs = {0};

    CHECK(config_load("/nonexistent/sluice.ini", &cfg, &errs) != 0);
    CHECK(errs.text != NULL && strstr(errs.text, "/nonexistent/sluice.ini:0: cannot open") != NULL);
    errlist_free(&errs);
    config_free(&cfg);
}

static void test_cluster_seeds(void)
{
    struct config cfg;
    struct errlist errs;

    CHECK(load("[proxy]\ncluster = 127.0.0.1:7000  10.0.0.2:7001\t[::1]:7002\n"
               "cluster_max_redirects = 9\n", &cfg, &errs) == 0);
    CHECK(errs.count == 0);
    CHECK(cfg.backend == NULL);
    CHECK(cfg.cluster_seed_count == 3);
    CHECK_STR(cfg.cluster_seeds[0], "127.0.0.1:7000");
    CHECK_STR(cfg.cluster_seeds[1], "10.0.0.2:7001");
    CHECK_STR(cfg.cluster_seeds[2], "[::1]:7002");
    CHECK(cfg.cluster_max_redirects == 9);
    CHECK(cfg.cluster_refresh_interval_ms == 5000);
    CHECK(cfg.cluster_retry_window_ms == 3000);
    errlist_free(&errs);
    config_free(&cfg);
    unlink(path);

    CHECK(load("[proxy]\nbackend = 127.0.0.1:6379\n", &cfg, &errs) == 0);
    CHECK(cfg.cluster_seed_count == 0);
    errlist_free(&errs);
    config_free(&cfg);
    unlink(path);
}

static void test_cluster_errors(void)
{
    expect_error("[proxy]\nbackend = h:1\ncluster = h:2\n", 3, "exclude each other");
    expect_error("[proxy]\ncluster = h:2\n\nbackend = h:1\n", 4, "exclude each other");
    expect_error("[proxy]\ncluster = h:2 nohostport\n", 2, "'nohostport' is not host:port");
    expect_error("[proxy]\ncluster = h:2 h:99999\n", 2, "no valid port");
    expect_error("[proxy]\ncluster = h:2 h:2\n", 2, "named twice");
    expect_error("[proxy]\ncluster =\n", 2, "cluster");
    expect_error("[proxy]\ncluster = h:1\ncluster = h:2\n", 3, "duplicate key 'cluster'");
    expect_error("[proxy]\ncluster = h:1\ncluster_max_redirects = 0\n", 3, "out of range");
    expect_error("[proxy]\ncluster = h:1\ncluster_refresh_interval = 5\n", 3, "out of range");
    expect_error("[proxy]\ncluster = h:1\ncluster_retry_window = 60001\n", 3, "out of range");
    expect_error("\n[proxy]\nlisten = 127.0.0.1:7000\n", 2, "(or 'cluster'");
}

static void test_sentinel_keys(void)
{
    struct config cfg;
    struct errlist errs;

    CHECK(load("[proxy]\nsentinel = 127.0.0.1:26379 s2:26379\nsentinel_master = mymaster\n"
               "sentinel_password = pw\nsentinel_tls = yes\nfailover_retry_window = 2500\n",
               &cfg, &errs) == 0);
    CHECK(errs.count == 0);
    CHECK(cfg.backend == NULL && cfg.cluster_seed_count == 0);
    CHECK(config_sentinel_mode(&cfg));
    CHECK(cfg.sentinel_count == 2);
    CHECK_STR(cfg.sentinels[1], "s2:26379");
    CHECK_STR(cfg.sentinel_master, "mymaster");
    CHECK_STR(cfg.sentinel_password, "pw");
    CHECK(cfg.sentinel_tls == 1);
    CHECK(cfg.sentinel_refresh_interval_ms == 5000);
    CHECK(cfg.failover_retry_window_ms == 2500);
    CHECK(config_key_live("sentinel_refresh_interval") && config_key_live("failover_retry_window"));
    CHECK(!config_key_live("sentinel") && !config_key_live("sentinel_master"));
    errlist_free(&errs);
    config_free(&cfg);
    unlink(path);
}

static void test_sentinel_errors(void)
{
    expect_error("[proxy]\nbackend = h:1\nsentinel = h:2\nsentinel_master = m\n", 3,
                 "'backend' (line 2) and 'sentinel' (line 3) exclude each other");
    expect_error("[proxy]\nsentinel = h:2\ncluster = h:1\nsentinel_master = m\n", 3,
                 "'cluster' (line 3) and 'sentinel' (line 2) exclude each other");
    expect_error("[proxy]\nsentinel = h:2\n", 2, "'sentinel' needs 'sentinel_master = NAME'");
    expect_error("[proxy]\nsentinel = h:2\nsentinel_master =\n", 3, "needs a value");
    expect_error("[proxy]\nbackend = h:2\nsentinel_master = m\n", 3,
                 "'sentinel_master' without 'sentinel");
    expect_error("[proxy]\nsentinel = h:2 h:2\nsentinel_master = m\n", 2, "named twice");
    expect_error("[proxy]\nsentinel =\nsentinel_master = m\n", 2, "sentinel");
    expect_error("[proxy]\nsentinel = h:2\nsentinel_master = m\nsentinel_refresh_interval = 5\n",
                 4, "out of range");
    expect_error("\n[proxy]\nlisten = 127.0.0.1:7000\n", 2, "'sentinel' for Redis Sentinel");
}

UNIT_MAIN("config",
          {"sentinel keys", test_sentinel_keys},
          {"sentinel errors", test_sentinel_errors},
          {"cluster seeds", test_cluster_seeds},
          {"cluster errors", test_cluster_errors},
          {"good config", test_good_config},
          {"errors carry FILE:LINE", test_errors_have_lines},
          {"TLS keys", test_tls_keys},
          {"missing file", test_missing_file})
