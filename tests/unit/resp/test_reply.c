/* test_reply.c - the RESP writing and small-reply parsing in reply.c: the
 * number formatting sluice uses instead of printf, against printf itself. */
#include "reply.h"
#include "unit.h"

#include <event2/buffer.h>
#include <limits.h>
#include <stdlib.h>

static void check_ll(long long v)
{
    char got[32], want[32];
    int n = reply_format_ll(got, v);

    got[n] = '\0';
    snprintf(want, sizeof(want), "%lld", v);
    CHECK_STR(got, want);
}

static void test_format_ll_matches_printf(void)
{
    static const long long edges[] = {0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, -1, -9, -10,
                                      1234567890123LL, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
    long long x = 1;

    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        check_ll(edges[i]);
    for (int i = 0; i < 62; i++, x *= 2) {
        check_ll(x);
        check_ll(x - 1);
        check_ll(-x);
    }
}

static void test_format_header(void)
{
    char out[32];
    int n;

    n = reply_format_header(out, '$', 5);
    out[n] = '\0';
    CHECK_STR(out, "$5\r\n");
    n = reply_format_header(out, ':', -42);
    out[n] = '\0';
    CHECK_STR(out, ":-42\r\n");
    n = reply_format_header(out, '*', 1000);
    out[n] = '\0';
    CHECK_STR(out, "*1000\r\n");
}

/* Everything OUT holds, as a C string the caller frees. */
static char *drain_all(struct evbuffer *out)
{
    size_t len = evbuffer_get_length(out);
    char *s = malloc(len + 1);

    evbuffer_remove(out, s, len);
    s[len] = '\0';
    return s;
}

static void test_replies(void)
{
    struct evbuffer *out = evbuffer_new();
    char *s;

    reply_array_header(out, 2);
    reply_bulk(out, "tok", 3);
    reply_integer(out, -7);
    reply_nil(out, 2);
    reply_status(out, "OK");
    reply_error(out, "bad\r\nthing %d", 3);
    reply_error(out, "-NOTOWNER not yours");
    reply_nil(out, 3);
    s = drain_all(out);
    CHECK_STR(s, "*2\r\n$3\r\ntok\r\n:-7\r\n$-1\r\n+OK\r\n-ERR bad  thing 3\r\n"
                 "-NOTOWNER not yours\r\n_\r\n");
    free(s);
    evbuffer_free(out);
}

/* A buffer's text as one bulk (PROXY INFO, CLIENT LIST): moved, not copied. */
static void test_bulk_buffer(void)
{
    struct evbuffer *out = evbuffer_new(), *text = evbuffer_new();
    char *s;

    evbuffer_add(text, "a:1\r\nb:2\r\n", 10);
    reply_bulk_buffer(out, text);
    CHECK(evbuffer_get_length(text) == 0);
    reply_bulk_buffer(out, text);
    s = drain_all(out);
    CHECK_STR(s, "$10\r\na:1\r\nb:2\r\n\r\n$0\r\n\r\n");
    free(s);
    evbuffer_free(text);
    evbuffer_free(out);
}

static void test_parse_ints(void)
{
    long long v[3] = {0, 0, 0};
    const char *arr = "*3\r\n:1\r\n:-2\r\n:30000\r\n";
    const char *nil = "*2\r\n$-1\r\n:5\r\n";
    const char *nil3 = "*3\r\n:1\r\n_\r\n:5\r\n";

    CHECK(reply_parse_ints(":12\r\n", 5, v, 3) == 1 && v[0] == 12);
    CHECK(reply_parse_ints(arr, strlen(arr), v, 3) == 3);
    CHECK(v[0] == 1 && v[1] == -2 && v[2] == 30000);
    CHECK(reply_parse_ints(arr, strlen(arr), v, 2) == 2);
    CHECK(reply_parse_ints(nil, strlen(nil), v, 3) == 2 && v[0] == 0 && v[1] == 5);
    CHECK(reply_parse_ints(nil3, strlen(nil3), v, 3) == 3 && v[0] == 1 && v[1] == 0 && v[2] == 5);
    CHECK(reply_parse_ints("+OK\r\n", 5, v, 3) == -1);
}

UNIT_MAIN("reply", {"format_ll_matches_printf", test_format_ll_matches_printf},
          {"format_header", test_format_header}, {"replies", test_replies},
          {"bulk_buffer", test_bulk_buffer}, {"parse_ints", test_parse_ints})
