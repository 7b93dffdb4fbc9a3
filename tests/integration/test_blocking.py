"""Blocking commands through sluice do not stall other clients."""

import threading
import time

from helpers import SLOW


def _blpop_in_thread(client, key, timeout):
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["result"] = client.blpop(key, timeout=timeout)
        except Exception as e:  # noqa: BLE001
            box["error"] = e
        box["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_blpop_woken_while_others_keep_working(sluice, r):
    a = sluice.client(socket_timeout=30)
    b = sluice.client()
    others = [sluice.client() for _ in range(3)]
    try:
        t, box = _blpop_in_thread(a, "q", 10)
        time.sleep(0.3)
        assert t.is_alive(), f"BLPOP returned early: {box}"

        # 200 commands on other connections, each with normal latency
        worst = 0.0
        t0 = time.monotonic()
        for i in range(200):
            c = others[i % len(others)]
            s = time.monotonic()
            if i % 2 == 0:
                assert c.set(f"bk{i}", i) is True
            else:
                assert c.get(f"bk{i - 1}") == str(i - 1).encode()
            worst = max(worst, time.monotonic() - s)
        total = time.monotonic() - t0
        assert total < 3 * SLOW, f"200 commands took {total:.2f} s while a client was blocked"
        assert worst < 1 * SLOW, f"slowest command took {worst:.2f} s"
        assert t.is_alive(), f"BLPOP returned before LPUSH: {box}"

        assert b.lpush("q", "x") == 1
        t.join(5 * SLOW)
        assert not t.is_alive(), "BLPOP not woken by LPUSH"
        assert "error" not in box, box
        assert box["result"] == (b"q", b"x")
        assert box["elapsed"] < 9, "BLPOP was not woken (ran into its timeout)"
        assert r.llen("q") == 0
    finally:
        for c in [a, b] + others:
            c.close()


def test_many_blocked_clients(sluice, r):
    """Several clients blocked at once, each woken by its own push."""
    n = 8
    clients = [sluice.client(socket_timeout=30) for _ in range(n)]
    try:
        workers = [_blpop_in_thread(c, f"bq{i}", 10) for i, c in enumerate(clients)]
        time.sleep(0.3)
        assert r.ping() is True
        for i in reversed(range(n)):
            r.rpush(f"bq{i}", f"v{i}")
        for i, (t, box) in enumerate(workers):
            t.join(5 * SLOW)
            assert not t.is_alive()
            assert box.get("result") == (f"bq{i}".encode(), f"v{i}".encode()), box
    finally:
        for c in clients:
            c.close()


def test_blpop_timeout_returns_nil(sluice, r):
    t0 = time.monotonic()
    assert r.blpop("never", timeout=1) is None
    el = time.monotonic() - t0
    assert 0.8 < el < 3 * SLOW, el
    # the connection is fine afterwards
    assert r.set("after", "1") is True and r.get("after") == b"1"


def test_brpoplpush_and_blmove(sluice, r):
    a = sluice.client(socket_timeout=30)
    try:
        box = {}

        def run():
            box["v"] = a.blmove("src", "dst", 10, "LEFT", "RIGHT")

        t = threading.Thread(target=run, daemon=True)
        t.start()
        time.sleep(0.3)
        r.rpush("src", "item")
        t.join(5 * SLOW)
        assert box.get("v") == b"item"
        assert r.lrange("dst", 0, -1) == [b"item"]
        r.rpush("src2", "y")
        assert a.brpoplpush("src2", "dst", 1) == b"y"
    finally:
        a.close()


def test_bzpopmin_and_xread_block(sluice, r):
    a = sluice.client(socket_timeout=30)
    try:
        box = {}

        def run():
            box["z"] = a.bzpopmin("zq", 10)
            box["x"] = a.xread({"xs": "$"}, block=10000)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        time.sleep(0.3)
        r.zadd("zq", {"m": 1})
        time.sleep(0.5 * SLOW)
        r.xadd("xs", {"f": "v"}, id="1-1")
        t.join(5 * SLOW)
        assert not t.is_alive()
        assert box["z"] == (b"zq", b"m", 1.0)
        assert box["x"] == [[b"xs", [(b"1-1", {b"f": b"v"})]]]
    finally:
        a.close()
