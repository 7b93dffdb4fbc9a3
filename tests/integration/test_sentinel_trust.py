"""Hostile round three, items 2 and 4 (issue 30): what sluice takes from
outside to choose where its clients' commands go can no longer be forged
by one client or one Sentinel.

- No client publishes on Sentinel's channels (`__sentinel__:*`) through
  sluice: a forged hello there would make redis-sentinel switch the master
  to any address. Refused with PUBLISH, SPUBLISH, in MULTI, and (with
  users_in_redis) inside the scripts of a user whose channels are `*`.
- sluice moves to a new primary only when a majority of the Sentinels it
  is configured with name it: one lying Sentinel (a RESP server of the
  test's, that names a fake primary and a fake replica and keeps sending
  +switch-master) is not followed, and nothing (no AUTH, no ROLE) goes to
  the addresses it names; a genuine SENTINEL FAILOVER still moves sluice.
- Replicas for reads come from a source no client can forge: a replica
  announced to the primary by a raw socket (REPLCONF listening-port, PSYNC,
  the RDB read) is never connected to; standalone mode reads from the
  `replicas =` list.
"""

import socket
import socketserver
import threading
import time

import pytest

from conftest import DIRECT, SLUICE_BIN
from helpers import SLOW, Err, RawConn, encode_command, free_port, parse_reply, wait_until, \
    Incomplete
from sentinel_helpers import MASTER, SentinelTopology, sentinel_sluices, sluice_check  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own checks")

SENTINEL_REFUSAL = ("NOPERM no client may publish on Sentinel's channels (__sentinel__:*) "
                    "through sluice: a forged hello could move the primary")


def forged_hello(fake_port):
    """A hello naming 127.0.0.1:FAKE_PORT the master of MASTER with a
    config epoch above any real one."""
    return f"127.0.0.1,1,{'a' * 40},999,{MASTER},127.0.0.1,{fake_port},999"


# --------------------------------------------------------------------------
# fakes: a listener that notes who connects, and a lying Sentinel


class Recorder:
    """A TCP listener on a free port noting every connection and what it
    sent; answers ROLE as a master would, anything else +OK."""

    def __init__(self):
        self.port = free_port()
        self.received = []
        recorder = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                recorder.received.append(b"")
                idx = len(recorder.received) - 1
                self.request.settimeout(5)
                try:
                    while True:
                        data = self.request.recv(65536)
                        if not data:
                            return
                        recorder.received[idx] += data
                        if b"ROLE" in data.upper():
                            self.request.sendall(b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n")
                        else:
                            self.request.sendall(b"+OK\r\n")
                except OSError:
                    return

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def read_command(f):
    """One RESP command (an array of bulk strings) from the file F; None at EOF."""
    line = f.readline()
    if not line:
        return None
    n = int(line[1:])
    args = []
    for _ in range(n):
        size = int(f.readline()[1:])
        args.append(f.read(size + 2)[:-2])
    return args


def bulk_array(items):
    return b"*%d\r\n" % len(items) + b"".join(b"$%d\r\n%s\r\n" % (len(i), i) for i in items)


class LyingSentinel:
    """A "Sentinel" that names 127.0.0.1:PRIMARY_PORT the master, lists
    127.0.0.1:REPLICA_PORT as a healthy replica, and sends +switch-master
    to that primary every 0.2 s to whoever subscribes."""

    def __init__(self, primary_port, replica_port):
        self.port = free_port()
        self.asked = 0
        self.subscribed = threading.Event()
        liar = self
        addr = [b"127.0.0.1", str(primary_port).encode()]
        replica = bulk_array([b"name", b"127.0.0.1:%d" % replica_port, b"ip", b"127.0.0.1",
                              b"port", str(replica_port).encode(), b"flags", b"slave",
                              b"master-link-status", b"ok"])

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                try:
                    self.serve()
                except (OSError, ValueError):
                    return

            def serve(self):
                while True:
                    args = read_command(self.rfile)
                    if args is None:
                        return
                    word = [a.upper() for a in args[:2]]
                    if word[:2] == [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME"]:
                        liar.asked += 1
                        self.wfile.write(bulk_array(addr))
                    elif word[:2] in ([b"SENTINEL", b"REPLICAS"], [b"SENTINEL", b"SLAVES"]):
                        self.wfile.write(b"*1\r\n" + replica)
                    elif word[0] == b"SUBSCRIBE":
                        for i, ch in enumerate(args[1:]):
                            self.wfile.write(b"*3\r\n$9\r\nsubscribe\r\n" + bulk_array([ch])[4:]
                                             + b":%d\r\n" % (i + 1))
                        self.wfile.flush()
                        liar.subscribed.set()
                        self.push()
                        return
                    elif word[0] == b"PING":
                        self.wfile.write(b"+PONG\r\n")
                    else:
                        self.wfile.write(b"+OK\r\n")
                    self.wfile.flush()

            def push(self):
                body = f"{MASTER} 127.0.0.1 1 {addr[0].decode()} {addr[1].decode()}".encode()
                while True:
                    self.wfile.write(bulk_array([b"message", b"+switch-master", body]))
                    self.wfile.flush()
                    time.sleep(0.2)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------
# item 2 (a): Sentinel's channels


def test_no_publish_on_sentinel_channels(redis_factory, sluice_factory):
    """PUBLISH and SPUBLISH on __sentinel__:* are refused to every client
    (here an unrestricted one), alone or queued in MULTI (EXEC aborts);
    nothing reaches Redis. Other channels, and subscribing to Sentinel's,
    still work."""
    redis = redis_factory()
    s = sluice_factory(redis.port)
    listener = redis.client().pubsub()
    listener.psubscribe("__sentinel__:*")
    listener.get_message(timeout=2)
    with s.raw() as c:
        for cmd in (b"PUBLISH", b"SPUBLISH"):
            for channel in (b"__sentinel__:hello", b"__sentinel__:other"):
                assert c.call(cmd, channel, forged_hello(1234)) == Err(SENTINEL_REFUSAL)
        assert c.call(b"PUBLISH", b"news", b"x") == 0
        assert c.call(b"PUBLISH", b"__sentinel__", b"x") == 0       # not one of them
        assert c.call(b"PUBLISH", b"__Sentinel__:hello", b"x") == 0  # channels are exact
        assert c.call(b"MULTI") == "OK"
        assert c.call(b"PUBLISH", b"__sentinel__:hello", b"x") == Err(SENTINEL_REFUSAL)
        assert c.call(b"EXEC") == Err("EXECABORT Transaction discarded because of previous "
                                      "errors.")
        c.send(b"PUBLISH __sentinel__:hello inline\r\n")   # an inline command too
        assert c.read_reply() == Err(SENTINEL_REFUSAL)
    time.sleep(0.3)
    assert listener.get_message(timeout=0.5) is None
    listener.close()
    with s.raw() as sub:
        reply = sub.call(b"SUBSCRIBE", b"__sentinel__:hello")
        assert reply == [b"subscribe", b"__sentinel__:hello", 1]


USERS_INI = """\
[user default]
password = secret

[user pub]
password = pubpw
commands = +@all -@dangerous
keys = pub:*
channels = *

[user news]
password = newspw
commands = +@all -@dangerous
keys = pub:*
channels = news.* _*
"""


def test_users_in_redis_scripts_cannot_publish_on_sentinel_channels(redis_factory,
                                                                    sluice_factory):
    """users_in_redis: the Redis users sluice keeps get every channel but
    Sentinel's (channels = *), or their globs without those that could
    reach Sentinel's; a script of theirs publishing a hello is refused by
    Redis, other channels are not."""
    redis = redis_factory()
    s = sluice_factory(redis.port, start=False, users="users.ini", users_in_redis="yes")
    (s.dir / "users.ini").write_text(USERS_INI)
    s.start()
    admin = redis.client()
    wait_until(lambda: admin.execute_command("ACL", "GETUSER", "sluice:pub") is not None and
               admin.execute_command("ACL", "GETUSER", "sluice:news") is not None,
               5 * SLOW, msg="Redis users made")
    listener = admin.pubsub()
    listener.psubscribe("__sentinel__:*")
    listener.get_message(timeout=2)
    script = "return redis.call('publish', ARGV[1], ARGV[2])"
    for user, pw, ok_channel in ((b"pub", b"pubpw", b"anything"),
                                 (b"news", b"newspw", b"news.sport")):
        with s.raw() as c:
            assert c.call(b"AUTH", user, pw) == "OK"
            got = c.call(b"EVAL", script, b"0", b"__sentinel__:hello", forged_hello(1234))
            assert isinstance(got, Err) and "can't publish to the channel" in got, got
            assert c.call(b"EVAL", script, b"0", ok_channel, b"x") == 0
    # news's "_*" could reach __sentinel__:*: left out in Redis.
    rules = admin.execute_command("ACL", "GETUSER", "sluice:news")
    channels = dict(zip(rules[::2], rules[1::2]))[b"channels"]
    assert channels == b"&news.*", channels
    assert listener.get_message(timeout=0.5) is None
    listener.close()


# --------------------------------------------------------------------------
# item 2 (b, c) and item 4 in Sentinel mode


@pytest.fixture
def two_sentinels(tmp_path):
    topo = SentinelTopology(tmp_path / "topo", replicas=1, sentinels=2)
    try:
        yield topo.start()
    finally:
        topo.stop()


def test_one_lying_sentinel_is_not_followed(two_sentinels, sentinel_sluices):
    """sentinel = two real Sentinels and one that lies. A forged hello
    through sluice is refused (the real Sentinels keep the master); the
    liar's primary, its +switch-master and its replica are not followed:
    nothing goes to those addresses. The replicas read from are the ones
    the real Sentinels list. A genuine SENTINEL FAILOVER moves sluice."""
    topo = two_sentinels
    fake_primary, fake_replica = Recorder(), Recorder()
    liar = LyingSentinel(fake_primary.port, fake_replica.port)
    try:
        s = sentinel_sluices(topo, read_from="replica",
                             sentinels=f"{topo.sentinel_list()} 127.0.0.1:{liar.port}")
        real = f"127.0.0.1:{topo.primary.port}"
        assert s.info()["sentinel_primary"] == real
        assert s.info()["sentinel_majority"] == "2"
        # The forged hello, through sluice: refused, the Sentinels unmoved.
        with s.raw() as c:
            assert c.call(b"PUBLISH", b"__sentinel__:hello",
                          forged_hello(fake_primary.port)) == Err(SENTINEL_REFUSAL)
        # The liar keeps saying its word for a while.
        assert liar.subscribed.wait(10 * SLOW)
        wait_until(lambda: liar.asked >= 2, 15 * SLOW, msg="the liar asked again")
        time.sleep(1.5 * SLOW)
        assert [st.master_addr() for st in topo.sentinels] == [real, real]
        info = s.info()
        assert info["sentinel_primary"] == real
        assert fake_primary.received == [], fake_primary.received
        assert fake_replica.received == [], fake_replica.received
        wait_until(lambda: s.info().get("replica0", "").startswith(
            f"addr=127.0.0.1:{topo.replicas[0].port},"), 10 * SLOW,
            msg="the real Sentinels' replica read from")
        assert s.info()["replicas"] == "1"
        with s.raw() as c:
            assert c.call(b"SET", b"k", b"v") == "OK"
        log = s.log_path.read_text()
        assert f"names 127.0.0.1:{fake_primary.port} the primary of '{MASTER}', but a " \
               f"majority name {real}: not followed" in log, log[-3000:]
        # A genuine failover: both real Sentinels agree, sluice follows.
        assert topo.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER)
        new = f"127.0.0.1:{topo.replicas[0].port}"
        wait_until(lambda: s.info()["sentinel_primary"] == new, 30 * SLOW,
                   msg="sluice follows the genuine failover")
        with s.raw() as c:
            assert c.call(b"SET", b"k2", b"v2") == "OK"
        assert topo.replicas[0].client().get("k2") == b"v2"
        assert fake_primary.received == [] and fake_replica.received == []
    finally:
        liar.stop()
        fake_primary.stop()
        fake_replica.stop()


# --------------------------------------------------------------------------
# item 4: a replica announced by a raw socket


def announce_fake_replica(primary, user, password, port):
    """Log in to PRIMARY as USER, announce a replica listening on PORT and
    read the full sync's RDB: the primary then lists it state=online.
    Returns the socket (keep it open)."""
    sock = socket.create_connection(("127.0.0.1", primary.port), timeout=10)
    buf = bytearray()

    def reply():
        while True:
            try:
                v, pos = parse_reply(buf)
                del buf[:pos]
                return v
            except Incomplete:
                buf.extend(sock.recv(65536))

    for cmd in (("AUTH", user, password), ("REPLCONF", "listening-port", port)):
        sock.sendall(encode_command(*cmd))
        assert reply() == "OK"
    sock.sendall(encode_command("PSYNC", "?", "-1"))
    while not buf.startswith(b"$"):   # +FULLRESYNC, then newlines while it saves
        buf.extend(sock.recv(65536))
        while buf.startswith(b"\n"):
            del buf[:1]
        if buf.startswith(b"+"):
            end = buf.find(b"\r\n")
            if end > 0:
                del buf[:end + 2]
    while b"\r\n" not in buf:
        buf.extend(sock.recv(65536))
    size = int(buf[1:buf.find(b"\r\n")])
    del buf[:buf.find(b"\r\n") + 2]
    while len(buf) < size:
        buf.extend(sock.recv(65536))
    return sock


def test_announced_replica_is_never_used(redis_factory, sluice_factory):
    """A Redis user allowed only +psync +replconf +ping announces a fake
    replica; the primary lists it online. sluice (read_from = replica)
    never connects to it: without `replicas =` no replica is read from;
    with `replicas =` the listed one is, and only it."""
    primary = redis_factory("--repl-diskless-sync", "no")
    real = redis_factory("--replicaof", "127.0.0.1", str(primary.port))
    primary.client().execute_command("ACL", "SETUSER", "replicator", "on", ">replpw",
                                     "+psync", "+replconf", "+ping")
    fake = Recorder()
    try:
        sock = announce_fake_replica(primary, "replicator", "replpw", fake.port)

        def online():
            info = primary.client().info("replication")
            return sorted(info[k]["port"] for k in info
                          if k.startswith("slave") and k[5:].isdigit()
                          and info[k]["state"] == "online") == sorted([real.port, fake.port])
        wait_until(online, 20 * SLOW, msg="the fake replica online on the primary")
        primary.client().set("k", "v")
        unlisted = sluice_factory(primary.port, read_from="replica")
        time.sleep(1.0 * SLOW)   # a few polls of the primary's INFO
        assert fake.received == [], fake.received
        assert unlisted.info()["replicas"] == "0"
        with unlisted.raw() as c:
            assert c.call(b"GET", b"k") == Err("ERR no replica available (read_from replica)")
        listed = sluice_factory(primary.port, read_from="replica",
                                replicas=f"127.0.0.1:{real.port}")
        wait_until(lambda: listed.info().get("replica0", "").startswith(
            f"addr=127.0.0.1:{real.port},") and "state=ok" in listed.info()["replica0"],
            10 * SLOW, msg="the listed replica ok")
        time.sleep(0.5 * SLOW)
        assert listed.info()["replicas"] == "1"
        wait_until(lambda: real.client().get("k") == b"v", 5 * SLOW, msg="replicated")
        real.client().config_resetstat()
        with listed.raw() as c:
            assert c.call(b"GET", b"k") == b"v"
        assert real.client().info("commandstats")["cmdstat_get"]["calls"] == 1
        assert fake.received == [], fake.received
        sock.close()
    finally:
        fake.stop()


def test_replicas_key_checked(tmp_path):
    """`replicas =` is checked by sluice -t: a bad address, the primary
    itself, a name given twice, and the key in cluster or Sentinel mode,
    each with FILE:LINE."""
    cases = [
        ("backend = 127.0.0.1:7000\nreplicas = 127.0.0.1:7001 nohost\n", 3, "nohost"),
        ("backend = 127.0.0.1:7000\nreplicas = 127.0.0.1:7000\n", 3,
         "'replicas' names the primary '127.0.0.1:7000' (backend)"),
        ("cluster = 127.0.0.1:7000\nreplicas = 127.0.0.1:7001\n", 3,
         "'replicas' is for standalone mode ('backend ='): in cluster mode"),
        ("sentinel = 127.0.0.1:26379\nsentinel_master = m\nreplicas = 127.0.0.1:7001\n", 4,
         "'replicas' is for standalone mode ('backend ='): in Sentinel mode the replicas "
         "are those a majority of the Sentinels list"),
        ("backend = 127.0.0.1:7000\nreplicas = 127.0.0.1:7001 127.0.0.1:7001\n", 3,
         "'127.0.0.1:7001' is named twice"),
    ]
    for i, (body, line, want) in enumerate(cases):
        path = tmp_path / f"c{i}.ini"
        path.write_text("[proxy]\n" + body)
        rc, err = sluice_check(str(SLUICE_BIN), path)
        assert rc != 0, (body, err)
        assert f"{path}:{line}:" in err and want in err, (body, err)


def test_even_number_of_sentinels_warned(tmp_path):
    """sluice -t warns of an even number of Sentinels: a majority of 2 is
    both, so one down stops sluice from following a failover."""
    path = tmp_path / "even.ini"
    path.write_text("[proxy]\nsentinel = 127.0.0.1:1 127.0.0.1:2\nsentinel_master = m\n")
    rc, err = sluice_check(str(SLUICE_BIN), path)
    assert rc == 0, err
    assert f"{path}:2: warning: 2 Sentinels: sluice follows only a primary a majority (2) " \
           "of them name, so it tolerates 0 down; 3 would tolerate 1" in err, err
