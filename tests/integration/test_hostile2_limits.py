"""Hostile clients, second round (issue 19, findings 4 and 5): no rule is
skipped.

Every matching rule applies, however many match (no fixed count of local
or shared rules), and on every connection that can send commands Redis
runs: after UNSUBSCRIBE (RESP2 and RESP3), while subscribed in RESP3, on a
MONITOR connection, after RESET. A shared bucket's key keeps the whole
identity (a long CLIENT SETNAME name), so two clients never share a
bucket by a common prefix. PROXY RULES counters of the rule that decides
add up: matched = admitted + rejected + delayed.

The tests of RESET, RESP3 subscribers, CLIENT REPLY OFF and keys past the
16th passed before the fix too: they guard the rest of the class.
"""

import pytest

from helpers import Err, RawConn, SLOW, wait_until
from test_rules import (call, count_admitted, is_throttled, rule_counters, run_check,
                        start_with_rules)


def generous(name, scope="local"):
    """A rule that matches GET and never runs out within a test."""
    return f"""
[limit {name}]
commands = GET CLIENT|ID
rate = 100000/s
burst = 100000
scope = {scope}
"""


def tight(name, burst, scope="local", commands="GET CLIENT|ID"):
    """A rule whose BURST tokens are all a test gets (1 an hour after)."""
    return f"""
[limit {name}]
commands = {commands}
rate = 1/h
burst = {burst}
scope = {scope}
"""


def assert_adds_up(cnt, name, matched, admitted):
    """The rule that decides: each match was admitted or refused."""
    c = cnt[name]
    assert c["matched"] == matched, c
    assert c["admitted"] == admitted, c
    assert c["matched"] == c["admitted"] + c["rejected"] + c["delayed"], c


def count_raw(conn, n, ignore_status=False):
    """Read N replies to commands from CONN: (admitted, throttled). With
    IGNORE_STATUS, status lines (MONITOR's) are not replies."""
    ok = throttled = 0
    while ok + throttled < n:
        v = conn.read_reply(timeout=10 * SLOW)
        if ignore_status and isinstance(v, str) and not isinstance(v, Err):
            continue
        if isinstance(v, Err):
            assert is_throttled(v), v
            throttled += 1
        else:
            ok += 1
    return ok, throttled


# ------------------------------------------------------- how many rules match

def test_seventeen_local_rules_all_apply(redis_factory, sluice_factory):
    """The 17th matching local rule limits as the first would."""
    rules = "".join(generous(f"wide-{i}") for i in range(16)) + tight("last", 5)
    srv, s = start_with_rules(redis_factory, sluice_factory, rules)
    c = s.client()
    assert count_admitted(c, ("GET", "k"), 100) == 5
    cnt = rule_counters(s)
    assert_adds_up(cnt, "last", 100, 5)
    # The others matched every GET and gave a token to each that went.
    assert all(cnt[f"wide-{i}"]["matched"] == 100 and cnt[f"wide-{i}"]["admitted"] == 5
               for i in range(16))


def test_many_local_rules_all_apply(redis_factory, sluice_factory):
    """200 matching rules (more than a word of the rule bitmaps): the last
    one, and one in the middle, still limit."""
    rules = "".join(generous(f"wide-{i}") for i in range(198))
    rules += tight("middle", 7, commands="SET") + tight("last", 3)
    srv, s = start_with_rules(redis_factory, sluice_factory, rules)
    c = s.client()
    assert count_admitted(c, ("GET", "k"), 20) == 3
    assert count_admitted(c, ("SET", "k", "v"), 20) == 7
    cnt = rule_counters(s)
    assert_adds_up(cnt, "last", 20, 3)
    assert_adds_up(cnt, "middle", 20, 7)


def test_six_shared_rules_all_apply(redis_factory, sluice_factory):
    """The 5th and 6th matching shared rules (buckets in Redis) limit too,
    and a refusal gives the other shared rules' tokens back."""
    rules = "".join(generous(f"wide-{i}", "shared") for i in range(4))
    rules += tight("fifth", 8, "shared") + tight("sixth", 5, "shared")
    srv, s = start_with_rules(redis_factory, sluice_factory, rules)
    c = s.client()
    assert count_admitted(c, ("GET", "k"), 100) == 5
    cnt = rule_counters(s)
    assert_adds_up(cnt, "sixth", 100, 5)
    assert cnt["fifth"]["matched"] == 100 and cnt["fifth"]["rejected"] == 0
    # fifth gave a token to each GET sixth refused, and got it back.
    wait_until(lambda: rule_counters(s)["fifth"]["admitted"] == 5, 5 * SLOW,
               msg="fifth's refunds counted")


def test_local_and_shared_past_the_old_caps(redis_factory, sluice_factory):
    """17 local and 5 shared rules on one command: the tight local rule is
    last of the local ones, the tight shared rule last of the shared."""
    rules = "".join(generous(f"wide-{i}") for i in range(16)) + tight("local-last", 6)
    rules += "".join(generous(f"swide-{i}", "shared") for i in range(4))
    rules += tight("shared-last", 4, "shared")
    srv, s = start_with_rules(redis_factory, sluice_factory, rules)
    c = s.client()
    assert count_admitted(c, ("GET", "k"), 30) == 4
    cnt = rule_counters(s)
    assert_adds_up(cnt, "shared-last", 30, 4)
    # shared-last refused 26: local-last's tokens came back for each.
    assert cnt["local-last"]["admitted"] == 4 and cnt["local-last"]["rejected"] == 0


# ------------------------------------------------- which connections are limited

@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("leave", ["UNSUBSCRIBE", "PUNSUBSCRIBE", "RESET"])
def test_resp2_after_leaving_pubsub_is_limited(leave, pipelined, redis_factory, sluice_factory):
    """SUBSCRIBE, then leave pub/sub (UNSUBSCRIBE keeps the connection
    streaming unpaired, RESET pairs it again): GETs are limited."""
    srv, s = start_with_rules(redis_factory, sluice_factory, tight("gets", 10, commands="GET"))
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        sub = ("PSUBSCRIBE", "x*") if leave == "PUNSUBSCRIBE" else ("SUBSCRIBE", "x")
        args = (leave, sub[1]) if leave != "RESET" else (leave,)
        if pipelined:
            conn.send_command(*sub)
            conn.send_command(*args)
            for _ in range(100):
                conn.send_command("GET", "k")
            assert conn.read_reply()[0].lower() == sub[0].lower().encode()
            conn.read_reply()   # the unsubscribe confirmation, or +RESET
        else:
            conn.send_command(*sub)
            conn.read_reply()
            conn.send_command(*args)
            conn.read_reply()
            for _ in range(100):
                conn.send_command("GET", "k")
        assert count_raw(conn, 100) == (10, 90)
    assert_adds_up(rule_counters(s), "gets", 100, 10)


def test_resp3_subscribed_is_limited(redis_factory, sluice_factory):
    """RESP3 lets a subscribed client run any command: the rules apply."""
    srv, s = start_with_rules(redis_factory, sluice_factory, tight("gets", 10, commands="GET"))
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        conn.call("HELLO", "3")
        conn.send_command("SUBSCRIBE", "x")
        assert conn.read_reply()[0] == b"subscribe"
        for _ in range(50):
            conn.send_command("GET", "k")
        assert count_raw(conn, 50) == (10, 40)
        # After UNSUBSCRIBE too.
        conn.send_command("UNSUBSCRIBE", "x")
        assert conn.read_reply()[0] == b"unsubscribe"
        for _ in range(20):
            conn.send_command("GET", "k")
        assert count_raw(conn, 20) == (0, 20)
    assert_adds_up(rule_counters(s), "gets", 70, 10)


def test_resp2_subscribed_commands_are_limited(redis_factory, sluice_factory):
    """While subscribed (RESP2), SUBSCRIBE and PING run in Redis: limited."""
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              tight("pings", 3, commands="PING SUBSCRIBE"))
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        conn.send_command("SUBSCRIBE", "x")
        conn.read_reply()
        for _ in range(10):
            conn.send_command("PING")
        assert count_raw(conn, 10) == (2, 8)
        assert is_throttled(conn.call("SUBSCRIBE", "y"))
    assert_adds_up(rule_counters(s), "pings", 12, 3)


def test_monitor_connection_is_limited(redis_factory, sluice_factory):
    """A MONITOR connection's commands (CLIENT ID, PING...) are limited."""
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              tight("ids", 5, commands="CLIENT|ID"))
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        assert conn.call("MONITOR") == "OK"
        for _ in range(30):
            conn.send_command("CLIENT", "ID")
        assert count_raw(conn, 30, ignore_status=True) == (5, 25)
    assert_adds_up(rule_counters(s), "ids", 30, 5)


def test_reply_off_is_limited(redis_factory, sluice_factory):
    """Under CLIENT REPLY OFF commands still run in Redis: limited, the
    refusals unanswered, as any reply there."""
    srv, s = start_with_rules(redis_factory, sluice_factory, tight("incrs", 5, commands="INCR"))
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        conn.send_command("CLIENT", "REPLY", "OFF")
        for _ in range(20):
            conn.send_command("INCR", "n")
        assert conn.call("CLIENT", "REPLY", "ON") == "OK"
        assert conn.call("GET", "n") == b"5"
    assert_adds_up(rule_counters(s), "incrs", 20, 5)


def test_delay_rule_on_subscribed_connection(redis_factory, sluice_factory):
    """action = delay holds an unsubscribed client's GET and then sends
    it, in order, on its streaming connection."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit slow-gets]
commands = GET
rate = 20/s
burst = 1
action = delay
max_delay = 10s
""")
    srv.client().set("k", "v")
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        conn.send_command("SUBSCRIBE", "x")
        conn.read_reply()
        conn.send_command("UNSUBSCRIBE", "x")
        conn.read_reply()
        for _ in range(5):
            conn.send_command("GET", "k")
        assert conn.read_replies(5, timeout=10 * SLOW) == [b"v"] * 5
    cnt = rule_counters(s)["slow-gets"]
    assert cnt["delayed"] == 4 and cnt["admitted"] == 1
    assert cnt["matched"] == cnt["admitted"] + cnt["rejected"] + cnt["delayed"]


# ------------------------------------------------------ what a bucket key holds

def test_shared_per_name_long_names_keep_their_buckets(redis_factory, sluice_factory):
    """Two client names that share their first 300 bytes have buckets of
    their own in Redis: one client cannot spend the other's tokens."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit per-name]
commands = GET
rate = 1/h
burst = 2
per = name
scope = shared
""")
    prefix = "n" * 300
    a, b = s.client(), s.client()
    assert a.client_setname(prefix + "a")
    assert b.client_setname(prefix + "b")
    assert count_admitted(a, ("GET", "k"), 5) == 2
    assert count_admitted(b, ("GET", "k"), 5) == 2
    assert_adds_up(rule_counters(s), "per-name", 10, 4)
    # Each bucket key is of bounded length.
    keys = srv.client().keys("sluice:bucket:*")
    assert len(keys) == 2 and all(len(k) < 256 for k in keys)


def test_long_rule_name_is_refused_at_load(redis_factory, sluice_factory, tmp_path):
    """A rule name too long for a bucket key and the -THROTTLED reply is
    an error FILE:LINE, for sluice -t and for PROXY RELOAD alike."""
    srv, s = start_with_rules(redis_factory, sluice_factory, tight("ok", 1))
    (s.dir / "rules.ini").write_text("\n" + tight("r" * 150, 1))
    reply = call(s.client(), "PROXY", "RELOAD")
    assert isinstance(reply, Err) and "rules.ini:3:" in reply and "name" in reply, reply
    assert "ok" in rule_counters(s)
    p = run_check(tmp_path, "\n" + tight("r" * 101, 1))
    assert p.returncode == 1 and "rules.ini:3: rule name longer than 100 bytes" in p.stderr, p.stderr
    assert run_check(tmp_path, "\n" + tight("r" * 100, 1)).returncode == 0


@pytest.mark.parametrize("nkeys", [17, 70])
def test_key_past_the_first_sixteen_matches(nkeys, redis_factory, sluice_factory):
    """A keyed rule matches a request by any of its keys, however many come
    before the one that matches."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit secrets]
keys = secret:*
rate = 1/h
burst = 2
""")
    c = s.client()
    keys = [f"k{i}" for i in range(nkeys - 1)] + ["secret:1"]
    assert count_admitted(c, ["MGET"] + keys, 5) == 2
    mset = [x for k in keys for x in (k, "v")]
    assert count_admitted(c, ["MSET"] + mset, 5) == 0
    assert_adds_up(rule_counters(s), "secrets", 10, 2)


def test_a_shared_bucket_written_by_a_client_refills_in_bounded_time(redis_factory, sluice_factory):
    """Any client that may write keys can write a shared bucket: a debt of
    -1e15 tokens and a time stamp far in the future used to hold the
    bucket empty for good (every SET of that IP throttled with
    retry_after_ms=9223372036854776). The bucket's script now refills from
    Redis's clock and owes at most one burst plus the longest wait: the
    victim is admitted again within a few refill intervals."""
    from test_rules import count_admitted, start_with_rules
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit perip]
commands = SET
rate = 50/s
burst = 5
per = ip
scope = shared
""")
    c = s.client()
    with srv.client() as d:
        d.hset("sluice:bucket:{perip}:ip:127.0.0.1",
               mapping={"tokens": "-1e15", "ts_us": "99999999999999999"})
        d.persist("sluice:bucket:{perip}:ip:127.0.0.1")
    wait_until(lambda: count_admitted(c, ("SET", "a", "b"), 1) == 1, 3 * SLOW,
               msg="the SETs of that IP to be admitted again")
