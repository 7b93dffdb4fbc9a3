/* handover.h - handing the listening sockets from a running sluice to the
 * one that replaces it (README "Restart and upgrade"): file descriptors
 * passed over a unix socket (SCM_RIGHTS), as HAProxy's -x does. */
#ifndef SLUICE_HANDOVER_H
#define SLUICE_HANDOVER_H

#include <stddef.h>
#include <sys/types.h>

#include "config.h"

#define HANDOVER_MAX_FDS (2 * CONFIG_MAX_LISTEN + 1)   /* listen, tls_listen, metrics_listen */
#define HANDOVER_PATH_MAX 108   /* sizeof(sun_path) */
/* The state a running sluice passes on its header line, after the socket
 * count. Short: a sluice of the version before reads 127 bytes at once
 * and ignores what follows the count, but must find nothing left over. */
#define HANDOVER_STATE_MAX 96

/* What a new sluice took from the running one. */
struct handover_take {
    int ctrl_fd;                   /* the control connection; -1: nobody to take from */
    pid_t old_pid;
    int fds[HANDOVER_MAX_FDS];     /* listening sockets; -1 once taken by the listener */
    int fd_count;
    char state[HANDOVER_STATE_MAX];   /* the running one's words after the counts; "" none */
};

/* The control socket paths of CFG: its handover_socket, or one derived
 * from each listen and tls_listen address (in $RUNTIME_DIRECTORY,
 * $XDG_RUNTIME_DIR or /tmp/sluice-<uid>, then, to be connected to only,
 * where an older sluice served them in /tmp). Fills at most MAX of PATHS (each HANDOVER_PATH_MAX
 * bytes); returns how many (0: handover_socket = off). The first is the
 * one a running sluice serves. */
int handover_paths(const struct config *cfg, char paths[][HANDOVER_PATH_MAX], int max);

/* That no other user can take CFG's hand-over socket paths (README
 * "Restart and upgrade"): each path's directory is this user's or root's
 * and writable by nobody else unless sticky; a path already there is a
 * socket of this user's. Without handover_socket and a runtime directory
 * in the environment, the paths are in /tmp/sluice-<uid>, made here
 * (mode 0700) when CREATE, and checked to be this user's with mode 0700.
 * Run at start (CREATE 1) and by sluice -t (CREATE 0). Returns 0, or -1
 * with ERR set. */
int handover_check(const struct config *cfg, int create, char *err, size_t errlen);

/* New sluice, at start: connect to the first of PATHS (COUNT) a sluice
 * serves and receive its listening sockets into T. Nobody there (or a
 * stale socket file): T->ctrl_fd is -1 and 0 is returned. Returns -1 with
 * ERR set when a sluice answered but the exchange failed. */
int handover_connect(char paths[][HANDOVER_PATH_MAX], int count, struct handover_take *t, char *err,
                     size_t errlen);

/* New sluice, ready (listening, its backend being connected): tell the old
 * one to stop accepting and drain, and wait (bounded) for its word. Closes
 * the sockets of T the listener did not take. Returns 0 (T->ctrl_fd, when
 * not -1, is then the open channel the old one passes clients on: the
 * caller serves it with handpass_start, or closes it), or -1 with ERR
 * set (the old one may go on accepting: both serve). */
int handover_commit(struct handover_take *t, char *err, size_t errlen);

/* New sluice that cannot start: close T's control connection (the old one
 * goes on as if nothing happened) and every socket of T. */
void handover_abandon(struct handover_take *t);

struct event_base;

/* Running sluice: called when a new sluice said it is ready (NEW_PID); the
 * listening sockets must stop being accepted on now. CHANNEL_FD, when not
 * -1, is the control connection, left open: the new sluice takes client
 * connections on it (handpass.h); it is the callee's to serve and close. */
typedef void handover_takeover_fn(pid_t new_pid, int channel_fd);

/* Running sluice: write what a new sluice should know into BUF (SIZE
 * bytes, HANDOVER_STATE_MAX; one line of printable words, no newline;
 * "" for nothing), when it connects. */
typedef void handover_state_fn(char *buf, size_t size);

/* Serve the control socket PATH: a new sluice that connects (the same
 * user, or root) gets the sockets listener_fds gives and STATE's words
 * (NULL: none); once it says it is
 * ready, TAKEOVER runs and the control socket is closed (its file is then
 * the new sluice's). PATH is created anew atomically (a temporary name
 * renamed over it). Returns 0, or -1 with ERR set (sluice runs on without
 * hand-over). */
int handover_serve(struct event_base *base, const char *path, handover_takeover_fn *takeover,
                   handover_state_fn *state, char *err, size_t errlen);

/* Stop serving; the socket file is removed if it is still this process's. */
void handover_serve_stop(void);

#endif
