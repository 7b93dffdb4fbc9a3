"""A real Sentinel topology for the integration tests: a primary, two
replicas and three Sentinels on free loopback ports (Debian's
redis-sentinel, or `redis-server --sentinel`), and sluice configured with
`sentinel =` in front of it.

SentinelTopology.start() returns once every Sentinel knows the master
and both replicas are in sync; stop() kills everything. Sentinel rewrites
its config file: each is written fresh (writable) in the test's tmp dir.
"""

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import RedisServer, Sluice, _read_log
from helpers import SLOW, free_port, wait_until

MASTER = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


def sentinel_argv(conf):
    """How to run a Sentinel on CONF: redis-sentinel when installed, else
    redis-server in Sentinel mode (the same binary on Debian)."""
    exe = shutil.which("redis-sentinel")
    if exe is not None:
        return [exe, str(conf)]
    return ["redis-server", str(conf), "--sentinel"]


class SentinelProc:
    def __init__(self, root, primary_port, port=None, quorum=2, master=MASTER,
                 down_after_ms=DOWN_AFTER_MS, failover_timeout_ms=FAILOVER_TIMEOUT_MS):
        self.port = port or free_port()
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.dir = Path(root) / f"sentinel{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "sentinel.conf"
        self.log_path = self.dir / "sentinel.log"
        self.primary_port = primary_port
        self.quorum = quorum
        self.master = master
        self.proc = None
        self._logf = None
        self.write_conf()

    def write_conf(self):
        lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.dir}",
                 "daemonize no"]
        if self.master is not None:
            lines += [
                f"sentinel monitor {self.master} 127.0.0.1 {self.primary_port} {self.quorum}",
                f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}",
                f"sentinel failover-timeout {self.master} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {self.master} 2",
            ]
        self.conf.write_text("\n".join(lines) + "\n")
        self.conf.chmod(0o644)

    def start(self):
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(sentinel_argv(self.conf), stdout=self._logf,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_until(self._answers, 10 * SLOW, msg=f"sentinel {self.port} answers PING")
        return self

    def _answers(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"sentinel exited ({self.proc.returncode}):\n"
                               + _read_log(self.log_path))
        try:
            return self.client(socket_timeout=1).ping()
        except redis.RedisError:
            return False

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        if self._logf:
            self._logf.close()
            self._logf = None

    def client(self, **kw):
        kw.setdefault("socket_timeout", 5 * SLOW)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def master_addr(self):
        r = self.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
        return None if r is None else f"{r[0].decode()}:{r[1].decode()}"


class SentinelTopology:
    """A primary, REPLICAS replicas and SENTINELS Sentinels under ROOT.
    REDIS_ARGS: more redis-server arguments for every data node; SENTINEL_KW:
    down_after_ms, failover_timeout_ms of the Sentinels."""

    def __init__(self, root, replicas=2, sentinels=3, redis_args=(), **sentinel_kw):
        self.root = Path(root)
        self.primary = RedisServer(self.root / "primary", extra_args=redis_args)
        self.replicas = [RedisServer(self.root / f"replica{i}", extra_args=redis_args)
                         for i in range(replicas)]
        self.sentinels = [SentinelProc(self.root, self.primary.port, **sentinel_kw)
                          for _ in range(sentinels)]

    @property
    def nodes(self):
        return [self.primary] + self.replicas

    def node_by_port(self, port):
        return next(n for n in self.nodes if n.port == port)

    def start(self):
        self.primary.start()
        for r in self.replicas:
            r.start()
            r.client().execute_command("REPLICAOF", "127.0.0.1", str(self.primary.port))
        wait_until(self._replicas_synced, 20 * SLOW, msg="replicas in sync")
        for s in self.sentinels:
            s.start()
        wait_until(self._sentinels_ready, 60 * SLOW, msg="sentinels see the replicas and peers")
        return self

    def _replicas_synced(self):
        info = self.primary.client().info("replication")
        return info.get("connected_slaves") == len(self.replicas) and all(
            info.get(f"slave{i}", {}).get("state") == "online"
            for i in range(len(self.replicas)))

    def _sentinels_ready(self):
        for s in self.sentinels:
            m = s.client().execute_command("SENTINEL", "MASTER", MASTER)
            d = {m[i].decode(): m[i + 1] for i in range(0, len(m), 2)}
            if int(d["num-slaves"]) < len(self.replicas) or \
                    int(d["num-other-sentinels"]) < len(self.sentinels) - 1:
                return False
        return True

    def current_primary_port(self):
        """The primary's port as the Sentinels agree on it (None: they do not)."""
        addrs = {s.master_addr() for s in self.sentinels if s.proc is not None}
        if len(addrs) != 1:
            return None
        return int(addrs.pop().rsplit(":", 1)[1])

    def sentinel_list(self):
        return " ".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def stop(self):
        for s in self.sentinels:
            s.stop()
        for n in self.nodes:
            n.stop()


def sentinel_sluice(tmpdir, topo, master=MASTER, start=True, sentinels=None, listen_ports=None,
                    **extra):
    """A sluice in Sentinel mode in front of TOPO (its Sentinels, or the
    `sentinel =` value SENTINELS), on LISTEN_PORTS (default: a free one).
    EXTRA: more [proxy] keys."""
    s = Sluice(tmpdir, 0, listen_ports=listen_ports, extra=extra)
    text = s.config_path.read_text().replace(
        "backend = 127.0.0.1:0\n",
        f"sentinel = {sentinels or topo.sentinel_list()}\nsentinel_master = {master}\n")
    s.config_path.write_text(text)
    if start:
        s.start(ready_timeout=20 * SLOW)
    return s


def sluice_check(binary, config_path):
    """`sluice -t -c CONFIG`: (exit status, stderr text)."""
    p = subprocess.run([binary, "-t", "-c", str(config_path)], capture_output=True,
                       text=True, timeout=30 * SLOW)
    return p.returncode, p.stderr


def wait_primary_switch(topo, old_port, timeout=30):
    """Wait until every live Sentinel names a primary other than OLD_PORT;
    returns its port."""
    holder = {}

    def switched():
        p = topo.current_primary_port()
        if p is not None and p != old_port:
            holder["port"] = p
            return True
        return False

    wait_until(switched, timeout * SLOW, interval=0.05, msg="sentinels switched the master")
    return holder["port"]


def monotonic_ms():
    return time.monotonic() * 1000.0


@pytest.fixture
def sentinel_sluices(tmp_path):
    """Make sluices in Sentinel mode (sentinel_sluice) for one test, each
    stopped at its end; a problem on stopping fails the test with its log."""
    started = []

    def make(topology, **kw):
        s = sentinel_sluice(tmp_path / f"sluice{len(started)}", topology, **kw)
        started.append(s)
        return s

    yield make
    failures = [f"{p}\nlog:\n{_read_log(s.log_path)}" for s in started for p in s.stop()]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)
