/* fuzz_config.c - libFuzzer target for the config loader (config.c over
 * inifile.c): any file loads or fails without a crash or a leak, and every
 * error is a "FILE:LINE: message" line. */
#include <stdint.h>

#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *path = fuzz_write_file(data, len);
    struct config cfg;
    struct errlist errs = {0};
    int rc = config_load(path, &cfg, &errs);

    fuzz_check_errlines(errs.text, path);
    FUZZ_CHECK((rc == 0) == (errs.count == 0), "config_load says %d with %d errors", rc,
               errs.count);
    if (rc == 0) {
        /* What the proxy relies on in a config that loads. */
        FUZZ_CHECK((cfg.backend != NULL) != (cfg.cluster_seed_count > 0),
                   "a usable config needs exactly one of backend and cluster (%d seeds)",
                   cfg.cluster_seed_count);
        for (int i = 0; i < cfg.cluster_seed_count; i++)
            FUZZ_CHECK(cfg.cluster_seeds[i] != NULL && cfg.cluster_seeds[i][0] != '\0',
                       "empty cluster seed %d", i);
        FUZZ_CHECK(cfg.listen_count >= 1 && cfg.listen_count <= CONFIG_MAX_LISTEN,
                   "%d listen addresses", cfg.listen_count);
        for (int i = 0; i < cfg.listen_count; i++)
            FUZZ_CHECK(cfg.listen[i] != NULL && cfg.listen[i][0] != '\0', "empty listen %d", i);
    }
    config_free(&cfg);
    errlist_free(&errs);
    return 0;
}
