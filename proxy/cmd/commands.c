/* commands.c - lookups over the generated command table (commands_table.c):
 * a case-insensitive hash index, subcommand resolution, key positions from
 * key specs, ACL category names. Reads the table; never changes it. */
#include "commands.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined in the generated commands_table.c. */
extern const struct command commands_table[];             /* top level, by name */
extern const int commands_table_count;
extern const struct command *const commands_table_by_id[]; /* every entry, by id */
extern const int commands_table_id_count;

/* One slot of the open-addressing index over every entry's full name. */
struct commands_slot {
    uint32_t hash;
    uint16_t id;
    uint8_t used;
    uint8_t is_sub; /* a "parent|sub" entry: found only through its parent */
};

static struct commands_slot *commands_index;
static uint32_t commands_index_mask;
static size_t commands_name_max; /* longest full name: longer input is unknown */

/* Commands whose key specs Redis itself cannot follow ("unknown" or
 * "incomplete" specs): like Redis, they use their own key finder instead. */
typedef int commands_keys_fn(int argc, const struct sv *argv, int *keys, int max);
static commands_keys_fn commands_sort_keys, commands_migrate_keys;

static struct {
    const char *name;
    commands_keys_fn *fn;
    const struct command *cmd; /* filled by commands_init */
} commands_key_finders[] = {
    {"sort", commands_sort_keys, NULL},
    {"migrate", commands_migrate_keys, NULL},
};

#define COMMANDS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    const char *name;
    uint32_t bit;
} commands_acl_names[] = {
#define X(id, name) {name, ACL_##id},
    ACL_CATEGORY_LIST(X)
#undef X
};

static inline unsigned char commands_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c | 0x20) : c;
}

/* FNV-1a over the lower-cased bytes, continuing from HASH, so that a
 * "parent|sub" name can be hashed in pieces without building it. */
static uint32_t commands_hash(uint32_t hash, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        hash ^= commands_lower((unsigned char)s[i]);
        hash *= 16777619u;
    }
    return hash;
}

#define COMMANDS_HASH_SEED 2166136261u

/* Does NAME (lower case, NUL-terminated) equal WORD (LEN bytes, any case)? */
static int commands_name_is(const char *name, const char *word, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (name[i] == '\0' || name[i] != (char)commands_lower((unsigned char)word[i]))
            return 0;
    }
    return name[len] == '\0';
}

static void commands_index_add(const struct command *cmd, int is_sub)
{
    uint32_t hash = commands_hash(COMMANDS_HASH_SEED, cmd->name, strlen(cmd->name));
    uint32_t i = hash & commands_index_mask;

    while (commands_index[i].used)
        i = (i + 1) & commands_index_mask;
    commands_index[i] = (struct commands_slot){hash, cmd->id, 1, (uint8_t)is_sub};
    if (strlen(cmd->name) > commands_name_max)
        commands_name_max = strlen(cmd->name);
}

/* Abort at startup if the generated table breaks what lookups rely on. */
static void commands_check_table(void)
{
    for (int id = 0; id < commands_table_id_count; id++) {
        if (commands_table_by_id[id]->id != id) {
            fprintf(stderr, "commands: table entry %d has id %d\n", id,
                    commands_table_by_id[id]->id);
            abort();
        }
    }
}

/* Build the index once; later calls do nothing. The index (a power of two,
 * at least twice the entries) lives until exit. Aborts when out of memory. */
void commands_init(void)
{
    uint32_t size = 16;

    if (commands_index != NULL)
        return;
    commands_check_table();
    while (size < 2u * (uint32_t)commands_table_id_count)
        size *= 2;
    commands_index = calloc(size, sizeof(*commands_index));
    if (commands_index == NULL) {
        fprintf(stderr, "commands: out of memory\n");
        abort();
    }
    commands_index_mask = size - 1;
    for (int i = 0; i < commands_table_count; i++) {
        const struct command *cmd = &commands_table[i];
        commands_index_add(cmd, 0);
        for (int j = 0; j < cmd->subcommand_count; j++)
            commands_index_add(&cmd->subcommands[j], 1);
    }
    for (size_t i = 0; i < COMMANDS_ARRAY_LEN(commands_key_finders); i++)
        commands_key_finders[i].cmd = commands_lookup(commands_key_finders[i].name,
                                                      strlen(commands_key_finders[i].name));
}

int commands_count(void)
{
    return commands_table_id_count;
}

const struct command *commands_by_id(int id)
{
    if (id < 0 || id >= commands_table_id_count)
        return NULL;
    return commands_table_by_id[id];
}

/* Probe the index for WORD: a top-level name when PARENT is NULL, else the
 * subcommand "PARENT|WORD". No allocation; NULL when absent. */
static const struct command *commands_find(const struct command *parent, const char *word,
                                           size_t len)
{
    size_t plen = parent != NULL ? strlen(parent->name) + 1 : 0;
    uint32_t hash = COMMANDS_HASH_SEED;

    if (len > commands_name_max || plen + len > commands_name_max)
        return NULL;
    if (parent != NULL)
        hash = commands_hash(commands_hash(hash, parent->name, plen - 1), "|", 1);
    hash = commands_hash(hash, word, len);
    for (uint32_t i = hash & commands_index_mask; commands_index[i].used;
         i = (i + 1) & commands_index_mask) {
        const struct commands_slot *slot = &commands_index[i];
        if (slot->hash != hash || slot->is_sub != (parent != NULL))
            continue;
        const struct command *cmd = commands_table_by_id[slot->id];
        if (commands_name_is(cmd->name + plen, word, len))
            return cmd;
    }
    return NULL;
}

const struct command *commands_lookup(const char *name, size_t len)
{
    return commands_find(NULL, name, len);
}

const struct command *commands_resolve(int argc, const struct sv *argv)
{
    if (argc < 1)
        return NULL;
    const struct command *cmd = commands_find(NULL, argv[0].ptr, argv[0].len);
    if (cmd == NULL || cmd->subcommand_count == 0 || argc < 2)
        return cmd;
    const struct command *sub = commands_find(cmd, argv[1].ptr, argv[1].len);
    return sub != NULL ? sub : cmd;
}

/* ---- key positions ------------------------------------------------------ */

/* Where one spec's keys lie: first, first + step, ... up to last. */
struct commands_span {
    long long first, last, step;
};

/* Parse ARG as Redis parses numkeys into a non-negative count ("0" or digits
 * without a leading zero or sign). Counts above INT_MAX are refused: they
 * cannot fit in any request. Returns 1 and sets *COUNT, or 0. */
static int commands_parse_count(struct sv arg, long long *count)
{
    long long value = 0;

    if (arg.len == 0 || arg.len > 10 || (arg.ptr[0] == '0' && arg.len > 1))
        return 0;
    for (size_t i = 0; i < arg.len; i++) {
        if (arg.ptr[i] < '0' || arg.ptr[i] > '9')
            return 0;
        value = value * 10 + (arg.ptr[i] - '0');
    }
    if (value > INT_MAX)
        return 0;
    *count = value;
    return 1;
}

/* The argv position just after SPEC's keyword, or 0 when it is absent. As in
 * Redis: a positive startfrom searches forward from there up to, not
 * including, the last argument; a negative one searches backward from
 * argc + startfrom down to, not including, argv[1]. */
static int commands_keyword_begin(const struct key_spec *spec, int argc, const struct sv *argv)
{
    if (spec->keyword == NULL)
        return 0;
    if (spec->startfrom > 0) {
        for (int i = spec->startfrom; i < argc - 1; i++) {
            if (sv_ieq(argv[i], spec->keyword))
                return i + 1;
        }
    } else if (spec->startfrom < 0) {
        for (int i = argc + spec->startfrom; i > 1; i--) {
            if (sv_ieq(argv[i], spec->keyword))
                return i + 1;
        }
    }
    return 0;
}

/* RANGE: lastkey >= 0 is relative to first; negative counts from the end of
 * argv, or with a limit, takes 1/limit of the arguments from first on. */
static int commands_range_span(const struct key_spec *spec, int first, int argc,
                               struct commands_span *span)
{
    span->first = first;
    span->step = spec->keystep;
    if (spec->lastkey >= 0)
        span->last = (long long)first + spec->lastkey;
    else if (spec->limit == 0)
        span->last = (long long)argc + spec->lastkey;
    else if (spec->limit > 0)
        span->last = first + (argc - first) / spec->limit + spec->lastkey;
    else
        return 0;
    return 1;
}

/* KEYNUM: a count at first + keynumidx, then that many keys from
 * first + firstkey, keynumstep apart. */
static int commands_keynum_span(const struct key_spec *spec, int first, int argc,
                                const struct sv *argv, struct commands_span *span)
{
    long long at = (long long)first + spec->keynumidx, numkeys;

    if (spec->keynumidx < 0 || at >= argc || !commands_parse_count(argv[at], &numkeys))
        return 0;
    span->first = (long long)first + spec->firstkey;
    span->step = spec->keynumstep;
    span->last = span->first + (numkeys - 1) * span->step;
    return 1;
}

/* Fill SPAN for SPEC over this request. Returns 0 when the spec yields no
 * keys: unknown kind, keyword absent, bad numkeys, or a span not wholly in
 * argv[1..argc-1] (Redis's "invalid spec", skipped as in its partial mode). */
static int commands_spec_span(const struct key_spec *spec, int argc, const struct sv *argv,
                              struct commands_span *span)
{
    int first = 0, ok = 0;

    if (spec->begin == KS_BEGIN_INDEX)
        first = spec->index;
    else if (spec->begin == KS_BEGIN_KEYWORD)
        first = commands_keyword_begin(spec, argc, argv);
    if (first < 1 || first >= argc)
        return 0;
    if (spec->find == KS_FIND_RANGE)
        ok = commands_range_span(spec, first, argc, span);
    else if (spec->find == KS_FIND_KEYNUM)
        ok = commands_keynum_span(spec, first, argc, argv, span);
    return ok && span->step > 0 && span->first >= 1 && span->first <= span->last &&
           span->last < argc;
}

/* SORT key [BY p] [LIMIT o c] [GET p ...] [ASC|DESC] [ALPHA] [STORE dst]:
 * the key, then the destination of the last STORE. Options are skipped with
 * their arguments the way Redis's own SORT key finder skips them. */
static int commands_sort_keys(int argc, const struct sv *argv, int *keys, int max)
{
    int n = 0, store = 0;

    if (argc < 2)
        return 0;
    keys[n++] = 1;
    for (int i = 2; i < argc; i++) {
        if (sv_ieq(argv[i], "limit"))
            i += 2;
        else if (sv_ieq(argv[i], "get") || sv_ieq(argv[i], "by"))
            i += 1;
        else if (sv_ieq(argv[i], "store") && i + 1 < argc)
            store = i + 1;
    }
    if (store != 0 && n < max)
        keys[n++] = store;
    return n;
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw]
 * [AUTH2 user pw] [KEYS key...], as Redis finds its keys: while no KEYS
 * word appears in argv[2..argc-2], the key argument; otherwise the option
 * scan from argv[6] (skipping AUTH's and AUTH2's arguments) decides: no KEYS
 * there gives the key argument, KEYS with a non-empty key argument gives no
 * keys, KEYS with an empty one gives the keys after it. */
static int commands_migrate_keys(int argc, const struct sv *argv, int *keys, int max)
{
    int first = 3, last = 3, keys_word = 0, n = 0;

    if (argc < 4)
        return 0;
    for (int i = 2; i < argc - 1 && !keys_word; i++)
        keys_word = sv_ieq(argv[i], "keys");
    for (int i = 6; keys_word && i < argc; i++) {
        if (sv_ieq(argv[i], "keys")) {
            if (argv[3].len != 0)
                return 0;
            first = i + 1;
            last = argc - 1;
            break;
        }
        if (sv_ieq(argv[i], "auth"))
            i += 1;
        else if (sv_ieq(argv[i], "auth2"))
            i += 2;
    }
    for (int i = first; i <= last && n < max; i++)
        keys[n++] = i;
    return n;
}

static commands_keys_fn *commands_key_finder(const struct command *cmd)
{
    for (size_t i = 0; i < COMMANDS_ARRAY_LEN(commands_key_finders); i++) {
        if (commands_key_finders[i].cmd == cmd)
            return commands_key_finders[i].fn;
    }
    return NULL;
}

/* Keys follow each key spec in turn, as Redis's getKeysUsingKeySpecs does in
 * its partial mode: a spec that does not fit the request adds no keys and the
 * others still count. Key specs marked not_key (SPUBLISH's shard channel)
 * are followed too: cluster routing needs them. */
int commands_fixed_key(const struct command *cmd)
{
    const struct key_spec *ks;

    if (commands_key_finder(cmd) != NULL)
        return 0;
    if (cmd->key_spec_count == 0)
        return -1;
    if (cmd->key_spec_count != 1)
        return 0;
    ks = &cmd->key_specs[0];
    if (ks->begin == KS_BEGIN_INDEX && ks->find == KS_FIND_RANGE && ks->lastkey == 0 &&
        ks->index > 0)
        return ks->index;
    return 0;
}

int commands_keys(const struct command *cmd, int argc, const struct sv *argv, int *keys,
                  int max)
{
    int n = 0;

    if (cmd == NULL || argv == NULL || argc < 1 || keys == NULL || max <= 0)
        return 0;
    commands_keys_fn *finder = commands_key_finder(cmd);
    if (finder != NULL)
        return finder(argc, argv, keys, max);
    /* Most commands have one key at a fixed place (GET, SET, INCR...). */
    int fixed = commands_fixed_key(cmd);
    if (fixed > 0) {
        if (fixed >= argc)
            return 0;
        keys[0] = fixed;
        return 1;
    }
    for (int s = 0; s < cmd->key_spec_count && n < max; s++) {
        struct commands_span span;
        if (!commands_spec_span(&cmd->key_specs[s], argc, argv, &span))
            continue;
        for (long long i = span.first; i <= span.last && n < max; i += span.step)
            keys[n++] = (int)i;
    }
    return n;
}

uint32_t commands_acl_category(const char *name, size_t len)
{
    for (size_t i = 0; i < COMMANDS_ARRAY_LEN(commands_acl_names); i++) {
        if (commands_name_is(commands_acl_names[i].name, name, len))
            return commands_acl_names[i].bit;
    }
    return 0;
}
