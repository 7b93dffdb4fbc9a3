/* reqparse.h - frames client requests: RESP arrays of bulk strings and
 * inline commands ("SET a 1\r\n"), with Redis's limits and Redis's
 * protocol error texts. */
#ifndef SLUICE_REQPARSE_H
#define SLUICE_REQPARSE_H

#include <stddef.h>

struct evbuffer;
struct request;

struct reqparse_limits {
    long long max_bulk_len;        /* proto_max_bulk_len */
    long long max_multibulk_len;   /* arguments per command */
};

struct reqparse {
    struct request *cur;           /* being framed: the arguments found so far */
    size_t pos;                    /* input offset framed up to (cur != NULL) */
    long long args_left;           /* bulk strings still to come in cur */
    long long bulk_len;            /* -1: a length line is next; else the payload's */
    const struct reqparse_limits *limits;
    int must_login;                /* the client must log in first: Redis's small limits */
    char err[128];                 /* protocol error, without "-ERR " */
};

/* Redis 7.0's limits for a client that must still authenticate, so that
 * nobody without a password makes the server hold a large request. */
#define REQPARSE_LOGIN_MAX_ARGS 10
#define REQPARSE_LOGIN_MAX_BULK_LEN 16384

enum reqparse_result {
    REQPARSE_MORE,      /* need more bytes */
    REQPARSE_REQUEST,   /* *OUT is a request: its raw_len bytes head the input */
    REQPARSE_SKIP,      /* an empty command (*0, *-1, blank line) was consumed */
    REQPARSE_ERROR,     /* protocol error: message in p->err; close after replying */
};

int reqparse_init(struct reqparse *p, const struct reqparse_limits *limits);
void reqparse_free(struct reqparse *p);

/* Frame the next request from IN. On REQPARSE_REQUEST, the caller owns *OUT
 * and must remove exactly (*OUT)->raw_len bytes from the head of IN (moving
 * them to a backend or into the request) before the next call; for inline
 * commands the parser has already consumed the line and (*OUT)->raw holds
 * the request rewritten as RESP, with raw_len 0 left in IN. */
int reqparse_next(struct reqparse *p, struct evbuffer *in, struct request **out);

/* Split an inline command line like Redis does (quotes, escapes). Stores at
 * most MAX arguments as offsets into the unescaped output OUT (of capacity
 * LEN + 1); a line of LEN bytes has at most LEN / 2 + 1 of them. Returns the
 * argument count, or -1 on unbalanced quotes or more than MAX arguments. */
int reqparse_split_inline(const char *line, size_t len, char *out, size_t *offs,
                          size_t *lens, int max);

#endif
