"""The operator's controls (issue 35): PROXY PAUSE [WRITE] [TIMEOUT ms] and
PROXY RESUME hold clients' requests in sluice, not in Redis; PROXY DRAIN
fails /readyz, then stops accepting and closes clients between replies,
PROXY UNDRAIN undoes it; PROXY READY NO|YES flips /readyz. Each is
@admin (or +proxy|NAME), audited in the log with the caller's user and
address, and shown in PROXY INFO (# Controls) and /metrics."""

import re
from pathlib import Path
import socket
import time

import pytest

from conftest import DIRECT
from helpers import SLOW, Err, RawConn, free_port, wait_until
from test_metrics import hreq, scrape, value

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own controls")

USERS = """[user admin]
password = adminpw
commands = +@all
keys = *

[user app]
password = apppw
commands = +@all -@dangerous
keys = *
channels = *

[user scripter]
password = scripterpw
commands = +@all
keys = *
channels = *

[user pauser]
password = pauserpw
commands = +@read +proxy|pause +proxy|resume
keys = *
"""


@pytest.fixture
def env(redis_factory, sluice_factory):
    srv = redis_factory()
    mport = free_port()
    s = sluice_factory(srv.port, start=False, users="users.ini",
                       metrics_listen=f"127.0.0.1:{mport}")
    (s.dir / "users.ini").write_text(USERS)
    s.start()
    return srv, s, mport


def login(s, user, timeout=5 * SLOW):
    c = RawConn(s.port, timeout=timeout)
    assert c.call("AUTH", user, f"{user}pw") == "OK"
    return c


def info(c):
    text = c.call("PROXY", "INFO", "controls").decode()
    return dict(re.findall(r"^(\w+):(.*?)\r?$", text, re.M))


def no_reply_within(c, seconds):
    try:
        c.read_reply(timeout=seconds)
    except (socket.timeout, TimeoutError):
        return True
    return False


def test_pause_holds_every_request_in_sluice_until_resume(env):
    srv, s, mport = env
    direct = srv.client()
    admin = login(s, "admin")
    app = login(s, "app")
    assert admin.call("PROXY", "PAUSE") == "OK"
    app.send_command("SET", "k", "1")
    app.send_command("INCR", "k")
    app.send_command("GET", "k")
    late = RawConn(s.port, timeout=5 * SLOW)           # a new connection is held too
    late.send_command("AUTH", "app", "apppw")
    late.send_command("SET", "late", "x")
    assert late.read_reply() == "OK"                    # sluice's own answer goes on
    assert no_reply_within(app, 0.5)
    assert no_reply_within(late, 0.1)
    assert direct.get("k") is None and direct.get("late") is None   # nothing reached Redis
    i = info(admin)
    assert i["paused"] == "all" and i["pause_held_requests"] == "2", i
    body = scrape(mport)
    assert value(body, "sluice_paused") == 1 and value(body, "sluice_pause_held_requests") == 2
    assert admin.call("PROXY", "RESUME") == "OK"
    assert app.read_replies(3) == ["OK", 2, b"2"]      # in order, once
    assert late.read_reply() == "OK"
    assert direct.get("late") == b"x"
    assert info(admin)["paused"] == "no"
    assert value(scrape(mport), "sluice_paused") == 0
    log = s.log_path.read_text()
    assert re.search(r"PROXY PAUSE by user 'admin' from 127\.0\.0\.1:\d+ \(client \d+\): all "
                     r"paused until PROXY RESUME", log), log
    assert re.search(r"PROXY RESUME by user 'admin' from 127\.0\.0\.1:\d+", log), log
    assert "pause ended (PROXY RESUME)" in log and "2 held requests released" in log
    for c in (admin, app, late):
        c.close()


def test_pause_write_lets_reads_through_and_keeps_order(env):
    srv, s, mport = env
    srv.client().set("r", "v")
    admin = login(s, "admin")
    reader = login(s, "app")
    writer = login(s, "scripter")
    assert admin.call("PROXY", "PAUSE", "WRITE") == "OK"
    assert reader.call("GET", "r") == b"v"
    assert reader.call("EXISTS", "r") == 1
    writer.send_command("SET", "w", "1")
    writer.send_command("GET", "w")                    # a read behind a held write waits
    writer.send_command("EVAL", "return redis.call('set', KEYS[1], '2')", 1, "w2")
    assert no_reply_within(writer, 0.5)
    assert info(admin)["paused"] == "write"
    assert admin.call("PROXY", "RESUME") == "OK"
    assert writer.read_replies(3) == ["OK", b"1", "OK"]
    for c in (admin, reader, writer):
        c.close()


def test_pause_timeout_releases_by_itself(env):
    srv, s, mport = env
    admin = login(s, "admin")
    app = login(s, "app")
    assert admin.call("PROXY", "PAUSE", "TIMEOUT", "400") == "OK"
    t0 = time.monotonic()
    assert app.call("SET", "t", "1", timeout=10 * SLOW) == "OK"
    assert time.monotonic() - t0 >= 0.3
    assert info(admin)["paused"] == "no"
    assert "pause ended (TIMEOUT passed)" in s.log_path.read_text()
    app.close()
    admin.close()


def test_a_held_client_that_leaves_is_forgotten(env):
    srv, s, mport = env
    admin = login(s, "admin")
    app = login(s, "app")
    assert admin.call("PROXY", "PAUSE") == "OK"
    app.send_command("SET", "gone", "1")
    wait_until(lambda: info(admin)["pause_held_requests"] == "1", 5 * SLOW)
    app.close()
    wait_until(lambda: info(admin)["pause_held_requests"] == "0", 5 * SLOW)
    assert admin.call("PROXY", "RESUME") == "OK"
    assert srv.client().get("gone") is None            # it never ran
    assert admin.call("PING") == "PONG"
    admin.close()


def test_controls_need_admin_or_their_grant(env):
    srv, s, mport = env
    app = login(s, "app")
    for words in (("PAUSE",), ("RESUME",), ("DRAIN",), ("UNDRAIN",), ("READY", "NO")):
        reply = app.call("PROXY", *words)
        assert isinstance(reply, Err) and reply.startswith("NOPERM"), (words, reply)
    pauser = login(s, "pauser")
    assert pauser.call("PROXY", "PAUSE", "WRITE", "TIMEOUT", "5000") == "OK"
    assert pauser.call("PROXY", "RESUME") == "OK"
    assert pauser.call("PROXY", "DRAIN").startswith("NOPERM")
    assert pauser.call("PROXY", "PAUSE", "SOON") == Err("ERR syntax error")
    assert pauser.call("PROXY", "PAUSE", "TIMEOUT", "-1").startswith("ERR timeout is not")
    assert info(login(s, "admin"))["paused"] == "no"
    app.close()
    pauser.close()


def test_ready_no_and_yes(env):
    srv, s, mport = env
    admin = login(s, "admin")
    assert hreq(mport, "/readyz")[0] == 200
    assert admin.call("PROXY", "READY", "NO") == "OK"
    status, _, body = hreq(mport, "/readyz")
    assert status == 503 and "PROXY READY NO" in body, body
    assert value(scrape(mport), "sluice_ready") == 0
    assert admin.call("PING") == "PONG"                 # it still serves
    assert admin.call("PROXY", "READY", "YES") == "OK"
    assert hreq(mport, "/readyz")[0] == 200
    assert admin.call("PROXY", "READY", "MAYBE") == Err("ERR syntax error: PROXY READY YES|NO")
    admin.close()


def test_drain_fails_readiness_then_closes_clients_between_replies(env):
    srv, s, mport = env
    admin = login(s, "admin", timeout=10 * SLOW)
    idle = login(s, "app")
    busy = login(s, "app", timeout=10 * SLOW)
    assert admin.call("PROXY", "DRAIN", "TIMEOUT", "800") == "OK"
    status, _, body = hreq(mport, "/readyz")
    assert status == 503 and "draining" in body, body
    assert info(admin)["draining"] == "grace"
    assert idle.call("PING") == "PONG"                  # served during the grace
    busy.send_command("BLPOP", "q", "2")                # in flight as the doors close
    time.sleep(1.2 * SLOW)
    assert busy.read_reply(timeout=5 * SLOW) is None    # its reply first, then the close
    for c in (idle, busy, admin):
        with pytest.raises((ConnectionError, EOFError, OSError)):
            c.send_command("PING")
            c.read_reply(timeout=5 * SLOW)
    # No client is accepted while drained: the kernel queues it, nobody serves it.
    queued = RawConn(s.port, timeout=5 * SLOW)
    queued.send_command("PING")
    assert no_reply_within(queued, 0.5)
    log = s.log_path.read_text()
    assert re.search(r"PROXY DRAIN TIMEOUT 800 by user 'admin' from 127\.0\.0\.1:\d+", log), log
    assert "drain: the grace passed; no new connections" in log
    assert value(scrape(mport), "sluice_draining") == 1
    queued.close()


def test_undrain_before_the_close_keeps_every_client(env):
    srv, s, mport = env
    admin = login(s, "admin")
    app = login(s, "app")
    assert admin.call("PROXY", "DRAIN", "TIMEOUT", "600") == "OK"
    assert admin.call("PROXY", "UNDRAIN") == "OK"
    time.sleep(0.8)
    assert hreq(mport, "/readyz")[0] == 200
    assert app.call("PING") == "PONG" and admin.call("PING") == "PONG"
    assert info(admin)["draining"] == "no"
    assert "drain stopped before the close" in s.log_path.read_text()
    app.close()
    admin.close()


def test_proxy_config_shows_the_running_configuration_without_secrets(redis_factory,
                                                                     sluice_factory,
                                                                     tmp_path):
    """PROXY CONFIG: every key as it applies now, as CONFIG GET spells it
    (pairs; a map in RESP3); a password shows as (redacted); a pattern
    narrows it; @admin or +proxy|config only."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "topsecret")
    s = sluice_factory(srv.port, backend_password="topsecret", log_level="warning",
                       read_from="prefer-replica")
    with s.raw() as c:
        assert c.call("AUTH", "topsecret") == "OK"
        pairs = c.call("PROXY", "CONFIG")
        conf = dict(zip(pairs[::2], pairs[1::2]))
        assert conf[b"backend_password"] == b"(redacted)"
        assert b"topsecret" not in b"".join(pairs)
        assert conf[b"backend"] == f"127.0.0.1:{srv.port}".encode()
        assert conf[b"log_level"] == b"warning" and conf[b"read_from"] == b"prefer-replica"
        # maxclients as it runs (lowered to the open-file limit if need be)
        assert int(conf[b"maxclients"]) > 0 and conf[b"users_in_redis"] == b"no"
        assert conf[b"tls_protocols"] == b"TLSv1.2 TLSv1.3"
        assert conf[b"sentinel_password"] == b""
        keys = [k.decode() for k in pairs[::2]]
        cfg_c = (Path(__file__).resolve().parents[2] / "proxy/base/config.c").read_text()
        table = re.findall(r'^\s+\{"(\w+)", config_set_', cfg_c, re.M)
        assert keys == table
        assert c.call("PROXY", "CONFIG", "timeout") == [b"timeout", b"0"]
        narrowed = c.call("PROXY", "CONFIG", "lock_*")
        assert narrowed[::2] == [k.encode() for k in table if k.startswith("lock_")]
        assert c.call("HELLO", "3")
        m = c.call("PROXY", "CONFIG", "timeout")
        assert m == ("map", [b"timeout", b"0"]), m


def test_per_user_request_counters_follow_the_users_file(env):
    """sluice_user_commands_total{user}: each user's requests; a user a
    reload removes loses its series (bounded by the users there are), the
    others' counts go on."""
    srv, s, mport = env
    admin = login(s, "admin")
    app = login(s, "app")
    for _ in range(5):
        assert app.call("PING") == "PONG"
    assert admin.call("SET", "a", "1") == "OK"
    body = scrape(mport)
    assert value(body, "sluice_user_commands_total", user="app") == 5
    assert value(body, "sluice_user_commands_total", user="admin") == 1
    # Each AUTH counts for the user who sent it: not yet logged in.
    assert value(body, "sluice_user_commands_total", user="default") >= 2
    (s.dir / "users.ini").write_text(USERS.split("[user app]")[0])
    assert admin.call("PROXY", "RELOAD") == "OK"
    assert admin.call("GET", "a") == b"1"
    body = scrape(mport)
    assert value(body, "sluice_user_commands_total", user="app") is None
    assert value(body, "sluice_user_commands_total", user="admin") == 3
    assert value(body, "sluice_user_commands_total", user="default") >= 2   # kept
    admin.close()
    app.close()


def test_log_connections_says_who_why_how_long_how_much(redis_factory, sluice_factory):
    """log_connections = yes: a notice line when a client connects and one
    when it goes, with the reason, its address, user, name, duration,
    commands and bytes; off by default (the lines are debug then)."""
    srv = redis_factory()
    s = sluice_factory(srv.port, log_connections="yes", users="users.ini", start=False)
    (s.dir / "users.ini").write_text(USERS)
    s.start()
    c = login(s, "app")
    assert c.call("CLIENT", "SETNAME", "worker-1") == "OK"
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("QUIT") == "OK"
    c.close()
    idle = RawConn(s.port)
    idle.close()

    def lines():
        return [l for l in s.log_path.read_text().splitlines() if "client " in l]
    wait_until(lambda: sum("closed:" in l for l in lines()) >= 2, 5 * SLOW)
    text = "\n".join(lines())
    assert re.search(r"\* client (\d+) connected from 127\.0\.0\.1:\d+$", text, re.M), text
    m = re.search(r"\* client \d+ closed: QUIT; from 127\.0\.0\.1:\d+, user app, name worker-1, "
                  r"\d+\.\d{3} s, (\d+) commands, (\d+) bytes in, (\d+) bytes out", text)
    assert m, text
    assert int(m.group(1)) == 4 and int(m.group(2)) > 60 and int(m.group(3)) >= 20, m.groups()
    assert re.search(r"client \d+ closed: closed by the client; from 127\.0\.0\.1:\d+, "
                     r"user default, name -, ", text), text


def test_log_connections_off_by_default(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with s.raw() as c:
        assert c.call("PING") == "PONG"
    time.sleep(0.2)
    assert "connected from" not in s.log_path.read_text()
