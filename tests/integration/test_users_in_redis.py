"""users_in_redis (issue 25): a users-file user that may run scripts but
lacks some permission gets a Redis ACL user "sluice:NAME" with the same
rules, and its scripts run on connections logged in as that user, so Redis
checks every redis.call inside and answers with its own -NOPERM texts.

Each refusal is compared byte for byte with a reference Redis given the
same user, and what a refused script would have changed is checked on the
backend directly."""

import pytest

from conftest import RedisServer, Sluice, parse_info
from helpers import SLOW, Err, encode_command, wait_until

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
    info = parse_info(_proxy_info(s))
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


def test_redis_refusing_the_user_is_said_and_no_script_runs(tmp_path):
    """sluice's backend user lacks +acl|setuser: Redis refuses the user,
    which the log and PROXY INFO say; the limited user's scripts then get
    Redis's refusal of the login, and none runs as anybody else (Redis's
    default user here may do everything)."""
    backend = RedisServer(tmp_path / "backend").start()
    b = backend.client()
    b.execute_command("ACL", "SETUSER", "be", "on", ">bepw", "+@all", "-acl", "~*", "&*")
    s = _sluice(tmp_path, backend.port, USERS_INI,
                extra={"backend_user": "be", "backend_password": "bepw"})
    try:
        s.start()
        wait_until(lambda: "users_in_redis_refusals:1" in _proxy_info(s).decode(), 5 * SLOW,
                   msg="the refusal in PROXY INFO")
        info = parse_info(_proxy_info(s))
        assert "sluice:app" in info["users_in_redis_last_refusal"]
        assert "NOPERM" in info["users_in_redis_last_refusal"]
        got = _as_app(s, ("EVAL", TOUCH_OTHER, "0"), ("EVAL", TOUCH, "1", "app:1"))
        for reply in got:
            assert reply.startswith(b"-") and b"sluice:app" in reply, got
        assert b.get("other:1") is None and b.get("app:1") is None
        log = s.log_path.read_text()
        assert "refused to keep Redis user sluice:app" in log and "+acl|setuser" in log
    finally:
        s.stop()
        b.close()
        backend.stop()


def test_a_restarted_node_gets_the_user_again(tmp_path):
    """Redis restarts (ACL users set by command are gone): sluice sets the
    user again once it is back, and the next script runs as it."""
    backend = RedisServer(tmp_path / "backend").start()
    s = _sluice(tmp_path, backend.port, USERS_INI)
    try:
        s.start()
        assert _as_app(s, ("EVAL", TOUCH, "1", "app:1")) == [b"+OK\r\n"]
        backend.stop()
        backend.start()
        b = backend.client()
        wait_until(lambda: b.execute_command("ACL", "GETUSER", "sluice:app") is not None,
                   10 * SLOW, msg="sluice:app set again")
        b.close()
        def runs():
            return _as_app(s, ("EVAL", TOUCH, "1", "app:2")) == [b"+OK\r\n"]
        wait_until(runs, 10 * SLOW, msg="a script runs again")
        assert _as_app(s, ("EVAL", TOUCH_OTHER, "0"))[0].startswith(b"-ERR The user executing")
    finally:
        problems = s.stop()
        backend.stop()
    assert not problems, problems


def test_cluster_mode_every_primary(tmp_path):
    """Cluster mode, three primaries: each has sluice:app, and app's
    scripts for keys on each of them run there as it, refused by Redis
    where they reach beyond app:*."""
    from test_cluster import own_cluster_sluice
    d = tmp_path / "own-sluice"
    d.mkdir(parents=True)
    # (a default user that may do everything: the fixture asks PROXY INFO)
    (d / "users.ini").write_text(USERS_INI.replace(
        "password = secret", "nopass = yes\ncommands = +@all\nkeys = *\nchannels = *"))
    with own_cluster_sluice(tmp_path, sluice_extra={"users": "users.ini",
                                                    "users_in_redis": "yes"}) as (cl, s):
        primaries = cl.primaries()
        assert len(primaries) == 3
        for port in primaries:
            node = cl.node_by_port(port).client()
            wait_until(lambda: node.execute_command("ACL", "GETUSER", "sluice:app") is not None,
                       10 * SLOW, msg=f"sluice:app on {port}")
            node.close()
        from redis.crc import key_slot
        tags = [next(f"t{i}" for i in range(100000)
                     if cl.slot_owner_port(key_slot(f"t{i}".encode())) == port)
                for port in primaries]
        keys = [f"app:{{{t}}}" for t in tags]
        got = _as_app(s, *[("EVAL", TOUCH, "1", k) for k in keys],
                      *[("EVAL", "return redis.call('set', ARGV[1], 'y')", "1", k,
                         f"other:{{{t}}}") for k, t in zip(keys, tags)],
                      ("EVAL", TOUCH_OTHER, "0"))
        assert got[:3] == [b"+OK\r\n"] * 3, got
        for reply in got[3:]:
            assert reply.startswith(b"-ERR The user executing the script can't"), got
        for port, k in zip(primaries, keys):
            node = cl.node_by_port(port).client()
            assert node.get(k) == b"x" and node.keys("other:*") == []
            lines = [l for l in node.execute_command("CLIENT", "LIST").decode().splitlines()
                     if " user=sluice:app " in l]
            assert lines, port
            node.close()


def test_commands_following_a_limited_users_script_keep_their_order(env):
    """Issue 26 with users_in_redis: a limited user's plain commands
    pipelined behind its script follow it onto its user's script
    connection, so each GET sees the increment of the script before it."""
    s, ref, backend = env
    _flush(backend, ref)
    incr = "return redis.call('incr', KEYS[1])"
    with s.raw(timeout=10 * SLOW) as c:
        assert c.call("AUTH", "app", "apppw") == "OK"
        cmds = []
        for _ in range(100):
            cmds += [("EVAL", incr, "1", "app:n"), ("GET", "app:n")]
        c.send(b"".join(encode_command(*cmd) for cmd in cmds))
        got = c.read_replies(len(cmds), timeout=10 * SLOW)
    assert got == [x for i in range(1, 101) for x in (i, str(i).encode())]
