/* rules.h - rate-limit rules ([limit NAME] sections of the rule file): the
 * loader and the two match tests. Buckets are not kept here: a rule says
 * which bucket (per) and how much (rate, burst); see bucket.h.
 *
 * Matching is split in two so that the per-command work stays small:
 *   rules_client_matches   ip / user / name; run when a client connects,
 *                          AUTHs or sets its name; keep the rules that pass.
 *   rules_command_matches  command names, ACL categories and key globs;
 *                          the limiter runs its halves (rules_command_allowed
 *                          once per command id at load, rules_keys_match per
 *                          request) and the whole only for unknown commands. */
#ifndef SLUICE_RULES_H
#define SLUICE_RULES_H

#include <stdint.h>

#include "errlist.h"

#include "sv.h"

struct command;
struct sockaddr;

enum rule_per {
    RULE_PER_CLIENT,    /* one bucket per connection */
    RULE_PER_IP,        /* per client address */
    RULE_PER_USER,      /* per AUTH user ("default" when none) */
    RULE_PER_NAME,      /* per CLIENT SETNAME name */
    RULE_PER_RULE,      /* one bucket for everyone the rule matches */
};
enum rule_action { RULE_ACTION_REJECT, RULE_ACTION_DELAY };
enum rule_scope {
    RULE_SCOPE_LOCAL,   /* buckets in this sluice's memory */
    RULE_SCOPE_SHARED,  /* buckets in Redis (lua/bucket.lua), shared by all sluices */
};
/* What a rule's bucket counts (cost =): requests, or what each request
 * cost Redis, charged after its reply (rate then in us or bytes per s). */
enum rule_cost { RULE_COST_REQUESTS, RULE_COST_REDIS_TIME, RULE_COST_BYTES };
enum rule_mode {
    RULE_MODE_ENFORCE,
    RULE_MODE_DRYRUN,   /* count and log what would be limited, limit nothing */
};

/* The parsed parameters of one rule. The match conditions are private to
 * rules.c; ask rules_client_matches and rules_command_matches. */
struct rule {
    const char *name;
    int index;              /* position in its set, 0 .. rules_count() - 1 */
    int line;               /* of its [limit NAME] header */
    double rate_per_s;      /* tokens added per second (rate 30/m: 0.5) */
    double burst;           /* bucket size; default max(1, rate_per_s) */
    enum rule_per per;
    enum rule_action action;
    uint64_t max_delay_us;  /* RULE_ACTION_DELAY: longest wait (default 1s); else 0 */
    enum rule_scope scope;
    enum rule_mode mode;
    /* scope = shared: each sluice leases tokens for this long of its own
     * recent rate (rules/lease.h); 0: lease = off, Redis is asked per
     * request. Default RULES_DEFAULT_LEASE_US. */
    uint64_t lease_us;
    double lease_max;       /* most tokens one sluice holds; default burst / 8, >= 1 */
    /* Concurrency limits (scope = local only): at most this many of a
     * subject's requests in Redis at once, blocking commands (CMD_BLOCKING)
     * in max_blocked, others in max_inflight; 0: no limit. A rule with
     * either needs no rate: then rate_per_s is 0 and it has no bucket. */
    int max_inflight;
    int max_blocked;
    /* cost = redis_time / bytes (scope = local only): rate_per_s and burst
     * are in microseconds of Redis's time or in bytes; the bucket is
     * checked before a request (it waits or is refused while in debt) and
     * charged after its reply. */
    enum rule_cost cost;
};

#define RULES_DEFAULT_LEASE_US 200000ULL

/* The longest rule name, in bytes: it goes into shared bucket keys and
 * -THROTTLED replies. A longer one is an error FILE:LINE at load. */
#define RULES_NAME_MAX 100

struct rule_set;

/* R's settings as the rule file spells them (PROXY RULES). */
struct rule_words {
    const char *per, *action, *scope, *mode, *cost;
};
void rules_words(const struct rule *r, struct rule_words *out);

/* Load the rule file at PATH. commands_init() must have run. Returns the
 * set (empty for a file without sections), or NULL when the file cannot be
 * read or has any error; then every error is in ERRS as "FILE:LINE: msg". */
struct rule_set *rules_load(const char *path, struct errlist *errs);

/* Free RS and its rules (NULL is fine): pointers from rules_get die too. */
void rules_free(struct rule_set *rs);

int rules_count(const struct rule_set *rs);
/* The rule at position I (0 <= I < rules_count), in file order. */
const struct rule *rules_get(const struct rule_set *rs, int i);

/* 1 when a client passes R's match_ip, match_user and match_name (an
 * absent condition always passes), else 0. ADDR: the peer address
 * (AF_INET or AF_INET6; IPv4-mapped IPv6 addresses count as IPv4; NULL or
 * another family fails any match_ip). USER: the AUTH user; NULL counts as
 * "default". NAME: the CLIENT SETNAME name; NULL or "" is no name, which
 * no match_name glob matches. */
int rules_client_matches(const struct rule *r, const struct sockaddr *addr, const char *user,
                         const char *name);

/* 1 when a request passes R's commands and keys conditions, else 0.
 * CMD: commands_resolve(argc, argv), i.e. the subcommand when there is
 * one, or NULL when the table does not know argv[0]. Then only sluice's
 * verbs LOCK, UNLOCK and RENEW can meet a commands or keys condition (by
 * name; argv[1] is their key); other unknown commands match only rules
 * with neither. With keys set, the request matches when any of its keys
 * (per commands_keys) matches any glob; a command without keys does not. */
int rules_command_matches(const struct rule *r, const struct command *cmd,
                          const struct sv *argv, int argc);

/* The two halves of rules_command_matches for a command the table knows,
 * so that a caller can decide the first once per command id and extract a
 * request's keys once for all rules:
 *   rules_command_allowed  R's commands condition admits CMD (non-NULL);
 *   rules_has_keys         R has a keys condition;
 *   rules_keys_match       one of the N keys argv[pos[i]] matches R's globs. */
int rules_command_allowed(const struct rule *r, const struct command *cmd);
int rules_has_keys(const struct rule *r);
int rules_keys_match(const struct rule *r, const struct sv *argv, const int *pos, int n);
/* 0 when no key whose first byte is C can match R's key globs (a cheap
 * filter before rules_keys_match); 1 when one might. */
int rules_key_may_start_with(const struct rule *r, unsigned char c);

/* sluice -t: what in RS (loaded from PATH) is valid but can never take
 * effect, each added to WARNS as "PATH:LINE: warning: ...": a match_user,
 * match_name or keys glob no subject can match (glob_can_match); and,
 * when USER_KNOWN is not NULL, a match_user glob that matches no user it
 * knows (USER_KNOWN(CTX, glob) returns 0). */
typedef int rules_user_known_fn(void *ctx, struct sv glob);
void rules_warn(const struct rule_set *rs, const char *path, rules_user_known_fn *user_known,
                void *ctx, struct errlist *warns);

/* 1 when A and B have the same name and every parameter and condition is
 * the same, so a reload may carry A's buckets over to B. The concurrency
 * limits (max_inflight, max_blocked) may differ: the slots held carry over
 * and the new limits apply to them. */
int rules_same_params(const struct rule *a, const struct rule *b);

#endif
