"""Hostile and careless clients against the shared backend connections.

sluice sends many clients' commands over a few shared connections to Redis
and pairs the replies with the requests by their order. One client must not
be able to crash sluice, send its replies to another client, stall everyone
(by blocking a shared connection, by not reading, by a runaway script),
reset the shared connection, or leave connections behind. Each test here
gives every socket a timeout and every thread a join deadline, so that a
misbehaving sluice fails the test instead of hanging it.

Most tests start their own redis-server and sluice (redis_factory,
sluice_factory): a crash or a desync stays in the test that caused it, and
the sanitizer check at sluice's stop is blamed on that test.
"""

import random
import select
import socket
import threading
import time

import pytest

from conftest import DIRECT
from helpers import SLOW, Err, RawConn, Simple, encode_command, rss_kb, wait_until

BIG = b"v" * 100_000


# --------------------------------------------------------------------------
# helpers


def start_pair(redis_factory, sluice_factory, *redis_args, **cfg):
    srv = redis_factory(*redis_args)
    return srv, sluice_factory(srv.port, **cfg)


def replies_or_timeout(conn, n, timeout):
    """Up to N parsed replies from CONN within TIMEOUT; a missing reply is
    the string "<timeout>" or "<eof>", so a desync shows in the comparison
    instead of as an exception."""
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n:
            out.append(conn.read_reply(timeout=max(0.01, deadline - time.monotonic())))
    except (socket.timeout, TimeoutError):
        out += ["<timeout>"] * (n - len(out))
    except (EOFError, ConnectionError):
        out += ["<eof>"] * (n - len(out))
    return out


def one_reply(port, *cmd, timeout):
    """Send CMD on a fresh connection; returns (reply, seconds), reply being
    "<timeout>" or "<eof>" when none came."""
    t0 = time.monotonic()
    try:
        with RawConn(port, timeout=timeout) as c:
            c.send_command(*cmd)
            got = replies_or_timeout(c, 1, timeout)[0]
    except OSError as e:
        got = f"<{e!r}>"
    return got, time.monotonic() - t0


def assert_quiet(conn, seconds=0.3):
    """No more bytes arrive on CONN for SECONDS (a reply that should have
    been swallowed, or a stray one, would)."""
    data, closed = conn.read_all_until_eof(seconds)
    assert data == b"" and not closed, f"unexpected bytes {data[:200]!r} (closed={closed})"


def assert_serves(s, timeout=5 * SLOW):
    """sluice's process runs and a new client gets PONG."""
    got, _ = one_reply(s.port, "PING", timeout=timeout)
    running = s.running or DIRECT
    assert running and got == Simple("PONG"), (
        f"sluice running: {running} (exit status {s.proc and s.proc.poll()}), "
        f"PING through it: {got!r}\nlog:\n{log_excerpt(s)}")


def log_excerpt(s, size=3000):
    """The start of a sanitizer report in S's log, else the log's tail."""
    text = s.log_path.read_text(errors="replace")
    at = text.find("==ERROR")
    return text[at:at + size] if at >= 0 else text[-size:]


def pipeline(*cmds):
    return b"".join(encode_command(*c) for c in cmds)


def assert_no_crosstalk(s, n=200, timeout=10 * SLOW):
    """Clients A and B pipeline N SET/GET pairs each, interleaved; every
    reply must be the one of its own client's request."""
    with s.raw(timeout) as a, s.raw(timeout) as b:
        for i in range(n):
            a.send(pipeline(("SET", f"a:{i}", f"va:{i}"), ("GET", f"a:{i}")))
            b.send(pipeline(("SET", f"b:{i}", f"vb:{i}"), ("GET", f"b:{i}")))
        for name, conn in (("a", a), ("b", b)):
            got = replies_or_timeout(conn, 2 * n, timeout)
            want = []
            for i in range(n):
                want += [Simple("OK"), f"v{name}:{i}".encode()]
            bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
            assert not bad, f"client {name}: {len(bad)} wrong replies, first: {bad[:3]}"
            assert_quiet(conn, 0.2)


def redis_clients(srv):
    """CLIENT LIST of SRV, asked directly (not through sluice)."""
    d = srv.client(socket_timeout=5)
    try:
        return d.client_list()
    finally:
        d.close()


def commandstat_calls(srv, name):
    d = srv.client(socket_timeout=5)
    try:
        stats = d.info("commandstats")
    finally:
        d.close()
    return stats.get(f"cmdstat_{name}", {}).get("calls", 0)


def connected_clients(s):
    """sluice's connected_clients, not counting the connection asking."""
    return int(s.info()["connected_clients"]) - 1


def kill_scripts_direct(srv):
    """End any running script or function on SRV so that teardown cannot
    hang behind it; errors (NOTBUSY, server gone) are fine."""
    for cmd in (("SCRIPT", "KILL"), ("FUNCTION", "KILL")):
        try:
            with srv.raw(timeout=2) as c:
                c.call(*cmd)
        except (OSError, EOFError):
            pass


# --------------------------------------------------------------------------
# 1. no crash: a request without a reply (CLIENT REPLY SKIP/OFF, pub/sub),
# then LOCK, then hang up at once


NOREPLY_FIRST = {
    "reply-skip": ("CLIENT", "REPLY", "SKIP"),
    "reply-off": ("CLIENT", "REPLY", "OFF"),
    # found by the storm below: in pub/sub mode replies are not paired either
    "subscribe": ("SUBSCRIBE", "ch"),
}


@pytest.mark.parametrize("mode", list(NOREPLY_FIRST))
def test_noreply_then_lock_then_close_does_not_crash(mode, redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    for i in range(20):
        if not s.running:
            break
        c = s.raw()
        c.send(pipeline(NOREPLY_FIRST[mode], ("LOCK", f"k{i}", "1000")))
        c.close()
        if i % 5 == 4:
            time.sleep(0.05)
    time.sleep(0.3)
    assert_serves(s)
    # A lock taken for a client that never saw its token still expires.
    d = srv.client()
    assert all(-2 <= d.pttl(f"k{i}") <= 1000 and d.pttl(f"k{i}") != -1 for i in range(20))
    d.close()
    s.check_stop()   # sanitizer report or bad exit status fails here


# --------------------------------------------------------------------------
# 2. replies never go to the wrong client


# SYNC and PSYNC are tunnels now (test_sync_pause.py); REPLCONF ACK and
# GETACK outside one get no reply from Redis, so they stay refused.
@pytest.mark.parametrize("cmd", [("REPLCONF", "ACK", "0"), ("REPLCONF", "GETACK", "*")],
                         ids=["replconf-ack", "replconf-getack"])
def test_replication_commands_refused(cmd, redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    name = cmd[0].lower()
    with s.raw(timeout=3 * SLOW) as c:
        c.send_command(*cmd)
        got = replies_or_timeout(c, 1, 3 * SLOW)[0]
    assert isinstance(got, Err) and got.startswith(f"ERR sluice does not forward '{name}'"), \
        f"{' '.join(cmd)}: {got!r}"
    assert commandstat_calls(srv, name) == 0, f"{name} reached Redis"
    assert_no_crosstalk(s)


def _client_reply_case(srv, s, script, want):
    """Run SCRIPT (pipelined) on one client while another pipelines GETs
    of its own keys around it; the first gets exactly WANT, the other its
    own values."""
    d = srv.client()
    d.mset({f"b:{i}": f"vb:{i}" for i in range(400)})
    d.close()
    with s.raw(5 * SLOW) as c, s.raw(5 * SLOW) as b:
        b.send(pipeline(*[("GET", f"b:{i}") for i in range(200)]))
        c.send(pipeline(*script))
        b.send(pipeline(*[("GET", f"b:{i}") for i in range(200, 400)]))
        got = replies_or_timeout(c, len(want), 5 * SLOW)
        assert got == want
        assert_quiet(c)
        got_b = replies_or_timeout(b, 400, 5 * SLOW)
        bad = [(i, g) for i, g in enumerate(got_b) if g != f"vb:{i}".encode()]
        assert not bad, f"other client: {len(bad)} wrong replies, first: {bad[:3]}"
        assert_quiet(b)


def test_client_reply_off_on_swallows_only_its_replies(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    _client_reply_case(srv, s, [("CLIENT", "REPLY", "OFF"), ("SET", "x", "1"),
                                ("CLIENT", "REPLY", "ON"), ("GET", "x")],
                       [Simple("OK"), b"1"])
    assert_no_crosstalk(s)


def test_client_reply_skip_swallows_one_reply(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    _client_reply_case(srv, s, [("CLIENT", "REPLY", "SKIP"), ("SET", "y", "2"), ("GET", "y")],
                       [b"2"])
    assert_no_crosstalk(s)


def test_client_reply_needs_no_private_connection(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        c.send(pipeline(("CLIENT", "REPLY", "OFF"), ("SET", "x", "1"), ("CLIENT", "REPLY", "ON")))
        assert c.read_reply() == Simple("OK")
        assert c.call("GET", "x") == b"1"
        assert s.info()["backend_private_connections"] == "0"
    assert s.info()["backend_private_connections"] == "0"


def _stream_bytes(port, script, wait):
    """Every byte a new connection to PORT gets for SCRIPT (pipelined)
    within WAIT seconds, and whether the peer closed it."""
    with RawConn(port, timeout=wait) as c:
        c.send(pipeline(*script))
        return c.read_all_until_eof(wait)


# CLIENT REPLY changes the mode when it runs, where Redis runs it: refused
# in RESP2 pub/sub (the mode stays), in order with the replies before it,
# and so do the commands sluice answers itself under OFF (a refused SETNAME
# names nobody; one after EXEC runs after the queued one).
CLIENT_REPLY_ORDER = {
    "subscribed-off": [("SUBSCRIBE", "a"), ("CLIENT", "REPLY", "OFF"), ("PING",)],
    "subscribed-on": [("SUBSCRIBE", "a"), ("CLIENT", "REPLY", "ON"), ("PING",)],
    "subscribed-skip": [("SUBSCRIBE", "a"), ("CLIENT", "REPLY", "SKIP"), ("PING",)],
    "subscribed-arity": [("SUBSCRIBE", "a"), ("CLIENT", "REPLY"), ("CLIENT", "SETNAME"),
                         ("PING",)],
    "off-then-subscribed-on": [("CLIENT", "REPLY", "OFF"), ("SUBSCRIBE", "a"), ("PING",),
                               ("CLIENT", "REPLY", "ON"), ("PING",)],
    "off-subscribed-setname": [("CLIENT", "REPLY", "OFF"), ("SUBSCRIBE", "x"),
                               ("CLIENT", "SETNAME", "a"), ("UNSUBSCRIBE",),
                               ("CLIENT", "REPLY", "ON"), ("CLIENT", "GETNAME")],
    "subscribed-off-setname": [("SUBSCRIBE", "x"), ("CLIENT", "REPLY", "OFF"),
                               ("CLIENT", "SETNAME", "a"), ("UNSUBSCRIBE",),
                               ("CLIENT", "REPLY", "ON"), ("CLIENT", "GETNAME")],
    "off-setname-after-exec": [("CLIENT", "REPLY", "OFF"), ("MULTI",),
                               ("CLIENT", "SETNAME", "a"), ("EXEC",),
                               ("CLIENT", "SETNAME", "b"), ("CLIENT", "REPLY", "ON"),
                               ("CLIENT", "GETNAME")],
    "monitor-off": [("MONITOR",), ("CLIENT", "REPLY", "OFF"), ("PING",)],
    "unsubscribed-off": [("SUBSCRIBE", "a"), ("UNSUBSCRIBE",), ("CLIENT", "REPLY", "OFF"),
                         ("PING",), ("CLIENT", "REPLY", "ON"), ("PING",)],
}


@pytest.mark.parametrize("case", list(CLIENT_REPLY_ORDER))
def test_client_reply_runs_where_redis_runs_it(case, redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    ref = redis_factory()
    script = CLIENT_REPLY_ORDER[case]
    got = _stream_bytes(s.port, script, 1.0 * SLOW)
    want = _stream_bytes(ref.port, script, 1.0 * SLOW)
    assert got == want, f"sluice {got!r}\nredis  {want!r}"
    assert_serves(s)


def test_client_reply_refused_for_noauth_changes_nothing(redis_factory, sluice_factory):
    """Redis asks for a password and sluice has none of its own: a CLIENT
    REPLY OFF before AUTH gets -NOAUTH and leaves the replies on."""
    srv, ref = redis_factory(), redis_factory()
    s = sluice_factory(srv.port, start=False)
    for x in (srv, ref):
        d = x.client()
        d.config_set("requirepass", "pw")
        d.close()
    s.start()
    script = [("CLIENT", "REPLY", "OFF"), ("AUTH", "pw"), ("PING",)]
    got = _stream_bytes(s.port, script, 1.0 * SLOW)
    want = _stream_bytes(ref.port, script, 1.0 * SLOW)
    assert want[0].startswith(b"-NOAUTH")
    assert got == want


# --------------------------------------------------------------------------
# 3. a blocking XREAD/XREADGROUP with keys or names that look like options


XREAD_CASES = {
    # consumer named "streams": the BLOCK comes after it
    "xreadgroup-consumer-streams": ("s", "g", ("XREADGROUP", "GROUP", "g", "streams", "BLOCK",
                                               "0", "STREAMS", "s", ">")),
    # group named "streams"
    "xreadgroup-group-streams": ("s", "streams", ("XREADGROUP", "GROUP", "streams", "c",
                                                  "BLOCK", "0", "STREAMS", "s", ">")),
    # consumer named "block" in a group named "streams"
    "xreadgroup-streams-block": ("s", "streams", ("XREADGROUP", "GROUP", "streams", "block",
                                                  "COUNT", "1", "BLOCK", "0", "STREAMS", "s", ">")),
    # a stream key named "streams" / "block"
    "xread-key-streams": ("streams", None, ("XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS",
                                            "streams", "$")),
    "xread-key-block": ("block", None, ("XREAD", "BLOCK", "0", "STREAMS", "block", "$")),
}


@pytest.mark.parametrize("case", list(XREAD_CASES))
def test_blocking_stream_read_does_not_block_others(case, redis_factory, sluice_factory):
    key, group, cmd = XREAD_CASES[case]
    srv, s = start_pair(redis_factory, sluice_factory)
    d = srv.client()
    try:
        if group is not None:
            d.xgroup_create(key, group, "$", mkstream=True)
        d.set("x", "42")
        with s.raw(timeout=10 * SLOW) as blocked:
            blocked.send_command(*cmd)
            time.sleep(0.3)
            got, secs = one_reply(s.port, "GET", "x", timeout=1 * SLOW)
            assert got == b"42", f"GET x while {' '.join(cmd)} blocks: {got!r} after {secs:.2f} s"
            entry_id = d.xadd(key, {"f": "v"})
            reply = replies_or_timeout(blocked, 1, 5 * SLOW)[0]
            assert reply == [[key.encode(), [[entry_id, [b"f", b"v"]]]]], reply
    finally:
        d.close()


# --------------------------------------------------------------------------
# 5. a client that does not read its replies


class SlowReader:
    """A client that pipelines COUNT `GET big` and never reads. A thread
    writes with a send timeout and stops when the write stalls."""

    def __init__(self, port, count):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(1)
        self.count = count
        self.stop = threading.Event()
        self.sent = 0
        self.stalled = False
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self):
        chunk = encode_command("GET", "big") * 100
        while self.sent < self.count and not self.stop.is_set():
            try:
                self.sock.sendall(chunk)
            except socket.timeout:
                self.stalled = True
                return
            except OSError:
                return
            self.sent += 100

    def close(self):
        self.stop.set()
        self.thread.join(5)
        try:
            self.sock.close()
        except OSError:
            pass
        assert not self.thread.is_alive(), "slow-reader thread did not end"


def test_slow_reader_does_not_stall_others(redis_factory, sluice_factory):
    # The hard limit only keeps a broken sluice from eating the machine's
    # memory: the test asks for far less than it.
    srv, s = start_pair(redis_factory, sluice_factory,
                        "--client-output-buffer-limit", "normal 512mb 512mb 0")
    d = srv.client()
    d.set("big", BIG)
    d.set("small", "s")
    slow = SlowReader(s.port, 20_000)
    probes, omem = [], []
    try:
        time.sleep(0.3)
        end = time.monotonic() + 3
        while time.monotonic() < end:
            probes.append(one_reply(s.port, "GET", "small", timeout=1 * SLOW))
            omem.append(max(int(c["omem"]) for c in redis_clients(srv)))
            time.sleep(0.2)
    finally:
        slow.close()
    d.close()
    slow_probes = [(g, round(t, 2)) for g, t in probes if g != b"s" or t >= 1 * SLOW]
    assert not slow_probes and max(omem) < 64 * 1024 * 1024, \
        (f"GET small while a client does not read: {len(slow_probes)} of {len(probes)} "
         f"slow or wrong {slow_probes[:5]}; Redis's largest output buffer {max(omem)} bytes")
    assert_serves(s)


def test_inflight_limit_throttles_never_drops(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory, client_max_inflight=4)
    with s.raw(timeout=10 * SLOW) as c:
        c.send(pipeline(*[("INCR", "n")] * 1000))
        got = replies_or_timeout(c, 1000, 10 * SLOW)
        assert got == list(range(1, 1001))
        assert_quiet(c)


# --------------------------------------------------------------------------
# 6. clients that go away are freed


def _blpop_waiting(srv):
    return [c for c in redis_clients(srv) if c.get("cmd") == "blpop"]


def _wait_freed(s, srv, base):
    wait_until(lambda: connected_clients(s) == base, 3 * SLOW,
               msg=f"sluice's connected_clients back to {base}")
    wait_until(lambda: not _blpop_waiting(srv), 3 * SLOW,
               msg="Redis to show no connection blocked in BLPOP")


@pytest.mark.parametrize("how", ["protocol-error-then-close", "close"])
def test_client_gone_while_blocked_is_freed(how, redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    base = connected_clients(s)
    c = s.raw()
    c.send_command("BLPOP", "k", "0")
    wait_until(lambda: _blpop_waiting(srv), 3 * SLOW, msg="BLPOP to reach Redis")
    if how == "protocol-error-then-close":
        c.send(b"*1\r\n$x\r\n")
        time.sleep(0.2)
    c.close()
    _wait_freed(s, srv, base)
    assert_serves(s)


def test_client_gone_while_paused_by_limit_is_freed(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory,
                        "--client-output-buffer-limit", "normal 512mb 512mb 0")
    srv.client().set("big", BIG)
    base = connected_clients(s)
    slow = SlowReader(s.port, 2_000)
    time.sleep(1.0)
    slow.close()
    _wait_freed(s, srv, base)
    assert_serves(s)


# --------------------------------------------------------------------------
# 9. private connections of clients closed when Redis restarts


def test_private_connections_freed_when_redis_restarts(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    conns = [s.raw() for _ in range(100)]
    try:
        for c in conns:
            c.send_command("SELECT", "0")
        for c in conns:
            assert c.read_reply() == Simple("OK")
        assert int(s.info()["backend_private_connections"]) == 100
        srv.stop()
        deadline = time.monotonic() + 5 * SLOW
        still_open = [c for c in conns
                      if not c.is_closed_by_peer(max(0.01, deadline - time.monotonic()))]
        assert not still_open, f"{len(still_open)} clients not closed after Redis stopped"
        srv.start()
        wait_until(lambda: one_reply(s.port, "PING", timeout=1)[0] == Simple("PONG"),
                   5 * SLOW, msg="PING through sluice after Redis restarted")
        private = int(s.info()["backend_private_connections"])
    finally:
        for c in conns:
            c.close()
    problems = s.stop()   # LeakSanitizer reports here on the sanitizer build
    assert private == 0 and not problems, \
        f"private connections after the restart: {private}; {problems}\n{log_excerpt(s)}"


# --------------------------------------------------------------------------
# 11. a runaway script can be killed (and Redis shut down) through sluice


SPIN_FUNCTION = "#!lua name=spin\nredis.register_function('spin', function() while true do end end)"


@pytest.mark.parametrize("kind", ["script", "function"])
def test_runaway_script_can_be_killed(kind, redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory, "--busy-reply-threshold", "100")
    if kind == "script":
        run, kill = ("EVAL", "while true do end", "0"), ("SCRIPT", "KILL")
    else:
        srv.client().execute_command("FUNCTION", "LOAD", SPIN_FUNCTION)
        run, kill = ("FCALL", "spin", "0"), ("FUNCTION", "KILL")
    a = s.raw(timeout=10 * SLOW)
    try:
        a.send_command(*run)
        time.sleep(0.5)
        got, secs = one_reply(s.port, *kill, timeout=2)
        assert got == Simple("OK"), f"{' '.join(kill)} through sluice: {got!r} after {secs:.2f} s"
        ra = replies_or_timeout(a, 1, 5 * SLOW)[0]
        assert isinstance(ra, Err) and "Script killed" in ra, ra
        assert_serves(s)
    finally:
        kill_scripts_direct(srv)
        a.close()


def test_shutdown_while_script_runs(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory, "--busy-reply-threshold", "100")
    a = s.raw(timeout=10 * SLOW)
    try:
        a.send_command("EVAL", "while true do end", "0")
        time.sleep(0.5)
        with s.raw(timeout=3) as b:
            b.send_command("SHUTDOWN", "NOSAVE")
            try:
                srv.proc.wait(timeout=3)
            except Exception:  # noqa: BLE001 - reported below
                pass
            assert srv.proc.poll() is not None, "Redis still runs 3 s after SHUTDOWN NOSAVE"
    finally:
        kill_scripts_direct(srv)
        a.close()
    assert s.running or DIRECT


# --------------------------------------------------------------------------
# 12. inline command with many arguments


def test_inline_command_with_2000_arguments(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    line = "RPUSH l " + " ".join(f"a{i}" for i in range(1, 2001)) + "\r\n"
    with s.raw() as c:
        c.send(line.encode())
        assert replies_or_timeout(c, 1, 5 * SLOW) == [2000]
    d = srv.client()
    assert d.llen("l") == 2000 and d.lindex("l", -1) == b"a2000"
    d.close()


# --------------------------------------------------------------------------
# 13. nobody resets the shared connection for everybody


def _sluice_pool_ids(s):
    """The Redis client ids of sluice's shared connections, as PROXY INFO
    tells them (backend_N: ...,redis_id=ID,laddr=...). Guessing them from
    Redis's CLIENT LIST would also pick up other connections."""
    ids = []
    for key, value in s.info().items():
        if key.startswith("backend_") and "redis_id=" in value:
            ids.append(int(value.split("redis_id=")[1].split(",")[0]))
    return [i for i in ids if i > 0]


REFUSED_CLIENT_CMDS = {
    "kill-id-pool": ("client|kill", None),
    "kill-laddr-pool": ("client|kill", None),
}
# CLIENT PAUSE/UNPAUSE are forwarded now: test_sync_pause.py checks that a
# pause never holds the shared connections.


@pytest.mark.parametrize("case", list(REFUSED_CLIENT_CMDS))
def test_client_kill_never_reaches_the_pool(case, redis_factory, sluice_factory):
    name, cmd = REFUSED_CLIENT_CMDS[case]
    # Two pool connections: a kill sent on one may hit the other.
    srv, s = start_pair(redis_factory, sluice_factory, backend_connections=2)
    d = srv.client(single_connection_client=True)
    d.mset({f"k:{i}": f"v:{i}" for i in range(1000)})
    assert one_reply(s.port, "PING", timeout=5)[0] == Simple("PONG")   # the pool is up
    pool = _sluice_pool_ids(s)
    assert pool, "no connection from sluice in Redis's CLIENT LIST"
    cmds = [cmd]
    if case == "kill-laddr-pool":
        cmds = [("CLIENT", "KILL", c["addr"]) for c in redis_clients(srv) if int(c["id"]) in pool]
    try:
        with s.raw(timeout=10 * SLOW) as b, s.raw(timeout=5 * SLOW) as a:
            if case == "kill-id-pool":
                # CLIENT KILL ID names sluice's clients (CLIENT ID), never a
                # connection of sluice's: a pool connection's Redis id that
                # is no sluice client's id names nobody (issue 11).
                own = {one_reply_id(a), one_reply_id(b)}
                cmds = [("CLIENT", "KILL", "ID", str(i)) for i in pool if i not in own]
            b.send(pipeline(*[("GET", f"k:{i}") for i in range(1000)]))
            a.send(pipeline(*cmds))
            got = replies_or_timeout(a, len(cmds), 5 * SLOW)
            got_b = replies_or_timeout(b, 1000, 10 * SLOW)
        for cmd, reply in zip(cmds, got):
            # CLIENT KILL names sluice's clients (issue 11): Redis sees it with a
            # filter that matches nobody, so no address or id reaches a
            # connection of sluice's; these name no sluice client.
            if case == "kill-id-pool":
                assert reply == 0, f"{' '.join(cmd)}: {reply!r}"
                continue
            if case == "kill-laddr-pool":
                assert reply == Err("ERR No such client"), f"{' '.join(cmd)}: {reply!r}"
                continue
            assert isinstance(reply, Err) and \
                reply.startswith(f"ERR sluice does not forward '{name}'"), \
                f"{' '.join(cmd)}: {reply!r}"
        bad = [(i, g) for i, g in enumerate(got_b) if g != f"v:{i}".encode()]
        assert not bad, f"in-flight GETs: {len(bad)} wrong replies, first: {bad[:3]}"
        assert set(int(c["id"]) for c in redis_clients(srv)) >= set(pool), \
            "a pool connection of sluice was killed"
    finally:
        try:
            with srv.raw(timeout=2) as c:   # undo a PAUSE that got through
                c.call("CLIENT", "UNPAUSE")
        except (OSError, EOFError):
            pass
        d.close()


def one_reply_id(conn):
    return conn.call("CLIENT", "ID")


def test_client_kill_never_reaches_other_connections(redis_factory, sluice_factory):
    """CLIENT KILL acts on sluice's clients, as CLIENT LIST shows them
    (issue 11): a connection to Redis that is not sluice's cannot be named
    by its Redis id or address, and TYPE normal kills sluice's other
    clients, never sluice's own backend connections."""
    srv, s = start_pair(redis_factory, sluice_factory, backend_connections=2)
    assert one_reply(s.port, "PING", timeout=5)[0] == Simple("PONG")   # the pool is up
    pool = _sluice_pool_ids(s)
    with srv.raw() as victim:
        victim_id = victim.call("CLIENT", "ID")
        victim_addr = [c["addr"] for c in redis_clients(srv) if int(c["id"]) == victim_id][0]
        with s.raw() as a, s.raw() as b:
            assert b.call("PING") == Simple("PONG")
            if a.call("CLIENT", "ID") != victim_id:
                assert a.call("CLIENT", "KILL", "ID", str(victim_id)) == 0
            assert a.call("CLIENT", "KILL", "ADDR", victim_addr) == 0
            assert a.call("CLIENT", "KILL", victim_addr) == Err("ERR No such client")
            assert victim.call("PING") == Simple("PONG")
            assert a.call("CLIENT", "KILL", "TYPE", "normal") == 1   # b
            assert b.is_closed_by_peer(5 * SLOW)
            assert a.call("PING") == Simple("PONG")
        assert victim.call("PING") == Simple("PONG")
    assert set(int(c["id"]) for c in redis_clients(srv)) >= set(pool), \
        "a pool connection of sluice was killed"
    assert_serves(s)


# --------------------------------------------------------------------------
# storm of malformed input


PRINTABLE = bytes(33 + i % 94 for i in range(256))


def _garbage_line(rng, n):
    return rng.randbytes(n).translate(PRINTABLE)


def _valid_command(rng):
    k = f"storm:{rng.randrange(20)}"
    return encode_command(*rng.choice([
        ("SET", k, "v" * rng.randrange(1, 300)), ("GET", k), ("INCR", f"{k}:n"),
        ("PING",), ("LPUSH", f"{k}:l", "x"), ("SELECT", "0"), ("MULTI",), ("EXEC",),
        ("BLPOP", f"{k}:l", "0.01"), ("SUBSCRIBE", "storm"), ("LOCK", k, "500"),
        ("HSET", f"{k}:h", "f", "v"), ("DEL", k),
    ]))


def storm_message(rng):
    """One message of the storm: mostly malformed, some valid."""
    valid = _valid_command(rng)
    choice = rng.randrange(16)
    if choice == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if choice == 1:
        return valid[:rng.randrange(1, len(valid))]              # truncated RESP
    if choice == 2:
        return rng.choice([b"*99999999999\r\n", b"*1\r\n$99999999999\r\n",
                           b"*2147483648\r\n", b"*1\r\n$2147483648\r\n",
                           b"*-99999999999\r\n", b"*1\r\n$-99999999999\r\n"])
    if choice == 3:
        return rng.choice([b"*2\r\n$-5\r\n", b"*1\r\n$-1\r\n", b"*-5\r\n", b"$-5\r\n",
                           b"*1\r\n$x\r\n", b"*x\r\n", b"*1\r\n:5\r\n", b"*1\r\n$3\r\nPINGX\r\n",
                           b"*0\r\n", b"*1\r\n$0\r\n\r\n", b"*3\r\n$3\r\nSET\r\n"])
    if choice == 4:
        return b"\x00" * rng.randrange(1, 100) + rng.choice([b"", b"\r\n", b"\n"])
    if choice == 5:
        return rng.choice([b'SET "abc 1\r\n', b"GET 'x\r\n", b'SET a "b\\"\r\n',
                           b"SET 'a'b c\r\n", b'"\r\n', b"PING \"\\x4\"\r\n"])
    if choice == 6:
        return _garbage_line(rng, 100_000) + rng.choice([b"", b"\r\n"])
    if choice == 7:
        return rng.choice([b"\r\n", b"\n", b"   \r\n", b"PING\n", b"*1\r\n$4\r\nPING"])
    return valid


def _drain(sock, wait=0.002):
    """Read what arrives within WAIT seconds (the answer to what was just
    sent, so that the next message meets the state it left). False once
    the peer closed."""
    while select.select([sock], [], [], wait)[0]:
        if sock.recv(1 << 16) == b"":
            return False
        wait = 0
    return True


def _storm_worker(port, seed, connections, messages, deadline, errors, counts):
    """CONNECTIONS times, send MESSAGES storm messages, on a new connection
    whenever sluice closed the last one. Counts messages and connections
    in COUNTS; a failed connect ends the worker with an entry in ERRORS."""
    rng = random.Random(seed)
    for _ in range(connections):
        sent = 0
        while sent < messages and time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError as e:
                errors.append(f"connect: {e!r}")
                return
            counts["connections"] += 1
            try:
                sock.settimeout(2)
                while sent < messages and time.monotonic() < deadline:
                    msg = storm_message(rng)
                    sent += 1
                    counts["messages"] += 1
                    if rng.random() < 0.03:   # hang up in the middle of a message
                        sock.sendall(msg[:rng.randrange(0, len(msg) + 1)])
                        break
                    sock.sendall(msg)
                    if not _drain(sock):
                        break   # sluice closed it (protocol error)
            except (OSError, socket.timeout):
                pass   # reset by sluice after an error, or a stalled write
            finally:
                sock.close()


def test_malformed_input_storm(redis_factory, sluice_factory):
    srv, s = start_pair(redis_factory, sluice_factory)
    deadline = time.monotonic() + 10
    errors = []
    counts = {"messages": 0, "connections": 0}
    threads = [threading.Thread(target=_storm_worker,
                                args=(s.port, 1000 + i, 5, 200, deadline, errors, counts),
                                daemon=True)
               for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline + 5 - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "storm threads did not end"
    assert_serves(s)
    assert not errors, errors[:5]
    print(f"storm: {counts}")
    # The storm did happen (10 s is enough for all of it with room to spare).
    assert counts["messages"] >= 2000, counts
    c = s.client(socket_timeout=5 * SLOW)
    try:
        assert c.set("after-storm", "ok") is True
        assert c.get("after-storm") == b"ok"
    finally:
        c.close()
    assert_serves(s)
    s.check_stop()


def test_script_reply_nested_8000_deep_keeps_the_shared_connection(redis_factory, sluice_factory):
    """A script returning a recursive Lua table makes Redis answer with
    arrays nested about 8,000 deep (Redis's own scripting test). sluice
    frames it whole and passes it on as Redis wrote it; another client on
    the same shared connection never notices."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    script = "local a = {}; local b = {a}; a[1] = b; return a"
    want = {}
    for name, port in (("redis", srv.port), ("sluice", s.port)):
        with RawConn(port, timeout=10) as c, RawConn(port, timeout=10) as other:
            c.send(encode_command("EVAL", script, "0") + encode_command("PING"))
            other.send(encode_command("SET", "k", "v"))
            assert other.read_reply() == "OK"
            data = b""   # raw: the test helpers' parser recurses per level
            while not data.endswith(b"+PONG\r\n"):
                chunk = c.sock.recv(1 << 16)
                assert chunk, f"{name} closed the connection after {len(data)} bytes"
                data += chunk
            want[name] = data
            assert other.call("GET", "k") == b"v"
    assert want["sluice"] == want["redis"]
    assert want["sluice"].count(b"*1\r\n") > 7000
    assert "connection lost" not in s.log_path.read_text()


@pytest.mark.parametrize("resp", [2, 3])
def test_busy_script_others_get_busy_not_a_hang(redis_factory, sluice_factory, resp):
    """A client's script that runs on (while true) holds the shared
    connection it runs on. Redis answers every other connection -BUSY
    meanwhile; through sluice the others' commands go around the stalled
    connection and get the same answer instead of waiting behind it, and
    all is well again after SCRIPT KILL (Redis's own scripting test)."""
    srv = redis_factory()
    srv.client().config_set("lua-time-limit", 10)   # BUSY after 10 ms, as the test sets
    s = sluice_factory(srv.port)
    with s.raw() as runner, s.raw() as other:
        if resp == 3:   # both on the RESP3 shared connection
            other.call("HELLO", "3")
            runner.call("HELLO", "3")
        runner.send_command("EVAL", "while true do end", "0")
        time.sleep(0.3)
        reply = other.call("PING", timeout=5 * SLOW)
        assert isinstance(reply, Err) and reply.startswith("BUSY"), reply
        assert other.call("SCRIPT", "KILL", timeout=5 * SLOW) == "OK"
        killed = runner.read_reply(timeout=5 * SLOW)
        assert isinstance(killed, Err) and "killed" in killed.lower(), killed
        wait_until(lambda: other.call("PING") == "PONG", 5 * SLOW, msg="PONG after the kill")
        assert runner.call("PING") == "PONG"


def start_busy_script(s, runner):
    """RUNNER (a RawConn to sluice S) starts a script that keeps Redis busy
    until SCRIPT KILL; returns once Redis answers others -BUSY."""
    runner.send_command("EVAL", "while true do end", "0")
    with s.raw() as probe:
        wait_until(lambda: isinstance(probe.call("PING", timeout=5 * SLOW), Err),
                   5 * SLOW, msg="the script to run")


def kill_busy_script(s, runner):
    with s.raw() as killer:
        assert killer.call("SCRIPT", "KILL", timeout=5 * SLOW) == "OK"
    killed = runner.read_reply(timeout=5 * SLOW)
    assert isinstance(killed, Err) and "killed" in killed.lower(), killed


@pytest.mark.parametrize("resp", [2, 3])
def test_command_sent_as_a_script_starts_gets_busy_not_a_hang(redis_factory, sluice_factory,
                                                              resp):
    """A command of another client sent the moment a long script starts
    (before sluice could see it is long) reaches Redis and gets -BUSY, as
    it would directly: a client's scripts run on connections of their own,
    so nothing waits behind them. Redis's own test ("can be killed by
    SCRIPT KILL even when use pcall") sends its PING that early."""
    srv = redis_factory()
    srv.client().config_set("lua-time-limit", 10)
    s = sluice_factory(srv.port)
    with s.raw() as runner, s.raw() as other:
        if resp == 3:
            runner.call("HELLO", "3")
            other.call("HELLO", "3")
        runner.send_command("EVAL", "while true do end", "0")
        time.sleep(0.02)   # well inside the 100 ms before a stalled connection is seen
        reply = other.call("PING", timeout=5 * SLOW)
        assert isinstance(reply, Err) and reply.startswith("BUSY"), reply
        kill_busy_script(s, runner)
        assert other.call("PING") == "PONG"


def test_second_script_during_a_long_one_goes_around_it(redis_factory, sluice_factory):
    """Another client's script while a long one holds the script connection
    goes around it once that is stalled, and gets Redis's -BUSY."""
    srv = redis_factory()
    srv.client().config_set("lua-time-limit", 10)
    s = sluice_factory(srv.port)
    with s.raw() as runner, s.raw() as other:
        start_busy_script(s, runner)
        time.sleep(0.2)
        reply = other.call("EVAL", "return 1", "0", timeout=5 * SLOW)
        assert isinstance(reply, Err) and reply.startswith("BUSY"), reply
        assert int(s.info()["stalled_detours"]) >= 1
        kill_busy_script(s, runner)
        assert other.call("EVAL", "return 2", "0") == 2


def test_scripts_and_commands_of_one_client_keep_their_order(sluice, r):
    """A client pipelining scripts and plain commands sees each take effect
    in the order it sent them, though scripts run on other connections."""
    r.delete("order:k")
    with sluice.raw() as c:
        cmds = []
        for i in range(200):
            if i % 3 == 0:
                cmds.append(("EVAL", "return redis.call('APPEND', KEYS[1], ARGV[1])", "1",
                             "order:k", f"e{i},"))
            elif i % 3 == 1:
                cmds.append(("APPEND", "order:k", f"a{i},"))
            else:
                cmds.append(("GET", "order:k"))
        c.send(b"".join(encode_command(*cmd) for cmd in cmds))
        replies = c.read_replies(len(cmds), timeout=10 * SLOW)
    text = ""
    for cmd, reply in zip(cmds, replies):
        if cmd[0] == "GET":
            assert reply == text.encode(), (cmd, reply)
        else:
            text += cmd[-1]
            assert reply == len(text), (cmd, reply)


@pytest.mark.parametrize("resp", [2, 3])
def test_script_big_number_passed_as_redis_writes_it(redis_factory, sluice_factory, resp):
    """Redis passes a script's {big_number=...} on as it is, CRLF turned to
    spaces: "(123  123". sluice frames it and passes it on as Redis wrote
    it; the connection it came on is not dropped (its other requests are
    answered)."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    script = "return {big_number='123\\r\\n123'}"
    got = {}
    for name, port in (("redis", srv.port), ("sluice", s.port)):
        with RawConn(port, timeout=5 * SLOW) as c:
            if resp == 3:
                c.call("HELLO", "3")
            c.send(encode_command("EVAL", script, "0") + encode_command("PING"))
            got[name] = c.read_reply_raw(), c.read_reply_raw()
    assert got["sluice"] == got["redis"]
    assert got["sluice"][0] == (b"(123  123\r\n" if resp == 3 else b"$8\r\n123  123\r\n")
    assert "connection lost" not in s.log_path.read_text()


# --------------------------------------------------------------------------
# 12. replies sluice builds itself (CLIENT LIST, PROXY INFO...) obey the
#     same limits as Redis's: built one at a time, as each one's turn
#     comes and the client's output is below client_max_pending_bytes


def _idle_clients(s, n):
    """N connections to S that send nothing, once S counts them all."""
    base = connected_clients(s)
    conns = [RawConn(s.port, timeout=10 * SLOW) for _ in range(n)]
    wait_until(lambda: connected_clients(s) >= base + n, 10 * SLOW,
               msg=f"sluice to count {n} idle clients")
    return conns


def _probe_while(s, seconds):
    """PINGs on new connections to S for SECONDS, one after the other:
    the slowest answer (or timeout) in seconds, and how many went."""
    worst, count = 0.0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got, took = one_reply(s.port, "PING", timeout=5 * SLOW)
        worst = max(worst, took if got == Simple("PONG") else 5 * SLOW)
        count += 1
        time.sleep(0.05)
    return worst, count


def _flood_unread(s, cmd, n, attackers):
    """ATTACKERS connections (small receive buffers) each sending N
    pipelined CMD and reading nothing."""
    conns = [RawConn(s.port, rcvbuf=4096, timeout=10 * SLOW) for _ in range(attackers)]
    for c in conns:
        c.sock.setblocking(False)
        try:
            c.sock.send(encode_command(*cmd) * n)
        except BlockingIOError:
            pass
    return conns


def test_pipelined_client_list_stalls_nobody_and_stays_bounded(redis_factory, sluice_factory):
    """Issue 19, finding 6: 300 idle clients and 4 that pipeline 300 CLIENT
    LIST each without reading. Each listing is ~75 KB; sluice built up to
    256 of them per attacker at once (as framed), past
    client_max_pending_bytes, and held the loop meanwhile. Now each is
    built at its turn, while its client's output is below the limit:
    another client's PING is answered at once, and sluice's memory grows by
    little more than 4 x client_max_pending_bytes."""
    srv, s = start_pair(redis_factory, sluice_factory, client_max_pending_bytes="1mb",
                        maxclients=1000)
    idle = _idle_clients(s, 300)
    rss_before = rss_kb(s.proc.pid)
    attackers = _flood_unread(s, ("CLIENT", "LIST"), 300, 4)
    try:
        peak = [rss_before]
        stop = threading.Event()

        def poll_rss():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kb(s.proc.pid))
                time.sleep(0.02)

        poller = threading.Thread(target=poll_rss, daemon=True)
        poller.start()
        worst, count = _probe_while(s, 3)
        stop.set()
        poller.join(5)
        grown_mb = (peak[0] - rss_before) / 1024
        assert worst < 1 * SLOW and grown_mb < 32, (
            f"while 4 clients pipeline CLIENT LIST unread: slowest of {count} PINGs "
            f"{worst:.2f} s (bound {1 * SLOW:.1f}), sluice grew {grown_mb:.0f} MB (bound 32)")
    finally:
        for c in attackers + idle:
            c.close()
    assert_serves(s)


def test_pipelined_local_replies_in_order_for_a_reader(redis_factory, sluice_factory):
    """A client that reads gets every reply of a pipeline mixing GETs with
    replies sluice builds (CLIENT LIST, CLIENT INFO, CLIENT GETNAME, PROXY
    PING, PROXY INFO), each complete and in order, also when the listings
    together are far past client_max_pending_bytes (built at their turn)."""
    srv, s = start_pair(redis_factory, sluice_factory, client_max_pending_bytes="64kb")
    idle = _idle_clients(s, 100)
    try:
        with s.raw(timeout=20 * SLOW) as c:
            my_id = c.call("CLIENT", "ID")
            assert c.call("CLIENT", "SETNAME", "reader") == "OK"
            srv.client().mset({f"k{i}": f"v{i}" for i in range(60)})
            kinds = ["GET", "LIST", "INFO", "GETNAME", "PING", "PROXYINFO"]
            cmds = {"LIST": ("CLIENT", "LIST"), "INFO": ("CLIENT", "INFO"),
                    "GETNAME": ("CLIENT", "GETNAME"), "PING": ("PROXY", "PING"),
                    "PROXYINFO": ("PROXY", "INFO")}
            plan = [(kinds[i % len(kinds)], i) for i in range(360)]
            c.send(b"".join(encode_command(*(("GET", f"k{i % 60}") if k == "GET" else cmds[k]))
                            for k, i in plan))
            replies = c.read_replies(len(plan), timeout=20 * SLOW)
            for (kind, i), reply in zip(plan, replies):
                if kind == "GET":
                    assert reply == f"v{i % 60}".encode(), (i, reply[:80])
                elif kind == "LIST":
                    lines = reply.decode().splitlines()
                    assert len(lines) >= 101 and all(l.startswith("id=") for l in lines) and \
                        any(l.startswith(f"id={my_id} ") for l in lines), (i, reply[:80])
                elif kind == "INFO":
                    assert reply.startswith(f"id={my_id} ".encode()) and b" name=reader " in reply, \
                        (i, reply[:80])
                elif kind == "GETNAME":
                    assert reply == b"reader", (i, reply)
                elif kind == "PING":
                    assert reply == Simple("PONG"), (i, reply)
                else:
                    assert b"connected_clients:" in reply, (i, reply[:80])
            assert c.call("PING") == "PONG"
    finally:
        for c in idle:
            c.close()


def test_getnames_behind_blpop_are_built_at_their_turn(redis_factory, sluice_factory):
    """A client that never reads names itself with 60 KB and pipelines
    2,000 CLIENT GETNAME behind a BLPOP: they wait for the BLPOP's reply
    (they read session state), and when it came sluice built all 2,000
    replies at once (120 MB), past client_max_pending_bytes. Now each is
    built at its turn, while the output is below the limit, and waiting
    ones count against client_max_inflight (not read past it)."""
    srv, s = start_pair(redis_factory, sluice_factory, client_max_pending_bytes="1mb")
    name = "n" * 60_000
    c = RawConn(s.port, rcvbuf=4096, timeout=10 * SLOW)
    try:
        assert c.call("CLIENT", "SETNAME", name) == "OK"
        c.sock.setblocking(False)
        try:
            c.sock.send(encode_command("BLPOP", "q", "0") +
                        encode_command("CLIENT", "GETNAME") * 2000)
        except BlockingIOError:
            pass
        wait_until(lambda: _blpop_waiting(srv), 5 * SLOW, msg="BLPOP to reach Redis")
        time.sleep(0.3)
        rss_before = rss_kb(s.proc.pid)
        srv.client().rpush("q", "x")
        time.sleep(1.0)
        grown_mb = (rss_kb(s.proc.pid) - rss_before) / 1024
        assert grown_mb < 32, f"sluice grew {grown_mb:.0f} MB building GETNAME replies (bound 32)"
        got, took = one_reply(s.port, "PING", timeout=5 * SLOW)
        assert got == Simple("PONG") and took < 1 * SLOW, (got, took)
    finally:
        c.close()
    assert_serves(s)


def test_unread_client_list_closed_by_output_limit(redis_factory, sluice_factory):
    """sluice's own replies count against client_output_buffer_limit as
    Redis's do: a client that pipelines CLIENT LIST and never reads is
    closed once they pass it, with a log line naming it and the
    output_limit_disconnects counter; the others go on."""
    srv, s = start_pair(redis_factory, sluice_factory, client_max_pending_bytes="4mb",
                        client_output_buffer_limit="1mb")
    idle = _idle_clients(s, 100)
    attackers = _flood_unread(s, ("CLIENT", "LIST"), 300, 1)
    try:
        port = attackers[0].sock.getsockname()[1]
        wait_until(lambda: int(s.info()["output_limit_disconnects"]) >= 1, 10 * SLOW,
                   msg="output_limit_disconnects to count the client that does not read")
        wait_until(lambda: f"127.0.0.1:{port}) closed: " in s.log_path.read_text()
                   and "over client_output_buffer_limit" in s.log_path.read_text(), 5 * SLOW,
                   msg="a log line naming the closed client")
        attackers[0].sock.setblocking(True)
        assert attackers[0].is_closed_by_peer(10 * SLOW)
    finally:
        for c in attackers + idle:
            c.close()
    assert_serves(s)


# --------------------------------------------------------------------------
# 13. issue 19's own round: what a review found past the six findings


def test_client_list_id_with_100000_ids_reads_no_freed_memory(redis_factory, sluice_factory):
    """CLIENT LIST ID with 100,000 ids in one write: sluice copies the
    command for Redis's permission check; the copy pulled the client's
    input buffer up, freeing the chains the arguments still pointed into,
    and the rewrite then read them (heap-use-after-free on the sanitizer
    build). The reply lists the ids that are sluice's clients (none)."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    n = 100000
    with s.raw(timeout=30 * SLOW) as a:
        a.send(b"*%d\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n$2\r\nID\r\n" % (n + 3) +
               b"$5\r\n99999\r\n" * n)
        assert a.read_reply(timeout=30 * SLOW) == b""
        assert a.call("PING") == "PONG"
    assert s.sanitizer_report() is None


def test_script_returning_reset_status_ends_no_session(redis_factory, sluice_factory):
    """After UNSUBSCRIBE (RESP2), a connection streams unpaired until RESET;
    a script's `+RESET` status used to be taken for RESET's own reply:
    sluice forgot the client's name and database and logged its Redis
    connection in again, while Redis kept the session. Only a RESET the
    client sent is answered by +RESET."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with s.raw() as a:
        assert a.call("CLIENT", "SETNAME", "me") == "OK"
        assert a.call("SELECT", "3") == "OK"
        assert a.call("SET", "k3", "in-db3") == "OK"
        a.call("SUBSCRIBE", "x")
        a.call("UNSUBSCRIBE", "x")
        assert a.call("EVAL", "return redis.status_reply('RESET')", 0) == "RESET"
        assert a.call("CLIENT", "GETNAME") == b"me"
        assert b" db=3 " in a.call("CLIENT", "INFO")
        assert a.call("GET", "k3") == b"in-db3"
        # A real RESET still ends it.
        assert a.call("RESET") == "RESET"
        assert a.call("CLIENT", "GETNAME") is None
        assert a.call("GET", "k3") is None
