"""Hostile round three, medium and low items (issue 30, items 5 to 12):
hostile label values in /metrics, secrets in PROXY SLOWLOG, a reload
that removes a permission from requests already read, departed nodes
forgotten, one table for PROXY subcommands, the hand-over socket's
directory, HEAD and Content-Length on the metrics listener, and a
metrics listener that cannot be turned against the proxy."""

import os
import socket
import subprocess
import time

import pytest

from helpers import SLOW, Err, RawConn, encode_command, free_port, wait_until


def _args(entries):
    """Every argument of every PROXY SLOWLOG / SLOWLOG entry, as bytes."""
    return [a for e in entries for a in e[3]]


# --------------------------------------------------------------------------
# 6. PROXY SLOWLOG redacts what Redis's SLOWLOG redacts, and OWNER tokens


SECRET_COMMANDS = [
    ("ACL", "SETUSER", "h30c-user", "on", ">pw-acl-secret", "~*", "+@all"),
    ("CONFIG", "SET", "masterauth", "pw-masterauth-secret", "maxmemory-policy", "noeviction"),
    ("CONFIG", "SET", "requirepass", "pw-requirepass-secret"),
    ("CONFIG", "SET", "requirepass", ""),
    ("MIGRATE", "127.0.0.1", "1", "k", "0", "10", "AUTH", "pw-migrate-secret"),
    ("MIGRATE", "127.0.0.1", "1", "k", "0", "10", "AUTH2", "user-migrate", "pw-migrate2-secret"),
    ("HELLO", "2", "AUTH", "default", "pw-hello-secret"),
]


def test_slowlog_redacts_secrets_as_redis_does(redis_factory, sluice_factory):
    """Each command Redis 7.0 redacts shows in PROXY SLOWLOG exactly as in
    a real Redis's SLOWLOG (with "(redacted)"), and LOCK/UNLOCK/RENEW show
    their OWNER token as "(redacted)"."""
    srv = redis_factory("--slowlog-log-slower-than", "0")
    s = sluice_factory(srv.port, slowlog_log_slower_than=0)
    ref = redis_factory("--slowlog-log-slower-than", "0")
    with s.raw() as c, ref.raw() as r:
        for cmd in SECRET_COMMANDS:
            c.call(*cmd)
            r.call(*cmd)
            want = [e for e in r.call("SLOWLOG", "GET", "-1") if e[3][0] == cmd[0].encode()][0][3]
            got = [e for e in c.call("PROXY", "SLOWLOG", "GET", "-1")
                   if e[3][0] == cmd[0].encode()][0][3]
            assert got == want, cmd
            assert b"(redacted)" in got
        assert c.call("LOCK", "lk", "10000", "OWNER", "tok-secret-1") == b"tok-secret-1"
        c.call("RENEW", "lk", "10000", "OWNER", "tok-secret-1")
        c.call("UNLOCK", "lk", "OWNER", "tok-secret-1")
        entries = c.call("PROXY", "SLOWLOG", "GET", "-1")
    shown = _args(entries)
    for secret in (b"tok-secret-1", b"pw-acl-secret", b"pw-masterauth-secret",
                   b"pw-migrate-secret", b"pw-migrate2-secret", b"pw-hello-secret"):
        assert secret not in shown, (secret, entries)
    locks = [e[3] for e in entries if e[3][0].upper() in (b"LOCK", b"UNLOCK", b"RENEW")]
    assert len(locks) == 3, entries
    for args in locks:
        assert args[args.index(b"OWNER") + 1] == b"(redacted)", args


# --------------------------------------------------------------------------
# 5. label values from outside are valid UTF-8 and escaped


def hget(port, path, method="GET", timeout=5 * SLOW):
    """(status, headers lower-cased, body bytes) of one HTTP request."""
    from http.client import HTTPConnection
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def metrics_sluice(redis_factory, sluice_factory, files=None, **extra):
    """(srv, sluice, metrics port); FILES: name -> bytes written before start."""
    srv = redis_factory()
    mport = free_port()
    s = sluice_factory(srv.port, start=False, metrics_listen=f"127.0.0.1:{mport}", **extra)
    for name, data in (files or {}).items():
        (s.dir / name).write_bytes(data)
    s.start()
    return srv, s, mport


HOSTILE = b'x"y\\z\xff\xc0\xaf\xed\xa0\x80end\xe2\x82'


def test_promtool_accepts_hostile_label_values(redis_factory, sluice_factory):
    """A rule and a user whose names hold a quote, a backslash and bytes
    that are no UTF-8: /metrics still passes promtool, each name once."""
    rules = b"[limit " + HOSTILE + b"]\ncommands = GET\nrate = 1000/s\n"
    users = (b"[user default]\nnopass = yes\ncommands = +@all\nkeys = *\nchannels = *\n\n"
             b"[user " + HOSTILE + b"]\npassword = pw\ncommands = +@all\nkeys = *\n")
    srv, s, mport = metrics_sluice(redis_factory, sluice_factory,
                                   files={"rules.ini": rules, "users.ini": users},
                                   rules="rules.ini", users="users.ini")
    with s.raw() as c:
        assert c.call("GET", "a") is None
        assert isinstance(c.call("AUTH", HOSTILE, "wrong"), Err)
    status, headers, body = hget(mport, "/metrics")
    assert status == 200
    body.decode("utf-8")   # strict: no invalid byte
    check = subprocess.run(["promtool", "check", "metrics"], input=body,
                           capture_output=True, timeout=30)
    assert check.returncode == 0, (check.stdout + check.stderr).decode() + body.decode()
    want = 'x\\"y\\\\z\ufffd\ufffd\ufffd\ufffd\ufffd\ufffdend\ufffd\ufffd'
    text = body.decode()
    assert f'sluice_ratelimit_decisions_total{{rule="{want}",decision="admitted"}} 1' in text
    assert f'sluice_auth_failures_total{{user="{want}"}} 1' in text


# --------------------------------------------------------------------------
# 9. every PROXY subcommand has its permission; unknown ones are errors


PROXY_USERS = b"""\
[user default]
nopass = yes
commands = +@all -@dangerous
keys = *
channels = *

[user admin]
password = adminpw
commands = +@all
keys = *

[user watcher]
password = watchpw
commands = +get +proxy|sentinel +proxy|cluster
keys = *
"""


def test_proxy_subcommands_need_their_permission(redis_factory, sluice_factory):
    """PROXY SENTINEL and PROXY CLUSTER need @admin or +proxy|NAME, as
    PROXY INFO does; PROXY PING and HELP are for everybody; an unknown
    subcommand is an error for every user."""
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False, users="users.ini")
    (s.dir / "users.ini").write_bytes(PROXY_USERS)
    s.start()
    with s.raw() as c:
        for sub in ("SENTINEL", "CLUSTER", "INFO", "RULES", "RELOAD", "TOP", "SLOWLOG"):
            args = ("PROXY", sub) + (("CLIENTS",) if sub == "TOP" else ("LEN",) if sub == "SLOWLOG" else ())
            got = c.call(*args)
            assert isinstance(got, Err) and str(got) == (
                f"NOPERM this user has no permissions to run the 'proxy|{sub.lower()}' command"), (sub, got)
        assert c.call("PROXY", "PING") == "PONG"
        assert isinstance(c.call("PROXY", "HELP"), list)
        got = c.call("PROXY", "NOSUCH")
        assert isinstance(got, Err) and "unknown subcommand" in str(got), got
        assert c.call("AUTH", "watcher", "watchpw") == "OK"
        for sub in ("SENTINEL", "CLUSTER"):
            got = c.call("PROXY", sub)
            assert not (isinstance(got, Err) and str(got).startswith("NOPERM")), (sub, got)
        got = c.call("PROXY", "INFO")
        assert isinstance(got, Err) and str(got).startswith("NOPERM"), got
        got = c.call("PROXY", "NOSUCH")
        assert isinstance(got, Err) and "unknown subcommand" in str(got), got
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        for sub in ("SENTINEL", "CLUSTER", "INFO"):
            got = c.call("PROXY", sub)
            assert not (isinstance(got, Err) and str(got).startswith("NOPERM")), (sub, got)
        got = c.call("PROXY", "NOSUCH")
        assert isinstance(got, Err) and "unknown subcommand" in str(got), got


# --------------------------------------------------------------------------
# 11. HEAD answers carry no body; every answer carries Content-Length


def read_http_answers(sock, count, timeout=5 * SLOW):
    """COUNT answers read from SOCK, framed by their Content-Length only:
    [(status line, headers lower-cased, body bytes)]; raises if one has no
    Content-Length. What follows the last is left in sock (returned too)."""
    sock.settimeout(timeout)
    buf = b""
    answers = []
    while len(answers) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(answers)} answers: {buf!r}"
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        assert "content-length" in headers, (lines, answers)
        n = int(headers["content-length"])
        body_len = 0 if answers_is_head(sock, len(answers)) else n
        while len(buf) < body_len:
            chunk = sock.recv(65536)
            assert chunk
            buf += chunk
        answers.append((lines[0], headers, buf[:body_len]))
        buf = buf[body_len:]
    return answers, buf


def answers_is_head(sock, i):
    return i in getattr(sock, "_head_answers", ())


class HeadSock:
    """A socket that knows which of its answers are to HEAD requests."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self._head_answers = set()

    def __getattr__(self, name):
        return getattr(self.s, name)


def test_head_answers_have_no_body_and_keep_alive_stays_framed(redis_factory, sluice_factory):
    """HEAD of each page, then GETs, pipelined on one kept-alive
    connection: each HEAD answer has the GET's Content-Length and no body,
    and the answer after it starts where it should."""
    srv, s, mport = metrics_sluice(redis_factory, sluice_factory)
    reqs = [("HEAD", "/readyz"), ("GET", "/healthz"), ("HEAD", "/metrics"), ("GET", "/readyz"),
            ("HEAD", "/healthz"), ("HEAD", "/nope"), ("POST", "/metrics"), ("GET", "/healthz")]
    c = HeadSock(mport)
    try:
        c._head_answers = {i for i, (m, _) in enumerate(reqs) if m == "HEAD"}
        c.sendall(b"".join(f"{m} {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for m, p in reqs))
        answers, rest = read_http_answers(c, len(reqs))
        assert rest == b""
        c.settimeout(0.3)
        with pytest.raises(socket.timeout):
            extra = c.recv(100)   # nothing more: no body was left over
            assert extra == b"", extra
    finally:
        c.close()
    statuses = [a[0].split(" ", 1)[1] for a in answers]
    assert statuses == ["200 OK", "200 OK", "200 OK", "200 OK", "200 OK", "404 Not Found",
                        "405 Method Not Allowed", "200 OK"], statuses
    assert answers[0][1]["content-length"] == "6"        # "ready\n", not sent
    assert answers[1][2] == b"ok\n" and answers[3][2] == b"ready\n" and answers[7][2] == b"ok\n"
    assert int(answers[2][1]["content-length"]) > 1000
    # HTTP/1.0 without keep-alive: Content-Length too, then closed.
    c = socket.create_connection(("127.0.0.1", mport))
    try:
        c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        [(line, headers, body)], _ = read_http_answers(c, 1)
        assert line.endswith("200 OK") and len(body) == int(headers["content-length"])
        assert c.recv(100) == b""
    finally:
        c.close()


# --------------------------------------------------------------------------
# 12. /metrics cannot be turned against the proxy


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_scrapers_that_never_read_are_bounded(redis_factory, sluice_factory):
    """300 connections each send GET /metrics (many series: a large body)
    and never read: beyond metrics_max_connections (default 16) they are
    answered 503 or closed, sluice's memory grows by little, and another
    client's PINGs are answered all along."""
    srv, s, mport = metrics_sluice(redis_factory, sluice_factory)
    with s.raw() as c:   # a larger body: a series per command name
        for i in range(150):
            c.call("SET", f"k{i}", "v")
        for cmd in ("GET", "INCR", "DEL", "EXISTS", "TYPE", "TTL", "STRLEN", "APPEND", "LPUSH",
                    "RPUSH", "SADD", "HSET", "ZADD", "PING", "ECHO", "DBSIZE", "TIME"):
            c.call(cmd, *(("x",) if cmd not in ("PING", "DBSIZE", "TIME") else ()),
                   *(("1",) if cmd in ("APPEND", "LPUSH", "RPUSH", "SADD") else ()),
                   *(("f", "1") if cmd == "HSET" else ("1", "m") if cmd == "ZADD" else ()))
    rss_before = _rss_kb(s.proc.pid)
    scrapers = []
    try:
        for _ in range(300):
            sk = socket.socket()
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sk.connect(("127.0.0.1", mport))
            sk.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            scrapers.append(sk)
        with s.raw() as c:
            for _ in range(50):
                assert c.call("PING") == "PONG"
        # Those over the cap were told 503 and closed.
        refused = 0
        for sk in scrapers:
            sk.settimeout(0.05)
            try:
                data = sk.recv(200, socket.MSG_PEEK)
            except (socket.timeout, BlockingIOError):
                continue
            except ConnectionResetError:
                refused += 1
                continue
            if data == b"" or data.startswith(b"HTTP/1.1 503"):
                refused += 1
        assert refused >= 300 - 16 - 4, refused
        rss_after = _rss_kb(s.proc.pid)
        assert rss_after - rss_before < 40 * 1024, (rss_before, rss_after)
        with s.raw() as c:
            assert c.call("PING") == "PONG"
    finally:
        for sk in scrapers:
            sk.close()
    # The listener serves again once they are gone.
    wait_until(lambda: hget(mport, "/healthz")[0] == 200, 10 * SLOW)
    log = s.log_path.read_text(errors="replace")
    assert "over metrics_max_connections (16)" in log
    assert log.count("over metrics_max_connections") <= 10   # at most once a second


# --------------------------------------------------------------------------
# 10. the hand-over socket never lives where another user can take it


NOBODY = 65534


def _run_sluice(s, *args):
    from conftest import SLUICE_BIN
    return subprocess.run([str(SLUICE_BIN), *args, "-c", str(s.config_path)],
                          capture_output=True, timeout=30 * SLOW)


def test_default_handover_socket_is_in_a_private_directory(redis_factory, sluice_factory):
    """Without handover_socket or a runtime directory in the environment,
    the socket is in /tmp/sluice-<uid>, a directory of this user's with
    mode 0700, not right in /tmp."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    if os.environ.get("RUNTIME_DIRECTORY") or os.environ.get("XDG_RUNTIME_DIR"):
        pytest.skip("a runtime directory is set")
    d = f"/tmp/sluice-{os.geteuid()}"
    path = f"{d}/sluice-127.0.0.1:{s.port}.sock"
    wait_until(lambda: os.path.exists(path), 5 * SLOW, msg=path)
    st = os.stat(d)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700, oct(st.st_mode)
    assert not os.path.exists(f"/tmp/sluice-127.0.0.1:{s.port}.sock")


@pytest.mark.parametrize("case", ["dir_of_another_user", "dir_writable_not_sticky",
                                  "path_of_another_user"])
def test_handover_socket_another_user_could_take_is_refused(redis_factory, sluice_factory,
                                                            tmp_path, case):
    """A handover_socket whose directory belongs to another user, whose
    directory others may write without the sticky bit, or which another
    user's file holds already: sluice -t says so (FILE:LINE) and sluice
    refuses to start, with a clear message."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user")
    d = tmp_path / "hdir"
    d.mkdir()
    sock = d / "h.sock"
    if case == "dir_of_another_user":
        os.chown(d, NOBODY, NOBODY)
        want = b"belongs to another user"
    elif case == "dir_writable_not_sticky":
        os.chmod(d, 0o777)
        want = b"writable by other users and not sticky"
    else:
        os.chmod(d, 0o1777)
        sock.write_text("")
        os.chown(sock, NOBODY, NOBODY)
        want = b"belongs to another user"
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False, handover_socket=str(sock))
    check = _run_sluice(s, "-t")
    assert check.returncode != 0, check.stdout + check.stderr
    line = [n for n, l in enumerate(s.config_path.read_text().splitlines(), 1)
            if l.startswith("handover_socket")][0]
    assert f"{s.config_path}:{line}: ".encode() in check.stderr and want in check.stderr, \
        check.stderr
    run = _run_sluice(s)
    assert run.returncode == 1, run.stdout + run.stderr
    assert want in run.stdout + run.stderr + s.log_path.read_bytes() if s.log_path.exists() \
        else want in run.stdout + run.stderr


def test_handover_socket_in_a_sticky_directory_of_ours_is_fine(redis_factory, sluice_factory,
                                                               tmp_path):
    """A sticky, world-writable directory (as /tmp) with no file of another
    user at the path is fine: sluice starts and serves the socket there."""
    d = tmp_path / "sticky"
    d.mkdir()
    os.chmod(d, 0o1777)
    srv = redis_factory()
    s = sluice_factory(srv.port, handover_socket=str(d / "h.sock"))
    wait_until(lambda: (d / "h.sock").exists(), 5 * SLOW)
    assert _run_sluice(s, "-t").returncode == 0


# --------------------------------------------------------------------------
# 7. a reload that removes a permission applies to requests already read


RELOAD_USERS = """\
[user default]
nopass = yes
commands = +@all
keys = *
channels = *

[user app]
password = apppw
commands = +@all -@dangerous
keys = app:*
channels = {channels}
"""


@pytest.mark.parametrize("how", ["sighup", "proxy_reload"])
def test_reload_applies_to_requests_already_read(redis_factory, sluice_factory, how):
    """SUBSCRIBE payroll.updates pipelined behind BLPOP app:q 0; a reload
    removes payroll.* from app meanwhile: when its turn comes, SUBSCRIBE
    gets -NOPERM, and so does a GET of a key no longer granted waiting
    with it."""
    import signal
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False, users="users.ini")
    users = s.dir / "users.ini"
    users.write_text(RELOAD_USERS.format(channels="payroll.* news.*").replace(
        "keys = app:*", "keys = app:* payroll:*"))
    s.start()
    with s.raw() as c, s.raw() as admin:
        assert c.call("AUTH", "app", "apppw") == "OK"
        c.send(encode_command("BLPOP", "app:q", "0") + encode_command("GET", "payroll:k") +
               encode_command("SUBSCRIBE", "payroll.updates"))
        time.sleep(0.3 * SLOW)
        users.write_text(RELOAD_USERS.format(channels="news.*"))
        if how == "sighup":
            s.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "config reloaded" in s.log_path.read_text(errors="replace"),
                       5 * SLOW)
        else:
            assert admin.call("PROXY", "RELOAD") == "OK"
        assert admin.call("LPUSH", "app:q", "x") == 1
        assert c.read_reply() == [b"app:q", b"x"]
        got = c.read_reply()
        assert isinstance(got, Err) and str(got).startswith("NOPERM") and "key" in str(got), got
        got = c.read_reply()
        assert isinstance(got, Err) and str(got).startswith("NOPERM") and "channel" in str(got), got
        assert c.call("PING") == "PONG"


# --------------------------------------------------------------------------
# 8. departed nodes are forgotten with their series; a down node is not


def _series_of(body, addr):
    return [l for l in body.splitlines() if not l.startswith("#") and f'"{addr}"' in l]


def test_node_removed_from_cluster_is_forgotten(tmp_path):
    """A replica removed from the cluster (CLUSTER FORGET on every other
    node, then stopped) leaves the topology: within a bounded time its
    metric series are gone from /metrics, and the other nodes' stay."""
    from cluster_helpers import ClusterRedis
    from conftest import Sluice
    cl = ClusterRedis(tmp_path / "cluster", primaries=3, replicas=1).start()
    mport = free_port()
    s = Sluice(tmp_path / "s", None, cluster_seeds=cl.seeds,
               extra={"metrics_listen": f"127.0.0.1:{mport}", "cluster_refresh_interval": 500})
    try:
        s.start()
        primaries = cl.primaries()
        replica = next(p for p in cl.ports if p not in primaries)
        addr = f"127.0.0.1:{replica}"
        wait_until(lambda: _series_of(hget(mport, "/metrics")[2].decode(), addr), 15 * SLOW,
                   msg="the replica's series")
        with s.raw() as c:
            for i in range(20):
                c.call("SET", f"k{i}", "v")
        gone_id = cl.node_id(replica)
        cl.node_by_port(replica).stop()
        for p in cl.ports:
            if p != replica:
                with cl.node_by_port(p).client() as n:
                    n.execute_command("CLUSTER", "FORGET", gone_id)
        wait_until(lambda: not _series_of(hget(mport, "/metrics")[2].decode(), addr), 40 * SLOW,
                   msg="the removed replica's series to be forgotten")
        body = hget(mport, "/metrics")[2].decode()
        for p in primaries:
            assert _series_of(body, f"127.0.0.1:{p}"), p
        check = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                               capture_output=True, timeout=30)
        assert check.returncode == 0, check.stderr
        with s.raw() as c:
            assert c.call("GET", "k1") == b"v"
    finally:
        s.stop()
        cl.stop()


def test_down_backend_keeps_its_series_at_zero(redis_factory, sluice_factory):
    """The backend, still in the topology but down, keeps
    sluice_backend_up 0 longer than departed nodes are kept: an alert on
    it does not clear itself."""
    import re
    srv, s, mport = metrics_sluice(redis_factory, sluice_factory)
    addr = f"127.0.0.1:{srv.port}"
    wait_until(lambda: hget(mport, "/readyz")[0] == 200, 10 * SLOW)
    srv.stop()
    time.sleep(12 * SLOW)
    body = hget(mport, "/metrics")[2].decode()
    assert re.search(r'^sluice_backend_up\{backend="%s",role="[a-z]+"\} 0$' % re.escape(addr),
                     body, re.M), _series_of(body, addr)
    assert any(l.startswith("sluice_backend_requests_total") for l in _series_of(body, addr))
