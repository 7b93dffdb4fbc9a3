/* config.c - owns the [proxy] keys of sluice.ini: their names, defaults,
 * bounds and setters. Keys are data (config_keys[]); adding one is a row. */
#include "config.h"

#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inifile.h"
#include "log.h"
#include "value.h"

#define CONFIG_SECTION "proxy"

struct config_key;
typedef int config_setter(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen);

struct config_key {
    const char *name;
    config_setter *set;
    size_t offset;        /* of the field in struct config */
    long long min, max;   /* bounds of numbers */
    int repeatable;
};

static int config_set_string(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen);
static int config_set_hostport(struct config *cfg, const struct config_key *key,
                               const char *value, char *err, size_t errlen);
static int config_set_listen(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen);
static int config_set_int(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen);
static int config_set_bytes(struct config *cfg, const struct config_key *key,
                            const char *value, char *err, size_t errlen);
static int config_set_log_level(struct config *cfg, const struct config_key *key,
                                const char *value, char *err, size_t errlen);

#define F(field) offsetof(struct config, field)
#define GB (1024LL * 1024 * 1024)
static const struct config_key config_keys[] = {
    {"listen", config_set_listen, F(listen), 0, 0, 1},
    {"backend", config_set_hostport, F(backend), 0, 0, 0},
    {"backend_user", config_set_string, F(backend_user), 0, 0, 0},
    {"backend_password", config_set_string, F(backend_password), 0, 0, 0},
    {"rules", config_set_string, F(rules), 0, 0, 0},
    {"log_level", config_set_log_level, F(log_level), 0, 0, 0},
    {"log_file", config_set_string, F(log_file), 0, 0, 0},
    {"maxclients", config_set_int, F(maxclients), 1, 1000000, 0},
    {"timeout", config_set_int, F(timeout_s), 0, 100000000, 0},
    {"backend_connections", config_set_int, F(backend_connections), 1, 64, 0},
    {"backend_max_connections", config_set_int, F(backend_max_connections), 1, 1000000, 0},
    {"backend_spare_connections", config_set_int, F(backend_spare_connections), 0, 64, 0},
    {"client_max_inflight", config_set_int, F(client_max_inflight), 1, 1000000, 0},
    {"client_max_pending_bytes", config_set_bytes, F(client_max_pending_bytes), 64 * 1024, 64 * GB, 0},
    {"client_output_buffer_limit", config_set_bytes, F(client_output_buffer_limit), 0, 64 * GB, 0},
    {"client_query_buffer_limit", config_set_bytes, F(client_query_buffer_limit), 1024 * 1024, 64 * GB, 0},
    {"proto_max_bulk_len", config_set_bytes, F(proto_max_bulk_len), 1024 * 1024, 64 * GB, 0},
    {"proto_max_multibulk_len", config_set_int, F(proto_max_multibulk_len), 1, 2147483647, 0},
    {"shutdown_timeout", config_set_int, F(shutdown_timeout_ms), 0, 3600000, 0},
};
#undef F
#define CONFIG_KEY_COUNT (sizeof(config_keys) / sizeof(config_keys[0]))

struct config_parse {
    struct config *cfg;
    int seen_line[CONFIG_KEY_COUNT];   /* line where each key was set, 0 = not yet */
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

static int config_set_listen(struct config *cfg, const struct config_key *key,
                             const char *value, char *err, size_t errlen)
{
    char host[256];
    int port;

    (void)key;
    if (value_hostport(value, host, sizeof(host), &port, err, errlen) != 0)
        return -1;
    if (cfg->listen_count == CONFIG_MAX_LISTEN) {
        snprintf(err, errlen, "at most %d listen addresses", CONFIG_MAX_LISTEN);
        return -1;
    }
    cfg->listen[cfg->listen_count++] = strdup(value);
    return 0;
}

static int config_set_int(struct config *cfg, const struct config_key *key,
                          const char *value, char *err, size_t errlen)
{
    return value_int(value, key->min, key->max, (long long *)((char *)cfg + key->offset),
                     err, errlen);
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

/* A relative rules path is taken from the config file's folder. */
static void config_resolve_rules(struct config *cfg)
{
    char *copy, *dir, *full;
    size_t n;

    if (cfg->rules == NULL || cfg->rules[0] == '/')
        return;
    copy = strdup(cfg->path);
    dir = dirname(copy);
    n = strlen(dir) + strlen(cfg->rules) + 2;
    full = malloc(n);
    snprintf(full, n, "%s/%s", dir, cfg->rules);
    free(copy);
    free(cfg->rules);
    cfg->rules = full;
}

int config_load(const char *path, struct config *cfg, struct errlist *errs)
{
    struct config_parse p = {.cfg = cfg};
    int before = errs->count;

    config_defaults(cfg);
    cfg->path = strdup(path);
    if (inifile_parse(path, config_on_key, &p, errs) != 0)
        return -1;
    if (p.section_line == 0)
        errlist_add(errs, path, 1, "missing section [proxy]");
    else if (cfg->backend == NULL)
        errlist_add(errs, path, p.section_line, "missing key 'backend' in [proxy]");
    if (cfg->listen_count == 0)
        cfg->listen[cfg->listen_count++] = strdup("127.0.0.1:6380");
    config_resolve_rules(cfg);
    return errs->count == before ? 0 : -1;
}

void config_free(struct config *cfg)
{
    for (int i = 0; i < cfg->listen_count; i++)
        free(cfg->listen[i]);
    free(cfg->path);
    free(cfg->backend);
    free(cfg->backend_user);
    free(cfg->backend_password);
    free(cfg->rules);
    free(cfg->log_file);
    memset(cfg, 0, sizeof(*cfg));
}
