"""Large requests in every mode (issue 36): a SET of 5, 50 and 300 MB
through sluice in front of one Redis (`backend =`), a Redis Cluster
(`cluster =`) and a Sentinel-watched primary (`sentinel =`) gets its
reply, and another client on the same shared backend connection goes on
getting answers while the large one flows and after it.

In cluster and Sentinel mode a request keeps a copy of its bytes (for a
redirect or a re-send after a failover); the copy stopped after the first
16 chunks of the request's buffer (about 2 MB), and the backend waited for
the rest forever, with every later request on that connection behind it.

HEAVY: the 300 MB cases (one per mode) hold about 1.5 GB across sluice and
Redis while they run; each deletes its key at the end and its topology is
stopped with the module.
"""

import contextlib
import os
import signal
import threading
import time

import pytest

from conftest import Sluice, _read_log
from cluster_helpers import ClusterRedis
from helpers import SLOW, RawConn, encode_command, wait_until
from sentinel_helpers import SentinelTopology, sentinel_sluice
from test_cluster import cluster_info, migrate_slot, slot_of
from test_read_from import wait_states

MB = 1 << 20
HEAVY_MB = 300
# Keys of one hash tag: in cluster mode the large key and the neighbour's
# keys are on one node, so on its one shared connection (the default
# backend_connections = 1 gives every client of a node the same one).
BIG_KEY = "{bv}big"


class Neighbour(threading.Thread):
    """A client on the same shared connection as the large request: SET and
    GET of a small key of the same node, one after the other, until
    stopped. Counts its answers; records any wrong one."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.answers = 0
        self.wrong = []
        self.stop_ev = threading.Event()

    def run(self):
        n = 0
        try:
            with RawConn(self.port, timeout=120 * SLOW) as c:
                while not self.stop_ev.is_set():
                    c.send(encode_command("SET", "{bv}small", n) + encode_command("GET", "{bv}small"))
                    got = c.read_replies(2)
                    if got != ["OK", str(n).encode()]:
                        self.wrong.append(got)
                    self.answers += 1
                    n += 1
                    time.sleep(0.005)
        except Exception as e:   # noqa: BLE001 (recorded, the test fails on it)
            self.wrong.append(repr(e))

    def finish(self):
        self.stop_ev.set()
        self.join(130 * SLOW)
        assert not self.is_alive(), "the neighbour client hung"


def pattern(size):
    """SIZE bytes that are not all alike (a shifted or cut copy shows)."""
    block = os.urandom(MB)
    return (block * (size // MB + 1))[:size]


def send_big_set(port, value):
    """SET BIG_KEY VALUE on a raw connection; its reply."""
    with RawConn(port, timeout=60 * SLOW) as c:
        c.send(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n" % (len(BIG_KEY), BIG_KEY.encode()) +
               b"$%d\r\n" % len(value))
        c.send(value)
        c.send(b"\r\n")
        return c.read_reply()


def check_big_set(port, node_client, size, read_back):
    """The large SET through sluice on PORT with the neighbour running: both
    answered, the neighbour also after it. NODE_CLIENT: a client of the
    Redis that holds BIG_KEY, to look at the value directly. READ_BACK:
    read the whole value back through sluice too."""
    value = pattern(size)
    nb = Neighbour(port)
    nb.start()
    try:
        wait_until(lambda: nb.answers > 0 or nb.wrong, 30 * SLOW, msg="the neighbour's first answer")
        assert send_big_set(port, value) == "OK"
        at_reply = nb.answers
        wait_until(lambda: nb.answers >= at_reply + 5 or nb.wrong, 60 * SLOW,
                   msg="the neighbour answered after the large request")
    finally:
        nb.finish()
    assert nb.wrong == [], nb.wrong[:3]
    assert node_client.strlen(BIG_KEY) == size
    for off in (0, MB - 3, size // 2 + 7, size - 10):
        assert node_client.getrange(BIG_KEY, off, off + 9) == value[off:off + 10]
    if read_back:
        with RawConn(port, timeout=180 * SLOW) as c:
            assert c.call("GET", BIG_KEY) == value
    node_client.delete(BIG_KEY)


@contextlib.contextmanager
def stopped_after(s):
    """Yield started sluice S; stop it after, failing on its problems."""
    try:
        yield s
    finally:
        problems = s.stop()
        if problems:
            pytest.fail("; ".join(problems) + f"\nlog:\n{_read_log(s.log_path)}", pytrace=False)


@pytest.fixture(scope="module")
def standalone(module_tmp, backend):
    with stopped_after(Sluice(module_tmp / "bv-standalone", backend.port)) as s:
        s.start()
        yield s, backend.client()


@pytest.fixture(scope="module")
def cluster(module_tmp):
    # Primaries only: a replica would hold each value once more.
    cl = ClusterRedis(module_tmp / "bv-cluster", replicas=0)
    try:
        cl.start()
        with stopped_after(Sluice(module_tmp / "bv-csluice", None, cluster_seeds=cl.seeds)) as s:
            s.start()
            wait_until(lambda: cluster_info(s).get("cluster_have_map") == "1", 10 * SLOW,
                       msg="sluice to load the map")
            node = cl.node_by_port(cl.slot_owner_port(slot_of(BIG_KEY)))
            yield s, node.client(), cl
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def sentinel(module_tmp):
    topo = SentinelTopology(module_tmp / "bv-topo", replicas=0, sentinels=1, quorum=1)
    try:
        topo.start()
        with stopped_after(sentinel_sluice(module_tmp / "bv-ssluice", topo, start=False)) as s:
            s.start(ready_timeout=20 * SLOW)
            yield s, topo.primary.client()
    finally:
        topo.stop()


MODES = ["standalone", "cluster", "sentinel"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size_mb", [5, 50])
def test_large_set_answered_and_neighbour_served(request, mode, size_mb):
    s, node = request.getfixturevalue(mode)[:2]
    check_big_set(s.port, node, size_mb * MB, read_back=True)


@pytest.mark.parametrize("mode", MODES)
def test_heavy_300mb_set(request, mode):
    """HEAVY (see the module's docstring): one 300 MB SET per mode."""
    s, node = request.getfixturevalue(mode)[:2]
    check_big_set(s.port, node, HEAVY_MB * MB, read_back=False)


@pytest.mark.parametrize("mode", MODES)
def test_large_requests_on_every_connection_kind(request, mode):
    """5 MB through a transaction (a private connection), a script (the
    scripts' connection) and a pipeline of two on the shared one."""
    s, node = request.getfixturevalue(mode)[:2]
    a, b = pattern(5 * MB), pattern(5 * MB + 1)
    c = s.client(socket_timeout=60 * SLOW)
    try:
        pipe = c.pipeline(transaction=True)
        pipe.set("{bv}tx", a).strlen("{bv}tx")
        assert pipe.execute() == [True, len(a)]
        assert c.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "{bv}lua", b) == b"OK"
        assert node.get("{bv}lua") == b
        pipe = c.pipeline(transaction=False)
        pipe.set("{bv}p1", b).set("{bv}p2", a).get("{bv}p1").get("{bv}p2")
        assert pipe.execute() == [True, True, b, a]
    finally:
        c.delete("{bv}tx", "{bv}lua", "{bv}p1", "{bv}p2")
        c.close()


def test_large_set_follows_moved(cluster):
    """A 5 MB SET that meets MOVED (its slot moved since sluice read the
    map) is sent again, whole, to the new owner."""
    s, _, cl = cluster
    key = "{bvmoved}big"
    slot = slot_of(key)
    src, dst = cl.owner_and_other(slot)
    moved_before = int(cluster_info(s)["moved"])
    migrate_slot(cl, slot, src, dst)
    value = pattern(5 * MB)
    try:
        with RawConn(s.port, timeout=60 * SLOW) as c:
            assert c.call("SET", key, value) == "OK"
            assert c.call("STRLEN", key) == len(value)
        assert int(cluster_info(s)["moved"]) > moved_before, "no MOVED was met"
        with cl.node_by_port(dst).client() as d:
            assert d.get(key) == value
            d.delete(key)
    finally:
        migrate_slot(cl, slot, dst, src)
        cl.wait_ok()


def test_shutdown_bounded_while_a_large_request_cannot_be_written(redis_factory, sluice_factory):
    """A Redis that stopped reading (SIGSTOP) with a 50 MB SET under way:
    SIGTERM ends sluice after shutdown_timeout (5 s by default), not never,
    and the log says what was left unwritten."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    value = pattern(50 * MB)
    writer = None
    with RawConn(s.port, timeout=60 * SLOW) as c:
        assert c.call("PING") == "PONG"
        os.kill(backend.proc.pid, signal.SIGSTOP)
        try:
            writer = threading.Thread(target=lambda: _send_quietly(c, value), daemon=True)
            writer.start()
            time.sleep(1)
            started = time.monotonic()
            problems = s.stop(timeout=60 * SLOW)
            took = time.monotonic() - started
        finally:
            os.kill(backend.proc.pid, signal.SIGCONT)
    writer.join(10 * SLOW)
    assert problems == [], problems
    assert took < 30 * SLOW, f"sluice took {took:.1f} s to stop"
    log = _read_log(s.log_path)
    assert "shutdown_timeout passed with 1 clients still waiting" in log, log
    assert "bytes of requests not yet written to Redis" in log, log


def _send_quietly(c, value):
    """SET BIG_KEY VALUE on raw connection C; its end (sluice exiting) is
    expected."""
    try:
        c.send(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" %
               (len(BIG_KEY), BIG_KEY.encode(), len(value)) + value + b"\r\n")
    except OSError:
        pass


def test_large_read_to_a_replica_in_sentinel_mode(tmp_path):
    """read_from = replica in Sentinel mode: a read with a 5 MB argument
    (SISMEMBER of a 5 MB member) goes to the replica whole and is
    answered; the write before it reached the primary whole."""
    topo = SentinelTopology(tmp_path / "topo", replicas=1, sentinels=1, quorum=1)
    s = None
    try:
        topo.start()
        s = sentinel_sluice(tmp_path / "s", topo, read_from="replica")
        replica = topo.replicas[0]
        wait_states(s, {replica.port: "ok"}, timeout=20)
        member = pattern(5 * MB)
        with RawConn(s.port, timeout=60 * SLOW) as w:
            assert w.call("SADD", "{bv}set", member) == 1
        assert topo.primary.client().execute_command("WAIT", 1, int(10000 * SLOW)) == 1
        wait_states(s, {replica.port: "ok"})   # caught up again after the 5 MB write
        replica.client().config_resetstat()
        # Another client: the writer's own reads stay on the primary a while.
        with RawConn(s.port, timeout=60 * SLOW) as c:
            assert c.call("SISMEMBER", "{bv}set", member) == 1
            assert c.call("SISMEMBER", "{bv}set", member[:-1]) == 0
        stats = replica.client().info("commandstats")
        assert stats.get("cmdstat_sismember", {}).get("calls", 0) == 2
    finally:
        if s is not None:
            problems = s.stop()
            assert problems == [], problems
        topo.stop()
