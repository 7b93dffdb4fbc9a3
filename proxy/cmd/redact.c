/* redact.c - owns the table of secret arguments: what Redis 7.0 passes to
 * redactClientCommandArgument (AUTH, HELLO ... AUTH, ACL SETUSER, CONFIG
 * SET of a sensitive parameter, MIGRATE ... AUTH/AUTH2) plus sluice's own
 * OWNER tokens (a token is enough to unlock someone else's lock). Pure:
 * reads arguments, keeps nothing. */
#include "redact.h"

#include <string.h>
#include <strings.h>

enum redact_how {
    REDACT_FROM,         /* every argument from FIRST on */
    REDACT_AFTER_WORD,   /* the COUNT arguments after WORD, looked for from FIRST on */
    REDACT_CONFIG_VALUE, /* CONFIG SET name value...: the values of redact_configs */
};

struct redact_rule {
    const char *command;   /* argv[0], any case */
    const char *sub;       /* argv[1], any case; NULL: any */
    enum redact_how how;
    int first;             /* where the rule starts looking */
    const char *word;      /* REDACT_AFTER_WORD's keyword */
    int count;             /* arguments hidden after WORD */
};

static const struct redact_rule redact_rules[] = {
    {"auth", NULL, REDACT_FROM, 1, NULL, 0},
    {"acl", "setuser", REDACT_FROM, 2, NULL, 0},   /* the user's name and every rule */
    {"hello", NULL, REDACT_AFTER_WORD, 2, "auth", 2},
    {"migrate", NULL, REDACT_AFTER_WORD, 6, "auth", 1},
    {"migrate", NULL, REDACT_AFTER_WORD, 6, "auth2", 2},
    {"config", "set", REDACT_CONFIG_VALUE, 2, NULL, 0},
    {"lock", NULL, REDACT_AFTER_WORD, 2, "owner", 1},
    {"unlock", NULL, REDACT_AFTER_WORD, 2, "owner", 1},
    {"renew", NULL, REDACT_AFTER_WORD, 2, "owner", 1},
};
#define REDACT_RULES (int)(sizeof(redact_rules) / sizeof(redact_rules[0]))

/* CONFIG SET parameters whose value is a secret (Redis's SENSITIVE_CONFIG,
 * and the TLS key passphrases). */
static const char *const redact_configs[] = {
    "masterauth", "masteruser", "requirepass", "tls-key-file-pass", "tls-client-key-file-pass",
};
#define REDACT_CONFIGS (int)(sizeof(redact_configs) / sizeof(redact_configs[0]))

/* Bits FROM to KEPT - 1. */
static uint32_t redact_range(int from, int kept)
{
    uint32_t bits = 0;

    for (int i = from; i < kept; i++)
        bits |= 1u << i;
    return bits;
}

static uint32_t redact_after_word(const struct redact_rule *r, const struct sv *argv, int argc,
                                  int kept)
{
    uint32_t bits = 0;

    for (int j = r->first; j < kept; j++) {
        if (argv[j].ptr == NULL || !sv_ieq(argv[j], r->word) || j + r->count >= argc)
            continue;
        for (int k = 1; k <= r->count && j + k < kept; k++)
            bits |= 1u << (j + k);
        j += r->count;
    }
    return bits;
}

static int redact_config_name(struct sv name)
{
    for (int i = 0; i < REDACT_CONFIGS && name.ptr != NULL; i++) {
        if (sv_ieq(name, redact_configs[i]))
            return 1;
    }
    return 0;
}

static uint32_t redact_config_values(const struct sv *argv, int kept)
{
    uint32_t bits = 0;

    for (int j = 2; j + 1 < kept; j += 2) {
        if (redact_config_name(argv[j]))
            bits |= 1u << (j + 1);
    }
    return bits;
}

static uint32_t redact_rule_bits(const struct redact_rule *r, const struct sv *argv, int argc,
                                 int kept)
{
    switch (r->how) {
    case REDACT_FROM:
        return redact_range(r->first, kept);
    case REDACT_AFTER_WORD:
        return redact_after_word(r, argv, argc, kept);
    case REDACT_CONFIG_VALUE:
        return redact_config_values(argv, kept);
    }
    return 0;
}

/* The first letters of the table's commands, so that most requests are
 * passed over with one load. */
static unsigned char redact_first_letters[256];
static int redact_letters_ready;

static void redact_letters_init(void)
{
    for (int i = 0; i < REDACT_RULES; i++) {
        unsigned char c = (unsigned char)redact_rules[i].command[0];
        redact_first_letters[c] = 1;
        redact_first_letters[c - 'a' + 'A'] = 1;
    }
    redact_letters_ready = 1;
}

uint32_t redact_args(const struct sv *argv, int argc, int kept)
{
    uint32_t bits = 0;

    if (kept > REDACT_MAX_ARGS)
        kept = REDACT_MAX_ARGS;
    if (argc <= 1 || kept <= 1 || argv[0].ptr == NULL || argv[0].len == 0)
        return 0;
    if (!redact_letters_ready)
        redact_letters_init();
    if (!redact_first_letters[(unsigned char)argv[0].ptr[0]])
        return 0;
    for (int i = 0; i < REDACT_RULES; i++) {
        const struct redact_rule *r = &redact_rules[i];
        if (!sv_ieq(argv[0], r->command))
            continue;
        if (r->sub != NULL && (argv[1].ptr == NULL || !sv_ieq(argv[1], r->sub)))
            continue;
        bits |= redact_rule_bits(r, argv, argc, kept);
    }
    return bits;
}
