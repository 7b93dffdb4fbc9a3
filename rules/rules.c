/* rules.c - owns the rule file: its [limit NAME] keys (a table, one row a
 * key), their values, and the match conditions built from them at load
 * time. Keeps no buckets and no client state; never touches the network. */
#include "rules.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "commands.h"
#include "glob.h"
#include "inifile.h"
#include "lease.h"
#include "sv.h"
#include "value.h"

#define RULES_MAX_COUNT 1000000000LL             /* largest N in rate and burst */
#define RULES_DEFAULT_MAX_DELAY_US 1000000ULL
#define RULES_MAX_COST (1LL << 50)                /* largest N of a rate of time or bytes */
#define RULES_MAX_CONCURRENCY 1000000             /* largest max_inflight, max_blocked */
#define RULES_MAX_DELAY_LIMIT_US (3600LL * 1000000)
/* Longest lease = DURATION: half a lease's lifetime (LEASE_TTL_US, 2 s),
 * so that what a lease is sized for can be spent before it expires. */
#define RULES_LEASE_LIMIT_US 1000000LL
_Static_assert(2 * RULES_LEASE_LIMIT_US <= LEASE_TTL_US, "a lease can be spent before it expires");
#define RULES_KEYS_ON_STACK 64

/* sluice's own verbs: not in the command table, yet rules may name them. */
static const char *const rules_verb_names[] = {"lock", "unlock", "renew"};
#define RULES_VERB_COUNT 3

/* An address range; IPv4 is kept as IPv4-mapped IPv6 (::ffff:a.b.c.d with
 * 96 + its prefix), so one comparison serves both families. */
struct rules_cidr {
    struct in6_addr addr;   /* host bits cleared */
    int prefix;             /* 0..128 */
};

/* A list value: its items joined by single spaces (what rules_same_params
 * compares), and views of the items in that text. */
struct rules_list {
    char *text;             /* NULL when the key is absent */
    struct sv *items;
    int count;
    int line;               /* of its key (sluice -t's warnings) */
};

enum rules_list_id { LIST_IP, LIST_USER, LIST_NAME, LIST_COMMANDS, LIST_KEYS, LIST_COUNT };

/* A rule as loaded. rules_get hands out &pub: PUB must stay first. */
struct rule_full {
    struct rule pub;
    char *name;
    struct rules_list lists[LIST_COUNT];
    struct rules_cidr *cidrs;       /* lists[LIST_IP].count of them */
    uint64_t *command_bits;         /* by command id; NULL when commands is absent */
    unsigned verbs;                 /* bit i: rules_verb_names[i] is in commands */
    enum rule_cost rate_unit;       /* what rate's N counts: a number, a duration, a size */
};

struct rule_set {
    struct rule_full **rules;
    int count;
    int cap;
};

struct rules_key;
typedef int rules_setter(struct rule_full *r, const struct rules_key *key, const char *value,
                         char *err, size_t errlen);

struct rules_key {
    const char *name;
    rules_setter *set;
    int list;                       /* list keys: enum rules_list_id; else -1 */
    const char *const *choices;     /* choice keys: the words, in enum order */
    size_t offset;                  /* choice keys: the enum field in struct rule */
};

static rules_setter rules_set_ip, rules_set_globs, rules_set_commands, rules_set_rate,
    rules_set_burst, rules_set_choice, rules_set_max_delay, rules_set_lease, rules_set_lease_max,
    rules_set_concurrency;

static const char *const rules_per_words[] = {"client", "ip", "user", "name", "rule", NULL};
static const char *const rules_action_words[] = {"reject", "delay", NULL};
static const char *const rules_scope_words[] = {"local", "shared", NULL};
static const char *const rules_mode_words[] = {"enforce", "dryrun", NULL};
static const char *const rules_cost_words[] = {"requests", "redis_time", "bytes", NULL};

void rules_words(const struct rule *r, struct rule_words *out)
{
    out->per = rules_per_words[r->per];
    out->action = rules_action_words[r->action];
    out->scope = rules_scope_words[r->scope];
    out->mode = rules_mode_words[r->mode];
    out->cost = rules_cost_words[r->cost];
}

#define F(field) offsetof(struct rule, field)
enum rules_key_id {
    KEY_MATCH_IP, KEY_MATCH_USER, KEY_MATCH_NAME, KEY_COMMANDS, KEY_KEYS, KEY_RATE, KEY_BURST,
    KEY_PER, KEY_ACTION, KEY_MAX_DELAY, KEY_SCOPE, KEY_MODE, KEY_LEASE, KEY_LEASE_MAX,
    KEY_MAX_INFLIGHT, KEY_MAX_BLOCKED, KEY_COST, KEY_COUNT
};
static const struct rules_key rules_keys[KEY_COUNT] = {
    [KEY_MATCH_IP] = {"match_ip", rules_set_ip, LIST_IP, NULL, 0},
    [KEY_MATCH_USER] = {"match_user", rules_set_globs, LIST_USER, NULL, 0},
    [KEY_MATCH_NAME] = {"match_name", rules_set_globs, LIST_NAME, NULL, 0},
    [KEY_COMMANDS] = {"commands", rules_set_commands, LIST_COMMANDS, NULL, 0},
    [KEY_KEYS] = {"keys", rules_set_globs, LIST_KEYS, NULL, 0},
    [KEY_RATE] = {"rate", rules_set_rate, -1, NULL, 0},
    [KEY_BURST] = {"burst", rules_set_burst, -1, NULL, 0},
    [KEY_PER] = {"per", rules_set_choice, -1, rules_per_words, F(per)},
    [KEY_ACTION] = {"action", rules_set_choice, -1, rules_action_words, F(action)},
    [KEY_MAX_DELAY] = {"max_delay", rules_set_max_delay, -1, NULL, 0},
    [KEY_SCOPE] = {"scope", rules_set_choice, -1, rules_scope_words, F(scope)},
    [KEY_MODE] = {"mode", rules_set_choice, -1, rules_mode_words, F(mode)},
    [KEY_LEASE] = {"lease", rules_set_lease, -1, NULL, 0},
    [KEY_LEASE_MAX] = {"lease_max", rules_set_lease_max, -1, NULL, 0},
    [KEY_MAX_INFLIGHT] = {"max_inflight", rules_set_concurrency, -1, NULL, F(max_inflight)},
    [KEY_MAX_BLOCKED] = {"max_blocked", rules_set_concurrency, -1, NULL, F(max_blocked)},
    [KEY_COST] = {"cost", rules_set_choice, -1, rules_cost_words, F(cost)},
};
#undef F

struct rules_parse {
    struct rule_set *rs;
    const char *path;
    struct errlist *errs;
    struct inifile_layout layout;   /* headers and continuation lines (inifile.h) */
    int next_header;                /* headers before this one have been started */
    struct rule_full *cur;          /* rule being read; NULL in a bad section */
    int cur_line;                   /* its header's line */
    int seen_line[KEY_COUNT];       /* line where each key was set, 0 = not yet */
    const struct rules_key *last_key;  /* the key set just before, if it went well */
    char *last_value;               /* its whole value so far */
};

/* ---- values ---------------------------------------------------------- */

/* Split VALUE at blanks and commas into LIST. -1 when it has no item, -2
 * when out of memory. */
static int rules_split(const char *value, struct rules_list *list)
{
    size_t n = strlen(value), len = 0;
    char *text = malloc(n + 1);
    struct sv *items = malloc(sizeof(*items) * (n / 2 + 1));
    int count = 0;

    while (text != NULL && items != NULL) {
        size_t skip = strspn(value, " \t,"), item;

        value += skip;
        item = strcspn(value, " \t,");
        if (item == 0)
            break;
        if (len > 0)
            text[len++] = ' ';
        memcpy(text + len, value, item);
        items[count].ptr = text + len;
        items[count].len = item;
        count++;
        len += item;
        value += item;
    }
    if (count == 0 || text == NULL || items == NULL) {
        free(text);
        free(items);
        return text == NULL || items == NULL ? -2 : -1;
    }
    text[len] = '\0';
    list->text = text;
    list->items = items;
    list->count = count;
    return 0;
}

static int rules_set_globs(struct rule_full *r, const struct rules_key *key, const char *value,
                           char *err, size_t errlen)
{
    int rc = rules_split(value, &r->lists[key->list]);

    if (rc != 0) {
        if (rc == -1)
            snprintf(err, errlen, "needs at least one pattern");
        return -1;
    }
    return 0;
}

/* "a.b.c.d", "a.b.c.d/N", "v6addr" or "v6addr/N" into OUT. */
static int rules_parse_cidr(struct sv item, struct rules_cidr *out)
{
    char buf[INET6_ADDRSTRLEN + 8], perr[64];
    char *slash;
    long long prefix = -1;
    struct in_addr v4;
    int full, rest;

    if (item.len >= sizeof(buf))
        return -1;
    memcpy(buf, item.ptr, item.len);
    buf[item.len] = '\0';
    slash = strchr(buf, '/');
    if (slash != NULL) {
        *slash = '\0';
        if (slash[1] < '0' || slash[1] > '9' ||
            value_int(slash + 1, 0, 128, &prefix, perr, sizeof(perr)) != 0)
            return -1;
    }
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, &v4) == 1) {
        if (prefix > 32)
            return -1;
        out->addr.s6_addr[10] = 0xff;
        out->addr.s6_addr[11] = 0xff;
        memcpy(&out->addr.s6_addr[12], &v4, 4);
        out->prefix = 96 + (prefix < 0 ? 32 : (int)prefix);
    } else if (inet_pton(AF_INET6, buf, &out->addr) == 1) {
        out->prefix = prefix < 0 ? 128 : (int)prefix;
    } else {
        return -1;
    }
    full = out->prefix / 8;
    rest = out->prefix % 8;
    if (full < 16) {
        out->addr.s6_addr[full] &= (uint8_t)(0xff << (8 - rest));
        memset(&out->addr.s6_addr[full + 1], 0, (size_t)(15 - full));
    }
    return 0;
}

static int rules_set_ip(struct rule_full *r, const struct rules_key *key, const char *value,
                        char *err, size_t errlen)
{
    struct rules_list *list = &r->lists[key->list];
    int rc = rules_split(value, list);

    if (rc != 0) {
        if (rc == -1)
            snprintf(err, errlen, "needs at least one address or CIDR");
        return -1;
    }
    r->cidrs = calloc((size_t)list->count, sizeof(*r->cidrs));
    if (r->cidrs == NULL)
        return -1;      /* err left empty: out of memory */
    err[0] = '\0';
    /* Every bad item is told, not only the first (sluice -t). */
    for (int i = 0; i < list->count; i++) {
        if (rules_parse_cidr(list->items[i], &r->cidrs[i]) != 0)
            errlist_msg_append(err, errlen, "'%.*s' is not an address or CIDR (e.g. 10.0.0.0/8, ::1)",
                               (int)list->items[i].len, list->items[i].ptr);
    }
    return err[0] != '\0' ? -1 : 0;
}

static int rules_verb_bit(struct sv word)
{
    for (int v = 0; v < RULES_VERB_COUNT; v++) {
        if (sv_ieq(word, rules_verb_names[v]))
            return 1 << v;
    }
    return 0;
}

/* "name" or "parent|sub" in the command table; NULL when unknown. */
static const struct command *rules_find_command(struct sv word)
{
    const char *bar = memchr(word.ptr, '|', word.len);
    const struct command *parent;

    if (bar == NULL)
        return commands_lookup(word.ptr, word.len);
    parent = commands_lookup(word.ptr, (size_t)(bar - word.ptr));
    for (int i = 0; parent != NULL && i < parent->subcommand_count; i++) {
        if (sv_ieq(word, parent->subcommands[i].name))
            return &parent->subcommands[i];
    }
    return NULL;
}

static void rules_bit_set(uint64_t *bits, int id)
{
    bits[id / 64] |= 1ULL << (id % 64);
}

/* Set the bits of CMD and, for a container like CLIENT, of every
 * subcommand: requests arrive resolved to their subcommand. */
static void rules_add_command(uint64_t *bits, const struct command *cmd)
{
    rules_bit_set(bits, cmd->id);
    for (int i = 0; i < cmd->subcommand_count; i++)
        rules_bit_set(bits, cmd->subcommands[i].id);
}

static void rules_add_category(uint64_t *bits, uint32_t category)
{
    int count = commands_count();

    for (int id = 0; id < count; id++) {
        if (commands_by_id(id)->acl_categories & category)
            rules_bit_set(bits, id);
    }
}

/* Resolve names and @categories once, into a bitmap over command ids. */
static int rules_set_commands(struct rule_full *r, const struct rules_key *key, const char *value,
                              char *err, size_t errlen)
{
    struct rules_list *list = &r->lists[key->list];
    size_t words = (size_t)commands_count() / 64 + 1;
    int rc = rules_split(value, list);

    if (rc != 0) {
        if (rc == -1)
            snprintf(err, errlen, "needs at least one command or @category");
        return -1;
    }
    r->command_bits = calloc(words, sizeof(uint64_t));
    if (r->command_bits == NULL)
        return -1;      /* err left empty: out of memory */
    err[0] = '\0';
    for (int i = 0; i < list->count; i++) {
        struct sv word = list->items[i];
        const struct command *cmd;
        uint32_t category;

        /* Every bad item is told, not only the first (sluice -t). */
        if (word.ptr[0] == '@') {
            category = commands_acl_category(word.ptr + 1, word.len - 1);
            if (category == 0)
                errlist_msg_append(err, errlen, "unknown ACL category '%.*s'", (int)word.len,
                                   word.ptr);
            else
                rules_add_category(r->command_bits, category);
        } else if ((cmd = rules_find_command(word)) != NULL) {
            rules_add_command(r->command_bits, cmd);
        } else if (rules_verb_bit(word) != 0) {
            r->verbs |= (unsigned)rules_verb_bit(word);
        } else {
            errlist_msg_append(err, errlen, "unknown command '%.*s'", (int)word.len, word.ptr);
        }
    }
    if (err[0] != '\0')
        return -1;
    /* names are case-blind: so is the text rules_same_params compares */
    for (char *c = list->text; *c != '\0'; c++)
        *c = (char)tolower((unsigned char)*c);
    return 0;
}

/* "N/s", "N/m" or "N/h"; N a count, a duration or a size. */
static int rules_set_rate(struct rule_full *r, const struct rules_key *key, const char *value,
                          char *err, size_t errlen)
{
    const char *slash = strchr(value, '/');
    char num[32], nerr[128];
    long long n;
    double unit_s = 0;

    (void)key;
    if (slash != NULL && slash[1] != '\0' && slash[2] == '\0')
        unit_s = slash[1] == 's' ? 1 : slash[1] == 'm' ? 60 : slash[1] == 'h' ? 3600 : 0;
    if (unit_s == 0 || (size_t)(slash - value) >= sizeof(num) || value[0] < '0' ||
        value[0] > '9') {
        snprintf(err, errlen, "'%s' is not a rate (N/s, N/m or N/h)", value);
        return -1;
    }
    memcpy(num, value, (size_t)(slash - value));
    num[slash - value] = '\0';
    /* N is a count, or for cost = redis_time / bytes a duration (100ms) or
     * a size (10mb): rules_finish checks that it fits the cost. */
    r->rate_unit = RULE_COST_REQUESTS;
    if (strspn(num, "0123456789") == strlen(num)) {
        if (value_int(num, 1, RULES_MAX_COUNT, &n, nerr, sizeof(nerr)) != 0)
            n = 0;
    } else {
        r->rate_unit = RULE_COST_REDIS_TIME;
        if (value_duration_us(num, &n, nerr, sizeof(nerr)) != 0) {
            r->rate_unit = RULE_COST_BYTES;
            if (value_bytes(num, 1, RULES_MAX_COST, &n, nerr, sizeof(nerr)) != 0)
                n = 0;
        }
    }
    if (n < 1 || n > RULES_MAX_COST) {
        snprintf(err, errlen, "'%s' is not a rate (N/s, N/m or N/h; N from 1 to %lld)", value,
                 RULES_MAX_COUNT);
        return -1;
    }
    r->pub.rate_per_s = (double)n / unit_s;
    return 0;
}

static int rules_set_burst(struct rule_full *r, const struct rules_key *key, const char *value,
                           char *err, size_t errlen)
{
    long long n;

    (void)key;
    if (value_int(value, 1, RULES_MAX_COUNT, &n, err, errlen) != 0)
        return -1;
    r->pub.burst = (double)n;
    return 0;
}

static int rules_set_max_delay(struct rule_full *r, const struct rules_key *key,
                               const char *value, char *err, size_t errlen)
{
    long long us;

    (void)key;
    if (value_duration_us(value, &us, err, errlen) != 0)
        return -1;
    if (us < 1 || us > RULES_MAX_DELAY_LIMIT_US) {
        snprintf(err, errlen, "'%s' is out of range (1us to 3600s)", value);
        return -1;
    }
    r->pub.max_delay_us = (uint64_t)us;
    return 0;
}

/* "off", or how long of its own rate a sluice leases tokens for. */
static int rules_set_lease(struct rule_full *r, const struct rules_key *key, const char *value,
                           char *err, size_t errlen)
{
    long long us;

    (void)key;
    if (strcasecmp(value, "off") == 0) {
        r->pub.lease_us = 0;
        return 0;
    }
    if (value_duration_us(value, &us, err, errlen) != 0)
        return -1;
    if (us < 1000 || us > RULES_LEASE_LIMIT_US) {
        snprintf(err, errlen, "'%s' is out of range (off, or 1ms to 1s)", value);
        return -1;
    }
    r->pub.lease_us = (uint64_t)us;
    return 0;
}

static int rules_set_lease_max(struct rule_full *r, const struct rules_key *key,
                               const char *value, char *err, size_t errlen)
{
    long long n;

    (void)key;
    if (value_int(value, 1, RULES_MAX_COUNT, &n, err, errlen) != 0)
        return -1;
    r->pub.lease_max = (double)n;
    return 0;
}

/* max_inflight, max_blocked: a count of requests at once (the int field
 * at KEY->offset). */
static int rules_set_concurrency(struct rule_full *r, const struct rules_key *key,
                                 const char *value, char *err, size_t errlen)
{
    long long n;
    char nerr[128];

    if (value_int(value, 1, RULES_MAX_CONCURRENCY, &n, nerr, sizeof(nerr)) != 0) {
        snprintf(err, errlen, "'%s' is not a positive integer (1 to %d)", value,
                 RULES_MAX_CONCURRENCY);
        return -1;
    }
    *(int *)((char *)&r->pub + key->offset) = (int)n;
    return 0;
}

/* One word of KEY->choices; the enum field gets its position. */
static int rules_set_choice(struct rule_full *r, const struct rules_key *key, const char *value,
                            char *err, size_t errlen)
{
    size_t len = 0;

    for (int i = 0; key->choices[i] != NULL; i++) {
        if (strcasecmp(value, key->choices[i]) == 0) {
            *(int *)((char *)&r->pub + key->offset) = i;
            return 0;
        }
    }
    len += (size_t)snprintf(err, errlen, "must be");
    for (int i = 0; key->choices[i] != NULL && len < errlen; i++) {
        const char *sep = i == 0 ? " " : key->choices[i + 1] == NULL ? " or " : ", ";
        len += (size_t)snprintf(err + len, errlen - len, "%s%s", sep, key->choices[i]);
    }
    if (len < errlen)
        snprintf(err + len, errlen - len, ", not '%s'", value);
    return -1;
}

/* ---- the file -------------------------------------------------------- */

static void rules_free_rule(struct rule_full *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < LIST_COUNT; i++) {
        free(r->lists[i].text);
        free(r->lists[i].items);
    }
    free(r->cidrs);
    free(r->command_bits);
    free(r->name);
    free(r);
}

static struct rule_full *rules_find_name(const struct rule_set *rs, const char *name)
{
    for (int i = 0; i < rs->count; i++) {
        if (strcmp(rs->rules[i]->name, name) == 0)
            return rs->rules[i];
    }
    return NULL;
}

static struct rule_full *rules_add(struct rule_set *rs, const char *name, int line)
{
    struct rule_full *r;

    if (rs->count == rs->cap) {
        int cap = rs->cap == 0 ? 8 : rs->cap * 2;
        struct rule_full **grown = realloc(rs->rules, sizeof(*grown) * (size_t)cap);

        if (grown == NULL)
            return NULL;
        rs->rules = grown;
        rs->cap = cap;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->name = strdup(name);
    r->pub.name = r->name;
    r->pub.index = rs->count;
    r->pub.line = line;
    r->pub.per = RULE_PER_CLIENT;
    r->pub.action = RULE_ACTION_REJECT;
    r->pub.scope = RULE_SCOPE_LOCAL;
    r->pub.mode = RULE_MODE_ENFORCE;
    r->pub.lease_us = RULES_DEFAULT_LEASE_US;
    rs->rules[rs->count++] = r;
    return r;
}

/* The lease keys of R: for shared rules only, lease_max within burst;
 * lease_max's default is burst / 8 (at least 1), so that N sluices hold
 * at most N / 8 of a burst between them (rate-limits.md). */
static void rules_finish_lease(struct rules_parse *p, struct rule_full *r)
{
    for (int k = KEY_LEASE; k <= KEY_LEASE_MAX; k++) {
        if (p->seen_line[k] != 0 && r->pub.scope != RULE_SCOPE_SHARED)
            errlist_add(p->errs, p->path, p->seen_line[k], "%s needs scope = shared",
                        rules_keys[k].name);
    }
    if (p->seen_line[KEY_LEASE_MAX] == 0) {
        r->pub.lease_max = floor(r->pub.burst / 8);
        if (r->pub.lease_max < 1)
            r->pub.lease_max = 1;
    } else if (r->pub.lease_max > r->pub.burst) {
        errlist_add(p->errs, p->path, p->seen_line[KEY_LEASE_MAX],
                    "lease_max (%.0f) must not exceed burst (%.0f)", r->pub.lease_max,
                    r->pub.burst);
    }
    if (r->pub.scope != RULE_SCOPE_SHARED)
        r->pub.lease_us = 0;
}

/* cost = redis_time / bytes: a rate of that unit, local only, no burst
 * key (one second of the rate); a rate of time or bytes needs its cost. */
static void rules_finish_cost(struct rules_parse *p, struct rule_full *r)
{
    static const char *const want[] = {"a count (e.g. rate = 100/s)",
                                       "a duration (e.g. rate = 100ms/s)",
                                       "a size (e.g. rate = 10mb/s)"};

    if (p->seen_line[KEY_RATE] != 0 && r->rate_unit != r->pub.cost &&
        r->pub.cost == RULE_COST_REQUESTS)
        errlist_add(p->errs, p->path, p->seen_line[KEY_RATE],
                    "a rate of %s needs cost = %s", r->rate_unit == RULE_COST_BYTES ? "bytes" : "time",
                    rules_cost_words[r->rate_unit]);
    else if (p->seen_line[KEY_RATE] != 0 && r->rate_unit != r->pub.cost)
        errlist_add(p->errs, p->path, p->seen_line[KEY_RATE], "cost = %s needs a rate of %s",
                    rules_cost_words[r->pub.cost], want[r->pub.cost]);
    if (r->pub.cost == RULE_COST_REQUESTS)
        return;
    if (r->pub.scope != RULE_SCOPE_LOCAL)
        errlist_add(p->errs, p->path, p->seen_line[KEY_COST], "cost = %s needs scope = local",
                    rules_cost_words[r->pub.cost]);
    if (p->seen_line[KEY_BURST] != 0)
        errlist_add(p->errs, p->path, p->seen_line[KEY_BURST], "burst needs cost = requests");
    if (p->seen_line[KEY_RATE] == 0)
        errlist_add(p->errs, p->path, p->seen_line[KEY_COST], "cost = %s needs rate",
                    rules_cost_words[r->pub.cost]);
}

/* Checks that need the whole section, and defaults that depend on others. */
static void rules_finish(struct rules_parse *p)
{
    struct rule_full *r = p->cur;

    p->cur = NULL;
    if (r == NULL)
        return;
    /* A concurrency limit alone needs no rate (and then has no bucket). */
    if (p->seen_line[KEY_RATE] == 0 && r->pub.max_inflight == 0 && r->pub.max_blocked == 0)
        errlist_add(p->errs, p->path, p->cur_line, "missing key 'rate' in [limit %s]", r->name);
    else if (p->seen_line[KEY_BURST] != 0 && p->seen_line[KEY_RATE] == 0)
        errlist_add(p->errs, p->path, p->seen_line[KEY_BURST], "burst needs rate");
    rules_finish_cost(p, r);
    /* Slots are counted in this sluice's memory only (rate-limits.md). */
    for (int k = KEY_MAX_INFLIGHT; k <= KEY_MAX_BLOCKED; k++) {
        if (p->seen_line[k] != 0 && r->pub.scope != RULE_SCOPE_LOCAL)
            errlist_add(p->errs, p->path, p->seen_line[k], "%s needs scope = local",
                        rules_keys[k].name);
    }
    if (p->seen_line[KEY_MAX_DELAY] != 0 && r->pub.action != RULE_ACTION_DELAY)
        errlist_add(p->errs, p->path, p->seen_line[KEY_MAX_DELAY],
                    "max_delay needs action = delay");
    if (r->pub.action == RULE_ACTION_DELAY && p->seen_line[KEY_MAX_DELAY] == 0)
        r->pub.max_delay_us = RULES_DEFAULT_MAX_DELAY_US;
    if (p->seen_line[KEY_BURST] == 0)
        r->pub.burst = r->pub.rate_per_s > 1 ? r->pub.rate_per_s : 1;
    rules_finish_lease(p, r);
}

static void rules_start(struct rules_parse *p, const struct inifile_header *h)
{
    const char *name = inifile_section_name(h->section, "limit");
    const struct rule_full *first;

    memset(p->seen_line, 0, sizeof(p->seen_line));
    p->cur = NULL;
    p->last_key = NULL;
    p->cur_line = h->line;
    if (name == NULL) {
        errlist_add(p->errs, p->path, h->line, "unknown section [%s] (expected [limit NAME])",
                    h->section ? h->section : "");
        return;
    }
    if (strlen(name) > RULES_NAME_MAX) {
        errlist_add(p->errs, p->path, h->line, "rule name longer than %d bytes", RULES_NAME_MAX);
        return;
    }
    first = rules_find_name(p->rs, name);
    if (first != NULL) {
        errlist_add(p->errs, p->path, h->line, "duplicate rule name '%s' (first on line %d)",
                    name, first->pub.line);
        return;
    }
    p->cur = rules_add(p->rs, name, h->line);
    if (p->cur == NULL)
        errlist_add(p->errs, p->path, h->line, "out of memory");
}

/* Finish the current section and start every header before LINE. */
static void rules_advance_to(struct rules_parse *p, int line)
{
    while (p->next_header < p->layout.header_count &&
           p->layout.headers[p->next_header].line < line) {
        rules_finish(p);
        rules_start(p, &p->layout.headers[p->next_header++]);
    }
}

/* Forget what a list key's setter built, so it can run again. */
static void rules_clear_list(struct rule_full *r, int list)
{
    free(r->lists[list].text);
    free(r->lists[list].items);
    r->lists[list] = (struct rules_list){.line = r->lists[list].line};
    if (list == LIST_IP) {
        free(r->cidrs);
        r->cidrs = NULL;
    } else if (list == LIST_COMMANDS) {
        free(r->command_bits);
        r->command_bits = NULL;
        r->verbs = 0;
    }
}

/* An indented line after "key = value": more items for a list key, so
 * long lists fit in lines inih can read (INI_MAX_LINE). The key is set
 * again from its whole value; its first error stops further lines. */
static void rules_continue(struct rules_parse *p, const char *value, const char *file, int line)
{
    const struct rules_key *key = p->last_key;
    char err[1024], *whole;
    size_t n;

    if (key == NULL)
        return;     /* the key's line had an error */
    if (key->list < 0) {
        errlist_add(p->errs, file, line, "%s takes one value; only lists go on over lines",
                    key->name);
        p->last_key = NULL;
        return;
    }
    n = strlen(p->last_value) + strlen(value) + 2;
    whole = malloc(n);
    if (whole == NULL)
        return;
    snprintf(whole, n, "%s %s", p->last_value, value);
    free(p->last_value);
    p->last_value = whole;
    rules_clear_list(p->cur, key->list);
    err[0] = '\0';
    if (key->set(p->cur, key, whole, err, sizeof(err)) != 0) {
        errlist_add_each(p->errs, file, line, key->name, err[0] ? err : "out of memory");
        p->last_key = NULL;
    }
}

static void rules_on_key(void *ctx, const char *section, const char *name, const char *value,
                         const char *file, int line, struct errlist *errs)
{
    struct rules_parse *p = ctx;
    const struct rules_key *key = NULL;
    char err[1024];

    (void)section;  /* sections come from inifile_scan_layout */
    if (name == NULL)
        return;
    rules_advance_to(p, line);
    if (p->next_header == 0) {
        errlist_add(errs, file, line, "key '%s' outside a [limit NAME] section", name);
        return;
    }
    if (p->cur == NULL)
        return;     /* a bad section: said so at its header */
    if (inifile_is_continued(&p->layout, line)) {
        rules_continue(p, value, file, line);
        return;
    }
    free(p->last_value);
    p->last_value = NULL;
    p->last_key = NULL;
    for (int i = 0; i < KEY_COUNT && key == NULL; i++) {
        if (strcmp(rules_keys[i].name, name) == 0)
            key = &rules_keys[i];
    }
    if (key == NULL) {
        errlist_add(errs, file, line, "unknown key '%s' in [limit %s]", name, p->cur->name);
        return;
    }
    if (p->seen_line[key - rules_keys] != 0) {
        errlist_add(errs, file, line, "duplicate key '%s' (first set on line %d)", name,
                    p->seen_line[key - rules_keys]);
        return;
    }
    p->seen_line[key - rules_keys] = line;
    err[0] = '\0';
    if (key->list >= 0)
        p->cur->lists[key->list].line = line;
    if (key->set(p->cur, key, value, err, sizeof(err)) != 0) {
        errlist_add_each(errs, file, line, name, err[0] ? err : "out of memory");
        return;
    }
    p->last_key = key;
    p->last_value = strdup(value);
}

/* The glob warnings of one list of R (rules_warn). */
static void rules_warn_list(const struct rule_full *r, int list, const char *key, const char *path,
                            rules_user_known_fn *user_known, void *ctx, struct errlist *warns)
{
    const struct rules_list *l = &r->lists[list];

    for (int i = 0; i < l->count; i++) {
        struct sv g = l->items[i];

        if (!glob_can_match(g.ptr, g.len))
            errlist_add(warns, path, l->line, "warning: [limit %s] %s '%.*s' can never match "
                        "(an empty class [] or a '[' at its end)", r->name, key, (int)g.len, g.ptr);
        else if (user_known != NULL && !user_known(ctx, g))
            errlist_add(warns, path, l->line, "warning: [limit %s] %s '%.*s' matches no user "
                        "of the users file: the rule never applies", r->name, key, (int)g.len,
                        g.ptr);
    }
}

void rules_warn(const struct rule_set *rs, const char *path, rules_user_known_fn *user_known,
                void *ctx, struct errlist *warns)
{
    for (int i = 0; rs != NULL && i < rs->count; i++) {
        const struct rule_full *r = rs->rules[i];

        rules_warn_list(r, LIST_USER, "match_user", path, user_known, ctx, warns);
        rules_warn_list(r, LIST_NAME, "match_name", path, NULL, NULL, warns);
        rules_warn_list(r, LIST_KEYS, "keys", path, NULL, NULL, warns);
    }
}

struct rule_set *rules_load(const char *path, struct errlist *errs)
{
    struct rules_parse p = {.path = path, .errs = errs};
    int before = errs->count;

    p.rs = calloc(1, sizeof(*p.rs));
    if (p.rs == NULL) {
        errlist_add(errs, path, 0, "out of memory");
        return NULL;
    }
    inifile_scan_layout(path, &p.layout);
    if (inifile_parse(path, rules_on_key, &p, errs) == 0) {
        rules_advance_to(&p, INT_MAX);
        rules_finish(&p);
    }
    inifile_layout_free(&p.layout);
    free(p.last_value);
    if (errs->count != before) {
        rules_free(p.rs);
        return NULL;
    }
    return p.rs;
}

void rules_free(struct rule_set *rs)
{
    if (rs == NULL)
        return;
    for (int i = 0; i < rs->count; i++)
        rules_free_rule(rs->rules[i]);
    free(rs->rules);
    free(rs);
}

int rules_count(const struct rule_set *rs)
{
    return rs == NULL ? 0 : rs->count;
}

const struct rule *rules_get(const struct rule_set *rs, int i)
{
    return &rs->rules[i]->pub;
}

/* ---- matching -------------------------------------------------------- */

static const struct rule_full *rules_full(const struct rule *r)
{
    return (const struct rule_full *)r;
}

static int rules_glob_any(const struct rules_list *globs, const char *s, size_t len)
{
    for (int i = 0; i < globs->count; i++) {
        if (glob_match(globs->items[i].ptr, globs->items[i].len, s, len))
            return 1;
    }
    return 0;
}

static int rules_cidr_contains(const struct rules_cidr *c, const struct in6_addr *a)
{
    int full = c->prefix / 8, rest = c->prefix % 8;
    uint8_t mask;

    if (memcmp(c->addr.s6_addr, a->s6_addr, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    mask = (uint8_t)(0xff << (8 - rest));
    return (a->s6_addr[full] & mask) == c->addr.s6_addr[full];
}

static int rules_ip_matches(const struct rule_full *r, const struct sockaddr *addr)
{
    struct in6_addr a;

    if (addr == NULL)
        return 0;
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)addr;

        memset(&a, 0, sizeof(a));
        a.s6_addr[10] = 0xff;
        a.s6_addr[11] = 0xff;
        memcpy(&a.s6_addr[12], &in->sin_addr, 4);
    } else if (addr->sa_family == AF_INET6) {
        a = ((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr;
    } else {
        return 0;
    }
    for (int i = 0; i < r->lists[LIST_IP].count; i++) {
        if (rules_cidr_contains(&r->cidrs[i], &a))
            return 1;
    }
    return 0;
}

int rules_client_matches(const struct rule *rule, const struct sockaddr *addr, const char *user,
                         const char *name)
{
    const struct rule_full *r = rules_full(rule);

    if (r->lists[LIST_IP].text != NULL && !rules_ip_matches(r, addr))
        return 0;
    if (user == NULL)
        user = "default";
    if (r->lists[LIST_USER].text != NULL &&
        !rules_glob_any(&r->lists[LIST_USER], user, strlen(user)))
        return 0;
    if (r->lists[LIST_NAME].text != NULL &&
        (name == NULL || name[0] == '\0' ||
         !rules_glob_any(&r->lists[LIST_NAME], name, strlen(name))))
        return 0;
    return 1;
}

int rules_keys_match(const struct rule *rule, const struct sv *argv, const int *pos, int n)
{
    const struct rule_full *r = rules_full(rule);

    for (int i = 0; i < n; i++) {
        if (rules_glob_any(&r->lists[LIST_KEYS], argv[pos[i]].ptr, argv[pos[i]].len))
            return 1;
    }
    return 0;
}

static int rules_any_key_matches(const struct rule_full *r, const struct command *cmd,
                                 const struct sv *argv, int argc)
{
    int on_stack[RULES_KEYS_ON_STACK];
    int *pos = on_stack, max = RULES_KEYS_ON_STACK, n, found;

    if (argc > RULES_KEYS_ON_STACK) {
        pos = malloc(sizeof(*pos) * (size_t)argc);
        if (pos == NULL)
            return 1;   /* its keys cannot be found: the rule applies, never skipped */
        max = argc;
    }
    n = commands_keys(cmd, argc, argv, pos, max);
    found = rules_keys_match(&r->pub, argv, pos, n);
    if (pos != on_stack)
        free(pos);
    return found;
}

/* A command the table does not know: LOCK, UNLOCK, RENEW (key argv[1]),
 * or one we cannot look into, which only unconditional rules match. */
static int rules_unknown_matches(const struct rule_full *r, const struct sv *argv, int argc)
{
    unsigned verb = argc > 0 ? (unsigned)rules_verb_bit(argv[0]) : 0;

    if (r->lists[LIST_COMMANDS].text != NULL && (r->verbs & verb) == 0)
        return 0;
    if (r->lists[LIST_KEYS].text == NULL)
        return 1;
    return verb != 0 && argc >= 2 &&
           rules_glob_any(&r->lists[LIST_KEYS], argv[1].ptr, argv[1].len);
}

int rules_command_allowed(const struct rule *rule, const struct command *cmd)
{
    const struct rule_full *r = rules_full(rule);

    return r->command_bits == NULL || (r->command_bits[cmd->id / 64] & (1ULL << (cmd->id % 64)));
}

int rules_key_may_start_with(const struct rule *rule, unsigned char c)
{
    const struct rules_list *globs = &rules_full(rule)->lists[LIST_KEYS];

    for (int i = 0; i < globs->count; i++) {
        const char *g = globs->items[i].ptr;
        if (globs->items[i].len == 0)
            continue;   /* matches only the empty key */
        if (strchr("*?[\\", g[0]) != NULL || (unsigned char)g[0] == c)
            return 1;
    }
    return 0;
}

int rules_has_keys(const struct rule *rule)
{
    return rules_full(rule)->lists[LIST_KEYS].text != NULL;
}

int rules_command_matches(const struct rule *rule, const struct command *cmd,
                          const struct sv *argv, int argc)
{
    const struct rule_full *r = rules_full(rule);

    if (cmd == NULL)
        return rules_unknown_matches(r, argv, argc);
    if (!rules_command_allowed(rule, cmd))
        return 0;
    if (r->lists[LIST_KEYS].text == NULL)
        return 1;
    return rules_any_key_matches(r, cmd, argv, argc);
}

static int rules_same_text(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

/* max_inflight and max_blocked are left out: a reload that changes only
 * them keeps the rule's state, and with it the count of slots held. */
int rules_same_params(const struct rule *a, const struct rule *b)
{
    const struct rule_full *fa = rules_full(a), *fb = rules_full(b);

    if (strcmp(a->name, b->name) != 0 || a->rate_per_s != b->rate_per_s ||
        a->burst != b->burst || a->per != b->per || a->action != b->action ||
        a->max_delay_us != b->max_delay_us || a->scope != b->scope || a->mode != b->mode ||
        a->lease_us != b->lease_us || a->lease_max != b->lease_max || a->cost != b->cost)
        return 0;
    for (int i = 0; i < LIST_COUNT; i++) {
        if (!rules_same_text(fa->lists[i].text, fb->lists[i].text))
            return 0;
    }
    return 1;
}
