"""Running sluice as an operator does (issue 22): start-up errors on the
terminal, journald and JSON logs, SIGUSR1/SIGUSR2, the open-file limit,
the pid file, --version, CLIENT KILL USER with sluice's users, and a fast
reconnect after Redis restarts.

Tests that look at stderr or need a special environment start sluice
themselves (OpsSluice); the others use sluice_factory and redis_factory.
"""

import json
import os
import re
import resource
import signal
import socket
import subprocess
import time

import pytest

from conftest import require_sluice_bin, sanitizer_env, SANITIZER_MARKERS
from helpers import SLOW, Err, RawConn, free_port, wait_until


# --------------------------------------------------------------------------
# helpers


class OpsSluice:
    """sluice started with its stderr in STDERR_PATH (no log_file unless
    the config says so), an optional environment on top of the test one,
    and optional open-file limits (soft, hard) set before exec."""

    def __init__(self, tmp_path, config_text, env=None, nofile=None, journal=False):
        self.dir = tmp_path
        self.config_path = tmp_path / "sluice.ini"
        self.config_path.write_text(config_text)
        self.stderr_path = tmp_path / "stderr.txt"
        self.env = sanitizer_env()
        self.env.update(env or {})
        self.nofile = nofile
        self.journal = journal
        self.proc = None

    def _preexec(self):
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def start(self):
        errf = open(self.stderr_path, "wb")
        if self.journal:
            # What systemd does: JOURNAL_STREAM names stderr's device:inode.
            st = os.fstat(errf.fileno())
            self.env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        self.proc = subprocess.Popen([require_sluice_bin(), "-c", str(self.config_path)],
                                     stdout=subprocess.DEVNULL, stderr=errf,
                                     stdin=subprocess.DEVNULL, cwd=str(self.dir), env=self.env,
                                     preexec_fn=self._preexec)
        errf.close()
        return self

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, pattern, path=None, timeout=10 * SLOW):
        path = path or self.stderr_path
        wait_until(lambda: re.search(pattern, path.read_text(errors="replace")), timeout,
                   msg=f"{pattern!r} in {path.name}")

    def wait_exit(self, timeout=10 * SLOW):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """SIGTERM; the exit status. Fails on a sanitizer report."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=10 * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            pytest.fail("sluice did not stop on SIGTERM\n" + self.stderr())
        text = self.stderr()
        log = self.dir / "sluice.log"
        if log.exists():
            text += log.read_text(errors="replace")
        assert not any(m in text for m in SANITIZER_MARKERS), text
        return code


@pytest.fixture
def ops(tmp_path):
    started = []

    def make(config_text, **kw):
        d = tmp_path / f"ops{len(started)}"
        d.mkdir()
        s = OpsSluice(d, config_text, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def config(port, backend_port, *lines):
    return "\n".join(["[proxy]", f"listen = 127.0.0.1:{port}",
                      f"backend = 127.0.0.1:{backend_port}"] + list(lines)) + "\n"


def ping_ok(port):
    try:
        with RawConn(port, timeout=2 * SLOW) as c:
            return c.call(b"PROXY", b"PING") == "PONG"
    except (OSError, EOFError):
        return False


def wait_serving(port):
    wait_until(lambda: ping_ok(port), 10 * SLOW, msg="sluice answering PROXY PING")


# --------------------------------------------------------------------------
# logs


def test_startup_error_reaches_stderr_with_log_file(ops, redis_factory):
    """With log_file set, a start that fails (its port is taken) says why on
    stderr too, not only in the log file."""
    srv = redis_factory()
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        s = ops(config(taken.getsockname()[1], srv.port, "log_file = sluice.log")).start()
        assert s.wait_exit() != 0
    finally:
        taken.close()
    err = s.stderr()
    assert "Address already in use" in err, err
    assert "Address already in use" in (s.dir / "sluice.log").read_text()


def test_running_sluice_logs_to_the_file_only(ops, redis_factory):
    """Once running, warnings go to the log file alone: stderr has only
    what came before "started"."""
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port, "log_file = sluice.log")).start()
    wait_serving(port)
    srv.stop()   # backend warnings from now on
    s.wait_for(r"connection lost", path=s.dir / "sluice.log")
    assert "connection lost" not in s.stderr(), s.stderr()
    assert s.stop() == 0


def test_journald_lines_have_priority_and_no_stamp(ops, redis_factory):
    """When stderr is the journal (JOURNAL_STREAM matches it) and no
    log_file is set, each line is "<N>message": journald adds time and pid."""
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port), journal=True).start()
    wait_serving(port)
    srv.stop()
    s.wait_for(r"connection lost")
    assert s.stop() == 0
    lines = s.stderr().splitlines()
    assert lines and all(re.match(r"<[3-7]>", l) for l in lines), lines
    assert any(l.startswith("<5>sluice ") and "started" in l for l in lines), lines
    assert any(l.startswith("<4>backend ") for l in lines), lines
    assert not any(str(s.proc.pid) + ":S" in l for l in lines), lines


def test_journal_stream_of_another_file_is_not_the_journal(ops, redis_factory):
    """JOURNAL_STREAM naming some other file (a shell redirect in between)
    keeps Redis's text lines."""
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port), env={"JOURNAL_STREAM": "1:1"}).start()
    wait_serving(port)
    assert s.stop() == 0
    assert re.search(r"^\d+:S \d\d \w{3} \d{4} .* \* sluice .* started", s.stderr(), re.M), \
        s.stderr()


def test_json_log_lines(ops, redis_factory):
    """log_format = json: every line one JSON object with time, pid, level
    and msg; quotes, control characters and bytes that are not UTF-8 in a
    message (here the users file's name, logged on reload) are escaped."""
    srv = redis_factory()
    port = free_port()
    weird = b'u"q\\\x01\xff\xc3\xa9.ini'   # quote, backslash, ^A, not UTF-8, e-acute
    s = ops("")
    # The config holds the raw bytes of the name.
    s.config_path.write_bytes(config(port, srv.port, "log_format = json",
                                     "log_file = sluice.log").encode() + b"users = " + weird + b"\n")
    (s.dir / os.fsdecode(weird)).write_text("[user default]\npassword = pw\n")
    s.start()
    wait_serving(port)
    s.proc.send_signal(signal.SIGHUP)
    log = s.dir / "sluice.log"
    s.wait_for(r"users file .* reloaded", path=log)
    assert s.stop() == 0
    raw = log.read_bytes()
    assert b"\xff" not in raw and b"\x01" not in raw, raw
    objs = [json.loads(l) for l in raw.decode("utf-8").splitlines()]
    for o in objs:
        assert set(o) == {"time", "pid", "level", "msg"}, o
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["time"]), o
        assert o["pid"] == s.proc.pid, o
        assert o["level"] in ("debug", "info", "notice", "warning", "error"), o
    assert any(o["level"] == "notice" and "started" in o["msg"] for o in objs), objs
    reloaded = [o["msg"] for o in objs if o["msg"].startswith("users file")]
    assert reloaded and 'u"q\\\x01\ufffd\u00e9.ini' in reloaded[0], reloaded


def test_log_format_bad_value_is_a_config_error(ops):
    s = ops(config(free_port(), free_port(), "log_format = xml")).start()
    assert s.wait_exit() != 0
    assert re.search(r"sluice.ini:4: log_format: .*text or json", s.stderr()), s.stderr()


# --------------------------------------------------------------------------
# signals


def test_sigusr1_is_not_fatal(redis_factory, sluice_factory):
    """SIGUSR1 is logged and ignored. (SIGUSR2 starts a new sluice that
    takes over: test_handover.py.)"""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    s.proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: "SIGUSR1" in s.log_path.read_text(), 5 * SLOW, msg="SIGUSR1 logged")
    time.sleep(0.1)
    assert s.running, s.log_path.read_text()
    with s.raw() as c:
        assert c.call(b"PING") == "PONG"


# --------------------------------------------------------------------------
# open-file limit


def _soft_nofile(pid):
    for line in open(f"/proc/{pid}/limits"):
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no Max open files line")


def test_fd_limit_raised_without_warning(ops, redis_factory):
    """The hard limit allows what maxclients needs: the soft limit is
    raised to it, nothing is logged."""
    srv = redis_factory()
    port = free_port()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip(f"hard open-file limit {hard} too low")
    s = ops(config(port, srv.port, "maxclients = 1000"), nofile=(256, hard)).start()
    wait_serving(port)
    assert _soft_nofile(s.proc.pid) >= 2000
    assert s.stop() == 0
    assert "open file" not in s.stderr(), s.stderr()


def test_fd_limit_default_maxclients_adjusted_quietly(ops, redis_factory):
    """The default maxclients (10000) needs more than a hard limit of 4096
    allows: maxclients is adjusted with a notice, not a warning, and the
    soft limit is raised to the hard one."""
    srv = redis_factory()
    port = free_port()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"hard open-file limit {hard} too low")
    s = ops(config(port, srv.port), nofile=(256, 4096)).start()
    wait_serving(port)
    assert _soft_nofile(s.proc.pid) == 4096
    assert s.stop() == 0
    err = s.stderr()
    assert not re.search(r" # .*open file", err), err
    assert re.search(r" \* open file limit 4096 .*maxclients adjusted from the default 10000 to "
                     r"\d+", err), err


def test_fd_limit_set_maxclients_too_high_warns(ops, redis_factory):
    """A maxclients set in sluice.ini that the hard limit cannot serve is a
    warning, and maxclients is lowered to what fits: the client past it is
    refused as Redis does, sluice keeps running."""
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port, "maxclients = 5000"), nofile=(256, 300)).start()
    wait_serving(port)
    err = s.stderr()
    m = re.search(r" # maxclients 5000 needs \d+ open files .*lowered to (\d+)", err)
    assert m, err
    fit = int(m.group(1))
    assert 50 < fit < 150, fit
    conns = []
    try:
        for _ in range(fit):
            c = RawConn(port, timeout=5 * SLOW)
            conns.append(c)
            assert c.call(b"PING") == "PONG"
        extra = RawConn(port, timeout=5 * SLOW)
        conns.append(extra)
        assert extra.call(b"PING") == Err("ERR max number of clients reached")
    finally:
        for c in conns:
            c.close()
    assert s.stop() == 0


# --------------------------------------------------------------------------
# pidfile, --version


def test_pidfile_written_and_removed(ops, redis_factory):
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port, "pidfile = run/sluice.pid"))
    (s.dir / "run").mkdir()
    s.start()
    wait_serving(port)
    pid_path = s.dir / "run" / "sluice.pid"
    assert pid_path.read_text() == f"{s.proc.pid}\n"
    assert os.listdir(s.dir / "run") == ["sluice.pid"]   # no temporary left
    assert s.stop() == 0
    assert not pid_path.exists()


def test_pidfile_of_another_process_is_left(ops, redis_factory):
    """A newer process that took over wrote its own pid: the old one's
    exit leaves the file alone."""
    srv = redis_factory()
    port = free_port()
    s = ops(config(port, srv.port, "pidfile = sluice.pid")).start()
    wait_serving(port)
    pid_path = s.dir / "sluice.pid"
    pid_path.write_text("1\n")
    assert s.stop() == 0
    assert pid_path.read_text() == "1\n"


def test_pidfile_unwritable_fails_the_start(ops, redis_factory):
    srv = redis_factory()
    s = ops(config(free_port(), srv.port, "pidfile = no/such/dir/sluice.pid")).start()
    assert s.wait_exit() != 0
    assert "pidfile no/such/dir/sluice.pid" in s.stderr(), s.stderr()


@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_version_build_details(flag):
    p = subprocess.run([require_sluice_bin(), flag], capture_output=True, timeout=10 * SLOW)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert re.match(r"sluice \d+\.\d+\.\d+\n", out), out
    assert re.search(r"^commit \S+, built \d{4}-\d\d-\d\d$", out, re.M), out
    assert re.search(r"^compiler \S+", out, re.M), out
    assert re.search(r"^libevent 2\.\d+\.\d+", out, re.M), out
    assert re.search(r"^OpenSSL \d", out, re.M), out
    assert re.search(r"^hiredis \d+\.\d+\.\d+$", out, re.M), out


# --------------------------------------------------------------------------
# CLIENT KILL USER


USERS_INI = """\
[user default]
password = defpw
commands = +@all
keys = *
channels = *

[user app]
password = apppw
commands = +@all
keys = *
"""


def _login(port, user, pw):
    c = RawConn(port, timeout=5 * SLOW)
    assert c.call(b"AUTH", user, pw) == "OK"
    return c


def test_client_kill_user_of_sluice(redis_factory, sluice_factory):
    """With a users file, CLIENT KILL USER app closes sluice's clients of
    user app and counts them; a name neither sluice nor Redis knows gets
    Redis's "No such user"."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "backend-pw")
    s = sluice_factory(srv.port, backend_password="backend-pw", users="users.ini", start=False)
    (s.dir / "users.ini").write_text(USERS_INI)
    s.start()
    apps = [_login(s.port, b"app", b"apppw") for _ in range(2)]
    other = _login(s.port, b"default", b"defpw")
    admin = _login(s.port, b"default", b"defpw")
    try:
        assert admin.call(b"CLIENT", b"KILL", b"USER", b"app") == 2
        for c in apps:
            with pytest.raises((EOFError, OSError)):
                c.call(b"PING")
        assert other.call(b"PING") == "PONG"
        assert admin.call(b"CLIENT", b"KILL", b"USER", b"nosuch") == \
            Err("ERR No such user 'nosuch'")
        assert admin.call(b"CLIENT", b"KILL", b"USER", b"app", b"SKIPME", b"yes") == 0
        # USER default, with other filters Redis checks: skipme spares admin.
        assert admin.call(b"CLIENT", b"KILL", b"TYPE", b"normal", b"USER", b"default") == 1
        with pytest.raises((EOFError, OSError)):
            other.call(b"PING")
        assert admin.call(b"PING") == "PONG"
    finally:
        for c in apps + [other, admin]:
            c.close()


# --------------------------------------------------------------------------
# fast reconnect


def _accepting(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_reconnect_within_100ms_of_redis_accepting(redis_factory, sluice_factory):
    """Redis is down long enough for the old backoff to have grown (six
    refused attempts: 1.6 s between tries by then), then starts on the same
    port: sluice answers a proxied PING soon after the port accepts."""
    srv = redis_factory()
    s = sluice_factory(srv.port, log_level="info")
    with s.raw() as c:
        assert c.call(b"PING") == "PONG"
    srv.stop()
    wait_until(lambda: s.log_path.read_text().count("cannot connect") >= 6, 10 * SLOW,
               interval=0.005, msg="six refused reconnects")
    proc = subprocess.Popen(["redis-server", "--port", str(srv.port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(srv.dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10 * SLOW
        while not _accepting(srv.port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.002)
        accepted = time.monotonic()
        with s.raw() as c:
            while c.call(b"PING") != "PONG":
                assert time.monotonic() < deadline, "sluice did not reconnect"
                time.sleep(0.005)
        took = time.monotonic() - accepted
        print(f"first proxied PING {took * 1000:.0f} ms after Redis accepted")
        assert took < 0.5 * SLOW, f"{took:.3f} s"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
