"""Adversarial review of the shared-connection core: lifetimes of clients,
requests and backend connections across callbacks, and placement paths
that lost a reply or a connection. Each test names the scenario it pins."""

import time

import pytest

from helpers import SLOW, RawConn, busy_eval, wait_until


def _redis_client_id(backend, cmd):
    """The Redis client id of the connection whose last command is CMD."""
    direct = backend.client()
    try:
        for entry in direct.client_list():
            if entry.get("cmd") == cmd:
                return int(entry["id"])
    finally:
        direct.close()
    return None


def test_private_conn_lost_while_client_finishes(redis_factory, sluice_factory):
    """A client with a private connection, CLIENT REPLY OFF and QUIT sent
    while its BLPOP waits: when that connection is killed, the failed BLPOP
    is its last reply, so the client closes inside the failure callback and
    releases the very connection being failed. sluice must not touch the
    freed connection or client (ASan build: heap-use-after-free)."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    with s.raw() as c:
        assert c.call(b"SELECT", b"0") == "OK"
        c.send_command(b"CLIENT", b"REPLY", b"OFF")
        c.send_command(b"BLPOP", b"review:nothing", b"0")
        wait_until(lambda: _redis_client_id(backend, "blpop") is not None, 5 * SLOW,
                   msg="BLPOP reached Redis")
        c.send_command(b"QUIT")
        time.sleep(0.2)
        direct = backend.client()
        direct.execute_command("CLIENT", "KILL", "ID", _redis_client_id(backend, "blpop"))
        direct.close()
        assert c.is_closed_by_peer(5 * SLOW)
    # sluice is still there and serves others
    with s.raw() as c2:
        assert c2.call(b"PING") == "PONG"
    assert s.running


def test_script_kill_while_subscribed_frees_its_connection(redis_factory, sluice_factory):
    """SCRIPT KILL from a subscribed client: its reply streams unpaired, so
    nothing waits on a one-shot connection for it. Each one used to leave a
    one-shot connection open for good, counted against
    backend_max_connections, until no client could get a private one."""
    backend = redis_factory()
    s = sluice_factory(backend.port, backend_max_connections=3)
    with s.raw() as sub:
        sub.send_command(b"SUBSCRIBE", b"review:ch")
        assert sub.read_reply()[0] == b"subscribe"
        for _ in range(4):
            sub.send_command(b"SCRIPT", b"KILL")
            # Redis answers it in the subscribed context (an error), as it
            # would to a direct subscriber
            reply = sub.read_reply(timeout=5 * SLOW)
            assert isinstance(reply, str) and reply.startswith("ERR"), reply
        info = s.info()
        assert int(info["backend_private_connections"]) == 1, info
    wait_until(lambda: int(s.info()["backend_private_connections"]) == 0, 5 * SLOW,
               msg="private connections released")
    with s.raw() as c:
        assert c.call(b"SELECT", b"1") == "OK"


def test_unlearnable_command_does_not_stall_pipeline(redis_factory, sluice_factory):
    """An unknown command that cannot be learned (backend down) is refused
    at once; the commands pipelined behind it in the same packet must still
    be answered, not left in the input buffer until the client sends more."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    backend.stop()
    with s.raw() as c:
        c.send(b"*1\r\n$14\r\nREVIEWUNKNOWN1\r\n*1\r\n$4\r\nPING\r\n")
        first = c.read_reply(timeout=5 * SLOW)
        second = c.read_reply(timeout=3 * SLOW)
        assert isinstance(first, str) and "backend" in first, first
        assert isinstance(second, str) and "backend" in second, second


def test_blocked_client_input_is_bounded(redis_factory, sluice_factory):
    """A client held while its unknown command is learned (Redis busy) keeps
    being read: what it sends meanwhile must stay within
    client_query_buffer_limit, as Redis bounds a blocked client's query
    buffer, instead of growing without bound."""
    backend = redis_factory()
    s = sluice_factory(backend.port, client_query_buffer_limit="1mb")
    busy = RawConn(backend.port)
    busy.send_command(b"EVAL", b"local s = tonumber(redis.call('TIME')[1]) "
                      b"while tonumber(redis.call('TIME')[1]) - s < 3 do end", b"0")
    time.sleep(0.1)
    with s.raw() as c:
        c.send_command(b"REVIEWUNKNOWN2")
        chunk = b"*1\r\n$4\r\nPING\r\n" * 4096
        limit = 32 * 1024 * 1024
        sent = 0
        closed = False
        c.sock.setblocking(False)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and sent < limit:
            try:
                sent += c.sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                closed = True
                break
        # kernel buffers take a few MB; sluice itself must take at most
        # about client_query_buffer_limit more
        assert closed or sent < 16 * 1024 * 1024, \
            f"sluice took {sent} bytes from a held client"
    busy.close()


SLOW_EVAL = busy_eval(300000)


def test_reply_order_after_leaving_pubsub(redis_factory, sluice_factory):
    """After UNSUBSCRIBE from every channel a RESP2 client is back to
    request/reply with Redis, but sluice keeps streaming its replies
    unpaired until RESET: a reply sluice writes itself (CLIENT GETNAME)
    then overtakes a slower reply from Redis pipelined before it."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    with s.raw() as c:
        c.send_command(b"SUBSCRIBE", b"review:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send_command(b"UNSUBSCRIBE", b"review:ch")
        assert c.read_reply()[0] == b"unsubscribe"
        c.send(b"".join([_enc(*SLOW_EVAL), _enc(b"CLIENT", b"GETNAME")]))
        replies = c.read_replies(2, timeout=5 * SLOW)
        assert replies == [1, None], replies


def test_quit_while_subscribed_keeps_earlier_replies(redis_factory, sluice_factory):
    """QUIT pipelined behind a command of a subscribed client: Redis answers
    that command (here an error: EVAL in the subscribed context), then +OK,
    then closes. sluice answers QUIT itself and must not close before
    the reply Redis still owes is written."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    with s.raw() as c:
        c.send_command(b"SUBSCRIBE", b"review:ch")
        assert c.read_reply()[0] == b"subscribe"
        c.send(_enc(*SLOW_EVAL) + _enc(b"QUIT"))
        data, eof = c.read_all_until_eof(timeout=5 * SLOW)
        assert eof
        # Redis refuses EVAL in the subscribed context with an error;
        # either way one reply comes before QUIT's +OK
        assert data.endswith(b"+OK\r\n") and len(data) > len(b"+OK\r\n"), data


def _enc(*args):
    from helpers import encode_command
    return encode_command(*args)


BUSY_EVAL = (b"EVAL", b"local s = tonumber(redis.call('TIME')[1]) "
             b"while tonumber(redis.call('TIME')[1]) - s < 20 do end return 1", b"0")


@pytest.mark.parametrize("password", [None, "review-pw"])
def test_script_kill_gets_past_busy_script(redis_factory, sluice_factory, password):
    """SCRIPT KILL goes on a one-shot connection (authenticated first when
    sluice has backend credentials), not behind the busy script on the
    shared one; the one-shot connection is freed after its reply."""
    backend = redis_factory()
    if password:
        direct = backend.client()
        direct.config_set("requirepass", password)
        direct.close()
    extra = {"backend_password": password} if password else {}
    s = sluice_factory(backend.port, **extra)
    # With backend_password, clients log in to sluice with it (issue 10).
    login = (password,) if password else ()
    with s.raw() as a, s.raw() as b:
        for c in (a, b):
            if login:
                assert c.call(b"AUTH", *login) == "OK"
        a.send_command(*BUSY_EVAL)
        time.sleep(0.3)
        assert b.call(b"SCRIPT", b"KILL", timeout=5 * SLOW) == "OK"
        reply = a.read_reply(timeout=5 * SLOW)
        assert isinstance(reply, str) and "killed" in reply.lower(), reply
        assert b.call(b"PING") == "PONG"
    wait_until(lambda: int(s.info(auth=login)["backend_private_connections"]) == 0, 5 * SLOW,
               msg="one-shot connection freed")


def test_script_kill_inside_multi_is_queued(redis_factory, sluice_factory):
    """Inside MULTI, SCRIPT KILL is queued on the transaction's connection
    like any command (Redis: +QUEUED, its result in EXEC's array)."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    with s.raw() as c:
        assert c.call(b"MULTI") == "OK"
        assert c.call(b"SCRIPT", b"KILL") == "QUEUED"
        result = c.call(b"EXEC")
        assert isinstance(result, list) and len(result) == 1
        assert result[0].startswith("NOTBUSY"), result


def test_client_kill_cannot_reach_sluice_connections(redis_factory, sluice_factory):
    """No CLIENT KILL form reaches one of sluice's connections, shared or
    private: old form, ID, ADDR (also behind a harmless filter of the same
    kind), LADDR, TYPE, USER, any case. CLIENT KILL acts on sluice's
    clients (issue 11), and Redis sees it with a filter matching nobody."""
    backend = redis_factory()
    s = sluice_factory(backend.port)
    direct = backend.client()
    with s.raw() as c:
        assert c.call(b"SELECT", b"0") == "OK"   # a private connection too
        # all but this client and redis_factory's readiness PING
        mine = [e for e in direct.client_list() if e["cmd"] not in ("client|list", "ping")]
        assert len(mine) >= 2, mine
        laddr = mine[0]["laddr"].encode()
        forms = []
        id_forms = []
        # CLIENT KILL ID names sluice's clients (issue 11): the Redis id of
        # one of sluice's connections is no sluice client's id here, so it
        # names nobody; address forms are refused.
        own = str(c.call(b"CLIENT", b"ID"))
        shared = {v.split("redis_id=")[1].split(",")[0] for k, v in s.info().items()
                  if k.startswith("backend_") and "redis_id=" in v}
        assert shared & {e["id"] for e in mine}, (shared, mine)
        for e in mine:
            cid, addr = e["id"].encode(), e["addr"].encode()
            forms += [[b"KILL", addr], [b"kill", addr], [b"KILL", b"ADDR", addr],
                      [b"KILL", b"ADDR", b"10.0.0.1:1", b"ADDR", addr]]
            if e["id"] != own:
                id_forms += [[b"KILL", b"ID", cid], [b"KILL", b"id", cid, b"SKIPME", b"no"],
                             [b"KILL", b"ID", b"999999", b"ID", cid]]
        forms += [[b"KILL", b"LADDR", laddr], [b"KILL", b"TYPE", b"normal"],
                  [b"KILL", b"USER", b"default"], [b"KILL", b"SKIPME", b"yes"]]
        for f in forms:
            reply = c.call(b"CLIENT", *f)
            assert reply == 0 or reply == "ERR No such client", (f, reply)
        for f in id_forms:
            assert c.call(b"CLIENT", *f) == 0, f
        after = {e["id"] for e in direct.client_list()}
        assert {e["id"] for e in mine} <= after
        assert c.call(b"PING") == "PONG"
    direct.close()


def test_client_kill_addr_ipv6_backend(redis_factory, sluice_factory):
    """Over IPv6 Redis writes a client's address as [ip]:port (CLIENT
    LIST's addr): CLIENT KILL ADDR in that form must not reach sluice's
    own connection either."""
    backend = redis_factory("--bind", "127.0.0.1", "::1")
    s = sluice_factory(backend.port, start=False)
    text = s.config_path.read_text().replace(f"backend = 127.0.0.1:{backend.port}",
                                             f"backend = [::1]:{backend.port}")
    s.config_path.write_text(text)
    s.start()
    direct = backend.client()
    with s.raw() as c:
        assert c.call(b"PING") == "PONG"
        mine = [e for e in direct.client_list() if e["addr"].startswith("[")]
        assert mine, direct.client_list()
        for e in mine:
            for f in ([b"KILL", e["addr"].encode()], [b"KILL", b"ADDR", e["addr"].encode()]):
                reply = c.call(b"CLIENT", *f)
                assert reply == 0 or reply == "ERR No such client", (f, reply)
        assert c.call(b"PING") == "PONG"
        assert {e["id"] for e in mine} <= {e["id"] for e in direct.client_list()}
    direct.close()
