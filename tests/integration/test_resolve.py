"""Host names are looked up off the event loop.

A backend or cluster node named by a host name is looked up with evdns
while sluice goes on serving everyone else: a resolver that never answers
delays nobody (the lookup gives up, is logged naming the host, and is
tried again with the connect backoff). The hanging resolver is a UDP
socket that drops every query, made /etc/resolv.conf of sluice alone by a
private mount namespace (hanging_resolver in conftest.py).
"""

import time

import pytest
import redis

from conftest import DIRECT, HangingResolver, Sluice, _read_log
from helpers import SLOW, Err, RawConn, wait_until

HANGING = "slow-node.invalid-test"
FAST = 0.3 * SLOW   # what a reply sluice gives itself may take, at most


def timed_call(port, *cmd):
    """(reply, seconds) of CMD on a fresh connection."""
    t0 = time.monotonic()
    with RawConn(port, timeout=5 * SLOW) as c:
        reply = c.call(*cmd)
    return reply, time.monotonic() - t0


def assert_answers_fast(port, seconds, *cmd):
    """Send CMD again and again for SECONDS: every answer comes within FAST."""
    slowest = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reply, took = timed_call(port, *cmd)
        assert not isinstance(reply, Err), reply
        slowest = max(slowest, took)
        time.sleep(0.02)
    assert slowest < FAST, f"{cmd} took {slowest:.2f} s while a lookup hung"


@pytest.mark.skipif(DIRECT, reason="sluice's own lookups")
def test_hanging_resolver_delays_no_other_client(redis_factory, sluice_factory,
                                                 hanging_resolver):
    """backend = a host name whose lookup hangs: sluice starts, answers
    what it answers itself at once while the lookup hangs, the request
    that needs the backend gets an error naming the host, and the log
    says which host could not be looked up and why. (Before: getaddrinfo
    on the loop; here at start, where sluice sat in it and then exited.)"""
    srv = redis_factory()
    s = sluice_factory(srv.port, backend_host=HANGING, prefix=hanging_resolver.prefix)
    wait_until(lambda: hanging_resolver.asked_for(HANGING), 5 * SLOW,
               msg="sluice asked the resolver")
    with RawConn(s.port, timeout=10 * SLOW) as waiting:
        waiting.send_command(b"GET", b"k")
        # Past the first lookup's end and into the next one's.
        assert_answers_fast(s.port, 1.5, b"PROXY", b"PING")
        assert_answers_fast(s.port, 0.3, b"CLIENT", b"ID")
        reply = waiting.read_reply()
    assert isinstance(reply, Err) and HANGING in reply, reply
    wait_until(lambda: f"cannot resolve host {HANGING}" in _read_log(s.log_path), 5 * SLOW,
               msg="the log names the host that could not be looked up")
    assert_answers_fast(s.port, 0.3, b"PROXY", b"PING")


@pytest.mark.skipif(DIRECT, reason="sluice's own lookups")
def test_backend_by_host_name(redis_factory, sluice_factory):
    """backend = localhost:PORT: looked up (through /etc/hosts) and used."""
    srv = redis_factory()
    s = sluice_factory(srv.port, backend_host="localhost")
    with s.raw() as c:
        assert c.call(b"SET", b"named", b"1") == "OK"
        assert c.call(b"GET", b"named") == b"1"
    assert "backend localhost:" in _read_log(s.log_path)


def _slot_map_known(c):
    try:
        return c.set("dns:ready", 1)
    except redis.ResponseError:
        return False


@pytest.mark.skipif(DIRECT, reason="sluice's own lookups")
def test_cluster_seed_lookup_hangs(redis_cluster, tmp_path):
    """cluster = numeric seeds, then one whose host name hangs (5 s): the
    cluster is served through the others while that lookup hangs, and
    its failure is logged naming the host."""
    resolver = HangingResolver(tmp_path, options="timeout:5 attempts:1")
    seeds = redis_cluster.seeds + f" {HANGING}:{redis_cluster.ports[0]}"
    # A seed out of the slot map logs its connections' end at info.
    s = Sluice(tmp_path / "sluice", None, cluster_seeds=seeds, prefix=resolver.prefix,
               extra={"log_level": "info"})
    failed = f"cannot resolve host {HANGING}"
    try:
        s.start()
        c = s.client()
        wait_until(lambda: _slot_map_known(c), 5 * SLOW, msg="sluice has the slot map")
        assert resolver.asked_for(HANGING)
        deadline = time.monotonic() + 1.5
        slowest = 0.0
        i = 0
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            c.set(f"dns:{i}", i)
            assert c.get(f"dns:{i}") == str(i).encode()
            slowest = max(slowest, time.monotonic() - t0)
            i += 1
        c.close()
        assert failed not in _read_log(s.log_path), "the lookup gave up too early for this test"
        assert slowest < FAST, f"SET+GET took {slowest:.2f} s while a lookup hung"
        wait_until(lambda: failed in _read_log(s.log_path), 10 * SLOW,
                   msg="the log names the host that could not be looked up")
    finally:
        s.check_stop()
        resolver.stop()
