/* fuzz_respframe.c - libFuzzer target for reply framing (respframe.c).
 *   1. Pieces: the input, cut at points its head chooses and fed piece by
 *      piece, frames into the same replies (lengths, types) and ends the
 *      same way as the whole input at once. Any input, RESP2 or RESP3.
 *   2. respframe_diff.h: the same replies as hiredis 0.14's reader for
 *      RESP2, and as a strict reader for RESP2 and RESP3, but for the
 *      divergences that header lists (respframe is the stricter one). */
#include <event2/buffer.h>
#include <stdint.h>

#include "fuzz.h"
#include "fuzz_hiredis.h"   /* struct fuzz_replies */
#include "respframe.h"
#include "respframe_diff.h"

static struct fuzz_replies fuzz_whole, fuzz_pieces;

/* Frame all that IN holds into OUT (draining each reply). Returns 0 when
 * more input may follow, -1 after a protocol error. */
static int fuzz_drain(struct respframe *f, struct evbuffer *in, struct fuzz_replies *out)
{
    for (;;) {
        int type = -1;
        ssize_t n = respframe_next(f, in, &type);

        FUZZ_CHECK(n >= -1 && (size_t)(n < 0 ? 0 : n) <= evbuffer_get_length(in),
                   "respframe_next gave %zd with %zu bytes in", n, evbuffer_get_length(in));
        if (n == 0)
            return 0;
        if (n < 0) {
            out->end = FUZZ_END_ERROR;
            return -1;
        }
        if (out->count == FUZZ_MAX_REPLIES) {
            out->end = FUZZ_END_FULL;
            return -1;
        }
        out->reply[out->count].len = (size_t)n;
        out->reply[out->count].type = type;
        out->count++;
        evbuffer_drain(in, (size_t)n);
    }
}

/* Feed DATA/LEN in the pieces SPLITS gives, framing after each. */
static void fuzz_frame(const uint8_t *data, size_t len, struct fuzz_splits *splits,
                       struct fuzz_replies *out)
{
    struct respframe f;
    struct evbuffer *in = evbuffer_new();
    size_t given = 0;

    FUZZ_CHECK(in != NULL, "out of memory");
    respframe_init(&f);
    out->count = 0;
    out->end = FUZZ_END_MORE;
    while (given < len) {
        size_t n = fuzz_splits_next(splits, len - given);
        evbuffer_add(in, data + given, n);
        given += n;
        if (fuzz_drain(&f, in, out) != 0)
            break;
    }
    respframe_release(&f);   /* input that ends inside a deep reply */
    evbuffer_free(in);
}

static void fuzz_same(const struct fuzz_replies *a, const struct fuzz_replies *b, int count,
                      const char *what)
{
    for (int i = 0; i < count; i++) {
        FUZZ_CHECK(a->reply[i].len == b->reply[i].len && a->reply[i].type == b->reply[i].type,
                   "%s: reply %d is %zu bytes of type %d, not %zu of type %d", what, i,
                   b->reply[i].len, b->reply[i].type, a->reply[i].len, a->reply[i].type);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct fuzz_splits splits, whole = {.count = 0};
    char why[512];
    int rc;

    fuzz_splits_take(&splits, &data, &len);
    fuzz_frame(data, len, &whole, &fuzz_whole);
    fuzz_frame(data, len, &splits, &fuzz_pieces);
    FUZZ_CHECK(fuzz_whole.count == fuzz_pieces.count && fuzz_whole.end == fuzz_pieces.end,
               "pieces: %d replies ending %d; whole: %d ending %d", fuzz_pieces.count,
               fuzz_pieces.end, fuzz_whole.count, fuzz_whole.end);
    fuzz_same(&fuzz_whole, &fuzz_pieces, fuzz_whole.count, "pieces");

    /* Against hiredis 0.14 (RESP2) and a strict reader (RESP2 and RESP3):
     * only the divergences respframe_diff.h lists are expected. */
    rc = respframe_diff((const char *)data, len, 0, why, sizeof(why));
    FUZZ_CHECK(rc != RFDIFF_MISMATCH, "%s", why);
    return 0;
}
