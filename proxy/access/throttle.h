/* throttle.h - applies the rate-limit rules (rules/limiter) to a client's
 * requests: lets them through, refuses them (-THROTTLED), holds them back
 * (action = delay), or asks Redis about shared buckets first. */
#ifndef SLUICE_THROTTLE_H
#define SLUICE_THROTTLE_H

#include <stddef.h>

#include "limiter.h"
#include "request.h"
#include "sv.h"

struct client;
struct request;
struct errlist;

enum throttle_verdict {
    THROTTLE_PASS,    /* dispatch it now */
    THROTTLE_REJECT,  /* answer it with the error in throttle_decision.error */
    THROTTLE_HOLD,    /* hand it to throttle_hold: it waits (delay or Redis) */
};

/* LIMITS is throttle's own, valid until the next throttle_admit: what
 * must live longer (a held request's) is copied by throttle_hold. */
struct throttle_decision {
    const struct limiter_decision *limits;
    char error[192];  /* REJECT: "-THROTTLED rule NAME retry_after_ms=N" */
};

/* Where held requests go back to the client code (client_release_held);
 * set once at start (main.c), before the first throttle_hold. */
void throttle_set_release(request_release_fn *release);

/* Load the rule file of the config at start-up (PATH may be NULL: no
 * rules). Returns 0, or -1 with every error in ERRS. */
int throttle_init(const char *path, struct errlist *errs);

/* SIGHUP / PROXY RELOAD, in two halves (limiter_prepare, limiter_commit):
 * read the rule file PATH (NULL: none) into *OUT, changing nothing (0, or
 * -1 with every error in ERRS); then make *OUT the live rules. */
struct rule_set;
int throttle_prepare(const char *path, struct rule_set **out, struct errlist *errs);
void throttle_commit(const char *path, struct rule_set *rs);

/* Decide for REQ of C (framed, not yet queued), whose arguments are ARGV.
 * Never takes REQ. */
enum throttle_verdict throttle_admit(struct client *c, struct request *req,
                                     const struct sv *argv, struct throttle_decision *out);

/* Take REQ (which owns its bytes: req->raw) until it may go: C is blocked
 * meanwhile, and the function throttle_set_release gave gets REQ back,
 * with the error to answer or NULL to dispatch it. */
void throttle_hold(struct client *c, struct request *req, const struct throttle_decision *d);

/* REQ's reply (REPLY_LEN bytes) came back from Redis (or it failed
 * there): its cost rules are charged what it cost (its service time, or
 * its request and reply bytes), and its concurrency slots go back now,
 * before it waits for earlier replies. */
void throttle_request_done(struct request *req, size_t reply_len);

/* C is closing: drop its held request and its limiter state. */
void throttle_client_closed(struct client *c);

/* C's user or name changed: its rules are matched again. */
void throttle_client_changed(struct client *c);

/* Periodic work: forget idle per-ip/user/name buckets. */
void throttle_cron(void);

/* Shutting down: give every leased token of the shared rules back to
 * Redis while the backends are still there. Returns how many. */
double throttle_return_leases(void);

/* Free the rule set at exit. */
void throttle_shutdown(void);

#endif
