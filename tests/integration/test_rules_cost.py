"""Budgets of what a client costs Redis (issue 33, item 2): cost =
redis_time (the request's service time in Redis) and cost = bytes
(request plus reply), charged after the reply; a subject in debt waits or
is refused, others are not; dry-run counts; sluice -t checks the keys."""

import pytest

from helpers import Err, busy_eval
from test_rules import call, is_throttled, rule_counters, run_check, start_with_rules


def test_redis_time_budget_catches_an_expensive_command(redis_factory, sluice_factory):
    """10ms/s of Redis per client: a script that keeps Redis busy 100 ms
    runs (the cost is known only after it), then its client is in debt and
    refused; another client is not."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit heavy]
cost = redis_time
rate = 10ms/s
action = reject
""")
    a = s.client()
    assert a.get("k") is None          # cheap: well within the budget
    assert a.execute_command(*busy_eval(100000)) == 1
    v = call(a, "GET", "k")
    assert isinstance(v, Err) and is_throttled(v, "heavy"), v
    assert int(str(v).rsplit("=", 1)[1]) >= 1000   # about 9 s of debt at 10ms/s
    b = s.client()
    assert b.get("k") is None
    r = rule_counters(s)["heavy"]
    assert r["cost"] == "redis_time" and r["rate"] == "10ms/s", r
    assert r["charged"] >= 100000 and r["debt"] >= 50000 and r["rejected"] == 1, r


def test_bytes_budget(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit big]
cost = bytes
rate = 1kb/s
per = ip
action = reject
""")
    a = s.client()
    assert a.get("k") is None
    assert a.set("k", "x" * 20000) is True   # 20 KB: allowed, then owed
    v = call(a, "GET", "k")
    assert isinstance(v, Err) and is_throttled(v, "big"), v
    b = s.client()   # same address: same subject
    assert is_throttled(call(b, "PING"), "big")
    r = rule_counters(s)["big"]
    assert r["cost"] == "bytes" and r["charged"] >= 20000, r


def test_dryrun_cost_limits_nothing(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit heavy]
cost = redis_time
rate = 10ms/s
mode = dryrun
""")
    a = s.client()
    assert a.execute_command(*busy_eval(60000)) == 1
    for _ in range(3):
        assert a.get("k") is None
    r = rule_counters(s)["heavy"]
    assert r["dryrun_hits"] == 3 and r["rejected"] == 0, r


@pytest.mark.parametrize("text,line,message", [
    ("[limit a]\ncost = redis_time\nrate = 5/s\n", 3, "cost = redis_time needs a rate of a duration"),
    ("[limit a]\ncost = bytes\nrate = 5ms/s\n", 3, "cost = bytes needs a rate of a size"),
    ("[limit a]\nrate = 5ms/s\n", 2, "a rate of time needs cost = redis_time"),
    ("[limit a]\nrate = 5kb/s\n", 2, "a rate of bytes needs cost = bytes"),
    ("[limit a]\ncost = bytes\nrate = 5kb/s\nscope = shared\n", 2, "cost = bytes needs scope = local"),
    ("[limit a]\ncost = redis_time\nrate = 5ms/s\nburst = 3\n", 4, "burst needs cost = requests"),
    ("[limit a]\ncost = money\nrate = 5/s\n", 2, "cost: must be requests, redis_time or bytes"),
])
def test_check_rejects_bad_cost_keys(tmp_path, text, line, message):
    p = run_check(tmp_path, text)
    assert p.returncode == 1, p.stderr
    assert f"rules.ini:{line}: " in p.stderr and message in p.stderr, p.stderr


def test_delay_holds_the_subject_until_its_debt_is_paid(redis_factory, sluice_factory):
    """action = delay: after a 100 ms script on a 100ms/s budget, the next
    request waits about until the debt is paid, then goes; a debt longer
    than max_delay is refused."""
    import time
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit heavy]
cost = redis_time
rate = 100ms/s
action = delay
max_delay = 5s
""")
    a = s.client()
    assert a.execute_command(*busy_eval(150000)) == 1
    t0 = time.monotonic()
    assert a.get("k") is None
    assert time.monotonic() - t0 >= 0.2   # owed about 50 ms of 100 ms/s: 0.5 s
    r = rule_counters(s)["heavy"]
    assert r["delayed"] == 1, r
    assert a.execute_command(*busy_eval(700000)) == 1   # 6 s of debt > max_delay
    assert is_throttled(call(a, "GET", "k"), "heavy")


def test_reload_keeps_an_unchanged_rules_debt(redis_factory, sluice_factory):
    text = """
[limit heavy]
cost = bytes
rate = 1kb/s
action = reject
"""
    srv, s = start_with_rules(redis_factory, sluice_factory, text)
    a = s.client()
    assert a.set("k", "x" * 30000) is True
    assert is_throttled(call(a, "GET", "k"), "heavy")
    (s.dir / "rules.ini").write_text(text + "\n[limit other]\ncommands = SET\nrate = 1/h\n")
    assert call(a, "PROXY", "RELOAD") == b"OK"
    assert is_throttled(call(a, "GET", "k"), "heavy")   # still owed
    (s.dir / "rules.ini").write_text(text.replace("1kb/s", "1gb/s"))
    assert call(a, "PROXY", "RELOAD") == b"OK"
    assert a.get("k") is not None   # a changed rule starts afresh


def test_time_queued_behind_another_clients_command_is_not_charged(redis_factory,
                                                                    sluice_factory):
    """One shared connection: a victim's GETs sent while an aggressor's
    big LRANGE runs wait behind it on that connection; their service
    time starts when the LRANGE's reply is in, so the victim (10ms/s of
    Redis) is charged microseconds, not the LRANGE's milliseconds."""
    import time
    from helpers import RawConn
    srv = redis_factory("--slowlog-log-slower-than", "0")
    direct = srv.client()
    for i in range(50):
        direct.rpush("big", *[b"v%07d" % (i * 10000 + j) for j in range(10000)])
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit victim]
match_name = victim
cost = redis_time
rate = 10ms/s
action = reject
""", srv=srv, backend_connections=1)
    victim = RawConn(s.port, timeout=30)
    victim.send_command("CLIENT", "SETNAME", "victim")
    assert victim.read_reply() == "OK"
    direct.slowlog_reset()
    aggressor = RawConn(s.port, timeout=30)
    aggressor.send_command("LRANGE", "big", "0", "-1")
    time.sleep(0.005)   # the LRANGE first on the connection
    for _ in range(3):
        victim.send_command("GET", "k")
    assert victim.read_replies(3, timeout=30) == [None, None, None]
    assert len(aggressor.read_reply(timeout=30)) == 500000
    took = [e["duration"] for e in direct.slowlog_get(128) if b"LRANGE" in e["command"]]
    if not took or took[0] < 15000:
        pytest.skip(f"LRANGE took {took} us in Redis: too quick to tell")
    r = rule_counters(s)["victim"]
    assert r["charged"] < took[0] / 2, (r, took)
    victim.send_command("GET", "k")
    assert victim.read_reply() is None   # not in debt
    victim.close()
    aggressor.close()
