"""A planned `SENTINEL FAILOVER` loses no write sluice acknowledged (issue
34, item 1): writes are held in sluice from the Sentinel's first failover
event until the majority-confirmed switch, then go to the new primary; the
old primary's acknowledged writes are checked against the promoted
replica's offsets (docs/sentinel-and-replicas.md "Planned failovers").

Writers INCR counters through two sluices, each counting the INCRs it got
an answer for and the largest value an answer said; after several planned
failovers every counter in Redis must be at least that value. Without the
hold, the writes the old primary acknowledged between the promotion and
+switch-master (about a second of them) are gone.

SWITCHOVER_FAILOVERS sets how many (the bench row of tools/bench.sh runs
20 with SWITCHOVER_REPORT set: the write pause against Sentinel's own
switch time, printed).
"""

import os
import socket
import threading
import time

import pytest
import redis

from conftest import RedisServer
from helpers import SLOW, wait_until
from sentinel_helpers import (MASTER, SentinelTopology, sentinel_sluices,  # noqa: F401
                              wait_primary_switch)

FAILOVERS = int(os.environ.get("SWITCHOVER_FAILOVERS", "3"))
REPORT = os.environ.get("SWITCHOVER_REPORT")


@pytest.fixture
def topo(tmp_path):
    t = SentinelTopology(tmp_path / "topo")
    try:
        t.start()
        yield t
    finally:
        t.stop()


class Incrementer(threading.Thread):
    """INCR KEY through PORT until stopped: one at a time, or PIPELINE at
    a time. Counts the INCRs answered and keeps the largest value an answer
    said (Redis never goes back below it unless an acknowledged write was
    lost). Errors are kept (an error is no acknowledgement)."""

    def __init__(self, port, key, pipeline=0):
        super().__init__(daemon=True)
        self.port, self.key, self.pipeline = port, key, pipeline
        self.stop_ev = threading.Event()
        self.acked = 0
        self.top = 0
        self.errors = []

    def run(self):
        c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30 * SLOW)
        while not self.stop_ev.is_set():
            try:
                if self.pipeline:
                    p = c.pipeline(transaction=False)
                    for _ in range(self.pipeline):
                        p.incr(self.key)
                    values = p.execute(raise_on_error=False)
                else:
                    values = [c.incr(self.key)]
            except (redis.RedisError, OSError) as e:
                self.errors.append(repr(e))
                time.sleep(0.01)
                continue
            for v in values:
                if isinstance(v, Exception):
                    self.errors.append(repr(v))
                else:
                    self.acked += 1
                    self.top = max(self.top, v)
            time.sleep(0.001)

    def finish(self):
        self.stop_ev.set()
        self.join(60 * SLOW)
        assert not self.is_alive(), f"writer {self.key} hung"


def replication_settled(topo, port):
    """The primary at PORT has both other nodes as replicas in sync, and
    every Sentinel lists them: ready for the next planned failover."""
    info = topo.node_by_port(port).client().info("replication")
    if info.get("role") != "master" or info.get("connected_slaves") != 2 or \
            any(info.get(f"slave{i}", {}).get("state") != "online" for i in range(2)):
        return False
    for n in topo.nodes:
        if n.port != port and n.client().info("replication").get("master_link_status") != "up":
            return False
    for s in topo.sentinels:
        m = s.client().execute_command("SENTINEL", "REPLICAS", MASTER)
        flags = [dict(zip(r[::2], r[1::2])).get(b"flags", b"") for r in m]
        if len(flags) != 2 or any(f != b"slave" for f in flags):
            return False
    return True


def planned_failover(topo, sluices, old_port):
    """One SENTINEL FAILOVER from OLD_PORT: returns the new primary's port
    once both sluices follow it."""
    def asked():
        try:
            return topo.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER)
        except redis.ResponseError:   # INPROG / NOGOODSLAVE: not yet
            return False
    wait_until(asked, 30 * SLOW, interval=0.2, msg="Sentinel takes SENTINEL FAILOVER")
    new_port = wait_primary_switch(topo, old_port)
    for s in sluices:
        wait_until(lambda: s.info()["sentinel_primary"] == f"127.0.0.1:{new_port}", 15 * SLOW,
                   msg="sluice follows the switch")
    return new_port


def test_planned_failovers_lose_no_acknowledged_write(topo, sentinel_sluices):
    """FAILOVERS planned failovers under INCR load through two sluices: every
    INCR acknowledged is in Redis after them (and every sluice held the
    writes of each failover)."""
    sluices = [sentinel_sluices(topo), sentinel_sluices(topo)]
    writers = []
    for si, s in enumerate(sluices):
        writers += [Incrementer(s.port, f"ctr:{si}:{i}") for i in range(3)]
        writers.append(Incrementer(s.port, f"ctr:{si}:pipe", pipeline=10))
    for w in writers:
        w.start()
    wait_until(lambda: all(w.acked > 20 for w in writers), 10 * SLOW, msg="writers running")
    port = topo.primary.port
    pauses = []
    for n in range(FAILOVERS):
        wait_until(lambda: replication_settled(topo, port), 60 * SLOW, interval=0.2,
                   msg="replicas in sync before the next failover")
        before = [w.acked for w in writers]
        port = planned_failover(topo, sluices, port)
        wait_until(lambda: all(w.acked > b + 5 for w, b in zip(writers, before)), 15 * SLOW,
                   msg="writes going on after the switch")
        for s in sluices:
            info = s.info()
            pauses.append((n, int(info.get("sentinel_failover_last_write_pause_ms", -1)),
                           int(info.get("sentinel_failover_last_sentinel_switch_ms", -1)),
                           info.get("sentinel_failover_last_check")))
    for w in writers:
        w.finish()
    primary = topo.node_by_port(port).client()
    lost = {}
    for w in writers:
        final = int(primary.get(w.key) or 0)
        if final < w.acked or final < w.top:
            lost[w.key] = (w.acked, w.top, final)
    if REPORT:
        for p in pauses:
            print(f"failover {p[0]}: write pause {p[1]} ms, Sentinel's switch {p[2]} ms, "
                  f"check {p[3]}")
        print(f"acknowledged INCRs: {sum(w.acked for w in writers)}, lost: "
              f"{sum(a - f for a, t, f in lost.values())}, errors: "
              f"{sum(len(w.errors) for w in writers)}")
    assert lost == {}, f"acknowledged INCRs lost (key: acknowledged, largest value answered, value " \
        f"in Redis): {lost}"
    for s in sluices:
        info = s.info()
        assert int(info["sentinel_failover_holds"]) >= FAILOVERS, info
        assert info["sentinel_failover_holding"] == "0"


def held(conn, timeout):
    """True when CONN's request got no reply within TIMEOUT seconds."""
    try:
        conn.read_reply(timeout=timeout)
    except socket.timeout:
        return True
    return False


def test_failover_announced_never_completing_or_aborted(topo, sentinel_sluices, tmp_path):
    """A "Sentinel" (a plain redis-server sluice is told is a fourth one:
    the three real ones are still the majority) announces failovers that
    never come. Writes are held, reads go on; an abort from it ends the
    hold at once; a failover that never switches holds them for
    failover_retry_window, then they go to the primary as it was, and that
    Sentinel holds nothing more (a new epoch, +switch-master: nothing)."""
    fake = RedisServer(tmp_path / "fake-sentinel").start()
    try:
        s = sentinel_sluices(topo, failover_retry_window=1500,
                             sentinels=f"{topo.sentinel_list()} 127.0.0.1:{fake.port}")
        pub = fake.client()
        wait_until(lambda: pub.execute_command("PUBSUB", "NUMSUB", "+try-failover")[1] == 1,
                   10 * SLOW, msg="sluice subscribed on every Sentinel")
        body = f"master {MASTER} 127.0.0.1 {topo.primary.port}"
        c = s.client()
        c.set("k", 1)
        # Announced, then aborted: the held write goes on at once.
        pub.publish("+new-epoch", "50")
        pub.publish("+try-failover", body)
        wait_until(lambda: s.info()["sentinel_failover_holding"] == "1", 5 * SLOW,
                   msg="writes held")
        with s.raw(timeout=10 * SLOW) as w:
            w.send_command("INCR", "k")
            assert held(w, 0.3), "a write went to the primary during an announced failover"
            assert c.get("k") == b"1"   # reads go on
            pub.publish("-failover-abort-not-elected", body)
            assert w.read_reply(timeout=1.0 * SLOW) == 2
        assert s.info()["sentinel_failover_holding"] == "0"
        # Announced, never switched: held for the window, then sent.
        pub.publish("+new-epoch", "51")
        pub.publish("+failover-state-select-slave", body)
        wait_until(lambda: s.info()["sentinel_failover_holding"] == "1", 5 * SLOW,
                   msg="writes held again")
        with s.raw(timeout=10 * SLOW) as w:
            w.send_command("INCR", "k")
            assert held(w, 0.3)
            assert w.read_reply(timeout=10 * SLOW) == 3   # the window passed: sent
        assert s.info()["sentinel_failover_holding"] == "0"
        assert topo.primary.client().get("k") == b"3"
        # That Sentinel is not believed again before a switch.
        pub.publish("+new-epoch", "52")
        pub.publish("+try-failover", body)
        pub.publish("+switch-master", f"{MASTER} 127.0.0.1 {topo.primary.port} 127.0.0.1 1")
        time.sleep(0.3)
        assert c.incr("k") == 4
        info = s.info()
        assert info["sentinel_failover_holding"] == "0" and info["sentinel_failover_holds"] == "2"
        assert info["sentinel_primary"] == f"127.0.0.1:{topo.primary.port}"
        log = s.log_path.read_text()
        assert "aborted by Sentinel, no switch" in log
        assert "no switch within failover_retry_window" in log
    finally:
        fake.stop()
