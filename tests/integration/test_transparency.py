"""Transparency bugs found with real clients (issue 11): replies sluice
writes itself must leave in request order, local commands inside MULTI
queue like Redis's, and empty requests are skipped."""

import os
import signal

import pytest

from helpers import (SLOW, Err, RawConn, assert_same_replies, busy_eval, encode_command as enc,
                     rss_kb, wait_until)

SLOW_EVAL = busy_eval(200000)


# ---- 1. every reply leaves in request order, whoever produced it ----

def test_unsubscribe_then_quit_in_one_write(sluice, ref):
    """UNSUBSCRIBE ch + QUIT in one write: Redis answers UNSUBSCRIBE, then
    +OK, then closes. sluice answered QUIT at once and closed first."""
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            c.send_command(b"SUBSCRIBE", b"tr:ch")
            assert c.read_reply()[0] == b"subscribe"
            c.send(enc(b"UNSUBSCRIBE", b"tr:ch") + enc(b"QUIT"))
            data, eof = c.read_all_until_eof(timeout=5 * SLOW)
            assert eof
            out.append(data)
    assert out[0] == out[1]
    assert out[0].startswith(b"*3\r\n$11\r\nunsubscribe\r\n") and out[0].endswith(b"+OK\r\n")


def test_subscribe_getname_ping_in_order(sluice):
    """SUBSCRIBE, CLIENT GETNAME, PING pipelined: GETNAME's answer (from
    sluice) comes after SUBSCRIBE's and before PING's (from Redis)."""
    with sluice.raw() as c:
        c.send(enc(b"SUBSCRIBE", b"tr:ch") + enc(b"CLIENT", b"GETNAME") + enc(b"PING"))
        first, second, third = c.read_replies(3, timeout=5 * SLOW)
        assert first[0] == b"subscribe", first
        assert second is None or isinstance(second, str), second
        assert third == [b"pong", b""], third


def test_local_replies_wait_behind_slow_redis_replies(sluice):
    """Many sluice-made replies interleaved with slow Redis replies on a
    subscribed connection keep the exact request order."""
    with sluice.raw() as c:
        c.send_command(b"SUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send_command(b"UNSUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"unsubscribe"
        batch = b""
        want = []
        for i in range(3):
            batch += enc(*SLOW_EVAL) + enc(b"CLIENT", b"ID") + enc(b"ECHO", b"e%d" % i)
            want += [1, "id", b"e%d" % i]
        c.send(batch)
        got = c.read_replies(len(want), timeout=10 * SLOW)
        for g, w in zip(got, want):
            if w == "id":
                assert isinstance(g, int) and g != 1, got
            else:
                assert g == w, got


def test_fence_invisible_to_monitor(sluice, backend):
    """The fence sluice sends to keep a subscribed client's replies in
    order never shows in a MONITOR on Redis."""
    mon = RawConn(backend.port)
    try:
        assert mon.call(b"MONITOR") == "OK"
        with sluice.raw() as c:
            c.send(enc(b"SUBSCRIBE", b"tr:mon") + enc(b"CLIENT", b"GETNAME") +
                   enc(b"PING", b"tr-last"))
            c.read_replies(3, timeout=5 * SLOW)
        lines = []
        while not any(b"tr-last" in x for x in lines):
            lines.append(mon.read_reply_raw(timeout=5 * SLOW))
        assert not any(b"fence" in x for x in lines), lines
    finally:
        mon.close()


def test_protocol_error_while_subscribed_comes_last(sluice):
    """A protocol error from a subscribed client: the error is written
    after the replies Redis still owes, then the connection closes."""
    with sluice.raw() as c:
        c.send_command(b"SUBSCRIBE", b"tr:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send(enc(b"PING", b"before") + b"*1\r\n$x\r\n")
        data, eof = c.read_all_until_eof(timeout=5 * SLOW)
        assert eof
        assert data.index(b"before") < data.index(b"-ERR Protocol error"), data


# ---- 4. empty requests ----

@pytest.mark.parametrize("empty", [b"*0\r\n", b"*-10\r\n", b"*-1\r\n"])
def test_empty_multibulk_skipped(sluice, ref, empty):
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            c.send(empty + enc(b"PING") + empty + empty + enc(b"ECHO", b"x"))
            out.append(c.read_replies(2, timeout=5 * SLOW))
            c.send_command(b"PING")
            out[-1].append(c.read_reply(timeout=5 * SLOW))
    assert out[0] == out[1] == ["PONG", b"x", "PONG"]


# ---- 2. sluice's own commands inside MULTI queue and run at EXEC ----

MULTI_SCRIPT = [
    (b"MULTI",), (b"CLIENT", b"SETNAME", b"foo"), (b"SET", b"tr:k", b"v"),
    (b"CLIENT", b"GETNAME"), (b"CLIENT", b"SETNAME", b"a b"), (b"GET", b"tr:k"),
    (b"CLIENT", b"GETNAME"), (b"EXEC",), (b"CLIENT", b"GETNAME"),
]


@pytest.mark.parametrize("pipelined", [False, True])
def test_multi_queues_client_name_commands(sluice, ref, clean, pipelined):
    """CLIENT SETNAME/GETNAME inside MULTI answer +QUEUED and take their
    slot of EXEC's array in order, exactly as Redis does."""
    assert_same_replies(sluice, ref, MULTI_SCRIPT, pipelined=pipelined)


def test_multi_setname_arity_error_aborts(sluice, ref, clean):
    script = [(b"MULTI",), (b"CLIENT", b"SETNAME"), (b"SET", b"tr:k", b"v"), (b"EXEC",),
              (b"GET", b"tr:k"), (b"CLIENT", b"GETNAME")]
    assert_same_replies(sluice, ref, script)


def test_multi_setname_only_at_exec(sluice, ref, clean):
    """SETNAME in a discarded or WATCH-failed transaction never runs."""
    script = [(b"MULTI",), (b"CLIENT", b"SETNAME", b"never"), (b"DISCARD",),
              (b"CLIENT", b"GETNAME"),
              (b"WATCH", b"tr:w"), (b"SET", b"tr:w", b"1"), (b"MULTI",),
              (b"CLIENT", b"SETNAME", b"never2"), (b"EXEC",), (b"CLIENT", b"GETNAME")]
    assert_same_replies(sluice, ref, script)


def test_multi_client_id_in_slot(sluice, clean):
    """CLIENT ID inside MULTI: EXEC's array holds sluice's id in its slot,
    between the replies of the commands around it (ioredis pairs by slot)."""
    with sluice.raw() as c:
        my_id = c.call(b"CLIENT", b"ID")
        c.send(enc(b"MULTI") + enc(b"SET", b"tr:i", b"1") + enc(b"CLIENT", b"ID") +
               enc(b"INCR", b"tr:i") + enc(b"EXEC"))
        replies = c.read_replies(5, timeout=5 * SLOW)
        assert replies[:4] == ["OK", "QUEUED", "QUEUED", "QUEUED"], replies
        assert replies[4] == ["OK", my_id, 2], replies


def test_getname_pipelined_after_reset_sees_reset(sluice, ref, clean):
    """CLIENT GETNAME pipelined behind RESET runs after RESET's reply, so
    it sees the name RESET cleared, as Redis does."""
    script = [(b"CLIENT", b"SETNAME", b"before"), (b"RESET",), (b"CLIENT", b"GETNAME"),
              (b"CLIENT", b"SETNAME", b"after"), (b"CLIENT", b"GETNAME")]
    assert_same_replies(sluice, ref, script, pipelined=True)


# ---- 3. sluice's client ids, translated; CLIENT LIST/INFO of sluice's clients ----

def _blpop_waiting(backend, key):
    direct = backend.client()
    try:
        return any(e.get("cmd") == "blpop" for e in direct.client_list())
    finally:
        direct.close()


def test_client_unblock_by_sluice_id(sluice, backend, clean):
    """CLIENT UNBLOCK with the id CLIENT ID gave unblocks that client's
    BLPOP, through its private connection's Redis id."""
    with sluice.raw() as blocked, sluice.raw() as other:
        bid = blocked.call(b"CLIENT", b"ID")
        blocked.send_command(b"BLPOP", b"tr:nothing", b"0")
        wait_until(lambda: _blpop_waiting(backend, "tr:nothing"), 5 * SLOW, msg="BLPOP waits")
        assert other.call(b"CLIENT", b"UNBLOCK", bid) == 1
        assert blocked.read_reply(timeout=5 * SLOW) is None
        # and once more, now that the Redis id is known
        blocked.send_command(b"BLPOP", b"tr:nothing", b"0")
        wait_until(lambda: _blpop_waiting(backend, "tr:nothing"), 5 * SLOW, msg="BLPOP waits")
        assert other.call(b"CLIENT", b"UNBLOCK", bid, b"ERROR") == 1
        reply = blocked.read_reply(timeout=5 * SLOW)
        assert isinstance(reply, str) and reply.startswith("UNBLOCKED"), reply


def test_client_unblock_never_reaches_unrelated_redis_client(sluice, backend, clean):
    """A sluice id that happens to be the Redis id of an unrelated blocked
    connection must not unblock it: sluice answers as for an unknown id."""
    victim = RawConn(backend.port)
    try:
        vid = victim.call(b"CLIENT", b"ID")
        victim.send_command(b"BLPOP", b"tr:victim", b"0")
        wait_until(lambda: _blpop_waiting(backend, "tr:victim"), 5 * SLOW, msg="BLPOP waits")
        with sluice.raw() as c:
            assert c.call(b"CLIENT", b"UNBLOCK", vid) == 0
            assert c.call(b"CLIENT", b"KILL", b"ID", vid) == 0
            assert c.call(b"CLIENT", b"UNBLOCK", b"abc") == \
                "ERR value is not an integer or out of range"
        # still blocked and connected
        assert _blpop_waiting(backend, "tr:victim")
        direct = backend.client()
        direct.rpush("tr:victim", "x")
        direct.close()
        assert victim.read_reply(timeout=5 * SLOW) == [b"tr:victim", b"x"]
    finally:
        victim.close()


def test_client_kill_id_of_sluice_client(sluice, clean):
    """CLIENT KILL ID of a sluice client without a private connection
    closes that client; with one, Redis kills its connection and sluice
    closes it too."""
    with sluice.raw() as killer, sluice.raw() as plain, sluice.raw() as stateful:
        pid = plain.call(b"CLIENT", b"ID")
        sid = stateful.call(b"CLIENT", b"ID")
        assert stateful.call(b"SELECT", b"1") == "OK"
        assert killer.call(b"CLIENT", b"KILL", b"ID", pid) == 1
        assert plain.is_closed_by_peer(5 * SLOW)
        assert killer.call(b"CLIENT", b"KILL", b"ID", sid) == 1
        assert stateful.is_closed_by_peer(5 * SLOW)
        assert killer.call(b"CLIENT", b"KILL", b"ID", pid) == 0
        assert killer.call(b"PING") == "PONG"


def test_client_kill_id_self_skipme(sluice):
    with sluice.raw() as c:
        me = c.call(b"CLIENT", b"ID")
        assert c.call(b"CLIENT", b"KILL", b"ID", me) == 0
        assert c.call(b"PING") == "PONG"
        assert c.call(b"CLIENT", b"KILL", b"ID", me, b"SKIPME", b"no") == 1
        assert c.is_closed_by_peer(5 * SLOW)


def _fields(line):
    return [kv.split("=", 1)[0] for kv in line.strip().split(" ")]


def test_client_list_and_info_show_sluice_clients(sluice, ref, clean):
    """CLIENT LIST/INFO describe sluice's clients in Redis 7.0's field
    order, with sluice's ids, names, databases and commands."""
    with ref.raw() as rc:
        ref_line = rc.call(b"CLIENT", b"INFO").decode()
    with sluice.raw() as a, sluice.raw() as b:
        aid = a.call(b"CLIENT", b"ID")
        bid = b.call(b"CLIENT", b"ID")
        assert b.call(b"CLIENT", b"SETNAME", b"bee") == "OK"
        assert b.call(b"SELECT", b"9") == "OK"
        info = a.call(b"CLIENT", b"INFO").decode()
        assert _fields(info) == _fields(ref_line)
        assert info.startswith("id=%d addr=" % aid) and "cmd=client|info" in info
        assert info.endswith("\n")
        listing = a.call(b"CLIENT", b"LIST").decode().splitlines()
        mine = [l for l in listing if l.startswith("id=%d " % bid)]
        assert len(mine) == 1, listing
        assert " name=bee " in mine[0] and " db=9 " in mine[0] and " cmd=select " in mine[0]
        assert " flags=N " in mine[0]
        only = a.call(b"CLIENT", b"LIST", b"ID", bid).decode().splitlines()
        assert len(only) == 1 and only[0].startswith("id=%d " % bid)
        assert a.call(b"CLIENT", b"LIST", b"TYPE", b"bogus") == "ERR Unknown client type 'bogus'"
        assert a.call(b"CLIENT", b"LIST", b"TYPE", b"pubsub") == b""


def _qbuf(line):
    return int(line.split(" qbuf=", 1)[1].split(" ", 1)[0])


def test_client_list_and_info_show_the_running_command_in_qbuf(sluice, ref, clean):
    """Redis 7.0's qbuf holds the command running: CLIENT INFO and CLIENT
    LIST show qbuf=26 for their own 26 bytes (Redis's introspection test),
    CLIENT LIST ID id its own length, in RESP3 too; another idle client
    shows qbuf=0."""
    got = {}
    for name, srv in (("sluice", sluice), ("redis", ref)):
        with srv.raw() as a, srv.raw() as b:
            bid = b.call(b"CLIENT", b"ID")
            aid = a.call(b"CLIENT", b"ID")
            info = a.call(b"CLIENT", b"INFO").decode()
            listing = a.call(b"CLIENT", b"LIST").decode().splitlines()
            mine = [l for l in listing if l.startswith("id=%d " % aid)]
            other = [l for l in listing if l.startswith("id=%d " % bid)]
            by_id = a.call(b"CLIENT", b"LIST", b"ID", aid).decode()
            a.send(enc(b"HELLO", b"3"))
            a.read_reply_raw()
            a.send(enc(b"CLIENT", b"INFO"))   # a verbatim string: not parsed
            resp3 = bytes(a.buf)
            while not resp3.endswith(b"\n\r\n"):
                resp3 += a.sock.recv(65536)
            resp3 = resp3.decode()
            got[name] = (_qbuf(info), _qbuf(mine[0]), _qbuf(other[0]), _qbuf(by_id),
                         _qbuf(resp3))
    assert got["sluice"] == got["redis"]
    assert got["redis"][:3] == (26, 26, 0)


def test_tracking_redirect_to_sluice_client(sluice, clean):
    """CLIENT TRACKING on REDIRECT <sluice id>: invalidations reach that
    sluice client's subscription; an id of nobody is refused as Redis does."""
    with sluice.raw() as inv, sluice.raw() as reader, sluice.raw() as writer:
        inv_id = inv.call(b"CLIENT", b"ID")
        inv.send_command(b"SUBSCRIBE", b"__redis__:invalidate")
        assert inv.read_reply()[0] == b"subscribe"
        assert reader.call(b"CLIENT", b"TRACKING", b"on", b"REDIRECT", b"999999") == \
            "ERR The client ID you want redirect to does not exist"
        assert reader.call(b"CLIENT", b"TRACKING", b"on", b"REDIRECT", inv_id) == "OK"
        assert reader.call(b"GET", b"tr:tracked") is None
        assert writer.call(b"SET", b"tr:tracked", b"1") == "OK"
        msg = inv.read_reply(timeout=5 * SLOW)
        assert msg[:2] == [b"message", b"__redis__:invalidate"] and msg[2] == [b"tr:tracked"], msg


@pytest.mark.parametrize("resp", [2, 3])
def test_tracking_redirect_shown_as_the_sluice_id(sluice, clean, resp):
    """CLIENT GETREDIR and CLIENT TRACKINGINFO name the redirect target by
    the sluice id the client gave in CLIENT TRACKING ... REDIRECT (Redis
    knows the Redis id of the target's connection), also once the target
    is gone (broken_redirect), as Redis's own tracking tests check."""
    with sluice.raw() as inv, sluice.raw() as reader, sluice.raw() as writer:
        if resp == 3:
            reader.call(b"HELLO", b"3")
        inv_id = inv.call(b"CLIENT", b"ID")
        assert reader.call(b"CLIENT", b"GETREDIR") == -1
        assert reader.call(b"CLIENT", b"TRACKING", b"on", b"REDIRECT", inv_id) == "OK"
        assert reader.call(b"CLIENT", b"GETREDIR") == inv_id
        info = reader.call(b"CLIENT", b"TRACKINGINFO")
        fields = info[1] if resp == 3 else info
        assert fields[fields.index(b"redirect") + 1] == inv_id, info
        assert reader.call(b"GET", b"tr:redir") is None
        inv.close()
        assert writer.call(b"SET", b"tr:redir", b"1") == "OK"
        if resp == 3:   # Redis tells a RESP3 client with a push
            assert reader.read_reply(timeout=5 * SLOW) == [b"tracking-redir-broken", inv_id]
        info = reader.call(b"CLIENT", b"TRACKINGINFO")
        fields = info[1] if resp == 3 else info
        assert b"broken_redirect" in fields[fields.index(b"flags") + 1], info
        assert fields[fields.index(b"redirect") + 1] == inv_id, info
        assert reader.call(b"CLIENT", b"GETREDIR") == inv_id


def test_unknown_command_invisible_to_monitor(sluice, backend, clean):
    """A name Redis does not know gets Redis's error; sluice's question
    about it (MODULE LIST, an admin command, when no module is loaded)
    shows nothing in MONITOR, where COMMAND INFO would show every typo
    (Redis's own MONITOR test sends one inside MULTI)."""
    mon = RawConn(backend.port)
    try:
        assert mon.call(b"MONITOR") == "OK"
        with sluice.raw() as c:
            reply = c.call(b"NOSUCHCMD", b"x")
            assert isinstance(reply, str) and reply.startswith("ERR unknown command"), reply
            assert c.call(b"ECHO", b"tr-unknown-last") == b"tr-unknown-last"
        lines = []
        while not any(b"tr-unknown-last" in x for x in lines):
            lines.append(mon.read_reply_raw(timeout=5 * SLOW))
        assert not any(b"COMMAND" in x.upper() for x in lines), lines
    finally:
        mon.close()


def test_first_script_shows_only_itself_in_monitor(redis_factory, sluice_factory):
    """The script connection made for a client's first script sends
    nothing of sluice's that MONITOR shows (Redis's own MONITOR test for
    scripts reads the EVAL as the first line)."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with s.raw() as warm:
        assert warm.call(b"PING") == "PONG"   # the shared connection is up
    mon = RawConn(srv.port)
    try:
        assert mon.call(b"MONITOR") == "OK"
        with s.raw() as c:
            assert c.call(b"EVAL", b"return redis.call('ECHO', 'in-script')", b"0") == b"in-script"
        first = mon.read_reply_raw(timeout=5 * SLOW)
        assert b'"EVAL"' in first.upper(), first
    finally:
        mon.close()


def test_id_lookup_invisible_to_monitor(sluice, backend, clean):
    """Learning a private connection's Redis id shows nothing in MONITOR."""
    mon = RawConn(backend.port)
    try:
        assert mon.call(b"MONITOR") == "OK"
        with sluice.raw() as blocked, sluice.raw() as other:
            bid = blocked.call(b"CLIENT", b"ID")
            blocked.send_command(b"BLPOP", b"tr:mon", b"0")
            wait_until(lambda: _blpop_waiting(backend, "tr:mon"), 5 * SLOW, msg="BLPOP waits")
            assert other.call(b"CLIENT", b"UNBLOCK", bid) == 1
            assert other.call(b"ECHO", b"tr-mon-last") == b"tr-mon-last"
        lines = []
        while not any(b"tr-mon-last" in x for x in lines):
            lines.append(mon.read_reply_raw(timeout=5 * SLOW))
        text = b"".join(lines).lower()
        assert b'"blpop"' in text   # CLIENT UNBLOCK is admin: MONITOR hides it too
        assert b'"list"' not in text and b'"client" "id"' not in text, lines
    finally:
        mon.close()


def test_client_list_inside_multi_runs_at_exec(sluice, clean):
    with sluice.raw() as c:
        c.send(enc(b"MULTI") + enc(b"CLIENT", b"SETNAME", b"late") + enc(b"CLIENT", b"INFO") +
               enc(b"EXEC"))
        replies = c.read_replies(4, timeout=5 * SLOW)
        assert replies[:3] == ["OK", "QUEUED", "QUEUED"], replies
        assert replies[3][0] == "OK" and b" name=late " in replies[3][1], replies


# ---- 5. spare private connections ----

def test_blocking_session_starts_on_spare(redis_factory, sluice_factory):
    """A blocking XREADGROUP that takes a private connection goes out on a
    spare connected beforehand, without a connect round trip in which a
    later command of another client on a shared connection could overtake
    it (Redis's stream-cgroups "key deleted" case). Spares are refilled."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    direct = srv.client()
    try:
        with s.raw() as r:
            for _ in range(5):
                wait_until(lambda: int(s.info()["backend_spare_connections"]) == 2, 5 * SLOW,
                           msg="spares connected")
                before = {e["addr"] for e in direct.client_list()}
                direct.delete("tr:stream")
                direct.xadd("tr:stream", {"f": "v"}, id="666")
                direct.xgroup_create("tr:stream", "g", id="$")
                with s.raw() as rd:
                    rd.send_command(b"XREADGROUP", b"GROUP", b"g", b"Alice", b"BLOCK", b"0",
                                    b"STREAMS", b"tr:stream", b">")
                    wait_until(lambda: any(e["cmd"] == "xreadgroup"
                                           for e in direct.client_list()), 5 * SLOW,
                               msg="XREADGROUP blocked")
                    used = [e["addr"] for e in direct.client_list() if e["cmd"] == "xreadgroup"]
                    assert used[0] in before, (used, before)
                    assert r.call(b"DEL", b"tr:stream") == 1
                    reply = rd.read_reply(timeout=5 * SLOW)
                    assert isinstance(reply, str) and "no longer exists" in reply, reply
    finally:
        direct.close()


def test_spares_respect_max_connections(redis_factory, sluice_factory):
    """Spares are never made past backend_max_connections, and a client
    still gets a private connection when every spare is taken."""
    srv = redis_factory()
    s = sluice_factory(srv.port, backend_max_connections=2, backend_spare_connections=3)
    wait_until(lambda: int(s.info()["backend_spare_connections"]) == 2, 5 * SLOW,
               msg="spares connected")
    with s.raw() as a, s.raw() as b, s.raw() as c:
        assert a.call(b"SELECT", b"1") == "OK"
        assert b.call(b"SELECT", b"1") == "OK"
        assert "backend_max_connections" in c.call(b"SELECT", b"1")
        info = s.info()
        assert int(info["backend_private_connections"]) == 2
        assert int(info["backend_spare_connections"]) == 0
    wait_until(lambda: int(s.info()["backend_spare_connections"]) == 2, 5 * SLOW,
               msg="spares refilled")


def test_client_kill_errors_as_redis(sluice, ref):
    """CLIENT KILL's argument errors come from Redis itself."""
    script = [(b"CLIENT", b"KILL"), (b"CLIENT", b"KILL", b"id", b"10", b"wrong_arg"),
              (b"CLIENT", b"KILL", b"id", b"str"), (b"CLIENT", b"KILL", b"id", b"-1"),
              (b"CLIENT", b"KILL", b"id", b"0"), (b"CLIENT", b"KILL", b"type", b"wrong_type"),
              (b"CLIENT", b"KILL", b"user", b"wrong_user"),
              (b"CLIENT", b"KILL", b"skipme", b"yes_or_no"),
              (b"CLIENT", b"KILL", b"10.9.9.9:1"), (b"CLIENT", b"KILL", b"maxage", b"x")]
    assert_same_replies(sluice, ref, script)


def test_client_kill_filters_on_sluice_clients(sluice):
    """CLIENT KILL's filters match sluice's clients: ADDR (the address
    CLIENT LIST shows), the old form, USER, SKIPME no."""
    with sluice.raw() as k, sluice.raw() as x, sluice.raw() as y:
        xid = x.call(b"CLIENT", b"ID")
        x_addr = [l for l in k.call(b"CLIENT", b"LIST", b"ID", xid).decode().split(" ")
                  if l.startswith("addr=")][0][5:]
        assert k.call(b"CLIENT", b"KILL", b"ADDR", x_addr) == 1
        assert x.is_closed_by_peer(5 * SLOW)
        assert k.call(b"CLIENT", b"KILL", x_addr) == "ERR No such client"
        yid = y.call(b"CLIENT", b"ID")
        y_addr = [l for l in k.call(b"CLIENT", b"LIST", b"ID", yid).decode().split(" ")
                  if l.startswith("addr=")][0][5:]
        assert k.call(b"CLIENT", b"KILL", y_addr) == "OK"
        assert y.is_closed_by_peer(5 * SLOW)
        assert k.call(b"CLIENT", b"KILL", b"USER", b"default", b"SKIPME", b"no") >= 1
        assert k.is_closed_by_peer(5 * SLOW)


def test_client_list_and_kill_obey_redis_acl(redis_factory, sluice_factory):
    """sluice answers CLIENT LIST/INFO and runs CLIENT KILL on its clients
    only once Redis has let the client's user run them: a user without
    those commands gets Redis's NOPERM, and kills nobody."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    d = srv.client()
    d.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all",
                      "-client|list", "-client|kill", "-client|info")
    d.close()
    with s.raw() as victim, s.raw() as c:
        vid = victim.call(b"CLIENT", b"ID")
        assert c.call(b"AUTH", b"limited", b"pw") == "OK"
        for cmd in [(b"CLIENT", b"LIST"), (b"CLIENT", b"INFO"),
                    (b"CLIENT", b"KILL", b"ID", vid), (b"CLIENT", b"KILL", b"TYPE", b"normal")]:
            reply = c.call(*cmd)
            assert isinstance(reply, str) and reply.startswith("NOPERM"), (cmd, reply)
        assert victim.call(b"PING") == "PONG"


def test_monitor_client_local_reply_in_order(sluice):
    """A MONITOR client's own CLIENT GETNAME/ID come back in order (their
    fences are answered on a MONITOR connection too)."""
    with sluice.raw() as m:
        m.send(enc(b"MONITOR") + enc(b"CLIENT", b"GETNAME") + enc(b"CLIENT", b"ID"))
        ok, name, cid = m.read_replies(3, timeout=5 * SLOW)
        assert ok == "OK" and name is None and isinstance(cid, int), (ok, name, cid)


def test_deferred_local_commands_are_bounded(redis_factory, sluice_factory):
    """CLIENT GETNAME pipelined behind a BLPOP that never returns waits for
    it; a client sending such commands without end must stop being read at
    client_max_pending_bytes, not make sluice keep them all."""
    import time
    srv = redis_factory()
    s = sluice_factory(srv.port, client_max_pending_bytes="64kb")
    before = rss_kb(s.proc.pid)
    with s.raw() as c:
        c.send_command(b"BLPOP", b"tr:never", b"0")
        chunk = enc(b"CLIENT", b"GETNAME") * 4096
        sent = 0
        c.sock.setblocking(False)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and sent < 64 * 1024 * 1024:
            try:
                sent += c.sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break
        grown_kb = rss_kb(s.proc.pid) - before
        # held back: about 64 KB of commands, not every one it was sent
        assert grown_kb < 40 * 1024, f"sluice grew {grown_kb} KB for {sent} bytes"
    assert s.running


def test_checked_client_commands_while_subscribed(sluice, ref):
    """CLIENT LIST/INFO/KILL/UNBLOCK from a subscribed RESP2 client get
    Redis's refusal in that context, as from Redis itself."""
    script = [(b"SUBSCRIBE", b"tr:sub"), (b"CLIENT", b"LIST"), (b"CLIENT", b"INFO"),
              (b"CLIENT", b"KILL", b"TYPE", b"pubsub"), (b"CLIENT", b"UNBLOCK", b"1"),
              (b"PING",)]
    assert_same_replies(sluice, ref, script, pipelined=True)


@pytest.mark.parametrize("pipelined", [False, True])
def test_client_name_commands_in_subscribed_context(sluice, ref, pipelined):
    """In RESP2 pub/sub Redis refuses CLIENT SETNAME/GETNAME/ID; after the
    last UNSUBSCRIBE it runs them again. sluice answers the same, in order,
    and a refused SETNAME changes nothing."""
    script = [(b"SUBSCRIBE", b"tr:ctx"), (b"CLIENT", b"SETNAME", b"x"), (b"CLIENT", b"GETNAME"),
              (b"CLIENT", b"ID"), (b"PSUBSCRIBE", b"tr:*"), (b"UNSUBSCRIBE", b"tr:ctx"),
              (b"CLIENT", b"GETNAME"), (b"PUNSUBSCRIBE",), (b"CLIENT", b"SETNAME", b"y"),
              (b"CLIENT", b"GETNAME"), (b"SSUBSCRIBE", b"tr:s"), (b"CLIENT", b"GETNAME"),
              (b"SUNSUBSCRIBE",), (b"CLIENT", b"GETNAME")]
    assert_same_replies(sluice, ref, script, pipelined=pipelined)


def test_wait_counts_replicas_that_have_the_clients_writes(redis_factory, sluice_factory):
    """WAIT after a write counts only replicas that have that write, as on
    a direct connection: the write went on a shared connection and WAIT on
    the client's private one, which first takes the offset of what Redis
    has run. A stopped replica is not counted; inside MULTI, WAIT is
    queued like any command and EXEC's array has no extra element."""
    primary = redis_factory()
    replica = redis_factory("--replicaof", "127.0.0.1", str(primary.port))
    wait_until(lambda: primary.client().info("replication").get("slave0", {}).get("state")
               == "online", 10 * SLOW, msg="the replica to be online")
    s = sluice_factory(primary.port)
    with s.raw() as c:
        assert c.call("SET", "wait:k", "1") == "OK"
        assert c.call("WAIT", "1", str(int(5000 * SLOW))) == 1
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        for port in (primary.port, s.port):   # directly, then through sluice
            with RawConn(port) as c:
                assert c.call("SET", "wait:k", f"via {port}") == "OK"
                assert c.call("WAIT", "1", "200") == 0, port
        with s.raw() as c:
            c.send(enc("MULTI") + enc("SET", "wait:k", "m") + enc("WAIT", "0", "0") + enc("EXEC"))
            assert c.read_replies(4) == ["OK", "QUEUED", "QUEUED", ["OK", 0]]
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    with s.raw() as c:
        assert c.call("SET", "wait:k", "2") == "OK"
        assert c.call("WAIT", "1", str(int(5000 * SLOW))) == 1


def test_wait_errs_when_the_backend_user_may_not_take_the_offset(redis_factory, sluice_factory):
    """WAIT's offset comes from sluice's SPUBLISH __sluice__:wait, which
    Redis refuses to a backend user with no channels (Redis 7's default
    for a new user). WAIT would then count replicas that lack the
    client's writes (a stopped replica counted as having them): it gets
    an error instead, and the count again once the user may publish."""
    primary = redis_factory()
    replica = redis_factory("--replicaof", "127.0.0.1", str(primary.port))
    wait_until(lambda: primary.client().info("replication").get("slave0", {}).get("state")
               == "online", 10 * SLOW, msg="the replica to be online")
    primary.client().execute_command("ACL", "SETUSER", "waiter", "on", ">pw", "~*", "+@all",
                                     "resetchannels")
    s = sluice_factory(primary.port, backend_user="waiter", backend_password="pw")
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with s.raw() as c:
            assert c.call("AUTH", "waiter", "pw") == "OK"
            assert c.call("SET", "wait:acl", "1") == "OK"
            reply = c.call("WAIT", "1", "200")
            assert isinstance(reply, Err) and "__sluice__:wait" in reply, reply
            assert c.call("GET", "wait:acl") == b"1"
            primary.client().execute_command("ACL", "SETUSER", "waiter", "&__sluice__:wait")
            assert c.call("WAIT", "1", "200") == 0
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
