/* test_request.c - a request's kept bytes: moved to the output with a copy
 * kept, and copied again (a cluster redirect, a Sentinel re-send), byte
 * for byte, whatever the number of chunks its buffer holds. */
#include <event2/buffer.h>
#include <stdlib.h>

#include "request.h"
#include "unit.h"

/* A buffer of LEN bytes (a pattern) in chunks of at most CHUNK bytes, as
 * a client's reads leave it: many chains, not one. */
static struct evbuffer *chunked(size_t len, size_t chunk)
{
    struct evbuffer *b = evbuffer_new();
    char *part = malloc(chunk);

    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        struct evbuffer *one = evbuffer_new();
        for (size_t i = 0; i < n; i++)
            part[i] = (char)((off + i) * 7 + 3);
        evbuffer_add(one, part, n);
        evbuffer_add_buffer(b, one);   /* its own chain */
        evbuffer_free(one);
    }
    free(part);
    return b;
}

static int same_bytes(struct evbuffer *a, struct evbuffer *b)
{
    size_t len = evbuffer_get_length(a);

    if (len != evbuffer_get_length(b))
        return 0;
    return memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), len) == 0;
}

/* A request of LEN bytes in chunks of CHUNK: the output gets all of it, and
 * so does each later copy, and the source keeps what followed it. */
static void check_kept_copy(size_t len, size_t chunk)
{
    struct evbuffer *src = chunked(len, chunk);
    struct evbuffer *want = chunked(len, chunk);
    struct evbuffer *out = evbuffer_new();
    struct request *req = request_new();

    evbuffer_add(src, "next", 4);
    req->raw_len = len;
    request_move_kept(req, src, out);
    CHECK(request_has_bytes(req));
    CHECK(same_bytes(out, want));
    CHECK(evbuffer_get_length(src) == 4);
    for (int again = 0; again < 2; again++) {
        evbuffer_drain(out, evbuffer_get_length(out));
        request_copy_bytes(req, out);
        CHECK(same_bytes(out, want));
    }
    request_free(req);
    evbuffer_free(src);
    evbuffer_free(want);
    evbuffer_free(out);
}

static void test_small_request_kept_inline(void)
{
    check_kept_copy(40, 7);
}

static void test_sixteen_chunks_or_fewer(void)
{
    check_kept_copy(16 * 4096, 4096);
    check_kept_copy(15 * 4096 + 1, 4096);
}

/* More chunks than one peek takes (16): the copy stopped after the first
 * sixteen before, and a request of about 2 MB or more never reached Redis
 * whole in cluster and Sentinel mode. */
static void test_many_chunks_copied_whole(void)
{
    check_kept_copy(17 * 4096, 4096);
    check_kept_copy(100 * 4096 + 123, 4096);
    check_kept_copy(5 * 1024 * 1024, 128 * 1024 - 17);
}

UNIT_MAIN("request", {"small_request_kept_inline", test_small_request_kept_inline},
          {"sixteen_chunks_or_fewer", test_sixteen_chunks_or_fewer},
          {"many_chunks_copied_whole", test_many_chunks_copied_whole})
