"""Wire protocol: inline commands, fragmented requests and protocol errors,
compared byte for byte with what redis-server answers for the same bytes."""

import time

import pytest

from helpers import SLOW, RawConn, encode_command


def exchange(port, data, expect_close, timeout=None):
    """Send DATA, return (reply bytes, closed). With EXPECT_CLOSE, read until
    EOF; otherwise read for a short while (no close expected)."""
    timeout = timeout or (5 * SLOW if expect_close else 0.7)
    with RawConn(port, timeout=timeout) as c:
        c.send(data)
        return c.read_all_until_eof(timeout)


# ---------------------------------------------------------------- inline

INLINE_CASES = {
    "ping": b"PING\r\n",
    "ping_lf_only": b"PING\n",
    "set_get": b"SET a 1\r\nGET a\r\n",
    "quoted_args": b"SET \"a b\" 'c d'\r\nGET \"a b\"\r\n",
    "escapes_in_double_quotes": b'ECHO "\\x41\\n\\t\\"q\\""\r\nECHO \'it\\\'s\'\r\n',
    "extra_spaces": b"   SET    sp    v   \r\nGET sp\r\n",
    "empty_lines_ignored": b"\r\n\r\n\nPING\r\n",
    "wrong_arity_inline": b"SET onlykey\r\n",
    "unknown_inline": b"NOSUCH a b\r\n",
    "mixed_inline_multibulk": b"SET m 1\r\n*2\r\n$3\r\nGET\r\n$1\r\nm\r\nINCR m\r\n",
    "empty_multibulk_ignored": b"*0\r\n*-1\r\n*-10\r\n*-2147483649\r\nPING\r\n",
    "quoted_command_name": b'"PING"\r\n',
}


@pytest.mark.parametrize("case", sorted(INLINE_CASES))
def test_inline_identical(case, sluice, ref, clean):
    data = INLINE_CASES[case]
    got = exchange(sluice.port, data, expect_close=False)
    want = exchange(ref.port, data, expect_close=False)
    assert want[0], "test bug: Redis gave no reply"
    assert got == want, f"sluice: {got!r}\nredis:  {want!r}"


def test_inline_basic_literal(sluice, clean):
    with sluice.raw() as c:
        c.send(b"PING\r\n")
        assert c.read_reply_raw() == b"+PONG\r\n"
        c.send(b"SET a 1\r\n")
        assert c.read_reply_raw() == b"+OK\r\n"
        c.send(b"GET a\r\n")
        assert c.read_reply_raw() == b"$1\r\n1\r\n"
        c.send(b"SET \"a b\" 'c d'\r\n")
        assert c.read_reply_raw() == b"+OK\r\n"
        assert c.call("GET", "a b") == b"c d"


def test_fragmented_requests(sluice, ref, clean):
    """Requests delivered one byte at a time (multibulk and inline) and a
    reply arriving in pieces are handled like Redis does."""
    data = (encode_command("SET", "frag", "x" * 100) + b"GET frag\r\n" +
            encode_command("APPEND", "frag", "yz") + encode_command("STRLEN", "frag"))
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            for i in range(len(data)):
                c.send(data[i:i + 1])
                if i % 16 == 0:
                    time.sleep(0.001)
            out.append(c.read_replies(4))
    assert out[0] == out[1]
    assert out[0][3] == 102


def test_large_pipelined_write_in_one_send(sluice, clean):
    """Thousands of small commands in one 1 MB+ write."""
    n = 20000
    data = b"".join(encode_command("INCR", "bulkctr") for _ in range(n))
    with sluice.raw(timeout=30 * SLOW) as c:
        c.send(data)
        replies = c.read_replies(n)
    assert replies == list(range(1, n + 1))


# ---------------------------------------------------------------- protocol errors

PROTO_ERRORS = {
    "expected_dollar": b"*1\r\n:1\r\n",
    "invalid_multibulk_len": b"*a\r\n",
    "invalid_multibulk_len_huge": b"*3000000000\r\n",
    "invalid_bulk_len": b"*1\r\n$x\r\n",
    "negative_bulk_len": b"*2\r\n$4\r\nECHO\r\n$-1\r\n",
    "unbalanced_double_quote": b"SET \"a\r\n",
    "unbalanced_single_quote": b"SET 'a\r\n",
    "quote_not_followed_by_space": b"SET \"a\"b\r\n",
    "error_after_good_command": b"PING\r\n*1\r\n:1\r\nPING\r\n",
    "error_midway_pipeline": encode_command("SET", "pe", "1") + b"*2\r\n$3\r\nGET\r\n:1\r\n"
                             + encode_command("SET", "pe", "2"),
    "too_big_inline": b"A" * 70000,
    "too_big_mbulk_count": b"*" + b"1" * 70000,
}


@pytest.mark.parametrize("case", sorted(PROTO_ERRORS))
def test_protocol_error_identical(case, sluice, ref, clean):
    data = PROTO_ERRORS[case]
    bystander = sluice.raw()
    try:
        assert bystander.call("PING") == "PONG"
        want = exchange(ref.port, data, expect_close=True)
        assert want[1], "test bug: Redis did not close the connection"
        got = exchange(sluice.port, data, expect_close=True)
        assert got[0] == want[0], f"sluice replied {got[0]!r}\nredis replied  {want[0]!r}"
        assert got[1], "sluice did not close the connection after the protocol error"
        # other clients are unaffected
        assert bystander.call("SET", "bystander", "ok") == "OK"
        assert bystander.call("GET", "bystander") == b"ok"
    finally:
        bystander.close()
    if case == "error_midway_pipeline":
        # commands after the bad one were not executed
        assert ref.client().get("pe") == b"1"
        assert sluice.client().get("pe") == b"1"


def test_protocol_error_literal_texts(sluice, clean):
    """The exact texts, in case the comparison server changes."""
    cases = [
        (b"*1\r\n:1\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*a\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"SET \"a\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    ]
    for data, reply in cases:
        assert exchange(sluice.port, data, expect_close=True) == (reply, True), data


@pytest.fixture
def small_bulk_pair(redis_factory, sluice_factory, tmp_path):
    """sluice with proto_max_bulk_len = 1mb, and a redis-server with the same
    limit to compare against."""
    backend = redis_factory()
    ref = redis_factory("--proto-max-bulk-len", "1mb")
    s = sluice_factory(backend.port, proto_max_bulk_len="1mb")
    return s, ref


def test_bulk_len_above_proto_max_bulk_len(small_bulk_pair):
    s, ref = small_bulk_pair
    for data in (b"*2\r\n$3\r\nGET\r\n$2000000\r\n",
                 b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n"):
        want = exchange(ref.port, data, expect_close=True)
        assert want == (b"-ERR Protocol error: invalid bulk length\r\n", True)
        got = exchange(s.port, data, expect_close=True)
        assert got == want, f"sluice: {got!r}"
    # exactly at the limit is fine
    val = b"v" * (1 << 20)
    c = s.client()
    assert c.set("atlimit", val) is True
    assert c.get("atlimit") == val
    c.close()
    with s.raw() as other:
        assert other.call("PING") == "PONG"
