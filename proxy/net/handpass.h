/* handpass.h - the hand-over's second stage (docs/operations.md "Restart
 * and upgrade"): after the listening sockets, the running sluice passes
 * client connections themselves (SCM_RIGHTS) to the new one, over the
 * same control connection, kept open. Knows nothing about clients: a
 * connection goes with an opaque blob and an id, and the two sides then
 * trade one-word lines about it. */
#ifndef SLUICE_HANDPASS_H
#define SLUICE_HANDPASS_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/* What the other side said. */
struct handpass_ops {
    /* New sluice: connection FD (now this process's) with BLOB (LEN
     * bytes), which the old one knew as ID. */
    void (*on_conn)(uint64_t id, int fd, const char *blob, size_t len);
    /* A line "WORD ID" about connection ID. */
    void (*on_word)(char word, uint64_t id);
    /* The channel ended (the other side exited, or spoke nonsense). */
    void (*on_end)(void);
};

/* Serve the control connection FD (either side) from now on, with OPS. */
void handpass_start(struct event_base *base, int fd, const struct handpass_ops *ops);

/* Whether a channel is open. */
int handpass_open(void);

/* Old sluice: pass connection FD (a dup goes; FD stays this process's)
 * known as ID, with BLOB. Returns 0, or -1 (the channel failed: it is
 * closed, and on_end runs from the loop). Blocks for at most a few
 * seconds when the new sluice does not read. */
int handpass_send_conn(uint64_t id, int fd, const char *blob, size_t len);

/* Say "WORD ID" to the other side. Returns 0 or -1 as above. */
int handpass_say(char word, uint64_t id);

/* Close the channel (at exit). */
void handpass_close(void);

#endif
