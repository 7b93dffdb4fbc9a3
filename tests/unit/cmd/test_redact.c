/* test_redact.c - redact.c's table: which arguments are secrets, as
 * Redis 7.0's SLOWLOG redacts them, plus the lock verbs' OWNER tokens. */
#include <string.h>

#include "redact.h"
#include "unit.h"

/* The redaction bits of the words in WORDS (NULL-terminated). */
static uint32_t bits_of(const char *const *words)
{
    struct sv argv[REDACT_MAX_ARGS + 4];
    int argc = 0;

    for (; words[argc] != NULL; argc++)
        argv[argc] = (struct sv){words[argc], strlen(words[argc])};
    return redact_args(argv, argc, argc < REDACT_MAX_ARGS ? argc : REDACT_MAX_ARGS);
}

#define BITS(...) bits_of((const char *const[]){__VA_ARGS__, NULL})

static void test_passwords(void)
{
    CHECK(BITS("AUTH", "pw") == 0x2);
    CHECK(BITS("auth", "user", "pw") == 0x6);
    CHECK(BITS("HELLO", "3", "AUTH", "u", "p") == 0x18);
    CHECK(BITS("HELLO", "3", "SETNAME", "n", "auth", "u", "p") == 0x60);
    CHECK(BITS("HELLO", "3", "AUTH", "u") == 0);   /* cut short: Redis's syntax error */
    CHECK(BITS("ACL", "SETUSER", "bob", "on", ">pw") == 0x1c);
    CHECK(BITS("acl", "setuser", "bob") == 0x4);
    CHECK(BITS("ACL", "GETUSER", "bob") == 0);
    CHECK(BITS("MIGRATE", "h", "1", "k", "0", "10", "AUTH", "pw") == 0x80);
    CHECK(BITS("MIGRATE", "h", "1", "k", "0", "10", "COPY", "AUTH2", "u", "pw") == 0x300);
}

static void test_config_set(void)
{
    CHECK(BITS("CONFIG", "SET", "masterauth", "s", "maxmemory", "1") == 0x8);
    CHECK(BITS("config", "set", "maxmemory", "1", "REQUIREPASS", "s") == 0x20);
    CHECK(BITS("CONFIG", "SET", "masteruser", "u", "tls-key-file-pass", "p") == 0x28);
    CHECK(BITS("CONFIG", "GET", "requirepass") == 0);
    CHECK(BITS("CONFIG", "SET", "maxmemory", "requirepass") == 0);   /* a value, not a name */
}

static void test_lock_tokens(void)
{
    CHECK(BITS("LOCK", "k", "1000", "OWNER", "tok") == 0x10);
    CHECK(BITS("lock", "k", "1000", "WAIT", "5", "owner", "tok", "KEEP") == 0x40);
    CHECK(BITS("UNLOCK", "k", "OWNER", "tok") == 0x8);
    CHECK(BITS("RENEW", "k", "1000", "OWNER", "tok") == 0x10);
    CHECK(BITS("LOCK", "k", "1000") == 0);
}

static void test_others_untouched(void)
{
    CHECK(BITS("SET", "auth", "owner") == 0);
    CHECK(BITS("GET", "k") == 0);
    CHECK(BITS("LPUSH", "owner", "x") == 0);
    CHECK(BITS("AUTHX", "pw") == 0);
    CHECK(BITS("PING") == 0);
}

UNIT_MAIN("redact", {"passwords", test_passwords}, {"config_set", test_config_set},
          {"lock_tokens", test_lock_tokens}, {"others_untouched", test_others_untouched})
