"""MULTI/EXEC/WATCH through sluice."""

import pytest
import redis

from helpers import assert_same_replies


def test_multi_exec_redispy(r, backend):
    p = r.pipeline(transaction=True)
    p.set("tx:a", "1")
    p.incr("tx:a")
    p.rpush("tx:l", "x", "y")
    p.lrange("tx:l", 0, -1)
    p.get("tx:a")
    assert p.execute() == [True, 2, 2, [b"x", b"y"], b"2"]
    assert backend.client().get("tx:a") == b"2"


def test_watch_conflict_aborts(sluice, r):
    """A WATCHes k, B modifies k on another connection, A's EXEC aborts."""
    a = sluice.client()
    b = sluice.client()
    try:
        r.set("k", "orig")
        with a.pipeline(transaction=True) as p:
            p.watch("k")
            assert p.get("k") == b"orig"     # immediate mode after WATCH
            assert b.set("k", "changed-by-b") is True
            p.multi()
            p.set("k", "from-a")
            with pytest.raises(redis.WatchError):
                p.execute()
        assert r.get("k") == b"changed-by-b"
    finally:
        a.close()
        b.close()


def test_watch_no_conflict_commits(sluice, r):
    a = sluice.client()
    try:
        r.set("k", "orig")
        with a.pipeline(transaction=True) as p:
            p.watch("k")
            v = p.get("k")
            p.multi()
            p.set("k", v + b"+a")
            assert p.execute() == [True]
        assert r.get("k") == b"orig+a"
    finally:
        a.close()


def test_transaction_helper_retries(sluice, r):
    """redis-py's transaction() helper (WATCH + retry loop) works."""
    r.set("ctr", 0)

    def incr(pipe):
        cur = int(pipe.get("ctr"))
        pipe.multi()
        pipe.set("ctr", cur + 1)

    for _ in range(20):
        r.transaction(incr, "ctr")
    assert r.get("ctr") == b"20"


def test_multi_exec_raw_identical(sluice, ref, clean):
    """MULTI/EXEC, queued errors, EXECABORT, DISCARD, nested MULTI and
    WATCH inside MULTI: replies byte-identical to Redis."""
    script = [
        ("MULTI",), ("SET", "a", "1"), ("INCR", "a"), ("LPUSH", "a", "x"),
        ("GET", "a"), ("EXEC",),
        ("MULTI",), ("SET", "b", "1"), ("GET",), ("EXEC",),          # EXECABORT
        ("GET", "b"),
        ("MULTI",), ("SET", "c", "1"), ("DISCARD",), ("GET", "c"),
        ("MULTI",), ("MULTI",), ("WATCH", "a"), ("PING",), ("EXEC",),
        ("DISCARD",), ("EXEC",),
        ("WATCH", "a"), ("UNWATCH",), ("MULTI",), ("EXEC",),
    ]
    assert_same_replies(sluice, ref, script, pipelined=True)


def test_watch_conflict_raw_identical(sluice, ref, clean):
    """Byte-level: the aborted EXEC is a nil multi-bulk (*-1) as in Redis."""
    out = []
    for srv in (sluice, ref):
        with srv.raw() as a, srv.raw() as b:
            a.call("SET", "w", "1")
            a.call("WATCH", "w")
            b.call("SET", "w", "2")
            a.call("MULTI")
            a.call("SET", "w", "3")
            out.append(a.call_raw("EXEC"))
            out.append(b.call_raw("GET", "w"))
    assert out[0] == b"*-1\r\n"
    assert out[:2] == out[2:]


def test_transactions_isolated_between_clients(sluice, r):
    """A's queued commands are not run by B's EXEC and vice versa."""
    with sluice.raw() as a, sluice.raw() as b:
        assert a.call("MULTI") == "OK"
        assert a.call("SET", "iso", "a") == "QUEUED"
        # B is not in MULTI: its commands run at once
        assert b.call("SET", "iso", "b") == "OK"
        assert b.call("EXEC").startswith("ERR EXEC without MULTI")
        assert a.call("EXEC") == ["OK"]
    assert r.get("iso") == b"a"
