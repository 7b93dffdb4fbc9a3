"""users_in_redis (issue 25): a users-file user that may run scripts but
lacks some permission gets a Redis ACL user "sluice:NAME" with the same
rules, and its scripts run on connections logged in as that user, so Redis
checks every redis.call inside and answers with its own -NOPERM texts.

Each refusal is compared byte for byte with a reference Redis given the
same user, and what a refused script would have changed is checked on the
backend directly."""

import pytest

from conftest import RedisServer, Sluice, parse_info
from helpers import SLOW, Err, wait_until

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

# app as Redis would have it, for the reference server.
APP_ACL = ["app", "on", ">apppw", "nocommands", "+@all", "-@dangerous", "resetkeys",
           "~app:*", "resetchannels"]

TOUCH = "return redis.call('set', KEYS[1], 'x')"
TOUCH_OTHER = "return redis.call('set', 'other:1', 'x')"
FLUSH = "return redis.call('flushall')"


def _sluice(tmp, backend_port, users_ini, extra=None, cluster_seeds=None):
    d = tmp / "sluice"
    d.mkdir(parents=True, exist_ok=True)
    (d / "users.ini").write_text(users_ini)
    conf = {"users": "users.ini", "users_in_redis": "yes"}
    conf.update(extra or {})
    return Sluice(d, backend_port, extra=conf, cluster_seeds=cluster_seeds)


@pytest.fixture(scope="module")
def env(module_tmp):
    backend = RedisServer(module_tmp / "uir-backend").start()
    ref = RedisServer(module_tmp / "uir-ref").start()
    admin = ref.client()
    admin.execute_command("ACL", "SETUSER", *APP_ACL)
    admin.close()
    s = _sluice(module_tmp, backend.port, USERS_INI)
    try:
        s.start()
        wait_until(lambda: backend.client().execute_command("ACL", "GETUSER", "sluice:app")
                   is not None, 5 * SLOW, msg="sluice:app made in Redis")
        yield s, ref, backend
        problems = s.stop()
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)
    finally:
        backend.stop()
        ref.stop()


def _as_app(srv, *cmds):
    with srv.raw() as c:
        assert c.call("AUTH", "app", "apppw") == "OK"
        return [c.call_raw(*cmd) for cmd in cmds]


def _flush(*servers):
    for srv in servers:
        c = srv.client()
        c.flushall()
        c.close()


def test_script_runs_as_the_users_redis_user(env):
    """A user limited to app:* runs a script touching app:1; one touching
    other:1 gets Redis's own refusal and changes nothing; one calling
    FLUSHALL (the user lacks @dangerous) is refused by Redis too."""
    s, ref, backend = env
    _flush(backend, ref)
    script = [("EVAL", TOUCH, "1", "app:1"), ("EVAL", TOUCH_OTHER, "0"), ("EVAL", FLUSH, "0"),
              ("EVAL_RO", "return redis.call('get', 'other:1')", "0"),
              ("EVAL", "return redis.call('get', KEYS[1])", "1", "app:1")]
    got, want = _as_app(s, *script), _as_app(ref, *script)
    for cmd, g, w in zip(script, got, want):
        assert g == w, f"{cmd}: sluice {g!r} vs redis {w!r}"
    assert got[0] == b"+OK\r\n" and got[-1] == b"$1\r\nx\r\n"
    assert b"NOPERM" in got[1] or b"can't access" in got[1], got[1]
    b = backend.client()
    assert b.get("other:1") is None and b.get("app:1") == b"x"   # FLUSHALL never ran
    b.close()


def test_script_load_then_evalsha_bullmq_style(env):
    """BullMQ's way: SCRIPT LOAD, then EVALSHA, by the same limited user."""
    s, ref, backend = env
    _flush(backend, ref)
    with s.raw() as c:
        assert c.call("AUTH", "app", "apppw") == "OK"
        sha = c.call("SCRIPT", "LOAD", TOUCH_OTHER).decode()
        sha_ok = c.call("SCRIPT", "LOAD", TOUCH).decode()
        assert c.call("EVALSHA", sha_ok, "1", "app:q") == "OK"
        refused = c.call_raw("EVALSHA", sha, "0")
    assert refused == _as_app(ref, ("SCRIPT", "LOAD", TOUCH_OTHER), ("EVALSHA", sha, "0"))[1]
    b = backend.client()
    assert b.get("app:q") == b"x" and b.get("other:1") is None
    b.close()


def test_clients_of_one_user_share_its_connections(env):
    """50 clients of app each run a script: Redis sees a bounded number of
    connections logged in as sluice:app (pooled per user, not per client)."""
    s, _, backend = env
    conns = [s.raw() for _ in range(50)]
    try:
        for c in conns:
            c.__enter__()
            assert c.call("AUTH", "app", "apppw") == "OK"
        for i, c in enumerate(conns):
            assert c.call("EVAL", TOUCH, "1", f"app:{i}") == "OK"
    finally:
        for c in conns:
            c.close()
    b = backend.client()
    lines = [l for l in b.execute_command("CLIENT", "LIST").decode().splitlines()
             if " user=sluice:app " in l]
    b.close()
    assert 1 <= len(lines) <= 8, lines


def test_users_without_redis_user_keep_the_refusal(env):
    """A user with every permission runs scripts as before; inside MULTI a
    limited user's script would run on its own connection as sluice's
    backend user: refused."""
    s, _, backend = env
    with s.raw() as c:
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        assert c.call("EVAL", "return redis.call('set', 'other:2', 'y')", "0") == "OK"
    with s.raw() as c:
        assert c.call("AUTH", "app", "apppw") == "OK"
        assert c.call("MULTI") == "OK"
        reply = c.call("EVAL", TOUCH, "1", "app:m")
        assert isinstance(reply, Err) and "MULTI" in str(reply), reply
    info = parse_info(s.client().execute_command("AUTH", "admin", "adminpw") and
                      _proxy_info(s))
    assert info["users_in_redis"] == "yes" and info["users_in_redis_users"] == "1"


def _proxy_info(s):
    with s.raw() as c:
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        return c.call("PROXY", "INFO")


def test_reload_narrows_and_removes_the_redis_user(env):
    """After a reload that narrows app, its next script meets the narrower
    rule; after one without app, sluice:app is gone from Redis."""
    s, _, backend = env
    _flush(backend)
    users = s.dir / "users.ini"
    users.write_text(USERS_INI.replace("keys = app:*", "keys = app:a:*"))
    try:
        with s.raw() as c:
            assert c.call("AUTH", "admin", "adminpw") == "OK"
            assert c.call("PROXY", "RELOAD") == "OK"
        got = _as_app(s, ("EVAL", TOUCH, "1", "app:a:1"), ("EVAL", TOUCH, "1", "app:b"),
                      ("EVAL", "return redis.call('set', 'app:b', 'x')", "0"))
        assert got[0] == b"+OK\r\n", got
        assert got[1].startswith(b"-NOPERM"), got   # sluice's gate: the key names it
        assert got[2].startswith(b"-") and b"app:b" not in got[2][:8], got
        b = backend.client()
        assert b.get("app:b") is None
        users.write_text(USERS_INI.split("[user app]")[0] + "[user admin]" +
                         USERS_INI.split("[user admin]")[1])
        with s.raw() as c:
            assert c.call("AUTH", "admin", "adminpw") == "OK"
            assert c.call("PROXY", "RELOAD") == "OK"
        wait_until(lambda: b.execute_command("ACL", "GETUSER", "sluice:app") is None,
                   5 * SLOW, msg="sluice:app deleted")
        b.close()
    finally:
        users.write_text(USERS_INI)
        with s.raw() as c:
            assert c.call("AUTH", "admin", "adminpw") == "OK"
            assert c.call("PROXY", "RELOAD") == "OK"
    b = backend.client()
    wait_until(lambda: b.execute_command("ACL", "GETUSER", "sluice:app") is not None,
               5 * SLOW, msg="sluice:app made again")
    b.close()
    assert _as_app(s, ("EVAL", TOUCH, "1", "app:1")) == [b"+OK\r\n"]
