"""Clients authenticate to sluice (issue 10): the users file, AUTH and HELLO
answered by sluice, NOAUTH/NOPERM with Redis's own replies, reload, the
backend password standing in for a users file, and what a hostile client
could try (guessing, pipelining past the gate, a removed user's session).

The replies are checked against a real redis-server given the same users
with ACL SETUSER: what sluice answers must be what Redis answers."""

import os
import subprocess

import pytest
import redis

from conftest import auth_servers, parse_info, require_sluice_bin
from helpers import Err, RawConn, encode_command, free_port, raw_replies, wait_until

BACKEND_PW = "backend-pw"

USERS_INI = """\
[user default]
password = secret

[user app]
password = apppw
commands = +@all -@dangerous
keys = app:*
channels = news.*

[user ro]
password = ropw
password = ropw2
commands = +@read +ping
keys = *

[user admin]
password = sha256:16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01
commands = +@all
keys = *
channels = *

[user off]
password = offpw
commands = +@all
keys = *
enabled = no
"""

# The same users, for a real redis-server (admin's password is "admin-secret").
ACL_USERS = [
    ["default", "resetpass", ">secret", "-@all", "resetkeys", "resetchannels"],
    ["app", "on", ">apppw", "+@all", "-@dangerous", "~app:*", "resetchannels", "&news.*"],
    ["ro", "on", ">ropw", ">ropw2", "+@read", "+ping", "~*", "resetchannels"],
    ["admin", "on", ">admin-secret", "+@all", "~*", "&*"],
    ["off", "off", ">offpw", "+@all", "~*", "resetchannels"],
]


@pytest.fixture(scope="module")
def auth_env(module_tmp):
    yield from auth_servers(module_tmp, "auth", USERS_INI, ACL_USERS, BACKEND_PW)


def _same_as_redis(auth_env, script):
    s, ref, _ = auth_env
    got = raw_replies(s.port, script)
    want = raw_replies(ref.port, script)
    for cmd, g, w in zip(script, got, want):
        assert g == w, f"{cmd}: sluice {g!r} vs redis {w!r}"


SCRIPTS = {
    "no_auth_read": [("GET", "x")],
    "no_auth_ping": [("PING",)],
    "no_auth_write": [("SET", "x", "1")],
    "no_auth_admin": [("CONFIG", "GET", "requirepass")],
    "no_auth_flushall": [("FLUSHALL",)],
    "no_auth_multi": [("MULTI",)],
    "no_auth_subscribe": [("SUBSCRIBE", "ch")],
    "no_auth_eval": [("EVAL", "return 1", "0")],
    "no_auth_client_setname": [("CLIENT", "SETNAME", "x")],
    "no_auth_select": [("SELECT", "1")],
    "no_auth_blocking": [("BLPOP", "l", "1")],
    "no_auth_unknown_command": [("NOSUCHCMD", "a", "b\r\nc")],
    "no_auth_arity": [("GET",)],
    "no_auth_container_arity": [("CLIENT",)],
    "no_auth_unknown_subcommand": [("CONFIG", "NOSUCH")],
    "auth_wrong": [("AUTH", "wrong"), ("GET", "x")],
    "auth_unknown_user": [("AUTH", "nobody", "x"), ("GET", "x")],
    "auth_syntax": [("AUTH", "a", "b", "c")],
    "auth_arity": [("AUTH",)],
    "auth_disabled_user": [("AUTH", "off", "offpw"), ("GET", "x")],
    "hello_before_auth": [("HELLO", "2")],
    "hello_bad_version": [("HELLO", "4")],
    "hello_not_integer": [("HELLO", "x")],
    "hello_leading_zero": [("HELLO", "03"), ("HELLO", "-0"), ("HELLO", "03", "AUTH", "app", "apppw"),
                           ("GET", "app:1")],
    "hello_bad_option": [("HELLO", "2", "FOO")],
    "hello_auth_short": [("HELLO", "2", "AUTH", "app")],
    "hello_auth_wrong": [("HELLO", "2", "AUTH", "app", "nope"), ("GET", "app:1")],
    "hello_setname_before_auth": [("HELLO", "2", "SETNAME", "x")],
    "quit": [("QUIT",)],
    "app_permissions": [
        ("AUTH", "app", "apppw"), ("SET", "app:1", "v"), ("GET", "app:1"),
        ("SET", "other", "v"), ("GET", "other"), ("FLUSHALL",), ("CONFIG", "GET", "maxmemory"),
        ("KEYS", "*"), ("MGET", "app:1", "other"),
        ("MSET", "app:2", "a", "other", "b"), ("DEL", "app:1", "app:2"),
        ("EVAL", "return 1", "1", "other"),   # refused either way; app's own keys: see
                                              # test_auth_hostile (scripts need every permission)
        ("PUBLISH", "news.x", "m"), ("PUBLISH", "other", "m"),
        ("SMOVE", "app:s", "other", "m"), ("RENAME", "app:x", "other"),
        ("PING",), ("CLIENT", "GETNAME"), ("ACL", "WHOAMI"),
    ],
    "wrong_password_keeps_user": [
        ("AUTH", "app", "apppw"), ("AUTH", "app", "bad"), ("SET", "app:2", "v"),
        ("AUTH", "ro", "bad"), ("GET", "other"), ("DEL", "app:2"),
    ],
    "readonly_user": [
        ("AUTH", "ro", "ropw2"), ("SET", "a", "b"), ("GET", "a"), ("PING",),
        ("HGETALL", "h"), ("CONFIG", "SET", "maxmemory", "0"), ("CLIENT", "ID"),
    ],
    "subcommand_denied": [("AUTH", "ro", "ropw"), ("CONFIG", "GET", "x"), ("OBJECT", "ENCODING", "k")],
    "reset_logs_out": [("AUTH", "app", "apppw"), ("RESET",), ("GET", "app:1")],
    "auth_right_after_reset": [
        ("AUTH", "app", "apppw"), ("SELECT", "0"), ("RESET",), ("AUTH", "app", "apppw"),
        ("SET", "app:r", "1"), ("ACL", "WHOAMI"),
    ],
    "multi_with_refused_command": [
        ("AUTH", "app", "apppw"), ("MULTI",), ("SET", "app:1", "1"), ("FLUSHALL",),
        ("EXEC",), ("GET", "app:1"),
    ],
    "multi_with_refused_key": [
        ("AUTH", "app", "apppw"), ("MULTI",), ("SET", "app:1", "2"), ("SET", "x", "1"),
        ("EXEC",),
    ],
    "default_user_has_no_commands": [("AUTH", "secret"), ("GET", "x"), ("PING",)],
    "auth_default_by_name": [("AUTH", "default", "secret"), ("AUTH", "default", "bad")],
    "subscribe_denied_channel": [("AUTH", "app", "apppw"), ("SUBSCRIBE", "other")],
    "psubscribe_pattern_must_equal": [
        ("AUTH", "app", "apppw"), ("PSUBSCRIBE", "news.x*"),
    ],
}


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(auth_env, name, pipelined):
    """Every reply in this area is the one Redis 7.0 gives for the same
    users and the same request, sent one at a time or all in one write
    (where a reply sluice writes itself must not overtake Redis's)."""
    s, ref, backend = auth_env
    ref.client(username="admin", password="admin-secret").flushall()
    backend.client(password=BACKEND_PW).flushall()
    if not pipelined:
        _same_as_redis(auth_env, SCRIPTS[name])
        return
    script = SCRIPTS[name]
    data = b"".join(encode_command(*cmd) for cmd in script)
    out = []
    for port in (s.port, ref.port):
        with RawConn(port, timeout=10) as c:
            c.send(data)
            got = []
            for _ in script:
                try:
                    got.append(c.read_reply_raw())
                except (EOFError, ConnectionError):
                    break   # QUIT, or a protocol error: both close
            out.append(got)
    assert out[0] == out[1]


def test_pipelined_commands_after_failed_auth_are_refused(auth_env):
    """A client cannot pipeline a command behind AUTH and have it run before
    AUTH's outcome is known: each is judged with the user of that moment."""
    s, ref, _ = auth_env
    data = b"".join(encode_command(*c) for c in [
        ("AUTH", "app", "bad"), ("SET", "app:p", "1"), ("AUTH", "app", "apppw"),
        ("SET", "app:p", "2"), ("AUTH", "nobody", "x"), ("GET", "app:p")])
    for port in (s.port, ref.port):
        with RawConn(port, timeout=10) as c:
            c.send(data)
            got = [c.read_reply() for _ in range(6)]
        assert isinstance(got[0], Err) and got[0].startswith("WRONGPASS")
        assert got[1] == Err("NOAUTH Authentication required.")
        assert got[2:4] == ["OK", "OK"]
        assert isinstance(got[4], Err) and got[4].startswith("WRONGPASS")
        assert got[5] == b"2"


def test_hello_authenticates_and_sets_name(auth_env):
    s, _, _ = auth_env
    with s.raw() as c:
        reply = c.call("HELLO", "2", "AUTH", "app", "apppw", "SETNAME", "worker-1")
        fields = dict(zip(reply[::2], reply[1::2]))
        assert fields[b"server"] == b"redis"
        assert fields[b"proto"] == 2
        assert fields[b"id"] == c.call("CLIENT", "ID")
        assert fields[b"version"].startswith(b"7.")
        assert c.call("CLIENT", "GETNAME") == b"worker-1"
        assert c.call("SET", "app:h", "1") == "OK"
        assert c.call("SET", "nope", "1") == Err(
            "NOPERM this user has no permissions to access one of the keys used as arguments")


def test_redis_cli_user_pass(auth_env):
    s, _, _ = auth_env
    def cli(*args):
        return subprocess.run(["redis-cli", "-p", str(s.port), *args], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    assert cli("--user", "app", "--pass", "apppw", "--no-auth-warning",
               "SET", "app:cli", "1") == "OK"
    assert cli("--user", "app", "--pass", "apppw", "--no-auth-warning", "FLUSHALL") == (
        "NOPERM this user has no permissions to run the 'flushall' command")
    assert cli("-a", "secret", "--no-auth-warning", "GET", "app:cli").startswith("NOPERM")
    assert cli("GET", "app:cli") == "NOAUTH Authentication required."
    assert cli("--user", "admin", "--pass", "admin-secret", "--no-auth-warning",
               "GET", "app:cli") == "1"


def test_redis_py_clients(auth_env):
    s, _, _ = auth_env
    app = s.client(username="app", password="apppw")
    assert app.set("app:py", "1") and app.get("app:py") == b"1"
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.get("other")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGPASS"):
        s.client(username="app", password="wrong").ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        s.client().get("app:py")
    app.close()


def test_refused_commands_never_reach_redis(auth_env):
    """NOAUTH and NOPERM are sluice's: Redis runs none of those commands."""
    s, _, backend = auth_env
    direct = backend.client(password=BACKEND_PW)
    direct.flushall()
    before = direct.info("commandstats")
    with s.raw() as c:
        for _ in range(20):
            c.call("FLUSHALL")
            c.call("CONFIG", "GET", "requirepass")
        c.call("AUTH", "app", "apppw")
        for _ in range(20):
            c.call("FLUSHALL")
            c.call("SET", "secret:key", "v")
            c.call("CONFIG", "SET", "maxmemory", "1")
    after = direct.info("commandstats")
    for name in ("cmdstat_flushall", "cmdstat_config|get", "cmdstat_config|set", "cmdstat_set"):
        assert after.get(name, {}).get("calls", 0) == before.get(name, {}).get("calls", 0), name
    assert direct.get("secret:key") is None


def test_config_get_requirepass_needs_the_password(auth_env):
    """The leak of the issue: CONFIG GET requirepass without logging in."""
    s, _, _ = auth_env
    with s.raw() as c:
        assert c.call("CONFIG", "GET", "requirepass") == Err("NOAUTH Authentication required.")
        assert c.call("AUTH", "app", "apppw") == "OK"
        assert c.call("CONFIG", "GET", "requirepass") == Err(
            "NOPERM this user has no permissions to run the 'config|get' command")


def test_authenticated_clients_share_the_pool(auth_env):
    """50 clients that log in as different users use the shared
    connections: Redis sees no connection per client."""
    s, _, backend = auth_env
    direct = backend.client(password=BACKEND_PW)

    def redis_connections():
        return len([cl for cl in direct.client_list() if cl.get("cmd") != "client|list"])
    before = redis_connections()   # the pool and the ready spare connections
    conns = []
    try:
        for i in range(50):
            c = RawConn(s.port, timeout=10)
            conns.append(c)
            user, pw = (("app", "apppw"), ("ro", "ropw"), ("admin", "admin-secret"))[i % 3]
            assert c.call("AUTH", user, pw) == "OK"
            assert c.call("GET", "app:k") is None
        assert redis_connections() <= before, direct.client_list()   # none per client
    finally:
        for c in conns:
            c.close()


def test_proxy_commands_need_admin(auth_env):
    s, _, _ = auth_env
    with s.raw() as c:
        assert c.call("PROXY", "PING") == "PONG"
        assert c.call("PROXY", "INFO") == Err("NOAUTH Authentication required.")
        c.call("AUTH", "app", "apppw")
        assert c.call("PROXY", "PING") == "PONG"
        assert c.call("PROXY", "RELOAD") == Err(
            "NOPERM this user has no permissions to run the 'proxy|reload' command")
        assert c.call("PROXY", "INFO") == Err(
            "NOPERM this user has no permissions to run the 'proxy|info' command")
        c.call("AUTH", "admin", "admin-secret")
        info = parse_info(c.call("PROXY", "INFO"))
        assert info["auth_mode"] == "users_file"
        assert "secret" not in c.call("PROXY", "INFO").decode()
        assert c.call("PROXY", "RELOAD") == "OK"


def test_failed_logins_counted_and_logged_without_password(auth_env):
    s, _, _ = auth_env
    with s.raw() as c:
        c.call("AUTH", "admin", "admin-secret")
        before = parse_info(c.call("PROXY", "INFO"))
    with s.raw() as c:
        c.send(b"".join(encode_command("AUTH", "app", f"guess-{i}") for i in range(300)))
        for _ in range(300):
            assert c.read_reply().startswith("WRONGPASS")
        c.call("AUTH", "who?", "guess-x")
    with s.raw() as c:
        c.call("AUTH", "admin", "admin-secret")
        after = parse_info(c.call("PROXY", "INFO"))
    assert int(after["auth_failures_user_app"]) - int(before["auth_failures_user_app"]) == 300
    assert int(after["auth_failures_unknown_user"]) > int(before["auth_failures_unknown_user"])
    log = s.log_path.read_text()
    assert "guess-" not in log
    lines = [l for l in log.splitlines() if "authentication failed" in l]
    assert 1 <= len(lines) <= 5   # at most once a second, not 301 lines


def test_guessing_does_not_slow_other_clients(auth_env):
    """A client hammering AUTH does not stall a logged-in one."""
    s, _, _ = auth_env
    with s.raw() as guesser, s.raw() as worker:
        worker.call("AUTH", "app", "apppw")
        guesser.send(b"".join(encode_command("AUTH", "admin", f"g{i}") for i in range(2000)))
        for i in range(50):
            assert worker.call("SET", "app:w", str(i)) == "OK"
        for _ in range(2000):
            guesser.read_reply()


def test_sluice_t_reports_users_file_errors(tmp_path):
    (tmp_path / "users.ini").write_text(
        "[user a]\npassword = x\nfrobnicate = 1\ncommands = +nosuchcmd\n")
    (tmp_path / "sluice.ini").write_text(
        "[proxy]\nbackend = 127.0.0.1:1\nusers = users.ini\n")
    from conftest import require_sluice_bin
    out = subprocess.run([require_sluice_bin(), "-t", "-c", str(tmp_path / "sluice.ini")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert f"{tmp_path / 'users.ini'}:3:" in out.stderr
    assert f"{tmp_path / 'users.ini'}:4:" in out.stderr


# --------------------------------------------------------------------------
# reload, with its own sluice


@pytest.fixture
def reload_env(redis_factory, sluice_factory, tmp_path):
    srv = redis_factory()
    d = tmp_path / "reload"
    d.mkdir()
    users = d / "users.ini"
    users.write_text(USERS_INI + "\n[user tmp]\npassword = tmppw\ncommands = +@all\nkeys = *\n")
    s = sluice_factory(srv.port, users=str(users))
    return s, users


def _admin_reload(s):
    with s.raw() as c:
        c.call("AUTH", "admin", "admin-secret")
        return c.call("PROXY", "RELOAD")


def test_reload_removes_user_and_closes_its_connections(reload_env):
    s, users = reload_env
    tmp_conn = s.raw()
    app_conn = s.raw()
    try:
        assert tmp_conn.call("AUTH", "tmp", "tmppw") == "OK"
        assert app_conn.call("AUTH", "app", "apppw") == "OK"
        users.write_text(USERS_INI + "\n[user new]\npassword = newpw\ncommands = +ping\n")
        assert _admin_reload(s) == "OK"
        with pytest.raises((EOFError, ConnectionError, OSError)):
            tmp_conn.call("PING")
        assert app_conn.call("SET", "app:r", "1") == "OK"   # others keep their session
        with s.raw() as c:
            assert c.call("AUTH", "tmp", "tmppw") == Err(
                "WRONGPASS invalid username-password pair or user is disabled.")
            assert c.call("AUTH", "new", "newpw") == "OK"
            assert c.call("PING") == "PONG"
            assert c.call("GET", "x") == Err(
                "NOPERM this user has no permissions to run the 'get' command")
    finally:
        tmp_conn.close()
        app_conn.close()


def test_reload_changes_permissions_of_connected_clients(reload_env):
    s, users = reload_env
    with s.raw() as c:
        assert c.call("AUTH", "app", "apppw") == "OK"
        assert c.call("SET", "app:1", "v") == "OK"
        users.write_text(USERS_INI.replace("keys = app:*", "keys = other:*"))
        assert _admin_reload(s) == "OK"
        assert c.call("SET", "app:1", "v").startswith("NOPERM")
        assert c.call("SET", "other:1", "v") == "OK"


def test_reload_bad_file_changes_nothing(reload_env):
    s, users = reload_env
    with s.raw() as c:
        assert c.call("AUTH", "tmp", "tmppw") == "OK"
        users.write_text(USERS_INI + "\n[user tmp]\nbogus = 1\n")
        reply = _admin_reload(s)
        assert isinstance(reply, Err) and f"{users}:" in reply, reply
        assert c.call("PING") == "PONG"           # still logged in as tmp
    with s.raw() as c:
        assert c.call("AUTH", "tmp", "tmppw") == "OK"


def test_sighup_reloads_users(reload_env):
    s, users = reload_env
    users.write_text(USERS_INI + "\n[user late]\nnopass = yes\ncommands = +ping\n")
    s.proc.send_signal(1)
    def late_ok():
        with s.raw() as c:
            return c.call("AUTH", "late", "anything") == "OK"
    wait_until(late_ok, 10, msg="SIGHUP loaded the new user")


# --------------------------------------------------------------------------
# without a users file


def test_backend_password_alone_guards_sluice(redis_factory, sluice_factory):
    """backend_password and no users file: clients need Redis's password,
    and with it have every permission, as they had with Redis."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "pw")
    s = sluice_factory(srv.port, backend_password="pw")
    with s.raw() as c:
        assert c.call("FLUSHALL") == Err("NOAUTH Authentication required.")
        assert c.call("CONFIG", "GET", "requirepass") == Err("NOAUTH Authentication required.")
        assert c.call("AUTH", "nope").startswith("WRONGPASS")
        assert c.call("AUTH", "pw") == "OK"
        assert c.call("SET", "k", "v") == "OK"
        assert c.call("CONFIG", "GET", "maxmemory")[0] == b"maxmemory"
    r = s.client(password="pw")
    assert r.get("k") == b"v"
    r.close()


def test_redis_password_alone_guards_sluices_own_commands(redis_factory, sluice_factory):
    """No users file and no backend_password, in front of a Redis that
    asks for a password: AUTH goes to Redis, and what sluice answers
    itself (PROXY, CLIENT SETNAME/GETNAME/ID, ACL WHOAMI, HELLO) waits for
    the login too, with Redis's replies, also pipelined behind the AUTH."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "pw")
    s = sluice_factory(srv.port)
    script = [("PROXY", "INFO"), ("PROXY", "RELOAD"), ("PROXY", "RULES"), ("CLIENT", "ID"),
              ("CLIENT", "SETNAME", "x"), ("CLIENT", "GETNAME"), ("ACL", "WHOAMI"),
              ("HELLO", "3"), ("CLIENT", "REPLY", "ON"), ("PROXY", "NOSUCH")]
    with s.raw() as c:
        wait_until(lambda: c.call("GET", "k") == Err("NOAUTH Authentication required."),
                   5, msg="Redis asks for a password")
        for cmd in script:
            got = c.call(*cmd)
            assert got == Err("NOAUTH Authentication required.") or (
                cmd[0] == "HELLO" and got.startswith("NOAUTH HELLO must be called")), cmd
        assert c.call("PROXY", "PING") == "PONG"
        assert c.call("CLIENT", "GETNAME", "x").startswith("ERR wrong number of arguments")
        c.send(encode_command("AUTH", "pw") + encode_command("CLIENT", "SETNAME", "n")
               + encode_command("CLIENT", "GETNAME") + encode_command("ACL", "WHOAMI")
               + encode_command("PROXY", "RULES"))
        assert c.read_replies(5) == ["OK", "OK", b"n", b"default", []]
        assert c.call("RESET") == "RESET"
        assert c.call("CLIENT", "ID") == Err("NOAUTH Authentication required.")
        assert c.call("AUTH", "default", "pw") == "OK"
        assert isinstance(c.call("CLIENT", "ID"), int)


def test_redis_password_alone_limits_clients_before_login(redis_factory, sluice_factory):
    """The same setup: a client that has not logged in to Redis gets
    Redis's small limits from sluice itself (Redis would otherwise apply
    them to sluice's shared connection, and close it under everyone); a
    command pipelined behind a right AUTH has no such limit, as in Redis."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "pw")
    s = sluice_factory(srv.port)
    big = "v" * 20000
    with s.raw() as other:
        wait_until(lambda: other.call("GET", "k") == Err("NOAUTH Authentication required."),
                   5, msg="Redis asks for a password")
        for port in (s.port, srv.port):
            with RawConn(port, timeout=10) as c:
                c.send(encode_command(*(["ECHO"] + ["a"] * 10)))
                assert c.read_all_until_eof(timeout=10) == (
                    b"-ERR Protocol error: unauthenticated multibulk length\r\n", True)
        assert other.call("GET", "k") == Err("NOAUTH Authentication required.")
        for port in (s.port, srv.port):
            with RawConn(port, timeout=10) as c:
                c.send(encode_command("AUTH", "pw") + encode_command("SET", "k", big)
                       + encode_command("STRLEN", "k") + encode_command("CLIENT", "SETNAME", "n"))
                assert c.read_replies(4) == ["OK", "OK", 20000, "OK"]
                c.send(encode_command("AUTH", "bad") + encode_command("SET", "k", big))
                assert c.read_reply().startswith("WRONGPASS")
                assert c.read_reply() == "OK"   # still logged in as before


def test_default_without_password_needs_no_login(redis_factory, sluice_factory, tmp_path):
    """A nopass default user: clients run as default at once; AUTH
    <password> is refused as Redis refuses it."""
    srv = redis_factory()
    ref = redis_factory()
    ref.client().execute_command("ACL", "SETUSER", "u", "on", ">upw", "+@all", "~*")
    ref.client().execute_command("ACL", "SETUSER", "default", "nopass", "-@all", "+get",
                                 "+auth", "resetkeys", "~pub:*")
    users = tmp_path / "nopass-users.ini"
    users.write_text("[user default]\nnopass = yes\ncommands = +get\nkeys = pub:*\n\n"
                     "[user u]\npassword = upw\ncommands = +@all\nkeys = *\n")
    s = sluice_factory(srv.port, users=str(users))
    script = [("GET", "pub:1"), ("GET", "x"), ("SET", "pub:1", "v"), ("AUTH", "any"),
              ("AUTH", "default", "any"), ("AUTH", "u", "upw"), ("SET", "x", "1"), ("RESET",),
              ("SET", "x", "1")]
    got = raw_replies(s.port, script)
    want = raw_replies(ref.port, script)
    assert got == want


def test_disabled_default_requires_login(redis_factory, sluice_factory, tmp_path):
    srv = redis_factory()
    users = tmp_path / "u.ini"
    users.write_text("[user default]\nnopass = yes\nenabled = no\ncommands = +@all\nkeys = *\n")
    s = sluice_factory(srv.port, users=str(users))
    with s.raw() as c:
        assert c.call("GET", "x") == Err("NOAUTH Authentication required.")
        # As Redis: a nopass default refuses AUTH <password>, disabled or not.
        assert c.call("AUTH", "x").startswith("ERR AUTH <password> called without")
        assert c.call("AUTH", "default", "x").startswith("WRONGPASS")


def _sluice_with_rule(redis_factory, sluice_factory, tmp_path, rule_text):
    """A sluice with USERS_INI and a rule file holding RULE_TEXT."""
    srv = redis_factory()
    users = tmp_path / "users.ini"
    users.write_text(USERS_INI)
    rules = tmp_path / "rules.ini"
    rules.write_text(rule_text)
    return sluice_factory(srv.port, users=str(users), rules=str(rules))


def test_match_user_rules_see_the_authenticated_user(redis_factory, sluice_factory, tmp_path):
    """Rules match the user sluice authenticated; a refused command takes
    no token."""
    s = _sluice_with_rule(redis_factory, sluice_factory, tmp_path,
                          "[limit app-writes]\nmatch_user = app\ncommands = SET\nrate = 1/h\n"
                          "burst = 2\nper = user\naction = reject\n")
    with s.raw() as c:
        c.call("AUTH", "app", "apppw")
        for _ in range(5):   # refused by permissions: no tokens taken
            assert c.call("SET", "other", "1").startswith("NOPERM")
        assert c.call("SET", "app:1", "1") == "OK"
        assert c.call("SET", "app:1", "1") == "OK"
        assert c.call("SET", "app:1", "1").startswith("THROTTLED")
    with s.raw() as c:
        c.call("AUTH", "ro", "ropw")
        assert c.call("GET", "app:1") == b"1"


def test_lock_verbs_follow_permissions(redis_factory, sluice_factory, tmp_path):
    srv = redis_factory()
    users = tmp_path / "users.ini"
    users.write_text(USERS_INI + "\n[user locker]\npassword = l\ncommands = +@lock +get\n"
                     "keys = app:*\n")
    s = sluice_factory(srv.port, users=str(users))
    with s.raw() as c:
        assert c.call("LOCK", "app:l", "1000") == Err("NOAUTH Authentication required.")
        c.call("AUTH", "locker", "l")
        token = c.call("LOCK", "app:l", "1000")
        assert isinstance(token, bytes), token
        assert c.call("LOCK", "other:l", "1000") == Err(
            "NOPERM this user has no permissions to access one of the keys used as arguments")
        assert c.call("UNLOCK", "app:l", "OWNER", token) == 0   # released
        c.call("AUTH", "ro", "ropw")
        assert c.call("LOCK", "app:l", "1000") == Err(
            "NOPERM this user has no permissions to run the 'lock' command")


def test_debug_from_a_remote_client_is_refused(auth_env):
    """Redis allows DEBUG and MODULE LOAD (enable-debug-command local) only
    from a local connection, and every connection of sluice's is local to
    Redis: so sluice refuses them for clients that are not, with Redis's
    reply, before anything else (an admin too)."""
    s, ref, _ = auth_env
    import socket as socketlib
    from helpers import parse_reply
    sock = socketlib.socket()
    sock.settimeout(10)
    sock.bind(("127.0.0.2", 0))
    sock.connect(("127.0.0.1", s.port))
    try:
        sock.sendall(encode_command("AUTH", "admin", "admin-secret") +
                     encode_command("DEBUG", "SLEEP", "0") +
                     encode_command("MODULE", "LOAD", "/nonexistent.so") +
                     encode_command("PING"))
        buf = b""
        replies = []
        while len(replies) < 4:
            buf += sock.recv(65536)
            replies, pos = [], 0
            try:
                while len(replies) < 4:
                    v, pos = parse_reply(buf, pos)
                    replies.append(v)
            except Exception:
                continue
    finally:
        sock.close()
    assert replies[0] == "OK"
    assert replies[1] == Err(
        'ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", '
        'you can run it from a local connection, otherwise you need to set this option in the '
        'configuration file, and then restart the server.')
    assert replies[2].startswith("ERR MODULE command not allowed. If the enable-module-command")
    assert replies[3] == "PONG"


def test_a_rule_on_auth_limits_guessing(redis_factory, sluice_factory, tmp_path):
    """`commands = AUTH` in a rule limits password guessing per address."""
    s = _sluice_with_rule(redis_factory, sluice_factory, tmp_path,
                          "[limit guessing]\ncommands = AUTH\nrate = 1/h\nburst = 3\nper = ip\n"
                          "action = reject\n")
    with s.raw() as c:
        got = [c.call("AUTH", "app", f"guess{i}") for i in range(3)]
        assert all(g.startswith("WRONGPASS") for g in got)
        assert c.call("AUTH", "app", "apppw").startswith("THROTTLED")   # even the right one
        assert c.call("GET", "app:1") == Err("NOAUTH Authentication required.")


def test_hello_3_authenticates(auth_env):
    """HELLO 3 AUTH logs in and switches to RESP3 at once (issue 11), as
    node-redis sends it when given a password; a wrong password changes
    neither the user nor the protocol."""
    s, _, _ = auth_env
    with s.raw() as c:
        c.send_command("HELLO", "3", "AUTH", "app", "nope")
        assert c.read_reply().startswith("WRONGPASS")
        assert c.call_raw("GET", "app:1").startswith(b"-NOAUTH")
        c.send_command("HELLO", "3", "AUTH", "app", "apppw", "SETNAME", "w3")
        reply = c.read_reply()
        assert reply[0] == "map", reply
        fields = dict(zip(reply[1][0::2], reply[1][1::2]))
        assert fields[b"proto"] == 3 and fields[b"id"] == c.call("CLIENT", "ID")
        assert c.call_raw("GET", "app:none") == b"_\r\n"
        assert c.call("ACL", "WHOAMI") == b"app"


def test_backend_password_from_a_file_only_sluice_reads(redis_factory, sluice_factory,
                                                        tmp_path):
    """backend_password_file: the password from a file of mode 0600 (a
    final newline dropped) logs sluice in; a file other users may read is
    refused at start and by -t with FILE:LINE; with backend_password both
    are refused; a bare name is looked up in $CREDENTIALS_DIRECTORY
    (systemd's LoadCredential=)."""
    srv = redis_factory()
    srv.client().config_set("requirepass", "s3cret")
    secret = tmp_path / "backend.pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    s = sluice_factory(srv.port, backend_password_file=str(secret))
    r = s.client(password="s3cret")
    assert r.set("k", "v") is True
    r.close()
    assert "s3cret" not in s.config_path.read_text()

    def check(extra_env=None, **keys):
        cfg = tmp_path / "check.ini"
        cfg.write_text("[proxy]\nlisten = 127.0.0.1:%d\nbackend = 127.0.0.1:%d\n" %
                       (free_port(), srv.port) +
                       "".join(f"{k} = {v}\n" for k, v in keys.items()))
        env = dict(os.environ, **(extra_env or {}))
        p = subprocess.run([str(require_sluice_bin()), "-t", "-c", str(cfg)],
                           capture_output=True, text=True, env=env, timeout=30)
        return p.returncode, p.stderr, cfg

    secret.chmod(0o644)
    code, err, cfg = check(backend_password_file=str(secret))
    assert code == 1 and f"{cfg}:4: backend_password_file: {secret} is readable or writable " \
        "by other users (mode 0644)" in err, err
    secret.chmod(0o600)
    code, err, cfg = check(backend_password_file=str(secret), backend_password="x")
    assert code == 1 and "'backend_password_file' and 'backend_password' (line 5) exclude " \
        "each other" in err, err
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "backend_password").write_text("s3cret")
    (creds / "backend_password").chmod(0o400)
    code, err, cfg = check({"CREDENTIALS_DIRECTORY": str(creds)},
                           backend_password_file="backend_password")
    assert code == 0, err
    code, err, cfg = check(backend_password_file="backend_password")
    assert code == 1 and "backend_password_file: " in err and "cannot open" in err, err
    # The password written in a sluice.ini everyone may read: a warning
    # that names the key and where it belongs.
    code, err, cfg = check(backend_password="s3cret")
    cfg.chmod(0o644)
    code, err, cfg = check(backend_password="s3cret")
    assert code == 0 and f"{cfg}:4: warning: backend_password is in a file every user may " \
        "read" in err and "backend_password_file" in err, err
    (tmp_path / "two.pw").write_text("a\nb\n")
    (tmp_path / "two.pw").chmod(0o600)
    code, err, cfg = check(backend_password_file=str(tmp_path / "two.pw"))
    assert code == 1 and "must hold the password alone, on one line" in err, err
