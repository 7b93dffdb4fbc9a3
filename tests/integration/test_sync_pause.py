"""SYNC/PSYNC through sluice as a byte tunnel, and CLIENT PAUSE forwarded
with pause-aware routing (issue 11), against real redis-servers.

A client that sends SYNC or PSYNC gets a private backend connection, and
from then on its connection is a tunnel to it: the RDB (no CRLF after it),
"\\n" keepalives and the replication stream come through unparsed, and what
the client writes (REPLCONF ACK) reaches Redis unchanged.

CLIENT PAUSE reaches Redis; while it is on, what Redis would hold goes on a
one-shot connection of its own, so that the shared connections keep
serving everybody else, and Redis's INFO blocked_clients counts the paused
clients as it would without sluice.
"""

import contextlib
import socket
import subprocess
import threading
import time

import pytest

from helpers import SLOW, Err, RawConn, Simple, encode_command, free_port, wait_until


def start_pair(redis_factory, sluice_factory, *redis_args, **cfg):
    srv = redis_factory(*redis_args)
    return srv, sluice_factory(srv.port, **cfg)


def private_conns(s, auth=()):
    return int(s.info(auth)["backend_private_connections"])


def blocked_clients(srv):
    """Redis's INFO blocked_clients, asked directly."""
    d = srv.client(socket_timeout=5)
    try:
        return int(d.info("clients")["blocked_clients"])
    finally:
        d.close()


def wait_blocked(srv, n, timeout=5 * SLOW):
    wait_until(lambda: blocked_clients(srv) == n, timeout, msg=f"{n} blocked clients")


def unpause_direct(srv):
    """CLIENT UNPAUSE straight to Redis (test clean-up)."""
    try:
        with srv.raw(timeout=2) as c:
            c.call("CLIENT", "UNPAUSE")
    except (OSError, EOFError):
        pass


# --------------------------------------------------------------------------
# SYNC / PSYNC


class Tunnel:
    """A raw socket that sent SYNC or PSYNC, reading as a replica reads."""

    def __init__(self, port, timeout):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def _more(self):
        d = self.sock.recv(1 << 20)
        if not d:
            raise EOFError("tunnel closed")
        self.buf += d

    def line(self):
        """The next line, keepalive newlines before it skipped."""
        while True:
            self.buf = self.buf.lstrip(b"\n")
            at = self.buf.find(b"\r\n")
            if at >= 0:
                out, self.buf = self.buf[:at], self.buf[at + 2:]
                return out
            self._more()

    def take(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def expect_close(self):
        """Read until sluice closes the connection (fails on a timeout)."""
        with pytest.raises(EOFError):
            while True:
                self._more()

    def rdb(self):
        head = self.line()
        assert head.startswith(b"$"), head
        data = self.take(int(head[1:]))   # no CRLF after it
        assert data.startswith(b"REDIS"), data[:20]
        return data

    def stream_until(self, needle, timeout):
        deadline = time.monotonic() + timeout
        while needle not in self.buf:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not in the stream: {self.buf[-300:]!r}")
            self._more()

    def close(self):
        self.sock.close()


def test_sync_gets_rdb_then_stream_of_other_clients_writes(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("SET", "before", "1") == Simple("OK")
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(b"SYNC\r\n")   # inline, as the test suite and redis-cli send it
        rdb = t.rdb()
        assert b"before" in rdb
        assert private_conns(s) == 1
        # Other clients are served meanwhile, and their writes reach the stream.
        with s.raw() as c:
            assert c.call("SET", "tunnelkey", "tunnelvalue") == Simple("OK")
            assert c.call("GET", "tunnelkey") == b"tunnelvalue"
        t.stream_until(b"tunnelvalue", 10 * SLOW)
        assert b"tunnelkey" in t.buf
    finally:
        t.close()
    # The tunnel's end frees its private connection, and Redis drops the replica.
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")
    d = srv.client()
    wait_until(lambda: d.info("replication")["connected_slaves"] == 0, 5 * SLOW,
               msg="replica gone from Redis")
    d.close()


def test_psync_full_resync_and_stream(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(encode_command("PSYNC", "?", "-1"))
        assert t.line().startswith(b"+FULLRESYNC ")
        t.rdb()
        with s.raw() as c:
            assert c.call("SET", "pkey", "pvalue") == Simple("OK")
        t.stream_until(b"pvalue", 10 * SLOW)
        # What the replica writes goes to Redis as it is: an ACK has no reply.
        t.sock.sendall(encode_command("REPLCONF", "ACK", "0"))
        with s.raw() as c:
            assert c.call("PING") == Simple("PONG")
    finally:
        t.close()
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


def test_redis_closing_the_replica_closes_the_tunnel_client(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(b"SYNC\r\n")
        t.rdb()
        d = srv.client()
        assert d.client_kill_filter(_type="slave") == 1
        d.close()
        t.expect_close()
    finally:
        t.close()
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")
    with s.raw() as c:
        assert c.call("PING") == Simple("PONG")


def test_sync_with_redis_down_gets_an_error_then_closes(redis_factory, sluice_factory):
    """SYNC while Redis cannot be reached: the would-be replica reads an
    error (nothing of an RDB has come), then the connection closes."""
    srv, s = start_pair(redis_factory, sluice_factory, backend_spare_connections=0)
    srv.stop()
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(b"SYNC\r\n")
        line = t.line()
        assert line.startswith(b"-ERR") and b"backend" in line, line
        t.expect_close()
    finally:
        t.close()
    assert private_conns(s) == 0


def test_tunnel_client_listed_and_killed_as_a_replica(redis_factory, sluice_factory):
    """sluice's CLIENT LIST shows a client that sent SYNC as Redis shows a
    replica (flags=S, TYPE replica), and CLIENT KILL TYPE replica (or
    slave) closes it, as an operator would do with Redis."""
    srv, s = start_pair(redis_factory, sluice_factory)
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(b"SYNC\r\n")
        t.rdb()
        with s.raw() as c:
            replicas = c.call("CLIENT", "LIST", "TYPE", "replica").decode().splitlines()
            assert len(replicas) == 1 and " flags=S " in replicas[0], replicas
            assert all(" flags=S " not in line for line in
                       c.call("CLIENT", "LIST", "TYPE", "normal").decode().splitlines())
            assert c.call("CLIENT", "KILL", "TYPE", "master") == 0
            assert c.call("CLIENT", "KILL", "TYPE", "slave") == 1
        t.expect_close()
    finally:
        t.close()
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


def test_real_replica_replicates_through_sluice(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("SET", "r:before", "1") == Simple("OK")
    replica = redis_factory("--replicaof", "127.0.0.1", str(s.port))
    r = replica.client()
    try:
        wait_until(lambda: r.info("replication")["master_link_status"] == "up", 15 * SLOW,
                   msg="replica link up")
        with s.raw() as c:
            for i in range(100):
                c.send_command("SET", f"r:{i}", f"v{i}")
            got = c.read_replies(100)
            assert got == [Simple("OK")] * 100
        wait_until(lambda: r.get("r:99") == b"v99", 10 * SLOW, msg="replica has r:99")
        assert r.get("r:before") == b"1"
        # Redis sees a replica whose ACKs come through the tunnel.
        d = srv.client()
        wait_until(lambda: d.info("replication")["connected_slaves"] == 1, 5 * SLOW,
                   msg="one replica")
        d.close()
        assert private_conns(s) == 1
    finally:
        r.close()
        replica.stop()
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


def test_redis_cli_rdb_through_sluice(redis_factory, sluice_factory, tmp_path):
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("SET", "cli:k", "cli-v") == Simple("OK")
    out = tmp_path / "dump.rdb"
    done = subprocess.run(["redis-cli", "-p", str(s.port), "--rdb", str(out)],
                          capture_output=True, timeout=30 * SLOW)
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert data.startswith(b"REDIS") and b"cli-v" in data
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


USERS = """
[user ops]
password = opspw
commands = +@all
keys = *
channels = *

[user app]
password = apppw
commands = +@all -@admin
keys = *
"""


@pytest.mark.parametrize("cmd", [("SYNC",), ("PSYNC", "?", "-1"),
                                 ("REPLCONF", "listening-port", "1")],
                         ids=["sync", "psync", "replconf"])
def test_replication_needs_permission(cmd, redis_factory, sluice_factory, tmp_path):
    users = tmp_path / "users.ini"
    users.write_text(USERS)
    srv, s = start_pair(redis_factory, sluice_factory, users=str(users))
    with s.raw() as c:
        assert c.call("AUTH", "app", "apppw") == Simple("OK")
        got = c.call(*cmd)
        assert isinstance(got, Err) and got.startswith("NOPERM"), got
        assert c.call("PING") == Simple("PONG")
    assert private_conns(s, ("ops", "opspw")) == 0
    with s.raw() as c:   # a user with @admin may
        assert c.call("AUTH", "ops", "opspw") == Simple("OK")
        if cmd[0] == "REPLCONF":
            assert c.call(*cmd) == Simple("OK")
        else:
            c.send_command(*cmd)
            data = c.sock.recv(100)
            assert data.startswith(b"\n") or data.startswith(b"$") or \
                data.startswith(b"+FULLRESYNC"), data


def test_sync_inside_multi_is_redis_s_error_not_a_tunnel(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("MULTI") == Simple("OK")
        got = c.call("SYNC")
        assert isinstance(got, Err), got
        assert c.call("DISCARD") == Simple("OK")
        assert c.call("PING") == Simple("PONG")


# --------------------------------------------------------------------------
# CLIENT PAUSE / UNPAUSE


@pytest.fixture
def paused_pair(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory, backend_connections=1)
    yield srv, s
    unpause_direct(srv)


def hold_under_pause(srv, admin, held, reader, cmd, key, value):
    """ADMIN pauses writes; HELD sends CMD, which Redis holds; READER's GET
    of KEY (set to VALUE first) is served meanwhile on the one shared
    connection."""
    assert admin.call("SET", key, value) == Simple("OK")
    assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
    held.send_command(*cmd)
    wait_blocked(srv, 1)
    for _ in range(20):
        assert reader.call("GET", key) == value.encode()


def test_write_paused_reads_of_others_served(paused_pair):
    srv, s = paused_pair
    with s.raw() as admin, s.raw(10 * SLOW) as writer, s.raw() as reader:
        hold_under_pause(srv, admin, writer, reader, ("SET", "k", "new"), "k", "old")
        # The one shared connection keeps serving reads (and INFO).
        assert reader.call("PING") == Simple("PONG")
        assert b"blocked_clients:1" in reader.call("INFO", "clients")
        assert admin.call("CLIENT", "UNPAUSE") == Simple("OK")
        assert writer.read_reply() == Simple("OK")
        assert reader.call("GET", "k") == b"new"
    assert int(s.info()["pause_detours"]) >= 1


def test_special_commands_paused_as_redis(paused_pair):
    """PFCOUNT and PUBLISH may replicate, scripts are held whatever their
    flags: Redis holds them in WRITE mode."""
    srv, s = paused_pair
    with s.raw() as admin:
        assert admin.call("PFADD", "hll", "a") == 1
        assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
        cmds = [("PFCOUNT", "hll"), ("PUBLISH", "ch", "m"), ("EVAL", "return 1", "0")]
        conns = [s.raw(10 * SLOW) for _ in cmds]
        try:
            for conn, cmd in zip(conns, cmds):
                conn.send_command(*cmd)
            wait_blocked(srv, 3)
            assert admin.call("GET", "hll") is not None
            assert admin.call("CLIENT", "UNPAUSE") == Simple("OK")
            assert [c.read_reply() for c in conns] == [1, 0, 1]
        finally:
            for c in conns:
                c.close()


def test_multi_exec_with_write_paused(paused_pair):
    srv, s = paused_pair
    with s.raw() as admin, s.raw(10 * SLOW) as tx:
        assert tx.call("MULTI") == Simple("OK")
        assert tx.call("SET", "tx", "1") == Simple("QUEUED")
        assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
        tx.send_command("EXEC")
        wait_blocked(srv, 1)
        assert admin.call("GET", "tx") is None
        assert admin.call("CLIENT", "UNPAUSE") == Simple("OK")
        assert tx.read_reply() == [Simple("OK")]


def test_pause_expires_and_routing_goes_back(paused_pair):
    srv, s = paused_pair
    with s.raw() as admin, s.raw(10 * SLOW) as writer:
        assert admin.call("CLIENT", "PAUSE", str(int(800 * SLOW)), "WRITE") == Simple("OK")
        assert writer.call("SET", "e", "1") == Simple("OK")   # held, then served
        detours = int(s.info()["pause_detours"])
        assert detours >= 1
        time.sleep(0.1)
        for i in range(10):
            assert writer.call("SET", "e", str(i)) == Simple("OK")
        assert int(s.info()["pause_detours"]) == detours   # shared connections again


def test_pause_error_turns_nothing_on(paused_pair):
    srv, s = paused_pair
    with s.raw() as admin:
        got = admin.call("CLIENT", "PAUSE", "-5")
        assert isinstance(got, Err), got
        got = admin.call("CLIENT", "PAUSE", "100", "SOMETIMES")
        assert isinstance(got, Err), got
        for i in range(5):
            assert admin.call("SET", "x", str(i)) == Simple("OK")
        assert int(s.info()["pause_detours"]) == 0


def test_pause_all_holds_everything_then_releases(paused_pair):
    srv, s = paused_pair
    with s.raw() as admin, s.raw(10 * SLOW) as a, s.raw(10 * SLOW) as b:
        assert admin.call("SET", "k", "v") == Simple("OK")
        assert admin.call("CLIENT", "PAUSE", str(int(1000 * SLOW)), "ALL") == Simple("OK")
        a.send_command("GET", "k")
        b.send_command("SET", "k", "w")
        assert a.read_reply() == b"v"
        assert b.read_reply() == Simple("OK")
        assert admin.call("GET", "k") == b"w"


def test_pauser_gone_with_huge_timeout_others_unaffected(paused_pair):
    """A client pauses writes for a day and goes: Redis keeps the pause (as
    it does without sluice); reads still flow on the shared connection,
    writes wait on connections of their own, and an UNPAUSE releases them."""
    srv, s = paused_pair
    with s.raw() as p:
        assert p.call("CLIENT", "PAUSE", "86400000", "WRITE") == Simple("OK")
    with s.raw(10 * SLOW) as w, s.raw() as r:
        w.send_command("SET", "h", "1")
        wait_blocked(srv, 1)
        for _ in range(50):
            assert r.call("GET", "h") is None
        with s.raw() as u:
            assert u.call("CLIENT", "UNPAUSE") == Simple("OK")
        assert w.read_reply() == Simple("OK")
        assert r.call("GET", "h") == b"1"


def test_many_writers_during_pause_bounded_by_backend_max_connections(redis_factory,
                                                                      sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory, backend_connections=1,
                        backend_max_connections=3, backend_spare_connections=0)
    conns = []
    try:
        with s.raw() as admin:
            assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
            # The pauser's own one-shot is answered and gone: 3 writers fit.
            wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="one-shot freed")
            for i in range(5):
                c = s.raw(10 * SLOW)
                conns.append(c)
                c.send_command("SET", f"m:{i}", "1")
            wait_blocked(srv, 3)
            errors = []
            for c in conns:
                try:
                    errors.append(c.read_reply(timeout=0.5 * SLOW))
                except socket.timeout:
                    pass
            assert errors == [Err("ERR max number of backend connections reached "
                                  "(backend_max_connections)")] * 2, errors
            assert admin.call("GET", "m:0") is None   # reads unaffected
            # Through sluice UNPAUSE would need a one-shot connection too, and
            # none is left: the operator reaches Redis directly.
            unpause_direct(srv)
            replies = []
            for c in conns:
                try:
                    replies.append(c.read_reply(timeout=2 * SLOW))
                except socket.timeout:
                    pass
            assert replies.count(Simple("OK")) == 3, replies
    finally:
        for c in conns:
            c.close()
        unpause_direct(srv)


def test_lock_during_pause_does_not_hold_shared_connection(paused_pair):
    """sluice's own script (LOCK's EVAL) is held by Redis during a WRITE
    pause: it goes on a one-shot connection, the shared one serves on."""
    srv, s = paused_pair
    with s.raw() as admin, s.raw(10 * SLOW) as locker, s.raw() as reader:
        hold_under_pause(srv, admin, locker, reader, ("LOCK", "lk", "10000"), "r", "x")
        assert admin.call("CLIENT", "UNPAUSE") == Simple("OK")
        got = locker.read_reply()
        assert isinstance(got, bytes) and got, got   # the lock's token


@contextlib.contextmanager
def write_held_by_pause(redis_factory, sluice_factory, pause_ms):
    """Sluice with an idle timeout of 1 s; yields (Redis, a client whose
    SET Redis holds for a WRITE pause of PAUSE_MS)."""
    srv, s = start_pair(redis_factory, sluice_factory, timeout=1)
    try:
        with s.raw(10 * SLOW) as c, s.raw(10 * SLOW) as w:
            assert c.call("CLIENT", "PAUSE", str(int(pause_ms * SLOW)), "WRITE") == Simple("OK")
            w.send_command("SET", "held", "1")
            wait_blocked(srv, 1)
            yield srv, w
    finally:
        unpause_direct(srv)


def test_long_pause_raises_no_error(redis_factory, sluice_factory):
    """No sluice timer takes a connection with no reply for long for dead:
    with an idle timeout of 1 s, a write held 3 s still gets its reply."""
    with write_held_by_pause(redis_factory, sluice_factory, 3000) as (_, w):
        assert w.read_reply() == Simple("OK")


def test_idle_time_counts_from_the_late_reply(redis_factory, sluice_factory):
    """Idle time counts from the client's last read or reply, as Redis
    counts it: a client whose reply came after more than the idle timeout
    has its whole timeout again from then (it was closed at the next tick,
    and the reply with it when the tick and the reply met in one pass)."""
    with write_held_by_pause(redis_factory, sluice_factory, 30000) as (srv, w):
        time.sleep(1.5)   # past the idle timeout while it waits
        unpause_direct(srv)
        assert w.read_reply() == Simple("OK")
        time.sleep(0.4)   # several ticks, well within the timeout
        assert w.call("PING") == Simple("PONG")


# --------------------------------------------------------------------------
# hostile tunnels


def test_sync_pipelined_behind_a_command_waits_for_its_reply(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    t = Tunnel(s.port, 10 * SLOW)
    try:
        t.sock.sendall(b"PING\r\nSYNC\r\n")
        assert t.line() == b"+PONG"
        t.rdb()
    finally:
        t.close()


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_tunnel_client_not_reading_does_not_grow_sluice(redis_factory, sluice_factory):
    """A replica that does not read its RDB: sluice stops reading its
    connection (Redis keeps the rest), other clients are served, and once
    it reads it gets the whole RDB."""
    srv, s = start_pair(redis_factory, sluice_factory)
    d = srv.client()
    blob = bytes(range(256)) * 4096   # 1 MB that LZF cannot shrink much
    for i in range(40):
        d.set(f"big:{i}", blob[i:] + blob[:i])
    d.config_set("rdbcompression", "no")
    d.close()
    before = _rss_kb(s.proc.pid)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(30 * SLOW)
    sock.connect(("127.0.0.1", s.port))
    try:
        sock.sendall(b"SYNC\r\n")
        time.sleep(2 * SLOW)   # Redis writes the RDB; nobody reads it
        with s.raw() as c:
            assert c.call("PING") == Simple("PONG")
        grown_mb = (_rss_kb(s.proc.pid) - before) / 1024
        assert grown_mb < 20, f"sluice grew by {grown_mb:.1f} MB for a 40 MB RDB"
        t = Tunnel.__new__(Tunnel)
        t.sock, t.buf = sock, b""
        data = t.rdb()
        assert len(data) > 40 * 1024 * 1024
    finally:
        sock.close()
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


def test_pause_that_could_not_be_sent_turns_nothing_on(redis_factory, sluice_factory):
    """CLIENT PAUSE refused for want of a connection never reached Redis:
    sluice must not go on detouring writes for its timeout."""
    srv, s = start_pair(redis_factory, sluice_factory, backend_max_connections=1,
                        backend_spare_connections=0)
    with s.raw() as tx, s.raw() as admin:
        assert tx.call("MULTI") == Simple("OK")   # takes the one connection
        got = admin.call("CLIENT", "PAUSE", "86400000", "WRITE")
        assert got == Err("ERR max number of backend connections reached "
                          "(backend_max_connections)"), got
        for i in range(5):
            assert admin.call("SET", "np", str(i)) == Simple("OK")
        assert int(s.info()["pause_detours"]) == 0
        assert tx.call("DISCARD") == Simple("OK")


def test_shared_rule_bucket_during_pause_does_not_hold_shared_connection(redis_factory,
                                                                          sluice_factory):
    """A shared rule asks Redis (a script) before a SET: during a WRITE pause
    that question is held by Redis, on a one-shot connection, while the one
    shared connection keeps serving reads."""
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False, rules="rules.ini", backend_connections=1)
    (s.dir / "rules.ini").write_text(
        "[limit sets]\ncommands = SET\nrate = 1000/s\nburst = 1000\nscope = shared\n")
    s.start()
    try:
        with s.raw() as admin, s.raw(10 * SLOW) as writer, s.raw() as reader:
            assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
            writer.send_command("SET", "ru", "1")
            wait_blocked(srv, 1)
            for _ in range(20):
                assert reader.call("GET", "ru") is None
            assert admin.call("CLIENT", "UNPAUSE") == Simple("OK")
            assert writer.read_reply() == Simple("OK")
            assert reader.call("GET", "ru") == b"1"
    finally:
        unpause_direct(srv)


def test_redis_cli_replica_shows_writes_through_sluice(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    proc = subprocess.Popen(["redis-cli", "-p", str(s.port), "--replica"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = []

        def reader():
            for line in proc.stdout:
                seen.append(line)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        wait_until(lambda: private_conns(s) == 1, 10 * SLOW, msg="tunnel open")
        with s.raw() as c:
            wait_until(lambda: c.call("SET", "cli-replica", "seen") == Simple("OK") and
                       any(b"cli-replica" in l for l in seen), 10 * SLOW,
                       msg="the SET in redis-cli --replica's output")
    finally:
        proc.kill()
        proc.wait(5)
    wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="private connection freed")


def test_writers_leaving_during_pause_free_their_connections(redis_factory, sluice_factory):
    """Clients whose writes Redis holds, and who then leave, take their
    one-shot connections with them (as they would leave Redis): a client
    cannot use up backend_max_connections by writing and leaving during a
    pause. Redis never runs those writes, as without sluice."""
    srv, s = start_pair(redis_factory, sluice_factory, backend_max_connections=4,
                        backend_spare_connections=0)
    try:
        with s.raw() as admin:
            assert admin.call("CLIENT", "PAUSE", "60000", "WRITE") == Simple("OK")
            for round_ in range(3):
                conns = [s.raw() for _ in range(4)]
                for i, c in enumerate(conns):
                    c.send_command("SET", f"gone:{round_}:{i}", "1")
                wait_blocked(srv, 4)
                for c in conns:
                    c.close()
                wait_until(lambda: private_conns(s) == 0, 5 * SLOW, msg="one-shots closed")
                wait_blocked(srv, 0)
            with s.raw(10 * SLOW) as w:   # room again for a writer who stays
                w.send_command("SET", "stays", "1")
                wait_blocked(srv, 1)
                unpause_direct(srv)
                assert w.read_reply() == Simple("OK")
            assert admin.call("EXISTS", "gone:0:0", "gone:2:3") == 0
    finally:
        unpause_direct(srv)


@pytest.mark.parametrize("cmd", [b"SYNC\r\n", b"PSYNC ? -1\r\n", b"SUBSCRIBE ch\r\n"])
def test_sync_or_subscribe_past_backend_max_connections_gets_the_error(cmd, redis_factory,
                                                                       sluice_factory):
    """SYNC (and SUBSCRIBE) wait in no reply queue: when no private
    connection can be had they still get the error, and sluice keeps nothing
    of them."""
    srv, s = start_pair(redis_factory, sluice_factory, backend_connections=1,
                        backend_max_connections=1, backend_spare_connections=0)
    first = Tunnel(s.port, 10 * SLOW)
    try:
        first.sock.sendall(b"SYNC\r\n")
        first.rdb()   # the last connection sluice may open
        with s.raw() as c:
            c.send(cmd)
            assert c.read_reply() == Err("ERR max number of backend connections reached "
                                         "(backend_max_connections)")
            assert c.call("PING") == Simple("PONG")   # not a tunnel: the client goes on
    finally:
        first.close()
    s.check_stop()


def test_sync_in_resp3_gets_the_rdb(redis_factory, sluice_factory):
    """A RESP3 client's SYNC is Redis's first command on the private
    connection: a HELLO sent before it would leave a reply pending, and Redis
    refuses SYNC with pending output."""
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("SET", "before", "1") == Simple("OK")
        assert c.call("HELLO", "3")[0] == "map"
        t = Tunnel.__new__(Tunnel)
        t.sock, t.buf = c.sock, b""
        c.send(b"SYNC\r\n")
        assert b"before" in t.rdb()
    s.check_stop()


def test_unpause_answered_after_a_later_pause_keeps_it(redis_factory, sluice_factory):
    """One client's UNPAUSE and another's PAUSE reach Redis in that order
    (Redis is busy while both come): UNPAUSE's +OK is read after the PAUSE
    was forwarded, yet Redis is paused. sluice keeps routing around the
    pause, so a write held by it holds no read of another client."""
    srv, s = start_pair(redis_factory, sluice_factory, "--enable-debug-command", "yes",
                        backend_connections=1)
    try:
        with s.raw(10 * SLOW) as a, s.raw(10 * SLOW) as b, s.raw(10 * SLOW) as writer, \
                s.raw() as reader, srv.raw(timeout=10) as d:
            d.send_command("DEBUG", "SLEEP", "1")

            def asleep():
                with srv.raw(timeout=0.1) as probe:
                    try:
                        probe.call("PING")
                    except socket.timeout:
                        return True
                return False
            wait_until(asleep, 5 * SLOW, msg="Redis in DEBUG SLEEP")
            a.send_command("CLIENT", "UNPAUSE")
            wait_until(lambda: private_conns(s) == 1, 5 * SLOW, msg="UNPAUSE forwarded")
            b.send_command("CLIENT", "PAUSE", "100000", "WRITE")
            assert d.read_reply() == Simple("OK")
            assert a.read_reply() == Simple("OK")
            assert b.read_reply() == Simple("OK")
            writer.send_command("SET", "k", "new")
            wait_blocked(srv, 1)
            assert reader.call("GET", "k") is None
            assert b.call("CLIENT", "UNPAUSE") == Simple("OK")
            assert writer.read_reply() == Simple("OK")
            assert reader.call("GET", "k") == b"new"
    finally:
        unpause_direct(srv)
