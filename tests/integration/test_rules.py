"""Rate-limit rules (issue 4): admission accuracy (local and shared),
bucket per client/ip/rule, matching by category, key, name, user and
address (IPv4 and IPv6), delay, reload (PROXY RELOAD, SIGHUP), dry-run,
PROXY RULES / INFO, and -t on rule files."""

import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import redis

from helpers import Err, RawConn, SLOW, wait_until
from conftest import require_sluice_bin

THROTTLED = re.compile(r"^THROTTLED rule (\S+) retry_after_ms=(\d+)$")


def start_with_rules(redis_factory, sluice_factory, rules_text, srv=None, **extra):
    srv = srv or redis_factory()
    s = sluice_factory(srv.port, start=False, rules="rules.ini", **extra)
    (s.dir / "rules.ini").write_text(rules_text)
    s.start()
    return srv, s


def is_throttled(exc_or_reply, rule=None):
    text = str(exc_or_reply)
    m = THROTTLED.match(text)
    return m is not None and (rule is None or m.group(1) == rule)


def call(c, *args):
    """Send one command; return the reply, or the error text as Err."""
    try:
        return c.execute_command(*args)
    except redis.ResponseError as e:
        return Err(str(e))


def count_admitted(c, cmd, n):
    ok = 0
    for _ in range(n):
        v = call(c, *cmd)
        if isinstance(v, Err):
            assert is_throttled(v), v
        else:
            ok += 1
    return ok


def saturate(port, cmd, seconds, results, idx, start_evt=None):
    """Send CMD back to back for SECONDS; record (admitted, elapsed)."""
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10 * SLOW)
    c.ping()
    if start_evt is not None:
        start_evt.wait()
    ok = 0
    t0 = time.monotonic()
    while True:
        v = call(c, *cmd)
        if not isinstance(v, Err):
            ok += 1
        else:
            assert is_throttled(v), v
        if time.monotonic() - t0 >= seconds:
            break
    results[idx] = (ok, time.monotonic() - t0)
    c.close()


def rule_counters(s):
    with s.raw() as c:
        reply = c.call(b"PROXY", b"RULES")
    out = {}
    for entry in reply:
        d = {}
        for i in range(0, len(entry), 2):
            k = entry[i].decode()
            d[k] = entry[i + 1].decode() if isinstance(entry[i + 1], bytes) else entry[i + 1]
        out[d["name"]] = d
    return out


def within(actual, expected):
    return abs(actual - expected) <= 0.02 * expected + 1


# ---------------------------------------------------------------- accuracy

@pytest.mark.parametrize("scope", ["local", "shared"])
def test_admission_accuracy(scope, redis_factory, sluice_factory):
    rate, burst, seconds = 200, 50, 2.0
    srv, s = start_with_rules(redis_factory, sluice_factory, f"""
[limit sets]
commands = SET
rate = {rate}/s
burst = {burst}
scope = {scope}
""")
    results = [None]
    saturate(s.port, ("SET", "k", "v"), seconds, results, 0)
    ok, elapsed = results[0]
    expected = burst + rate * elapsed
    assert within(ok, expected), f"admitted {ok}, expected {expected:.1f} over {elapsed:.3f} s"
    cnt = rule_counters(s)["sets"]
    assert cnt["admitted"] == ok
    assert cnt["rejected"] > 0
    assert cnt["matched"] == cnt["admitted"] + cnt["rejected"]


def test_shared_bucket_across_two_sluices(redis_factory, sluice_factory):
    """Four clients over two sluices drain one bucket kept in Redis."""
    rate, burst, seconds = 150, 40, 2.0
    rules = f"""
[limit global-writes]
commands = @write
rate = {rate}/s
burst = {burst}
per = rule
scope = shared
"""
    srv, s1 = start_with_rules(redis_factory, sluice_factory, rules)
    _, s2 = start_with_rules(redis_factory, sluice_factory, rules, srv=srv)
    results = [None] * 4
    go = threading.Event()
    threads = [threading.Thread(target=saturate,
                                args=((s1, s2)[i % 2].port, ("INCR", "n"), seconds, results, i, go))
               for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    go.set()
    for t in threads:
        t.join()
    total = sum(r[0] for r in results)
    elapsed = max(r[1] for r in results)
    expected = burst + rate * elapsed
    assert within(total, expected), f"admitted {total}, expected {expected:.1f}"
    assert int(srv.client().get("n")) == total
    # Each sluice admitted part of it: the bucket really is shared.
    assert all(r[0] > 0 for r in results)


# ---------------------------------------------------------- bucket per ...

@pytest.mark.parametrize("per,expect_second", [("client", 3), ("ip", 0), ("rule", 0)])
def test_bucket_per(per, expect_second, redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, f"""
[limit few]
rate = 1/h
burst = 3
per = {per}
commands = GET
""")
    a, b = s.client(), s.client()
    assert count_admitted(a, ("GET", "x"), 5) == 3
    assert count_admitted(b, ("GET", "x"), 5) == expect_second


def test_per_name_and_user(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit by-name]
rate = 1/h
burst = 2
per = name
commands = GET
""")
    a, b, c = s.client(), s.client(), s.client()
    a.client_setname("w1")
    b.client_setname("w1")
    c.client_setname("w2")
    assert count_admitted(a, ("GET", "x"), 3) == 2
    assert count_admitted(b, ("GET", "x"), 3) == 0   # same name, same bucket
    assert count_admitted(c, ("GET", "x"), 3) == 2


# ---------------------------------------------------------------- matching

def test_category_and_command_matching(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit writes]
commands = @write
rate = 1/h
burst = 2
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 2) == 2
    v = call(c, "INCR", "a")
    assert is_throttled(v, "writes"), v
    # Reads are not @write: they flow.
    assert count_admitted(c, ("GET", "a"), 20) == 20
    # A rejected command reached nothing: a is still 1.
    assert srv.client().get("a") == b"1"


def test_key_glob_matching(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit users]
keys = user:*
rate = 1/h
burst = 1
""")
    c = s.client()
    assert count_admitted(c, ("SET", "user:1", "x"), 3) == 1
    assert count_admitted(c, ("SET", "order:1", "x"), 3) == 3
    # A multi-key command matches when any of its keys does.
    assert is_throttled(call(c, "MGET", "order:1", "user:2"), "users")
    assert count_admitted(c, ("MGET", "order:1", "order:2"), 3) == 3


def test_name_glob_follows_setname(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit workers]
match_name = worker-*
rate = 1/h
burst = 1
commands = PING
""")
    c = s.client()
    assert count_admitted(c, ("PING",), 3) == 3          # no name yet
    c.client_setname("worker-7")
    assert count_admitted(c, ("PING",), 3) == 1           # matched from now on
    c.client_setname("api")
    assert count_admitted(c, ("PING",), 3) == 3


def test_user_matching(redis_factory, sluice_factory):
    srv = redis_factory()
    srv.client().execute_command("ACL", "SETUSER", "batch", "on", ">pw", "~*", "+@all")
    _, s = start_with_rules(redis_factory, sluice_factory, """
[limit batch-user]
match_user = batch
rate = 1/h
burst = 2
commands = GET
""", srv=srv)
    plain = s.client()
    assert count_admitted(plain, ("GET", "x"), 4) == 4    # user "default"
    batch = s.client(username="batch", password="pw")
    assert count_admitted(batch, ("GET", "x"), 4) == 2


def test_default_user_matching(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit default-user]
match_user = default
rate = 1/h
burst = 1
commands = GET
""")
    assert count_admitted(s.client(), ("GET", "x"), 3) == 1


@pytest.mark.parametrize("cidr,limited", [
    ("127.0.0.0/8", True), ("10.0.0.0/8", False), ("127.0.0.1", True),
    ("192.168.1.7 127.0.0.2/31", False),
])
def test_ipv4_matching(cidr, limited, redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, f"""
[limit by-ip]
match_ip = {cidr}
rate = 1/h
burst = 1
commands = GET
""")
    assert count_admitted(s.client(), ("GET", "x"), 3) == (1 if limited else 3)


def _ipv6_loopback_works():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sk:
            sk.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback_works(), reason="no IPv6 loopback here")
@pytest.mark.parametrize("cidr,limited", [("::1", True), ("::/0", True),
                                          ("fd00::/8", False), ("127.0.0.0/8", False)])
def test_ipv6_matching(cidr, limited, redis_factory, sluice_factory):
    from helpers import free_port
    port6 = free_port()
    srv, s = start_with_rules(redis_factory, sluice_factory, f"""
[limit by-ip6]
match_ip = {cidr}
rate = 1/h
burst = 1
commands = GET
""", extra_text=f"listen = [::1]:{port6}\n")
    c = redis.Redis(host="::1", port=port6, socket_timeout=10)
    assert count_admitted(c, ("GET", "x"), 3) == (1 if limited else 3)
    # IPv4 clients are compared in their IPv4-mapped form (::ffff:a.b.c.d),
    # so ::/0 covers them too.
    v4_limited = cidr in ("127.0.0.0/8", "::/0")
    assert count_admitted(s.client(), ("GET", "x"), 3) == (1 if v4_limited else 3)


def test_lock_verbs_match_by_name(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit lock-churn]
commands = LOCK
rate = 1/h
burst = 1
""")
    c = s.client()
    tok = call(c, "LOCK", "res", "10000")
    assert isinstance(tok, bytes), tok
    assert is_throttled(call(c, "LOCK", "res2", "10000"), "lock-churn")
    assert call(c, "UNLOCK", "res") == 0   # UNLOCK is not limited


def test_every_matching_rule_applies(redis_factory, sluice_factory):
    """A command passes only when each matching rule has a token; a refused
    command takes none from the others."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit wide]
rate = 1/h
burst = 5
commands = GET SET

[limit narrow]
rate = 1/h
burst = 2
commands = SET
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 4) == 2   # narrow runs out
    # wide gave 2 tokens only (refused SETs took none): 3 GETs left.
    assert count_admitted(c, ("GET", "a"), 5) == 3
    cnt = rule_counters(s)
    assert cnt["narrow"]["rejected"] == 2
    assert cnt["wide"]["admitted"] == 5



def test_shared_refusal_gives_local_tokens_back(redis_factory, sluice_factory):
    """A local rule admits, a shared rule then refuses: the command takes no
    token from the local rule either."""
    rules = """
[limit local-sets]
commands = SET
rate = 1/h
burst = 3
"""
    srv, s = start_with_rules(redis_factory, sluice_factory, rules + """
[limit shared-sets]
commands = SET
rate = 1/h
burst = 1
scope = shared
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 3) == 1   # shared-sets runs out
    cnt = rule_counters(s)
    assert cnt["shared-sets"]["rejected"] == 2
    assert cnt["local-sets"]["admitted"] == 1 and cnt["local-sets"]["matched"] == 3
    # Without the shared rule (local-sets unchanged keeps its bucket): the
    # two refused SETs gave their tokens back, so two of three are left.
    (s.dir / "rules.ini").write_text(rules)
    assert call(c, "PROXY", "RELOAD") == b"OK"
    assert count_admitted(c, ("SET", "a", "1"), 5) == 2


def test_shared_refusal_gives_shared_tokens_back(redis_factory, sluice_factory):
    """Of two shared rules, one refuses: the other's token goes back to its
    bucket in Redis."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit shared-wide]
commands = GET SET
rate = 1/h
burst = 3
scope = shared

[limit shared-narrow]
commands = SET
rate = 1/h
burst = 1
scope = shared
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 3) == 1
    # shared-wide gave one token only: two GETs left of its three.
    assert count_admitted(c, ("GET", "a"), 5) == 2
    cnt = rule_counters(s)
    assert cnt["shared-narrow"]["rejected"] == 2
    assert cnt["shared-wide"]["admitted"] == 3 and cnt["shared-wide"]["rejected"] == 3

# ------------------------------------------------------------------- delay

def test_delay_timing_and_order(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit slow-incr]
commands = INCR
rate = 20/s
burst = 1
action = delay
max_delay = 1s
""")
    c = s.client()
    p = c.pipeline(transaction=False)
    for i in range(6):
        p.execute_command("INCR", "n")   # (redis-py's incr() sends INCRBY)
        p.set(f"after:{i}", i)
    t0 = time.monotonic()
    out = p.execute()
    elapsed = time.monotonic() - t0
    assert out == [v for i in range(6) for v in (i + 1, True)]
    # 5 waits of 1/20 s each.
    assert 0.2 <= elapsed <= 0.25 + 1.0 * SLOW, elapsed
    cnt = rule_counters(s)["slow-incr"]
    assert cnt["delayed"] >= 4 and cnt["rejected"] == 0


def test_delay_does_not_hold_up_others(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit slow]
match_name = slow
rate = 1/s
burst = 1
action = delay
max_delay = 5s
""")
    slow = s.client()
    slow.client_setname("slow")
    slow.ping()   # the bucket is empty now
    done = []
    t = threading.Thread(target=lambda: done.append(slow.get("x")))
    t0 = time.monotonic()
    t.start()
    fast = s.client()
    for _ in range(200):
        assert fast.ping()
    fast_elapsed = time.monotonic() - t0
    t.join()
    assert done == [None]
    assert fast_elapsed < 0.8, fast_elapsed
    assert time.monotonic() - t0 >= 0.7


def test_delay_rejects_past_max_delay(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit capped]
commands = GET
rate = 2/s
burst = 1
action = delay
max_delay = 100ms
""")
    c = s.client()
    assert call(c, "GET", "x") is None
    t0 = time.monotonic()
    v = call(c, "GET", "x")
    assert time.monotonic() - t0 < 0.3 * SLOW   # refused at once, not after waiting
    m = THROTTLED.match(str(v))
    assert m and m.group(1) == "capped", v
    assert 300 <= int(m.group(2)) <= 500, v


def test_delayed_request_gives_token_back_when_client_leaves(redis_factory, sluice_factory):
    """A client that leaves while its request waits frees the token it had
    reserved: the next client waits for one interval, not two."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit one-a-second]
commands = INCR
per = rule
rate = 1/s
burst = 1
action = delay
max_delay = 5s
""")
    c = s.client()
    assert c.execute_command("INCR", "n") == 1   # the bucket is empty now
    with RawConn(s.port) as gone:
        gone.send_command("INCR", "n")           # waits about 1 s...
        time.sleep(0.1)
    time.sleep(0.1)                              # ...but its client left
    t0 = time.monotonic()
    assert c.execute_command("INCR", "n") == 2   # the left request never ran
    waited = time.monotonic() - t0
    # Its reserved token back: about 0.8 s left of the first interval;
    # kept, this INCR would wait one more second (about 1.8 s).
    assert 0.5 <= waited <= 1.3, waited
    assert rule_counters(s)["one-a-second"]["delayed"] == 1


def test_delay_shared(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit shared-delay]
commands = INCR
rate = 20/s
burst = 1
action = delay
max_delay = 1s
scope = shared
""")
    c = s.client()
    t0 = time.monotonic()
    assert [c.execute_command("INCR", "n") for _ in range(5)] == [1, 2, 3, 4, 5]
    assert time.monotonic() - t0 >= 0.18


def test_reject_keeps_connection_and_pipeline_order(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit sets]
commands = SET
rate = 1/h
burst = 1
""")
    with s.raw() as c:
        c.send(b"SET a 1\r\nSET b 2\r\nGET a\r\nGET b\r\nPING\r\n")
        replies = c.read_replies(5)
    assert replies[0] == "OK"
    assert isinstance(replies[1], Err) and THROTTLED.match(replies[1]), replies
    assert replies[2:] == [b"1", None, "PONG"]


def test_refusal_inside_multi_aborts_exec(redis_factory, sluice_factory):
    """Redis never saw the refused command, so EXEC must not run the rest:
    EXECABORT, as after a queuing error in Redis. MULTI/EXEC themselves are
    never refused."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit sets]
commands = SET MULTI EXEC
rate = 1/h
burst = 1
""")
    with s.raw() as c:
        c.send(b"SET a 1\r\nMULTI\r\nINCR n\r\nSET b 2\r\nEXEC\r\n"
               b"MULTI\r\nINCR n\r\nEXEC\r\nGET b\r\n")
        replies = c.read_replies(9)
    assert replies[:3] == ["OK", "OK", "QUEUED"], replies
    assert THROTTLED.match(replies[3]), replies
    assert isinstance(replies[4], Err) and replies[4].startswith("EXECABORT"), replies
    # The next transaction is clean and runs; n was never incremented before.
    assert replies[5:] == ["OK", "QUEUED", [1], None], replies
    assert srv.client().get("n") == b"1"


# ------------------------------------------------------------------ dryrun

def test_dryrun_counts_and_acts_on_nothing(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit trial]
commands = SET
rate = 1/h
burst = 1
mode = dryrun

[limit trial-delay]
commands = GET
rate = 1/h
burst = 1
action = delay
max_delay = 10s
mode = dryrun
""")
    c = s.client()
    t0 = time.monotonic()
    assert count_admitted(c, ("SET", "a", "1"), 5) == 5
    assert count_admitted(c, ("GET", "a"), 5) == 5
    assert time.monotonic() - t0 < 2 * SLOW
    cnt = rule_counters(s)
    assert cnt["trial"]["dryrun_hits"] == 4 and cnt["trial"]["rejected"] == 0
    assert cnt["trial-delay"]["dryrun_hits"] == 4 and cnt["trial-delay"]["delayed"] == 0
    info = s.info()
    assert int(info["rules_dryrun_hits"]) == 8
    assert int(info["rules_loaded"]) == 2
    assert "would have" in s.log_path.read_text()


def test_dryrun_shared(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit trial]
commands = SET
rate = 1/h
burst = 1
scope = shared
mode = dryrun
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 4) == 4
    wait_until(lambda: rule_counters(s)["trial"]["dryrun_hits"] == 3, 5 * SLOW,
               msg="dry-run hits counted")


# ------------------------------------------------------------------ shared

def test_shared_survives_script_flush(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit shared-sets]
commands = SET
rate = 1/h
burst = 3
per = rule
scope = shared
""")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 2) == 2
    srv.client().script_flush()
    assert count_admitted(c, ("SET", "a", "1"), 3) == 1
    assert srv.client().exists("sluice:bucket:{shared-sets}") == 1


def test_shared_fails_open(redis_factory, sluice_factory):
    """A bucket key Redis cannot use (wrong type): let through, counted."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit shared-sets]
commands = SET
rate = 1/h
burst = 1
per = rule
scope = shared
""")
    srv.client().set("sluice:bucket:{shared-sets}", "not a hash")
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 3) == 3
    assert rule_counters(s)["shared-sets"]["fail_open"] == 3


# ------------------------------------------------------------------ reload

RELOAD_RULES = """
[limit sets]
commands = SET
rate = 1/h
burst = {burst}

[limit gets]
commands = GET
rate = 1/h
burst = 2
"""


def test_reload_keeps_unchanged_and_applies_changes(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, RELOAD_RULES.format(burst=1))
    c = s.client()
    assert count_admitted(c, ("GET", "a"), 3) == 2
    assert count_admitted(c, ("SET", "a", "1"), 2) == 1
    (s.dir / "rules.ini").write_text(RELOAD_RULES.format(burst=4))
    assert call(c, "PROXY", "RELOAD") == b"OK"
    # gets is unchanged: its empty bucket stays empty (and its counters).
    assert count_admitted(c, ("GET", "a"), 2) == 0
    assert rule_counters(s)["gets"]["admitted"] == 2
    # sets changed: a fresh bucket of 4, on the same open connection.
    assert count_admitted(c, ("SET", "a", "1"), 6) == 4
    # A rule removed stops applying.
    (s.dir / "rules.ini").write_text("[limit sets]\ncommands = SET\nrate = 1/h\nburst = 4\n")
    assert call(c, "PROXY", "RELOAD") == b"OK"
    assert count_admitted(c, ("GET", "a"), 5) == 5
    assert list(rule_counters(s)) == ["sets"]


def test_reload_bad_file_keeps_old_rules(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, RELOAD_RULES.format(burst=1))
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 2) == 1
    (s.dir / "rules.ini").write_text("[limit sets]\ncommands = SET\nrate = fast\n")
    v = call(c, "PROXY", "RELOAD")
    assert isinstance(v, Err), v
    assert re.search(r"rules\.ini:3: ", v), v
    assert count_admitted(c, ("SET", "a", "1"), 2) == 0   # old rule, old state
    assert "rules.ini:3:" in s.log_path.read_text()
    assert len(rule_counters(s)) == 2


def test_sighup_reloads(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, RELOAD_RULES.format(burst=1))
    c = s.client()
    assert count_admitted(c, ("SET", "a", "1"), 2) == 1
    (s.dir / "rules.ini").write_text(RELOAD_RULES.format(burst=3))
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "rules reloaded" in s.log_path.read_text(), 5 * SLOW, msg="reload logged")
    assert count_admitted(c, ("SET", "a", "1"), 5) == 3
    # A bad file on SIGHUP: logged with its line, old rules kept, still running.
    (s.dir / "rules.ini").write_text("[limit x]\nrate = 1/s\nbogus = 1\n")
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "rules.ini:3:" in s.log_path.read_text(), 5 * SLOW, msg="error logged")
    assert set(rule_counters(s)) == {"sets", "gets"}


def test_proxy_commands_are_never_limited(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit everything]
rate = 1/h
burst = 1
""")
    c = s.client()
    assert count_admitted(c, ("PING",), 3) == 1
    for _ in range(5):
        assert call(c, "PROXY", "PING") == b"PONG"
    assert isinstance(call(c, "PROXY", "RULES"), list)


# -------------------------------------------------------------- check (-t)

def run_check(tmp_path, rules_text):
    (tmp_path / "rules.ini").write_text(rules_text)
    (tmp_path / "sluice.ini").write_text(
        "[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:2\nrules = rules.ini\n")
    return subprocess.run([require_sluice_bin(), "-t", "-c", str(tmp_path / "sluice.ini")],
                          capture_output=True, text=True, timeout=30)


def test_check_rules_ok(tmp_path):
    p = run_check(tmp_path, RELOAD_RULES.format(burst=1))
    assert p.returncode == 0, p.stderr


def test_check_rules_errors(tmp_path):
    p = run_check(tmp_path, "[limit a]\nrate = 5/s\nper = planet\n\n[limit b]\n"
                            "commands = NOSUCHCMD\n")
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert any(re.match(r".*rules\.ini:3: .*per", l) for l in lines), p.stderr
    assert any(re.match(r".*rules\.ini:6: .*NOSUCHCMD", l, re.I) for l in lines), p.stderr


def test_refuses_to_start_with_bad_rules(tmp_path):
    (tmp_path / "rules.ini").write_text("[limit a]\n")
    (tmp_path / "sluice.ini").write_text(
        "[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:2\nrules = rules.ini\n")
    p = subprocess.run([require_sluice_bin(), "-c", str(tmp_path / "sluice.ini")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "rules.ini:1:" in p.stderr, p.stderr


def test_proxy_rules_shows_each_rules_settings(redis_factory, sluice_factory):
    """PROXY RULES: each rule's settings as the rule file spells them
    (rate, burst, per, scope, action, max_delay_ms, mode, lease) beside
    its counters: what an operator needs to know what a rule does now."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit sets]
commands = SET
rate = 30/m
burst = 4
per = ip
action = delay
max_delay = 2s

[limit fleet]
rate = 1000/s
scope = shared
mode = dryrun
""")
    rules = rule_counters(s)
    assert {k: rules["sets"][k] for k in ("rate", "burst", "per", "scope", "action",
                                          "max_delay_ms", "mode", "lease")} == {
        "rate": "0.5/s", "burst": "4", "per": "ip", "scope": "local", "action": "delay",
        "max_delay_ms": "2000", "mode": "enforce", "lease": "off"}
    f = rules["fleet"]
    assert (f["rate"], f["scope"], f["mode"], f["action"], f["per"]) == (
        "1000/s", "shared", "dryrun", "reject", "client"), f
    assert f["lease"].startswith("200ms max "), f
    assert "admitted" in f and "rejected" in f


def test_a_removed_rules_series_go_at_reload(redis_factory, sluice_factory):
    """/metrics stays bounded by the rules there are: a rule a reload
    removes loses its series; a rule kept keeps counting."""
    from test_metrics import scrape, value
    from helpers import free_port
    mport = free_port()
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit keep]
commands = GET
rate = 1000/s

[limit gone]
commands = SET
rate = 1000/s
""", metrics_listen=f"127.0.0.1:{mport}")
    r = s.client()
    r.set("k", "v")
    r.get("k")
    body = scrape(mport)
    assert value(body, "sluice_ratelimit_decisions_total", rule="gone", decision="admitted") == 1
    assert value(body, "sluice_ratelimit_decisions_total", rule="keep", decision="admitted") == 1
    (s.dir / "rules.ini").write_text("[limit keep]\ncommands = GET\nrate = 1000/s\n")
    with s.raw() as c:
        assert c.call("PROXY", "RELOAD") == "OK"
    r.get("k")
    body = scrape(mport)
    assert 'rule="gone"' not in body
    assert value(body, "sluice_ratelimit_decisions_total", rule="keep", decision="admitted") == 2
    r.close()
