"""Locks across a failover (README "Locks", "What is guaranteed").

A lock lives in one primary. When that primary fails before the lock key
reached a replica and the replica is promoted, a second client can take
the lock while the first still holds it. These tests force that case
deterministically: the replica stops replicating (REPLICAOF NO ONE: it is
now the "promoted" primary) before the lock is written, or a cluster
replica takes over (CLUSTER FAILOVER TAKEOVER). A lock oracle records each
grant on the test's monotonic clock and fails on two overlapping grants of
one key, or on a fence that does not strictly increase.

- acks 0, grace off: the oracle finds the overlap (the checker works);
- ACKS 1: a lock is never granted unreplicated (-NOREPLICAS, no key left);
- the failover grace: a second grant after a primary change waits for it;
- a KEEP holder whose lock was lost gets the lock-lost push;
- cluster: 20 forced failovers, no overlap, fences strictly increasing;
- Sentinel: the lost lock found again with acks 0 and the grace off, and
  20 planned failovers (SENTINEL FAILOVER) with ACKS 1 and the grace, each
  losing the KEEP holder's lock on the promoted replica: no overlap, fences
  strictly increasing, a lock-lost push each time.

Each test starts its own redis-servers and sluices (redis_factory,
sluice_factory); the cluster test builds its own small cluster, since the
session's is shared; the Sentinel tests their own primary, replica and
three Sentinels.
"""

import os
import re
import signal
import subprocess
import threading
import time

import pytest
import redis

from conftest import DIRECT
from helpers import SLOW, Err, RawConn, wait_until
from sentinel_helpers import sentinel_sluices  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own verbs")

NOREPLICAS = re.compile(r"^NOREPLICAS lock not acknowledged by (\d+) replicas within (\d+) ms; "
                        r"not held$")
GRACE = re.compile(r"^TRYAGAIN lock grants resume on this shard in (\d+) ms \(failover grace\)$")


# --------------------------------------------------------------------------
# the oracle


class LockOracle:
    """Grants per key: [granted, released or sent + ttl) on the monotonic
    clock. GRANTED is when the reply came, the end is the earliest moment
    the lock may have ended (its TTL counted from when LOCK was sent, or the
    UNLOCK sent): the intervals are the times the holder surely held it, so
    an overlap is a real double grant, never a clock artefact."""

    def __init__(self):
        self.grants = {}   # key -> [[start, end, owner, fence]]

    def granted(self, key, owner, sent, ttl_ms, fence=None):
        self.grants.setdefault(key, []).append(
            [time.monotonic(), sent + ttl_ms / 1000.0, owner, fence])

    def released(self, key, owner):
        now = time.monotonic()
        for g in reversed(self.grants.get(key, [])):
            if g[2] == owner:
                g[1] = min(g[1], now)
                return

    def problems(self):
        found = []
        for key, grants in self.grants.items():
            grants = sorted(grants)
            for a, b in zip(grants, grants[1:]):
                if b[0] < a[1]:
                    found.append(f"{key}: {b[2]} granted at {b[0]:.3f} while {a[2]} held it "
                                 f"until {a[1]:.3f}")
            fences = [g[3] for g in grants if g[3] is not None]
            if any(y <= x for x, y in zip(fences, fences[1:])):
                found.append(f"{key}: fences not strictly increasing: {fences}")
        return found

    def check(self):
        assert not self.problems(), self.problems()


def lock(oracle, client, key, owner, ttl_ms, *opts):
    """LOCK KEY through CLIENT; a grant goes to the oracle. Returns the
    reply (token, [token, fence], None) or the error as Err."""
    sent = time.monotonic()
    try:
        reply = client.execute_command("LOCK", key, ttl_ms, "OWNER", owner, *opts)
    except redis.ResponseError as e:
        return Err(str(e))
    if reply is not None:
        fence = reply[1] if isinstance(reply, list) else None
        oracle.granted(key, owner, sent, ttl_ms, fence)
    return reply


def replicated_pair(redis_factory):
    """A primary and its replica, the replica acknowledging writes.

    "online" in the primary's INFO is not enough: Redis 7.0 marks a
    replica online once the RDB is sent, but starts its command stream
    only at the replica's first REPLCONF ACK, up to a second later (its
    replication cron). A lock with a 300 ms ACKS timeout right after
    "online" was then answered NOREPLICAS (CI, a loaded machine)."""
    primary = redis_factory("--repl-diskless-sync-delay", "0")
    replica = redis_factory("--replicaof", "127.0.0.1", str(primary.port))
    wait_until(lambda: primary.client().info("replication").get("slave0", {}).get("state")
               == "online",
               10 * SLOW, msg="the replica online")
    with primary.client() as p:
        p.set("replicated_pair:sync", "1")
        assert p.execute_command("WAIT", 1, int(10000 * SLOW)) == 1, "the replica acknowledging"
        p.delete("replicated_pair:sync")
    return primary, replica


def proxy_info(s, field):
    text = s.client().execute_command("PROXY", "INFO", "stats").decode()
    return int(re.search(rf"^{field}:(\d+)", text, re.M).group(1))


# --------------------------------------------------------------------------
# standalone


def test_unreplicated_lock_overlaps_without_acks_and_grace(redis_factory, sluice_factory):
    """The bad case, forced: the replica stops replicating, a lock goes to
    the primary only, a second sluice in front of the "promoted" replica
    grants it again. The oracle must see it; fences still go up (the
    promoted primary's epoch is its clock, above the old counter)."""
    primary, replica = replicated_pair(redis_factory)
    replica.client().execute_command("REPLICAOF", "NO", "ONE")
    old = sluice_factory(primary.port, lock_replica_acks=0, lock_failover_grace_ms=0)
    new = sluice_factory(replica.port, lock_replica_acks=0, lock_failover_grace_ms=0)
    wait_until(lambda: proxy_info(new, "lock_failover_graces") >= 2, 5 * SLOW,
               msg="the second sluice saw its primary")
    oracle = LockOracle()
    first = lock(oracle, old.client(), "k", "a", 10000, "FENCE")
    assert isinstance(first, list) and first[1] == 1
    second = lock(oracle, new.client(), "k", "b", 10000, "FENCE")
    assert isinstance(second, list), second
    problems = oracle.problems()
    assert len(problems) == 1 and "b granted" in problems[0] and "while a held it" in problems[0]
    assert second[1] > first[1] > 0


def test_info_refused_is_logged_once(redis_factory, sluice_factory):
    """A backend user that may not run INFO (-@dangerous, a common
    hardening) leaves the standalone master_replid watch blind: the log
    says so once, with Redis's words and the fix, not every second."""
    srv = redis_factory()
    srv.client().execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all",
                                 "-@dangerous")
    s = sluice_factory(srv.port, backend_user="app", backend_password="pw")
    wait_until(lambda: "refuses INFO" in s.log_path.read_text(), 5 * SLOW,
               msg="the warning")
    time.sleep(2.5)   # the watch asks every second
    lines = [ln for ln in s.log_path.read_text().splitlines() if "refuses INFO" in ln]
    assert len(lines) == 1, lines
    assert "NOPERM" in lines[0] and "allow +info" in lines[0], lines[0]


def test_acks_never_grant_unreplicated(redis_factory, sluice_factory):
    """ACKS 1: a grant is answered once the replica has it; with the
    replica stalled (SIGSTOP) the grant is given back and NOREPLICAS
    answered; with no replica connected nothing is written. A promoted
    replica then has every lock granted: the second owner gets nil."""
    primary, replica = replicated_pair(redis_factory)
    # Long enough for a loaded machine's first acknowledgement (scaled).
    timeout_ms = int(300 * SLOW)
    s = sluice_factory(primary.port, lock_replica_acks=1, lock_replica_timeout_ms=timeout_ms)
    c, p, r = s.client(), primary.client(), replica.client()
    oracle = LockOracle()
    tok = lock(oracle, c, "k", "a", 10000, "FENCE")
    assert isinstance(tok, list) and r.exists("k") == 1   # on the replica before the reply

    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        err = lock(oracle, c, "stalled", "a", 10000)
        assert isinstance(err, Err) and NOREPLICAS.match(err), err
        assert NOREPLICAS.match(err).groups() == ("1", str(timeout_ms))
        # Given back: its release goes out before the reply.
        wait_until(lambda: p.exists("stalled") == 0, 2 * SLOW, msg="the grant given back")
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)

    r.execute_command("REPLICAOF", "NO", "ONE")
    wait_until(lambda: p.info("replication")["connected_slaves"] == 0,
               5 * SLOW, msg="the replica gone")
    keys = set(p.keys())
    err = lock(oracle, c, "lonely", "a", 10000, "FENCE")
    assert isinstance(err, Err) and NOREPLICAS.match(err), err
    assert set(p.keys()) == keys   # nothing written, not even the fence
    with pytest.raises(redis.ResponseError, match=NOREPLICAS.pattern):
        c.execute_command("RENEW", "k", 10000, "OWNER", "a")
    # A renewal not acknowledged: given back.
    wait_until(lambda: p.exists("k") == 0, 2 * SLOW, msg="the renewed lock given back")
    assert lock(oracle, c, "lonely", "a", 10000, "ACKS", "0") == b"a"   # per call
    assert proxy_info(s, "lock_noreplicas") == 3

    # The "promoted" replica got k before its grant was answered.
    promoted = sluice_factory(replica.port, lock_failover_grace_ms=0)
    assert lock(oracle, promoted.client(), "k", "b", 10000) is None
    oracle.check()


def test_client_gone_while_its_grant_waits_for_replicas(redis_factory, sluice_factory):
    """A client that closes while its grant waits for the (stalled)
    replica: nothing is answered to nobody, the grant is given back, and
    sluice serves the next client."""
    primary, replica = replicated_pair(redis_factory)
    s = sluice_factory(primary.port, lock_replica_acks=1, lock_replica_timeout_ms=int(300 * SLOW))
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with RawConn(s.port) as conn:
            conn.send_command("LOCK", "gone", "10000")
            wait_until(lambda: primary.client().exists("gone") == 1, 5 * SLOW,
                       msg="the grant written")
        wait_until(lambda: primary.client().exists("gone") == 0, 5 * SLOW,
                   msg="the grant given back")
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    assert s.client().execute_command("LOCK", "gone", "1000", "OWNER", "next", "ACKS", "0") == b"next"


@pytest.mark.parametrize("args, error", [
    (["LOCK", "k", "100", "ACKS"], "syntax error"),
    (["LOCK", "k", "100", "ACKS", "-1"], "invalid ACKS count in 'lock' command"),
    (["LOCK", "k", "100", "ACKS", "x"], "value is not an integer or out of range"),
    (["RENEW", "k", "100", "ACKS", "1001"], "invalid ACKS count in 'renew' command"),
    (["UNLOCK", "k", "ACKS", "1"], "syntax error"),
    (["LOCK", "k", "30001"],
     "invalid expire time in 'lock' command: longer than lock_max_ttl_ms (30000)"),
    (["RENEW", "k", "30001", "OWNER", "o"],
     "invalid expire time in 'renew' command: longer than lock_max_ttl_ms (30000)"),
])
def test_bad_arguments(redis_factory, sluice_factory, args, error):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with pytest.raises(redis.ResponseError) as e:
        s.client().execute_command(*args)
    assert str(e.value) == error
    assert srv.client().dbsize() == 0


def test_grace_after_a_primary_change(redis_factory, sluice_factory):
    """The unreplicated lock of the first test, but the second sluice
    starts with the grace on (= lock_max_ttl_ms): LOCK gets TRYAGAIN,
    LOCK ... WAIT gets the lock only once no earlier grant can be alive."""
    primary, replica = replicated_pair(redis_factory)
    replica.client().execute_command("REPLICAOF", "NO", "ONE")
    ttl = int(1500 * SLOW)
    old = sluice_factory(primary.port, lock_failover_grace_ms=0, lock_max_ttl_ms=ttl)
    oracle = LockOracle()
    assert lock(oracle, old.client(), "k", "a", ttl) == b"a"
    new = sluice_factory(replica.port, lock_max_ttl_ms=ttl, lock_failover_grace_ms=ttl)
    c = new.client()
    err = lock(oracle, c, "k", "b", ttl)
    assert isinstance(err, Err) and GRACE.match(err), err
    assert 0 < int(GRACE.match(err).group(1)) <= ttl
    with pytest.raises(redis.ResponseError, match="longer than lock_max_ttl_ms"):
        c.execute_command("LOCK", "k", ttl + 1)
    assert lock(oracle, c, "k", "b", ttl, "WAIT", 5 * ttl) == b"b"
    oracle.check()
    assert proxy_info(new, "lock_failover_graces") >= 2   # startup, first contact


def test_new_primary_seen_on_reconnect_and_keep_lost(redis_factory, sluice_factory):
    """The same sluice, its primary replaced by an empty one on the same
    address (a new master_replid): a grace begins; the KEEP holder's lock
    is gone, so it gets the lock-lost push (RESP3), its UNLOCK says
    NOTOWNER, and PROXY INFO counts it."""
    srv = redis_factory()
    ttl = int(1200 * SLOW)
    s = sluice_factory(srv.port, lock_max_ttl_ms=ttl, lock_failover_grace_ms=ttl)
    with RawConn(s.port, timeout=10 * SLOW) as conn:
        conn.call("HELLO", "3")
        wait_until(lambda: not GRACE.match(str(conn.call("LOCK", "probe", "100"))), 5 * SLOW,
                   msg="the start-up grace over")
        tok, fence = conn.call("LOCK", "kk", str(ttl), "KEEP", "FENCE")
        assert fence >= 1
        srv.stop()
        srv.start()   # empty, a new replid: the lock is lost
        push = conn.read_reply(timeout=10 * SLOW)
        assert push == [b"sluice", b"lock-lost", b"kk", fence]
        assert conn.call("UNLOCK", "kk").startswith("NOTOWNER")
        err = conn.call("LOCK", "kk", "100")
        assert isinstance(err, Err) and GRACE.match(err), err
    assert proxy_info(s, "lock_lost") == 1
    assert "primary of slots 0-16383 changed (the primary's master_replid changed)" in \
        s.log_path.read_text()


def test_two_new_primaries_in_one_second_still_raise_the_fence(redis_factory, sluice_factory):
    """Two new primaries seen within one second of the clock (the primary
    restarted empty twice, quickly; planned failovers can be as quick):
    the second still gets a higher epoch than the first, so the fence,
    whose counter was lost both times, still goes up. Tried until both
    changes fell within one clock second (at most 10 times)."""
    srv = redis_factory()
    s = sluice_factory(srv.port, lock_failover_grace_ms=0)
    c = s.client()
    wait_until(lambda: proxy_info(s, "lock_failover_graces") >= 2, 5 * SLOW,
               msg="the first contact")
    for _ in range(10):
        time.sleep(1.02 - time.time() % 1)   # just after a second begins
        began, fences = time.time(), []
        for _ in range(2):
            seen = proxy_info(s, "lock_failover_graces")
            srv.stop()
            srv.start()
            wait_until(lambda: proxy_info(s, "lock_failover_graces") > seen, 5 * SLOW,
                       interval=0.01, msg="the new primary seen")
            fences.append(c.execute_command("LOCK", "k", 100, "FENCE")[1])
        if int(time.time()) == int(began):
            break
    else:
        pytest.fail("never two changes within one second")
    assert fences[1] > fences[0] > 1 << 20, fences


def test_check_warns_of_a_grace_shorter_than_the_longest_lock(tmp_path):
    """sluice -t: a grace under lock_max_ttl_ms lets a lost lock outlive it
    (a warning, exit 0); 0 turns the grace off on purpose (no warning)."""
    from conftest import require_sluice_bin
    cfg = tmp_path / "sluice.ini"
    for grace, warned in (("100", True), ("0", False), ("60000", False)):
        cfg.write_text(f"[proxy]\nbackend = 127.0.0.1:6379\nlock_failover_grace_ms = {grace}\n")
        p = subprocess.run([require_sluice_bin(), "-t", "-c", str(cfg)], capture_output=True,
                           timeout=10 * SLOW, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        line = (f"{cfg}:3: warning: lock_failover_grace_ms 100 is shorter than lock_max_ttl_ms "
                "30000: after a failover, a lock can be granted while a lost one is still held")
        assert (line in p.stderr.decode()) == warned, p.stderr


# --------------------------------------------------------------------------
# cluster


@pytest.fixture
def small_cluster(tmp_path):
    from cluster_helpers import ClusterRedis
    cl = ClusterRedis(tmp_path / "cluster", extra_args=("--repl-diskless-sync-delay", "0"))
    cl.start()
    yield cl
    cl.stop()


def slot_replica_port(cl, slot):
    """The port of the replica of SLOT's primary, once it is online."""
    def replica():
        with cl.node_by_port(cl.slot_owner_port(slot)).client() as c:
            r = c.info("replication").get("slave0", {})
            return r.get("port") if r.get("state") == "online" else None
    wait_until(replica, 10 * SLOW, msg=f"the replica of slot {slot} online")
    return replica()


def lock_retrying(oracle, client, key, owner, ttl_ms, *opts):
    """LOCK through a failover: NOREPLICAS (the old primary not yet a
    replica in sync), TRYAGAIN (the grace, a slot moving) and a lost
    connection are tried again, for a bounded time."""
    deadline = time.monotonic() + 20 * SLOW
    while True:
        try:
            reply = lock(oracle, client, key, owner, ttl_ms, *opts)
        except redis.ConnectionError:
            reply = Err("connection")
        if not isinstance(reply, Err) or time.monotonic() > deadline:
            return reply
        time.sleep(0.05)


def test_cluster_failovers_keep_locks_exclusive(small_cluster, sluice_factory, tmp_path):
    """20 forced failovers (CLUSTER FAILOVER TAKEOVER) of the lock's shard,
    with ACKS 1 and the grace: holders take the lock through one sluice, a
    second owner through another waits for it; the oracle finds no overlap
    and the fences strictly increase (each new primary has a higher config
    epoch)."""
    from conftest import Sluice
    cl = small_cluster
    ttl = 600
    cfg = {"lock_replica_acks": 1, "lock_max_ttl_ms": ttl, "lock_replica_timeout_ms": 1000,
           "cluster_refresh_interval": 100}
    sluices = []
    for i in range(2):
        s = Sluice(tmp_path / f"cs{i}", None, extra={**cfg, "lock_failover_grace_ms": ttl},
                   cluster_seeds=cl.seeds)
        sluices.append(s.start())
    try:
        a, b = (s.client(single_connection_client=True) for s in sluices)
        oracle = LockOracle()
        key = "fo{x}"
        slot = cl.cluster_client().keyslot(key)
        for i in range(20):
            got = lock_retrying(oracle, a, key, f"a{i}", ttl, "FENCE", "WAIT", 3 * ttl)
            assert isinstance(got, list), got
            replica = slot_replica_port(cl, slot)
            with cl.node_by_port(replica).client() as r:
                r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            wait_until(lambda: cl.slot_owner_port(slot) == replica, 10 * SLOW,
                       msg="the replica took over")
            other = b if i % 2 == 0 else a
            got = lock_retrying(oracle, other, key, f"b{i}", ttl, "FENCE", "WAIT", 3 * ttl)
            assert isinstance(got, list), got
            other.execute_command("UNLOCK", key, "OWNER", f"b{i}")
            oracle.released(key, f"b{i}")
        oracle.check()
        fences = [g[3] for g in sorted(oracle.grants[key])]
        assert len(fences) == 40
    finally:
        for s in sluices:
            problems = s.stop()
            assert not problems, problems


def test_cluster_keep_holder_told_its_lock_was_lost(small_cluster, tmp_path):
    """A lock the promoted replica does not have (deleted there before the
    TAKEOVER, as if never replicated): the KEEP holder's next renewal on
    the new primary finds it gone, and the RESP3 holder gets lock-lost."""
    from conftest import Sluice
    cl = small_cluster
    s = Sluice(tmp_path / "keep", None, cluster_seeds=cl.seeds,
               extra={"lock_max_ttl_ms": 900, "cluster_refresh_interval": 100}).start()
    try:
        key = "kk{y}"
        slot = cl.cluster_client().keyslot(key)
        with RawConn(s.port, timeout=10 * SLOW) as conn:
            conn.call("HELLO", "3")
            tok, fence = conn.call("LOCK", key, "900", "KEEP", "FENCE")
            replica = slot_replica_port(cl, slot)
            with cl.node_by_port(replica).client() as r:
                r.execute_command("READONLY")
                wait_until(lambda: r.exists(key) == 1, 5 * SLOW, msg="the lock replicated")
                # Keyed writes on a cluster replica are redirected; a
                # keyless one runs there once it takes writes.
                r.config_set("replica-read-only", "no")
                r.flushall()
                r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            push = conn.read_reply(timeout=10 * SLOW)
            assert push == [b"sluice", b"lock-lost", key.encode(), fence]
            assert conn.call("UNLOCK", key).startswith("NOTOWNER")
        assert proxy_info(s, "lock_lost") == 1
    finally:
        problems = s.stop()
        assert not problems, problems


# --------------------------------------------------------------------------
# Sentinel


@pytest.fixture
def sentinel_pair(tmp_path):
    """A primary, one replica (so failovers alternate between the two) and
    three Sentinels with short timeouts; replicas sync without delay."""
    from sentinel_helpers import SentinelTopology
    t = SentinelTopology(tmp_path / "topo", replicas=1,
                         redis_args=("--repl-diskless-sync-delay", "0"),
                         down_after_ms=1000, failover_timeout_ms=2000)
    try:
        t.start()
        yield t
    finally:
        t.stop()


def test_sentinel_handover_keeps_granting_locks(sentinel_pair, sentinel_sluices):
    """Sentinel mode passes the primary's master_replid on at a hand-over
    as standalone mode does: the new sluice (60 s of grace of its own)
    grants at once, and its fences go on from the old one's."""
    from helpers import free_port
    port = free_port()
    old = sentinel_sluices(sentinel_pair, listen_ports=[port], lock_failover_grace_ms=500)
    c = redis.Redis(port=port, socket_timeout=10 * SLOW)
    first = wait_until(lambda: c.execute_command("LOCK", "k", 200, "FENCE"), 10 * SLOW,
                       msg="the start-up grace to end")
    new = sentinel_sluices(sentinel_pair, start=False, listen_ports=[port],
                           lock_failover_grace_ms=60000)
    new.start(ready_timeout=20 * SLOW)
    wait_until(lambda: "stopped accepting" in new.log_path.read_text(), 10 * SLOW,
               msg="the new sluice to take over")
    assert old.proc.wait(timeout=15 * SLOW) == 0
    c = redis.Redis(port=port, socket_timeout=10 * SLOW)
    got = c.execute_command("LOCK", "k", 30000, "FENCE", "WAIT", 5000)
    assert isinstance(got, list) and got[1] > first[1], got
    assert "no failover between the two" in new.log_path.read_text()


def sentinel_replica(topo):
    """The data node the Sentinels do not name, once it is an online
    replica of the one they do."""
    def online():
        port = topo.current_primary_port()
        if port is None:
            return None
        with topo.node_by_port(port).client() as c:
            r = c.info("replication").get("slave0", {})
        return topo.node_by_port(r["port"]) if r.get("state") == "online" else None
    return wait_until(online, 20 * SLOW, msg="the replica online")


def lose_on_replica(replica, keys, flush=False):
    """The replica (promoted next) loses KEYS, as if their writes never
    reached it: written there directly, which replication does not undo.
    FLUSH: everything, the fence counters too."""
    with replica.client() as r:
        wait_until(lambda: r.exists(*keys) == len(keys), 5 * SLOW, msg="the locks replicated")
        r.config_set("replica-read-only", "no")
        if flush:
            r.flushall()
        else:
            r.delete(*keys)
        r.config_set("replica-read-only", "yes")


def sentinel_failover(topo, sluices, auth=()):
    """A planned failover (SENTINEL FAILOVER, asked again while the
    Sentinels answer -INPROG or -NOGOOD: the last one not over, the old
    primary not yet a replica they trust), until every sluice in SLUICES
    serves the new primary (AUTH: to log in to them); the old primary is
    made its replica at once. Returns its port."""
    from sentinel_helpers import MASTER, wait_primary_switch
    old = wait_until(topo.current_primary_port, 10 * SLOW, msg="the Sentinels agree")

    def asked():
        with topo.sentinels[0].client() as c:
            return c.execute_command("SENTINEL", "FAILOVER", MASTER)
    wait_until(asked, 20 * SLOW, interval=0.1, msg="SENTINEL FAILOVER accepted")
    new = wait_primary_switch(topo, old)
    # What Sentinel does after its next INFO of the old primary (up to 10 s).
    with topo.node_by_port(old).client() as c:
        c.execute_command("REPLICAOF", "127.0.0.1", str(new))
    for s in sluices:
        wait_until(lambda: s.info(auth).get("sentinel_primary") == f"127.0.0.1:{new}", 10 * SLOW,
                   msg="sluice switched")
    return new


def test_sentinel_unreplicated_lock_overlaps_without_acks_and_grace(sentinel_pair,
                                                                     sentinel_sluices):
    """Sentinel mode, the bad case forced: two locks granted on the primary
    never reach the replica (deleted there), SENTINEL FAILOVER promotes it;
    with acks 0 and the grace off, both are granted again, one through the
    same sluice, one through another. The oracle must see both overlaps
    (the checker works); fences still go up (the promoted primary's epoch
    is its clock); the switch counts as one primary change."""
    topo = sentinel_pair
    cfg = {"lock_replica_acks": 0, "lock_failover_grace_ms": 0}
    one, two = sentinel_sluices(topo, **cfg), sentinel_sluices(topo, **cfg)
    oracle = LockOracle()
    first = [lock(oracle, one.client(), k, "a", 30000, "FENCE") for k in ("same", "other")]
    assert all(isinstance(f, list) for f in first), first
    lose_on_replica(sentinel_replica(topo), ["same", "other"])
    graces = proxy_info(one, "lock_failover_graces")
    sentinel_failover(topo, [one, two])
    again = [lock(oracle, one.client(), "same", "b", 30000, "FENCE"),
             lock(oracle, two.client(), "other", "c", 30000, "FENCE")]
    assert all(isinstance(g, list) for g in again), again
    problems = oracle.problems()
    assert len(problems) == 2, problems
    assert "same: b granted" in problems[0] and "other: c granted" in problems[1]
    assert again[0][1] > first[0][1] and again[1][1] > first[1][1]
    # One change, counted once: the switch; the new primary's replid
    # (read by then: the fences used its epoch) only brings the epoch.
    assert proxy_info(one, "lock_failover_graces") == graces + 1


def keep_lock(oracle, conn, key, owner, ttl_ms):
    """LOCK KEY ... KEEP FENCE WAIT on the RESP3 connection CONN, tried
    again while the replica is not yet back (NOREPLICAS), for a bounded
    time; the grant goes to the oracle. Returns [token, fence]."""
    deadline = time.monotonic() + 20 * SLOW
    while True:
        sent = time.monotonic()
        reply = conn.call("LOCK", key, str(ttl_ms), "KEEP", "FENCE", "WAIT", str(3 * ttl_ms))
        if isinstance(reply, list):
            oracle.granted(key, owner, sent, ttl_ms, reply[1])
            return reply
        assert time.monotonic() < deadline, reply
        time.sleep(0.05)


def test_sentinel_failovers_keep_locks_exclusive(sentinel_pair, sentinel_sluices):
    """20 planned failovers (SENTINEL FAILOVER, the primary alternating
    between two nodes) with ACKS 1 and the grace. Each time a KEEP holder
    (RESP3) takes the lock, the replica loses everything (the lock and its
    fence counter) and is promoted: the holder gets the lock-lost push,
    then a second owner takes the lock through the same sluice or through
    the other one. The oracle finds no overlap (the holder counts as
    holding until one renewal period before its push: its last renewal on
    the old primary came no earlier) and the fences strictly increase,
    though each new primary lost the counter."""
    topo = sentinel_pair
    ttl = int(600 * SLOW)
    cfg = {"lock_replica_acks": 1, "lock_max_ttl_ms": ttl, "lock_failover_grace_ms": ttl,
           "lock_replica_timeout_ms": 1000}
    sluices = [sentinel_sluices(topo, **cfg), sentinel_sluices(topo, **cfg)]
    clients = [s.client(single_connection_client=True) for s in sluices]
    oracle = LockOracle()
    key = "fo"
    for i in range(20):
        holder = i % 2
        other = clients[holder] if i % 4 < 2 else clients[1 - holder]
        sentinel_replica(topo)   # ACKS 1 needs it; SENTINEL FAILOVER a good one
        with RawConn(sluices[holder].port, timeout=10 * SLOW) as conn:
            conn.call("HELLO", "3")
            tok, fence = keep_lock(oracle, conn, key, f"a{i}", ttl)
            lose_on_replica(sentinel_replica(topo), [key], flush=True)
            sentinel_failover(topo, sluices)
            push = conn.read_reply(timeout=10 * SLOW)
            lost_at = time.monotonic()
            assert push == [b"sluice", b"lock-lost", key.encode(), fence], push
            grant = oracle.grants[key][-1]
            grant[1] = max(grant[1], lost_at - ttl / 3000.0)
            assert conn.call("UNLOCK", key).startswith("NOTOWNER")
        got = lock_retrying(oracle, other, key, f"b{i}", ttl, "FENCE", "WAIT", 3 * ttl)
        assert isinstance(got, list), got
        other.execute_command("UNLOCK", key, "OWNER", f"b{i}")
        oracle.released(key, f"b{i}")
    oracle.check()
    assert len(oracle.grants[key]) == 40
    assert all(proxy_info(s, "lock_lost") >= 1 for s in sluices)


def test_sentinel_switch_starts_the_grace_by_itself(sentinel_pair, sentinel_sluices):
    """The switch itself starts the grace, not only the new primary's
    master_replid: here sluice's backend user may not run INFO (a user
    with -@dangerous, a common hardening; +role for Sentinel mode), so the
    replid watch learns nothing. A lock lost on the promoted replica is
    still not granted again before the grace ends: TRYAGAIN at once,
    granted with WAIT only once the lost one has expired."""
    topo = sentinel_pair
    for node in topo.nodes:
        with node.client() as c:
            c.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all",
                              "-@dangerous", "+role")
    ttl = int(3000 * SLOW)
    s = sentinel_sluices(topo, backend_user="app", backend_password="pw", lock_max_ttl_ms=ttl,
                         lock_failover_grace_ms=ttl)
    c = s.client(username="app", password="pw")
    oracle = LockOracle()
    assert lock(oracle, c, "k", "a", ttl, "WAIT", 3 * ttl) == b"a"   # after the start-up grace
    lose_on_replica(sentinel_replica(topo), ["k"])
    sentinel_failover(topo, [s], ("app", "pw"))
    err = lock(oracle, c, "k", "b", ttl)
    assert isinstance(err, Err) and GRACE.match(err), err
    assert lock(oracle, c, "k", "b", ttl, "WAIT", 3 * ttl) == b"b"
    oracle.check()
    assert "changed (sentinel switched the primary)" in s.log_path.read_text()


def test_sentinel_lock_held_through_the_switch_is_not_granted_in_the_grace(
        sentinel_pair, sentinel_sluices):
    """A LOCK that comes while the primary is dead waits in sluice (held,
    not sent) and goes to the new primary after the switch. The switch
    began a grace, so that LOCK must not be granted there, though it was
    checked before the switch: its grant is given back and it is answered
    TRYAGAIN. (Without the check at the grant, B got the lock that A,
    lost with the old primary, still held: the oracle's overlap.)"""
    topo = sentinel_pair
    ttl = int(20000 * SLOW)
    s = sentinel_sluices(topo, lock_max_ttl_ms=ttl, lock_failover_grace_ms=0,
                         failover_retry_window=int(30000 * SLOW))
    # Grace off at start (no start-up wait), on from now: a live key.
    text = s.config_path.read_text().replace("lock_failover_grace_ms = 0",
                                             f"lock_failover_grace_ms = {ttl}")
    s.config_path.write_text(text)
    with s.raw() as r:
        assert r.call(b"PROXY", b"RELOAD") == "OK"
    c = s.client(socket_timeout=60 * SLOW)
    oracle = LockOracle()
    assert lock(oracle, c, "k", "a", ttl) == b"a"
    lose_on_replica(sentinel_replica(topo), ["k"])
    old = topo.node_by_port(topo.current_primary_port())
    old.proc.kill()
    old.proc.wait()
    gone = f"127.0.0.1:{old.port}"

    def down():
        info = s.info()
        return any(v.startswith(f"addr={gone},") and "state=up" not in v
                   for k, v in info.items() if k.startswith("backend_"))
    wait_until(down, 5 * SLOW, msg="sluice sees the primary gone")
    err = lock(oracle, c, "k", "b", ttl)   # held until the switch, then sent
    assert isinstance(err, Err) and GRACE.match(err), err
    oracle.check()
    new = topo.node_by_port(int(s.info()["sentinel_primary"].rsplit(":", 1)[1]))
    assert new is not old
    wait_until(lambda: new.client().exists("k") == 0, 5 * SLOW, msg="the grant given back")
