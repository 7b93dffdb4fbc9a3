"""RESP3 end to end: a client that said HELLO 3 gets every reply in RESP3,
pushes (pub/sub, tracking invalidations) in order with its replies, and
never a reply shaped for a RESP2 client (nor the other way round). Raw
sockets check exact bytes against a real Redis; tests/node/ drives the
real RESP3 clients node-redis and ioredis (installed by `npm ci`)."""

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from helpers import SLOW, RawConn, encode_command, parse_reply

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


def _hello3(c):
    c.send_command("HELLO", "3")
    reply = c.read_reply()
    assert isinstance(reply, tuple) and reply[0] == "map", reply
    fields = dict(zip(reply[1][0::2], reply[1][1::2]))
    assert fields[b"proto"] == 3
    return fields


def _frames(c, n, timeout=5 * SLOW):
    """N raw frames (replies or pushes) from C."""
    return [c.read_reply_raw(timeout) for _ in range(n)]


def _same_on_both(sluice, ref, steps, count_from_ref=True):
    """Run STEPS on a RESP3 connection to sluice and one to Redis. Each step
    is (bytes to send, frames to read): pipelined commands, with as many
    frames as Redis sends for them. Returns the frames of sluice, after
    asserting they are Redis's, byte for byte."""
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as c:
            _hello3(c)
            frames = []
            for data, n in steps:
                if callable(data):
                    data(srv)
                    continue
                c.send(data)
                frames.append(_frames(c, n))
            got[name] = frames
    for i, (a, b) in enumerate(zip(got["sluice"], got["redis"])):
        assert a == b, f"step {i} ({steps[i][0]!r}): sluice {a!r} vs redis {b!r}"
    return got["sluice"]


def _cmds(*cmds):
    return b"".join(encode_command(*c) for c in cmds)


def _publish(channel, message):
    def run(srv):
        with srv.raw() as p:
            assert p.call("PUBLISH", channel, message) == 1
    return run


# ---- exact bytes against Redis ------------------------------------------


def test_resp3_types_same_as_redis(sluice, ref, clean, backend):
    for srv in (backend, ref):
        c = srv.client()
        c.hset("h", mapping={"f": "v", "g": "w"})
        c.sadd("s", "m")
        c.zadd("z", {"a": 1.5})
        c.close()
    _same_on_both(sluice, ref, [
        (_cmds(("HGETALL", "h"), ("SMEMBERS", "s"), ("ZSCORE", "z", "a"), ("GET", "nokey"),
               ("HGETALL", "nokey"), ("CONFIG", "GET", "maxmemory-policy"),
               ("EVAL", "redis.setresp(3); return true", "0"),
               ("EVAL", "redis.setresp(3); return false", "0"),
               ("EVAL", "redis.setresp(3); return {double=3.25}", "0"),
               ("ZRANGE", "z", "0", "-1", "WITHSCORES"), ("CLIENT", "GETNAME")), 11),
    ])


def test_subscribed_client_runs_commands_in_order(sluice, ref, clean):
    """A RESP3 SUBSCRIBE is answered by pushes only; commands after it pair
    with their own replies, sluice's own (CLIENT GETNAME) included."""
    frames = _same_on_both(sluice, ref, [
        (_cmds(("SUBSCRIBE", "a", "b"), ("CLIENT", "GETNAME"), ("GET", "x"), ("PING",)), 5),
        (_publish("a", "hi"), 0),
        (_cmds(("PING", "after")), 2),
        (_cmds(("UNSUBSCRIBE", "a", "b"), ("CLIENT", "GETNAME")), 3),
        # (one channel left for UNSUBSCRIBE: the order of several is Redis's hash order)
        (_cmds(("PSUBSCRIBE", "p*"), ("SUBSCRIBE", "c"), ("UNSUBSCRIBE",), ("CLIENT", "GETNAME"),
               ("PUNSUBSCRIBE",), ("CLIENT", "GETNAME")), 6),
        (_cmds(("UNSUBSCRIBE",), ("CLIENT", "GETNAME")), 2),
        (_cmds(("SSUBSCRIBE", "s1", "s2"), ("SUNSUBSCRIBE", "s1"), ("SUNSUBSCRIBE",),
               ("CLIENT", "GETNAME")), 5),
        (_cmds(("SUBSCRIBE", "q"), ("RESET",), ("GET", "x"), ("CLIENT", "GETNAME")), 4),
    ])
    assert frames[0][2] == b"_\r\n" and frames[0][4] == b"+PONG\r\n"
    assert frames[1][0].startswith(b">3\r\n$7\r\nmessage\r\n")
    assert frames[-1][-2:] == [b"$-1\r\n", b"$-1\r\n"]   # RESET: RESP2 again


def test_own_message_inside_exec_keeps_later_replies(sluice, ref, clean):
    """A RESP3 client subscribed to ch publishes to ch inside MULTI: Redis
    7.0 writes the message push inside EXEC's array (*1, the push, then
    :1). sluice frames the push as the array's element, so the PUBLISH
    count was taken for PING's reply and PING's own +PONG dropped ("sent
    a reply nobody asked for"). A queued SUBSCRIBE's confirmation, the
    value of its slot, still counts."""
    script = _cmds(("SUBSCRIBE", "ch"), ("MULTI",), ("PUBLISH", "ch", "x"), ("EXEC",),
                   ("PING",))
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as c:
            _hello3(c)
            c.send(script)
            got[name] = c.read_all_until_eof(1.0 * SLOW)[0]
            c.send(_cmds(("MULTI",), ("SUBSCRIBE", "d"), ("PUBLISH", "d", "y"), ("EXEC",),
                         ("PING",)))
            got[name] += c.read_all_until_eof(1.0 * SLOW)[0]
    assert got["sluice"] == got["redis"]
    assert got["redis"].endswith(b"+PONG\r\n")


def test_own_message_inside_exec_keeps_slot_replies_in_place(sluice, ref, clean):
    """The same message push inside EXEC's array, with commands sluice
    answers itself (CLIENT ID, CLIENT GETNAME) queued after the PUBLISH:
    their answers must replace their own elements. Counting the push as an
    element put sluice's client id in place of PUBLISH's count and shifted
    every later answer by one."""
    script = _cmds(("SUBSCRIBE", "ch"), ("MULTI",), ("PUBLISH", "ch", "x"), ("CLIENT", "ID"),
                   ("CLIENT", "GETNAME"), ("PUBLISH", "ch", "y"), ("CLIENT", "ID"), ("EXEC",),
                   ("PING",))
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as c:
            my_id = _hello3(c)[b"id"]
            c.send(script)
            got[name] = c.read_all_until_eof(1.0 * SLOW)[0]
            got[name] = got[name].replace(b":%d\r\n" % my_id, b":<my id>\r\n")
    push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n"
    assert got["sluice"] == got["redis"]
    assert (b"*5\r\n" + push + b"x\r\n:1\r\n:<my id>\r\n_\r\n" + push +
            b"y\r\n:1\r\n:<my id>\r\n+PONG\r\n") in got["sluice"]


def test_pushes_under_client_reply_off(sluice, ref, clean):
    """RESP3 pushes (confirmations, messages, invalidations) still come
    under CLIENT REPLY OFF, as from Redis; replies do not."""
    def touch(srv):
        with srv.raw() as p:
            assert p.call("PUBLISH", "ch", "hi") == 1
            assert p.call("SET", "rk", "1") == "OK"
    frames = _same_on_both(sluice, ref, [
        (_cmds(("CLIENT", "TRACKING", "ON"), ("GET", "rk"), ("CLIENT", "REPLY", "OFF"),
               ("SUBSCRIBE", "ch"), ("GET", "x")), 3),
        (touch, 0),
        (_cmds(("PING",)), 2),
        (_cmds(("CLIENT", "REPLY", "ON"), ("PING",)), 2),
    ])
    assert frames[2] == [b"+OK\r\n", b"+PONG\r\n"]


def test_resp2_pubsub_messages_under_client_reply_off(sluice, ref, clean):
    """RESP2 too: confirmations and messages still come under CLIENT REPLY
    OFF (Redis's pubsub unit, keyspace notifications), a PING's reply not."""
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as c:
            c.send(_cmds(("CLIENT", "REPLY", "OFF"), ("PSUBSCRIBE", "*"), ("PING",)))
            frames = _frames(c, 1)
            with srv.raw() as p:
                assert p.call("PUBLISH", "ch", "hi") == 1
            frames += _frames(c, 1)
            c.send(_cmds(("PUNSUBSCRIBE",)))
            frames += _frames(c, 1)
            got[name] = frames
    assert got["sluice"] == got["redis"]
    assert got["sluice"][1] == b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$2\r\nhi\r\n"


def test_subscribe_errors_and_multi_pair_as_replies(sluice, ref, clean):
    _same_on_both(sluice, ref, [
        (_cmds(("SUBSCRIBE",), ("PING",)), 2),
        (_cmds(("MULTI",), ("SUBSCRIBE", "m"), ("GET", "x"), ("EXEC",), ("PING",)), 5),
        (_cmds(("UNSUBSCRIBE",), ("PING",)), 2),
    ])


def test_tracking_invalidation_in_order(sluice, ref, clean):
    def touch(srv):
        with srv.raw() as p:
            assert p.call("SET", "k", "2") == "OK"
    frames = _same_on_both(sluice, ref, [
        (_cmds(("CLIENT", "TRACKING", "ON"), ("GET", "k")), 2),
        (touch, 0),
        (_cmds(("PING",)), 2),
    ])
    assert frames[1] == [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", b"+PONG\r\n"]


@pytest.mark.parametrize("target_resp", [2, 3])
def test_tracking_redirect_to_a_client_with_no_session(sluice, ref, clean, target_resp):
    """CLIENT TRACKING ... REDIRECT names a client that has done nothing
    but HELLO and CLIENT ID (Redis's own tracking test): sluice gives it a
    connection of its own for Redis to redirect to, and the invalidation
    reaches it as Redis would send it (a push in RESP3; in RESP2 a message
    on __redis__:invalidate, once it subscribes)."""
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as target, srv.raw() as tracker, srv.raw() as writer:
            if target_resp == 3:
                _hello3(target)
            else:
                target.send_command("SUBSCRIBE", "__redis__:invalidate")
                _frames(target, 1)
            target_id = target.call("CLIENT", "ID") if target_resp == 3 else None
            if target_id is None:   # a subscribed RESP2 client cannot say CLIENT ID
                with srv.raw() as probe:
                    target_id = next(int(l.split(b"id=")[1].split()[0])
                                     for l in probe.call("CLIENT", "LIST").splitlines()
                                     if b"cmd=subscribe" in l)
            assert tracker.call("CLIENT", "TRACKING", "ON", "REDIRECT", str(target_id)) == "OK"
            assert tracker.call("GET", "k") is None
            assert writer.call("SET", "k", "1") == "OK"
            got[name] = _frames(target, 1)
    assert got["sluice"] == got["redis"]
    assert b"invalidate" in got["sluice"][0]


def test_private_connection_follows_hello(sluice, ref, clean):
    """A private connection speaks its client's protocol, also when HELLO
    changes it in the middle of a session (and after RESET)."""
    _same_on_both(sluice, ref, [
        (_cmds(("SELECT", "1"), ("HSET", "h", "f", "v"), ("HGETALL", "h")), 3),
        (_cmds(("GET", "nokey"),), 1),
        (_cmds(("MULTI",), ("HGETALL", "h"), ("GET", "nokey"), ("EXEC",)), 4),
        (_cmds(("RESET",), ("HGETALL", "h"), ("SELECT", "1"), ("HGETALL", "h")), 4),
    ])
    with sluice.raw() as c:
        c.send(_cmds(("SELECT", "2"), ("HELLO", "3")))
        c.read_replies(2)
        c.send(_cmds(("GET", "nokey"), ("HELLO", "2"), ("GET", "nokey"), ("HELLO", "3"),
                     ("GET", "nokey")))
        f = _frames(c, 5)
        assert (f[0], f[2], f[4]) == (b"_\r\n", b"$-1\r\n", b"_\r\n"), f


def test_hello_refused_where_redis_or_sluice_cannot_switch(sluice, ref, clean):
    # RESP2 pub/sub: as Redis.
    for srv in (sluice, ref):
        with srv.raw() as c:
            # (one at a time: the order of sluice's own replies in RESP2
            # pub/sub is another issue's)
            c.send(_cmds(("SUBSCRIBE", "a")))
            _frames(c, 1)
            c.send(_cmds(("HELLO", "3")))
            assert _frames(c, 1)[0].startswith(b"-ERR Can't execute 'hello'")
            c.send(_cmds(("PING",)))
            assert _frames(c, 1) == [b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"]


def _hello2_fields(frame):
    """HELLO 2's reply (a flat RESP2 array of 14) as a dict."""
    assert frame.startswith(b"*14\r\n"), frame
    flat = parse_reply(frame, 0)[0]
    return dict(zip(flat[0::2], flat[1::2]))


def test_hello_2_while_subscribed_in_resp3_as_redis(sluice, ref, clean):
    """Redis puts a RESP3 subscriber that says HELLO 2 in RESP2 pub/sub mode:
    messages come as RESP2 arrays, only the pub/sub commands run, and after
    the last UNSUBSCRIBE it is an ordinary RESP2 connection. Through sluice
    the same, frame for frame (HELLO's own reply aside: sluice's id)."""
    steps = [
        (_cmds(("SUBSCRIBE", "a", "b"), ("HELLO", "2")), 3),
        (_publish("a", "hi"), 0),
        (_cmds(("PING",)), 2),   # the message, then PING's RESP2 pub/sub reply
        (_cmds(("GET", "k")), 1),
        (_cmds(("PSUBSCRIBE", "p*")), 1),
        (_publish("pa", "m2"), 0),
        (_cmds(("UNSUBSCRIBE", "a", "b")), 3),   # the pmessage, then a and b
        (_cmds(("PUNSUBSCRIBE",)), 1),
        (_cmds(("SET", "k", "v"), ("GET", "k"), ("HGETALL", "nohash")), 3),
    ]
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as c:
            _hello3(c)
            frames = []
            for data, n in steps:
                if callable(data):
                    data(srv)
                    continue
                c.send(data)
                frames += _frames(c, n)
            got[name] = frames
            assert c.call_raw("DEL", "k") == b":1\r\n"
    for name in got:
        assert _hello2_fields(got[name][2])[b"proto"] == 2, got[name][2]
        got[name][2] = b"(HELLO 2 reply)"
    assert got["sluice"] == got["redis"]
    assert got["redis"][3] == b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n"


def test_hello_2_while_subscribed_in_resp3_message_in_flight(sluice, ref, clean):
    """Messages published while the HELLO 2 is on its way: each reaches the
    client whole, in RESP3 before HELLO's reply or RESP2 after it, never
    taken for a reply; the subscription goes on."""
    with sluice.raw() as c, sluice.raw() as p:
        _hello3(c)
        c.send(_cmds(("SUBSCRIBE", "a")))
        _frames(c, 1)
        for i in range(20):
            p.send(_cmds(("PUBLISH", "a", f"m{i}")))
        c.send(_cmds(("HELLO", "2")))
        for i in range(20, 40):
            p.send(_cmds(("PUBLISH", "a", f"m{i}")))
        assert p.read_replies(40) == [1] * 40
        frames = _frames(c, 41)
        hello = [f for f in frames if f.startswith(b"*14\r\n")]
        assert len(hello) == 1 and _hello2_fields(hello[0])[b"proto"] == 2
        after = frames[frames.index(hello[0]) + 1:]
        assert all(f.startswith(b"*3\r\n$7\r\nmessage\r\n") for f in after), after
        msgs = [parse_reply(f.replace(b">3", b"*3", 1), 0)[0][2] for f in frames if f != hello[0]]
        assert msgs == [f"m{i}".encode() for i in range(40)]
        assert c.call_raw("PING") == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"


def test_hello_3_auth_where_redis_authenticates(sluice):
    """Without users of sluice's own, HELLO 2 AUTH goes to Redis; HELLO 3
    AUTH cannot (the protocol is sluice's to know): refused, saying what to
    do instead, and the connection is unchanged."""
    with sluice.raw() as c:
        reply = c.call_raw("HELLO", "3", "AUTH", "default", "x")
        assert reply.startswith(b"-ERR sluice does not forward HELLO 3 AUTH to Redis"), reply
        assert c.call_raw("GET", "nokey") == b"$-1\r\n"


def test_nil_replies_sluice_writes(sluice, clean):
    """CLIENT GETNAME and a LOCK that finds the lock taken answer nil in the
    client's protocol."""
    with sluice.raw() as c3, sluice.raw() as c2:
        _hello3(c3)
        assert c3.call_raw("CLIENT", "GETNAME") == b"_\r\n"
        assert c2.call_raw("CLIENT", "GETNAME") == b"$-1\r\n"
        token = c3.call("LOCK", "lk", "5000")
        assert isinstance(token, bytes)
        assert c3.call_raw("LOCK", "lk", "5000") == b"_\r\n"
        assert c2.call_raw("LOCK", "lk", "5000") == b"$-1\r\n"
        assert c3.call_raw("LOCK", "lk", "50", "WAIT", "60") == b"_\r\n"
        assert c3.call("UNLOCK", "lk") == 0


def test_hello_reply_shows_sluice_client_id(sluice):
    with sluice.raw() as c:
        fields = _hello3(c)
        assert fields[b"id"] == c.call("CLIENT", "ID")
        c.send_command("HELLO", "2")
        flat = c.read_reply()
        assert flat[flat.index(b"proto") + 1] == 2


def test_push_flood_to_a_client_that_never_reads(redis_factory, sluice_factory):
    """Hostile: a RESP3 client tracks every key (BCAST) and a subscription
    and never reads; floods of invalidations and messages count against its
    client_output_buffer_limit and close it, while others go on."""
    srv = redis_factory()
    s = sluice_factory(srv.port, client_output_buffer_limit="256kb")
    slow = RawConn(s.port, rcvbuf=4096, timeout=10 * SLOW)
    try:
        _hello3(slow)
        slow.send(_cmds(("CLIENT", "TRACKING", "ON", "BCAST"), ("SUBSCRIBE", "flood")))
        other = s.client()
        payload = b"m" * 10000
        for i in range(30):                       # 30 MB of messages
            pipe = other.pipeline(transaction=False)
            for j in range(100):
                pipe.set(f"k{i * 100 + j}", j)
                pipe.publish("flood", payload)
            pipe.execute()
        assert other.ping() is True
        data, closed = slow.read_all_until_eof(20 * SLOW)
        assert closed, "the client that never read was not closed"
        assert len(data) < 3000 * len(payload)
        other.close()
    finally:
        slow.close()
    with s.raw() as c:
        _hello3(c)
        assert c.call_raw("GET", "k101") == b"$1\r\n1\r\n"


# ---- shared connections per protocol ------------------------------------


def _redis_clients(backend):
    c = backend.client()
    try:
        return {int(e["id"]): e for e in c.client_list()}
    finally:
        c.close()


def test_resp2_and_resp3_pool_apart(sluice, backend, clean):
    with sluice.raw() as c3, sluice.raw() as c2:
        _hello3(c3)
        assert c3.call_raw("GET", "nokey") == b"_\r\n"
        assert c2.call_raw("GET", "nokey") == b"$-1\r\n"
        info = sluice.info()
        assert "backend_resp3_0" in info, info
        id2 = int(info["backend_0"].split("redis_id=")[1].split(",")[0])
        id3 = int(info["backend_resp3_0"].split("redis_id=")[1].split(",")[0])
        clients = _redis_clients(backend)
        assert clients[id2]["resp"] == "2" and clients[id3]["resp"] == "3"
        assert info["backend_private_connections"] == "0"


def test_interleaved_pipelines_keep_their_shapes(sluice, backend, clean):
    """Hostile: a RESP3 and a RESP2 client hammer the shared connections
    with pipelines at once; neither ever gets a reply shaped for the
    other."""
    c = backend.client()
    c.hset("h", mapping={"f": "v"})
    c.zadd("z", {"m": 2.5})
    c.close()
    rounds = 300
    script = _cmds(("HGETALL", "h"), ("ZSCORE", "z", "m"), ("GET", "nokey")) * rounds
    want = {3: [b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n", b",2.5\r\n", b"_\r\n"],
            2: [b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n", b"$3\r\n2.5\r\n", b"$-1\r\n"]}
    errors = []

    def run(proto):
        try:
            with sluice.raw(timeout=30 * SLOW) as conn:
                if proto == 3:
                    _hello3(conn)
                for _ in range(4):
                    conn.send(script)
                    got = _frames(conn, 3 * rounds, timeout=30 * SLOW)
                    if got != want[proto] * rounds:
                        bad = [g for g in got if g not in want[proto]]
                        errors.append(f"RESP{proto} client got {bad[:3]!r}")
                        return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"RESP{proto}: {e!r}")

    threads = [threading.Thread(target=run, args=(p,)) for p in (2, 3, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ---- real RESP3 clients (tests/node) ------------------------------------


@pytest.fixture(scope="module")
def node_clients():
    """node and the npm packages of tests/node, installed from its
    package-lock (npm ci) when node_modules is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the node-redis/ioredis tests (not found)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        pytest.skip(f"node-redis 6 and ioredis 6 need node 20 or newer (found {version.strip()})")
    if not (NODE_DIR / "node_modules" / "redis").is_dir() or \
            not (NODE_DIR / "node_modules" / "ioredis").is_dir():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail(f"npm ci in {NODE_DIR} failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return node


def _node(node, script, scenario, port, other_port=None):
    env = dict(os.environ, SLUICE_PORT=str(port), REDIS_PORT=str(other_port or port))
    r = subprocess.run([node, str(NODE_DIR / script), scenario], cwd=NODE_DIR, env=env,
                       capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 0, f"{script} {scenario} failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("scenario", ["types", "pubsub", "cache", "lock", "mixed"])
def test_node_redis(node_clients, sluice, backend, clean, scenario):
    out = _node(node_clients, "noderedis.mjs", scenario, sluice.port, backend.port)
    assert out["ok"] is True, out


@pytest.mark.parametrize("scenario", ["types", "pubsub"])
def test_ioredis(node_clients, sluice, backend, clean, scenario):
    out = _node(node_clients, "ioredis.mjs", scenario, sluice.port, backend.port)
    assert out["ok"] is True, out


def test_redis_cli_3_same_as_redis(sluice, ref, backend, clean):
    """redis-cli -3, by hand: the same output through sluice as from Redis."""
    for srv in (backend, ref):
        c = srv.client()
        c.hset("h", mapping={"f": "v"})
        c.zadd("z", {"m": 0.5})
        c.close()
    for cmd in (["HGETALL", "h"], ["ZSCORE", "z", "m"], ["GET", "nokey"], ["CLIENT", "GETNAME"],
                ["CONFIG", "GET", "maxmemory"], ["EVAL", "redis.setresp(3); return true", "0"]):
        out = [subprocess.run(["redis-cli", "-3", "-p", str(port)] + cmd, capture_output=True,
                              text=True, timeout=10 * SLOW).stdout
               for port in (sluice.port, ref.port)]
        assert out[0] == out[1], (cmd, out)



# ---- HELLO after pub/sub: every later reply in the protocol asked for ----


def _hello_frame_ok(frame, proto):
    """sluice's HELLO reply has its own client id: only its shape is compared."""
    return frame.startswith(b"%7\r\n" if proto == 3 else b"*14\r\n")


def _after_pubsub(srv, first, steps):
    """On a new connection to SRV (RESP3 first when FIRST is 3), send each
    step's commands at once and read its frames; HELLO replies are checked
    for their shape and left out."""
    out = []
    with srv.raw() as c:
        if first == 3:
            _hello3(c)
        for cmds, n in steps:
            c.send(_cmds(*cmds))
            frames = _frames(c, n)
            for cmd, f in zip(cmds, frames):
                if cmd[0] == "HELLO":
                    assert _hello_frame_ok(f, int(cmd[1])), (cmd, f)
            out.append([f for cmd, f in zip(cmds, frames) if cmd[0] != "HELLO"]
                       if len(frames) == len(cmds) else frames)
    return out


@pytest.mark.parametrize("sub,unsub,arg", [("SUBSCRIBE", "UNSUBSCRIBE", "a"),
                                           ("PSUBSCRIBE", "PUNSUBSCRIBE", "p*"),
                                           ("SSUBSCRIBE", "SUNSUBSCRIBE", "s")])
@pytest.mark.parametrize("pipelined", [False, True])
def test_hello_3_after_resp2_pubsub_is_resp3(sluice, ref, clean, sub, unsub, arg, pipelined):
    """Issue 25: RESP2 (P|S)SUBSCRIBE, its last (P|S)UNSUBSCRIBE, then
    HELLO 3: every later reply is RESP3 (HGETALL a map), byte for byte
    what Redis sends. sluice kept streaming its private connection in
    RESP2, which lasted until RESET, so HGETALL came back an array."""
    for srv in (sluice, ref):
        with srv.raw() as c:
            assert c.call("HSET", "h", "f", "v") == 1
    tail = [("HELLO", "3"), ("HGETALL", "h"), ("GET", "nokey"), ("HELLO", "2"),
            ("HGETALL", "h")]
    if pipelined:
        steps = [([(sub, arg)], 1), ([(unsub, arg)] + tail, 6)]
    else:
        steps = [([(sub, arg)], 1), ([(unsub, arg)], 1)] + [([cmd], 1) for cmd in tail]
    got = [_after_pubsub(srv, 2, steps) for srv in (sluice, ref)]
    assert got[0] == got[1]
    flat = [f for step in got[0] for f in step]
    assert flat[-3:] == [b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n", b"_\r\n",
                         b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"], flat


def test_hello_2_after_resp3_pubsub_is_resp2(sluice, ref, clean):
    """The other way: RESP3 SUBSCRIBE, UNSUBSCRIBE, HELLO 2: RESP2 replies."""
    for srv in (sluice, ref):
        with srv.raw() as c:
            assert c.call("HSET", "h", "f", "v") == 1
    steps = [([("SUBSCRIBE", "a")], 1), ([("UNSUBSCRIBE", "a")], 1), ([("HELLO", "2")], 1),
             ([("HGETALL", "h"), ("GET", "nokey")], 2)]
    got = [_after_pubsub(srv, 3, steps) for srv in (sluice, ref)]
    assert got[0] == got[1]
    assert got[0][-1] == [b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n", b"$-1\r\n"]


def test_hello_3_on_a_tracking_redirect_target_after_pubsub(sluice, ref, clean):
    """A RESP2 client other clients' tracking redirects to subscribes to
    __redis__:invalidate, unsubscribes and says HELLO 3: the invalidation
    comes as a RESP3 push and its replies are RESP3, as from Redis."""
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as target, srv.raw() as tracker, srv.raw() as writer:
            assert writer.call("HSET", "h", "f", "v") == 1
            target_id = target.call("CLIENT", "ID")
            assert tracker.call("CLIENT", "TRACKING", "ON", "REDIRECT", str(target_id)) == "OK"
            target.send(_cmds(("SUBSCRIBE", "__redis__:invalidate")))
            frames = _frames(target, 1)
            target.send(_cmds(("UNSUBSCRIBE", "__redis__:invalidate"), ("HELLO", "3")))
            frames += _frames(target, 2)[:1]
            assert tracker.call("GET", "k") is None
            assert writer.call("SET", "k", "1") == "OK"
            target.send(_cmds(("HGETALL", "h")))
            frames += _frames(target, 2)
            got[name] = frames
    assert got["sluice"] == got["redis"]
    assert got["sluice"][-2:] == [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n",
                                  b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"]
