"""read_from: read-only commands go to replicas (README "Reading from replicas").

A real primary with two replicas (redis-server --replicaof) on free
loopback ports, sluice in front with `backend =` the primary and
`replicas =` the replicas: in standalone mode sluice reads only from the
replicas listed there (issue 30: a replica the primary's INFO announces
may be forged by any user with +replconf +psync). Where a command ran is
read from each server's INFO commandstats, reset (CONFIG RESETSTAT) right
before the requests a test looks at. Cluster mode uses the redis_cluster
fixture (3 primaries, each with a replica).
"""

import os
import re
import signal
import subprocess
import time

import pytest

from conftest import DIRECT, require_sluice_bin
from helpers import SLOW, Err, RawConn, free_port, wait_until

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own routing")

NO_REPLICA = "ERR no replica available (read_from replica)"


# --------------------------------------------------------------------------
# helpers


def calls(srv, cmd):
    """How many times SRV ran CMD since its last CONFIG RESETSTAT."""
    stats = srv.client().info("commandstats")
    return stats.get(f"cmdstat_{cmd}", {}).get("calls", 0)


def reset_stats(*servers):
    for srv in servers:
        srv.client().config_resetstat()


def start_replicated(redis_factory, replicas=2):
    """A primary and REPLICAS replicas, every link up."""
    primary = redis_factory()
    reps = [redis_factory("--replicaof", "127.0.0.1", str(primary.port))
            for _ in range(replicas)]

    def linked():
        info = primary.client().info("replication")
        return info["connected_slaves"] == replicas and all(
            r.client().info("replication").get("master_link_status") == "up" for r in reps)
    wait_until(linked, 20 * SLOW, msg="replicas linked to the primary")
    return primary, reps


def listed(*reps, ports=()):
    """The `replicas =` value naming REPS (and PORTS)."""
    return " ".join([f"127.0.0.1:{r.port}" for r in reps] + [f"127.0.0.1:{p}" for p in ports])


def replica_states(s, auth=()):
    """PROXY INFO's replicas: {port: state}."""
    info = s.info(auth)
    out = {}
    for k, v in info.items():
        if k.startswith("replica") and k[7:].isdigit():
            fields = dict(f.split("=", 1) for f in v.split(","))
            out[int(fields["addr"].rsplit(":", 1)[1])] = fields["state"]
    return out


def wait_states(s, want, auth=(), timeout=10):
    """Wait until PROXY INFO shows exactly WANT ({port: state})."""
    wait_until(lambda: replica_states(s, auth) == want, timeout * SLOW,
               msg=f"replicas {want} (now {replica_states(s, auth)})")


def replicate(primary, reps, **kv):
    """Write KV on the primary directly and wait until every replica has it."""
    c = primary.client()
    for k, v in kv.items():
        c.set(k, v)
    assert c.execute_command("WAIT", len(reps), int(5000 * SLOW)) == len(reps)


def get_from_clients(s, key, n):
    """GET KEY through sluice on N connections of their own (several
    clients: they spread over the replicas); the replies."""
    out = []
    for _ in range(n):
        with RawConn(s.port, timeout=5 * SLOW) as c:
            out.append(c.call(b"GET", key))
    return out


# --------------------------------------------------------------------------
# standalone


def test_replica_reads_go_to_replicas_writes_to_primary(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory)
    s = sluice_factory(primary.port, read_from="replica", replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    assert get_from_clients(s, b"k", 8) == [b"v"] * 8
    assert calls(primary, "get") == 0
    assert calls(reps[0], "get") + calls(reps[1], "get") == 8
    assert calls(reps[0], "get") > 0 and calls(reps[1], "get") > 0   # both read from
    with s.raw() as c:
        assert c.call(b"SET", b"w", b"1") == "OK"
    assert calls(primary, "set") == 1
    info = s.info()
    assert info["read_from"] == "replica"
    assert info["replicas"] == "2"
    assert sum(int(v.split("reads=")[1]) for k, v in info.items()
               if k.startswith("replica") and k[7:].isdigit()) == 8


def test_replicas_in_metrics_and_unreachable_one_logged_once(redis_factory, sluice_factory):
    """A replica that announces an address sluice cannot reach (here a
    port nobody listens on) is skipped, with one warning; the others are
    read from and show in /metrics as role="replica"."""
    from test_metrics import scrape, value
    primary = redis_factory()
    good = redis_factory("--replicaof", "127.0.0.1", str(primary.port))
    bad_port = free_port()
    bad = redis_factory("--replicaof", "127.0.0.1", str(primary.port),
                        "--replica-announce-port", str(bad_port))
    wait_until(lambda: primary.client().info("replication")["connected_slaves"] == 2 and all(
        r.client().info("replication")["master_link_status"] == "up" for r in (good, bad)),
        20 * SLOW, msg="replicas linked")
    mport = free_port()
    s = sluice_factory(primary.port, read_from="replica", metrics_listen=f"127.0.0.1:{mport}",
                       replicas=listed(good, ports=[bad_port]))
    wait_states(s, {good.port: "ok", bad_port: "down"})
    replicate(primary, [good, bad], k="v")
    reset_stats(primary, good, bad)
    assert get_from_clients(s, b"k", 4) == [b"v"] * 4
    assert calls(good, "get") == 4 and calls(bad, "get") == 0
    body = scrape(mport)
    assert value(body, "sluice_backend_up", backend=f"127.0.0.1:{good.port}", role="replica") == 1
    assert value(body, "sluice_replica_reads_total", backend=f"127.0.0.1:{good.port}") == 4
    assert value(body, "sluice_backend_up", backend=f"127.0.0.1:{primary.port}",
                 role="primary") == 1
    time.sleep(3 * SLOW)   # well past the first warning: no second one
    warned = [line for line in s.log_path.read_text().splitlines()
              if f"127.0.0.1:{bad_port}" in line and " # " in line]   # warnings
    assert len(warned) == 1 and "reads skip it" in warned[0], warned


def test_read_your_writes(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory)
    s = sluice_factory(primary.port, read_from="replica", replica_read_after_write_ms=1000,
                       replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    reset_stats(primary, *reps)
    with s.raw() as c:
        for i in range(20):
            c.send_command(b"SET", b"ryw", str(i).encode())
            c.send_command(b"GET", b"ryw")
            assert c.read_replies(2) == ["OK", str(i).encode()]
        assert calls(primary, "get") == 20
        assert calls(reps[0], "get") + calls(reps[1], "get") == 0
        # Once replica_read_after_write_ms has passed, reads leave the primary.
        time.sleep(1.2)
        wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
        assert c.call(b"GET", b"ryw") == b"19"
    assert calls(primary, "get") == 20
    assert calls(reps[0], "get") + calls(reps[1], "get") == 1


def test_lagging_replica_is_skipped(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory)
    s = sluice_factory(primary.port, read_from="replica", replica_max_lag_ms=1000,
                       replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    # A replica that hangs (as under DEBUG SLEEP, or a long fork) applies
    # nothing and answers nothing: it falls behind.
    os.kill(reps[0].proc.pid, signal.SIGSTOP)
    try:
        primary.client().set("moved", "on")
        wait_states(s, {reps[0].port: "lagging", reps[1].port: "ok"}, timeout=3)
        start = time.monotonic()
        assert get_from_clients(s, b"k", 6) == [b"v"] * 6
        assert time.monotonic() - start < 2 * SLOW   # none waited for the hung one
    finally:
        os.kill(reps[0].proc.pid, signal.SIGCONT)
    assert calls(reps[1], "get") == 6
    assert calls(reps[0], "get") == 0
    assert calls(primary, "get") == 0
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})   # caught up: read again


def test_killed_replica_is_skipped(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory)
    s = sluice_factory(primary.port, read_from="replica", replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    replicate(primary, reps, k="v")
    reps[0].stop()
    # The primary stops naming it: sluice forgets it (or shows it down).
    wait_until(lambda: replica_states(s).get(reps[0].port, "gone") in ("gone", "down"),
               10 * SLOW, msg="the killed replica skipped")
    reset_stats(primary, reps[1])
    assert get_from_clients(s, b"k", 6) == [b"v"] * 6
    assert calls(reps[1], "get") == 6
    assert calls(primary, "get") == 0


def test_prefer_replica_falls_back_to_primary(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory, replicas=1)
    s = sluice_factory(primary.port, read_from="prefer-replica", replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok"})
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    assert get_from_clients(s, b"k", 3) == [b"v"] * 3
    assert calls(reps[0], "get") == 3
    reps[0].stop()
    wait_until(lambda: replica_states(s).get(reps[0].port, "gone") in ("gone", "down"),
               10 * SLOW, msg="the killed replica skipped")
    reset_stats(primary)
    assert get_from_clients(s, b"k", 3) == [b"v"] * 3
    assert calls(primary, "get") == 3


def test_replica_without_replicas_is_an_error(redis_factory, sluice_factory):
    primary = redis_factory()
    primary.client().set("k", "v")
    s = sluice_factory(primary.port, read_from="replica")
    time.sleep(0.6)   # a few polls: the primary names no replica
    with s.raw() as c:
        assert c.call(b"GET", b"k") == Err(NO_REPLICA)
        assert c.call(b"SET", b"k", b"w") == "OK"   # writes still go to the primary
        assert c.call(b"DBSIZE") == 1                # keyless reads too
    assert replica_states(s) == {}


def test_user_read_from_overrides_proxy(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory, replicas=1)
    users = (
        "[user default]\nnopass = yes\ncommands = +@all\nkeys = *\nchannels = *\n\n"
        "[user alice]\npassword = alicepw\ncommands = +@all\nkeys = *\nread_from = primary\n\n"
        "[user bob]\npassword = bobpw\ncommands = +@all\nkeys = *\n"
    )
    s = sluice_factory(primary.port, start=False, read_from="replica", users="users.ini",
                       replicas=listed(*reps))
    (s.dir / "users.ini").write_text(users)
    s.start()
    wait_states(s, {reps[0].port: "ok"})
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    for user, pw in ((b"alice", b"alicepw"), (b"bob", b"bobpw")):
        with s.raw() as c:
            assert c.call(b"AUTH", user, pw) == "OK"
            assert c.call(b"GET", b"k") == b"v"
    assert calls(primary, "get") == 1    # alice's
    assert calls(reps[0], "get") == 1    # bob's


def test_transactions_scripts_and_keyless_reads_use_the_primary(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory, replicas=1)
    s = sluice_factory(primary.port, read_from="replica", replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok"})
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    with s.raw() as c:
        assert c.call(b"EVAL_RO", b"return redis.call('GET', KEYS[1])", b"1", b"k") == b"v"
        assert c.call(b"DBSIZE") == 1
    with s.raw() as c:
        assert c.call(b"MULTI") == "OK"
        assert c.call(b"GET", b"k") == "QUEUED"
        assert c.call(b"EXEC") == [b"v"]
    assert calls(reps[0], "get") == 0 and calls(reps[0], "eval_ro") == 0
    assert calls(reps[0], "dbsize") == 0
    # The script's GET counts as one too: 2.
    assert calls(primary, "get") == 2 and calls(primary, "eval_ro") == 1
    # Locks: their scripts run on the primary, even right after a read.
    reset_stats(primary, *reps)
    with s.raw() as c:   # a new client: no write of its own yet
        assert c.call(b"GET", b"k") == b"v"                 # a replica's
        token = c.call(b"LOCK", b"lk", b"10000")
        assert isinstance(token, bytes)
        assert c.call(b"UNLOCK", b"lk") == 0
    assert calls(reps[0], "get") == 1
    assert calls(primary, "evalsha") == 2 and calls(reps[0], "evalsha") == 0


def test_read_from_is_live(redis_factory, sluice_factory):
    primary, reps = start_replicated(redis_factory, replicas=1)
    s = sluice_factory(primary.port, replicas=listed(*reps))   # a restart key; read_from is live
    replicate(primary, reps, k="v")
    reset_stats(primary, *reps)
    assert get_from_clients(s, b"k", 2) == [b"v"] * 2
    assert calls(primary, "get") == 2 and calls(reps[0], "get") == 0
    text = s.config_path.read_text() + "read_from = replica\n"
    s.config_path.write_text(text)
    with s.raw() as c:
        assert c.call(b"PROXY", b"RELOAD") == "OK"
    wait_states(s, {reps[0].port: "ok"})
    assert get_from_clients(s, b"k", 2) == [b"v"] * 2
    assert calls(reps[0], "get") == 2


# --------------------------------------------------------------------------
# cluster


def test_cluster_reads_go_to_replicas(redis_cluster, sluice_factory):
    s = sluice_factory(0, start=False, read_from="replica", cluster_refresh_interval=500)
    text = s.config_path.read_text().replace("backend = 127.0.0.1:0",
                                             f"cluster = {redis_cluster.seeds}")
    s.config_path.write_text(text)
    s.start()
    keys = [f"key{i}".encode() for i in range(30)]
    with s.raw() as c:
        for k in keys:
            assert c.call(b"SET", k, k) == "OK"
    roles = {n.port: n.client().info("replication")["role"] for n in redis_cluster.nodes}
    replicas = {p for p, r in roles.items() if r == "slave"}
    primaries = {p for p, r in roles.items() if r == "master"}
    assert len(replicas) == 3
    by_port = {n.port: n for n in redis_cluster.nodes}
    # A new cluster's replicas sync after repl-diskless-sync-delay, and
    # CLUSTER SLOTS names a replica once it has data.
    wait_until(lambda: all(by_port[p].client().info("replication")["master_link_status"] == "up"
                           for p in replicas), 30 * SLOW, msg="the cluster's replicas linked")
    wait_states(s, {p: "ok" for p in replicas}, timeout=30)
    for n in redis_cluster.nodes:
        n.client().config_resetstat()
    for k in keys:
        with RawConn(s.port, timeout=5 * SLOW) as c:
            assert c.call(b"GET", k) == k
    assert sum(calls(by_port[p], "get") for p in primaries) == 0
    assert sum(calls(by_port[p], "get") for p in replicas) == len(keys)
    with s.raw() as c:   # no redirection was needed: READONLY on those connections
        assert "moved:0" in c.call(b"PROXY", b"CLUSTER").decode()


# --------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("where", ["proxy", "users"])
def test_bad_read_from_is_refused(tmp_path, where):
    users = tmp_path / "users.ini"
    users.write_text("[user app]\nnopass = yes\n"
                     + ("read_from = replicas\n" if where == "users" else ""))
    cfg = tmp_path / "sluice.ini"
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\nusers = users.ini\n"
                   + ("read_from = secondary\n" if where == "proxy" else ""))
    p = subprocess.run([require_sluice_bin(), "-t", "-c", str(cfg)], capture_output=True,
                       timeout=10 * SLOW, stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    line = "sluice.ini:4: read_from" if where == "proxy" else "users.ini:3: read_from"
    assert line.encode() in p.stderr, p.stderr
    assert b"must be primary, prefer-replica or replica" in p.stderr


def test_proxy_node_maintenance_takes_a_replica_out_of_reads(redis_factory, sluice_factory):
    """PROXY NODE host:port MAINTENANCE: no read goes to that replica (the
    other takes them all) until ACTIVE; PROXY INFO says state=maintenance;
    an address that is no replica sluice reads from is refused; audited."""
    primary, reps = start_replicated(redis_factory)
    s = sluice_factory(primary.port, read_from="replica", replicas=listed(*reps))
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    replicate(primary, reps, k="v")
    out = f"127.0.0.1:{reps[0].port}"
    with s.raw() as c:
        assert c.call("PROXY", "NODE", out, "MAINTENANCE") == "OK"
        assert c.call("PROXY", "NODE", f"127.0.0.1:{primary.port}", "MAINTENANCE") == Err(
            f"ERR no replica 127.0.0.1:{primary.port} among those sluice reads from "
            "(PROXY INFO replication lists them)")
        assert c.call("PROXY", "NODE", out, "SOON") == Err(
            "ERR syntax error: PROXY NODE host:port MAINTENANCE|ACTIVE")
    wait_states(s, {reps[0].port: "maintenance", reps[1].port: "ok"})
    reset_stats(primary, *reps)
    assert get_from_clients(s, b"k", 8) == [b"v"] * 8
    assert calls(reps[0], "get") == 0 and calls(reps[1], "get") == 8
    with s.raw() as c:
        assert c.call("PROXY", "NODE", out, "ACTIVE") == "OK"
    wait_states(s, {reps[0].port: "ok", reps[1].port: "ok"})
    reset_stats(primary, *reps)
    assert get_from_clients(s, b"k", 8) == [b"v"] * 8
    assert calls(reps[0], "get") > 0
    assert re.search(rf"PROXY NODE {re.escape(out)} MAINTENANCE by user 'default' from "
                     r"127\.0\.0\.1:\d+ \(client \d+\): no read goes there until ACTIVE",
                     s.log_path.read_text())
