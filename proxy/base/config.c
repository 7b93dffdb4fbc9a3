/* config.c - owns the [proxy] keys of sluice.ini: their names, defaults,
 * bounds and setters. Keys are data (config_keys[]); adding one is a row. */
#include "config.h"

#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "inifile.h"
#include "log.h"
#include "safefile.h"
#include "value.h"

#define CONFIG_SECTION "proxy"

struct config_key;
typedef int config_setter(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen);

/* When a changed key takes effect (README "Reload"). */
enum config_apply {
    CONFIG_LIVE,          /* at the next reload (SIGHUP, PROXY RELOAD) */
    CONFIG_RESTART,       /* only in a new process (the hand-over) */
    CONFIG_LIVE_RENAME,   /* a new value is live; set <-> unset needs a restart */
};

/* What the field at `offset` is, for comparing and copying values. */
enum config_kind {
    CONFIG_STR,           /* char * */
    CONFIG_NUM,           /* long long */
    CONFIG_INT,           /* int (yes/no, words, bits) */
    CONFIG_LIST,          /* char *[], its count an int at count_offset */
};

struct config_key {
    const char *name;
    config_setter *set;
    size_t offset;        /* of the field in struct config */
    long long min, max;   /* bounds of numbers */
    int repeatable;
    enum config_apply apply;
    enum config_kind kind;
    size_t count_offset;  /* CONFIG_LIST: of its count */
};

static int config_set_string(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen);
static int config_set_hostport(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen);
static int config_set_listen(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen);
static int config_set_cluster(struct config *cfg, const struct config_key *key,
                              const char *value, char *err, size_t errlen);
/* `cluster = host:port [host:port ...]`: the seed nodes, each checked,
 * none named twice. */
static int config_set_cluster(struct config *cfg, const struct config_key *key,
                              const char *value, char *err, size_t errlen)
{
    char seed[300], host[256];
    const char *p = value;
    size_t n;
    int port;

    (void)key;
    while (*p != '\0') {
        p += strspn(p, " \t");
        n = strcspn(p, " \t");
        if (n == 0)
            break;
        if (n >= sizeof(seed)) {
            snprintf(err, errlen, "seed '%.40s...' is too long", p);
            return -1;
        }
        memcpy(seed, p, n);
        seed[n] = '\0';
        p += n;
        if (value_hostport(seed, host, sizeof(host), &port, err, errlen) != 0)
            return -1;
        for (int i = 0; i < cfg->cluster_seed_count; i++) {
            if (strcmp(cfg->cluster_seeds[i], seed) == 0) {
                snprintf(err, errlen, "seed '%s' is named twice", seed);
                return -1;
            }
        }
        if (cfg->cluster_seed_count == CONFIG_MAX_SEEDS) {
            snprintf(err, errlen, "at most %d seed nodes", CONFIG_MAX_SEEDS);
            return -1;
        }
        cfg->cluster_seeds[cfg->cluster_seed_count++] = strdup(seed);
    }
    if (cfg->cluster_seed_count == 0) {
        snprintf(err, errlen, "needs at least one seed node host:port");
        return -1;
    }
    return 0;
}

/* `sentinel = host:port [host:port ...]` (the Sentinels), `replicas =`
 * likewise: each checked, none named twice, into the list at KEY's offset
 * (its count at count_offset), at most KEY's max (0: CONFIG_MAX_SEEDS). */
static int config_set_hostlist(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen)
{
    char **list = (char **)((char *)cfg + key->offset);
    int *count = (int *)((char *)cfg + key->count_offset);
    char addr[300], host[256];
    const char *p = value;
    size_t n;
    int port;

    while (*p != '\0') {
        p += strspn(p, " \t");
        n = strcspn(p, " \t");
        if (n == 0)
            break;
        if (n >= sizeof(addr)) {
            snprintf(err, errlen, "address '%.40s...' is too long", p);
            return -1;
        }
        memcpy(addr, p, n);
        addr[n] = '\0';
        p += n;
        if (value_hostport(addr, host, sizeof(host), &port, err, errlen) != 0)
            return -1;
        for (int i = 0; i < *count; i++) {
            if (strcmp(list[i], addr) == 0) {
                snprintf(err, errlen, "'%s' is named twice", addr);
                return -1;
            }
        }
        if (*count == (key->max > 0 ? (int)key->max : CONFIG_MAX_SEEDS)) {
            snprintf(err, errlen, "at most %d addresses",
                     key->max > 0 ? (int)key->max : CONFIG_MAX_SEEDS);
            return -1;
        }
        list[(*count)++] = strdup(addr);
    }
    if (*count == 0) {
        snprintf(err, errlen, "needs at least one host:port");
        return -1;
    }
    return 0;
}

static int config_set_int(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen);
static int config_set_bytes(struct config *cfg, const struct config_key *key,
                            const char *value, char *err, size_t errlen);
static int config_set_log_level(struct config *cfg, const struct config_key *key,
                                const char *value, char *err, size_t errlen);
static int config_set_log_format(struct config *cfg, const struct config_key *key,
                                 const char *value, char *err, size_t errlen);
static int config_set_tls_listen(struct config *cfg, const struct config_key *key,
                                 const char *value, char *err, size_t errlen);
static int config_set_yesno(struct config *cfg, const struct config_key *key,
                            const char *value, char *err, size_t errlen);
static int config_set_tls_auth(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen);
static int config_set_tls_protocols(struct config *cfg, const struct config_key *key,
                                    const char *value, char *err, size_t errlen);
static int config_set_read_from(struct config *cfg, const struct config_key *key,
                                const char *value, char *err, size_t errlen);
static int config_set_acks(struct config *cfg, const struct config_key *key,
                           const char *value, char *err, size_t errlen);

#define F(field) offsetof(struct config, field)
/* The last columns: when a change applies, and the field's kind. */
#define LIVE(kind) CONFIG_LIVE, CONFIG_##kind, 0
#define LIVE_RENAME(kind) CONFIG_LIVE_RENAME, CONFIG_##kind, 0
#define RESTART(kind) CONFIG_RESTART, CONFIG_##kind, 0
#define RESTART_LIST(count) CONFIG_RESTART, CONFIG_LIST, F(count)
#define GB (1024LL * 1024 * 1024)
static const struct config_key config_keys[] = {
    {"listen", config_set_listen, F(listen), 0, 0, 1, RESTART_LIST(listen_count)},
    {"backend", config_set_hostport, F(backend), 0, 0, 0, RESTART(STR)},
    {"cluster", config_set_cluster, F(cluster_seeds), 0, 0, 0, RESTART_LIST(cluster_seed_count)},
    {"cluster_refresh_interval", config_set_int, F(cluster_refresh_interval_ms), 100, 3600000, 0,
     LIVE(NUM)},
    {"cluster_max_redirects", config_set_int, F(cluster_max_redirects), 1, 100, 0, LIVE(NUM)},
    {"cluster_retry_window", config_set_int, F(cluster_retry_window_ms), 0, 60000, 0, LIVE(NUM)},
    {"sentinel", config_set_hostlist, F(sentinels), 0, 0, 0, RESTART_LIST(sentinel_count)},
    {"sentinel_master", config_set_string, F(sentinel_master), 0, 0, 0, RESTART(STR)},
    {"sentinel_user", config_set_string, F(sentinel_user), 0, 0, 0, RESTART(STR)},
    {"sentinel_password", config_set_string, F(sentinel_password), 0, 0, 0, RESTART(STR)},
    {"sentinel_password_file", config_set_string, F(sentinel_password_file), 0, 0, 0,
     RESTART(STR)},
    {"sentinel_tls", config_set_yesno, F(sentinel_tls), 0, 0, 0, RESTART(INT)},
    {"sentinel_refresh_interval", config_set_int, F(sentinel_refresh_interval_ms), 100, 3600000,
     0, LIVE(NUM)},
    {"failover_retry_window", config_set_int, F(failover_retry_window_ms), 0, 600000, 0,
     LIVE(NUM)},
    {"replicas", config_set_hostlist, F(replicas), 0, CONFIG_MAX_REPLICAS, 0,
     RESTART_LIST(replica_count)},
    {"backend_user", config_set_string, F(backend_user), 0, 0, 0, RESTART(STR)},
    {"backend_password", config_set_string, F(backend_password), 0, 0, 0, RESTART(STR)},
    {"backend_password_file", config_set_string, F(backend_password_file), 0, 0, 0,
     RESTART(STR)},
    {"rules", config_set_string, F(rules), 0, 0, 0, LIVE(STR)},
    {"users", config_set_string, F(users), 0, 0, 0, LIVE_RENAME(STR)},
    {"users_in_redis", config_set_yesno, F(users_in_redis), 0, 0, 0, RESTART(INT)},
    {"log_level", config_set_log_level, F(log_level), 0, 0, 0, LIVE(INT)},
    {"log_file", config_set_string, F(log_file), 0, 0, 0, LIVE(STR)},
    {"log_format", config_set_log_format, F(log_format), 0, 0, 0, LIVE(INT)},
    {"log_connections", config_set_yesno, F(log_connections), 0, 0, 0, LIVE(INT)},
    {"pidfile", config_set_string, F(pidfile), 0, 0, 0, RESTART(STR)},
    {"maxclients", config_set_int, F(maxclients), 1, 1000000, 0, LIVE(NUM)},
    {"timeout", config_set_int, F(timeout_s), 0, 100000000, 0, LIVE(NUM)},
    {"backend_connections", config_set_int, F(backend_connections), 1, 64, 0, RESTART(NUM)},
    {"backend_max_connections", config_set_int, F(backend_max_connections), 1, 1000000, 0,
     LIVE(NUM)},
    {"backend_spare_connections", config_set_int, F(backend_spare_connections), 0, 64, 0,
     LIVE(NUM)},
    {"client_max_inflight", config_set_int, F(client_max_inflight), 1, 1000000, 0, LIVE(NUM)},
    {"client_max_pending_bytes", config_set_bytes,
     F(client_max_pending_bytes), 64 * 1024, 64 * GB, 0, LIVE(NUM)},
    {"client_output_buffer_limit", config_set_bytes,
     F(client_output_buffer_limit), 0, 64 * GB, 0, LIVE(NUM)},
    {"client_query_buffer_limit", config_set_bytes,
     F(client_query_buffer_limit), 1024 * 1024, 64 * GB, 0, LIVE(NUM)},
    {"proto_max_bulk_len", config_set_bytes, F(proto_max_bulk_len), 1024 * 1024, 64 * GB, 0,
     LIVE(NUM)},
    {"proto_max_multibulk_len", config_set_int, F(proto_max_multibulk_len), 1, 2147483647, 0,
     LIVE(NUM)},
    {"shutdown_timeout", config_set_int, F(shutdown_timeout_ms), 0, 3600000, 0, LIVE(NUM)},
    {"slowlog_log_slower_than", config_set_int, F(slowlog_log_slower_than), -1000000000000LL,
     1000000000000LL, 0, LIVE(NUM)},
    {"slowlog_max_len", config_set_int, F(slowlog_max_len), 0, 1000000, 0, LIVE(NUM)},
    {"top_keys_capacity", config_set_int, F(top_keys_capacity), 0, 1000000, 0, RESTART(NUM)},
    {"top_metrics_count", config_set_int, F(top_metrics_count), 0, 20, 0, LIVE(NUM)},
    {"top_metrics_keys", config_set_yesno, F(top_metrics_keys), 0, 0, 0, LIVE(INT)},
    {"lock_replica_acks", config_set_acks, F(lock_replica_acks), 0, 1000, 0, LIVE(NUM)},
    {"lock_replica_timeout_ms", config_set_int, F(lock_replica_timeout_ms), 1, 3600000, 0,
     LIVE(NUM)},
    {"lock_max_ttl_ms", config_set_int, F(lock_max_ttl_ms), 1, 4611686018427387903LL, 0,
     LIVE(NUM)},
    {"lock_failover_grace_ms", config_set_int, F(lock_failover_grace_ms), 0,
     4611686018427387903LL, 0, LIVE(NUM)},
    {"handover_socket", config_set_string, F(handover_socket), 0, 0, 0, RESTART(STR)},
    {"tls_listen", config_set_tls_listen, F(tls_listen), 0, 0, 1, RESTART_LIST(tls_listen_count)},
    {"tls_cert_file", config_set_string, F(tls_cert_file), 0, 0, 0, LIVE(STR)},
    {"tls_key_file", config_set_string, F(tls_key_file), 0, 0, 0, LIVE(STR)},
    {"tls_ca_cert_file", config_set_string, F(tls_ca_cert_file), 0, 0, 0, LIVE(STR)},
    {"tls_auth_clients", config_set_tls_auth, F(tls_auth_clients), 0, 0, 0, LIVE(INT)},
    {"tls_protocols", config_set_tls_protocols, F(tls_protocols), 0, 0, 0, LIVE(INT)},
    {"tls_ciphers", config_set_string, F(tls_ciphers), 0, 0, 0, LIVE(STR)},
    {"tls_ciphersuites", config_set_string, F(tls_ciphersuites), 0, 0, 0, LIVE(STR)},
    {"tls_handshake_timeout", config_set_int, F(tls_handshake_timeout_ms), 100, 3600000, 0,
     LIVE(NUM)},
    {"backend_tls", config_set_yesno, F(backend_tls), 0, 0, 0, RESTART(INT)},
    {"backend_tls_ca_cert_file", config_set_string, F(backend_tls_ca_cert_file), 0, 0, 0,
     LIVE(STR)},
    {"backend_tls_cert_file", config_set_string, F(backend_tls_cert_file), 0, 0, 0, LIVE(STR)},
    {"backend_tls_key_file", config_set_string, F(backend_tls_key_file), 0, 0, 0, LIVE(STR)},
    {"backend_tls_server_name", config_set_string, F(backend_tls_server_name), 0, 0, 0, LIVE(STR)},
    {"read_from", config_set_read_from, F(read_from), 0, 0, 0, LIVE(INT)},
    {"replica_max_lag_ms", config_set_int, F(replica_max_lag_ms), 0, 3600000, 0, LIVE(NUM)},
    {"replica_read_after_write_ms", config_set_int, F(replica_read_after_write_ms), 0, 3600000,
     0, LIVE(NUM)},
    {"metrics_listen", config_set_hostport, F(metrics_listen), 0, 0, 0, RESTART(STR)},
    {"metrics_max_connections", config_set_int, F(metrics_max_connections), 1, 10000, 0,
     LIVE(NUM)},
};
#undef LIVE
#undef LIVE_RENAME
#undef RESTART
#undef RESTART_LIST
#undef F
#define CONFIG_KEY_COUNT (sizeof(config_keys) / sizeof(config_keys[0]))

struct config_parse {
    struct config *cfg;
    int *seen_line;   /* cfg->key_lines: line where each key was set, 0 = not yet */
    int section_line;
};

static void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->log_level = LOG_NOTICE;
    cfg->maxclients = 10000;
    cfg->timeout_s = 0;
    cfg->backend_connections = 1;
    cfg->backend_max_connections = 10000;
    cfg->backend_spare_connections = 2;
    cfg->client_max_inflight = 256;
    cfg->client_max_pending_bytes = 16LL * 1024 * 1024;
    cfg->client_output_buffer_limit = 256LL * 1024 * 1024;
    cfg->client_query_buffer_limit = GB;
    cfg->proto_max_bulk_len = 512LL * 1024 * 1024;
    cfg->proto_max_multibulk_len = 1024 * 1024;
    cfg->shutdown_timeout_ms = 5000;
    cfg->slowlog_log_slower_than = 10000;   /* Redis's defaults */
    cfg->slowlog_max_len = 128;
    cfg->top_keys_capacity = 1024;
    cfg->top_metrics_count = 5;
    cfg->lock_replica_timeout_ms = 1000;
    cfg->lock_max_ttl_ms = 30000;   /* Redisson's lease; README "Locks across a failover" */
    cfg->lock_failover_grace_ms = -1;   /* lock_max_ttl_ms */
    cfg->cluster_refresh_interval_ms = 5000;
    cfg->cluster_max_redirects = 5;
    cfg->cluster_retry_window_ms = 3000;
    cfg->sentinel_refresh_interval_ms = 5000;
    cfg->failover_retry_window_ms = 10000;
    cfg->tls_auth_clients = CONFIG_TLS_AUTH_YES;   /* Redis's default */
    cfg->tls_protocols = CONFIG_TLS_V1_2 | CONFIG_TLS_V1_3;
    cfg->tls_handshake_timeout_ms = 10000;
    cfg->read_from = CONFIG_READ_PRIMARY;
    cfg->replica_max_lag_ms = 1000;
    cfg->replica_read_after_write_ms = 1000;
    cfg->metrics_max_connections = 16;   /* httpd.h's HTTPD_DEFAULT_MAX_CONNECTIONS */
    cfg->key_lines = calloc(CONFIG_KEY_COUNT, sizeof(*cfg->key_lines));
}

static int config_set_string(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen)
{
    char **field = (char **)((char *)cfg + key->offset);

    if (value[0] == '\0') {
        snprintf(err, errlen, "'%s' needs a value", key->name);
        return -1;
    }
    free(*field);
    *field = strdup(value);
    return 0;
}

static int config_set_hostport(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen)
{
    char host[256];
    int port;

    if (value_hostport(value, host, sizeof(host), &port, err, errlen) != 0)
        return -1;
    return config_set_string(cfg, key, value, err, errlen);
}

/* Add the address VALUE to LIST (COUNT entries). */
static int config_add_address(char **list, int *count, const char *value, char *err,
                              size_t errlen)
{
    char host[256];
    int port;

    if (value_hostport(value, host, sizeof(host), &port, err, errlen) != 0)
        return -1;
    if (*count == CONFIG_MAX_LISTEN) {
        snprintf(err, errlen, "at most %d addresses", CONFIG_MAX_LISTEN);
        return -1;
    }
    list[(*count)++] = strdup(value);
    return 0;
}

static int config_set_listen(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen)
{
    (void)key;
    return config_add_address(cfg->listen, &cfg->listen_count, value, err, errlen);
}

static int config_set_tls_listen(struct config *cfg, const struct config_key *key,
                                 const char *value, char *err, size_t errlen)
{
    (void)key;
    return config_add_address(cfg->tls_listen, &cfg->tls_listen_count, value, err, errlen);
}

/* One word of a closed list: its index in WORDS (case-insensitive). */
static int config_word(const char *value, const char *const *words, int count)
{
    for (int i = 0; i < count; i++) {
        if (strcasecmp(value, words[i]) == 0)
            return i;
    }
    return -1;
}

static int config_set_yesno(struct config *cfg, const struct config_key *key,
                            const char *value, char *err, size_t errlen)
{
    static const char *const words[] = {"no", "yes"};
    int v = config_word(value, words, 2);

    if (v < 0) {
        snprintf(err, errlen, "must be yes or no, not '%s'", value);
        return -1;
    }
    *(int *)((char *)cfg + key->offset) = v;
    return 0;
}

const char *const config_read_from_names[CONFIG_READ_FROM_COUNT] = {
    [CONFIG_READ_PRIMARY] = "primary", [CONFIG_READ_PREFER_REPLICA] = "prefer-replica",
    [CONFIG_READ_REPLICA] = "replica"};

int config_read_from_parse(const char *value)
{
    return config_word(value, config_read_from_names, CONFIG_READ_FROM_COUNT);
}

static int config_set_read_from(struct config *cfg, const struct config_key *key,
                                const char *value, char *err, size_t errlen)
{
    int v = config_read_from_parse(value);

    (void)key;
    if (v < 0) {
        snprintf(err, errlen, "must be primary, prefer-replica or replica, not '%s'", value);
        return -1;
    }
    cfg->read_from = v;
    return 0;
}

static int config_set_tls_auth(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen)
{
    /* In the order of enum config_tls_auth. */
    static const char *const words[] = {"no", "yes", "optional"};
    int v = config_word(value, words, 3);

    (void)key;
    if (v < 0) {
        snprintf(err, errlen, "must be yes, no or optional, not '%s'", value);
        return -1;
    }
    cfg->tls_auth_clients = v;
    return 0;
}

/* "TLSv1.2 TLSv1.3", as Redis's tls-protocols: a list of versions. */
static int config_set_tls_protocols(struct config *cfg, const struct config_key *key,
                                    const char *value, char *err, size_t errlen)
{
    /* Bit I of enum config_tls_protocol is WORDS[I]. */
    static const char *const words[] = {"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"};
    char *copy = strdup(value), *save = NULL;
    int bits = 0, rc = 0;

    (void)key;
    for (char *w = strtok_r(copy, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        int v = config_word(w, words, 4);
        if (v < 0) {
            snprintf(err, errlen, "unknown protocol '%s' (TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)", w);
            rc = -1;
            break;
        }
        bits |= 1 << v;
    }
    free(copy);
    if (rc == 0 && bits == 0) {
        snprintf(err, errlen, "names no protocol");
        rc = -1;
    }
    if (rc == 0)
        cfg->tls_protocols = bits;
    return rc;
}

static int config_set_int(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen)
{
    return value_int(value, key->min, key->max, (long long *)((char *)cfg + key->offset),
                     err, errlen);
}

/* lock_replica_acks: a count, or "all" (CONFIG_ACKS_ALL: every replica
 * online at the grant, at least one). */
static int config_set_acks(struct config *cfg, const struct config_key *key,
                           const char *value, char *err, size_t errlen)
{
    long long *field = (long long *)((char *)cfg + key->offset);

    if (strcasecmp(value, "all") == 0) {
        *field = CONFIG_ACKS_ALL;
        return 0;
    }
    if (value_int(value, key->min, key->max, field, err, errlen) == 0)
        return 0;
    snprintf(err, errlen, "'%s' is not all nor a count of replicas (%lld to %lld)", value,
             key->min, key->max);
    return -1;
}

static int config_set_bytes(struct config *cfg, const struct config_key *key,
                            const char *value, char *err, size_t errlen)
{
    return value_bytes(value, key->min, key->max, (long long *)((char *)cfg + key->offset),
                       err, errlen);
}

static int config_set_log_level(struct config *cfg, const struct config_key *key,
                                const char *value, char *err, size_t errlen)
{
    int level = log_level_parse(value);

    (void)key;
    if (level < 0) {
        snprintf(err, errlen, "log_level must be debug, info, notice or warning, not '%s'", value);
        return -1;
    }
    cfg->log_level = level;
    return 0;
}

static int config_set_log_format(struct config *cfg, const struct config_key *key,
                                 const char *value, char *err, size_t errlen)
{
    int format = log_format_parse(value);

    (void)key;
    if (format < 0) {
        snprintf(err, errlen, "log_format must be text or json, not '%s'", value);
        return -1;
    }
    cfg->log_format = format;
    return 0;
}

static const struct config_key *config_find_key(const char *name)
{
    for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
        if (strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    }
    return NULL;
}

static void config_on_key(void *ctx, const char *section, const char *name, const char *value,
                          const char *file, int line, struct errlist *errs)
{
    struct config_parse *p = ctx;
    const struct config_key *key;
    char err[256];
    size_t idx;

    if (strcmp(section, CONFIG_SECTION) != 0) {
        if (name == NULL)
            errlist_add(errs, file, line, "unknown section [%s] (expected [proxy])", section);
        return;
    }
    if (name == NULL) {
        if (p->section_line == 0)
            p->section_line = line;
        return;
    }
    key = config_find_key(name);
    if (key == NULL) {
        errlist_add(errs, file, line, "unknown key '%s' in [proxy]", name);
        return;
    }
    idx = (size_t)(key - config_keys);
    if (p->seen_line[idx] != 0 && !key->repeatable) {
        errlist_add(errs, file, line, "duplicate key '%s' (first set on line %d)", name,
                    p->seen_line[idx]);
        return;
    }
    p->seen_line[idx] = line;
    if (key->set(p->cfg, key, value, err, sizeof(err)) != 0)
        errlist_add(errs, file, line, "%s: %s", name, err);
}

/* A relative path (of the rule or users file, or a certificate) is taken
 * from the config file's folder. */
static void config_resolve_path(const struct config *cfg, char **path)
{
    char *copy, *dir, *full;
    size_t n;

    if (*path == NULL || (*path)[0] == '/')
        return;
    copy = strdup(cfg->path);
    dir = dirname(copy);
    n = strlen(dir) + strlen(*path) + 2;
    full = malloc(n);
    snprintf(full, n, "%s/%s", dir, *path);
    free(copy);
    free(*path);
    *path = full;
}

static void config_resolve_paths(struct config *cfg)
{
    char **paths[] = {&cfg->rules, &cfg->users, &cfg->tls_cert_file, &cfg->tls_key_file,
                      &cfg->tls_ca_cert_file, &cfg->backend_tls_ca_cert_file,
                      &cfg->backend_tls_cert_file, &cfg->backend_tls_key_file};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        config_resolve_path(cfg, paths[i]);
    if (cfg->handover_socket != NULL && strcmp(cfg->handover_socket, "off") != 0)
        config_resolve_path(cfg, &cfg->handover_socket);
}

int config_key_line(const struct config *cfg, const char *name)
{
    const struct config_key *key = config_find_key(name);

    return key != NULL && cfg->key_lines != NULL ? cfg->key_lines[key - config_keys] : 0;
}

/* Keys that only make sense together. */
static void config_check_tls(const struct config *cfg, struct errlist *errs)
{
    int line = config_key_line(cfg, "tls_listen");

    if (cfg->tls_listen_count > 0 && (cfg->tls_cert_file == NULL || cfg->tls_key_file == NULL))
        errlist_add(errs, cfg->path, line, "tls_listen needs tls_cert_file and tls_key_file");
    if (cfg->tls_listen_count > 0 && cfg->tls_auth_clients != CONFIG_TLS_AUTH_NO &&
        cfg->tls_ca_cert_file == NULL)
        errlist_add(errs, cfg->path, line,
                    "tls_auth_clients (yes by default) needs tls_ca_cert_file to check "
                    "client certificates; or set tls_auth_clients = no");
    if ((cfg->backend_tls_cert_file == NULL) != (cfg->backend_tls_key_file == NULL))
        errlist_add(errs, cfg->path,
                    config_key_line(cfg, cfg->backend_tls_cert_file != NULL
                                             ? "backend_tls_cert_file"
                                             : "backend_tls_key_file"),
                    "backend_tls_cert_file and backend_tls_key_file go together");
}

/* `replicas =` is for standalone mode (MODE 0: `backend =`): cluster and
 * Sentinel mode learn them from the cluster's map or the Sentinels. The
 * primary is no replica of itself. */
static void config_check_replicas(const struct config *cfg, const char *path, int mode,
                                  struct errlist *errs)
{
    int line = config_key_line(cfg, "replicas");

    if (cfg->replica_count == 0)
        return;
    if (mode > 0) {
        errlist_add(errs, path, line, "'replicas' is for standalone mode ('backend ='): %s",
                    mode == 1 ? "in cluster mode the replicas are those of the cluster's map"
                              : "in Sentinel mode the replicas are those a majority of the "
                                "Sentinels list");
        return;
    }
    for (int i = 0; i < cfg->replica_count; i++) {
        if (cfg->backend != NULL && strcmp(cfg->replicas[i], cfg->backend) == 0)
            errlist_add(errs, path, line, "'replicas' names the primary '%s' (backend)",
                        cfg->replicas[i]);
    }
}

/* Exactly one of `backend` (standalone), `cluster` (seed nodes) and
 * `sentinel` (a standalone primary found through Sentinel, which then
 * needs `sentinel_master`). */
static void config_check_backend(const struct config_parse *p, const char *path,
                                 struct errlist *errs)
{
    static const char *const modes[] = {"backend", "cluster", "sentinel"};
    int lines[3], first = -1;

    for (int i = 0; i < 3; i++)
        lines[i] = p->seen_line[config_find_key(modes[i]) - config_keys];
    for (int i = 0; i < 3; i++) {
        if (lines[i] == 0)
            continue;
        if (first < 0) {
            first = i;
            continue;
        }
        errlist_add(errs, path, lines[i] > lines[first] ? lines[i] : lines[first],
                    "'%s' (line %d) and '%s' (line %d) exclude each other: give one",
                    modes[first], lines[first], modes[i], lines[i]);
    }
    if (first < 0)
        errlist_add(errs, path, p->section_line,
                    "missing key 'backend' (or 'cluster' for Redis Cluster, or 'sentinel' "
                    "for Redis Sentinel) in [proxy]");
    if (lines[2] != 0 && p->cfg->sentinel_master == NULL)
        errlist_add(errs, path, lines[2], "'sentinel' needs 'sentinel_master = NAME', the "
                                          "master's name as the Sentinels know it");
    if (lines[2] == 0 && p->cfg->sentinel_master != NULL)
        errlist_add(errs, path, config_key_line(p->cfg, "sentinel_master"),
                    "'sentinel_master' without 'sentinel = host:port ...'");
    config_check_replicas(p->cfg, path, first, errs);
}

/* Where a secret's file name is looked up: a bare name (no '/') in
 * $CREDENTIALS_DIRECTORY when systemd set it (LoadCredential=), otherwise
 * as any relative path, from the config file's folder. */
static void config_resolve_secret_path(const struct config *cfg, char **path)
{
    const char *creds = getenv("CREDENTIALS_DIRECTORY");
    size_t n;
    char *full;

    if (creds == NULL || creds[0] == '\0' || strchr(*path, '/') != NULL) {
        config_resolve_path(cfg, path);
        return;
    }
    n = strlen(creds) + strlen(*path) + 2;
    full = malloc(n);
    snprintf(full, n, "%s/%s", creds, *path);
    free(*path);
    *path = full;
}

/* Read the password in PATH into *OUT: the file's one line (a final
 * newline dropped). A file other users may read or write is refused: the
 * point of a password file is that only sluice's user reads it. Returns
 * 0, or -1 with ERR set. */
static int config_read_secret(const char *path, char **out, char *err, size_t errlen)
{
    char buf[4096];
    struct stat st;
    size_t n;
    FILE *f = safefile_open(path, err, errlen);

    if (f == NULL)
        return -1;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
        snprintf(err, errlen, "%s is readable or writable by other users (mode %04o): "
                 "chmod o-rwx it, or give it with systemd's LoadCredential=", path,
                 (unsigned)(st.st_mode & 07777));
        fclose(f);
        return -1;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '\r')
        buf[--n] = '\0';
    if (n == 0 || memchr(buf, '\n', n) != NULL || strlen(buf) != n) {
        snprintf(err, errlen, "%s must hold the password alone, on one line", path);
        return -1;
    }
    free(*out);
    *out = strdup(buf);
    explicit_bzero(buf, sizeof(buf));
    return 0;
}

/* backend_password_file and sentinel_password_file: each read into its
 * password, which it excludes. */
static void config_read_secrets(struct config *cfg, struct errlist *errs)
{
    static const struct {
        const char *file_key, *key;
        size_t file_field, field;
    } secrets[] = {
        {"backend_password_file", "backend_password", offsetof(struct config, backend_password_file),
         offsetof(struct config, backend_password)},
        {"sentinel_password_file", "sentinel_password",
         offsetof(struct config, sentinel_password_file),
         offsetof(struct config, sentinel_password)},
    };
    char err[600];

    for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++) {
        char **file = (char **)((char *)cfg + secrets[i].file_field);
        char **password = (char **)((char *)cfg + secrets[i].field);
        int line = config_key_line(cfg, secrets[i].file_key);

        if (*file == NULL)
            continue;
        if (*password != NULL) {
            errlist_add(errs, cfg->path, line, "'%s' and '%s' (line %d) exclude each other: "
                        "give one", secrets[i].file_key, secrets[i].key,
                        config_key_line(cfg, secrets[i].key));
            continue;
        }
        config_resolve_secret_path(cfg, file);
        if (config_read_secret(*file, password, err, sizeof(err)) != 0)
            errlist_add(errs, cfg->path, line, "%s: %s", secrets[i].file_key, err);
    }
}

int config_load(const char *path, struct config *cfg, struct errlist *errs)
{
    struct config_parse p = {.cfg = cfg};
    int before = errs->count;

    config_defaults(cfg);
    p.seen_line = cfg->key_lines;
    cfg->path = strdup(path);
    if (inifile_parse(path, config_on_key, &p, errs) != 0)
        return -1;
    if (p.section_line == 0)
        errlist_add(errs, path, 1, "missing section [proxy]");
    else
        config_check_backend(&p, path, errs);
    if (cfg->listen_count == 0)
        cfg->listen[cfg->listen_count++] = strdup("127.0.0.1:6380");
    config_resolve_paths(cfg);
    config_read_secrets(cfg, errs);
    if (p.section_line != 0)
        config_check_tls(cfg, errs);
    return errs->count == before ? 0 : -1;
}

/* The field of KEY in CFG. */
static void *config_field(const struct config *cfg, const struct config_key *key)
{
    return (char *)cfg + key->offset;
}

static int config_list_count(const struct config *cfg, const struct config_key *key)
{
    return *(const int *)((const char *)cfg + key->count_offset);
}

static int config_same_string(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* Whether KEY has the same value in A and B. */
static int config_same(const struct config *a, const struct config *b,
                       const struct config_key *key)
{
    switch (key->kind) {
    case CONFIG_STR:
        return config_same_string(*(char **)config_field(a, key), *(char **)config_field(b, key));
    case CONFIG_NUM:
        return *(long long *)config_field(a, key) == *(long long *)config_field(b, key);
    case CONFIG_INT:
        return *(int *)config_field(a, key) == *(int *)config_field(b, key);
    case CONFIG_LIST:
        if (config_list_count(a, key) != config_list_count(b, key))
            return 0;
        for (int i = 0; i < config_list_count(a, key); i++) {
            if (strcmp(((char **)config_field(a, key))[i], ((char **)config_field(b, key))[i]))
                return 0;
        }
        return 1;
    }
    return 0;
}

/* DST's KEY takes SRC's value (a copy). */
static void config_copy(struct config *dst, const struct config *src,
                        const struct config_key *key)
{
    char **to = config_field(dst, key), *const *from = config_field(src, key);

    switch (key->kind) {
    case CONFIG_STR:
        free(*to);
        *to = *from != NULL ? strdup(*from) : NULL;
        break;
    case CONFIG_NUM:
        *(long long *)config_field(dst, key) = *(long long *)config_field(src, key);
        break;
    case CONFIG_INT:
        *(int *)config_field(dst, key) = *(int *)config_field(src, key);
        break;
    case CONFIG_LIST:
        for (int i = 0; i < config_list_count(dst, key); i++)
            free(to[i]);
        for (int i = 0; i < config_list_count(src, key); i++)
            to[i] = strdup(from[i]);
        *(int *)((char *)dst + key->count_offset) = config_list_count(src, key);
        break;
    }
}

/* Whether a change of KEY from RUNNING to NEXT waits for a restart. */
static int config_needs_restart(const struct config *next, const struct config *running,
                                const struct config_key *key)
{
    if (key->apply == CONFIG_LIVE || config_same(next, running, key))
        return 0;
    if (key->apply == CONFIG_LIVE_RENAME)
        return (*(char **)config_field(next, key) == NULL) !=
               (*(char **)config_field(running, key) == NULL);
    return 1;
}

int config_keep_restart_keys(struct config *next, const struct config *running, char *names,
                             size_t size, struct errlist *errs)
{
    int before = errs->count;
    size_t len = 0;
    int count = 0;

    if (size > 0)
        names[0] = '\0';
    for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
        const struct config_key *key = &config_keys[i];

        if (!config_needs_restart(next, running, key))
            continue;
        log_warning("%s:%d: %s changed: a restart applies it (sluice's hand-over); "
                    "the running value stays until then", next->path,
                    config_key_line(next, key->name), key->name);
        config_copy(next, running, key);
        if (len < size)
            len += (size_t)snprintf(names + len, size - len, "%s%s", count > 0 ? ", " : "",
                                    key->name);
        count++;
    }
    /* A running tls_listen with the certificates the new file names. */
    config_check_tls(next, errs);
    return errs->count == before ? count : -1;
}

int config_key_live(const char *name)
{
    const struct config_key *key = config_find_key(name);

    return key != NULL && key->apply != CONFIG_RESTART;
}

/* KEY's value in CFG as sluice.ini would spell it, into BUF: words for
 * the keys that take words, lists space-separated, "" when unset, and
 * "(redacted)" for a password that is set (as Redis's CONFIG GET does for
 * none, but sluice shows its config to operators, never its secrets). */
static void config_value_text(const struct config *cfg, const struct config_key *key,
                              char *buf, size_t size)
{
    static const char *const tls_auth[] = {"no", "yes", "optional"};
    static const char *const tls_versions[] = {"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"};
    const void *field = config_field(cfg, key);
    size_t at = 0;

    buf[0] = '\0';
    switch (key->kind) {
    case CONFIG_STR:
        if (*(char *const *)field != NULL)
            snprintf(buf, size, "%s", strstr(key->name, "password") != NULL &&
                                          strstr(key->name, "_file") == NULL
                                      ? "(redacted)" : *(char *const *)field);
        return;
    case CONFIG_NUM:
        snprintf(buf, size, "%lld", *(const long long *)field);
        return;
    case CONFIG_LIST:
        for (int i = 0; i < config_list_count(cfg, key) && at < size; i++)
            at += (size_t)snprintf(buf + at, size - at, "%s%s", i > 0 ? " " : "",
                                   ((char *const *)field)[i]);
        return;
    case CONFIG_INT:
        break;
    }
    int v = *(const int *)field;
    if (key->set == config_set_yesno)
        snprintf(buf, size, "%s", v ? "yes" : "no");
    else if (key->set == config_set_log_level)
        snprintf(buf, size, "%s", log_level_name(v));
    else if (key->set == config_set_log_format)
        snprintf(buf, size, "%s", log_format_name(v));
    else if (key->set == config_set_read_from)
        snprintf(buf, size, "%s", config_read_from_names[v]);
    else if (key->set == config_set_tls_auth)
        snprintf(buf, size, "%s", tls_auth[v]);
    else if (key->set == config_set_tls_protocols)
        for (int i = 0; i < 4 && at < size; i++) {
            if (v & (1 << i))
                at += (size_t)snprintf(buf + at, size - at, "%s%s", at > 0 ? " " : "",
                                       tls_versions[i]);
        }
    else
        snprintf(buf, size, "%d", v);
}

void config_each(const struct config *cfg, config_each_fn *fn, void *ctx)
{
    char value[2048];

    for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
        config_value_text(cfg, &config_keys[i], value, sizeof(value));
        fn(ctx, config_keys[i].name, value);
    }
}

void config_free(struct config *cfg)
{
    char **strings[] = {&cfg->tls_cert_file, &cfg->tls_key_file, &cfg->tls_ca_cert_file,
                        &cfg->tls_ciphers, &cfg->tls_ciphersuites,
                        &cfg->backend_tls_ca_cert_file, &cfg->backend_tls_cert_file,
                        &cfg->backend_tls_key_file, &cfg->backend_tls_server_name,
                        &cfg->metrics_listen};

    for (int i = 0; i < cfg->listen_count; i++)
        free(cfg->listen[i]);
    for (int i = 0; i < cfg->tls_listen_count; i++)
        free(cfg->tls_listen[i]);
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        free(*strings[i]);
    free(cfg->key_lines);
    free(cfg->path);
    free(cfg->backend);
    for (int i = 0; i < cfg->cluster_seed_count; i++)
        free(cfg->cluster_seeds[i]);
    for (int i = 0; i < cfg->sentinel_count; i++)
        free(cfg->sentinels[i]);
    for (int i = 0; i < cfg->replica_count; i++)
        free(cfg->replicas[i]);
    free(cfg->sentinel_master);
    free(cfg->sentinel_user);
    free(cfg->sentinel_password);
    free(cfg->sentinel_password_file);
    free(cfg->backend_user);
    free(cfg->backend_password);
    free(cfg->backend_password_file);
    free(cfg->rules);
    free(cfg->users);
    free(cfg->log_file);
    free(cfg->pidfile);
    free(cfg->handover_socket);
    memset(cfg, 0, sizeof(*cfg));
}
