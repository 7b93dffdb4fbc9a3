/* config.h - sluice.ini: the [proxy] section, loaded whole through a table
 * of keys, validated before anything uses it. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include "errlist.h"

#define CONFIG_MAX_LISTEN 16

struct config {
    char *path;
    char *listen[CONFIG_MAX_LISTEN];   /* "host:port" */
    int listen_count;
    char *backend;                     /* "host:port" */
    char *backend_user;
    char *backend_password;
    char *rules;                       /* resolved against the config's folder */
    int log_level;                     /* enum log_level */
    char *log_file;                    /* NULL: stderr */
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
};

/* Load PATH into CFG (defaults for absent keys). Every problem is added to
 * ERRS as "FILE:LINE: message". Returns 0 when the config is usable, -1
 * otherwise; either way config_free(CFG) releases it. */
int config_load(const char *path, struct config *cfg, struct errlist *errs);
void config_free(struct config *cfg);

#endif
