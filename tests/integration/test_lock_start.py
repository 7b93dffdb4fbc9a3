"""The failover grace only where Redis says a grant may have been lost
(issue 32): a sluice that starts grants at once in front of a Redis that
lost nothing within lock_max_ttl_ms; it does not grant a lock the old
primary may still hold after a promotion it did not see, whether another
sluice recorded the promotion (sluice:primary-seen) or none saw it; the
grace shows in /metrics, PROXY INFO and the log; a LOCK ... WAIT waits
through it. Real redis-servers; the default config unless a test is about
lock_max_ttl_ms (then a short window keeps it quick)."""

import re
import time
import urllib.request

import pytest
import redis

from conftest import DIRECT
from helpers import SLOW, free_port, wait_until
from sentinel_helpers import sentinel_sluices  # noqa: F401 (a fixture)
from test_lock_failover import GRACE, replicated_pair, sentinel_pair  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own verbs")

TOKEN = re.compile(rb"^[0-9a-f]{32}$")


def _lock_now(s, key="k", ttl=1000, *more):
    """LOCK without WAIT through S: the token, or the error's text."""
    try:
        return s.client().execute_command("LOCK", key, ttl, *more)
    except redis.ResponseError as e:
        return str(e)


def _grace_ms(reply):
    """The ms a TRYAGAIN of the grace says; fails on anything else."""
    m = GRACE.match(reply) if isinstance(reply, str) else None
    assert m, reply
    return int(m.group(1))


def _log(s):
    return s.log_path.read_text(errors="replace")


def _promote(replica):
    """REPLICAOF NO ONE on REPLICA: a new master_replid, the old one as
    master_replid2 (second_repl_offset set). The old primary goes on."""
    replica.client().execute_command("REPLICAOF", "NO", "ONE")
    wait_until(lambda: replica.client().info("replication")["role"] == "master", 5 * SLOW,
               msg="the replica promoted")


def test_fresh_sluice_grants_at_once(redis_factory, sluice_factory):
    """`make run` and LOCK: a new Redis (nothing loaded from disk, never
    promoted) lost nothing, so the first LOCK through a sluice that just
    started is granted (it used to get TRYAGAIN for a minute), and the log
    says why there is no grace."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    got = _lock_now(s)
    assert isinstance(got, bytes) and TOKEN.match(got), got
    wait_until(lambda: "no failover grace on slots 0-16383" in _log(s), 5 * SLOW,
               msg="the log line saying there is no grace")
    assert "never promoted" in _log(s) and "without a data set from disk" in _log(s)


def test_redis_that_loaded_its_data_graces_the_rest_of_the_window(redis_factory,
                                                                   sluice_factory):
    """A Redis that loaded its data set from disk (AOF on) may have lost the
    writes after its last save when it started: a sluice that starts within
    lock_max_ttl_ms of that grants nothing for the rest of the window; once
    Redis has served longer than the window, a new sluice grants at once.
    lock_max_ttl_ms 3000 (the setting this test is about)."""
    srv = redis_factory("--appendonly", "yes")
    early = sluice_factory(srv.port, lock_max_ttl_ms=3000)
    got = _lock_now(early)
    if int(srv.client().info("server")["uptime_in_seconds"]) < 2:
        assert 0 < _grace_ms(got) <= 3000
    wait_until(lambda: int(srv.client().info("server")["uptime_in_seconds"]) >= 4, 10 * SLOW,
               msg="Redis up longer than the window")
    late = sluice_factory(srv.port, lock_max_ttl_ms=3000)
    got = _lock_now(late)
    assert isinstance(got, bytes) and TOKEN.match(got), got
    assert "with its data set from disk" in _log(late)


def test_no_grant_of_a_lock_the_old_primary_may_hold_after_an_unseen_promotion(
        redis_factory, sluice_factory):
    """The replica is promoted; the old primary goes on and grants a lock
    no replica has. No sluice saw the promotion: the first sluice that
    starts in front of the new primary knows only that it was promoted
    (second_repl_offset), not when, so it grants nothing for the whole
    window, and records when it first saw it. A second sluice that starts
    later learns that from the record (another sluice saw it) and grants
    nothing either, for the rest of the window. Default config."""
    primary, replica = replicated_pair(redis_factory)
    old = sluice_factory(primary.port)
    _promote(replica)
    held = _lock_now(old, "k", 30000)
    assert isinstance(held, bytes), held
    assert replica.client().exists("k") == 0
    first = sluice_factory(replica.port)
    left1 = _grace_ms(_lock_now(first, "k", 30000))
    assert left1 > 20000
    assert "(this sluice is the first)" in _log(first)
    assert replica.client().hexists("sluice:primary-seen",
                                    replica.client().info("replication")["master_replid"])
    time.sleep(1)
    second = sluice_factory(replica.port)
    left2 = _grace_ms(_lock_now(second, "k", 30000))
    assert 0 < left2 < left1
    text = _log(second)
    assert "by sluice's record sluice:primary-seen" in text and "(this sluice is the first)" \
        not in text


def test_promotion_recorded_longer_ago_than_the_window_begins_no_grace(redis_factory,
                                                                       sluice_factory):
    """A promoted primary whose promotion a sluice recorded longer than
    lock_max_ttl_ms ago: every lock of before has expired, and a sluice
    that starts grants at once (a primary once promoted used to begin the
    grace at every sluice start). lock_max_ttl_ms 2000 (the setting this
    test is about)."""
    primary, replica = replicated_pair(redis_factory)
    _promote(replica)
    first = sluice_factory(replica.port, lock_max_ttl_ms=2000)
    _grace_ms(_lock_now(first))
    time.sleep(2.5)
    late = sluice_factory(replica.port, lock_max_ttl_ms=2000)
    got = _lock_now(late)
    assert isinstance(got, bytes) and TOKEN.match(got), got


def test_grace_shows_in_metrics_proxy_info_and_log(redis_factory, sluice_factory):
    """While a grace runs: sluice_lock_grace_remaining_seconds{shard} says
    what is left, PROXY INFO's "# Locks" too, and the log says when and why
    it began (the replids, the record) and when it ended; then 0.
    lock_max_ttl_ms 3000 (a grace to see end)."""
    primary, replica = replicated_pair(redis_factory)
    _promote(replica)
    mport = free_port()
    s = sluice_factory(replica.port, lock_max_ttl_ms=3000, metrics_listen=f"127.0.0.1:{mport}")
    _grace_ms(_lock_now(s))
    shard = f'shard="127.0.0.1:{replica.port}"'

    def gauge():
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5 * SLOW) as f:
            body = f.read().decode()
        m = re.search(r"^sluice_lock_grace_remaining_seconds\{" + re.escape(shard) + r"\} (\S+)$",
                      body, re.M)
        assert m, body
        return float(m.group(1))

    def info():
        return s.client().execute_command("PROXY", "INFO", "locks").decode()

    assert 0 < gauge() <= 3
    text = info()
    assert text.startswith("# Locks\r\n")
    assert 0 < float(re.search(r"^lock_grace_remaining_seconds:(\S+)\r$", text, re.M).group(1)) <= 3
    assert re.search(rf"^lock_shard0:name=127.0.0.1:{replica.port},slots=0-16383,"
                     r"grace_remaining_seconds=[0-9.]+,fence_epoch=\d+\r$", text, re.M), text
    replid2 = replica.client().info("replication")["master_replid2"]
    log = _log(s)
    assert "failover grace begins on slots 0-16383" in log
    assert f"master_replid2 {replid2}" in log and "sluice:primary-seen" in log
    wait_until(lambda: "lock: failover grace over on slots 0-16383" in _log(s), 10 * SLOW,
               msg="the log line of the grace's end")
    assert gauge() == 0
    assert "lock_grace_remaining_seconds:0.000\r\n" in info()
    assert isinstance(_lock_now(s), bytes)


def test_lock_wait_waits_through_a_grace_that_begins_while_it_waits(redis_factory,
                                                                    sluice_factory):
    """A LOCK ... WAIT queued behind a holder when a grace begins (the
    primary's master_replid changes: a restart without the data, as far as
    sluice can tell) is not answered TRYAGAIN when the holder lets go: it
    waits for the grace's end, within its WAIT. lock_max_ttl_ms 2000."""
    srv = redis_factory("--enable-debug-command", "yes")
    s = sluice_factory(srv.port, lock_max_ttl_ms=2000)
    holder = s.client(single_connection_client=True)
    assert isinstance(holder.execute_command("LOCK", "w", 2000), bytes)
    waiter = s.client(single_connection_client=True, socket_timeout=20 * SLOW)
    result = {}

    import threading

    def wait():
        try:
            result["r"] = waiter.execute_command("LOCK", "w", 1000, "WAIT", int(15000 * SLOW))
        except redis.ResponseError as e:
            result["r"] = str(e)

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.2)
    srv.client().execute_command("DEBUG", "CHANGE-REPL-ID")
    wait_until(lambda: "failover grace begins" in _log(s), 5 * SLOW, msg="the grace to begin")
    holder.execute_command("UNLOCK", "w")
    th.join(20 * SLOW)
    assert isinstance(result.get("r"), bytes) and TOKEN.match(result["r"]), result


# --------------------------------------------------------------------------
# lock_replica_acks = all


def test_acks_all_waits_for_every_replica_online(redis_factory, sluice_factory):
    """lock_replica_acks = all: a grant or renewal is answered once every
    replica online acknowledged it (here the one: it has the lock); no
    replica online is NOREPLICAS; a call may not ask fewer (ACKS 1), since
    a failover then begins no grace."""
    primary, replica = replicated_pair(redis_factory)
    s = sluice_factory(primary.port, lock_replica_acks="all")
    c = s.client()
    assert c.execute_command("LOCK", "k", 5000, "OWNER", "o") == b"o"
    assert replica.client().hget("k", "o") == b"1"
    assert c.execute_command("RENEW", "k", 9000, "OWNER", "o") in (b"OK", True)
    assert replica.client().pttl("k") > 8000
    with pytest.raises(redis.ResponseError,
                       match="^ACKS other than all while lock_replica_acks = all$"):
        c.execute_command("LOCK", "k2", 1000, "ACKS", 1)
    replica.stop()
    wait_until(lambda: primary.client().info("replication")["connected_slaves"] == 0, 5 * SLOW,
               msg="the replica gone")
    with pytest.raises(redis.ResponseError,
                       match=r"^NOREPLICAS lock not acknowledged by all replicas within 1000 ms "
                             r"\(none online\); not held$"):
        c.execute_command("LOCK", "k3", 1000)
    assert primary.client().exists("k3") == 0


def test_acks_all_bad_value_is_a_config_error(tmp_path):
    """sluice -t: lock_replica_acks takes a count or "all"."""
    import subprocess
    from conftest import require_sluice_bin
    cfg = tmp_path / "sluice.ini"
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\nlock_replica_acks = most\n")
    p = subprocess.run([require_sluice_bin(), "-t", "-c", str(cfg)], capture_output=True,
                       timeout=10 * SLOW, stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    assert (f"{cfg}:3: lock_replica_acks: 'most' is not all nor a count of replicas (0 to 1000)"
            in p.stderr.decode()), p.stderr


def test_sentinel_switch_with_acks_all_begins_no_grace(sentinel_pair, sentinel_sluices):
    """With lock_replica_acks = all every grant reached every replica, so
    the promoted one has them all: a Sentinel switch begins no grace (a
    sluice with the default acks, beside it, does), and the promotion is
    recorded in sluice:primary-seen: a sluice that starts after the switch
    learns from it when it was. Its own start counts as
    grants not acknowledged for one window (other sluices' may be): the
    switch comes after it. lock_max_ttl_ms 3000 (the window waited)."""
    from test_lock_failover import sentinel_failover
    topo = sentinel_pair
    ttl = 3000
    s_all = sentinel_sluices(topo, lock_replica_acks="all", lock_max_ttl_ms=ttl)
    s_plain = sentinel_sluices(topo, lock_max_ttl_ms=ttl)
    c = s_all.client()
    wait_until(lambda: isinstance(_lock_now(s_all, "probe", 100), bytes), 10 * SLOW,
               msg="the replica online")
    time.sleep(ttl / 1000 + 0.5)
    held = c.execute_command("LOCK", "held", ttl, "OWNER", "h")
    assert held == b"h"
    sentinel_failover(topo, [s_all, s_plain])
    assert GRACE.match(_lock_now(s_plain, "other2", 1000))
    replies = []

    def granted():
        # NOREPLICAS until the old primary is an online replica again.
        replies.append(_lock_now(s_all, "other", 1000))
        assert not (isinstance(replies[-1], str) and GRACE.match(replies[-1])), replies
        return isinstance(replies[-1], bytes)

    wait_until(granted, 10 * SLOW, msg="a grant on the new primary")
    assert not [r for r in replies if isinstance(r, str) and GRACE.match(r)], replies
    assert "no failover grace on slots 0-16383" in _log(s_all)
    # The promotion went into the record: a sluice that starts later knows
    # how long ago it came.
    port = topo.current_primary_port()
    node = next(n for n in topo.nodes if n.port == port)
    with node.client() as r:
        replid = r.info("replication")["master_replid"]
        wait_until(lambda: r.hexists("sluice:primary-seen", replid), 5 * SLOW,
                   msg="the promotion recorded")
    # A sluice started right after the switch, which it did not see: the
    # record another sluice wrote says when, so it waits the rest of the
    # window only (the default acks here), and says so.
    late = sentinel_sluices(topo, lock_max_ttl_ms=ttl)
    got = _lock_now(late, "other3", 1000)
    if isinstance(got, str):
        assert 0 < _grace_ms(got) <= ttl
    text = _log(late)
    assert "by sluice's record sluice:primary-seen" in text, text
    assert "(this sluice is the first)" not in text


def test_cluster_sluice_grants_at_once_and_shows_each_shard(tmp_path):
    """Cluster mode, the same per shard: a sluice that starts in front of a
    new cluster asks each primary of its first slot map (none promoted,
    nothing loaded) and grants a LOCK on every primary at once; PROXY INFO
    has one lock_shard line per primary, the gauge one series each."""
    from test_cluster import key_for_slot, own_cluster_sluice
    with own_cluster_sluice(tmp_path) as (cl, s):
        for port in cl.primaries():
            slot = next(x for x in range(0, 16384, 50) if cl.slot_owner_port(x) == port)
            got = _lock_now(s, key_for_slot(slot, "start:"), 1000)
            assert isinstance(got, bytes) and TOKEN.match(got), (port, got)
        text = s.client().execute_command("PROXY", "INFO", "locks").decode()
        assert "lock_shards:3\r\n" in text, text
        for port in cl.primaries():
            assert re.search(rf"^lock_shard\d:name=127.0.0.1:{port},slots=[0-9-]+,"
                             r"grace_remaining_seconds=0.000,", text, re.M), text
        assert _log(s).count("(first slot map: master_replid") == 3
