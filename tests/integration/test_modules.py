"""Commands sluice does not know: those of a Redis module (tests/modules/
sluicetest.c, loaded into the backend). sluice learns what they are from
the backend (COMMAND INFO): a keyed command goes over the shared
connections like any other, a blocking one gets a private connection so
that it stalls no other client, and a command Redis does not know either
still gets Redis's own error.

With SLUICE_TEST_DIRECT=1 the tests talk to the backend itself, to check
what they expect from plain Redis."""

import threading
import time
from pathlib import Path

import pytest

from conftest import SLUICE_BIN
from helpers import SLOW, Err, Simple, encode_command

# Built by `make test` next to the sluice binary under test.
MODULE = Path(SLUICE_BIN).parent / "sluicetest.so"


@pytest.fixture
def modredis(redis_factory):
    """A redis-server that loaded the test module."""
    if not MODULE.is_file():
        pytest.fail(f"test module not built: {MODULE} (`make test` builds it)", pytrace=False)
    return redis_factory("--loadmodule", str(MODULE))


@pytest.fixture
def modsluice(modredis, sluice_factory):
    """A sluice in front of the redis-server with the test module."""
    return sluice_factory(modredis.port)


def test_module_commands_as_redis_describes_them(modredis):
    """What sluice will learn from the backend (asked of Redis directly)."""
    with modredis.raw() as c:
        info = c.call(b"COMMAND", b"INFO", b"sluicetest.echo", b"sluicetest.block",
                      b"sluicetest.noflags")
    # name, arity, flags, first key, last key, step, ...
    described = {e[0]: (e[1], sorted(str(f) for f in e[2]), e[3], e[4], e[5]) for e in info}
    assert described == {
        b"sluicetest.echo": (-1, ["fast", "module", "readonly"], 1, 1, 1),
        b"sluicetest.block": (-1, ["blocking", "module"], 0, 0, 0),
        b"sluicetest.noflags": (-1, ["module"], 0, 0, 0),
    }


def test_keyed_module_command_answered(modsluice):
    with modsluice.raw() as c:
        assert c.call_raw(b"sluicetest.echo", b"k", b"v") == b"$1\r\nv\r\n"
        assert c.call_raw(b"SLUICETEST.ECHO", b"other", b"hello world") == \
            b"$11\r\nhello world\r\n"
        assert c.call(b"sluicetest.noflags") == Simple("OK")
        assert c.call_raw(b"PING") == b"+PONG\r\n"


def test_blocking_module_command_does_not_stall_others(modsluice):
    blocked = modsluice.raw(timeout=10 * SLOW)
    other = modsluice.raw()
    try:
        assert other.call(b"SET", b"x", b"1") == Simple("OK")
        t0 = time.monotonic()
        blocked.send_command(b"sluicetest.block", b"2000")
        time.sleep(0.2)
        s = time.monotonic()
        assert other.call(b"GET", b"x") == b"1"
        latency = time.monotonic() - s
        assert latency < 0.5 * SLOW, \
            f"GET took {latency:.2f} s while another client ran sluicetest.block 2000"
        # The blocked client really was blocked, and then woken by its timeout.
        assert blocked.read_reply() == Simple("WOKE")
        waited = time.monotonic() - t0
        assert waited >= 1.9, f"sluicetest.block 2000 answered after {waited:.2f} s"
        assert blocked.call_raw(b"PING") == b"+PONG\r\n"
    finally:
        blocked.close()
        other.close()


def test_command_unknown_to_redis_gets_redis_error(modsluice):
    with modsluice.raw() as c:
        for _ in range(2):   # also once sluice has asked the backend about it
            reply = c.call(b"FOO.BAR", b"1")
            assert isinstance(reply, Err), reply
            assert reply.startswith("ERR unknown command"), reply
            assert "FOO.BAR" in reply, reply
        assert c.call_raw(b"PING") == b"+PONG\r\n"


def _pipeline_client(sluice, n, box, idx):
    """Send N sluicetest.echo commands, each followed by a GET of a key of
    this client's own, all in one write; check every reply is its own, in
    order."""
    try:
        with sluice.raw(timeout=10 * SLOW) as c:
            data, want = [], []
            for j in range(n):
                data.append(encode_command("sluicetest.echo", f"k{idx}_{j}", f"v{idx}_{j}"))
                want.append(f"v{idx}_{j}".encode())
                data.append(encode_command("GET", f"g{idx}_{j % 10}"))
                want.append(f"g{idx}_{j % 10}".encode())
            c.send(b"".join(data))
            got = c.read_replies(len(want))
            wrong = [j for j in range(len(want)) if got[j] != want[j]]
            box[idx] = not wrong or \
                f"reply {wrong[0]} is {got[wrong[0]]!r}, expected {want[wrong[0]]!r}"
    except Exception as e:  # noqa: BLE001 - reported by the test
        box[idx] = repr(e)


def test_pipelined_module_commands_from_5_clients_stay_in_order(modsluice):
    with modsluice.raw() as c:
        for idx in range(5):
            for j in range(10):
                assert c.call(b"SET", f"g{idx}_{j}", f"g{idx}_{j}") == Simple("OK")
    box = {}
    threads = [threading.Thread(target=_pipeline_client, args=(modsluice, 100, box, i),
                                daemon=True) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30 * SLOW)
    assert all(not t.is_alive() for t in threads), "a pipelining client did not finish"
    assert box == {i: True for i in range(5)}, box
