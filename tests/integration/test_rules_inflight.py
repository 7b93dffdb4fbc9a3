"""Concurrency limits (issue 33, item 3): max_inflight and max_blocked per
subject, counted against Redis's own view of what it is running (INFO
clients blocked_clients: a WAIT without replicas, or a BLPOP on an empty
list, stays blocked in Redis until its timeout or a push), waiting in
order (action = delay) or refused (-THROTTLED), slots freed by replies,
by a client that leaves, kept over a reload, and checked by sluice -t."""

import threading
import time

import pytest

from helpers import Err, RawConn, SLOW, wait_until
from test_rules import call, is_throttled, rule_counters, run_check, start_with_rules


def blocked_in_redis(srv):
    return int(srv.client().info("clients")["blocked_clients"])


def blocked_ids(srv):
    """Redis's ids of its clients blocked now (CLIENT LIST flags=b)."""
    out = set()
    for line in srv.client().execute_command("CLIENT", "LIST").decode().splitlines():
        f = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        if "b" in f.get("flags", ""):
            out.add(f["id"])
    return out


class Sampler:
    """The most clients Redis had blocked at once, sampled until stopped."""

    def __init__(self, srv):
        self.srv = srv
        self.most = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        c = self.srv.client()
        while not self.stop.is_set():
            self.most = max(self.most, int(c.info("clients")["blocked_clients"]))
            time.sleep(0.005)

    def done(self):
        self.stop.set()
        self.t.join()
        return self.most


INFLIGHT_RULES = """
[limit waits]
commands = WAIT
max_inflight = 2
per = {per}
action = {action}
"""


def test_max_inflight_never_more_than_n_in_redis(redis_factory, sluice_factory):
    """8 clients of one address send a WAIT each (blocked 0.4 s in Redis:
    no replica answers): at most 2 are ever in Redis, the rest wait in
    sluice; every one is answered, and what a client sent after its WAIT
    comes after it."""
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              INFLIGHT_RULES.format(per="ip", action="delay"))
    sampler = Sampler(srv)
    conns = [RawConn(s.port, timeout=30 * SLOW) for _ in range(8)]
    for i, c in enumerate(conns):
        c.send_command("WAIT", "1", "400")
        c.send_command("ECHO", str(i))
    for i, c in enumerate(conns):
        assert c.read_replies(2, timeout=30 * SLOW) == [0, str(i).encode()]
        c.close()
    most = sampler.done()
    assert most == 2, most
    r = rule_counters(s)["waits"]
    assert r["max_inflight"] == "2" and r["max_blocked"] == "off" and r["rate"] == "off", r
    assert r["inflight_waits"] >= 5, r
    assert r["inflight_now"] == 0 and r["blocked_now"] == 0, r


def test_others_are_not_held_up(redis_factory, sluice_factory):
    """While the WAITs of clients named busy fill their name's 2 slots
    and more wait, another client's WAIT (its own slots) and a GET go at
    once."""
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              INFLIGHT_RULES.format(per="name", action="delay"))
    busy = []
    for _ in range(4):
        b = RawConn(s.port, timeout=30 * SLOW)
        b.send_command("CLIENT", "SETNAME", "busy")
        b.send_command("WAIT", "1", "3000")
        busy.append(b)
    wait_until(lambda: blocked_in_redis(srv) == 2, 5 * SLOW, msg="two WAITs in Redis")
    wait_until(lambda: rule_counters(s)["waits"]["inflight_waits"] >= 1, 5 * SLOW,
               msg="the third waits in sluice")
    other = s.client()
    assert other.execute_command("WAIT", "1", "10") == 0
    assert other.get("k") is None
    assert blocked_in_redis(srv) == 2   # the busy clients' two still there
    for b in busy:
        b.close()


def test_reject_answers_throttled_and_frees_the_slot(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              INFLIGHT_RULES.format(per="client", action="reject")
                              .replace("max_inflight = 2", "max_inflight = 1"))
    with RawConn(s.port, timeout=10 * SLOW) as c:
        c.send_command("WAIT", "1", "300")
        c.send_command("WAIT", "1", "300")
        c.send_command("ECHO", "after")
        first, second, third = c.read_replies(3, timeout=10 * SLOW)
    assert first == 0
    assert isinstance(second, Err) and is_throttled(second, "waits"), second
    assert third == b"after"
    cl = s.client()
    assert cl.execute_command("WAIT", "1", "10") == 0   # its slot came back
    r = rule_counters(s)["waits"]
    assert r["rejected"] == 1 and r["inflight_now"] == 0, r


BLOCKED_RULES = """
[limit pops]
commands = BLPOP
max_blocked = {n}
per = rule
action = delay
"""


def test_max_blocked_client_leaving_frees_its_slot_and_reload_changes_limit(
        redis_factory, sluice_factory):
    """max_blocked = 1 for everyone: a second BLPOP waits in sluice while
    the first blocks in Redis; the first client leaving lets it in. A
    reload to max_blocked = 2 lets a third in at once, the state kept."""
    srv, s = start_with_rules(redis_factory, sluice_factory, BLOCKED_RULES.format(n=1))
    a = RawConn(s.port, timeout=30 * SLOW)
    a.send_command("BLPOP", "qa", "0")
    wait_until(lambda: blocked_in_redis(srv) == 1, 5 * SLOW, msg="a blocks")
    b = RawConn(s.port, timeout=30 * SLOW)
    b.send_command("BLPOP", "qb", "0")
    wait_until(lambda: rule_counters(s)["pops"]["inflight_waits"] == 1, 5 * SLOW,
               msg="b waits in sluice")
    assert blocked_in_redis(srv) == 1
    assert rule_counters(s)["pops"]["blocked_now"] == 1
    a_ids = blocked_ids(srv)
    a.close()   # its BLPOP leaves Redis with it: b's goes in
    wait_until(lambda: len(blocked_ids(srv) - a_ids) == 1, 5 * SLOW, msg="b's BLPOP in Redis")
    assert blocked_in_redis(srv) == 1
    (s.dir / "rules.ini").write_text(BLOCKED_RULES.format(n=2))
    assert call(s.client(), "PROXY", "RELOAD") == b"OK"
    c = RawConn(s.port, timeout=30 * SLOW)
    c.send_command("BLPOP", "qc", "0")
    wait_until(lambda: blocked_in_redis(srv) == 2, 5 * SLOW, msg="c goes in beside b")
    r = rule_counters(s)["pops"]
    assert r["blocked_now"] == 2 and r["max_blocked"] == "2", r
    d = RawConn(s.port, timeout=30 * SLOW)
    d.send_command("BLPOP", "qd", "0")
    wait_until(lambda: rule_counters(s)["pops"]["inflight_waits"] == 2, 5 * SLOW,
               msg="d waits")
    assert blocked_in_redis(srv) == 2
    before = blocked_ids(srv)
    srv.client().rpush("qb", "x")
    assert b.read_reply() == [b"qb", b"x"]
    wait_until(lambda: len(blocked_ids(srv) - before) == 1 and blocked_in_redis(srv) == 2,
               5 * SLOW, msg="d's BLPOP in Redis once b's was answered")
    srv.client().rpush("qc", "y")
    srv.client().rpush("qd", "z")
    assert c.read_reply() == [b"qc", b"y"]
    assert d.read_reply() == [b"qd", b"z"]
    wait_until(lambda: rule_counters(s)["pops"]["blocked_now"] == 0, 5 * SLOW,
               msg="no slot left held")
    for conn in (b, c, d):
        conn.close()


def test_waiter_whose_client_leaves_takes_no_slot(redis_factory, sluice_factory):
    """A request waiting for a slot whose client leaves is dropped: the
    slot it would have had goes to the next waiter."""
    srv, s = start_with_rules(redis_factory, sluice_factory, BLOCKED_RULES.format(n=1))
    a = RawConn(s.port, timeout=30 * SLOW)
    a.send_command("BLPOP", "qa", "0")
    wait_until(lambda: blocked_in_redis(srv) == 1, 5 * SLOW, msg="a blocks")
    b = RawConn(s.port, timeout=30 * SLOW)
    b.send_command("BLPOP", "qb", "0")
    c = RawConn(s.port, timeout=30 * SLOW)
    c.send_command("BLPOP", "qc", "0")
    wait_until(lambda: rule_counters(s)["pops"]["inflight_waits"] == 2, 5 * SLOW,
               msg="b and c wait")
    b.close()
    before = blocked_ids(srv)
    srv.client().rpush("qa", "1")
    assert a.read_reply() == [b"qa", b"1"]
    wait_until(lambda: len(blocked_ids(srv) - before) == 1, 5 * SLOW, msg="c's BLPOP in Redis")
    assert blocked_in_redis(srv) == 1
    srv.client().rpush("qb", "never")   # b's never went: nothing pops it
    srv.client().rpush("qc", "2")
    assert c.read_reply() == [b"qc", b"2"]
    assert srv.client().lrange("qb", 0, -1) == [b"never"]
    wait_until(lambda: rule_counters(s)["pops"]["blocked_now"] == 0, 5 * SLOW,
               msg="no slot left held")
    a.close()
    c.close()


def test_waiter_goes_on_when_a_reload_removes_its_rule(redis_factory, sluice_factory):
    """A rule removed by a reload limits nothing more: its waiter goes in,
    and the slots its requests held are let go as they finish."""
    srv, s = start_with_rules(redis_factory, sluice_factory, BLOCKED_RULES.format(n=1))
    a = RawConn(s.port, timeout=30 * SLOW)
    a.send_command("BLPOP", "qa", "0")
    wait_until(lambda: blocked_in_redis(srv) == 1, 5 * SLOW, msg="a blocks")
    b = RawConn(s.port, timeout=30 * SLOW)
    b.send_command("BLPOP", "qb", "0")
    wait_until(lambda: rule_counters(s)["pops"]["inflight_waits"] == 1, 5 * SLOW,
               msg="b waits")
    (s.dir / "rules.ini").write_text("[limit other]\ncommands = SET\nrate = 1/h\n")
    assert call(s.client(), "PROXY", "RELOAD") == b"OK"
    wait_until(lambda: blocked_in_redis(srv) == 2, 5 * SLOW, msg="b goes in")
    srv.client().rpush("qa", "1")
    srv.client().rpush("qb", "2")
    assert a.read_reply() == [b"qa", b"1"]
    assert b.read_reply() == [b"qb", b"2"]
    a.close()
    b.close()
    assert list(rule_counters(s)) == ["other"]


def test_dryrun_counts_and_holds_nothing(redis_factory, sluice_factory):
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              INFLIGHT_RULES.format(per="ip", action="delay")
                              .replace("max_inflight = 2", "max_inflight = 1\nmode = dryrun"))
    sampler = Sampler(srv)
    conns = [RawConn(s.port, timeout=10 * SLOW) for _ in range(3)]
    for c in conns:
        c.send_command("WAIT", "1", "300")
    for c in conns:
        assert c.read_reply(timeout=10 * SLOW) == 0
        c.close()
    assert sampler.done() == 3
    r = rule_counters(s)["waits"]
    assert r["dryrun_hits"] == 2 and r["inflight_waits"] == 0 and r["inflight_now"] == 0, r


def test_transaction_commands_take_no_slot(redis_factory, sluice_factory):
    """Redis queues a transaction's commands (it runs them at EXEC, which
    no rule limits): they take no slot and none is left held."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit one]
max_inflight = 1
action = reject
""")
    with RawConn(s.port, timeout=10 * SLOW) as c:
        for cmd in (("MULTI",), ("SET", "a", "1"), ("GET", "a"), ("EXEC",), ("GET", "a")):
            c.send_command(*cmd)
        replies = c.read_replies(5, timeout=10 * SLOW)
    assert replies[3] == ["OK", b"1"] and replies[4] == b"1", replies
    assert rule_counters(s)["one"]["inflight_now"] == 0


def test_request_refused_by_a_rate_rule_takes_no_slot(redis_factory, sluice_factory):
    """Slots are taken last: a request another rule refuses holds none,
    so the one slot stays free for the next request."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit conc]
max_inflight = 1
per = rule
action = reject

[limit sets]
commands = SET
rate = 1/h
burst = 1
""")
    c = s.client()
    assert c.set("a", "1") is True
    for _ in range(3):
        assert is_throttled(call(c, "SET", "a", "2"), "sets")
    assert c.get("a") == b"1"
    r = rule_counters(s)["conc"]
    assert r["inflight_now"] == 0 and r["rejected"] == 0 and r["admitted"] == 2, r


def test_subscriber_keeps_no_slot(redis_factory, sluice_factory):
    """A SUBSCRIBE gives its slot back once Redis confirms it: with one
    slot per connection, the subscribed connection's PING and
    UNSUBSCRIBE still go, and nothing is left held."""
    srv, s = start_with_rules(redis_factory, sluice_factory, """
[limit one]
max_inflight = 1
per = client
action = delay
""")
    with RawConn(s.port, timeout=10 * SLOW) as c:
        c.send_command("SUBSCRIBE", "ch")
        assert c.read_reply() == [b"subscribe", b"ch", 1]
        c.send_command("PING")
        assert c.read_reply() == [b"pong", b""]
        srv.client().publish("ch", "hello")
        assert c.read_reply() == [b"message", b"ch", b"hello"]
        c.send_command("UNSUBSCRIBE", "ch")
        assert c.read_reply() == [b"unsubscribe", b"ch", 0]
        c.send_command("PING")
        assert c.read_reply() == "PONG"
    wait_until(lambda: rule_counters(s)["one"]["inflight_now"] == 0, 5 * SLOW,
               msg="no slot left held")


def test_lost_backend_gives_slots_back(redis_factory, sluice_factory):
    """Redis going away with requests in it: their slots come back (the
    requests fail), and once Redis is back the subject's requests go."""
    srv, s = start_with_rules(redis_factory, sluice_factory,
                              BLOCKED_RULES.format(n=1))
    a = RawConn(s.port, timeout=30 * SLOW)
    a.send_command("BLPOP", "qa", "0")
    wait_until(lambda: blocked_in_redis(srv) == 1, 5 * SLOW, msg="a blocks")
    b = RawConn(s.port, timeout=30 * SLOW)
    b.send_command("BLPOP", "qb", "0")
    wait_until(lambda: rule_counters(s)["pops"]["inflight_waits"] == 1, 5 * SLOW,
               msg="b waits")
    port = srv.port
    srv.stop()
    assert isinstance(a.read_reply(timeout=10 * SLOW), Err)
    srv.start()
    assert srv.port == port
    # b's went in once a's slot came back: failed with the old Redis, or
    # blocks in the new one (or is on its way), which this push answers.
    srv.client().rpush("qb", "x")
    got = b.read_reply(timeout=10 * SLOW)
    assert got == [b"qb", b"x"] or isinstance(got, Err), got
    wait_until(lambda: rule_counters(s)["pops"]["blocked_now"] == 0, 10 * SLOW,
               msg="no slot left held")
    a.close()
    b.close()


@pytest.mark.parametrize("text,line,message", [
    ("[limit a]\nmax_inflight = 0\n", 2, "not a positive integer"),
    ("[limit a]\nmax_inflight = many\n", 2, "not a positive integer"),
    ("[limit a]\nmax_blocked = -1\n", 2, "not a positive integer"),
    ("[limit a]\nmax_inflight = 3\nscope = shared\n", 2, "max_inflight needs scope = local"),
    ("[limit a]\nmax_blocked = 3\nburst = 4\n", 3, "burst needs rate"),
])
def test_check_rejects_bad_concurrency_keys(tmp_path, text, line, message):
    p = run_check(tmp_path, text)
    assert p.returncode == 1, p.stderr
    assert f"rules.ini:{line}: " in p.stderr and message in p.stderr, p.stderr


def test_check_accepts_a_concurrency_rule_without_rate(tmp_path):
    p = run_check(tmp_path, "[limit a]\nmax_inflight = 4\nmax_blocked = 2\nper = user\n")
    assert p.returncode == 0, p.stderr
