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
    assert c.execute_command("RENEW", "k", "30000") in (b"OK", True)
    assert backend.client().pttl("k") > 29000
    c.execute_command("LOCK", "j", "1000", "OWNER", "t")
    assert c.execute_command("RENEW", "j", "20000", "OWNER", "t") in (b"OK", True)
    assert backend.client().pttl("j") > 19000


@pytest.mark.parametrize("ttl", ["9223372036854775807", str(2**62 + 1)])
def test_ttl_past_redis_clock_is_refused_and_takes_nothing(sluice_factory, backend, clean, ttl):
    """A ttl Redis's clock overflows on: Redis refused its PEXPIRE only
    after the script had made the key, so LOCK answered an error yet left
    a lock that never expires. sluice refuses it before Redis sees it, also
    with lock_max_ttl_ms at its highest (the setting this test is about)."""
    c = sluice_factory(backend.port, lock_max_ttl_ms=4611686018427387903).client(
        single_connection_client=True)
    with pytest.raises(redis.ResponseError, match="^invalid expire time in 'lock' command"):
        c.execute_command("LOCK", "huge", ttl)
    with pytest.raises(redis.ResponseError, match="^invalid expire time in 'lock' command"):
        c.execute_command("LOCK", "huge", ttl, "OWNER", "t", "FENCE")
    assert backend.client().exists("huge") == 0
    c.execute_command("LOCK", "huge", "1000", "OWNER", "t")
    with pytest.raises(redis.ResponseError, match="^invalid expire time in 'renew' command"):
        c.execute_command("RENEW", "huge", ttl, "OWNER", "t")
    assert 0 < backend.client().pttl("huge") <= 1000


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
        tok = conn.call("LOCK", "mine", "30000")
        assert TOKEN.match(tok)
        assert conn.call("LOCK", "shared", "30000", "OWNER", "tok") == b"tok"
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
    holder.execute_command("LOCK", "w", "30000")
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
    sluice.client().execute_command("LOCK", "w", "30000", "OWNER", "h")
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
    holder.execute_command("LOCK", "q", "30000")
    order = []
    lock = threading.Lock()

    def waiter(i):
        c = sluice.client(single_connection_client=True)
        tok = c.execute_command("LOCK", "q", "30000", "WAIT", "20000")
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
    """The scripts are loaded again after a Redis restart. The restart lost
    lock "a" with the data set, so it begins the failover grace: locks of
    at most 5 s here (lock_max_ttl_ms), so a grace of 5 s."""
    srv = redis_factory()
    s = sluice_factory(srv.port, lock_max_ttl_ms=5000)
    c = s.client(single_connection_client=False)
    assert c.execute_command("LOCK", "a", "5000", "OWNER", "x") == b"x"
    srv.restart()
    wait_until(lambda: c.ping(), 5 * SLOW, msg="sluice reconnected")

    def relock():
        try:
            return c.execute_command("LOCK", "b", "5000", "OWNER", "y") == b"y"
        except redis.RedisError:
            return False

    wait_until(relock, 5 + 5 * SLOW, msg="LOCK after restart (and its grace)")
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


# --------------------------------------------------------------------------
# Hostile and careless clients


def backend_keys(backend):
    return set(backend.client().keys("*"))


@pytest.mark.parametrize("key", [
    b"\x00", b"\x00" + b"Z" * 40, b"\x00" + b"Z" * 5000, b"a\x00b", b"ab\x00" * 700,
], ids=["nul", "nul-40", "nul-5000", "a-nul-b", "2100-with-nuls"])
def test_lock_key_with_nul_is_stored_as_sent(sluice, backend, clean, key):
    # A key is bytes: cut at its NUL, sluice once hashed and stored bytes
    # past the end of its copy (heap contents, readable by SCAN).
    with sluice.raw() as conn:
        tok = conn.call("LOCK", key, "30000")
        assert TOKEN.match(tok)
        assert backend_keys(backend) == {key}
        assert backend.client().hgetall(key) == {tok: b"1"}
        tok2, fence = conn.call("LOCK", key + b"\x00", "30000", "FENCE")
        assert TOKEN.match(tok2) and fence == 1
        fence_keys = backend_keys(backend) - {key, key + b"\x00"}
        assert len(fence_keys) == 1
        assert next(iter(fence_keys)).endswith(b"}:" + key + b"\x00")
        assert conn.call("UNLOCK", key) == 0
        assert conn.call("UNLOCK", key + b"\x00") == 0
    assert backend.client().exists(key) == 0


def test_owner_token_with_nul_is_binary_safe(sluice, backend, clean):
    d = backend.client()
    with sluice.raw() as conn:
        assert conn.call("LOCK", "k", "10000", "OWNER", b"t\x00x", "KEEP") == b"t\x00x"
        assert d.hgetall("k") == {b"t\x00x": b"1"}
        # Another token that only differs after the NUL is another owner.
        assert conn.call("LOCK", "k", "10000", "OWNER", b"t\x00y") is None
        assert conn.call("UNLOCK", "k", "OWNER", b"t\x00y").startswith("NOTOWNER")
        assert conn.call("RENEW", "k", "20000", "OWNER", b"t").startswith("NOTOWNER")
        # The connection remembers the whole token (KEEP): no OWNER needed.
        assert conn.call("RENEW", "k", "29000") == "OK"
        assert d.pttl("k") > 28000
        assert conn.call("UNLOCK", "k") == 0
    assert d.exists("k") == 0
    assert backend_keys(backend) == set()


def test_fence_counters_of_long_keys_are_their_own(sluice, backend, clean):
    # Long names once all shared one fence counter at the empty key "".
    keys = [b"L" * 2000, b"M" * 2000, b"N" * 100 * 1024, b"{t}" + b"O" * 100 * 1024]
    c = sluice.client(single_connection_client=True)
    fences = {}
    for k in keys:
        for _ in range(2):
            tok, f = c.execute_command("LOCK", k, "30000", "FENCE")
            fences.setdefault(k, []).append(f)
            assert c.execute_command("UNLOCK", k) == 0
    assert all(f == [1, 2] for f in fences.values()), fences
    d = backend.client()
    assert d.exists(b"") == 0
    stored = backend_keys(backend)
    assert len(stored) == len(keys)
    for k in keys:
        (fk,) = [s for s in stored if s.endswith(b"}:" + k)]
        assert d.get(fk) == b"2"


def _flush_scripts_until(backend, stop):
    d = backend.client()
    while not stop.is_set():
        d.script_flush()


def _pipelined_cycles(sluice, backend, script, check, seconds):
    """Send SCRIPT (command tuples) pipelined, read its replies and CHECK
    them, again and again for SECONDS while another connection flushes
    Redis's script cache. Returns (cycles, bad replies)."""
    from helpers import encode_command
    data = b"".join(encode_command(*cmd) for cmd in script)
    stop = threading.Event()
    flusher = threading.Thread(target=_flush_scripts_until, args=(backend, stop))
    flusher.start()
    bad, cycles = [], 0
    try:
        with sluice.raw() as conn:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                conn.send(data)
                replies = conn.read_replies(len(script))
                cycles += 1
                if not check(replies):
                    bad.append(replies)
    finally:
        stop.set()
        flusher.join()
    return cycles, bad


def test_unlock_then_exists_stays_in_order_across_script_flush(sluice, backend, clean):
    # A NOSCRIPT retry of UNLOCK once went out behind the EXISTS pipelined
    # after it, which then still saw the lock.
    script = [("LOCK", "k", "10000"), ("UNLOCK", "k"), ("EXISTS", "k")]
    cycles, bad = _pipelined_cycles(
        sluice, backend, script,
        lambda r: TOKEN.match(r[0]) and r[1] == 0 and r[2] == 0, 4)
    assert cycles > 100
    assert not bad, f"{len(bad)} of {cycles} cycles out of order, e.g. {bad[:3]}"


def test_renew_then_pttl_stays_in_order_across_script_flush(sluice, backend, clean):
    script = [("LOCK", "k", "1000"), ("RENEW", "k", "30000"), ("PTTL", "k"), ("UNLOCK", "k")]
    cycles, bad = _pipelined_cycles(
        sluice, backend, script,
        lambda r: TOKEN.match(r[0]) and r[1] == "OK" and r[2] > 25000 and r[3] == 0, 3)
    assert cycles > 100
    assert not bad, f"{len(bad)} of {cycles} cycles out of order, e.g. {bad[:3]}"


def commands_in(backend, seconds):
    d = backend.client()
    before = int(d.info("stats")["total_commands_processed"])
    time.sleep(seconds)
    return int(d.info("stats")["total_commands_processed"]) - before - 1


def test_keep_stops_when_the_lock_is_lost(sluice, backend, clean):
    d = backend.client()
    a = sluice.client(single_connection_client=True)
    a.execute_command("LOCK", "lost:k\x01", "300", "KEEP")
    time.sleep(0.3)
    assert evalsha_calls_in(backend, 1.0) >= 5   # renewing every 100 ms
    d.delete("lost:k\x01")
    b = sluice.client(single_connection_client=True)
    assert b.execute_command("LOCK", "lost:k\x01", "30000", "OWNER", "b") == b"b"
    time.sleep(1.0)
    assert evalsha_calls_in(backend, 1.0) == 0
    time.sleep(1.0)
    assert d.hgetall("lost:k\x01") == {b"b": b"1"}
    log = sluice.log_path.read_text(errors="replace")
    assert log.count("KEEP of 'lost:k\\x01' stopped") == 1
    # A no longer holds it: its UNLOCK cannot release B's lock.
    with pytest.raises(redis.ResponseError):
        a.execute_command("UNLOCK", "lost:k\x01")
    assert d.hgetall("lost:k\x01") == {b"b": b"1"}
    assert a.ping()


def evalsha_calls_in(backend, seconds):
    before = evalsha_calls(backend)
    time.sleep(seconds)
    return evalsha_calls(backend) - before


def test_keep_with_tiny_ttls_does_not_flood_redis(sluice, backend, clean):
    c = sluice.client(single_connection_client=True)
    p = c.pipeline(transaction=False)
    for i in range(200):
        p.execute_command("LOCK", f"tiny{i}", "3", "KEEP")
    assert all(TOKEN.match(t) for t in p.execute())
    time.sleep(1.0)
    assert commands_in(backend, 1.0) < 5000
    assert c.ping()


def test_keep_renewal_reply_after_close_is_harmless(sluice, backend, clean):
    # Renewals still out when their connection closes: the reply must not
    # touch the connection's freed records (the sanitizer build checks).
    for round_ in range(5):
        c = sluice.client(single_connection_client=True)
        p = c.pipeline(transaction=False)
        for i in range(100):
            p.execute_command("LOCK", f"r{round_}:{i}", "300", "KEEP", "OWNER", "o")
        p.execute()
        time.sleep(0.1 + 0.013 * round_)
        hang_up(c)
    assert sluice.client().ping()


@pytest.mark.parametrize("cmd", [
    ("LOCK", "k", "1000"), ("LOCK", "k", "1000", "WAIT", "100"), ("UNLOCK", "k", "OWNER", "o"),
    ("RENEW", "k", "1000", "OWNER", "o"),
])
def test_lock_verbs_inside_multi_abort_the_transaction(sluice, backend, clean, cmd):
    d = backend.client()
    with sluice.raw() as conn:
        assert conn.call("MULTI") == "OK"
        assert conn.call("SET", "a", "1") == "QUEUED"
        assert conn.call(*cmd) == Err("ERR Command not allowed inside a transaction")
        assert conn.call("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")
        assert d.exists("a", "k") == 0
        # Out of the transaction, the verbs work again.
        assert TOKEN.match(conn.call("LOCK", "k", "1000"))
    wait_until(lambda: d.exists("k") == 0, 2 * SLOW, msg="released at close")


def test_lock_verbs_in_subscribed_mode_get_redis_error(sluice, backend, clean):
    with sluice.raw() as conn:
        assert conn.call("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        redis_error = conn.call("GET", "a")   # Redis's own text for a command
        assert redis_error.startswith("ERR Can't execute 'get'")
        for cmd in (("LOCK", "k", "1000"), ("UNLOCK", "k", "OWNER", "o"),
                    ("RENEW", "k", "1000", "OWNER", "o")):
            assert conn.call(*cmd) == Err(redis_error.replace("'get'", f"'{cmd[0].lower()}'"))
        assert conn.call("PING") == [b"pong", b""]
    assert backend.client().exists("k") == 0


def test_lock_verbs_in_monitor_mode_get_redis_error(sluice, backend, clean):
    def reply(conn):
        while True:   # skip monitor lines of other connections
            r = conn.read_reply()
            if not (isinstance(r, str) and not isinstance(r, Err) and r[:1].isdigit()):
                return r

    with sluice.raw() as conn:
        assert conn.call("MONITOR") == "OK"
        conn.send_command("GET", "a")
        redis_error = reply(conn)
        assert isinstance(redis_error, Err)
        for cmd in (("LOCK", "k", "1000"), ("UNLOCK", "k", "OWNER", "o"),
                    ("RENEW", "k", "1000", "OWNER", "o")):
            conn.send_command(*cmd)
            assert reply(conn) == redis_error
    assert backend.client().exists("k") == 0
    assert sluice.client().ping()


# CLIENT REPLY OFF/SKIP: the lock verb runs, its reply is dropped. Each test
# has a sluice of its own, so that a crash is not blamed on later tests.

def test_client_reply_skip_lock_then_disconnect(sluice_factory, backend, clean):
    s = sluice_factory(backend.port)
    for _ in range(20):
        conn = s.raw()
        conn.send_command("CLIENT", "REPLY", "SKIP")
        conn.send_command("LOCK", "k", "1000")
        conn.close()
    with s.raw() as conn:
        assert conn.call("PING") == "PONG"
        assert conn.call("SET", "x", "1") == "OK"


def test_client_reply_off_lock_then_on(sluice_factory, backend, clean):
    s = sluice_factory(backend.port)
    d = backend.client()
    with s.raw() as conn:
        conn.send_command("CLIENT", "REPLY", "OFF")
        conn.send_command("LOCK", "k", "30000")
        conn.send_command("CLIENT", "REPLY", "ON")
        assert conn.read_reply() == "OK"
        assert conn.call("PING") == "PONG"
        assert d.exists("k") == 1
        assert d.pttl("k") > 25000


def test_client_reply_skip_lock_then_ping(sluice_factory, backend, clean):
    s = sluice_factory(backend.port)
    d = backend.client()
    with s.raw() as conn:
        conn.send_command("CLIENT", "REPLY", "SKIP")
        conn.send_command("LOCK", "k", "30000")
        conn.send_command("PING")
        assert conn.read_reply() == "PONG"
        assert conn.call("ECHO", "x") == b"x"
        assert d.exists("k") == 1


def test_lock_verbs_with_backend_down_answer_and_let_the_client_go_on(redis_factory,
                                                                      sluice_factory):
    # sluice answers the rewritten request itself when Redis is down: the
    # client, blocked while its lock verb is out, must read on.
    srv = redis_factory()
    s = sluice_factory(srv.port)
    srv.stop()
    with s.raw() as conn:
        wait_until(lambda: isinstance(conn.call("GET", "a"), Err), 5 * SLOW,
                   msg="sluice sees the backend down")
        for cmd in (("LOCK", "k", "1000"), ("UNLOCK", "k", "OWNER", "o"),
                    ("RENEW", "k", "1000", "OWNER", "o")):
            conn.send_command(*cmd)
            conn.send_command("PROXY", "PING")
            reply, pong = conn.read_replies(2)
            assert isinstance(reply, Err)
            assert pong == "PONG"
