/* config.h - sluice.ini: the [proxy] section, loaded whole through a table
 * of keys, validated before anything uses it. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include "errlist.h"

#define CONFIG_MAX_LISTEN 16
#define CONFIG_MAX_SEEDS 64
/* At most this many `replicas =` (replicas.h REPLICAS_MAX). */
#define CONFIG_MAX_REPLICAS 16

/* tls_auth_clients, as Redis's tls-auth-clients. */
enum config_tls_auth { CONFIG_TLS_AUTH_NO, CONFIG_TLS_AUTH_YES, CONFIG_TLS_AUTH_OPTIONAL };

/* read_from: where clients' read-only commands go (README "Reading from
 * replicas"). In the order of config_read_from_names. */
enum config_read_from {
    CONFIG_READ_PRIMARY,         /* always the primary */
    CONFIG_READ_PREFER_REPLICA,  /* a healthy replica, else the primary */
    CONFIG_READ_REPLICA,         /* a healthy replica, else an error */
    CONFIG_READ_FROM_COUNT
};
extern const char *const config_read_from_names[CONFIG_READ_FROM_COUNT];

/* VALUE ("primary", "prefer-replica", "replica", case-insensitive) as an
 * enum config_read_from; -1 when it is none of them. */
int config_read_from_parse(const char *value);

/* Bits of tls_protocols. */
enum config_tls_protocol {
    CONFIG_TLS_V1 = 1 << 0,
    CONFIG_TLS_V1_1 = 1 << 1,
    CONFIG_TLS_V1_2 = 1 << 2,
    CONFIG_TLS_V1_3 = 1 << 3,
};

struct config {
    char *path;
    char *listen[CONFIG_MAX_LISTEN];   /* "host:port" */
    int listen_count;
    char *backend;                     /* "host:port"; NULL in cluster mode */
    char *cluster_seeds[CONFIG_MAX_SEEDS]; /* `cluster =`: "host:port" each */
    int cluster_seed_count;            /* 0: standalone mode */
    long long cluster_refresh_interval_ms; /* slot map refreshed this often */
    long long cluster_max_redirects;   /* MOVED/ASK/TRYAGAIN followed per request */
    long long cluster_retry_window_ms; /* a request retried this long while its node is down */
    /* Sentinel mode (README "Sentinel"): the primary of sentinel_master, as
     * the Sentinels say; 0 Sentinels: not this mode. */
    char *sentinels[CONFIG_MAX_SEEDS]; /* `sentinel =`: "host:port" each */
    int sentinel_count;
    char *sentinel_master;
    char *sentinel_user;               /* the Sentinels' own AUTH */
    char *sentinel_password;
    char *sentinel_password_file;      /* read into sentinel_password */
    int sentinel_tls;                  /* the Sentinels speak TLS */
    long long sentinel_refresh_interval_ms; /* the Sentinels asked again this often */
    long long failover_retry_window_ms; /* requests wait this long for a new primary */
    /* `replicas =` (standalone mode): the replicas reads may use; the
     * primary's INFO never adds one (README "Reading from replicas"). */
    char *replicas[CONFIG_MAX_REPLICAS];
    int replica_count;
    char *backend_user;
    char *backend_password;
    char *backend_password_file;       /* read into backend_password */
    char *rules;                       /* resolved against the config's folder */
    char *users;                       /* the users file, resolved likewise; NULL: none */
    int users_in_redis;                /* keep restricted users' scripts' users in Redis */
    int log_level;                     /* enum log_level */
    char *log_file;
    int log_connections;               /* a notice line per connect and per close */                    /* NULL: stderr */
    int log_format;                    /* enum log_format */
    char *pidfile;                     /* NULL: none; as given (like log_file) */
    long long maxclients;
    long long timeout_s;               /* idle client timeout, 0 = never */
    long long backend_connections;     /* shared connections per backend node */
    long long backend_max_connections; /* private + one-shot connections per node */
    long long backend_spare_connections; /* connected private connections kept ready */
    long long client_max_inflight;     /* requests of one client sent, not yet answered */
    long long client_max_pending_bytes; /* replies waiting to be written to one client */
    long long client_output_buffer_limit;
    long long client_query_buffer_limit;
    long long proto_max_bulk_len;
    long long proto_max_multibulk_len;
    long long shutdown_timeout_ms;
    char *handover_socket;             /* the hand-over control socket (README "Restart and
                                          upgrade"); NULL: derived from the listen address,
                                          "off": none */
    long long slowlog_log_slower_than; /* µs; 0: every request; negative: no slow log */
    long long slowlog_max_len;         /* entries the slow log keeps */
    long long top_keys_capacity;       /* subjects each PROXY TOP sketch keeps */
    long long top_metrics_count;       /* ranks of each list in sluice_top_requests_per_second */
    int top_metrics_keys;              /* the KEYS list there too (key names may be secret) */
    /* Locks across a failover (README "Locks"). */
    long long lock_replica_acks;       /* replicas a grant must reach (0: none asked;
                                          CONFIG_ACKS_ALL: every one online, at least one) */
    long long lock_replica_timeout_ms; /* how long a grant waits for them */
    long long lock_max_ttl_ms;         /* longest LOCK / RENEW ttl_ms */
    long long lock_failover_grace_ms;  /* no grants this long after a primary change;
                                          -1 (unset): lock_max_ttl_ms; 0: off */
    /* TLS towards clients (README "TLS"); file names resolved against the
     * config's folder. */
    char *tls_listen[CONFIG_MAX_LISTEN];   /* "host:port" */
    int tls_listen_count;
    char *tls_cert_file;
    char *tls_key_file;
    char *tls_ca_cert_file;
    int tls_auth_clients;              /* enum config_tls_auth */
    int tls_protocols;                 /* enum config_tls_protocol bits */
    char *tls_ciphers;                 /* TLS 1.2 and below; NULL: OpenSSL's */
    char *tls_ciphersuites;            /* TLS 1.3; NULL: OpenSSL's */
    long long tls_handshake_timeout_ms; /* a client not done by then is closed */
    /* TLS towards Redis. */
    int backend_tls;
    char *backend_tls_ca_cert_file;    /* NULL: the system's CAs */
    char *backend_tls_cert_file;       /* client certificate, with its key */
    char *backend_tls_key_file;
    char *backend_tls_server_name;     /* SNI and the name checked; NULL: none */
    int read_from;                     /* enum config_read_from */
    long long replica_max_lag_ms;      /* a replica further behind is not read from */
    long long replica_read_after_write_ms; /* a client's reads stay on the primary this
                                          long after its write */
    char *metrics_listen;              /* "host:port" of /metrics, /healthz, /readyz; NULL: none */
    long long metrics_max_connections; /* metrics_listen connections open at once */
    int *key_lines;                    /* line each key was set on (config_key_line) */
};

/* Load PATH into CFG (defaults for absent keys). Every problem is added to
 * ERRS as "FILE:LINE: message". Returns 0 when the config is usable, -1
 * otherwise; either way config_free(CFG) releases it. */
int config_load(const char *path, struct config *cfg, struct errlist *errs);
void config_free(struct config *cfg);

/* Every key of the table, in its order, with CFG's value as sluice.ini
 * spells it ("" unset; a set password "(redacted)"): PROXY CONFIG. */
typedef void config_each_fn(void *ctx, const char *name, const char *value);
void config_each(const struct config *cfg, config_each_fn *fn, void *ctx);

/* The line of CFG's file where key NAME was set, 0 when it was not. */
int config_key_line(const struct config *cfg, const char *name);

/* For a reload: every key that NEXT (just loaded) changes from RUNNING
 * but that only a restart applies (listen, backend, ...; README "Reload")
 * takes RUNNING's value back in NEXT, so that NEXT is what this process
 * goes on with. Their names go to NAMES, ", " between (cut at SIZE).
 * Returns how many, or -1 when the keys that go together no longer do
 * (tls_listen kept, its certificate gone): then the errors are in ERRS. */
int config_keep_restart_keys(struct config *next, const struct config *running, char *names,
                             size_t size, struct errlist *errs);

/* 1 when a change of key NAME applies at a reload (at least from one
 * value to another), 0 when only a restart applies it or NAME is no key. */
int config_key_live(const char *name);

/* Whether CFG runs sluice in cluster mode (`cluster =` names seeds): from
 * start on, the same answer as cluster_enabled. */
static inline int config_cluster_mode(const struct config *cfg)
{
    return cfg->cluster_seed_count > 0;
}

/* Whether CFG finds the primary through Sentinel (`sentinel =`). */
static inline int config_sentinel_mode(const struct config *cfg)
{
    return cfg->sentinel_count > 0;
}

/* Whether under CFG sluice authenticates clients itself (a users file, or
 * backend_password as its one user): from start on, the same answer as
 * auth_local. */
static inline int config_auth_local(const struct config *cfg)
{
    return cfg->users != NULL || cfg->backend_password != NULL;
}

/* lock_replica_acks = all. */
#define CONFIG_ACKS_ALL (-2LL)

#endif
