"""Client lifecycle and limits: clients vanishing mid-pipeline, slow readers
and client_output_buffer_limit, idle timeout, maxclients, 1,000 clients."""

import selectors
import socket
import time

import pytest

from helpers import SLOW, RawConn, encode_command, wait_until


def _connected_clients(s):
    """connected_clients from PROXY INFO, minus the connection asking."""
    return int(s.info()["connected_clients"]) - 1


# ------------------------------------------------------------ vanishing client


def test_client_killed_mid_pipeline(sluice, r):
    value = b"v" * 10240
    r.set("big10k", value)
    baseline = _connected_clients(sluice)
    for round_ in range(3):
        c = RawConn(sluice.port)
        c.send(encode_command("GET", "big10k") * 5000)
        if round_ == 2:
            # abortive close (RST) instead of FIN
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()
        # everyone else is served meanwhile
        with sluice.raw() as other:
            assert other.call("SET", "alive", round_) == "OK"
            assert other.call("GET", "big10k") == value
    assert r.get("alive") == b"2"
    wait_until(lambda: _connected_clients(sluice) <= baseline, 10 * SLOW,
               msg=f"connected_clients to drop back to {baseline}")
    # still fully functional, including a big pipeline on a new connection
    with sluice.raw(timeout=30 * SLOW) as c:
        c.send(encode_command("GET", "big10k") * 2000)
        replies = c.read_replies(2000)
        assert all(v == value for v in replies)


def test_many_clients_vanish_with_requests_in_flight(sluice, backend, r):
    """Clients disconnect while their (blocking and normal) requests are
    still with the backend; nothing leaks, nobody else notices."""
    baseline = _connected_clients(sluice)
    conns = []
    for i in range(50):
        c = RawConn(sluice.port)
        if i % 5 == 0:
            c.send(encode_command("BLPOP", f"never{i}", "30"))
        else:
            c.send(encode_command("SET", f"x{i}", "1") + encode_command("GET", f"x{i}") * 100)
        conns.append(c)
    direct = backend.client()
    # all ten BLPOPs have reached Redis and block there
    wait_until(lambda: int(direct.info("clients")["blocked_clients"]) == 10, 5 * SLOW,
               msg="the 10 BLPOPs to block on the backend")
    for c in conns:
        c.close()
    with sluice.raw() as other:
        for i in range(100):
            assert other.call("INCR", "survivor") == i + 1
    wait_until(lambda: _connected_clients(sluice) <= baseline, 10 * SLOW,
               msg=f"connected_clients to drop back to {baseline}")
    # In Redis a client that goes away stops waiting; through sluice the
    # departed clients' BLPOPs must not stay blocked on the backend either.
    wait_until(lambda: int(direct.info("clients")["blocked_clients"]) == 0, 5 * SLOW,
               msg="backend blocked_clients to drop to 0 after the BLPOP clients left")
    # keys the blocked-and-gone clients waited for can be pushed and stay
    r.rpush("never0", "x")
    time.sleep(0.2)
    assert r.lrange("never0", 0, -1) == [b"x"], "a departed client's BLPOP consumed the element"


# ------------------------------------------------------------ slow reader


def test_slow_reader_closed_by_output_limit(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, client_output_buffer_limit="1mb")
    value = b"x" * (100 * 1024)
    srv.client().set("v100k", value)
    n = 300                                          # 30 MB of replies
    slow = RawConn(s.port, rcvbuf=4096, timeout=30 * SLOW)
    try:
        slow.send(encode_command("GET", "v100k") * n)
        # meanwhile, other clients work normally
        other = s.client()
        t0 = time.monotonic()
        for i in range(50):
            assert other.set(f"o{i}", i) is True
            assert other.get("v100k") == value
        assert time.monotonic() - t0 < 10 * SLOW
        # sluice must have dropped the slow reader: draining it now ends in
        # EOF/reset long before the 30 MB of replies
        time.sleep(1.0)
        data, closed = slow.read_all_until_eof(20 * SLOW)
        assert closed, "slow reader's connection was not closed"
        assert len(data) < n * len(value), (
            f"slow reader got all {len(data)} bytes: client_output_buffer_limit not enforced")
        assert other.ping() is True
        other.close()
    finally:
        slow.close()
    with s.raw() as c:
        assert c.call("PING") == "PONG"


def test_output_limit_does_not_hit_normal_readers(redis_factory, sluice_factory):
    """A client that reads its replies is never cut off by the limit: many
    100 KB replies one round trip at a time, and small pipelines whose
    replies together stay under the limit. (A pipeline whose replies exceed
    the limit at once is closed by Redis too, so that is not tested here.)"""
    srv = redis_factory()
    s = sluice_factory(srv.port, client_output_buffer_limit="1mb")
    c = s.client(socket_timeout=30 * SLOW)
    value = b"y" * (100 * 1024)
    c.set("v", value)
    for _ in range(100):
        assert c.get("v") == value
    for _ in range(20):
        p = c.pipeline(transaction=False)
        for _ in range(5):
            p.get("v")
        assert p.execute() == [value] * 5
    c.close()


# ------------------------------------------------------------ idle timeout


def test_idle_timeout(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, timeout=1)
    blocked = RawConn(s.port, timeout=15)
    idle = RawConn(s.port, timeout=15)
    active = RawConn(s.port, timeout=15)
    try:
        assert idle.call("PING") == "PONG"
        blocked.send(encode_command("BLPOP", "tq", "6"))
        t0 = time.monotonic()
        # the active client keeps talking and is never closed
        closed_at = None
        while time.monotonic() - t0 < 4.5:
            assert active.call("PING") == "PONG"
            if closed_at is None:
                data, closed = idle.read_all_until_eof(0.2)
                if closed:
                    closed_at = time.monotonic() - t0
            else:
                time.sleep(0.2)
        assert closed_at is not None, "idle client not closed within 4.5 s (timeout = 1)"
        assert 0.8 <= closed_at <= 4.5, closed_at
        # the blocked client is still there and gets its element
        with s.raw() as pusher:
            assert pusher.call("RPUSH", "tq", "item") == 1
        assert blocked.read_reply(5) == [b"tq", b"item"]
    finally:
        for c in (blocked, idle, active):
            c.close()


def test_idle_timeout_spares_subscribers(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, timeout=1)
    with s.raw(timeout=10) as sub:
        sub.call("SUBSCRIBE", "ch")
        time.sleep(3)
        with s.raw() as pub:
            assert pub.call("PUBLISH", "ch", "hi") == 1
        assert sub.read_reply(5) == [b"message", b"ch", b"hi"]


def test_timeout_zero_never_closes(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, timeout=0)
    with s.raw() as c:
        c.call("PING")
        data, closed = c.read_all_until_eof(2.5)
        assert not closed
        assert c.call("PING") == "PONG"


# ------------------------------------------------------------ maxclients


def test_maxclients(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, maxclients=5)
    conns = []
    try:
        # the harness's readiness probe may not be reaped yet: retry
        for _ in range(5):
            deadline = time.monotonic() + 5 * SLOW
            while True:
                c = RawConn(s.port)
                reply = c.call_raw("PING")
                if reply == b"+PONG\r\n":
                    conns.append(c)
                    break
                c.close()
                assert time.monotonic() < deadline, f"could not open 5 clients: {reply!r}"
                time.sleep(0.1)
        sixth = RawConn(s.port)
        data, closed = sixth.read_all_until_eof(5 * SLOW)
        sixth.close()
        assert data == b"-ERR max number of clients reached\r\n", data
        assert closed, "6th connection not closed"
        # the 5 are unaffected
        for c in conns:
            assert c.call("PING") == "PONG"
        # after one leaves, a new client gets in
        conns.pop().close()

        def can_connect():
            with RawConn(s.port) as c:
                return c.call_raw("PING") == b"+PONG\r\n"
        wait_until(can_connect, 5 * SLOW, msg="a slot to free up after a client left")
    finally:
        for c in conns:
            c.close()


# ------------------------------------------------------------ 1,000 clients


def test_1000_concurrent_clients(sluice, r):
    n = 1000
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for i in range(n):
            sk = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
            socks.append(sk)
        # all 1,000 are connected at once
        wait_until(lambda: _connected_clients(sluice) >= n, 15 * SLOW,
                   msg="PROXY INFO connected_clients >= 1000")
        expect = {}
        for i, sk in enumerate(socks):
            val = f"value-{i}-" + "z" * (i % 50)
            req = encode_command("SET", f"client:{i}", val) + encode_command("GET", f"client:{i}")
            sk.sendall(req)
            want = b"+OK\r\n$%d\r\n%s\r\n" % (len(val), val.encode())
            expect[sk] = want
            sk.setblocking(False)
            sel.register(sk, selectors.EVENT_READ, bytearray())
        pending = set(socks)
        deadline = time.monotonic() + 30 * SLOW
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                sk, buf = key.fileobj, key.data
                try:
                    d = sk.recv(65536)
                except BlockingIOError:
                    continue
                if not d:
                    pytest.fail(f"client {socks.index(sk)} closed by sluice; got {bytes(buf)!r}")
                buf += d
                if len(buf) >= len(expect[sk]):
                    assert bytes(buf) == expect[sk], (socks.index(sk), bytes(buf))
                    sel.unregister(sk)
                    pending.discard(sk)
        assert not pending, f"{len(pending)} of {n} clients got no (full) reply"
        # every key really landed
        p = r.pipeline(transaction=False)
        for i in range(n):
            p.get(f"client:{i}")
        got = p.execute()
        assert got == [f"value-{i}-".encode() + b"z" * (i % 50) for i in range(n)]
    finally:
        sel.close()
        for sk in socks:
            sk.close()
    wait_until(lambda: _connected_clients(sluice) < 10, 15 * SLOW,
               msg="connected_clients to drop after 1,000 clients left")
