"""SIGTERM: sluice exits 0 promptly with clients connected, and answers
requests in flight first. Also multiple listen addresses and log_file."""

import signal
import subprocess
import threading
import time

import redis

from helpers import SLOW, RawConn, encode_command, free_port


def _wait_exit(s, timeout):
    try:
        return s.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_sigterm_with_idle_and_blocked_clients(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    idle = [RawConn(s.port) for _ in range(10)]
    for c in idle:
        assert c.call("PING") == "PONG"
    sub = RawConn(s.port)
    sub.call("SUBSCRIBE", "ch")
    blocked = RawConn(s.port, timeout=20)
    blocked.send(encode_command("BLPOP", "q", "1"))
    time.sleep(0.2)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    code = _wait_exit(s, 10 * SLOW)
    elapsed = time.monotonic() - t0
    try:
        assert code is not None, "sluice did not exit within 10 s of SIGTERM"
        assert code == 0, f"exit status {code}"
        assert elapsed < 8 * SLOW
        # clients see the connection closed
        for c in idle + [sub]:
            assert c.is_closed_by_peer(5)
    finally:
        for c in idle + [sub, blocked]:
            c.close()
    s.check_stop()           # sanitizer scan of the log


def test_sigterm_answers_request_in_flight(redis_factory, sluice_factory):
    """A BLPOP q 1 in flight when SIGTERM arrives still gets its reply
    (nil after 1 s) before sluice exits 0."""
    srv = redis_factory()
    s = sluice_factory(srv.port)
    c = RawConn(s.port, timeout=20)
    try:
        c.send(encode_command("BLPOP", "q", "1"))
        time.sleep(0.2)
        s.proc.send_signal(signal.SIGTERM)
        reply = c.read_reply_raw(10 * SLOW)
        assert reply == b"*-1\r\n", reply
        code = _wait_exit(s, 10 * SLOW)
        assert code == 0
    finally:
        c.close()
    s.check_stop()


def test_sigterm_under_load(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    stop = threading.Event()
    errors = []

    def hammer():
        try:
            c = redis.Redis(host="127.0.0.1", port=s.port, socket_timeout=10 * SLOW)
            while not stop.is_set():
                p = c.pipeline(transaction=False)
                for i in range(100):
                    p.set(f"l{i}", i)
                p.execute()
        except (redis.ConnectionError, redis.ResponseError):
            pass                    # expected once sluice goes away
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGTERM)
    code = _wait_exit(s, 10 * SLOW)
    stop.set()
    for t in threads:
        t.join(15 * SLOW)
    assert code == 0, f"exit status {code}"
    assert not any(isinstance(e, redis.TimeoutError) for e in errors), errors
    s.check_stop()


def test_sigint_exits_zero(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with s.raw() as c:
        c.call("PING")
        s.proc.send_signal(signal.SIGINT)
        assert _wait_exit(s, 10 * SLOW) == 0
    s.check_stop()


def test_multiple_listen_addresses(redis_factory, sluice_factory):
    srv = redis_factory()
    ports = [free_port(), free_port()]
    s = sluice_factory(srv.port, listen_ports=ports)
    a = redis.Redis(host="127.0.0.1", port=ports[0])
    b = redis.Redis(host="127.0.0.1", port=ports[1])
    assert a.set("ml", "1") is True
    assert b.get("ml") == b"1"
    a.close()
    b.close()


def test_log_file(redis_factory, sluice_factory, tmp_path):
    srv = redis_factory()
    logf = tmp_path / "custom.log"
    s = sluice_factory(srv.port, log_file=str(logf), log_level="debug")
    with s.raw() as c:
        assert c.call("PING") == "PONG"
    s.check_stop()
    assert logf.exists() and logf.stat().st_size > 0, "log_file not written"
