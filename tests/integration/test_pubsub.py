"""Pub/sub through sluice: subscribers and publishers both via sluice."""

import time

from helpers import SLOW, encode_command


def _next(p, timeout=5 * SLOW):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = p.get_message(timeout=0.2)
        if m is not None:
            return m
    raise AssertionError("no pub/sub message within %.1f s" % timeout)


def _no_message(p, wait=0.5):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        m = p.get_message(timeout=0.1)
        assert m is None, f"unexpected message {m!r}"


def test_subscribe_psubscribe_publish(sluice, r):
    sub = sluice.client()
    p = sub.pubsub()
    try:
        p.subscribe("news")
        assert _next(p) == {"type": "subscribe", "pattern": None,
                            "channel": b"news", "data": 1}
        p.psubscribe("ev.*")
        assert _next(p) == {"type": "psubscribe", "pattern": None,
                            "channel": b"ev.*", "data": 2}

        assert r.publish("news", "hello") == 1
        assert _next(p) == {"type": "message", "pattern": None,
                            "channel": b"news", "data": b"hello"}
        assert r.publish("ev.click", b"\x00bin\r\n") == 1
        assert _next(p) == {"type": "pmessage", "pattern": b"ev.*",
                            "channel": b"ev.click", "data": b"\x00bin\r\n"}
        assert r.publish("other", "x") == 0

        # PING in subscribed mode
        p.ping()
        m = _next(p)
        assert m["type"] == "pong" and m["data"] == b""
        p.ping("hi")
        m = _next(p)
        assert m["type"] == "pong" and m["data"] == b"hi"

        # many messages arrive in order
        for i in range(200):
            r.publish("news", f"m{i}")
        got = [_next(p)["data"] for _ in range(200)]
        assert got == [f"m{i}".encode() for i in range(200)]

        p.unsubscribe("news")
        assert _next(p) == {"type": "unsubscribe", "pattern": None,
                            "channel": b"news", "data": 1}
        assert r.publish("news", "after-unsub") == 0
        assert r.publish("ev.x", "still") == 1
        assert _next(p)["data"] == b"still"
        p.punsubscribe("ev.*")
        assert _next(p) == {"type": "punsubscribe", "pattern": None,
                            "channel": b"ev.*", "data": 0}
        assert r.publish("ev.x", "gone") == 0
        _no_message(p)
    finally:
        p.close()
        sub.close()


def test_two_subscribers_and_channels_isolated(sluice, r):
    s1, s2 = sluice.client().pubsub(), sluice.client().pubsub()
    try:
        s1.subscribe("c1")
        s2.subscribe("c1", "c2")
        for p, n in ((s1, 1), (s2, 2)):
            for _ in range(n):
                assert _next(p)["type"] == "subscribe"
        assert r.publish("c1", "both") == 2
        assert r.publish("c2", "only2") == 1
        assert _next(s1)["data"] == b"both"
        assert _next(s2)["data"] == b"both"
        assert _next(s2)["data"] == b"only2"
        _no_message(s1, 0.3)
    finally:
        s1.close()
        s2.close()


def test_publisher_unaffected_by_subscriber(sluice, r):
    """Normal clients keep working while another connection is subscribed."""
    p = sluice.client().pubsub()
    try:
        p.subscribe("busy")
        _next(p)
        for i in range(100):
            r.set(f"k{i}", i)
            assert r.get(f"k{i}") == str(i).encode()
    finally:
        p.close()


def test_subscribed_mode_raw_identical(sluice, ref, clean):
    """Byte-level subscribe sequence: the replies, the error for a command not
    allowed in subscribed mode, PING and leaving subscribed mode."""
    steps = [
        [("SUBSCRIBE", "a", "b")],           # two confirmations
        [("PSUBSCRIBE", "p*")],
        [("PING",)],
        [("PING", "msg")],
        [("GET", "x")],                       # not allowed in subscribed mode
        [("UNSUBSCRIBE", "a")],
        [("UNSUBSCRIBE",)],                   # remaining: b
        [("PUNSUBSCRIBE",)],
        [("PING",)],                          # normal mode again
        [("SET", "x", "1")],
        [("UNSUBSCRIBE",)],                   # with nothing subscribed
    ]
    counts = [2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    results = []
    for srv in (sluice, ref):
        out = []
        with srv.raw() as c:
            for cmds, n in zip(steps, counts):
                for cmd in cmds:
                    c.send(encode_command(*cmd))
                out.append(b"".join(c.read_reply_raw() for _ in range(n)))
        results.append(out)
    for step, g, w in zip(steps, *results):
        assert g == w, f"{step}: sluice {g!r} vs redis {w!r}"


def test_message_delivery_raw_identical(sluice, ref, clean):
    """A published message arrives as the same bytes Redis sends."""
    results = []
    for srv in (sluice, ref):
        with srv.raw() as sub, srv.raw() as pub:
            sub.call("SUBSCRIBE", "ch")
            sub.call("PSUBSCRIBE", "c*")
            n = pub.call("PUBLISH", "ch", "payload")
            results.append((n, sub.read_reply_raw(), sub.read_reply_raw()))
    assert results[0] == results[1]
