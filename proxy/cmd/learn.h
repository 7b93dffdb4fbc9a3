/* learn.h - what sluice learns from Redis about commands its table does
 * not know (modules): their flags and key positions, asked once with
 * COMMAND INFO and kept. Until a command is known it goes nowhere: its
 * client waits for the answer. */
#ifndef SLUICE_LEARN_H
#define SLUICE_LEARN_H

#include <stddef.h>
#include <stdint.h>

struct client;
struct request;

/* Longer names, or names with a NUL, are no module's: not asked about. */
#define LEARN_MAX_NAME 256

struct learned_command {
    char *name;          /* lower case */
    size_t len;
    int known;           /* Redis knows it (else it answers "unknown command") */
    uint32_t flags;      /* enum command_flag bits, as COMMAND INFO gave them */
    int first_key, last_key, key_step;   /* legacy key positions (0: no keys) */
};

/* What was learned of the command named NAME (LEN bytes, any case), or
 * NULL when it must be asked first. */
const struct learned_command *learn_lookup(const char *name, size_t len);

/* Ask Redis about REQ's command (argv[0] = NAME, LEN bytes) unless a
 * question is out already. Takes REQ (which owns its bytes) and blocks C
 * until the answer: then client_release_held gets REQ back, to dispatch
 * it, or with the error to answer when Redis could not be asked. */
void learn_request(struct client *c, struct request *req, const char *name, size_t len);

/* C is closing: forget (and free) the request it has waiting here. */
void learn_client_closed(struct client *c);

/* Free everything at exit. */
void learn_free_all(void);

#endif
