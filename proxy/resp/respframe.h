/* respframe.h - frames Redis replies (RESP2 and RESP3) in an evbuffer
 * without copying them: finds where each reply ends and what type it is,
 * checking every length and line, and remembers how far it got so a reply
 * that arrives in pieces is never rescanned. */
#ifndef SLUICE_RESPFRAME_H
#define SLUICE_RESPFRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reply types, as hiredis numbers them. */
enum reply_type {
    REPLY_STRING = 1, REPLY_ARRAY = 2, REPLY_INTEGER = 3,
    REPLY_NIL = 4, REPLY_STATUS = 5, REPLY_ERROR = 6,
    /* RESP3, numbered as in hiredis 1.x */
    REPLY_DOUBLE = 7, REPLY_BOOL = 8, REPLY_MAP = 9, REPLY_SET = 10,
    REPLY_ATTR = 11, REPLY_PUSH = 12, REPLY_BIGNUM = 13, REPLY_VERB = 14,
};

struct evbuffer;

#define RESPFRAME_STACK_INLINE 128        /* open aggregates kept in the struct */
/* Open aggregates at most. Redis nests a reply as deep as a script's Lua
 * stack allows (a recursive table: about 8,000 levels), and one client's
 * reply must not close a shared connection; levels past the inline ones
 * live on the heap (16 bytes each) while such a reply is framed. */
#define RESPFRAME_MAX_DEPTH (64 * 1024)
/* Bytes of one line before its CRLF, by default. Redis writes status and
 * error lines as long as a script makes them (redis.status_reply), and one
 * client's script must not get the shared connection closed for everyone:
 * so as long as a bulk may be by default. */
#define RESPFRAME_LINE_MAX (512LL * 1024 * 1024)
#define RESPFRAME_BULK_MAX (1LL << 40)    /* bytes of one bulk/blob payload */
#define RESPFRAME_COUNT_MAX (1LL << 31)   /* elements (map: pairs) of one aggregate */

/* One open aggregate: elements still to come (the one being read counts),
 * and whether it is an attribute, which annotates the value after it and so
 * is not an element of its parent. */
struct respframe_level {
    uint64_t left;
    int attr;
    int uncounted;       /* a message push Redis wrote inside an aggregate (a RESP3
                            subscriber's own PUBLISH in EXEC): not one of its values */
};

/* The scan state of the reply at the head of the input. All offsets count
 * from the head of the input, which the caller does not drain mid-reply. */
struct respframe {
    size_t pos;          /* next byte to read: the start of a line, or the payload */
    size_t line_seen;    /* bytes from pos known to hold no CR (a line still open) */
    size_t bulk_end;     /* nonzero: in a bulk payload whose CRLF ends here */
    size_t bulk_start;   /* where that payload starts */
    int push_kind_wait;  /* a push opened inside an aggregate: its kind is read next */
    size_t verb_colon;   /* nonzero: where a verbatim string's ':' must be */
    size_t missing;      /* after a 0 return: bytes still needed at least */
    int type;            /* enum reply_type of the reply being framed */
    int depth;           /* open aggregates: stack[], then deep[] */
    struct respframe_level stack[RESPFRAME_STACK_INLINE];
    struct respframe_level *deep; /* levels past the inline ones, or NULL */
    int deep_cap;
    size_t line_max;     /* longest line accepted (RESPFRAME_LINE_MAX by default) */
    char err[128];       /* protocol error text, set on a -1 return */
};

void respframe_init(struct respframe *f);

/* Free what F holds beyond its struct (the levels of a very deep reply).
 * Needed only for a framer left in the middle of a reply: one that
 * finished or failed holds nothing. F may be used again after
 * respframe_init. */
void respframe_release(struct respframe *f);

/* Find the end of the next complete reply at the head of IN. Returns its
 * length in bytes (> 0) and sets *TYPE (enum reply_type; an attribute and
 * the reply it annotates are one unit typed as the reply); 0 when IN does
 * not yet hold a whole reply (the scan state is kept, so the next call
 * resumes where this one stopped and never rescans what it has seen); -1 on
 * a protocol error (message in f->err; the connection is then unusable).
 * After a positive return the caller removes exactly that many bytes from
 * the head of IN before the next call; between calls returning 0 the caller
 * only appends to IN. */
ssize_t respframe_next(struct respframe *f, struct evbuffer *in, int *type);

/* Whether the whole reply of LEN bytes at the head of IN is a push whose
 * kind is message, pmessage or smessage: one Redis 7.0 writes to a RESP3
 * subscriber where it happens, even inside EXEC's array, where respframe
 * frames it with the array but does not count it as one of its values.
 * A caller walking such an array's values skips these the same way. */
#define RESPFRAME_KIND_MAX 8   /* bytes of the longest of those kinds */
int respframe_is_message_push(struct evbuffer *in, size_t len);

/* Whether KIND[0..LEN), the first value of a pub/sub push or array, is
 * message, pmessage or smessage: the one list of those kinds. */
int respframe_is_message_kind(const char *kind, size_t len);

/* After a 0 return: how many more bytes are needed at least before the
 * reply can be complete (exact for the rest of a bulk payload, plus 3 bytes
 * for every value known to be still to come), so a caller can hold off
 * calling again until that many have arrived. Never 0 after a 0 return. */
size_t respframe_missing(const struct respframe *f);

#endif
