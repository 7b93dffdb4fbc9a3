"""A reload (PROXY RELOAD, SIGHUP) reads sluice.ini too, all or nothing.

A live key (log level and file, client limits and timeouts, maxclients,
the rule and users file names, ...) takes effect without a reconnect: the
clients already connected get the new value. A key only a restart applies
(listen, backend, ...) keeps its running value and is named in the reply
("OK; restart needed for: KEY") and the log. Any error in any of the files
changes nothing, not even the files that loaded well; the reply is the
first FILE:LINE: message. SIGHUP opens the log file afresh (logrotate).
"""

import os
import re
import signal
import time

import pytest

from conftest import DIRECT
from helpers import SLOW, Err, RawConn, free_port, wait_until

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's reload")


# --------------------------------------------------------------------------
# helpers


def set_keys(s, **keys):
    """Rewrite S's sluice.ini with KEYS set (a value None removes the key)."""
    lines = s.config_path.read_text().splitlines()
    out = []
    for line in lines:
        name = line.split("=", 1)[0].strip()
        if name in keys:
            if keys[name] is not None:
                out.append(f"{name} = {keys.pop(name)}")
            else:
                keys.pop(name)
            continue
        out.append(line)
    out += [f"{k} = {v}" for k, v in keys.items() if v is not None]
    s.config_path.write_text("\n".join(out) + "\n")


def reload(conn):
    return conn.call("PROXY", "RELOAD")


def info_field(conn, name):
    text = conn.call("PROXY", "INFO").decode()
    m = re.search(rf"^{name}:(.*?)\r?$", text, re.M)
    return m.group(1) if m else None


def log_text(s):
    return s.log_path.read_text(errors="replace")


@pytest.fixture
def own(redis_factory, sluice_factory):
    srv = redis_factory()
    return sluice_factory(srv.port)


# --------------------------------------------------------------------------
# live keys: the clients already connected get the new value


def test_log_level_applies_at_reload(own):
    s = own
    with s.raw() as c:
        with s.raw() as other:
            other.call("PING")
        assert "connected from" not in log_text(s)
        set_keys(s, log_level="debug")
        assert reload(c) == "OK"
        with s.raw() as other:
            other.call("PING")
    wait_until(lambda: "connected from" in log_text(s), 5 * SLOW,
               msg="a debug line after log_level = debug")


def test_log_file_applies_at_reload(own):
    s = own
    target = s.dir / "moved.log"
    with s.raw() as c:
        set_keys(s, log_file=str(target))
        assert reload(c) == "OK"
        assert target.exists()
        set_keys(s, log_level="debug")
        assert reload(c) == "OK"
    wait_until(lambda: "config reloaded" in target.read_text(), 5 * SLOW,
               msg="log lines in the new log_file")


def test_maxclients_lowered_refuses_the_next_client(own):
    s = own
    with s.raw() as a, s.raw() as b:
        assert a.call("PING") == "PONG" and b.call("PING") == "PONG"
        set_keys(s, maxclients=2)
        assert reload(a) == "OK"
        with s.raw() as third:
            assert third.read_reply(timeout=5 * SLOW) == Err("ERR max number of clients reached")
        assert a.call("PING") == "PONG"           # the two connected stay


def test_timeout_applies_to_a_connected_idle_client(own):
    s = own
    with s.raw() as idle, s.raw() as admin:
        assert idle.call("PING") == "PONG"
        set_keys(s, timeout=1)
        assert reload(admin) == "OK"
        assert idle.is_closed_by_peer(5 * SLOW), "idle client not closed after timeout = 1"


def test_client_query_buffer_limit_applies_to_a_connected_client(own):
    s = own
    with s.raw() as c, s.raw() as admin:
        assert c.call("PING") == "PONG"
        set_keys(s, client_query_buffer_limit="1mb")
        assert reload(admin) == "OK"
        # A bulk longer than the new limit, sent in part: the buffer passes 1mb.
        c.send(b"*2\r\n$4\r\nECHO\r\n$3000000\r\n" + b"x" * 1_500_000)
        assert c.read_reply(timeout=5 * SLOW) == Err(
            "ERR Protocol error: client_query_buffer_limit exceeded")


def test_proto_max_bulk_len_applies_to_a_connected_client(own):
    s = own
    with s.raw() as c, s.raw() as admin:
        assert c.call("PING") == "PONG"
        set_keys(s, proto_max_bulk_len="1mb")
        assert reload(admin) == "OK"
        c.send(b"*2\r\n$4\r\nECHO\r\n$2000000\r\n")
        assert c.read_reply(timeout=5 * SLOW) == Err("ERR Protocol error: invalid bulk length")


def test_rules_file_name_applies_at_reload(own):
    s = own
    (s.dir / "r.ini").write_text("[limit gets]\ncommands = GET\nrate = 1/h\nburst = 1\n")
    with s.raw() as c:
        assert c.call("GET", "k") is None
        assert c.call("GET", "k") is None
        set_keys(s, rules="r.ini")
        assert reload(c) == "OK"
        assert c.call("GET", "k") is None
        assert c.call("GET", "k").startswith("THROTTLED rule gets")


def test_users_file_name_applies_at_reload(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, users="u1.ini", start=False)
    (s.dir / "u1.ini").write_text("[user admin]\npassword = one\ncommands = +@all\nkeys = *\n")
    (s.dir / "u2.ini").write_text("[user admin]\npassword = two\ncommands = +@all\nkeys = *\n")
    s.start()
    with s.raw() as c:
        assert c.call("AUTH", "admin", "one") == "OK"
        set_keys(s, users="u2.ini")
        assert reload(c) == "OK"
        assert c.call("AUTH", "admin", "one").startswith("WRONGPASS")
        assert c.call("AUTH", "admin", "two") == "OK"


def test_reloads_are_counted(own):
    s = own
    with s.raw() as c:
        assert reload(c) == "OK"
        set_keys(s, maxclients="many")
        assert isinstance(reload(c), Err)
        assert info_field(c, "config_reloads_ok") == "1"
        assert info_field(c, "config_reloads_error") == "1"


# --------------------------------------------------------------------------
# restart-only keys: named in the reply and the log, the running value stays


def test_changed_listen_is_named_and_keeps_running_value(own):
    s = own
    new_port = free_port()
    with s.raw() as c:
        set_keys(s, listen=f"127.0.0.1:{new_port}", log_level="debug")
        assert reload(c) == "OK; restart needed for: listen"
        with s.raw() as again:                        # the old address still serves
            assert again.call("PING") == "PONG"
        with pytest.raises(OSError):
            RawConn(new_port, timeout=1).close()
    text = log_text(s)
    assert "listen" in text and "only a restart applies" in text, text
    assert "connected from" in text                   # the live key in the same file applied


@pytest.mark.parametrize("key, value", [
    ("backend_connections", "3"),
    ("users_in_redis", "yes"),
    ("backend_password", "secret"),
    ("users", "users.ini"),        # turning the users file on (another name would be live)
])
def test_changed_restart_only_key_is_named(own, key, value):
    s = own
    with s.raw() as c:
        set_keys(s, **{key: value})
        assert reload(c) == f"OK; restart needed for: {key}"
        assert reload(c) == f"OK; restart needed for: {key}"   # still not applied
        assert c.call("SET", "k", "v") == "OK"


def test_several_restart_only_keys_are_named_together(own):
    s = own
    with s.raw() as c:
        set_keys(s, backend=f"127.0.0.1:{free_port()}", backend_connections=2)
        assert reload(c) == "OK; restart needed for: backend, backend_connections"
        assert c.call("SET", "k", "v") == "OK"       # still the running backend


# --------------------------------------------------------------------------
# all or nothing


def test_bad_users_file_keeps_the_good_config_change_out(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, users="u.ini", start=False)
    (s.dir / "u.ini").write_text("[user admin]\npassword = pw\ncommands = +@all\nkeys = *\n")
    (s.dir / "bad.ini").write_text("[user admin]\npassword = pw\nbogus = 1\n")
    s.start()
    with s.raw() as c:
        assert c.call("AUTH", "admin", "pw") == "OK"
        set_keys(s, log_level="debug", maxclients=1, users="bad.ini")
        reply = reload(c)
        assert reply == Err(f"ERR not reloaded: {s.dir / 'bad.ini'}:3: unknown key 'bogus' "
                            f"in [user admin]"), reply
        with s.raw() as other:                        # maxclients = 1 did not apply
            assert other.call("AUTH", "admin", "pw") == "OK"
        assert "connected from" not in log_text(s)     # log_level = debug did not apply
        assert info_field(c, "users_file") == str(s.dir / "u.ini")


def test_bad_rule_file_keeps_the_users_file_unchanged(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, users="u.ini", rules="r.ini", start=False)
    (s.dir / "u.ini").write_text("[user admin]\npassword = pw\ncommands = +@all\nkeys = *\n")
    (s.dir / "r.ini").write_text("")
    s.start()
    with s.raw() as c:
        assert c.call("AUTH", "admin", "pw") == "OK"
        (s.dir / "u.ini").write_text("[user admin]\npassword = new\ncommands = +@all\nkeys = *\n")
        (s.dir / "r.ini").write_text("[limit x]\nrate = fast\n")
        reply = reload(c)
        assert reply == Err(f"ERR not reloaded: {s.dir / 'r.ini'}:2: rate: 'fast' is not a "
                            f"rate (N/s, N/m or N/h)"), reply
        assert c.call("AUTH", "admin", "pw") == "OK"    # the old users stay
        assert c.call("AUTH", "admin", "new").startswith("WRONGPASS")


def test_failed_reload_logs_every_error_of_every_file(redis_factory, sluice_factory):
    """Errors in sluice.ini, the rule file and the users file at once: the
    log names each of them (as sluice -t does), not only the first file's."""
    srv = redis_factory()
    s = sluice_factory(srv.port, users="u.ini", rules="r.ini", start=False)
    (s.dir / "u.ini").write_text("[user admin]\npassword = pw\ncommands = +@all\nkeys = *\n")
    (s.dir / "r.ini").write_text("")
    s.start()
    with s.raw() as c:
        assert c.call("AUTH", "admin", "pw") == "OK"
        (s.dir / "u.ini").write_text("[user admin]\npassword = pw\nbogus = 1\n")
        (s.dir / "r.ini").write_text("[limit x]\nrate = fast\n")
        set_keys(s, timeout="soon")
        reply = reload(c)
        assert isinstance(reply, Err) and "not reloaded" in reply, reply
        text = log_text(s)
        assert f"{s.config_path}:" in text and "timeout" in text, text
        assert f"{s.dir / 'r.ini'}:2: rate: 'fast' is not a rate" in text, text
        assert f"{s.dir / 'u.ini'}:3: unknown key 'bogus'" in text, text
        assert c.call("AUTH", "admin", "pw") == "OK"    # nothing changed


def test_bad_sluice_ini_changes_nothing(own):
    s = own
    with s.raw() as c:
        set_keys(s, log_level="debug", timeout="soon")
        reply = reload(c)
        assert isinstance(reply, Err) and f"{s.config_path}:" in reply and "timeout" in reply, \
            reply
        with s.raw() as other:
            other.call("PING")
        assert "connected from" not in log_text(s)
        assert "reload failed; nothing changed" in log_text(s)


def test_unopenable_log_file_changes_nothing(own):
    s = own
    with s.raw() as c:
        set_keys(s, log_file=str(s.dir / "no" / "such" / "dir.log"), maxclients=1)
        reply = reload(c)
        assert isinstance(reply, Err) and "log_file" in reply, reply
        with s.raw() as other:
            assert other.call("PING") == "PONG"


# --------------------------------------------------------------------------
# SIGHUP opens the log file afresh (logrotate without copytruncate)


def test_sighup_reopens_the_log_file(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False)
    logfile = s.dir / "file.log"
    set_keys(s, log_file=str(logfile))
    s.start()
    wait_until(lambda: logfile.exists() and "started" in logfile.read_text(), 5 * SLOW,
               msg="start logged to log_file")
    rotated = s.dir / "file.log.1"
    os.rename(logfile, rotated)
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: logfile.exists() and "config reloaded" in logfile.read_text(),
               5 * SLOW, msg="a new log file at the old path after SIGHUP")
    assert "config reloaded" not in rotated.read_text()
    with s.raw() as c:
        assert c.call("PING") == "PONG"
