/* fuzz_rules.c - libFuzzer target for the rule file loader (rules.c over
 * inifile.c): any file loads or fails without a crash or a leak, every
 * error is a "FILE:LINE: message" line, and a set that loads is usable by
 * the match functions. */
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "commands.h"
#include "fuzz.h"
#include "rules.h"
#include "sv.h"

/* Run the match functions over every rule of RS on one fixed client and
 * request, for the sanitizers' sake; their answers are not checked. */
static void fuzz_use_rules(const struct rule_set *rs)
{
    static const char *const words[] = {"SET", "session:1", "v"};
    struct sv argv[3];
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    const struct command *cmd;

    for (int i = 0; i < 3; i++) {
        argv[i].ptr = words[i];
        argv[i].len = strlen(words[i]);
    }
    cmd = commands_resolve(3, argv);
    for (int i = 0; i < rules_count(rs); i++) {
        const struct rule *r = rules_get(rs, i);
        FUZZ_CHECK(r->index == i && r->name != NULL && r->name[0] != '\0', "rule %d", i);
        FUZZ_CHECK(r->rate_per_s > 0 && r->burst >= 1, "rule %s: rate %g burst %g", r->name,
                   r->rate_per_s, r->burst);
        FUZZ_CHECK(rules_same_params(r, r), "rule %s differs from itself", r->name);
        (void)rules_client_matches(r, (const struct sockaddr *)&addr, NULL, "batch-1");
        (void)rules_command_matches(r, cmd, argv, 3);
        (void)rules_command_matches(r, NULL, argv, 3);
        (void)rules_key_may_start_with(r, 's');
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    commands_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *path = fuzz_write_file(data, len);
    struct errlist errs = {0};
    struct rule_set *rs = rules_load(path, &errs);

    fuzz_check_errlines(errs.text, path);
    FUZZ_CHECK((rs != NULL) == (errs.count == 0), "rules_load gave %s with %d errors",
               rs != NULL ? "a set" : "NULL", errs.count);
    if (rs != NULL)
        fuzz_use_rules(rs);
    rules_free(rs);
    errlist_free(&errs);
    return 0;
}
