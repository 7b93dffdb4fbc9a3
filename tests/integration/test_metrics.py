"""Prometheus metrics, health and readiness (metrics_listen), and PROXY
INFO's commandstats/latencystats (issue 21).

A real Prometheus (Debian's package) scrapes sluice every second; the tests
ask its HTTP API for the traffic they sent. promtool checks the text.
Every test starts its own redis-server and sluice (redis_factory,
sluice_factory), except the cluster one (the session's redis_cluster)."""

from http.client import HTTPConnection
import json
import re
import signal
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import _read_log, _stop_process, parse_info
from helpers import SLOW, Err, RawConn, encode_command, free_port, wait_until


# --------------------------------------------------------------------------
# helpers


def hreq(port, path, method="GET", timeout=5 * SLOW):
    """(status, headers dict lower-cased, body str) of one HTTP request."""
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def start_metrics_sluice(redis_factory, sluice_factory, rules=None, srv=None,
                         redis_args=(), **extra):
    """A redis-server (SRV, or a new one) and a sluice with metrics_listen
    on a free port (and RULES as its rule file): (srv, sluice, http port)."""
    srv = srv or redis_factory(*redis_args)
    mport = free_port()
    if rules is not None:
        extra["rules"] = "rules.ini"
    s = sluice_factory(srv.port, start=False, metrics_listen=f"127.0.0.1:{mport}", **extra)
    if rules is not None:
        (s.dir / "rules.ini").write_text(rules)
    s.start()
    return srv, s, mport


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text):
    """[(name, {label: value}, float)] of every sample line of TEXT."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(LABEL.findall(m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4))))
    return out


def value(text, name, **labels):
    """The sample NAME with exactly LABELS in TEXT, or None."""
    for n, ls, v in samples(text):
        if n == name and ls == labels:
            return v
    return None


def scrape(mport):
    status, headers, body = hreq(mport, "/metrics")
    assert status == 200, (status, body)
    return body


class Prometheus:
    """A prometheus server scraping TARGET ("host:port") every second,
    its data in DIR; stopped by stop()."""

    def __init__(self, tmpdir, target):
        self.dir = tmpdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = self.dir / "prometheus.log"
        (self.dir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: sluice\n    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.proc = None

    def start(self):
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={self.dir / 'data'}", "--log.level=warn"],
            stdout=self._logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def ready():
            assert self.proc.poll() is None, "prometheus exited:\n" + _read_log(self.log_path)
            try:
                return hreq(self.port, "/-/ready", timeout=2)[0] == 200
            except OSError:
                return False
        wait_until(ready, 30 * SLOW, msg="prometheus to be ready")
        return self

    def query(self, expr):
        """The result vector of the instant query EXPR."""
        status, _, body = hreq(self.port, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        reply = json.loads(body)
        assert status == 200 and reply["status"] == "success", (expr, body)
        return reply["data"]["result"]

    def scalar(self, expr):
        """The value of EXPR's single series, or None when it has none."""
        res = self.query(expr)
        assert len(res) <= 1, (expr, res)
        return float(res[0]["value"][1]) if res else None

    def stop(self):
        if self.proc is not None:
            _stop_process(self.proc, 10)
            self.proc = None
            self._logf.close()


@pytest.fixture
def prometheus_for(tmp_path):
    started = []

    def make(mport):
        p = Prometheus(tmp_path / f"prometheus{len(started)}", f"127.0.0.1:{mport}")
        started.append(p)
        return p.start()

    yield make
    for p in started:
        p.stop()


def pipeline(port, commands, timeout=10 * SLOW):
    """Send COMMANDS (tuples) pipelined on one connection; their replies."""
    with RawConn(port, timeout=timeout) as c:
        c.send(b"".join(encode_command(*cmd) for cmd in commands))
        return [c.read_reply() for _ in commands]


# --------------------------------------------------------------------------
# a real Prometheus


def test_prometheus_scrapes_the_traffic_sent(redis_factory, sluice_factory, prometheus_for):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, rules="""
[limit few-sets]
commands = SET
rate = 1/h
burst = 5
per = rule
""")
    prom = prometheus_for(mport)
    replies = pipeline(s.port, [("GET", f"k{i}") for i in range(137)] +
                       [("SET", "k", "v") for _ in range(12)] + [("NOSUCHCMD",)])
    assert replies.count(None) == 137
    assert sum(isinstance(r, Err) and r.startswith("THROTTLED") for r in replies) == 7
    expected = {
        'sluice_commands_total{cmd="get"}': 137,
        'sluice_commands_total{cmd="set"}': 12,
        'sluice_commands_rejected_total{cmd="set",reason="throttled"}': 7,
        'sluice_commands_failed_total{cmd="other"}': 1,
        'sluice_ratelimit_decisions_total{rule="few-sets",decision="admitted"}': 5,
        'sluice_ratelimit_decisions_total{rule="few-sets",decision="rejected"}': 7,
        'sluice_command_duration_seconds_count{cmd="get"}': 137,
        'sluice_backend_up': 1,
        'sluice_build_info{version=~".+"}': 1,
    }

    def seen():
        return all(prom.scalar(q) == v for q, v in expected.items())
    wait_until(seen, 15 * SLOW, interval=0.5,
               msg="Prometheus to hold the traffic sent: " +
                   ", ".join(f"{q}={prom.scalar(q)}" for q in expected))
    # PromQL over the histograms works too (on the counts so far: a rate()
    # would need two scrapes of the new series).
    res = prom.query('histogram_quantile(0.99, sum by (le) (sluice_command_duration_seconds_bucket{cmd="get"}))')
    assert res and 0 < float(res[0]["value"][1]) <= 10, res
    assert prom.scalar('sum(sluice_backend_requests_total)') >= 137 + 5 + 1


def test_promtool_accepts_metrics(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, rules="""
[limit d]
commands = GET
rate = 1000/s
action = delay
max_delay = 1s
""")
    pipeline(s.port, [("SET", "a", "1"), ("GET", "a"), ("LOCK", "l", "1000"), ("NOPE",),
                      ("PROXY", "PING")])
    status, headers, body = hreq(mport, "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    check = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=30)
    assert check.returncode == 0, (check.stdout + check.stderr).decode() + "\n" + body
    for family in ("build_info", "start_time_seconds", "config_reloads_total",
                   "connected_clients", "connections_received_total",
                   "rejected_connections_total", "auth_failures_total", "input_bytes_total",
                   "output_bytes_total", "commands_total", "commands_failed_total",
                   "commands_rejected_total", "command_duration_seconds", "backend_up",
                   "backend_connections", "backend_requests_total", "backend_errors_total",
                   "backend_request_duration_seconds", "cluster_redirections_total",
                   "cluster_slot_map_refreshes_total", "ratelimit_decisions_total",
                   "ratelimit_delay_seconds", "lock_operations_total", "lock_wait_seconds",
                   "lock_keep_active", "slowlog_length"):
        assert f"# HELP sluice_{family} " in body and f"# TYPE sluice_{family} " in body, family
    assert value(body, "sluice_lock_operations_total", op="lock", result="ok") == 1
    assert value(body, "sluice_commands_total", cmd="proxy") >= 1
    assert value(body, "sluice_commands_total", cmd="lock") == 1
    assert value(body, "sluice_ratelimit_decisions_total", rule="d", decision="admitted") == 1


def test_counters_add_up(redis_factory, sluice_factory):
    """Requests sent for a rule = admitted + rejected + delayed; each
    histogram's _count is its +Inf bucket and its buckets never decrease."""
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, rules="""
[limit slow-incr]
commands = INCR
rate = 20/s
burst = 5
per = rule
action = delay
max_delay = 75ms
""")
    # A's sixth INCR puts the bucket in debt and A waits; B's, framed
    # meanwhile, would wait more than max_delay: refused. Every decision
    # is counted once, in one of the three.
    per_client = 20
    sent = 2 * per_client
    with RawConn(s.port, timeout=20 * SLOW) as a, RawConn(s.port, timeout=20 * SLOW) as b:
        a.send(b"".join(encode_command("INCR", "n") for _ in range(per_client)))
        b.send(b"".join(encode_command("INCR", "n") for _ in range(per_client)))
        replies = [a.read_reply() for _ in range(per_client)] + \
                  [b.read_reply() for _ in range(per_client)]
    assert all(isinstance(r, int) or (isinstance(r, Err) and r.startswith("THROTTLED"))
               for r in replies), replies
    body = scrape(mport)
    d = {k: value(body, "sluice_ratelimit_decisions_total", rule="slow-incr", decision=k)
         for k in ("admitted", "rejected", "delayed", "dryrun")}
    assert d["admitted"] + d["rejected"] + d["delayed"] == sent, d
    assert d["delayed"] > 0 and d["rejected"] > 0 and d["dryrun"] == 0, d
    ok = sum(isinstance(r, int) for r in replies)
    assert d["admitted"] + d["delayed"] == ok
    assert value(body, "sluice_ratelimit_delay_seconds_count", rule="slow-incr") == d["delayed"]
    assert value(body, "sluice_commands_total", cmd="incr") == sent
    assert value(body, "sluice_commands_rejected_total", cmd="incr",
                 reason="throttled") == d["rejected"]
    # Every histogram: buckets cumulative, +Inf = _count.
    buckets = {}
    counts = {}
    for name, labels, v in samples(body):
        if name.endswith("_bucket"):
            key = (name[:-7], tuple(sorted((k, x) for k, x in labels.items() if k != "le")))
            buckets.setdefault(key, []).append((labels["le"], v))
        elif name.endswith("_count"):
            counts[(name[:-6], tuple(sorted(labels.items())))] = v
    assert buckets
    for key, bs in buckets.items():
        assert len(bs) >= 13 and bs[0][0] == "0.0001" and bs[-2][0] == "10", bs
        assert bs[-1][0] == "+Inf"
        assert [v for _, v in bs] == sorted(v for _, v in bs), (key, bs)
        assert counts[key] == bs[-1][1], (key, counts[key], bs[-1])


def test_unknown_command_names_stay_one_series(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory)
    before = len([1 for n, _, _ in samples(scrape(mport)) if n == "sluice_commands_total"])
    for start in range(0, 2000, 500):
        replies = pipeline(s.port, [(f"nosuch{i}",) for i in range(start, start + 500)])
        assert all(isinstance(r, Err) for r in replies)
    body = scrape(mport)
    series = [ls for n, ls, _ in samples(body) if n == "sluice_commands_total"]
    assert len(series) <= before + 2, series   # "other" and at most the asking one
    assert value(body, "sluice_commands_total", cmd="other") == 2000
    assert value(body, "sluice_commands_failed_total", cmd="other") == 2000
    assert len(body) < 200_000


# --------------------------------------------------------------------------
# health and readiness


def test_readyz_follows_the_backend(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory)
    wait_until(lambda: hreq(mport, "/readyz")[0] == 200, 5 * SLOW, msg="ready at start")
    backend = f"127.0.0.1:{srv.port}"
    assert value(scrape(mport), "sluice_backend_up", backend=backend, role="primary") == 1
    srv.stop()
    t0 = time.monotonic()
    wait_until(lambda: hreq(mport, "/readyz")[0] == 503, 2 * SLOW, interval=0.02,
               msg="/readyz 503 within 2 s of Redis going")
    assert time.monotonic() - t0 < 2 * SLOW
    status, _, body = hreq(mport, "/readyz")
    assert status == 503 and backend in body and "not connected" in body, body
    assert value(scrape(mport), "sluice_backend_up", backend=backend, role="primary") == 0
    assert hreq(mport, "/healthz")[0] == 200
    assert value(scrape(mport), "sluice_backend_errors_total", backend=backend, kind="closed") >= 1
    srv.start()
    wait_until(lambda: hreq(mport, "/readyz")[0] == 200, 10 * SLOW,
               msg="/readyz 200 again after Redis came back")
    assert value(scrape(mport), "sluice_backend_up", backend=backend, role="primary") == 1


def test_wrong_backend_password_is_not_ready(redis_factory, sluice_factory):
    """Redis refuses sluice's login: state=auth_failed, backend_up 0,
    /readyz 503, and one log line with Redis's words, however many
    connections try."""
    srv = redis_factory()
    with srv.client() as c:
        c.config_set("requirepass", "right")
    _, s, mport = start_metrics_sluice(redis_factory, sluice_factory, srv=srv,
                                       backend_password="wrong")
    backend = f"127.0.0.1:{srv.port}"
    wait_until(lambda: "refused" in hreq(mport, "/readyz")[2], 5 * SLOW, msg="readyz to say why")
    status, _, body = hreq(mport, "/readyz")
    assert status == 503 and "refused sluice's login" in body, body
    # More connections log in (private ones, made on demand): still one line.
    for _ in range(3):
        with RawConn(s.port) as c:
            assert c.call("AUTH", "wrong") == "OK"
            c.call("SELECT", "1")
    info = s.info(auth=("wrong",))
    assert "state=auth_failed" in info["backend_0"], info["backend_0"]
    body = scrape(mport)
    assert value(body, "sluice_backend_up", backend=backend, role="unknown") == 0
    assert value(body, "sluice_backend_errors_total", backend=backend, kind="auth") >= 3
    log = _read_log(s.log_path)
    lines = [ln for ln in log.splitlines() if "refused sluice's login" in ln]
    assert len(lines) == 1, log
    assert "WRONGPASS" in lines[0], lines


def test_refused_login_shows_in_proxy_info_and_is_logged_once(redis_factory, sluice_factory):
    """Without metrics_listen too: the backend connection Redis refused
    sluice's login is auth_failed, not up, and the log says so once with
    Redis's words, not once per connection that tries."""
    srv = redis_factory()
    with srv.client() as c:
        c.config_set("requirepass", "right")
    s = sluice_factory(srv.port, backend_password="wrong")
    for _ in range(3):
        with RawConn(s.port) as c:
            assert c.call("AUTH", "wrong") == "OK"
            c.call("SELECT", "1")   # a private connection, which logs in too
    info = s.info(auth=("wrong",))
    assert "state=auth_failed" in info["backend_0"], info["backend_0"]
    log = _read_log(s.log_path)
    lines = [ln for ln in log.splitlines() if "WRONGPASS" in ln]
    assert len(lines) == 1 and "refused sluice's login" in lines[0], log


def test_readyz_says_shutting_down_while_draining(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, shutdown_timeout=10000)
    with RawConn(s.port, timeout=10 * SLOW) as c:
        c.send(encode_command("BLPOP", "never", "2"))
        wait_until(lambda: "blpop" in (srv.client().execute_command("CLIENT", "LIST") or b"").decode(),
                   5 * SLOW, msg="BLPOP to reach Redis")
        s.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: hreq(mport, "/readyz")[0] == 503, 2 * SLOW, msg="503 on shutdown")
        assert "shutting down" in hreq(mport, "/readyz")[2]
        assert hreq(mport, "/healthz")[0] == 200
        assert hreq(mport, "/metrics")[0] == 200
        assert c.read_reply() is None   # the BLPOP still gets its answer
    s.proc.wait(10 * SLOW)


def test_http_paths_and_methods(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory)
    assert hreq(mport, "/healthz")[0] == 200
    assert hreq(mport, "/nope")[0] == 404
    assert hreq(mport, "/metrics/x")[0] == 404
    assert hreq(mport, "/metrics", method="POST")[0] == 405
    assert hreq(mport, "/readyz", method="DELETE")[0] == 405
    assert hreq(mport, "/healthz", method="PUT")[0] == 405
    status, headers, body = hreq(mport, "/metrics", method="HEAD")
    assert status == 200 and body == ""
    assert hreq(mport, "/metrics?x=1")[0] == 200
    # The proxy is untouched by it all.
    with s.raw() as c:
        assert c.call("PING") == "PONG"


# --------------------------------------------------------------------------
# PROXY INFO sections


def test_proxy_info_commandstats_and_latencystats(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, rules="""
[limit one-del]
commands = DEL
rate = 1/h
burst = 1
per = rule
""")
    with s.raw() as c:
        for i in range(20):
            c.call("SET", f"k{i}", "v")
        assert isinstance(c.call("INCR", "k1"), Err)   # failed: an error from Redis
        c.call("DEL", "k1")
        assert isinstance(c.call("DEL", "k2"), Err)    # rejected: THROTTLED
        c.call("PROXY", "PING")
        cs = c.call("PROXY", "INFO", "commandstats").decode()
        lat = c.call("PROXY", "INFO", "LatencyStats").decode()
        both = c.call("PROXY", "INFO", "commandstats", "latencystats").decode()
        everything = c.call("PROXY", "INFO", "everything").decode()
        default = c.call("PROXY", "INFO").decode()
        nothing = c.call("PROXY", "INFO", "nosuchsection").decode()
    assert cs.startswith("# Commandstats\r\n") and "# Proxy" not in cs
    f = parse_info(cs)
    m = re.fullmatch(r"calls=(\d+),usec=(\d+),usec_per_call=([\d.]+),rejected_calls=(\d+),"
                     r"failed_calls=(\d+)", f["cmdstat_set"])
    assert m and int(m.group(1)) == 20 and int(m.group(4)) == 0 and int(m.group(5)) == 0, f
    assert re.search(r"calls=1,.*rejected_calls=0,failed_calls=1$", f["cmdstat_incr"])
    assert re.search(r"calls=1,.*rejected_calls=1,failed_calls=0$", f["cmdstat_del"])
    assert "cmdstat_proxy" in f and "cmdstat_unknown" not in f
    fl = parse_info(lat)
    assert lat.startswith("# Latencystats\r\n")
    assert re.fullmatch(r"p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}",
                        fl["latency_percentiles_usec_set"]), fl
    p = [float(x) for x in re.findall(r"=([\d.]+)", fl["latency_percentiles_usec_set"])]
    assert 0 < p[0] <= p[1] <= p[2]
    assert "# Commandstats" in both and "# Latencystats" in both and "# Stats" not in both
    for title in ("# Proxy", "# Stats", "# Commandstats", "# Latencystats", "# Backends",
                  "# Rules", "# Auth"):
        assert title in everything, title
    assert "# Latencystats" not in default and "# Commandstats" in default
    assert nothing == ""
    # The metrics say the same.
    body = scrape(mport)
    assert value(body, "sluice_commands_failed_total", cmd="incr") == 1
    assert value(body, "sluice_commands_rejected_total", cmd="del", reason="throttled") == 1


def test_rejections_by_reason(redis_factory, sluice_factory, tmp_path):
    srv = redis_factory()
    mport = free_port()
    s = sluice_factory(srv.port, start=False, users="users.ini",
                       metrics_listen=f"127.0.0.1:{mport}")
    (s.dir / "users.ini").write_text("[user app]\npassword = apppw\ncommands = +@read +@connection\nkeys = *\n")
    s.start()
    with s.raw() as c:
        assert c.call("GET", "x") == Err("NOAUTH Authentication required.")
        assert isinstance(c.call("AUTH", "app", "bad"), Err)
        assert isinstance(c.call("AUTH", "nobody", "bad"), Err)
        assert c.call("AUTH", "app", "apppw") == "OK"
        assert isinstance(c.call("SET", "x", "1"), Err)
    body = scrape(mport)
    assert value(body, "sluice_commands_rejected_total", cmd="get", reason="noauth") == 1
    assert value(body, "sluice_commands_rejected_total", cmd="set", reason="noperm") == 1
    assert value(body, "sluice_auth_failures_total", user="app") == 1
    assert value(body, "sluice_auth_failures_total", user="unknown") == 1
    # The start-up's PROXY PING and the test's connection.
    assert value(body, "sluice_connections_received_total") == 2
    wait_until(lambda: value(scrape(mport), "sluice_connected_clients") == 0, 5 * SLOW,
               msg="connected_clients back to 0")


# --------------------------------------------------------------------------
# cluster mode


def test_cluster_metrics(redis_cluster, tmp_path):
    from conftest import Sluice
    from test_cluster import cluster_info, key_for_slot, migrate_slot
    mport = free_port()
    s = Sluice(tmp_path / "s", None, cluster_seeds=redis_cluster.seeds,
               extra={"metrics_listen": f"127.0.0.1:{mport}", "cluster_retry_window": 10000})
    s.start()
    try:
        wait_until(lambda: cluster_info(s).get("cluster_have_map") == "1", 10 * SLOW,
                   msg="the slot map")
        wait_until(lambda: hreq(mport, "/readyz")[0] == 200, 10 * SLOW, msg="ready")
        body = scrape(mport)
        assert value(body, "sluice_cluster_slot_map_refreshes_total", result="ok") >= 1
        primaries = {f"127.0.0.1:{p}" for p in redis_cluster.primaries()}

        def primaries_up():
            # A node's role label comes from its HELLO reply, which may
            # land a moment after /readyz saw it connected.
            ups = [(ls, v) for n, ls, v in samples(scrape(mport)) if n == "sluice_backend_up"]
            primaries_up.last = ups
            return primaries <= {ls["backend"] for ls, v in ups
                                 if v == 1 and ls["role"] == "primary"}
        wait_until(primaries_up, 10 * SLOW, msg="backend_up 1 with role primary for every primary")
        moved0 = value(body, "sluice_cluster_redirections_total", type="moved")
        slot = 778
        k = key_for_slot(slot, "mm:")
        c = s.client()
        assert c.set(k, "before") is True
        src, dst = redis_cluster.owner_and_other(slot)
        # Every key of the slot: the session's cluster may hold others
        # there (seen on the sanitizer build: SETSLOT NODE refused with
        # "still hold keys").
        with redis_cluster.node_by_port(src).client() as n:
            keys = n.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        migrate_slot(redis_cluster, slot, src, dst, keys=keys)
        try:
            assert c.get(k) == b"before"
            body = scrape(mport)
            assert value(body, "sluice_cluster_redirections_total", type="moved") > moved0
            assert value(body, "sluice_commands_total", cmd="get") >= 1
        finally:
            with redis_cluster.node_by_port(dst).client() as d:
                keys = d.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            migrate_slot(redis_cluster, slot, dst, src, keys=keys)
            redis_cluster.wait_ok()
            assert c.delete(k) == 1
            c.close()
    finally:
        s.check_stop()
