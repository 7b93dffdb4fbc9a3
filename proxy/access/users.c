/* users.c - owns the users file: its [user NAME] sections and keys (a table),
 * password digests, and each user's grants resolved at load time into a
 * bitmap over command ids plus globs. Answers "may this user..." questions;
 * keeps no client state and never touches the network. */
#include "users.h"

#include <ini.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "config.h"
#include "glob.h"
#include "inifile.h"
#include "proxysub.h"
#include "value.h"

#define USERS_DIGEST_LEN 32             /* SHA-256 */
#define USERS_SHA256_PREFIX "sha256:"
#define USERS_KEYS_ON_STACK 256

/* User-wide "everything" flags, as Redis's selector flags: ALLCOMMANDS is
 * set only by +@all (or allcommands) and cleared by any '-' item; it alone
 * admits commands sluice does not know (modules). */
enum users_flag { USERS_ALLCOMMANDS = 1, USERS_ALLKEYS = 2, USERS_ALLCHANNELS = 4 };

/* A category of sluice's own: LOCK, UNLOCK, RENEW. Above Redis's bits. */
#define USERS_CAT_LOCK (1u << ACL_BIT_COUNT)

/* Verbs sluice answers itself, which the command table does not hold. Each
 * has a grant bit (0: always allowed) and the categories that grant it.
 * PROXY subcommands come from proxysub.h's one list: an admin one is
 * @admin and @dangerous, as Redis's CONFIG is, so "+@all -@dangerous"
 * does not reach PROXY RELOAD. */
static const struct users_verb {
    const char *name;
    unsigned bit;
    uint32_t categories;
} users_verbs[] = {
    {"lock", 1u << 0, USERS_CAT_LOCK},
    {"unlock", 1u << 1, USERS_CAT_LOCK},
    {"renew", 1u << 2, USERS_CAT_LOCK},
#define X(sub, perm)                                                                 \
    {"proxy|" #sub, (perm) == PROXYSUB_ADMIN ? 1u << (3 + PROXYSUB_##sub) : 0,      \
     (perm) == PROXYSUB_ADMIN ? ACL_ADMIN | ACL_DANGEROUS : 0},
    PROXYSUB_LIST(X)
#undef X
};
#define USERS_VERB_COUNT (int)(sizeof(users_verbs) / sizeof(users_verbs[0]))
#define USERS_VERBS_LOCK 0x7u
/* Every grant bit: the lock verbs', the admin PROXY subcommands'. */
#define X(sub, perm) | ((perm) == PROXYSUB_ADMIN ? 1u << (3 + PROXYSUB_##sub) : 0)
static const unsigned users_verbs_all = USERS_VERBS_LOCK PROXYSUB_LIST(X);
#undef X
#define USERS_VERBS_ALL users_verbs_all
#define USERS_VERBS_PROXY (users_verbs_all & ~USERS_VERBS_LOCK)   /* what "+proxy" grants */

/* A list of globs; each item owns its bytes. */
struct users_globs {
    struct sv *items;
    int count;
};

struct user {
    char *name;
    int line;                           /* of its [user NAME] header */
    int enabled;
    int nopass;
    unsigned char (*digests)[USERS_DIGEST_LEN];
    int digest_count;
    unsigned flags;                     /* enum users_flag */
    uint64_t *command_bits;             /* by command id */
    unsigned verbs;                     /* users_verbs[].bit */
    struct users_globs keys;
    struct users_globs channels;
    struct users_globs redis_commands;  /* the commands items, sluice's own left out */
    int read_from;                      /* enum config_read_from; -1: the [proxy] one */
};

struct user_set {
    struct user **users;
    int count;
};

/* ---- keys of a [user NAME] section ----------------------------------- */

struct users_key;
typedef int users_setter(struct user *u, const char *value, char *err, size_t errlen);

struct users_key {
    const char *name;
    users_setter *set;
    int repeatable;                     /* may appear on several lines */
    int list;                           /* indented lines go on with more items */
};

static users_setter users_set_password, users_set_nopass, users_set_enabled,
    users_set_commands, users_set_keys, users_set_channels, users_set_read_from;

enum users_key_id { KEY_PASSWORD, KEY_NOPASS, KEY_ENABLED, KEY_COMMANDS, KEY_KEYS,
                    KEY_CHANNELS, KEY_READ_FROM, KEY_COUNT };
static const struct users_key users_keys[KEY_COUNT] = {
    [KEY_PASSWORD] = {"password", users_set_password, 1, 0},
    [KEY_NOPASS] = {"nopass", users_set_nopass, 0, 0},
    [KEY_ENABLED] = {"enabled", users_set_enabled, 0, 0},
    [KEY_COMMANDS] = {"commands", users_set_commands, 0, 1},
    [KEY_KEYS] = {"keys", users_set_keys, 0, 1},
    [KEY_CHANNELS] = {"channels", users_set_channels, 0, 1},
    [KEY_READ_FROM] = {"read_from", users_set_read_from, 0, 0},
};

/* ---- values ---------------------------------------------------------- */

static int users_yesno(const char *value, int *out, char *err, size_t errlen)
{
    if (strcasecmp(value, "yes") == 0 || strcasecmp(value, "no") == 0) {
        *out = strcasecmp(value, "yes") == 0;
        return 0;
    }
    snprintf(err, errlen, "must be yes or no, not '%s'", value);
    return -1;
}

static int users_set_nopass(struct user *u, const char *value, char *err, size_t errlen)
{
    return users_yesno(value, &u->nopass, err, errlen);
}

static int users_set_enabled(struct user *u, const char *value, char *err, size_t errlen)
{
    return users_yesno(value, &u->enabled, err, errlen);
}

/* read_from = primary | prefer-replica | replica: overrides [proxy]'s for
 * this user's clients (README "Reading from replicas"). */
static int users_set_read_from(struct user *u, const char *value, char *err, size_t errlen)
{
    u->read_from = config_read_from_parse(value);
    if (u->read_from >= 0)
        return 0;
    snprintf(err, errlen, "must be primary, prefer-replica or replica, not '%s'", value);
    return -1;
}

static void users_sha256(const char *data, size_t len, unsigned char *out)
{
    unsigned int n = 0;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != USERS_DIGEST_LEN)
        memset(out, 0, USERS_DIGEST_LEN);   /* never matches a real password's hash */
}

static int users_push_digest(struct user *u, const unsigned char *digest)
{
    unsigned char (*grown)[USERS_DIGEST_LEN];

    grown = realloc(u->digests, sizeof(*grown) * (size_t)(u->digest_count + 1));
    if (grown == NULL)
        return -1;
    u->digests = grown;
    memcpy(u->digests[u->digest_count++], digest, USERS_DIGEST_LEN);
    return 0;
}

/* "sha256:<64 hex>" is a digest as is (Redis ACL's "#<hash>"); anything
 * else is a plain password, hashed here and not kept. */
static int users_set_password(struct user *u, const char *value, char *err, size_t errlen)
{
    size_t plen = strlen(USERS_SHA256_PREFIX);
    unsigned char digest[USERS_DIGEST_LEN];

    if (value[0] == '\0') {
        snprintf(err, errlen, "empty (for a user without a password, set nopass = yes)");
        return -1;
    }
    if (strncasecmp(value, USERS_SHA256_PREFIX, plen) == 0) {
        const char *hex = value + plen;
        if (strlen(hex) != 2 * USERS_DIGEST_LEN) {
            snprintf(err, errlen, "sha256: needs exactly 64 hex digits");
            return -1;
        }
        for (int i = 0; i < USERS_DIGEST_LEN; i++) {
            int hi = value_hex_digit(hex[2 * i]), lo = value_hex_digit(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                snprintf(err, errlen, "sha256: needs exactly 64 hex digits");
                return -1;
            }
            digest[i] = (unsigned char)(hi << 4 | lo);
        }
    } else {
        users_sha256(value, strlen(value), digest);
    }
    return users_push_digest(u, digest);   /* -1 with err empty: out of memory */
}

/* A plain password PW (LEN bytes) taken as it is, whatever it starts
 * with: the backend's. */
static int users_add_digest(struct user *u, const char *pw, size_t len)
{
    unsigned char digest[USERS_DIGEST_LEN];
    int rc;

    users_sha256(pw, len, digest);
    rc = users_push_digest(u, digest);
    OPENSSL_cleanse(digest, sizeof(digest));
    return rc;
}

/* The next blank-separated word of *TEXT, advancing it; len 0 at the end. */
static struct sv users_next_word(const char **text)
{
    struct sv word;

    *text += strspn(*text, " \t");
    word.ptr = *text;
    word.len = strcspn(*text, " \t");
    *text += word.len;
    return word;
}

static int users_glob_add(struct users_globs *globs, struct sv word)
{
    struct sv *grown = realloc(globs->items, sizeof(*grown) * (size_t)(globs->count + 1));
    char *copy;

    if (grown == NULL)
        return -1;
    globs->items = grown;
    copy = malloc(word.len + 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, word.ptr, word.len);
    copy[word.len] = '\0';
    globs->items[globs->count++] = (struct sv){copy, word.len};
    return 0;
}

/* Globs for keys (PREFIX '~') or channels ('&'): the prefix is optional, as
 * Redis ACL writes it; "*" or ALL_WORD sets ALL_FLAG, as Redis does. */
static int users_set_globs(struct user *u, struct users_globs *globs, const char *value,
                           char prefix, const char *all_word, unsigned all_flag, char *err,
                           size_t errlen)
{
    int items = 0;

    /* Every bad item is told, not only the first (sluice -t). */
    err[0] = '\0';
    for (struct sv word = users_next_word(&value); word.len > 0;
         word = users_next_word(&value), items++) {
        if (word.len == strlen(all_word) && memcmp(word.ptr, all_word, word.len) == 0) {
            u->flags |= all_flag;
            continue;
        }
        if (word.ptr[0] == '%') {
            errlist_msg_append(err, errlen,
                               "'%.*s': read/write patterns (%%R~, %%W~) are not supported",
                               (int)word.len, word.ptr);
            continue;
        }
        if (word.ptr[0] == prefix) {
            word.ptr++;
            word.len--;
        }
        if (word.len == 1 && word.ptr[0] == '*')
            u->flags |= all_flag;
        else if (word.len == 0)
            errlist_msg_append(err, errlen, "'%c' without a pattern", prefix);
        else if (users_glob_add(globs, word) != 0)
            return -1;
    }
    if (err[0] != '\0')
        return -1;
    if (items == 0) {
        snprintf(err, errlen, "needs at least one pattern (leave the key out for none)");
        return -1;
    }
    return 0;
}

static int users_set_keys(struct user *u, const char *value, char *err, size_t errlen)
{
    return users_set_globs(u, &u->keys, value, '~', "allkeys", USERS_ALLKEYS, err, errlen);
}

static int users_set_channels(struct user *u, const char *value, char *err, size_t errlen)
{
    return users_set_globs(u, &u->channels, value, '&', "allchannels", USERS_ALLCHANNELS, err,
                           errlen);
}

/* ---- commands: Redis 7.0 ACL rules, applied left to right ------------- */

static void users_bit(uint64_t *bits, int id, int allow)
{
    if (allow)
        bits[id / 64] |= 1ULL << (id % 64);
    else
        bits[id / 64] &= ~(1ULL << (id % 64));
}

static int users_bit_test(const uint64_t *bits, int id)
{
    return (bits[id / 64] >> (id % 64)) & 1;
}

static int users_is_subcommand(const struct command *cmd)
{
    return strchr(cmd->name, '|') != NULL;
}

/* Redis's ACLChangeSelectorPerm: a command and every one of its
 * subcommands, so "+config" allows CONFIG GET and "-client" forbids them all. */
static void users_change_command(struct user *u, const struct command *cmd, int allow)
{
    users_bit(u->command_bits, cmd->id, allow);
    for (int i = 0; i < cmd->subcommand_count; i++)
        users_bit(u->command_bits, cmd->subcommands[i].id, allow);
}

/* Redis's ACLSetSelectorCommandBitsForCategory: a top-level command in the
 * category changes with all its subcommands (containers are @slow, so
 * "-@slow" forbids CLIENT ID too); a subcommand in it changes alone. */
static void users_change_category(struct user *u, uint32_t category, int allow)
{
    int count = commands_count();

    for (int id = 0; id < count; id++) {
        const struct command *cmd = commands_by_id(id);
        if (!(cmd->acl_categories & category))
            continue;
        if (users_is_subcommand(cmd))
            users_bit(u->command_bits, id, allow);
        else
            users_change_command(u, cmd, allow);
    }
    for (int v = 0; v < USERS_VERB_COUNT; v++) {
        if (users_verbs[v].categories & category)
            u->verbs = allow ? u->verbs | users_verbs[v].bit : u->verbs & ~users_verbs[v].bit;
    }
}

static void users_change_all(struct user *u, int allow)
{
    size_t words = (size_t)commands_count() / 64 + 1;

    memset(u->command_bits, allow ? 0xff : 0, words * sizeof(uint64_t));
    u->verbs = allow ? USERS_VERBS_ALL : 0;
    u->flags = allow ? u->flags | USERS_ALLCOMMANDS : u->flags & ~(unsigned)USERS_ALLCOMMANDS;
}

/* "@NAME" (without '@'): a category mask, UINT32_MAX for @all, 0 unknown. */
static uint32_t users_category(struct sv name)
{
    if (sv_ieq(name, "all"))
        return UINT32_MAX;
    if (sv_ieq(name, "lock"))
        return USERS_CAT_LOCK;
    return commands_acl_category(name.ptr, name.len);
}

/* The grant bits of sluice's verb NAME ("lock", "proxy", "proxy|info"...),
 * or -1 when NAME is not one. */
static long users_verb_bits(struct sv name)
{
    if (sv_ieq(name, "proxy"))
        return USERS_VERBS_PROXY;
    for (int v = 0; v < USERS_VERB_COUNT; v++) {
        if (sv_ieq(name, users_verbs[v].name))
            return users_verbs[v].bit;
    }
    return -1;
}

/* "+name", "-name", "+parent|sub": a command of the table or a verb. */
static int users_apply_name(struct user *u, struct sv name, int allow, char *err, size_t errlen)
{
    const char *bar = memchr(name.ptr, '|', name.len);
    const struct command *cmd;
    long verb = users_verb_bits(name);

    if (verb >= 0) {
        u->verbs = allow ? u->verbs | (unsigned)verb : u->verbs & ~(unsigned)verb;
        return 0;
    }
    cmd = commands_lookup(name.ptr, bar != NULL ? (size_t)(bar - name.ptr) : name.len);
    if (cmd != NULL && bar != NULL) {
        const struct command *parent = cmd;
        cmd = NULL;
        for (int i = 0; i < parent->subcommand_count; i++) {
            if (sv_ieq(name, parent->subcommands[i].name))
                cmd = &parent->subcommands[i];
        }
        if (parent->subcommand_count == 0) {
            snprintf(err, errlen, "'%.*s': first-argument rules are not supported (only "
                     "subcommands, like config|get)", (int)name.len, name.ptr);
            return -1;
        }
    }
    if (cmd == NULL) {
        snprintf(err, errlen, "unknown command '%.*s'", (int)name.len, name.ptr);
        return -1;
    }
    users_change_command(u, cmd, allow);
    return 0;
}

/* One item of "commands": +@cat -@cat +name -name +parent|sub -parent|sub,
 * allcommands, nocommands. Any '-' item drops ALLCOMMANDS, as in Redis. */
static int users_apply_item(struct user *u, struct sv word, char *err, size_t errlen)
{
    int allow = word.ptr[0] == '+';
    struct sv rest = {word.ptr + 1, word.len - 1};

    if (sv_ieq(word, "allcommands") || sv_ieq(word, "nocommands")) {
        users_change_all(u, sv_ieq(word, "allcommands"));
        return 0;
    }
    if ((word.ptr[0] != '+' && word.ptr[0] != '-') || rest.len == 0) {
        snprintf(err, errlen, "'%.*s': each item is +name, -name, +@category or -@category",
                 (int)word.len, word.ptr);
        return -1;
    }
    if (!allow)
        u->flags &= ~(unsigned)USERS_ALLCOMMANDS;
    if (rest.ptr[0] != '@')
        return users_apply_name(u, rest, allow, err, errlen);
    rest.ptr++;
    rest.len--;
    uint32_t category = users_category(rest);
    if (category == 0) {
        snprintf(err, errlen, "unknown ACL category '@%.*s'", (int)rest.len, rest.ptr);
        return -1;
    }
    if (category == UINT32_MAX)
        users_change_all(u, allow);
    else
        users_change_category(u, category, allow);
    return 0;
}

/* Whether WORD, a valid commands item, names only sluice's own (@lock,
 * LOCK, UNLOCK, RENEW, PROXY...), which Redis does not know. */
static int users_sluice_item(struct sv word)
{
    struct sv rest = {word.ptr + 1, word.len - 1};

    if (word.ptr[0] != '+' && word.ptr[0] != '-')
        return 0;   /* allcommands, nocommands */
    if (rest.ptr[0] == '@')
        return users_category((struct sv){rest.ptr + 1, rest.len - 1}) == USERS_CAT_LOCK;
    return users_verb_bits(rest) >= 0;
}

static int users_set_commands(struct user *u, const char *value, char *err, size_t errlen)
{
    int items = 0;

    /* Every bad item is told, not only the first (sluice -t). */
    err[0] = '\0';
    for (struct sv word = users_next_word(&value); word.len > 0;
         word = users_next_word(&value), items++) {
        char one[256] = "";

        if (users_apply_item(u, word, one, sizeof(one)) != 0) {
            errlist_msg_append(err, errlen, "%s", one);
            continue;
        }
        if (!users_sluice_item(word) && users_glob_add(&u->redis_commands, word) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (err[0] != '\0')
        return -1;
    if (items == 0) {
        snprintf(err, errlen, "needs at least one item (leave the key out for none)");
        return -1;
    }
    return 0;
}

/* ---- the file -------------------------------------------------------- */

struct users_parse {
    struct user_set *set;
    const char *path;
    struct errlist *errs;
    struct inifile_layout layout;   /* headers and continuation lines (inifile.h) */
    int next_header;                /* headers before this one have been started */
    struct user *cur;               /* user being read; NULL in a bad section */
    int seen_line[KEY_COUNT];       /* line where each key was last set, 0 = not yet */
    const struct users_key *last_key;  /* the key set just before, if it went well */
};

static void users_free_globs(struct users_globs *globs)
{
    for (int i = 0; i < globs->count; i++)
        free((char *)globs->items[i].ptr);
    free(globs->items);
}

static void users_free_user(struct user *u)
{
    if (u == NULL)
        return;
    free(u->name);
    if (u->digests != NULL)
        OPENSSL_cleanse(u->digests, sizeof(*u->digests) * (size_t)u->digest_count);
    free(u->digests);
    free(u->command_bits);
    users_free_globs(&u->keys);
    users_free_globs(&u->channels);
    users_free_globs(&u->redis_commands);
    free(u);
}

static struct user *users_add(struct user_set *set, const char *name, int line)
{
    struct user **grown = realloc(set->users, sizeof(*grown) * (size_t)(set->count + 1));
    struct user *u;

    if (grown == NULL)
        return NULL;
    set->users = grown;
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        return NULL;
    u->name = strdup(name);
    u->command_bits = calloc((size_t)commands_count() / 64 + 1, sizeof(uint64_t));
    if (u->name == NULL || u->command_bits == NULL) {
        users_free_user(u);
        return NULL;
    }
    u->line = line;
    u->enabled = 1;
    u->read_from = -1;
    set->users[set->count++] = u;
    return u;
}

/* Checks that need the whole section. A user without a password and
 * without nopass could never log in: almost surely a mistake, so an error,
 * unless the user is disabled anyway. */
static void users_finish(struct users_parse *p)
{
    struct user *u = p->cur;

    p->cur = NULL;
    if (u == NULL)
        return;
    if (u->nopass && u->digest_count > 0)
        errlist_add(p->errs, p->path, p->seen_line[KEY_NOPASS],
                    "user '%s' has a password and nopass = yes: choose one", u->name);
    else if (!u->nopass && u->digest_count == 0 && u->enabled)
        errlist_add(p->errs, p->path, u->line,
                    "user '%s' has no password (add password = ..., or nopass = yes)",
                    u->name);
}

static void users_start(struct users_parse *p, const struct inifile_header *h)
{
    const char *name = inifile_section_name(h->section, "user");

    memset(p->seen_line, 0, sizeof(p->seen_line));
    p->cur = NULL;
    p->last_key = NULL;
    if (name == NULL) {
        errlist_add(p->errs, p->path, h->line, "unknown section [%s] (expected [user NAME])",
                    h->section ? h->section : "");
        return;
    }
    const struct user *first = users_find(p->set, name, strlen(name));
    if (first != NULL) {
        errlist_add(p->errs, p->path, h->line, "duplicate user '%s' (first on line %d)", name,
                    first->line);
        return;
    }
    p->cur = users_add(p->set, name, h->line);
    if (p->cur == NULL)
        errlist_add(p->errs, p->path, h->line, "out of memory");
}

/* Finish the current section and start every header before LINE. */
static void users_advance_to(struct users_parse *p, int line)
{
    while (p->next_header < p->layout.header_count &&
           p->layout.headers[p->next_header].line < line) {
        users_finish(p);
        users_start(p, &p->layout.headers[p->next_header++]);
    }
}

static void users_apply_key(struct users_parse *p, const struct users_key *key,
                            const char *value, const char *file, int line)
{
    char err[1024] = "";

    if (key->set(p->cur, value, err, sizeof(err)) != 0) {
        errlist_add_each(p->errs, file, line, key->name, err[0] ? err : "out of memory");
        p->last_key = NULL;
        return;
    }
    p->last_key = key;
}

static void users_on_key(void *ctx, const char *section, const char *name, const char *value,
                         const char *file, int line, struct errlist *errs)
{
    struct users_parse *p = ctx;
    const struct users_key *key = NULL;

    (void)section;  /* sections come from inifile_scan_layout */
    if (name == NULL)
        return;
    users_advance_to(p, line);
    if (p->next_header == 0) {
        errlist_add(errs, file, line, "key '%s' outside a [user NAME] section", name);
        return;
    }
    if (p->cur == NULL)
        return;     /* a bad section: said so at its header */
    if (inifile_is_continued(&p->layout, line)) {
        /* More items for the list key above: commands go on left to right. */
        if (p->last_key != NULL && !p->last_key->list) {
            errlist_add(errs, file, line, "%s takes one value; only commands, keys and "
                        "channels go on over lines", p->last_key->name);
            p->last_key = NULL;
        } else if (p->last_key != NULL) {
            users_apply_key(p, p->last_key, value, file, line);
        }
        return;
    }
    for (int i = 0; i < KEY_COUNT && key == NULL; i++) {
        if (strcmp(users_keys[i].name, name) == 0)
            key = &users_keys[i];
    }
    p->last_key = NULL;
    if (key == NULL) {
        errlist_add(errs, file, line, "unknown key '%s' in [user %s]", name, p->cur->name);
        return;
    }
    if (p->seen_line[key - users_keys] != 0 && !key->repeatable) {
        errlist_add(errs, file, line, "duplicate key '%s' (first set on line %d)", name,
                    p->seen_line[key - users_keys]);
        return;
    }
    p->seen_line[key - users_keys] = line;
    users_apply_key(p, key, value, file, line);
}

struct user_set *users_load(const char *path, struct errlist *errs)
{
    struct users_parse p = {.path = path, .errs = errs};
    int before = errs->count;

    p.set = calloc(1, sizeof(*p.set));
    if (p.set == NULL) {
        errlist_add(errs, path, 0, "out of memory");
        return NULL;
    }
    inifile_scan_layout(path, &p.layout);
    if (inifile_parse(path, users_on_key, &p, errs) == 0) {
        users_advance_to(&p, INT_MAX);
        users_finish(&p);
    }
    inifile_layout_free(&p.layout);
    if (errs->count != before) {
        users_free(p.set);
        return NULL;
    }
    return p.set;
}

/* The set that stands for a backend password without a users file: one
 * user, NAME, with PASSWORD and every permission. */
struct user_set *users_backend_set(const char *name, const char *password)
{
    struct user_set *set = calloc(1, sizeof(*set));
    struct user *u = set != NULL ? users_add(set, name, 0) : NULL;
    char err[128];

    if (u == NULL || users_add_digest(u, password, strlen(password)) != 0 ||
        users_set_commands(u, "+@all", err, sizeof(err)) != 0 ||
        users_set_keys(u, "*", err, sizeof(err)) != 0 ||
        users_set_channels(u, "*", err, sizeof(err)) != 0) {
        users_free(set);
        return NULL;
    }
    return set;
}

void users_free(struct user_set *set)
{
    if (set == NULL)
        return;
    for (int i = 0; i < set->count; i++)
        users_free_user(set->users[i]);
    free(set->users);
    free(set);
}

int users_count(const struct user_set *set)
{
    return set == NULL ? 0 : set->count;
}

const struct user *users_find(const struct user_set *set, const char *name, size_t len)
{
    for (int i = 0; set != NULL && i < set->count; i++) {
        const struct user *u = set->users[i];
        if (strlen(u->name) == len && memcmp(u->name, name, len) == 0)
            return u;
    }
    return NULL;
}

int users_auth_required(const struct user_set *set)
{
    const struct user *def;

    if (set == NULL)
        return 0;
    def = users_find(set, USERS_DEFAULT_NAME, strlen(USERS_DEFAULT_NAME));
    return def == NULL || !def->enabled || !def->nopass;
}

const char *users_name(const struct user *u)
{
    return u->name;
}

int users_enabled(const struct user *u)
{
    return u->enabled;
}

int users_nopass(const struct user *u)
{
    return u->nopass;
}

int users_read_from(const struct user *u)
{
    return u->read_from;
}

int users_unrestricted(const struct user *u)
{
    unsigned all = USERS_ALLCOMMANDS | USERS_ALLKEYS | USERS_ALLCHANNELS;

    return (u->flags & all) == all && u->verbs == USERS_VERBS_ALL;
}

int users_scripts_in_redis(const struct user *u)
{
    /* placement.c's ROLE_SCRIPT commands (read before placement_init). */
    static const char *const scripts[] = {"eval", "evalsha", "eval_ro", "evalsha_ro",
                                          "fcall", "fcall_ro"};

    if (!u->enabled || users_unrestricted(u))
        return 0;
    for (size_t i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
        const struct command *cmd = commands_lookup(scripts[i], strlen(scripts[i]));
        if (cmd != NULL && users_bit_test(u->command_bits, cmd->id))
            return 1;
    }
    return 0;
}

/* Add WORD, with PREFIX before it unless PREFIX is 0, to OUT as a bulk.
 * Returns 1 (one item). */
static int users_add_bulk(struct evbuffer *out, char prefix, const char *word, size_t len)
{
    evbuffer_add_printf(out, "$%zu\r\n", len + (prefix != 0));
    if (prefix != 0)
        evbuffer_add(out, &prefix, 1);
    evbuffer_add(out, word, len);
    evbuffer_add(out, "\r\n", 2);
    return 1;
}

static int users_add_globs(struct evbuffer *out, char prefix, const struct users_globs *globs)
{
    for (int i = 0; i < globs->count; i++)
        users_add_bulk(out, prefix, globs->items[i].ptr, globs->items[i].len);
    return globs->count;
}

#define USERS_BULK(out, word) users_add_bulk(out, 0, word, sizeof(word) - 1)

/* Whether glob PAT (Redis's stringmatch syntax) may match a channel that
 * starts with PREFIX: walked against PREFIX, a '*' before its end may,
 * and so may a class (not looked into: this errs toward "may"). */
static int users_glob_may_reach(const char *pat, size_t plen, const char *prefix)
{
    size_t i = 0;

    for (const char *c = prefix; *c != '\0'; c++, i++) {
        if (i >= plen)
            return 0;
        if (pat[i] == '*' || pat[i] == '[')
            return 1;
        if (pat[i] == '\\' && i + 1 < plen)
            i++;
        else if (pat[i] == '?')
            continue;
        if (pat[i] != *c)
            return 0;
    }
    return 1;
}

/* "Every channel but Sentinel's" as Redis 7.0 channel globs (it has no
 * "deny" for channels): each string that leaves USERS_SENTINEL_CHANNELS
 * at its K-th byte ("__sentinel_[^_]*"), and each proper prefix of it
 * ("__sent"). The empty channel is left out. Returns how many. */
static int users_add_all_but_sentinel(struct evbuffer *out)
{
    static const char p[] = USERS_SENTINEL_CHANNELS;
    char glob[sizeof(p) + 8];
    int n = 0;

    for (size_t k = 0; k + 1 < sizeof(p); k++) {
        int len = snprintf(glob, sizeof(glob), "%.*s[^%c]*", (int)k, p, p[k]);
        n += users_add_bulk(out, '&', glob, (size_t)len);
        if (k > 0)
            n += users_add_bulk(out, '&', p, k);
    }
    return n;
}

int users_redis_rules(const struct user *u, struct evbuffer *out)
{
    int n = USERS_BULK(out, "nocommands");

    n += users_add_globs(out, 0, &u->redis_commands);
    n += USERS_BULK(out, "resetkeys");
    if (u->flags & USERS_ALLKEYS)
        n += USERS_BULK(out, "allkeys");
    n += users_add_globs(out, '~', &u->keys);
    /* Never Sentinel's channels, whatever the grant: a script could
     * publish a forged hello there (users_publishes_reserved refuses it
     * outside scripts). A glob that may reach them is left out. */
    n += USERS_BULK(out, "resetchannels");
    if (u->flags & USERS_ALLCHANNELS)
        return n + users_add_all_but_sentinel(out);
    for (int i = 0; i < u->channels.count; i++) {
        const struct sv *g = &u->channels.items[i];
        if (!users_glob_may_reach(g->ptr, g->len, USERS_SENTINEL_CHANNELS))
            n += users_add_bulk(out, '&', g->ptr, g->len);
    }
    return n;
}

const struct user *users_at(const struct user_set *set, int index)
{
    return set->users[index];
}

/* ---- checks, per request --------------------------------------------- */

int users_check_password(const struct user *u, const char *pw, size_t len)
{
    unsigned char digest[USERS_DIGEST_LEN];
    int match = 0;

    /* Hashed even for an unknown user, so that timing does not tell. */
    users_sha256(pw, len, digest);
    /* Every digest is compared, whole, whatever the earlier ones gave. */
    for (int i = 0; u != NULL && i < u->digest_count; i++)
        match |= CRYPTO_memcmp(u->digests[i], digest, USERS_DIGEST_LEN) == 0;
    OPENSSL_cleanse(digest, sizeof(digest));
    return u != NULL && u->enabled && (u->nopass || match);
}

static int users_arity_ok(const struct command *cmd, int argc)
{
    return cmd->arity >= 0 ? argc == cmd->arity : argc >= -cmd->arity;
}

/* A request the command table does not know: sluice's verbs by name, any
 * other (a module's command) only for a user with +@all. */
static int users_may_run_unknown(const struct user *u, const struct sv *argv, int argc)
{
    char name[32];
    long bits;

    if (argc < 1)
        return 1;
    if (sv_ieq(argv[0], "proxy")) {
        if (argc < 2 || argv[1].len > sizeof(name) - 7)
            return 1;       /* sluice answers its own arity/subcommand error */
        snprintf(name, sizeof(name), "proxy|%.*s", (int)argv[1].len, argv[1].ptr);
        bits = users_verb_bits((struct sv){name, strlen(name)});
        return bits <= 0 || (u->verbs & (unsigned)bits) != 0;
    }
    bits = memchr(argv[0].ptr, '|', argv[0].len) == NULL ? users_verb_bits(argv[0]) : -1;
    if (bits > 0)
        return (u->verbs & (unsigned)bits) != 0;
    return (u->flags & USERS_ALLCOMMANDS) != 0;
}

int users_may_run(const struct user *u, const struct command *cmd, const struct sv *argv,
                  int argc)
{
    if (cmd == NULL)
        return users_may_run_unknown(u, argv, argc);
    if ((cmd->flags & CMD_NO_AUTH) || (u->flags & USERS_ALLCOMMANDS))
        return 1;
    /* Redis answers these before its ACL check ("wrong number of
     * arguments", "unknown subcommand"): let Redis's own error through. */
    if (!users_arity_ok(cmd, argc) || (cmd->subcommand_count > 0 && argc >= 2))
        return 1;
    return users_bit_test(u->command_bits, cmd->id);
}

static int users_glob_any(const struct users_globs *globs, const char *s, size_t len)
{
    for (int i = 0; i < globs->count; i++) {
        if (glob_match(globs->items[i].ptr, globs->items[i].len, s, len))
            return 1;
    }
    return 0;
}

int users_all_keys(const struct user *u)
{
    return (u->flags & USERS_ALLKEYS) != 0;
}

int users_may_access_key(const struct user *u, const char *key, size_t len)
{
    return (u->flags & USERS_ALLKEYS) || users_glob_any(&u->keys, key, len);
}

int users_may_access_keys(const struct user *u, const struct command *cmd, int argc,
                          const struct sv *argv)
{
    int on_stack[USERS_KEYS_ON_STACK], *keys = on_stack, n, ok = 1;

    /* PUBSUB commands' key specs (SPUBLISH, SSUBSCRIBE...) are shard
     * channels, which Redis marks not_key and checks as channels. */
    if ((u->flags & USERS_ALLKEYS) || cmd == NULL || cmd->key_spec_count == 0 ||
        (cmd->flags & CMD_PUBSUB))
        return 1;
    if (argc > USERS_KEYS_ON_STACK) {
        keys = malloc(sizeof(*keys) * (size_t)argc);   /* a rare huge MSET/DEL */
        if (keys == NULL)
            return 0;
    }
    n = commands_keys(cmd, argc, argv, keys, argc > USERS_KEYS_ON_STACK ? argc
                                                                       : USERS_KEYS_ON_STACK);
    for (int i = 0; i < n && ok; i++)
        ok = users_glob_any(&u->keys, argv[keys[i]].ptr, argv[keys[i]].len);
    if (keys != on_stack)
        free(keys);
    return ok;
}

/* Whether ARG (SORT's LIMIT offset or count) is an integer to Redis. */
static int users_sort_int(struct sv arg)
{
    long long n;

    return value_strict_ll(arg.ptr, arg.len, &n) == 0;
}

/* Redis's sortCommandGeneric reads SORT's options left to right and, for
 * a user without access to every key, refuses BY with a pattern (a '*')
 * and any GET, since those read keys no key spec names. Through sluice
 * Redis sees its backend user, so sluice refuses them itself. Parsing
 * stops where Redis's stops with another error (it then never reaches a
 * later BY or GET). */
const char *users_sort_denied_option(const struct user *u, const struct command *cmd,
                                     int argc, const struct sv *argv)
{
    int readonly;

    if ((u->flags & USERS_ALLKEYS) || cmd == NULL ||
        (strcmp(cmd->name, "sort") != 0 && strcmp(cmd->name, "sort_ro") != 0))
        return NULL;
    readonly = strcmp(cmd->name, "sort_ro") == 0;
    for (int j = 2; j < argc; j++) {
        int left = argc - j - 1;
        if (sv_ieq(argv[j], "asc") || sv_ieq(argv[j], "desc") || sv_ieq(argv[j], "alpha"))
            continue;
        if (sv_ieq(argv[j], "limit") && left >= 2) {
            if (!users_sort_int(argv[j + 1]) || !users_sort_int(argv[j + 2]))
                return NULL;
            j += 2;
        } else if (!readonly && sv_ieq(argv[j], "store") && left >= 1) {
            j++;
        } else if (sv_ieq(argv[j], "by") && left >= 1) {
            if (argv[j + 1].ptr == NULL || memchr(argv[j + 1].ptr, '*', argv[j + 1].len) != NULL)
                return "BY";    /* (NULL: unread, request.h; taken as a pattern) */
            j++;
        } else if (sv_ieq(argv[j], "get") && left >= 1) {
            return "GET";
        } else {
            return NULL;    /* Redis's syntax error */
        }
    }
    return NULL;
}

/* The pub/sub commands whose channels Redis checks: argv[1] only
 * (publishing), or argv[1..] (subscribing); PATTERN for PSUBSCRIBE's. */
static const struct {
    const char *name;
    int all_args, pattern, publishes;
} users_channel_cmds[] = {
    {"publish", 0, 0, 1}, {"spublish", 0, 0, 1}, {"subscribe", 1, 0, 0},
    {"ssubscribe", 1, 0, 0}, {"psubscribe", 1, 1, 0},
};

/* Where a pub/sub command's channels are (users_channel_cmds). 0 for
 * commands Redis does not check (the UNSUBSCRIBE family). */
static int users_channel_args(const struct command *cmd, int *all_args, int *pattern)
{
    for (size_t i = 0; i < sizeof(users_channel_cmds) / sizeof(users_channel_cmds[0]); i++) {
        if (strcmp(cmd->name, users_channel_cmds[i].name) == 0) {
            *all_args = users_channel_cmds[i].all_args;
            *pattern = users_channel_cmds[i].pattern;
            return 1;
        }
    }
    return 0;
}

/* Whether CHANNEL is one of Sentinel's: a message there is read by every
 * Sentinel monitoring the node as one of their own (a forged hello moves
 * the primary). An argument sluice did not read counts as one. */
static int users_channel_reserved(struct sv channel)
{
    size_t n = sizeof(USERS_SENTINEL_CHANNELS) - 1;

    if (channel.ptr == NULL)
        return channel.len > 0;
    return channel.len >= n && memcmp(channel.ptr, USERS_SENTINEL_CHANNELS, n) == 0;
}

int users_publishes_reserved(const struct command *cmd, int argc, const struct sv *argv)
{
    for (size_t i = 0; cmd != NULL && argc > 1 &&
                       i < sizeof(users_channel_cmds) / sizeof(users_channel_cmds[0]); i++) {
        if (users_channel_cmds[i].publishes && strcmp(cmd->name, users_channel_cmds[i].name) == 0)
            return users_channel_reserved(argv[1]);
    }
    return 0;
}

/* Redis 7.0's ACLCheckChannelAgainstList: a channel matches a glob; a
 * pattern must equal one, byte for byte (else "news.*" could reach
 * channels the user's "news.sport" grant does not cover). */
static int users_channel_ok(const struct users_globs *globs, struct sv arg, int pattern)
{
    if (arg.ptr == NULL && arg.len > 0)
        return 0;   /* an argument sluice did not read (request.h): never a grant */
    if (!pattern)
        return users_glob_any(globs, arg.ptr, arg.len);
    for (int i = 0; i < globs->count; i++) {
        if (globs->items[i].len == arg.len && memcmp(globs->items[i].ptr, arg.ptr, arg.len) == 0)
            return 1;
    }
    return 0;
}

int users_may_access_channels(const struct user *u, const struct command *cmd, int argc,
                              const struct sv *argv)
{
    int all_args, pattern, last;

    if ((u->flags & USERS_ALLCHANNELS) || cmd == NULL || !(cmd->flags & CMD_PUBSUB) ||
        !users_channel_args(cmd, &all_args, &pattern))
        return 1;
    last = all_args ? argc - 1 : (argc > 1 ? 1 : 0);
    for (int i = 1; i <= last; i++) {
        if (!users_channel_ok(&u->channels, argv[i], pattern))
            return 0;
    }
    return 1;
}

/* 1 when NEW's globs (NEW_ALL: every name) may miss a name OLD's matched
 * (OLD_ALL: every name): an OLD glob NEW lacks, compared as a pattern, or
 * all names taken away. For keys and channels alike. */
static int users_globs_narrowed(const struct users_globs *old, int old_all,
                                const struct users_globs *new_globs, int new_all)
{
    if (new_all)
        return 0;
    if (old_all)
        return 1;
    for (int i = 0; i < old->count; i++) {
        if (!users_channel_ok(new_globs, old->items[i], 1))
            return 1;
    }
    return 0;
}

int users_channels_narrowed(const struct user *old, const struct user *new_user)
{
    return users_globs_narrowed(&old->channels, (old->flags & USERS_ALLCHANNELS) != 0,
                                &new_user->channels, (new_user->flags & USERS_ALLCHANNELS) != 0);
}

static int users_keys_narrowed(const struct user *old, const struct user *new_user)
{
    return users_globs_narrowed(&old->keys, (old->flags & USERS_ALLKEYS) != 0,
                                &new_user->keys, (new_user->flags & USERS_ALLKEYS) != 0);
}

int users_narrowed(const struct user *old, const struct user *new_user)
{
    size_t words = (size_t)commands_count() / 64 + 1;

    if ((old->flags & USERS_ALLCOMMANDS) && !(new_user->flags & USERS_ALLCOMMANDS))
        return 1;
    if (old->verbs & ~new_user->verbs)
        return 1;
    for (size_t w = 0; w < words; w++) {
        if (old->command_bits[w] & ~new_user->command_bits[w])
            return 1;
    }
    return users_keys_narrowed(old, new_user) || users_channels_narrowed(old, new_user);
}

const char *users_denied_command_name(const struct command *cmd)
{
    return cmd->name;
}

const char *users_denied_name(const struct command *cmd, int argc, const struct sv *argv,
                              char *buf, size_t size)
{
    size_t n = 0;

    if (size == 0)
        return buf;
    if (cmd != NULL || argc < 1) {
        snprintf(buf, size, "%s", cmd != NULL ? cmd->name : "");
        return buf;
    }
    for (int a = 0; a < (sv_ieq(argv[0], "proxy") && argc >= 2 ? 2 : 1); a++) {
        if (a == 1 && n + 1 < size)
            buf[n++] = '|';
        for (size_t i = 0; i < argv[a].len && n + 1 < size; i++) {
            char c = argv[a].ptr[i];
            buf[n++] = c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
        }
    }
    buf[n] = '\0';
    return buf;
}
