"""Hostile clients, third round (issue 30, item 1): a restricted user's
script never leaves its user's Redis login.

With users_in_redis = yes, user app (commands = +@all -@dangerous, keys =
app:*) runs its scripts on connections logged in as sluice:app, so Redis
checks each redis.call. A request that goes around a stalled shared
connection (a long script of another client) or a paused one (an admin's
CLIENT PAUSE) goes on a one-shot connection: that one must be logged in
as sluice:app too, never as sluice's backend user, or
EVAL "return redis.call('get','secret:k')" 0 reads secret:k. The same
for EVALSHA and FCALL, and in cluster mode for a detour and for SCRIPT
LOAD, which runs on every primary.
"""

import time

import pytest

from conftest import RedisServer, Sluice, parse_info
from helpers import SLOW, Err, busy_eval, encode_command, wait_until

USERS_INI = """\
[user default]
password = secret

[user app]
password = apppw
commands = +@all -@dangerous -lock
keys = app:*

[user admin]
password = adminpw
commands = +@all
keys = *
channels = *
"""

READ = "return redis.call('get', ARGV[1])"
LIBRARY = ("#!lua name=h3lib\n"
           "redis.register_function('h3read', function(keys, args) "
           "return redis.call('get', args[1]) end)")


@pytest.fixture(scope="module")
def env(module_tmp):
    backend = RedisServer(module_tmp / "h3-backend").start()
    d = module_tmp / "h3-sluice"
    d.mkdir(parents=True, exist_ok=True)
    (d / "users.ini").write_text(USERS_INI)
    s = Sluice(d, backend.port, extra={"users": "users.ini", "users_in_redis": "yes"})
    try:
        s.start()
        wait_until(lambda: backend.client().execute_command("ACL", "GETUSER", "sluice:app")
                   is not None, 5 * SLOW, msg="sluice:app made in Redis")
        b = backend.client()
        b.set("secret:k", "the-secret")
        b.set("app:k", "app-value")
        b.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY)
        b.close()
        yield s, backend
        problems = s.stop()
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)
    finally:
        backend.stop()


def _login(s, user, pw, timeout=10 * SLOW):
    c = s.raw(timeout=timeout)
    c.__enter__()
    assert c.call("AUTH", user, pw) == "OK"
    return c


def _proxy_stat(s, name):
    c = _login(s, "admin", "adminpw")
    try:
        info = parse_info(c.call("PROXY", "INFO").decode())
    finally:
        c.close()
    return int(info.get(name, 0))


def _reader(s, kind):
    """The request a restricted user sends to read KEY through a script:
    EVAL, EVALSHA (loaded first, as app) or FCALL (a function an admin
    loaded)."""
    if kind == "eval":
        return lambda key: ("EVAL", READ, "0", key)
    if kind == "evalsha":
        c = _login(s, "app", "apppw")
        sha = c.call("SCRIPT", "LOAD", READ).decode()
        c.close()
        return lambda key: ("EVALSHA", sha, "0", key)
    return lambda key: ("FCALL", "h3read", "0", key)


def _refused(reply):
    """Redis's refusal of a script call as sluice:app (or a -BUSY while the
    other script still ran): anything but the secret's value."""
    return isinstance(reply, Err) and ("NOPERM" in reply or "can't access" in reply or
                                       "BUSY" in reply)


@pytest.mark.parametrize("kind", ["eval", "evalsha", "fcall"])
def test_detour_around_a_busy_script_stays_the_users(env, kind):
    """app's keyless busy loop (1.2 s) holds its script connection; 0.4 s
    later a second app connection's script reading secret:k goes around
    it: Redis refuses the read as sluice:app, while app:k still reads."""
    s, backend = env
    req = _reader(s, kind)
    before = _proxy_stat(s, "stalled_detours")
    busy = _login(s, "app", "apppw")
    other = _login(s, "app", "apppw")
    try:
        busy.send(encode_command(*busy_eval(1_200_000)))
        time.sleep(0.4)
        got = other.call(*req("secret:k"), timeout=20 * SLOW)
        assert got != b"the-secret", "a detour ran app's script as another Redis user"
        assert _refused(got), got
        assert busy.read_reply(timeout=20 * SLOW) == 1
        busy.send(encode_command(*busy_eval(1_200_000)))
        time.sleep(0.4)
        assert other.call(*req("app:k"), timeout=20 * SLOW) == b"app-value"
        assert busy.read_reply(timeout=20 * SLOW) == 1
    finally:
        busy.close()
        other.close()
    assert _proxy_stat(s, "stalled_detours") >= before + 2


@pytest.mark.parametrize("kind", ["eval", "evalsha", "fcall"])
def test_detour_around_client_pause_stays_the_users(env, kind):
    """An admin's CLIENT PAUSE 700 WRITE: app's script waits on a one-shot
    connection, logged in as sluice:app: reading secret:k is refused once
    the pause ends, reading app:k works."""
    s, backend = env
    req = _reader(s, kind)
    admin = _login(s, "admin", "adminpw")
    app = _login(s, "app", "apppw")
    try:
        assert admin.call("CLIENT", "PAUSE", "700", "WRITE") == "OK"
        got = app.call(*req("secret:k"), timeout=20 * SLOW)
        assert got != b"the-secret", "a paused detour ran app's script as another Redis user"
        assert _refused(got), got
        assert admin.call("CLIENT", "PAUSE", "700", "WRITE") == "OK"
        assert app.call(*req("app:k"), timeout=20 * SLOW) == b"app-value"
    finally:
        admin.call("CLIENT", "UNPAUSE")
        admin.close()
        app.close()


def test_no_script_of_app_ever_ran_as_anyone_else(env):
    """Whatever the tests above sent: Redis's ACL LOG has app's refused
    reads of secret:k only as sluice:app, and no backend connection other
    than sluice:app's ever read it for app (the value never came back:
    checked there). Here: a burst of detours, all refused."""
    s, backend = env
    busy = _login(s, "app", "apppw")
    others = [_login(s, "app", "apppw") for _ in range(5)]
    try:
        busy.send(encode_command(*busy_eval(800_000)))
        time.sleep(0.3)
        for c in others:
            c.send(encode_command("EVAL", READ, "0", "secret:k"))
        for c in others:
            got = c.read_reply(timeout=20 * SLOW)
            assert _refused(got), got
        assert busy.read_reply(timeout=20 * SLOW) == 1
    finally:
        busy.close()
        for c in others:
            c.close()
    with backend.raw() as b:
        log = b.call("ACL", "LOG", "128")
    users = {dict(zip(e[::2], e[1::2]))[b"username"] for e in log}
    assert users == {b"sluice:app"}, users


def test_cluster_detour_and_script_load_stay_the_users(tmp_path):
    """Cluster mode: a detour around app's busy script on one primary runs
    as sluice:app there (reading secret:{t} on that node is refused), and
    app's SCRIPT LOAD reaches every primary on connections logged in as
    sluice:app, not on sluice's shared ones."""
    from test_cluster import own_cluster_sluice
    from redis.crc import key_slot
    d = tmp_path / "own-sluice"
    d.mkdir(parents=True)
    (d / "users.ini").write_text(USERS_INI.replace(
        "password = secret", "nopass = yes\ncommands = +@all\nkeys = *\nchannels = *"))
    with own_cluster_sluice(tmp_path, sluice_extra={"users": "users.ini",
                                                    "users_in_redis": "yes"}) as (cl, s):
        primaries = cl.primaries()
        for port in primaries:
            node = cl.node_by_port(port).client()
            wait_until(lambda: node.execute_command("ACL", "GETUSER", "sluice:app") is not None,
                       10 * SLOW, msg=f"sluice:app on {port}")
            node.close()
        port = primaries[0]
        tag = next(f"t{i}" for i in range(100000)
                   if cl.slot_owner_port(key_slot(f"t{i}".encode())) == port)
        node = cl.node_by_port(port).client()
        node.set(f"secret:{{{tag}}}", "the-secret")
        node.close()
        busy = _login(s, "app", "apppw")
        other = _login(s, "app", "apppw")
        try:
            busy.send(encode_command("EVAL", busy_eval(1_200_000)[1], "1", f"app:{{{tag}}}"))
            time.sleep(0.4)
            got = other.call("EVAL", READ, "1", f"app:{{{tag}}}", f"secret:{{{tag}}}",
                             timeout=20 * SLOW)
            assert got != b"the-secret"
            assert _refused(got), got
            assert busy.read_reply(timeout=20 * SLOW) == 1
        finally:
            busy.close()
            other.close()
        # SCRIPT LOAD: every primary gets it on a connection logged in as
        # sluice:app (the two app has run nothing on yet show it).
        def app_conns(p):
            n = cl.node_by_port(p).client()
            lines = [l for l in n.execute_command("CLIENT", "LIST").decode().splitlines()
                     if " user=sluice:app " in l]
            n.close()
            return lines
        assert all(app_conns(p) == [] for p in primaries[1:])
        app = _login(s, "app", "apppw")
        try:
            sha = app.call("SCRIPT", "LOAD", "return 'h3-only-loaded'")
            assert isinstance(sha, bytes) and len(sha) == 40, sha
        finally:
            app.close()
        for p in primaries:
            n = cl.node_by_port(p).client()
            assert n.execute_command("SCRIPT", "EXISTS", sha.decode()) == [1]
            n.close()
            assert p == port or app_conns(p), f"SCRIPT LOAD reached {p} not as sluice:app"


def test_reconnected_login_connections_log_in_as_the_user_again(env):
    """Redis drops every sluice:app connection (an operator's CLIENT KILL
    USER): the next scripts of app go on connections that log in as
    sluice:app again before anything else, never on sluice's own. (Passed
    before the fix too: it guards the reconnect path of the class.)"""
    s, backend = env
    app = _login(s, "app", "apppw")
    try:
        assert app.call("EVAL", READ, "0", "app:k") == b"app-value"
        with backend.raw() as b:
            assert b.call("CLIENT", "KILL", "USER", "sluice:app") >= 1
        for _ in range(20):
            got = app.call("EVAL", READ, "0", "secret:k", timeout=10 * SLOW)
            assert got != b"the-secret"
            assert isinstance(got, Err), got
        wait_until(lambda: app.call("EVAL", READ, "0", "app:k") == b"app-value", 10 * SLOW,
                   msg="app's scripts run again")
    finally:
        app.close()


def test_script_load_on_the_clients_own_connection_still_loads(env):
    """SCRIPT LOAD inside MULTI, or after SELECT, goes on the client's own
    connection, as before: loading grants nothing, and the EVALSHA that
    follows (on another connection) runs as sluice:app. (A guard: it
    passed before the fix.)"""
    s, backend = env
    app = _login(s, "app", "apppw")
    other = _login(s, "app", "apppw")
    try:
        assert app.call("MULTI") == "OK"
        assert app.call("SCRIPT", "LOAD", READ + " -- multi") == "QUEUED"
        sha = app.call("EXEC")[0].decode()
        assert app.call("SELECT", "0") == "OK"
        sha2 = app.call("SCRIPT", "LOAD", READ + " -- select").decode()
        for h in (sha, sha2):
            assert other.call("EVALSHA", h, "0", "app:k") == b"app-value"
            got = other.call("EVALSHA", h, "0", "secret:k")
            assert _refused(got), got
    finally:
        app.close()
        other.close()
