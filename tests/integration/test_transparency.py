"""Transparency bugs found with real clients (issue 11): replies sluice
writes itself must leave in request order, local commands inside MULTI
queue like Redis's, and empty requests are skipped."""

import pytest

from helpers import SLOW, RawConn, encode_command as enc, wait_until

SLOW_EVAL = (b"EVAL", b"local s = redis.call('TIME') local t = s "
             b"while (t[1] - s[1]) * 1000000 + (t[2] - s[2]) < 200000 do "
             b"t = redis.call('TIME') end return 1", b"0")


# ---- 1. every reply leaves in request order, whoever produced it ----

def test_unsubscribe_then_quit_in_one_write(sluice, ref):
    """UNSUBSCRIBE ch + QUIT in one write: Redis answers UNSUBSCRIBE, then
    +OK, then closes. sluice answered QUIT at once and closed first."""
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            c.send_command(b"SUBSCRIBE", b"tr:ch")
            assert c.read_reply()[0] == b"subscribe"
            c.send(enc(b"UNSUBSCRIBE", b"tr:ch") + enc(b"QUIT"))
            data, eof = c.read_all_until_eof(timeout=5 * SLOW)
            assert eof
            out.append(data)
    assert out[0] == out[1]
    assert out[0].startswith(b"*3\r\n$11\r\nunsubscribe\r\n") and out[0].endswith(b"+OK\r\n")


def test_subscribe_getname_ping_in_order(sluice):
    """SUBSCRIBE, CLIENT GETNAME, PING pipelined: GETNAME's answer (from
    sluice) comes after SUBSCRIBE's and before PING's (from Redis)."""
    with sluice.raw() as c:
        c.send(enc(b"SUBSCRIBE", b"tr:ch") + enc(b"CLIENT", b"GETNAME") + enc(b"PING"))
        first, second, third = c.read_replies(3, timeout=5 * SLOW)
        assert first[0] == b"subscribe", first
        assert second is None or isinstance(second, str), second
        assert third == [b"pong", b""], third


def test_local_replies_wait_behind_slow_redis_replies(sluice):
    """Many sluice-made replies interleaved with slow Redis replies on a
    subscribed connection keep the exact request order."""
    with sluice.raw() as c:
        c.send_command(b"SUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send_command(b"UNSUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"unsubscribe"
        batch = b""
        want = []
        for i in range(3):
            batch += enc(*SLOW_EVAL) + enc(b"CLIENT", b"ID") + enc(b"ECHO", b"e%d" % i)
            want += [1, "id", b"e%d" % i]
        c.send(batch)
        got = c.read_replies(len(want), timeout=10 * SLOW)
        for g, w in zip(got, want):
            if w == "id":
                assert isinstance(g, int) and g != 1, got
            else:
                assert g == w, got


def test_fence_invisible_to_monitor(sluice, backend):
    """The fence sluice sends to keep a subscribed client's replies in
    order never shows in a MONITOR on Redis."""
    mon = RawConn(backend.port)
    try:
        assert mon.call(b"MONITOR") == "OK"
        with sluice.raw() as c:
            c.send(enc(b"SUBSCRIBE", b"tr:mon") + enc(b"CLIENT", b"GETNAME") +
                   enc(b"PING", b"tr-last"))
            c.read_replies(3, timeout=5 * SLOW)
        lines = []
        while not any(b"tr-last" in x for x in lines):
            lines.append(mon.read_reply_raw(timeout=5 * SLOW))
        assert not any(b"fence" in x for x in lines), lines
    finally:
        mon.close()


def test_protocol_error_while_subscribed_comes_last(sluice):
    """A protocol error from a subscribed client: the error is written
    after the replies Redis still owes, then the connection closes."""
    with sluice.raw() as c:
        c.send_command(b"SUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send(enc(b"PING", b"before") + b"*1\r\n$x\r\n")
        data, eof = c.read_all_until_eof(timeout=5 * SLOW)
        assert eof
        assert data.index(b"before") < data.index(b"-ERR Protocol error"), data


# ---- 4. empty requests ----

@pytest.mark.parametrize("empty", [b"*0\r\n", b"*-10\r\n", b"*-1\r\n"])
def test_empty_multibulk_skipped(sluice, ref, empty):
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            c.send(empty + enc(b"PING") + empty + empty + enc(b"ECHO", b"x"))
            out.append(c.read_replies(2, timeout=5 * SLOW))
            c.send_command(b"PING")
            out[-1].append(c.read_reply(timeout=5 * SLOW))
    assert out[0] == out[1] == ["PONG", b"x", "PONG"]
