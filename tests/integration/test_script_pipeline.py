"""A client that pipelines scripts and plain commands (job queues, Lua rate
limiters, lock libraries) through sluice.

A client's scripts run on script connections, away from the shared pool
connections, so that a long script holds no other client's commands. The
client's next plain commands follow its script onto that script connection
while the script is out, instead of waiting in sluice for its reply: Redis
runs them after it, in order, as on the client's own connection. These tests
prove the order, the following, and that nobody else waits behind a long
script any longer than before. Every socket has a timeout.
"""

import random
import threading
import time

import pytest

from helpers import SLOW, Err, busy_eval, encode_command, wait_until

INCR = "return redis.call('INCR', KEYS[1])"


def inflight(s, prefix):
    """Requests in flight on sluice S's backend connections whose PROXY INFO
    names start with PREFIX (backend_scripts_, backend_...)."""
    total = 0
    for name, value in s.info().items():
        if name.startswith(prefix):
            fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f)
            total += int(fields.get("inflight", 0))
    return total


def kill_script(s, runner):
    with s.raw() as killer:
        assert killer.call("SCRIPT", "KILL", timeout=5 * SLOW) == "OK"
    killed = runner.read_reply(timeout=5 * SLOW)
    assert isinstance(killed, Err) and "killed" in killed.lower(), killed


def run_mixed(s, key, sha, seed, rounds, failures):
    """One client: ROUNDS pipelines of 100 commands mixing an INCR script
    (EVALSHA and EVAL), INCR and GET on KEY; every reply is what Redis gives
    when they run in the order sent. Appends what went wrong to FAILURES."""
    rng = random.Random(seed)
    n = 0
    try:
        with s.raw(timeout=10 * SLOW) as c:
            for _ in range(rounds):
                cmds, want = [], []
                for _ in range(100):
                    kind = rng.choice(("evalsha", "evalsha", "eval", "incr", "get", "get"))
                    if kind == "get":
                        cmds.append(encode_command("GET", key))
                        want.append(str(n).encode() if n else None)
                        continue
                    n += 1
                    cmds.append(encode_command("EVALSHA", sha, "1", key) if kind == "evalsha"
                                else encode_command("EVAL", INCR, "1", key)
                                if kind == "eval" else encode_command("INCR", key))
                    want.append(n)
                c.send(b"".join(cmds))
                got = c.read_replies(len(cmds), timeout=10 * SLOW)
                if got != want:
                    bad = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
                    failures.append(f"{key}: reply {bad} is {got[bad]!r}, want {want[bad]!r}")
                    return
    except Exception as e:  # noqa: BLE001 - reported by the test
        failures.append(f"{key}: {e!r}")


def test_incr_script_then_get_sees_its_own_increment(redis_factory, sluice_factory):
    """Four clients at once (sharing one script connection and one pool
    connection), each pipelining its INCR script, INCR and GET on a key of
    its own in random mixes: every GET sees every increment sent before it,
    and none sent after."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    sha = srv.client().script_load(INCR)
    failures = []
    threads = [threading.Thread(target=run_mixed, args=(s, f"mix:{i}", sha, i, 30, failures))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert failures == []


@pytest.mark.parametrize("resp", [2, 3])
def test_commands_follow_their_script_without_waiting_for_its_reply(redis_factory,
                                                                     sluice_factory, resp):
    """The plain commands a client pipelines behind its script are sent on
    the script's connection at once, not held in sluice until the script's
    reply is in: while a script runs on, they are in flight there (before,
    only the script was, and each switch cost a round trip). Their replies
    come after the script's, in order."""
    srv = redis_factory("--busy-reply-threshold", "100")
    srv.client().set("follow:k", "v0")
    s = sluice_factory(srv.port)
    with s.raw() as runner:
        if resp == 3:
            runner.call("HELLO", "3")
        runner.send(encode_command("EVAL", "while true do end", "0") +
                    encode_command("GET", "follow:k") + encode_command("SET", "follow:k", "v1") +
                    encode_command("GET", "follow:k"))
        # (in RESP3, the connection's own HELLO 3 may be out there too)
        wait_until(lambda: inflight(s, "backend_scripts") >= 4, 5 * SLOW,
                   msg="the script and the 3 commands behind it in flight on its connection")
        assert inflight(s, "backend_0") + inflight(s, "backend_resp3_0") == 0
        kill_script(s, runner)
        assert runner.read_replies(3, timeout=5 * SLOW) == [b"v0", "OK", b"v1"]
        assert runner.call("GET", "follow:k") == b"v1"
    wait_until(lambda: inflight(s, "backend_") == 0, 5 * SLOW, msg="nothing left in flight")


def test_others_not_delayed_by_a_2s_script(redis_factory, sluice_factory):
    """A client's script keeps Redis busy for 2 s, its plain commands
    queued behind it. Another client, on the same script connection (it
    ran a script before), sends plain commands meanwhile: they reach Redis
    and get its -BUSY at once, as directly, never wait behind the script.
    The script's own client gets its replies after the script, in order
    (on its own connection Redis would run them after it too)."""
    srv = redis_factory("--busy-reply-threshold", "100")
    s = sluice_factory(srv.port)
    with s.raw(timeout=10 * SLOW) as runner, s.raw() as other, s.raw() as probe:
        assert other.call("EVAL", INCR, "1", "busy:other") == 1   # its script connection too
        runner.send(encode_command(*busy_eval(2_000_000)) + encode_command("INCR", "busy:k") +
                    encode_command("GET", "busy:k"))
        wait_until(lambda: isinstance(probe.call("PING", timeout=5 * SLOW), Err), 5 * SLOW,
                   msg="Redis busy with the script")
        other.send(encode_command("GET", "busy:other") + encode_command("INCR", "busy:other") +
                   encode_command("PING"))
        got = other.read_replies(3, timeout=1.5)   # the script runs 2 s: BUSY came before
        assert all(isinstance(g, Err) and g.startswith("BUSY") for g in got), got
        assert runner.read_replies(3, timeout=10 * SLOW) == [1, 1, b"1"]
        assert other.call("GET", "busy:other") == b"1"


def test_stall_detour_fires_while_commands_follow_a_long_script(redis_factory, sluice_factory):
    """A long script with its client's plain commands behind it on the
    script connection: once the connection is stalled, another client's
    script goes around it on a connection of its own and gets Redis's
    -BUSY (stalled_detours counts it). The script's own client's later
    command stays behind its script (going around would overtake it) and
    gets its reply after the kill, not -BUSY."""
    srv = redis_factory("--busy-reply-threshold", "100")
    s = sluice_factory(srv.port)
    with s.raw() as runner, s.raw() as other:
        runner.send(encode_command("EVAL", "while true do end", "0") +
                    encode_command("SET", "stall:k", "1"))
        wait_until(lambda: inflight(s, "backend_scripts") >= 2, 5 * SLOW,
                   msg="the script and the SET behind it in flight")
        with s.raw() as probe:   # Redis says BUSY past 100 ms: sluice's stall is 100 ms too
            wait_until(lambda: isinstance(probe.call("PING", timeout=5 * SLOW), Err), 5 * SLOW,
                       msg="Redis busy with the script")
        time.sleep(0.15)
        reply = other.call("EVAL", "return 1", "0", timeout=5 * SLOW)
        assert isinstance(reply, Err) and reply.startswith("BUSY"), reply
        assert int(s.info()["stalled_detours"]) >= 1
        runner.send(encode_command("INCR", "stall:k"))
        kill_script(s, runner)
        assert runner.read_replies(2, timeout=5 * SLOW) == ["OK", 2]
        assert other.call("EVAL", "return 2", "0") == 2
