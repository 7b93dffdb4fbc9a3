"""conf/grafana-dashboard.json (issue 21): a real Prometheus (Debian's
`prometheus`) scrapes two sluices every second, a standalone one with rules,
users and locks and a cluster one; the test drives traffic that touches
every panel, then runs every PromQL expression of the dashboard through
Prometheus's HTTP API: each must run without error and return data."""

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import redis

from conftest import Sluice, _stop_process
from helpers import SLOW, free_port, wait_until

DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana-dashboard.json"

RULES = """
[limit guard]
match_name = noisy
rate = 5/s
burst = 5

[limit slowdown]
match_name = slow
rate = 20/s
burst = 1
action = delay
max_delay = 2s

[limit watch]
match_name = watched
rate = 1/s
burst = 1
mode = dryrun
"""

USERS = """
[user app]
password = app-pw
commands = +@all
keys = *
"""


def dashboard_exprs():
    """Every target expression, with the dashboard's variables as Grafana
    fills them for "All" over a 1 s scrape."""
    d = json.loads(DASHBOARD.read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            e = t["expr"].replace("$instance", ".*").replace("$__rate_interval", "30s")
            out.append((p["title"], e))
    return out


def prom_query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as f:
        return json.loads(f.read())


class Prometheus:
    def __init__(self, root, targets):
        self.dir = Path(root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        cfg = self.dir / "prometheus.yml"
        lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
                 "scrape_configs:", "  - job_name: sluice", "    static_configs:",
                 "      - targets: [" + ", ".join(f"'127.0.0.1:{t}'" for t in targets) + "]"]
        cfg.write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={self.dir / 'data'}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def ready(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as f:
                return f.status == 200
        except OSError:
            return False

    def targets_up(self, n):
        r = prom_query(self.port, "up == 1")
        return len(r["data"]["result"]) == n

    def stop(self):
        _stop_process(self.proc, 10)
        self.log.close()


def drive_standalone(s, stop):
    """Traffic for the standalone panels until STOP is set."""
    c = s.client(username="app", password="app-pw")
    noisy = s.client(username="app", password="app-pw", client_name="noisy")
    slow = s.client(username="app", password="app-pw", client_name="slow")
    watched = s.client(username="app", password="app-pw", client_name="watched")
    i = 0
    while not stop.is_set():
        c.set(f"k{i % 50}", i)
        c.get(f"k{i % 50}")
        try:
            c.execute_command("NOSUCHCOMMAND")
        except redis.ResponseError:
            pass
        for _ in range(3):
            try:
                noisy.get("x")
            except redis.ResponseError:
                pass
        slow.get("y")
        watched.get("z")
        watched.get("z")
        try:
            redis.Redis(port=s.port, username="app", password="wrong",
                        socket_timeout=5).ping()
        except redis.AuthenticationError:
            pass
        except redis.ResponseError:
            pass
        i += 1
        time.sleep(0.05)


def locks_held(s, stop):
    """A KEEP holder, and waiters that time out behind it."""
    holder = s.client(username="app", password="app-pw")
    assert holder.execute_command("LOCK", "dash:lock", 3000, "KEEP") is not None
    waiter = s.client(username="app", password="app-pw")
    while not stop.is_set():
        waiter.execute_command("LOCK", "dash:lock", 1000, "WAIT", 100)
        waiter.execute_command("LOCK", "dash:other", 1000)
        waiter.execute_command("UNLOCK", "dash:other")
        try:
            waiter.execute_command("RENEW", "dash:none", 1000)   # not held: a failure
        except redis.ResponseError:
            pass
    holder.close()


def drive_cluster(s, stop):
    c = s.client()
    i = 0
    while not stop.is_set():
        c.set(f"c{i % 100}", i)
        c.get(f"c{i % 100}")
        i += 1
        time.sleep(0.01)


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_every_dashboard_expression_returns_data(tmp_path, redis_factory, redis_cluster):
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    srv = redis_factory()
    m1, m2 = free_port(), free_port()
    one = Sluice(tmp_path / "one", srv.port,
                 extra={"metrics_listen": f"127.0.0.1:{m1}", "rules": "rules.ini",
                        "users": "users.ini"})
    (one.dir / "rules.ini").write_text(RULES)
    (one.dir / "users.ini").write_text(USERS)
    two = Sluice(tmp_path / "two", None, cluster_seeds=redis_cluster.seeds,
                 extra={"metrics_listen": f"127.0.0.1:{m2}"})
    prom = None
    stop = threading.Event()
    threads = []
    try:
        one.start()
        two.start()
        prom = Prometheus(tmp_path / "prom", [m1, m2])
        wait_until(prom.ready, 30 * SLOW, msg="prometheus ready")
        wait_until(lambda: prom.targets_up(2), 30 * SLOW, interval=0.5,
                   msg="prometheus scraping both sluices")
        # A backend connection closed under sluice, for the error panels;
        # then wait until sluice serves again before the traffic starts.
        redis.Redis(port=srv.port).client_kill_filter(_type="normal")

        def serves():
            try:
                return one.client(username="app", password="app-pw").set("dash:up", 1)
            except redis.RedisError:
                return False
        wait_until(serves, 10 * SLOW, msg="sluice serving again after the kill")
        for fn, s in ((drive_standalone, one), (locks_held, one), (drive_cluster, two)):
            t = threading.Thread(target=fn, args=(s, stop), daemon=True)
            t.start()
            threads.append(t)
        with one.raw() as c:
            c.call(b"AUTH", b"app", b"app-pw")
            c.call(b"PROXY", b"RELOAD")

        def all_have_data():
            missing = []
            for title, e in exprs:
                r = prom_query(prom.port, e)
                assert r["status"] == "success", (title, e, r)
                if not r["data"]["result"]:
                    missing.append((title, e))
            all_have_data.missing = missing
            return not missing

        try:
            wait_until(all_have_data, 60 * SLOW, interval=1, msg="data for every expression")
        except AssertionError:
            pytest.fail(f"expressions without data: {all_have_data.missing}", pytrace=False)
        # The annotations (primary changes, reloads) run too; the reload
        # above marks one.
        notes = json.loads(DASHBOARD.read_text())["annotations"]["list"]
        assert {n["name"] for n in notes} >= {"Primary changes", "Config reloads"}
        for n in notes:
            r = prom_query(prom.port, n["expr"].replace("$instance", ".*"))
            assert r["status"] == "success", (n["name"], r)
            if n["name"] == "Config reloads":
                assert r["data"]["result"], "the reload is not marked"
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        if prom is not None:
            prom.stop()
        problems = one.stop() + two.stop()
        assert not problems, problems
