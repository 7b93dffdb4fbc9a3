/* fuzz_respscan.c - libFuzzer target for respscan_value, the RESP2 framer
 * for replies too deep for hiredis, against hiredis's reader: every reply
 * hiredis frames, respscan frames to the same length; where hiredis waits
 * for more, respscan does not claim a reply; and a cut before a reply's
 * end is never taken for a whole reply. respscan may accept more than
 * hiredis does (it checks less), but never frames differently. */
#include <stdint.h>

#include "fuzz.h"
#include "fuzz_hiredis.h"
#include "respscan.h"

static struct fuzz_replies fuzz_ref;

/* A prefix of the reply at BUF (whose length is FULL) is not a reply. */
static void fuzz_check_prefixes(const char *buf, size_t full, struct fuzz_splits *splits)
{
    size_t cut = 0;

    for (;;) {
        cut += fuzz_splits_next(splits, full - cut);
        if (cut >= full)
            return;
        ssize_t n = respscan_value(buf, cut);
        FUZZ_CHECK(n <= 0, "a %zu-byte prefix of a %zu-byte reply framed as %zd", cut, full, n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct fuzz_splits splits;
    const char *buf;
    size_t pos = 0;
    int i;

    fuzz_splits_take(&splits, &data, &len);
    buf = (const char *)data;
    fuzz_hiredis_frame(data, len, &fuzz_ref);
    for (i = 0; i < fuzz_ref.count; i++) {
        ssize_t n = respscan_value(buf + pos, len - pos);
        FUZZ_CHECK(n == (ssize_t)fuzz_ref.reply[i].len, "reply %d at %zu: respscan %zd, hiredis %zu",
                   i, pos, n, fuzz_ref.reply[i].len);
        if (splits.count > 0)
            fuzz_check_prefixes(buf + pos, (size_t)n, &splits);
        pos += (size_t)n;
    }
    if (fuzz_ref.end == FUZZ_END_MORE) {
        ssize_t n = respscan_value(buf + pos, len - pos);
        FUZZ_CHECK(n <= 0, "respscan frames %zd bytes at %zu where hiredis waits for more", n, pos);
    }
    return 0;
}
