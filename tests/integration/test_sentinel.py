"""Sentinel mode: sluice finds the standalone primary through Sentinel,
follows a failover, and its clients notice as little as possible.

Each test starts its own topology (sentinel_helpers.SentinelTopology: a
primary, two replicas, three Sentinels with down-after-milliseconds 1000)
and a sluice with `sentinel =` in front of it.
"""

import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
import redis

from conftest import SLUICE_BIN, _read_log
from helpers import SLOW, Err, RawConn, encode_command, free_port, wait_until
from sentinel_helpers import (MASTER, SentinelProc, SentinelTopology, monotonic_ms,
                              sentinel_sluice, sentinel_sluices, sluice_check,
                              wait_primary_switch)  # noqa: F401 (a fixture)

FAILOVER_ERROR = "ERR backend unavailable during failover; the command may or may not have run"


@pytest.fixture
def topo(tmp_path):
    t = SentinelTopology(tmp_path / "topo")
    try:
        t.start()
        yield t
    finally:
        t.stop()


class Pipeliner(threading.Thread):
    """A client on the shared connections: batches of 8 SETs and 8 GETs,
    pipelined, until stopped. Records each error reply with the time it
    was read, and whether its connection closed."""

    def __init__(self, port, idx):
        super().__init__(daemon=True)
        self.port, self.idx = port, idx
        self.stop_ev = threading.Event()
        self.errors = []
        self.closed = None
        self.batches = 0

    def run(self):
        n = 0
        with RawConn(self.port, timeout=30 * SLOW) as c:
            while not self.stop_ev.is_set():
                batch = []
                for _ in range(8):
                    batch += [("SET", f"p{self.idx}:{n}", n), ("GET", f"p{self.idx}:{n}")]
                    n += 1
                c.send(b"".join(encode_command(*b) for b in batch))
                try:
                    replies = c.read_replies(len(batch), timeout=30 * SLOW)
                except (EOFError, OSError) as e:
                    self.closed = repr(e)
                    return
                now = monotonic_ms()
                self.errors += [(now, str(r)) for r in replies if isinstance(r, Err)]
                self.batches += 1
                time.sleep(0.002)

    def finish(self):
        self.stop_ev.set()
        self.join(30 * SLOW)
        assert not self.is_alive(), "pipelining client hung"


class SwitchWatcher(threading.Thread):
    """Subscribed to +switch-master on a Sentinel: the times it is heard
    (at_ms: the first; a loaded machine may see Sentinel fail over once
    more), until stop()."""

    def __init__(self, sentinel):
        super().__init__(daemon=True)
        self.ps = sentinel.client(socket_timeout=None).pubsub()
        self.ps.subscribe("+switch-master")
        self.ps.get_message(timeout=5)   # the confirmation
        self.times = []
        self.done = threading.Event()

    @property
    def at_ms(self):
        return self.times[0] if self.times else None

    def run(self):
        while not self.done.is_set():
            try:
                msg = self.ps.get_message(timeout=0.1)
            except (redis.ConnectionError, OSError):
                return
            if msg is not None and msg["type"] == "message":
                self.times.append(monotonic_ms())

    def in_window(self, t, window_ms):
        """T is within WINDOW_MS after a switch heard."""
        return any(s <= t <= s + window_ms for s in self.times)

    def stop(self):
        self.done.set()
        self.join(5)
        self.ps.close()


def metric(mport, name):
    """The value of the unlabelled sample NAME on sluice's /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def start_pipeliners(s, count=4):
    ps = [Pipeliner(s.port, i) for i in range(count)]
    for p in ps:
        p.start()
    wait_until(lambda: all(p.batches > 3 for p in ps), 10 * SLOW, msg="clients running")
    return ps


def settled_primary(topo, s):
    """The primary's port once the Sentinels agree on it and sluice serves
    it. Not always the one a test saw promoted: on a loaded machine (the
    sanitizer build) Sentinel may fail over once more within seconds
    (seen: 41203 promoted after the kill, then 58025 two seconds later;
    sluice followed both)."""
    def settled():
        port = topo.current_primary_port()
        return port if port is not None and \
            s.info()["sentinel_primary"] == f"127.0.0.1:{port}" else None
    return wait_until(settled, 20 * SLOW, msg="the Sentinels and sluice agreeing on a primary")


def assert_writes_on(s, topo, count=50):
    """Writes through S land on the primary the Sentinels name."""
    c = s.client()
    for i in range(count):
        assert c.set(f"after:{i}", i) is True
    direct = topo.node_by_port(settled_primary(topo, s)).client()
    assert [direct.get(f"after:{i}") for i in range(count)] == \
        [str(i).encode() for i in range(count)]


class ReadyzPoller(threading.Thread):
    """GET /readyz every 50 ms until stopped; records (status, body)."""

    def __init__(self, mport):
        super().__init__(daemon=True)
        self.mport = mport
        self.stop_ev = threading.Event()
        self.seen = []

    def run(self):
        while not self.stop_ev.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/readyz",
                                            timeout=5) as r:
                    self.seen.append((r.status, r.read().decode()))
            except urllib.error.HTTPError as e:
                self.seen.append((e.code, e.read().decode()))
            except OSError as e:
                self.seen.append((0, str(e)))
            time.sleep(0.05)

    def finish(self):
        self.stop_ev.set()
        self.join()


def test_kill_primary_clients_keep_connections(topo, sentinel_sluices):
    """kill -9 of the primary while clients pipeline, hold a subscription
    and wait in BLPOP: no shared-pool client is closed, errors come only
    between the death and +switch-master plus 500 ms, every later write
    lands on the new primary, and the subscriber gets what is published
    after the switch."""
    mport = free_port()
    s = sentinel_sluices(topo, metrics_listen=f"127.0.0.1:{mport}")
    sub = RawConn(s.port, timeout=30 * SLOW)
    sub.send_command("SUBSCRIBE", "news")
    assert sub.read_reply()[0] == b"subscribe"
    psub = RawConn(s.port, timeout=30 * SLOW)
    psub.send_command("PSUBSCRIBE", "n*")
    assert psub.read_reply()[0] == b"psubscribe"
    blocked = RawConn(s.port, timeout=30 * SLOW)
    blocked.send_command("BLPOP", "queue", "0")
    watcher = SwitchWatcher(topo.sentinels[0])
    watcher.start()
    workers = start_pipeliners(s)
    readyz = ReadyzPoller(mport)
    readyz.start()
    old = topo.primary
    death_ms = monotonic_ms()
    old.proc.kill()
    old.proc.wait()
    time.sleep(0.2)
    sub.send_command("SUBSCRIBE", "extra")   # while it waits to be subscribed again
    wait_primary_switch(topo, old.port)
    wait_until(lambda: watcher.at_ms is not None, 30 * SLOW, msg="+switch-master heard")
    # Clients keep going on the new primary for a while.
    time.sleep(1.0 * SLOW)
    for w in workers:
        w.finish()
    readyz.finish()
    # /readyz stays 200 while sluice holds requests for the new primary
    # (within failover_retry_window): a probe must not pull every sluice
    # out of its load balancer exactly while it does its job.
    assert readyz.seen and all(st == 200 for st, _ in readyz.seen), \
        [x for x in readyz.seen if x[0] != 200][:5]
    assert any("holding requests for" in body for _, body in readyz.seen), readyz.seen[:5]
    for w in workers:
        assert w.closed is None, f"client {w.idx} lost its connection: {w.closed}"
        # Between the death and the switch, or just after a switch (a
        # second one, when Sentinel fails over again on a loaded machine).
        late = [(t - watcher.at_ms, e) for t, e in w.errors
                if t < death_ms or (t > watcher.at_ms and
                                    not watcher.in_window(t, 500 * SLOW))]
        assert late == [], f"errors outside the failover window (ms after switch): {late}"
        assert all(e == FAILOVER_ERROR for _, e in w.errors), w.errors
    watcher.stop()
    assert_writes_on(s, topo)
    new = topo.node_by_port(settled_primary(topo, s))
    # The blocked client got its error and keeps its connection.
    got = blocked.read_reply(timeout=30 * SLOW)
    assert isinstance(got, Err), got
    blocked.send_command("PING")
    assert blocked.read_reply() == "PONG"
    # The subscribers are subscribed again on the new primary.
    wait_until(lambda: new.client().pubsub_numsub("news", "extra") == [(b"news", 1), (b"extra", 1)] and
               new.client().pubsub_numpat() == 1, 10 * SLOW, msg="subscribed again")
    assert s.client().publish("news", "after-switch") >= 1
    msgs = []
    deadline = time.monotonic() + 10 * SLOW
    while time.monotonic() < deadline:
        m = sub.read_reply(timeout=10 * SLOW)
        if m[0] == b"message":
            msgs.append(m)
            break
    assert msgs and msgs[0][2] == b"after-switch"
    m = psub.read_reply(timeout=10 * SLOW)
    assert m[0] == b"pmessage" and m[3] == b"after-switch", m
    assert s.client().publish("extra", "x") >= 1
    m = sub.read_reply(timeout=10 * SLOW)
    assert m == [b"message", b"extra", b"x"], m
    info = s.info()
    assert info["sentinel_primary"] == f"127.0.0.1:{new.port}"
    switches = len(watcher.times)   # 1; 2 when Sentinel failed over again
    assert int(info["sentinel_switches"]) == switches
    assert metric(mport, "sluice_sentinel_switches_total") == switches
    log = s.log_path.read_text()
    assert f"switched from 127.0.0.1:{old.port} to 127.0.0.1:" in log
    assert f" to 127.0.0.1:{new.port} (epoch" in log
    for c in (sub, psub, blocked):
        c.close()


def test_unanswered_requests_at_the_death(topo, sentinel_sluices):
    """Requests Redis had not answered when the primary died: a write (and
    the script that kept Redis busy) gets the failover error, since it may
    have run; a read is sent again to the new primary and answered."""
    s = sentinel_sluices(topo)
    primary = topo.primary.client()
    primary.set("k", "v")
    assert primary.execute_command("WAIT", 2, 5000) == 2
    busy = RawConn(s.port, timeout=30 * SLOW)
    busy.send_command("EVAL", "while true do end", "0")
    time.sleep(0.3)
    reader = RawConn(s.port, timeout=30 * SLOW)
    reader.send_command("GET", "k")
    writer = RawConn(s.port, timeout=30 * SLOW)
    writer.send_command("SET", "k2", "x")
    time.sleep(0.3)
    topo.primary.proc.kill()
    topo.primary.proc.wait()
    assert busy.read_reply(timeout=30 * SLOW) == FAILOVER_ERROR
    assert writer.read_reply(timeout=30 * SLOW) == FAILOVER_ERROR
    assert reader.read_reply(timeout=30 * SLOW) == b"v"
    new_port = wait_primary_switch(topo, topo.primary.port)
    assert s.info()["sentinel_primary"] == f"127.0.0.1:{new_port}"
    for c in (busy, reader, writer):
        assert c.call("PING") == "PONG"   # each keeps its connection
        c.close()


def test_planned_failover_no_errors(topo, sentinel_sluices):
    """SENTINEL FAILOVER: clients on the shared connections see no error."""
    s = sentinel_sluices(topo)
    workers = start_pipeliners(s)
    old_port = topo.primary.port
    assert topo.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER)
    new_port = wait_primary_switch(topo, old_port)
    wait_until(lambda: s.info()["sentinel_primary"] == f"127.0.0.1:{new_port}", 10 * SLOW,
               msg="sluice follows the switch")
    time.sleep(1.5 * SLOW)   # the old primary turns replica meanwhile
    for w in workers:
        w.finish()
    for w in workers:
        assert w.closed is None, f"client {w.idx} lost its connection: {w.closed}"
        assert w.errors == [], f"client {w.idx}: {w.errors[:5]}"
    assert_writes_on(s, topo)


def test_old_primary_back_as_replica_gets_nothing(topo, sentinel_sluices):
    """The old primary restarted (a replica once Sentinel sees it): sluice
    sends it none of its clients' commands."""
    s = sentinel_sluices(topo)
    old = topo.primary
    old.proc.kill()
    old.proc.wait()
    new_port = wait_primary_switch(topo, old.port)
    wait_until(lambda: s.info()["sentinel_primary"] == f"127.0.0.1:{new_port}", 10 * SLOW,
               msg="sluice follows the switch")
    old.proc = None
    old.start()
    c = s.client()
    for i in range(100):
        c.set(f"k{i}", i)
        c.get(f"k{i}")
    wait_until(lambda: old.client().info("replication")["role"] == "slave", 30 * SLOW,
               msg="old primary turned replica")
    for i in range(100):
        c.set(f"k{i}", i)
    stats = old.client().info("commandstats")
    assert "cmdstat_set" not in stats and "cmdstat_get" not in stats, stats


def test_readonly_is_a_hint_to_ask_again(topo, sentinel_sluices):
    """A -READONLY (here written by a script, which can write any text)
    makes sluice ask the Sentinels again, and changes nothing by itself."""
    s = sentinel_sluices(topo, sentinel_refresh_interval=3600000)
    c = s.client()
    with pytest.raises(redis.exceptions.ReadOnlyError, match="fake"):
        c.eval("return redis.error_reply('READONLY fake')", 0)
    wait_until(lambda: "a node answered -READONLY" in s.log_path.read_text(), 5 * SLOW,
               msg="sluice asks the Sentinels again")
    assert s.info()["sentinel_primary"] == f"127.0.0.1:{topo.primary.port}"
    assert c.set("x", 1) is True


def test_readonly_storm_asks_at_most_once_a_second(topo, sentinel_sluices):
    """A client looping over a script that returns -READONLY (hostile or
    careless) does not make sluice question the Sentinels, nor log, once per
    reply: the hint is taken at most once a second; other clients are
    served meanwhile."""
    s = sentinel_sluices(topo, sentinel_refresh_interval=3600000)
    c = s.client()
    other = s.client()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 2.0:
        p = c.pipeline(transaction=False)
        for _ in range(50):
            p.eval("return redis.error_reply('READONLY fake')", 0)
        p.execute(raise_on_error=False)
        n += 50
        assert other.set("calm", n) is True
    elapsed = time.monotonic() - t0
    asks = s.log_path.read_text().count("a node answered -READONLY")
    assert n >= 200
    assert 1 <= asks <= elapsed + 2, (asks, n, elapsed)


def test_all_sentinels_down_keeps_serving(topo, sentinel_sluices):
    """Every Sentinel down: sluice serves the primary it knows, and says so
    in PROXY INFO and the log."""
    mport = free_port()
    s = sentinel_sluices(topo, metrics_listen=f"127.0.0.1:{mport}")
    assert metric(mport, "sluice_sentinels_up") == 3.0
    assert metric(mport, "sluice_sentinel_switches_total") == 0.0
    for sen in topo.sentinels:
        sen.stop()
    wait_until(lambda: s.info()["sentinel_sentinels_up"] == "0", 10 * SLOW,
               msg="sluice sees the Sentinels down")
    info = s.info()
    assert info["sentinel_state"] == "all_sentinels_down_serving_last_known_primary"
    c = s.client()
    assert c.set("still", "served") is True and c.get("still") == b"served"
    wait_until(lambda: "no Sentinel reachable; serving the last known primary"
               in s.log_path.read_text(), 5 * SLOW, msg="the log says it")
    with s.raw() as r:
        text = r.call(b"PROXY", b"SENTINEL").decode()
    assert "connected=0" in text and f"sentinel_primary:127.0.0.1:{topo.primary.port}" in text
    assert metric(mport, "sluice_sentinels_up") == 0.0


# --------------------------------------------------------------------------
# bad input


def write_config(tmp_path, body):
    p = tmp_path / "sluice.ini"
    p.write_text(f"[proxy]\nlisten = 127.0.0.1:{free_port()}\n" + body)
    return p


def test_sentinel_and_backend_exclude_each_other(tmp_path):
    cfg = write_config(tmp_path, "backend = 127.0.0.1:6379\nsentinel = 127.0.0.1:26379\n"
                                 "sentinel_master = m\n")
    code, err = sluice_check(str(SLUICE_BIN), cfg)
    assert code == 1
    assert "'backend' (line 3) and 'sentinel' (line 4) exclude each other" in err


def test_empty_master_name(tmp_path):
    cfg = write_config(tmp_path, "sentinel = 127.0.0.1:26379\nsentinel_master =\n")
    code, err = sluice_check(str(SLUICE_BIN), cfg)
    assert code == 1 and "sentinel_master" in err and "needs a value" in err, err
    cfg = write_config(tmp_path, "sentinel = 127.0.0.1:26379\n")
    code, err = sluice_check(str(SLUICE_BIN), cfg)
    assert code == 1 and "'sentinel' needs 'sentinel_master = NAME'" in err, err


def test_sentinels_that_do_not_know_the_master(tmp_path, sentinel_sluices):
    """Sentinels that monitor nothing: sluice -t fails (exit 1, so that an
    ExecStartPre=sluice -t stops the unit), naming the master; sluice does
    not start, and says which master nobody knows."""
    sens = [SentinelProc(tmp_path / "s", 1, master=None).start() for _ in range(2)]
    try:
        lst = " ".join(f"127.0.0.1:{x.port}" for x in sens)
        cfg = write_config(tmp_path, f"sentinel = {lst}\nsentinel_master = nosuch\n")
        code, err = sluice_check(str(SLUICE_BIN), cfg)
        assert code == 1, err
        assert f"{cfg}:4: 2 of the 2 Sentinels that answered do not know master 'nosuch'" in err
        s = sentinel_sluice(tmp_path / "sl", None, master="nosuch", start=False, sentinels=lst)
        p = subprocess.run([str(SLUICE_BIN), "-c", str(s.config_path)], capture_output=True, text=True,
                           timeout=30 * SLOW)
        assert p.returncode == 1
        assert "every Sentinel that answered does not know master 'nosuch'" in p.stderr + \
            (s.log_path.read_text() if s.log_path.exists() else "")
    finally:
        for x in sens:
            x.stop()


def test_check_without_master_name_never_crashes(tmp_path):
    """sluice -t with a Sentinel that answers and no (or a misspelt)
    sentinel_master: the config's errors, exit 1, never a crash (the
    Sentinel probe ran on a config with errors: strlen(NULL))."""
    sen = SentinelProc(tmp_path / "s", 1, master=None).start()
    try:
        for body in (f"sentinel = 127.0.0.1:{sen.port}\n",
                     f"sentinel = 127.0.0.1:{sen.port}\nsentinel_mastr = m\n"):
            cfg = write_config(tmp_path, body)
            code, err = sluice_check(str(SLUICE_BIN), cfg)
            assert code == 1, (code, err)
            assert "'sentinel' needs 'sentinel_master = NAME'" in err, err
    finally:
        sen.stop()


def test_private_connections_across_planned_failover(topo, sentinel_sluices):
    """SENTINEL FAILOVER, the old primary staying up: an open transaction
    ends in -EXECABORT (nothing of it ran anywhere), a blocked BLPOP gets
    its error, a subscriber is subscribed again on the new primary; each
    client keeps its connection and goes on."""
    s = sentinel_sluices(topo)
    tx = RawConn(s.port, timeout=30 * SLOW)
    assert tx.call("MULTI") == "OK"
    assert tx.call("SET", "tx:a", "1") == "QUEUED"
    blocked = RawConn(s.port, timeout=30 * SLOW)
    blocked.send_command("BLPOP", "queue", "0")
    sub = RawConn(s.port, timeout=30 * SLOW)
    sub.send_command("SUBSCRIBE", "c1", "c2")
    sub.read_replies(2)
    sub.send_command("UNSUBSCRIBE", "c2")
    sub.read_reply()
    sub.send_command("SSUBSCRIBE", "shard1")
    assert sub.read_reply()[0] == b"ssubscribe"
    old_port = topo.primary.port
    assert topo.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER)
    new_port = wait_primary_switch(topo, old_port)
    wait_until(lambda: s.info()["sentinel_primary"] == f"127.0.0.1:{new_port}", 10 * SLOW,
               msg="sluice follows the switch")
    new = topo.node_by_port(new_port)
    got = blocked.read_reply(timeout=10 * SLOW)
    assert isinstance(got, Err), got
    blocked.send_command("RPUSH", "queue", "x")
    assert blocked.read_reply() == 1
    assert isinstance(tx.call("SET", "tx:b", "2"), Err)
    got = tx.call("EXEC")
    assert isinstance(got, Err) and got.startswith("EXECABORT"), got
    assert tx.call("SET", "tx:c", "3") == "OK"
    assert new.client().get("tx:a") is None and new.client().get("tx:b") is None
    wait_until(lambda: new.client().pubsub_numsub("c1", "c2") == [(b"c1", 1), (b"c2", 0)] and
               new.client().execute_command("PUBSUB", "SHARDNUMSUB", "shard1")[1] == 1,
               10 * SLOW, msg="subscribed again on the new primary")
    new.client().publish("c1", "hello")
    new.client().execute_command("SPUBLISH", "shard1", "shello")
    m = sub.read_reply(timeout=10 * SLOW)
    assert m == [b"message", b"c1", b"hello"], m
    m = sub.read_reply(timeout=10 * SLOW)
    assert m == [b"smessage", b"shard1", b"shello"], m
    for c in (tx, blocked, sub):
        c.close()


def test_no_sentinel_reachable_at_start(tmp_path):
    """No Sentinel answers: sluice -t warns, and sluice gives up after
    failover_retry_window with a message naming the master."""
    dead = free_port()
    cfg = write_config(tmp_path, f"sentinel = 127.0.0.1:{dead}\nsentinel_master = m1\n"
                                 "failover_retry_window = 1000\n")
    code, err = sluice_check(str(SLUICE_BIN), cfg)
    assert code == 0 and f"warning: sentinel 127.0.0.1:{dead}: cannot connect" in err, err
    p = subprocess.run([str(SLUICE_BIN), "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30 * SLOW)
    assert p.returncode == 1
    assert "no Sentinel of 1 named a primary for master 'm1' within 1000 ms" in p.stderr, p.stderr


class PrivateWorker(threading.Thread):
    """A client on a private connection, looping: BLPOP with a short
    timeout, or a MULTI/INCR/EXEC transaction (pipelined). Records each
    round that got an error reply (time read, its error texts) and how
    many rounds went through."""

    def __init__(self, port, kind):
        super().__init__(daemon=True)
        self.port, self.kind = port, kind
        self.stop_ev = threading.Event()
        self.errors = []
        self.done = 0
        self.closed = None

    def _round(self, c):
        if self.kind == "blpop":
            return [c.call("BLPOP", "pw:jobs", "0.05", timeout=30 * SLOW)]
        c.send(encode_command("MULTI") + encode_command("INCR", "pw:tx") + encode_command("EXEC"))
        return c.read_replies(3, timeout=30 * SLOW)

    def run(self):
        with RawConn(self.port, timeout=30 * SLOW) as c:
            while not self.stop_ev.is_set():
                try:
                    replies = self._round(c)
                except (OSError, EOFError) as e:
                    self.closed = repr(e)
                    return
                errs = [str(r) for r in replies if isinstance(r, Err)]
                if errs:
                    self.errors.append((monotonic_ms(), errs))
                self.done += not errs

    def finish(self):
        self.stop_ev.set()
        self.join(60 * SLOW)


def test_kill_primary_private_clients_wait(topo, sentinel_sluices):
    """kill -9 of the primary under a BLPOP worker and a transaction
    worker (private connections): their requests not yet sent wait for
    the new primary as the shared ones do, so there is no error storm
    (the parent answered ~4,950 BLPOPs in 2.2 s with `... (Connection
    refused); the command may or may not have run`): at most the one
    request in flight at the death gets an error (two when Sentinel fails
    over twice), no error says `Connection refused`, and both go on with
    the new primary."""
    s = sentinel_sluices(topo)
    workers = [PrivateWorker(s.port, "blpop"), PrivateWorker(s.port, "multi")]
    for w in workers:
        w.start()
    wait_until(lambda: all(w.done > 3 for w in workers), 10 * SLOW, msg="workers running")
    watcher = SwitchWatcher(topo.sentinels[0])
    watcher.start()
    old = topo.primary
    old.proc.kill()
    old.proc.wait()
    wait_primary_switch(topo, old.port)
    wait_until(lambda: watcher.at_ms is not None, 30 * SLOW, msg="+switch-master heard")
    before = [w.done for w in workers]
    wait_until(lambda: all(w.done > b + 3 for w, b in zip(workers, before)), 20 * SLOW,
               msg="workers going on with the new primary")
    for w in workers:
        w.finish()
    watcher.stop()
    switches = max(1, len(watcher.times))
    for w in workers:
        assert w.closed is None, f"{w.kind}: connection lost: {w.closed}"
        texts = [e for _, errs in w.errors for e in errs]
        assert not any("Connection refused" in e for e in texts), f"{w.kind}: {texts[:5]}"
        assert len(w.errors) <= switches, \
            f"{w.kind}: {len(w.errors)} rounds with errors: {w.errors[:5]}"
    new = topo.node_by_port(settled_primary(topo, s)).client()
    assert int(new.get("pw:tx")) >= workers[1].done - 2 * switches


class ReplicaReader(threading.Thread):
    """A `read_from = replica` client: GET in a loop, recording each error
    (time read, text) and how many reads were answered."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop_ev = threading.Event()
        self.errors = []
        self.done = 0
        self.closed = None

    def run(self):
        with RawConn(self.port, timeout=30 * SLOW) as c:
            while not self.stop_ev.is_set():
                try:
                    v = c.call("GET", "rr:k", timeout=30 * SLOW)
                except (OSError, EOFError) as e:
                    self.closed = repr(e)
                    return
                if isinstance(v, Err):
                    self.errors.append((monotonic_ms(), str(v)))
                else:
                    self.done += 1
                time.sleep(0.005)

    def finish(self):
        self.stop_ev.set()
        self.join(60 * SLOW)


def test_kill_primary_replica_readers_wait(topo, sentinel_sluices):
    """kill -9 of the primary under `read_from = replica` readers: while no
    replica is healthy (the survivor follows the new primary) a read waits
    for one, within failover_retry_window, instead of getting `no replica
    available` at once (139-243 of them before): none, and reads go on."""
    s = sentinel_sluices(topo, read_from="replica")
    topo.primary.client().set("rr:k", "v")
    readers = [ReplicaReader(s.port) for _ in range(2)]
    for r in readers:
        r.start()
    wait_until(lambda: all(r.done > 10 for r in readers), 10 * SLOW, msg="readers running")
    old = topo.primary
    old.proc.kill()
    old.proc.wait()
    wait_primary_switch(topo, old.port)
    settled_primary(topo, s)
    before = [r.done for r in readers]
    wait_until(lambda: all(r.done > b + 10 for r, b in zip(readers, before)), 20 * SLOW,
               msg="reads answered after the switch")
    for r in readers:
        r.finish()
    for r in readers:
        assert r.closed is None, r.closed
        assert r.errors == [], f"{len(r.errors)} errors: {r.errors[:5]}"


def test_waits_end_at_the_window(topo, sentinel_sluices):
    """With no failover coming (every Sentinel stopped), the waits end at
    failover_retry_window with their own errors, never `Connection
    refused` or `may or may not have run`: a `read_from = replica` read
    with every replica gone gets `no replica available` after waiting;
    a BLPOP with the primary dead gets `no primary for master within
    failover_retry_window` after waiting, and its client goes on."""
    s = sentinel_sluices(topo, read_from="replica", failover_retry_window=1000)
    topo.primary.client().set("rr:k", "v")
    with RawConn(s.port, timeout=30 * SLOW) as r:
        wait_until(lambda: r.call("GET", "rr:k") == b"v", 10 * SLOW, msg="replica reads")
        for sen in topo.sentinels:
            sen.stop()
        for rep in topo.replicas:
            rep.stop()
        wait_until(lambda: isinstance(r.call("GET", "rr:k"), Err), 20 * SLOW,
                   msg="no replica left")
        t0 = time.monotonic()
        assert r.call("GET", "rr:k") == Err("ERR no replica available (read_from replica)")
        assert time.monotonic() - t0 >= 0.9, "it did not wait for a replica"
        assert r.call("SET", "rr:k", "w") == "OK"   # writes still go to the primary
    topo.primary.proc.kill()
    topo.primary.proc.wait()
    time.sleep(0.3)
    with RawConn(s.port, timeout=30 * SLOW) as b:
        for _ in range(2):
            t0 = time.monotonic()
            got = b.call("BLPOP", "pw:jobs", "0", timeout=30 * SLOW)
            assert got == Err("ERR backend unavailable: no primary for master within "
                              "failover_retry_window"), got
            assert time.monotonic() - t0 >= 0.9, "it did not wait for a primary"
