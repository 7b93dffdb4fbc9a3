"""Integration-test harness for sluice.

Run with:   /usr/bin/python3 -m pytest tests/integration
Binary:     $SLUICE_BIN (default <repo>/build/sluice), e.g.
            SLUICE_BIN=build/san/sluice /usr/bin/python3 -m pytest tests/integration

Fixtures
  redis_factory   start redis-server instances (function scope, stop/restart)
  sluice_factory  start sluice with a generated config (function scope)
  backend         module-scoped redis-server that the module's sluice fronts
  ref             module-scoped, independent "reference" redis-server used to
                  compute what plain Redis answers for the same commands
  sluice          module-scoped sluice in front of `backend`
  r / ref_r       redis-py clients on sluice / reference redis; the data of
                  both servers is flushed before each test that uses them
  redis_cluster   session-scoped Redis Cluster, 3 primaries + 3 replicas
                  (cluster_helpers.py), started on first use
"""

import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import RawConn, SLOW, free_port, wait_until  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def _sluice_bin():
    env = os.environ.get("SLUICE_BIN")
    if env:
        p = Path(env)
        if not p.is_absolute():
            # Relative to the current directory, or failing that the repo root.
            p = p if p.exists() else REPO / p
    else:
        p = REPO / "build" / "sluice"
    return p.resolve()


SLUICE_BIN = _sluice_bin()
DIRECT = os.environ.get("SLUICE_TEST_DIRECT") == "1"


def sanitizer_env():
    """The environment for sluice: on the sanitizer build, leak detection
    is on (explicitly, not by the platform's default) and UBSan prints
    stacks; reports go to the log, which stop() checks."""
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    return env


def require_sluice_bin():
    if not SLUICE_BIN.is_file() or not os.access(SLUICE_BIN, os.X_OK):
        pytest.fail(
            f"sluice binary not found or not executable: {SLUICE_BIN}\n"
            f"build it with `make` (or `make SANITIZE=1` and SLUICE_BIN=build/san/sluice)",
            pytrace=False,
        )
    return str(SLUICE_BIN)


def pytest_configure(config):
    # 1,000-client tests need fds; raise our soft limit up to the hard limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft == resource.RLIM_INFINITY or soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


def pytest_report_header(config):
    return f"sluice binary: {SLUICE_BIN} (timing scale x{SLOW})"


# --------------------------------------------------------------------------
# process helpers


def _stop_process(proc, timeout):
    """SIGTERM, wait up to TIMEOUT, then SIGKILL. Returns (exit status, clean)."""
    if proc.poll() is not None:
        return proc.returncode, True
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout)
        return proc.returncode, True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        return proc.returncode, False


def _read_log(path, limit=20000):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return f"<log unavailable: {e}>"
    if len(text) > limit:
        text = f"... ({len(text) - limit} bytes cut) ...\n" + text[-limit:]
    return text


# --------------------------------------------------------------------------
# redis-server


class RedisServer:
    def __init__(self, tmpdir, port=None, extra_args=()):
        self.port = port or free_port()
        self.dir = Path(tmpdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra_args = list(extra_args)
        self.log_path = self.dir / "redis.log"
        self.proc = None
        self._logf = None

    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        args = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            "--daemonize", "no",
        ] + self.extra_args
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited ({self.proc.returncode}) on start:\n"
                                   + _read_log(self.log_path))
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1,
                                socket_connect_timeout=1)
                if c.ping():
                    c.close()
                    return self
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not answer PING within 10 s:\n"
                                   + _read_log(self.log_path))
            time.sleep(0.02)

    def stop(self):
        if self.proc is not None:
            _stop_process(self.proc, 10)
            self.proc = None
        if self._logf:
            self._logf.close()
            self._logf = None

    def restart(self):
        self.stop()
        return self.start()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, **kw):
        kw.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def raw(self, timeout=5):
        return RawConn(self.port, timeout=timeout)


# --------------------------------------------------------------------------
# sluice


class Sluice:
    def __init__(self, tmpdir, backend_port, listen_ports=None, extra=None,
                 extra_text="", cluster_seeds=None, backend_host="127.0.0.1", prefix=()):
        """BACKEND_HOST: the host of `backend =` (a name is looked up by
        sluice). PREFIX: argv run before sluice's own (a wrapper that
        ends by exec'ing the rest, so the process stopped is sluice)."""
        self.dir = Path(tmpdir)
        self.prefix = list(prefix)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ports = list(listen_ports) if listen_ports else [free_port()]
        self.port = self.ports[0]
        self.backend_port = backend_port
        self.config_path = self.dir / "sluice.ini"
        self.log_path = self.dir / "sluice.log"
        self.proc = None
        self._logf = None
        lines = ["[proxy]"]
        lines += [f"listen = 127.0.0.1:{p}" for p in self.ports]
        if cluster_seeds is not None:
            lines.append(f"cluster = {cluster_seeds}")
        else:
            lines.append(f"backend = {backend_host}:{backend_port}")
        extra = dict(extra or {})
        extra.setdefault("log_level", "notice")
        for k, v in extra.items():
            lines.append(f"{k} = {v}")
        text = "\n".join(lines) + "\n" + extra_text
        self.config_path.write_text(text)

    def start(self, ready_timeout=10 * SLOW):
        if DIRECT:
            # Developer aid (SLUICE_TEST_DIRECT=1): no sluice at all, the
            # tests talk to the backend redis-server, to validate what the
            # tests expect from plain Redis. PROXY-specific tests fail.
            self.port = self.backend_port
            return self
        binary = require_sluice_bin()
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.prefix + [binary, "-c", str(self.config_path)],
                                     stdout=self._logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=str(self.dir),
                                     env=sanitizer_env())
        deadline = time.monotonic() + ready_timeout
        last = None
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                pytest.fail(f"sluice exited with status {code} during startup\n"
                            f"config:\n{self.config_path.read_text()}\n"
                            f"log:\n{_read_log(self.log_path)}", pytrace=False)
            try:
                with RawConn(self.port, timeout=2) as c:
                    reply = c.call_raw(b"PROXY", b"PING")
                    if reply == b"+PONG\r\n":
                        return self
                    last = reply
            except (OSError, EOFError, ValueError) as e:
                last = e
            if time.monotonic() > deadline:
                _stop_process(self.proc, 5)
                self.proc = None
                pytest.fail(f"sluice did not answer PROXY PING with +PONG within "
                            f"{ready_timeout} s (last: {last!r})\n"
                            f"config:\n{self.config_path.read_text()}\n"
                            f"log:\n{_read_log(self.log_path)}", pytrace=False)
            time.sleep(0.05)

    def sanitizer_report(self):
        text = _read_log(self.log_path, limit=10**7)
        if any(m in text for m in SANITIZER_MARKERS):
            return text
        return None

    def stop(self, timeout=10 * SLOW):
        """Stop with SIGTERM. Returns a list of problems (empty when clean)."""
        problems = []
        if self.proc is not None:
            code, clean = _stop_process(self.proc, timeout)
            self.proc = None
            if not clean:
                problems.append(f"sluice did not exit within {timeout} s of SIGTERM "
                                f"(killed with SIGKILL)")
            elif code != 0:
                problems.append(f"sluice exited with status {code} after SIGTERM "
                                f"(expected 0)")
        if self._logf:
            self._logf.close()
            self._logf = None
        rep = self.sanitizer_report()
        if rep is not None:
            problems.append("sanitizer report in sluice log")
        return problems

    def check_stop(self, timeout=10 * SLOW):
        problems = self.stop(timeout)
        if problems:
            pytest.fail("; ".join(problems) + f"\nlog:\n{_read_log(self.log_path)}",
                        pytrace=False)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, **kw):
        kw.setdefault("socket_timeout", 10 * SLOW)
        kw.setdefault("socket_connect_timeout", 5)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def raw(self, timeout=5 * SLOW):
        return RawConn(self.port, timeout=timeout)

    def info(self, auth=()):
        """PROXY INFO parsed into a dict of field -> value (strings). AUTH:
        the AUTH arguments to log in with first, when clients must."""
        with self.raw() as c:
            if auth:
                assert c.call(b"AUTH", *auth) == "OK"
            reply = c.call(b"PROXY", b"INFO")
        if not isinstance(reply, bytes):
            raise AssertionError(f"PROXY INFO did not return a bulk string: {reply!r}")
        return parse_info(reply)


def parse_info(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        out[k] = v
    return out


def auth_servers(tmp, name, users_ini, acl_users, backend_password, redis_args=()):
    """For a module fixture on client authentication (`yield from` it):
    a backend with requirepass BACKEND_PASSWORD, a reference Redis given
    ACL_USERS (ACL SETUSER argument lists; "default" is set last, as it
    locks the setting connection out), and a sluice with USERS_INI as its
    users file (TMP/NAME-sluice/users.ini) that logs in to the backend.
    REDIS_ARGS go to both redis-servers. Yields (sluice, ref, backend) and
    stops all three; a sluice that reported problems fails the module."""
    started = []
    try:
        backend = RedisServer(tmp / f"{name}-backend", extra_args=redis_args).start()
        started.append(backend)
        backend.client().config_set("requirepass", backend_password)
        ref = RedisServer(tmp / f"{name}-ref", extra_args=redis_args).start()
        started.append(ref)
        admin = ref.client()
        for rule in sorted(acl_users, key=lambda rule: rule[0] == "default"):
            admin.execute_command("ACL", "SETUSER", *rule)
        admin.close()
        d = tmp / f"{name}-sluice"
        d.mkdir(parents=True, exist_ok=True)
        (d / "users.ini").write_text(users_ini)
        s = Sluice(d, backend.port,
                   extra={"users": "users.ini", "backend_password": backend_password})
        s.start()
        yield s, ref, backend
        problems = s.stop()
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)
    finally:
        for srv in started:
            srv.stop()


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture
def redis_factory(tmp_path):
    servers = []

    def make(*extra_args, port=None):
        d = tmp_path / f"redis{len(servers)}"
        srv = RedisServer(d, port=port, extra_args=extra_args)
        servers.append(srv)
        return srv.start()

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def sluice_factory(tmp_path):
    started = []

    def make(backend_port, start=True, listen_ports=None, extra_text="",
             backend_host="127.0.0.1", prefix=(), **extra):
        d = tmp_path / f"sluice{len(started)}"
        s = Sluice(d, backend_port, listen_ports=listen_ports, extra=extra,
                   extra_text=extra_text, backend_host=backend_host, prefix=prefix)
        started.append(s)
        if start:
            s.start()
        return s

    yield make
    failures = []
    for s in started:
        problems = s.stop()
        if problems:
            failures.append("; ".join(problems) + f"\nconfig:\n{s.config_path.read_text()}"
                            f"\nlog:\n{_read_log(s.log_path)}")
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


class HangingResolver:
    """A DNS server that never answers: a UDP socket on 127.0.0.X:53 (X
    picked free) that counts the queries it reads and drops them, and a
    resolv.conf naming it. `prefix` (for Sluice) runs sluice in a private
    mount namespace where that file is /etc/resolv.conf; it needs root and
    unshare(1), as on the test machines. OPTIONS: resolv.conf's options
    line (a lookup gives up after timeout x attempts seconds)."""

    def __init__(self, tmpdir, options="timeout:1 attempts:1"):
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("a private /etc/resolv.conf needs root and unshare(1)")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for last in random.sample(range(20, 250), 230):
            try:
                self.sock.bind((f"127.0.0.{last}", 53))
                break
            except OSError:
                continue
        else:
            pytest.skip("no free 127.0.0.X:53 for a resolver that never answers")
        self.address = self.sock.getsockname()[0]
        self.sock.settimeout(0.05)
        self.queries = []
        self.conf = Path(tmpdir) / "resolv.conf"
        self.conf.write_text(f"nameserver {self.address}\noptions {options}\n")
        self.prefix = ["unshare", "--mount", "sh", "-c",
                       'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(self.conf)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drop, daemon=True)
        self._thread.start()

    def _drop(self):
        while not self._stop.is_set():
            try:
                self.queries.append(self.sock.recv(4096))
            except OSError:
                continue

    def asked_for(self, name):
        """Whether a query for NAME came (in DNS wire form, labels lower-cased:
        evdns may randomize the case)."""
        wire = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
        return any(wire in q.lower() for q in list(self.queries))

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def hanging_resolver(tmp_path):
    r = HangingResolver(tmp_path)
    yield r
    r.stop()


@pytest.fixture(scope="module")
def module_tmp():
    with tempfile.TemporaryDirectory(prefix="sluice-it-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def backend(module_tmp):
    srv = RedisServer(module_tmp / "backend").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def ref(module_tmp):
    srv = RedisServer(module_tmp / "ref").start()
    yield srv
    srv.stop()


def started_sluice(s, ready=None):
    """Start sluice S (READY(S) waits for anything more it needs), yield it,
    and stop it at the end, failing the tests with its log when it did not
    stop cleanly: for module-scoped fixtures (`yield from`)."""
    try:
        s.start()
        if ready is not None:
            ready(s)
        yield s
    finally:
        problems = s.stop()
        if problems:
            pytest.fail("; ".join(problems) + f"\nlog:\n{_read_log(s.log_path)}",
                        pytrace=False)


@pytest.fixture(scope="module")
def sluice(module_tmp, backend):
    yield from started_sluice(Sluice(module_tmp / "sluice", backend.port))


@pytest.fixture(scope="session")
def redis_cluster():
    from cluster_helpers import ClusterRedis
    with tempfile.TemporaryDirectory(prefix="sluice-cluster-") as d:
        cl = ClusterRedis(Path(d) / "cluster").start()
        try:
            yield cl
        finally:
            cl.stop()


@pytest.fixture
def clean(backend, ref):
    """Flush the backend and the reference server (directly, not via sluice)."""
    for srv in (backend, ref):
        c = srv.client()
        c.flushall()
        c.close()


@pytest.fixture
def r(sluice, clean):
    c = sluice.client()
    yield c
    c.close()


@pytest.fixture
def ref_r(ref, clean):
    c = ref.client()
    yield c
    c.close()


@pytest.fixture(autouse=True)
def _module_sluice_health(request):
    """After each test that used the module-scoped sluice: it must still be
    running and its log must hold no sanitizer report, so that a crash is
    blamed on the test that caused it."""
    yield
    if "sluice" not in request.fixturenames:
        return
    s = request.getfixturevalue("sluice")
    if s.proc is not None and s.proc.poll() is not None:
        code = s.proc.returncode
        log = _read_log(s.log_path)
        s.proc = None
        pytest.fail(f"sluice died during this test (exit status {code})\nlog:\n{log}",
                    pytrace=False)
    if s.sanitizer_report() is not None and not getattr(s, "_san_reported", False):
        s._san_reported = True
        pytest.fail(f"sanitizer report in sluice log\nlog:\n{_read_log(s.log_path)}",
                    pytrace=False)
