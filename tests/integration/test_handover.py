"""Restart and upgrade without losing a request (README "Restart and
upgrade"): a sluice started while another runs on the same address takes
its listening sockets over (SCM_RIGHTS on the hand-over socket); the old
one stops accepting, answers what it has read, closes each client between
replies and exits. Clients with redis-py's retries see no refused
connection and no reply lost or doubled; a new sluice that cannot start
leaves the old one serving.

Also the drain itself (SIGTERM and hand-over share it): a request begun
is read to its end and answered, requests read but not yet framed are
answered, and the close after the last reply is an orderly FIN.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from conftest import SLUICE_BIN
from helpers import SLOW, RawConn, encode_command, free_port, wait_until


def _wait_exit(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _log_has(s, text):
    return text in s.log_path.read_text(errors="replace")


def _take_over(sluice_factory, backend_port, old, listen_ports, prefix=(), **extra):
    """Start a new sluice on LISTEN_PORTS while OLD runs; wait until OLD
    handed over and exited (status 0). Returns the new one."""
    new = sluice_factory(backend_port, start=False, listen_ports=listen_ports, prefix=prefix,
                         **extra)
    new.start()
    wait_until(lambda: _log_has(new, "stopped accepting"), 10 * SLOW,
               msg="the new sluice to take over")
    code = _wait_exit(old.proc, 15 * SLOW)
    assert code == 0, f"old sluice pid {old.proc.pid}: exit status {code}"
    assert _log_has(old, "sluice stopped (handed over)")
    return new


class _CountingRetry(Retry):
    """redis-py's Retry, counting every error it retried: refused
    connections apart."""

    def __init__(self, stats, lock):
        super().__init__(ExponentialBackoff(cap=0.2, base=0.01), 8)
        self.stats = stats
        self.lock = lock

    def __deepcopy__(self, memo):
        return self   # redis-py copies its retry: the counts stay shared

    def call_with_retry(self, do, fail):
        def counted_fail(error):
            refused = isinstance(error, ConnectionRefusedError) or "refused" in str(error)
            with self.lock:
                key = "refused" if refused else type(error).__name__
                self.stats[key] = self.stats.get(key, 0) + 1
            fail(error)
        return super().call_with_retry(do, counted_fail)


def _incr_worker(port, key, pipelined, stop, result, stats, lock):
    """INCR KEY until STOP (three at a time in a pipeline when PIPELINED),
    with redis-py's retries; RESULT gets the integer replies and whether
    each was the one expected (n + 1 after n)."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10 * SLOW,
                    socket_connect_timeout=5 * SLOW,
                    retry_on_error=[RedisConnectionError, RedisTimeoutError],
                    retry=_CountingRetry(stats, lock))
    replies, out_of_order, failures, attempts = 0, 0, [], 0
    try:
        while not stop.is_set():
            try:
                if pipelined:
                    p = r.pipeline(transaction=False)
                    for _ in range(3):
                        p.incr(key)
                    values = p.execute()
                else:
                    values = [r.incr(key)]
                attempts = 0
            except (RedisConnectionError, RedisTimeoutError, OSError) as e:
                # redis-py 4.3 retries a pipeline on timeouts only: the
                # application sends it again (safe: sluice closes only
                # between replies, so none of it ran).
                attempts += 1
                if not pipelined or attempts > 8:
                    failures.append(repr(e))
                    break
                with lock:
                    stats["pipeline"] = stats.get("pipeline", 0) + 1
                continue
            for v in values:
                if isinstance(v, int):
                    replies += 1
                    out_of_order += v != replies
    finally:
        r.close()
        result[key] = (replies, out_of_order, failures)


def test_restart_three_times_under_load(redis_factory, sluice_factory, tmp_path):
    """Pipelined redis-py clients INCR their own keys while sluice is
    restarted three times: a config change, a listen list with a new
    address before the old one, a copy of the binary. No connection is
    refused, no client runs out of retries, every key holds exactly the
    integer replies its client got (none lost, none doubled), and every
    old sluice exits 0."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port], shutdown_timeout=int(10000 * SLOW))
    stop = threading.Event()
    result, stats, lock = {}, {}, threading.Lock()
    keys = [f"handover:{i}" for i in range(8)]
    threads = [threading.Thread(target=_incr_worker,
                                args=(port, k, i % 2 == 1, stop, result, stats, lock),
                                daemon=True) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5 * SLOW)
        # 1. A config change (a key that needs a restart).
        old = _take_over(sluice_factory, srv.port, old, [port], client_max_inflight=100,
                         shutdown_timeout=int(10000 * SLOW))
        time.sleep(0.5 * SLOW)
        # 2. A new address first; the old one kept (found on its own path).
        port2 = free_port()
        old = _take_over(sluice_factory, srv.port, old, [port2, port],
                         shutdown_timeout=int(10000 * SLOW))
        time.sleep(0.5 * SLOW)
        # 3. A new binary: a copy elsewhere, as an upgrade installs one.
        copy = tmp_path / "sluice-upgraded"
        shutil.copy2(SLUICE_BIN, copy)
        wrapper = ["sh", "-c", f'shift; exec "{copy}" "$@"', "sh"]
        new = _take_over(sluice_factory, srv.port, old, [port2, port], prefix=wrapper,
                         shutdown_timeout=int(10000 * SLOW))
        time.sleep(0.5 * SLOW)
        with RawConn(port2) as c:
            assert c.call("PING") == "PONG"   # the new address serves too
    finally:
        stop.set()
        for t in threads:
            t.join(30 * SLOW)
    assert not any(t.is_alive() for t in threads), "a client thread hangs"
    assert stats.get("refused", 0) == 0, f"connections refused: {stats}"
    ref = redis.Redis(port=srv.port)
    for k in keys:
        replies, out_of_order, failures = result[k]
        assert failures == [], f"{k}: a client ran out of retries: {failures} ({stats})"
        assert replies > 0, f"{k}: no reply at all"
        assert out_of_order == 0, f"{k}: an INCR's reply lost or doubled ({stats})"
        assert int(ref.get(k)) == replies, f"{k}: {ref.get(k)} in Redis, {replies} replies"
    assert new.running


def test_second_start_same_config_takes_over(redis_factory, sluice_factory):
    """A second sluice with the same config no longer fails with Address
    already in use: it takes over, and a client connected to the old one
    is answered to the end before being closed."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port])
    with RawConn(port) as c:
        assert c.call("SET", "k", "1") == "OK"
        new = _take_over(sluice_factory, srv.port, old, [port])
        assert c.is_closed_by_peer(5 * SLOW)
    with RawConn(port) as c:
        assert c.call("GET", "k") == b"1"
    assert "Address already in use" not in new.log_path.read_text()


def test_bad_config_leaves_old_serving(redis_factory, sluice_factory):
    """A new sluice whose config is bad exits 1 before touching the old
    one; one that fails after the sockets were passed (a listen address
    another socket holds) exits 1 without telling the old one to stop.
    Either way the old one accepts on, and a good one takes over later."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port])
    bad = sluice_factory(srv.port, start=False, listen_ports=[port], no_such_key="1")
    assert subprocess.run([str(SLUICE_BIN), "-c", str(bad.config_path)],
                          capture_output=True, timeout=30 * SLOW).returncode == 1
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    try:
        busy = sluice_factory(srv.port, start=False,
                              listen_ports=[port, held.getsockname()[1]])
        run = subprocess.run([str(SLUICE_BIN), "-c", str(busy.config_path)],
                             capture_output=True, timeout=30 * SLOW)
        assert run.returncode == 1, run.stdout + run.stderr
        assert b"socket handed over" in run.stdout + run.stderr
    finally:
        held.close()
    wait_until(lambda: _log_has(old, "hand-over abandoned"), 5 * SLOW,
               msg="the old sluice to see the hand-over abandoned")
    assert old.running
    for _ in range(3):
        with RawConn(port) as c:
            assert c.call("PING") == "PONG"
    _take_over(sluice_factory, srv.port, old, [port])


def test_drain_reads_a_begun_request_to_its_end(redis_factory, sluice_factory):
    """At shutdown a client that has sent half a request gets it read to
    its end and answered, then its connection closed."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with RawConn(s.port, timeout=10 * SLOW) as c:
        assert c.call("PING") == "PONG"
        c.send(b"*1\r\n$4\r\nPI")
        time.sleep(0.2 * SLOW)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2 * SLOW)
        c.send(b"NG\r\n")
        data, closed = c.read_all_until_eof(10 * SLOW)
        assert data == b"+PONG\r\n" and closed, data
    assert _wait_exit(s.proc, 10 * SLOW) == 0


def test_drain_answers_requests_read_but_not_framed(redis_factory, sluice_factory):
    """Requests read while the client is over client_max_inflight wait
    unframed in sluice's buffer: at shutdown they are still answered, in
    order, before the close."""
    srv = redis_factory()
    s = sluice_factory(srv.port, client_max_inflight=1)
    with RawConn(s.port, timeout=10 * SLOW) as c:
        c.send(encode_command("BLPOP", "q", "1") + encode_command("INCR", "n") * 4)
        time.sleep(0.3 * SLOW)
        s.proc.send_signal(signal.SIGTERM)
        replies = c.read_replies(5, timeout=10 * SLOW)
        assert replies[0] is None and replies[1:] == [1, 2, 3, 4], replies
        assert c.is_closed_by_peer(5 * SLOW)
    assert _wait_exit(s.proc, 10 * SLOW) == 0
    assert redis.Redis(port=srv.port).get("n") == b"4"


def test_drain_closes_between_replies_with_fin(redis_factory, sluice_factory):
    """A client whose next request arrives after the boundary sluice
    stopped at gets the reply before it, then an orderly end of file (not
    a reset, which can throw away that reply); its request is not run."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10 * SLOW)
    try:
        sock.sendall(encode_command("BLPOP", "q", "1"))
        time.sleep(0.3 * SLOW)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3 * SLOW)
        sock.sendall(encode_command("INCR", "late"))
        data = b""
        while True:
            chunk = sock.recv(65536)   # ConnectionResetError fails the test
            if not chunk:
                break
            data += chunk
        assert data == b"*-1\r\n", data
    finally:
        sock.close()
    assert _wait_exit(s.proc, 10 * SLOW) == 0
    assert redis.Redis(port=srv.port).get("late") is None


def _notifications(sock, until, timeout):
    """Datagrams read from SOCK until one contains UNTIL (within TIMEOUT)."""
    got, deadline = [], time.monotonic() + timeout
    while not any(until in g for g in got):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {until!r} from sluice; got {got}"
        sock.settimeout(remaining)
        got.append(sock.recv(4096).decode())
    return got


def test_sigusr2_upgrade_and_sd_notify(redis_factory, sluice_factory, tmp_path, monkeypatch):
    """systemd's protocol on $NOTIFY_SOCKET: READY=1 at start; SIGUSR2
    sends RELOADING=1 and starts the binary again, which takes over and
    sends MAINPID=<its pid> with READY=1; the old one exits 0; SIGTERM
    sends STOPPING=1."""
    path = str(tmp_path / "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False)
    new_pid = None
    try:
        s.start()
        assert "READY=1" in _notifications(notify, "READY=1", 10 * SLOW)[-1]
        s.proc.send_signal(signal.SIGUSR2)
        got = _notifications(notify, "MAINPID=", 20 * SLOW)
        assert any(g.startswith("RELOADING=1\nMONOTONIC_USEC=") for g in got), got
        new_pid = int(got[-1].split("MAINPID=")[1].split("\n")[0])
        assert "READY=1" in got[-1] and new_pid != s.proc.pid, got
        assert _wait_exit(s.proc, 15 * SLOW) == 0
        with RawConn(s.port) as c:
            assert c.call("PING") == "PONG"
        os.kill(new_pid, signal.SIGTERM)
        assert "STOPPING=1" in _notifications(notify, "STOPPING=1", 10 * SLOW)[-1]
        wait_until(lambda: not _alive(new_pid), 15 * SLOW, msg="the new sluice to exit")
        new_pid = None
    finally:
        notify.close()
        if new_pid is not None and _alive(new_pid):
            os.kill(new_pid, signal.SIGKILL)
    assert "sluice stopped" in s.log_path.read_text()


def test_sigusr2_with_a_bad_config_logs_why_in_the_old_log(redis_factory, sluice_factory):
    """SIGUSR2 after sluice.ini was broken: the new process cannot start,
    and its reasons (every FILE:LINE: message) are in the running sluice's
    log_file, not only on a stderr nobody reads; the old one serves on."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    text = s.config_path.read_text()
    s.config_path.write_text(text + "no_such_key = 1\ntimeout = soon\n")
    lines = len(text.splitlines())
    s.proc.send_signal(signal.SIGUSR2)
    wait_until(lambda: _log_has(s, "before taking over; this one goes on serving"), 20 * SLOW,
               msg="the failed hand-over to be logged")
    log = s.log_path.read_text(errors="replace")
    assert re.search(rf"the new sluice \(pid \d+\): {re.escape(str(s.config_path))}:{lines + 1}: "
                     r"unknown key 'no_such_key' in \[proxy\]", log), log
    assert re.search(rf"the new sluice \(pid \d+\): {re.escape(str(s.config_path))}:{lines + 2}: "
                     r"timeout", log), log
    with RawConn(s.port) as c:
        assert c.call("PING") == "PONG"
    s.config_path.write_text(text)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_metrics_listener_is_handed_over_too(redis_factory, sluice_factory):
    """metrics_listen's socket goes to the new sluice with the others: a
    scraper reading /healthz and /readyz through the hand-over never finds
    the port closed (no "Address already in use" for the new one, no
    refused scrape), never gets the old one's 503 "shutting down" after
    the takeover, and the new sluice answers on the same port."""
    import urllib.error
    import urllib.request

    srv = redis_factory()
    port, mport = free_port(), free_port()
    old = sluice_factory(srv.port, listen_ports=[port], metrics_listen=f"127.0.0.1:{mport}")
    stop = threading.Event()
    seen = {"ok": 0, "errors": []}

    def scrape():
        while not stop.is_set():
            for page in ("/healthz", "/readyz"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{mport}{page}",
                                                timeout=5 * SLOW) as f:
                        assert f.status == 200
                        seen["ok"] += 1
                except (urllib.error.URLError, OSError) as e:
                    seen["errors"].append(f"{page}: {e!r}")
            time.sleep(0.01)

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    try:
        wait_until(lambda: seen["ok"] > 5, 10 * SLOW, msg="scrapes before the hand-over")
        new = _take_over(sluice_factory, srv.port, old, [port],
                         metrics_listen=f"127.0.0.1:{mport}")
        before = seen["ok"]
        wait_until(lambda: seen["ok"] > before + 5, 10 * SLOW, msg="scrapes after it")
    finally:
        stop.set()
        t.join(10)
    assert seen["errors"] == [], seen["errors"][:5]
    assert _log_has(new, "hand-over: sluice pid")
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as f:
        text = f.read().decode()
    assert "sluice_build_info" in text


def _lock(client, *args):
    """LOCK's reply, or its error text."""
    try:
        return client.execute_command("LOCK", *args)
    except redis.ResponseError as e:
        return str(e)


def _granting(port, grace_ms):
    """A client of the sluice on PORT, once its start-up grace is over."""
    c = redis.Redis(port=port, socket_timeout=10 * SLOW)
    wait_until(lambda: isinstance(_lock(c, "probe", 100), bytes), grace_ms / 1000 + 10 * SLOW,
               msg="the start-up lock grace to end")
    return c


def test_handover_keeps_granting_locks_on_the_same_primary(redis_factory, sluice_factory):
    """A hand-over restart does not begin the start-up lock grace: the old
    sluice passes on the primary's master_replid, its grace and its fence
    epoch; the new one finds the same primary and grants at once (its own
    grace, 60 s here, would refuse every LOCK), fences going on upwards."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port], lock_failover_grace_ms=500)
    fence = _granting(port, 500).execute_command("LOCK", "k", 200, "FENCE")[1]
    new = _take_over(sluice_factory, srv.port, old, [port], lock_failover_grace_ms=60000)
    c = redis.Redis(port=port, socket_timeout=10 * SLOW)
    got = _lock(c, "k", 30000, "FENCE", "WAIT", 5000)
    assert isinstance(got, list) and got[1] > fence, got
    assert _log_has(new, "no failover between the two")
    assert _log_has(new, "the start-up grace is lifted")


def test_handover_lock_waits_for_the_primary_check(redis_factory, sluice_factory):
    """A LOCK that reaches the new sluice before it has seen the primary
    is held for that check (up to 5 s after its start) rather than
    refused with the start-up grace's TRYAGAIN: here Redis is stopped
    across the hand-over, and the LOCK, sent first, is granted once it
    answers."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port], lock_failover_grace_ms=500)
    _granting(port, 500)
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        new = sluice_factory(srv.port, start=False, listen_ports=[port],
                             lock_failover_grace_ms=60000)
        new.start()
        # From here new connections are the new sluice's.
        wait_until(lambda: _log_has(new, "stopped accepting"), 10 * SLOW,
                   msg="the new sluice to take over")
        with RawConn(port, timeout=10 * SLOW) as conn:
            conn.send(encode_command("LOCK", "k", "30000"))
            time.sleep(0.3)
            os.kill(srv.proc.pid, signal.SIGCONT)
            got = conn.read_reply()
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
    assert isinstance(got, bytes) and len(got) == 32, got


def test_handover_begins_the_grace_when_the_primary_changed(redis_factory, sluice_factory):
    """The primary's master_replid changes just before the hand-over:
    whether the old sluice saw it (its grace goes over with it) or not
    (the new one sees another replid than the one passed on), the new
    sluice grants no lock right after."""
    srv = redis_factory("--enable-debug-command", "yes")
    port = free_port()
    grace = int(5000 * SLOW)
    old = sluice_factory(srv.port, listen_ports=[port], lock_failover_grace_ms=grace)
    _granting(port, grace)
    srv.client().execute_command("DEBUG", "CHANGE-REPL-ID")
    new = _take_over(sluice_factory, srv.port, old, [port], lock_failover_grace_ms=grace)
    got = _lock(redis.Redis(port=port, socket_timeout=10 * SLOW), "k", 1000)
    assert isinstance(got, str) and got.startswith("TRYAGAIN lock grants resume"), got
    assert not _log_has(new, "the start-up grace is lifted") or \
        _log_has(old, "master_replid changed")


def test_handover_client_gone_while_its_lock_waits_for_the_check(redis_factory,
                                                                 sluice_factory):
    """A client that closes while its LOCK is held for the primary check:
    whatever was granted for it is given back at once (not held for its
    TTL), the held operation is freed (the sanitizer build checks for
    leaks), and the next client gets the lock."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port], lock_failover_grace_ms=500)
    _granting(port, 500)
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        new = sluice_factory(srv.port, start=False, listen_ports=[port],
                             lock_failover_grace_ms=60000)
        new.start()
        wait_until(lambda: _log_has(new, "stopped accepting"), 10 * SLOW,
                   msg="the new sluice to take over")
        with RawConn(port, timeout=10 * SLOW) as conn:
            conn.send(encode_command("LOCK", "gone", "30000"))
            time.sleep(0.1)
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
    wait_until(lambda: _log_has(new, "no failover between the two"), 10 * SLOW,
               msg="the primary checked")
    # As for a client gone while its grant waits for replicas: what was
    # granted for nobody is given back at once, not held for its 60 s.
    wait_until(lambda: srv.client().exists("gone") == 0, 5 * SLOW, msg="the grant given back")
    c = redis.Redis(port=port, socket_timeout=10 * SLOW)
    assert isinstance(_lock(c, "gone", 1000), bytes)
    assert _wait_exit(old.proc, 15 * SLOW) == 0


class _Subscriber(threading.Thread):
    """A subscriber speaking raw RESP (2 or 3) to PORT that counts the
    sequence numbers it gets. A connection that ends is opened again and
    subscribed again, as a client library does; each time is counted."""

    def __init__(self, port, resp, verb, name, stop):
        super().__init__(daemon=True)
        self.port, self.resp, self.verb, self.name, self.stop = port, resp, verb, name, stop
        self.seqs = []
        self.reconnects = -1
        self.errors = []
        self.subscribed = threading.Event()
        self.conn = None

    def _open(self):
        self.reconnects += 1
        c = RawConn(self.port, timeout=5 * SLOW)
        if self.resp == 3:
            c.call("HELLO", "3")
        c.call("CLIENT", "SETNAME", f"sub-{self.verb}-{self.resp}")
        c.send_command(self.verb, self.name)
        confirm = c.read_reply()
        assert confirm[0].lower() == self.verb.lower().encode(), confirm
        self.conn = c
        self.subscribed.set()
        return c

    def run(self):
        c = self._open()
        while not self.stop.is_set():
            try:
                v = c.read_reply(timeout=0.2)
            except socket.timeout:
                continue
            except (EOFError, OSError):
                c.close()
                try:
                    c = self._open()
                except (OSError, EOFError, AssertionError) as e:
                    self.errors.append(repr(e))
                    time.sleep(0.05)
                continue
            if isinstance(v, list) and v and v[0] in (b"message", b"pmessage", b"smessage"):
                self.seqs.append(int(v[-1]))
            else:
                self.errors.append(f"unexpected: {v!r}")


def test_handover_keeps_subscribers(redis_factory, sluice_factory):
    """Subscribers of every kind (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE; RESP2
    and RESP3, each with a name) go on across three hand-over restarts
    while a publisher sends every 10 ms: the old sluice passes each
    connection to the new one, which subscribes it again before the old
    one lets go. None is closed, none misses a message (duplicates are
    allowed: published in the overlap), and on the new sluice each is
    still subscribed as before (UNSUBSCRIBE's count, its name)."""
    srv = redis_factory()
    port = free_port()
    old = sluice_factory(srv.port, listen_ports=[port])
    stop = threading.Event()
    kinds = [(2, "SUBSCRIBE", "ho:ch"), (2, "PSUBSCRIBE", "ho:c*"), (2, "SSUBSCRIBE", "ho:sh"),
             (3, "SUBSCRIBE", "ho:ch"), (3, "PSUBSCRIBE", "ho:c*"), (3, "SSUBSCRIBE", "ho:sh")]
    subs = [_Subscriber(port, resp, verb, name, stop) for resp, verb, name in kinds]
    for s in subs:
        s.start()
        assert s.subscribed.wait(5 * SLOW)
    published = []
    pub_stop = threading.Event()

    def publish():
        r = redis.Redis(port=srv.port)
        n = 0
        while not pub_stop.is_set():
            n += 1
            r.publish("ho:ch", n)
            r.execute_command("SPUBLISH", "ho:sh", n)
            published.append(n)
            time.sleep(0.01)
        r.close()

    pub = threading.Thread(target=publish, daemon=True)
    pub.start()
    olds = []
    try:
        for _ in range(3):
            time.sleep(0.5 * SLOW)
            olds.append(old)
            old = _take_over(sluice_factory, srv.port, old, [port])
        time.sleep(0.5 * SLOW)
    finally:
        pub_stop.set()
        pub.join(5)
        time.sleep(0.3 * SLOW)
        stop.set()
        for s in subs:
            s.join(5 * SLOW)
    last = published[-1]
    for s, (resp, verb, _) in zip(subs, kinds):
        got = set(s.seqs)
        first = min(got)
        missing = [n for n in range(first, last + 1) if n not in got]
        dups = len(s.seqs) - len(got)
        assert s.reconnects == 0, f"RESP{resp} {verb}: closed {s.reconnects} times"
        assert missing == [], f"RESP{resp} {verb}: {len(missing)} messages lost: {missing[:20]}"
        assert s.errors == [], f"RESP{resp} {verb}: {s.errors[:5]}"
        # What it may see twice is what was published in the overlap
        # (docs/operations.md): reported, not a failure.
        print(f"RESP{resp} {verb}: {len(got)} messages, {dups} duplicates")
        assert dups < len(published), f"RESP{resp} {verb}: {dups} duplicates"
    for o in olds:
        assert _log_has(o, "hand-over: 6 subscribers passed to the new sluice")
    # The new sluice knows them as subscribed, with their names.
    for s, (resp, verb, name) in zip(subs, kinds):
        un = {"SUBSCRIBE": "UNSUBSCRIBE", "PSUBSCRIBE": "PUNSUBSCRIBE",
              "SSUBSCRIBE": "SUNSUBSCRIBE"}[verb]
        s.conn.send_command(un, name)
        while True:
            v = s.conn.read_reply()
            if v[0] != b"message" and v[0] != b"pmessage" and v[0] != b"smessage":
                break
        assert v == [un.lower().encode(), name.encode(), 0], f"RESP{resp} {verb}: {v!r}"
        assert s.conn.call("CLIENT", "GETNAME") == f"sub-{verb}-{resp}".encode()
        s.conn.close()


def test_handover_subscriber_keeps_its_user_or_is_closed(redis_factory, sluice_factory):
    """A subscriber logged in as a user of the users file is passed on
    logged in as that user (after UNSUBSCRIBE it runs a command that needs
    the login) and gets every message; one whose user the new config no
    longer has is closed by the old sluice, as without the hand-over."""
    srv = redis_factory()
    port = free_port()
    both = ("[user alice]\npassword = pw\ncommands = +@all\nkeys = *\nchannels = *\n")
    gone = "[user bob]\npassword = pw\ncommands = +@all\nkeys = *\nchannels = *\n"
    old = sluice_factory(srv.port, listen_ports=[port], users="u.ini", start=False)
    (old.dir / "u.ini").write_text(both + gone)
    old.start()
    alice, bob = RawConn(port, timeout=5 * SLOW), RawConn(port, timeout=5 * SLOW)
    for c, user in ((alice, "alice"), (bob, "bob")):
        assert c.call("AUTH", user, "pw") == "OK"
        c.send_command("SUBSCRIBE", "ho:u")
        assert c.read_reply() == [b"subscribe", b"ho:u", 1]
    pub = redis.Redis(port=srv.port)
    assert pub.publish("ho:u", "1") == 2
    new = sluice_factory(srv.port, listen_ports=[port], users="u.ini", start=False)
    (new.dir / "u.ini").write_text(both)
    new.start()
    wait_until(lambda: _log_has(new, "stopped accepting"), 10 * SLOW, msg="the take-over")
    assert _wait_exit(old.proc, 15 * SLOW) == 0
    assert pub.publish("ho:u", "2") == 1   # alice, through the new sluice
    assert alice.read_replies(2) == [[b"message", b"ho:u", b"1"], [b"message", b"ho:u", b"2"]]
    assert alice.call("UNSUBSCRIBE", "ho:u") == [b"unsubscribe", b"ho:u", 0]
    assert alice.call("GET", "ho:nokey") is None   # still logged in
    assert bob.read_reply() == [b"message", b"ho:u", b"1"]
    assert bob.is_closed_by_peer(5 * SLOW)
    assert _log_has(new, "a subscriber from the old sluice cannot be taken")
    for c in (alice, bob):
        c.close()
    pub.close()
