"""LOCK / UNLOCK / RENEW through sluice against a real redis-server."""

import re
import threading
import time

import pytest
import redis

from helpers import SLOW, Err, wait_until

TOKEN = re.compile(rb"^[0-9a-f]{32}$")


def hang_up(client):
    """Really close a redis-py client's connections (close() of redis-py 4.3
    keeps a single connection client's socket in its pool)."""
    client.close()
    client.connection_pool.disconnect()


def evalsha_calls(backend):
    stats = backend.client().info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def test_lock_returns_fresh_token_and_nil_when_held(sluice, backend, clean):
    a, b = sluice.client(), sluice.client()
    t1 = a.execute_command("LOCK", "order:42", "30000")
    assert TOKEN.match(t1)
    assert b.execute_command("LOCK", "order:42", "30000") is None
    # A second acquisition without OWNER on the same connection is another owner.
    assert a.execute_command("LOCK", "order:42", "30000") is None
    d = backend.client()
    assert d.type("order:42") == b"hash"
    assert d.hgetall("order:42") == {t1: b"1"}
    assert 29000 < d.pttl("order:42") <= 30000
    t2 = sluice.client().execute_command("LOCK", "other", "1000")
    assert TOKEN.match(t2) and t2 != t1


def test_reentrant_owner_and_hold_counts(sluice, backend, clean):
    c = sluice.client()
    assert c.execute_command("LOCK", "k", "5000", "OWNER", "me") == b"me"
    assert c.execute_command("LOCK", "k", "9000", "OWNER", "me") == b"me"
    assert backend.client().hget("k", "me") == b"2"
    assert backend.client().pttl("k") > 8000
    assert sluice.client().execute_command("LOCK", "k", "5000", "OWNER", "you") is None
    assert c.execute_command("UNLOCK", "k", "OWNER", "me") == 1
    assert c.execute_command("UNLOCK", "k", "OWNER", "me") == 0
    assert backend.client().exists("k") == 0
    with pytest.raises(redis.ResponseError, match="^NOTOWNER"):
        c.execute_command("UNLOCK", "k", "OWNER", "me")


def test_unlock_without_owner_uses_connection_token(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    c.execute_command("LOCK", "k", "5000")
    assert c.execute_command("UNLOCK", "k") == 0
    assert backend.client().exists("k") == 0
    before = evalsha_calls(backend)
    with pytest.raises(redis.ResponseError, match="OWNER"):
        c.execute_command("UNLOCK", "k")
    assert evalsha_calls(backend) == before


def test_notowner_for_someone_elses_or_expired_lock(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    c.execute_command("LOCK", "k", "5000", "OWNER", "a")
    with pytest.raises(redis.ResponseError, match="^NOTOWNER"):
        c.execute_command("UNLOCK", "k", "OWNER", "b")
    with pytest.raises(redis.ResponseError, match="^NOTOWNER"):
        c.execute_command("RENEW", "k", "5000", "OWNER", "b")
    c.execute_command("LOCK", "short", "50")
    time.sleep(0.2)
    with pytest.raises(redis.ResponseError, match="^NOTOWNER"):
        c.execute_command("UNLOCK", "short")


def test_renew_sets_ttl(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    c.execute_command("LOCK", "k", "1000")
    assert c.execute_command("RENEW", "k", "60000") in (b"OK", True)
    assert backend.client().pttl("k") > 59000
    c.execute_command("LOCK", "j", "1000", "OWNER", "t")
    assert c.execute_command("RENEW", "j", "20000", "OWNER", "t") in (b"OK", True)
    assert backend.client().pttl("j") > 19000


def test_wrongtype(sluice, backend, clean):
    backend.client().set("s", "v")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        sluice.client().execute_command("LOCK", "s", "1000")


@pytest.mark.parametrize("args,message", [
    (["LOCK"], "wrong number of arguments for 'lock' command"),
    (["LOCK", "k"], "wrong number of arguments for 'lock' command"),
    (["UNLOCK"], "wrong number of arguments for 'unlock' command"),
    (["RENEW", "k"], "wrong number of arguments for 'renew' command"),
    (["LOCK", "k", "abc"], "value is not an integer or out of range"),
    (["LOCK", "k", "0"], "invalid expire time in 'lock' command"),
    (["LOCK", "k", "-5"], "invalid expire time in 'lock' command"),
    (["RENEW", "k", "0", "OWNER", "x"], "invalid expire time in 'renew' command"),
    (["LOCK", "k", "10", "WAIT"], "syntax error"),
    (["LOCK", "k", "10", "WAIT", "0"], "invalid WAIT timeout"),
    (["LOCK", "k", "10", "WAIT", "x"], "value is not an integer or out of range"),
    (["LOCK", "k", "10", "BOGUS"], "syntax error"),
    (["LOCK", "k", "10", "KEEP", "KEEP"], "syntax error"),
    (["LOCK", "k", "10", "FENCE", "FENCE"], "syntax error"),
    (["LOCK", "k", "10", "OWNER", "a", "OWNER", "b"], "syntax error"),
    (["UNLOCK", "k", "OWNER"], "syntax error"),
    (["UNLOCK", "k", "KEEP"], "syntax error"),
])
def test_bad_arguments_send_nothing(sluice, backend, clean, args, message):
    c = sluice.client()
    before = evalsha_calls(backend)
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command(*args)
    assert str(e.value).startswith(message) or message in str(e.value)
    assert evalsha_calls(backend) == before
    assert c.ping()


def test_options_in_any_order(sluice, clean):
    c = sluice.client()
    reply = c.execute_command("LOCK", "k", "1000", "FENCE", "KEEP", "OWNER", "o", "WAIT", "10")
    assert reply[0] == b"o" and isinstance(reply[1], int)


def test_fence_is_monotonic_across_release_and_expiry(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    fences = []
    tok, f = c.execute_command("LOCK", "f", "5000", "FENCE")
    fences.append(f)
    c.execute_command("UNLOCK", "f")
    _, f = c.execute_command("LOCK", "f", "5000", "OWNER", "x", "FENCE")
    fences.append(f)
    _, f = c.execute_command("LOCK", "f", "5000", "OWNER", "x", "FENCE")  # reentrant
    fences.append(f)
    c.execute_command("UNLOCK", "f", "OWNER", "x")
    c.execute_command("UNLOCK", "f", "OWNER", "x")
    c.execute_command("LOCK", "f", "30", "FENCE")
    time.sleep(0.1)  # expired
    _, f = c.execute_command("LOCK", "f", "5000", "FENCE")
    fences.append(f)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert all(isinstance(x, int) for x in fences)
    # The counter lives in the lock's hash slot.
    d = backend.client()
    keys = [k for k in d.keys("*") if k != b"f"]
    assert len(keys) == 1


def test_keep_holds_past_three_ttls_and_stops_on_close(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    c.execute_command("LOCK", "kept", "300", "KEEP")
    time.sleep(1.2)
    d = backend.client()
    assert d.exists("kept") == 1
    assert 0 < d.pttl("kept") <= 300
    hang_up(c)
    # Released at close (no OWNER), so it is gone well before its TTL.
    wait_until(lambda: d.exists("kept") == 0, 1 * SLOW, msg="lock released at close")


def test_keep_with_owner_stops_on_close_and_expires(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    c.execute_command("LOCK", "kept", "300", "KEEP", "OWNER", "o")
    time.sleep(1.0)
    d = backend.client()
    assert d.exists("kept") == 1
    hang_up(c)
    assert d.exists("kept") == 1  # explicit OWNER: not released on close
    wait_until(lambda: d.exists("kept") == 0, 2 * SLOW, msg="KEEP stopped, lock expired")


def test_release_on_disconnect_but_not_explicit_owner(sluice, backend, clean):
    with sluice.raw() as conn:
        tok = conn.call("LOCK", "mine", "60000")
        assert TOKEN.match(tok)
        assert conn.call("LOCK", "shared", "60000", "OWNER", "tok") == b"tok"
    d = backend.client()
    wait_until(lambda: d.exists("mine") == 0, 2 * SLOW, msg="release on disconnect")
    assert d.exists("shared") == 1
    assert d.hget("shared", "tok") == b"1"


def test_wait_times_out(sluice, clean):
    sluice.client().execute_command("LOCK", "w", "10000", "OWNER", "holder")
    c = sluice.client()
    t0 = time.monotonic()
    assert c.execute_command("LOCK", "w", "1000", "WAIT", "300") is None
    elapsed = time.monotonic() - t0
    assert 0.29 <= elapsed < 1.5 * SLOW


def test_wait_woken_by_release(sluice, clean):
    holder = sluice.client(single_connection_client=True)
    holder.execute_command("LOCK", "w", "60000")
    result = {}

    def waiter():
        c = sluice.client()
        t0 = time.monotonic()
        result["tok"] = c.execute_command("LOCK", "w", "1000", "WAIT", "10000")
        result["elapsed"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.3)
    t_release = time.monotonic()
    holder.execute_command("UNLOCK", "w")
    th.join(10)
    assert TOKEN.match(result["tok"])
    # Woken at once, not after the holder's 60 s TTL or a long poll.
    assert time.monotonic() - t_release < 0.5 * SLOW


def test_waiting_does_not_block_others(sluice, clean):
    sluice.client().execute_command("LOCK", "w", "60000", "OWNER", "h")
    th = threading.Thread(target=lambda: sluice.client().execute_command(
        "LOCK", "w", "1000", "WAIT", "1500"))
    th.start()
    time.sleep(0.1)
    c = sluice.client()
    t0 = time.monotonic()
    for i in range(100):
        c.set(f"x{i}", i)
    assert time.monotonic() - t0 < 1.0 * SLOW
    th.join()


def test_waiters_are_first_come_first_served(sluice, clean):
    holder = sluice.client(single_connection_client=True)
    holder.execute_command("LOCK", "q", "60000")
    order = []
    lock = threading.Lock()

    def waiter(i):
        c = sluice.client(single_connection_client=True)
        tok = c.execute_command("LOCK", "q", "60000", "WAIT", "20000")
        assert tok is not None
        with lock:
            order.append(i)
        time.sleep(0.02)
        c.execute_command("UNLOCK", "q")

    threads = []
    for i in range(6):
        th = threading.Thread(target=waiter, args=(i,))
        th.start()
        threads.append(th)
        time.sleep(0.1)  # arrive in order
    holder.execute_command("UNLOCK", "q")
    for th in threads:
        th.join(30)
    assert order == list(range(6))


def test_pipeline_mixing_locks_and_commands(sluice, clean):
    c = sluice.client()
    p = c.pipeline(transaction=False)
    p.set("a", 1)
    p.execute_command("LOCK", "pl", "1000")
    p.get("a")
    p.execute_command("UNLOCK", "pl")
    p.execute_command("LOCK", "p2", "1000", "OWNER", "x", "FENCE")
    p.incr("a")
    p.execute_command("UNLOCK", "p2", "OWNER", "x")
    p.execute_command("LOCK", "k", "bad")
    p.get("a")
    out = p.execute(raise_on_error=False)
    assert out[0] is True
    assert TOKEN.match(out[1])
    assert out[2] == b"1"
    assert out[3] == 0
    assert out[4][0] == b"x"
    assert out[5] == 2
    assert out[6] == 0
    assert isinstance(out[7], redis.ResponseError)
    assert out[8] == b"2"


def test_noscript_after_script_flush_mid_traffic(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    d = backend.client()
    for i in range(50):
        if i % 10 == 5:
            d.script_flush()
        tok = c.execute_command("LOCK", f"n{i}", "5000")
        assert TOKEN.match(tok)
        assert c.execute_command("UNLOCK", f"n{i}") == 0


def test_noscript_after_redis_restart(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    c = s.client(single_connection_client=False)
    assert c.execute_command("LOCK", "a", "5000", "OWNER", "x") == b"x"
    srv.restart()
    wait_until(lambda: c.ping(), 5 * SLOW, msg="sluice reconnected")

    def relock():
        try:
            return c.execute_command("LOCK", "b", "5000", "OWNER", "y") == b"y"
        except redis.RedisError:
            return False

    wait_until(relock, 5 * SLOW, msg="LOCK after restart")
    assert srv.client().hget("b", "y") == b"1"


def test_stock_deduction_two_sluices(redis_factory, sluice_factory):
    srv = redis_factory()
    s1, s2 = sluice_factory(srv.port), sluice_factory(srv.port)
    srv.client().set("stock", 2000)
    counts = []
    errors = []
    guard = threading.Lock()

    def worker(s):
        c = s.client(single_connection_client=True)
        n = 0
        try:
            while True:
                tok = c.execute_command("LOCK", "stock:lock", "5000", "WAIT", "10000")
                if tok is None:
                    continue
                left = int(c.get("stock"))
                if left <= 0:
                    c.execute_command("UNLOCK", "stock:lock")
                    break
                c.set("stock", left - 1)
                n += 1
                assert c.execute_command("UNLOCK", "stock:lock") == 0
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        with guard:
            counts.append(n)

    threads = [threading.Thread(target=worker, args=(s1 if i % 2 else s2,)) for i in range(40)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not errors
    assert int(srv.client().get("stock")) == 0
    assert sum(counts) == 2000
