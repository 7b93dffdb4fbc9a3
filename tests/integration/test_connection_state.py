"""Per-connection state: SELECT, CLIENT SETNAME/GETNAME/ID, HELLO, QUIT."""

import pytest
import redis

from helpers import assert_same_replies


def test_select_per_client(sluice, backend, r):
    c1 = sluice.client(db=1)
    c2 = sluice.client()            # db 0
    try:
        assert c1.set("k", "a") is True
        assert c2.get("k") is None
        assert c1.get("k") == b"a"
        assert backend.client(db=1).get("k") == b"a"
        assert backend.client(db=0).get("k") is None
        # interleave many times: each connection stays in its own db
        for i in range(50):
            c1.set("i", i)
            c2.set("i", -i)
            assert c1.get("i") == str(i).encode()
            assert c2.get("i") == str(-i).encode()
        assert backend.client(db=1).get("i") == b"49"
        assert backend.client(db=0).get("i") == b"-49"
    finally:
        c1.close()
        c2.close()


def test_select_switch_back_and_errors(sluice, ref, clean):
    script = [("SELECT", "3"), ("SET", "x", "db3"), ("SELECT", "0"), ("GET", "x"),
              ("SELECT", "3"), ("GET", "x"), ("SELECT", "99"), ("SELECT", "abc"),
              ("GET", "x"), ("MOVE", "x", "5"), ("SELECT", "5"), ("GET", "x"),
              ("SWAPDB", "5", "6"), ("GET", "x")]
    assert_same_replies(sluice, ref, script)


def test_select_survives_other_clients_traffic(sluice, backend, r):
    """A SELECTed client's db is kept while a db-0 client is busy in between
    (catches a proxy that shares backend connections but forgets the db)."""
    with sluice.raw() as a, sluice.raw() as b:
        assert a.call("SELECT", "2") == "OK"
        for i in range(20):
            b.send(b"".join(b"*3\r\n$3\r\nSET\r\n$2\r\nk0\r\n$1\r\n0\r\n" for _ in range(20)))
            a.send(b"*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$%d\r\n%d\r\n" % (len(str(i)), i))
            b.read_replies(20)
            assert a.read_reply() == "OK"
        assert a.call("GET", "k0") is None
    assert backend.client(db=2).get("k2") == b"19"
    assert backend.client(db=2).get("k0") is None


def test_client_setname_getname_per_connection(sluice, r):
    c1 = sluice.client()
    c2 = sluice.client()
    try:
        assert c1.client_getname() is None
        assert c1.client_setname("alpha") is True
        assert c1.client_getname() == "alpha"
        assert c2.client_getname() is None
        assert c2.client_setname("beta") is True
        assert c1.client_getname() == "alpha"
        assert c2.client_getname() == "beta"
        # clearing the name
        assert c1.client_setname("") is True
        assert c1.client_getname() is None
        assert c2.client_getname() == "beta"
    finally:
        c1.close()
        c2.close()


def test_client_setname_errors_identical(sluice, ref, clean):
    script = [("CLIENT", "SETNAME", "has space"), ("CLIENT", "SETNAME"),
              ("CLIENT", "GETNAME", "extra"), ("CLIENT", "SETNAME", "ok-name"),
              ("CLIENT", "GETNAME"), ("CLIENT", "NOSUCHSUB")]
    assert_same_replies(sluice, ref, script)


def test_client_id_distinct_integer(sluice):
    conns = [sluice.raw() for _ in range(10)]
    try:
        ids = []
        for c in conns:
            raw = c.call_raw("CLIENT", "ID")
            assert raw.startswith(b":"), f"CLIENT ID reply is not an integer: {raw!r}"
            ids.append(int(raw[1:-2]))
            # stable on the same connection
            assert c.call("CLIENT", "ID") == ids[-1]
        assert len(set(ids)) == len(ids), f"CLIENT ID not distinct: {ids}"
        assert all(i > 0 for i in ids)
    finally:
        for c in conns:
            c.close()


def test_client_id_redispy(sluice):
    a, b = sluice.client(), sluice.client()
    try:
        ia, ib = a.client_id(), b.client_id()
        assert isinstance(ia, int) and isinstance(ib, int)
        assert ia != ib
        assert a.client_id() == ia
    finally:
        a.close()
        b.close()


def test_hello_3(sluice, r):
    """HELLO 3 is answered by sluice (issue 11: RESP3 end to end); the
    connection speaks RESP3 from then on."""
    with sluice.raw() as c:
        raw = c.call_raw("HELLO", "3")
        assert raw.startswith(b"%7\r\n$6\r\nserver\r\n"), raw
        assert c.call_raw("GET", "nokey") == b"_\r\n"
        assert c.call("PING") == "PONG"
        # inline form too, and back to RESP2
        c.send(b"HELLO 2\r\n")
        assert c.read_reply_raw().startswith(b"*14\r\n")
        assert c.call_raw("GET", "nokey") == b"$-1\r\n"


def _as_dict(flat):
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def test_hello_2(sluice, ref, r):
    reply = r.execute_command("HELLO", 2)
    assert isinstance(reply, list), reply
    d = _as_dict(reply)
    assert d[b"proto"] == 2
    # same fields as Redis's HELLO 2 reply
    want = _as_dict(ref.client().execute_command("HELLO", 2))
    assert set(d) == set(want), (d, want)
    assert r.ping() is True


def test_hello_2_setname(sluice, r):
    c = sluice.client()
    other = sluice.client()
    try:
        d = _as_dict(c.execute_command("HELLO", 2, "SETNAME", "foo"))
        assert d[b"proto"] == 2
        assert c.client_getname() == "foo"
        assert other.client_getname() is None
    finally:
        c.close()
        other.close()


def test_hello_no_args_and_errors(sluice, ref, clean):
    """HELLO without a version answers the RESP2 map; a bad version is an
    error as in Redis."""
    with sluice.raw() as c:
        v = c.call("HELLO")
        assert isinstance(v, list) and _as_dict(v)[b"proto"] == 2
    script = [("HELLO", "abc"), ("HELLO", "1"), ("HELLO", "2", "BADOPT")]
    assert_same_replies(sluice, ref, script)


def test_quit(sluice, r):
    with sluice.raw() as c:
        assert c.call("SET", "q", "1") == "OK"
        assert c.call_raw("QUIT") == b"+OK\r\n"
        data, closed = c.read_all_until_eof(5)
        assert closed, "sluice did not close the connection after QUIT"
        assert data == b""
    # inline QUIT, with commands pipelined after it that must not run
    with sluice.raw() as c:
        c.send(b"QUIT\r\nSET q 2\r\n")
        data, closed = c.read_all_until_eof(5)
        assert closed
        assert data == b"+OK\r\n", data
    assert r.get("q") == b"1"


def test_quit_redispy(sluice):
    c = sluice.client()
    assert c.execute_command("QUIT") in (True, b"OK", "OK")
    c.close()


def test_reset(sluice, ref, clean):
    """RESET clears SELECT, name, MULTI and subscriptions, as in Redis."""
    script = [("SELECT", "4"), ("CLIENT", "SETNAME", "x"), ("MULTI",), ("RESET",),
              ("CLIENT", "GETNAME"), ("SET", "rk", "1"), ("SELECT", "4"), ("GET", "rk"),
              ("SELECT", "0"), ("GET", "rk")]
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            res = [c.call_raw(*cmd) for cmd in script]
            c.call("SUBSCRIBE", "chan")
            res.append(c.call_raw("RESET"))
            res.append(c.call_raw("GET", "rk"))
            out.append(res)
    assert out[0] == out[1]


# --------------------------------------------------------------------------
# RESET and the shared connections' promise


def _raw_replies(conn, n):
    return [conn.read_reply() for _ in range(n)]


def _redis_with_password(redis_factory, password):
    srv = redis_factory()
    srv.client().config_set("requirepass", password)
    return srv


def test_reset_keeps_private_connection_authenticated(redis_factory, sluice_factory):
    """RESET logs Redis's connection out; sluice logs it in again with its
    backend credentials before anything else runs on it."""
    srv = _redis_with_password(redis_factory, "pw")
    s = sluice_factory(srv.port, backend_password="pw")
    with s.raw() as c:
        # RESET logs the client out of sluice too: it logs in again (issue 10).
        c.send(b"AUTH pw\r\nSELECT 1\r\nRESET\r\nAUTH pw\r\nSET x 1\r\nGET x\r\n")
        assert _raw_replies(c, 6) == ["OK", "OK", "RESET", "OK", "OK", b"1"]
    assert "refused sluice's own request" not in s.log_path.read_text()


def test_commands_pipelined_after_reset_in_pubsub_are_answered(redis_factory, sluice_factory):
    """Leaving pub/sub with RESET: commands in the same write as RESET get
    their replies, after +RESET, also when Redis needs sluice's password."""
    srv = _redis_with_password(redis_factory, "pw")
    s = sluice_factory(srv.port, backend_password="pw")
    with s.raw() as c:
        c.send(b"AUTH pw\r\nSUBSCRIBE ch\r\nRESET\r\nAUTH pw\r\nSET y 1\r\nGET y\r\n")
        got = _raw_replies(c, 6)
    assert got[0] == "OK"
    assert got[1] == [b"subscribe", b"ch", 1]
    assert got[2:] == ["RESET", "OK", "OK", b"1"]


def test_script_long_status_reply_keeps_shared_connection(sluice, r):
    """A script may return a status or error line of any length: it is a
    reply like another, not a reason to drop the connection everyone
    shares (nor the requests of others in flight on it)."""
    long_ok = r.eval("return redis.status_reply(string.rep('x', 100000))", 0)
    assert long_ok in (b"x" * 100000, "x" * 100000, True)
    with pytest.raises(redis.ResponseError) as e:
        r.eval("return redis.error_reply(string.rep('y', 100000))", 0)
    assert str(e.value).startswith("y" * 1000)
    info = sluice.info()
    assert info.get("backend_0", "").find("state=up") >= 0
    assert "connection lost" not in sluice.log_path.read_text()


def test_private_connection_setup_invisible(sluice, r):
    """A session's private connection is opened with nothing of sluice's
    own on it (only AUTH when configured): MONITOR sees the client's MULTI
    first, as it would from Redis."""
    with sluice.raw() as mon:
        mon.send(b"MONITOR\r\n")
        assert mon.read_reply() == "OK"
        with sluice.raw() as c:
            c.send(b"MULTI\r\nSET a 1\r\nEXEC\r\n")
            assert [c.read_reply() for _ in range(3)] == ["OK", "QUEUED", ["OK"]]
        lines = [mon.read_reply() for _ in range(3)]
    assert '"MULTI"' in lines[0], lines
    assert not any("SCRIPT" in l or '"CLIENT"' in l for l in lines), lines
