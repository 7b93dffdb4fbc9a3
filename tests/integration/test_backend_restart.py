"""Backend failure and recovery: while Redis is down, requests fail fast
with an error reply ("backend unavailable"), never hang; once Redis is back
on the same port, the SAME client connections work again."""

import threading
import time

import pytest
import redis

from helpers import SLOW

N_CLIENTS = 4


class Worker(threading.Thread):
    """Loops SET/GET on one redis-py connection and records every outcome as
    (phase, kind, detail, seconds)."""

    def __init__(self, port, idx, phase):
        super().__init__(daemon=True)
        self.idx = idx
        self.phase = phase          # shared dict {"name": ...}
        self.events = []
        self.stop_flag = False
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5,
                                  socket_connect_timeout=5, single_connection_client=True)
        self.client_id = self.client.client_id()
        self.lock = threading.Lock()

    def run(self):
        i = 0
        while not self.stop_flag:
            i += 1
            key = f"w{self.idx}"
            phase = self.phase["name"]
            t0 = time.monotonic()
            try:
                assert self.client.set(key, i) is True
                got = self.client.get(key)
                kind, detail = ("ok", None) if got == str(i).encode() else ("bad", got)
            except redis.TimeoutError as e:
                kind, detail = "timeout", str(e)
            except redis.ResponseError as e:
                kind, detail = "error", str(e)
            except redis.ConnectionError as e:
                kind, detail = "connerr", str(e)
            except Exception as e:  # noqa: BLE001
                kind, detail = "other", repr(e)
            with self.lock:
                self.events.append((phase, kind, detail, time.monotonic() - t0))
            if kind != "ok":
                time.sleep(0.02)

    def snapshot(self):
        with self.lock:
            return list(self.events)


def _wait_for(workers, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(pred(w.snapshot()) for w in workers):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_backend_restart_mid_traffic(how, redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    phase = {"name": "up1"}
    workers = [Worker(s.port, i, phase) for i in range(N_CLIENTS)]
    try:
        for w in workers:
            w.start()
        assert _wait_for(workers, lambda ev: sum(e[1] == "ok" for e in ev) >= 20, 10 * SLOW), \
            "traffic through sluice did not get going"

        # ---- backend goes away
        phase["name"] = "down"
        if how == "sigkill":
            srv.proc.kill()
            srv.proc.wait()
            srv.proc = None
        srv.stop()
        t_down = time.monotonic()
        assert _wait_for(workers, lambda ev: sum(e[0] == "down" and e[1] != "ok" for e in ev) >= 5,
                         5 * SLOW), \
            "requests did not start failing after the backend stopped"
        time.sleep(1.0)
        assert s.running, "sluice died when the backend went away"
        with s.raw() as c:
            assert c.call("PROXY", "PING") == "PONG"
        # a fresh client also gets the error quickly
        fresh = s.client(socket_timeout=5)
        t0 = time.monotonic()
        with pytest.raises(redis.ResponseError) as ei:
            fresh.get("x")
        assert "backend unavailable" in str(ei.value)
        assert time.monotonic() - t0 < 2 * SLOW
        fresh.close()

        # ---- backend comes back on the same port
        phase["name"] = "restarting"
        srv.start()
        phase["name"] = "up2"
        t_up = time.monotonic()
        recovered = _wait_for(workers, lambda ev: sum(e[0] == "up2" and e[1] == "ok" for e in ev) >= 5,
                              5 * SLOW)
        recovery_time = time.monotonic() - t_up
    finally:
        for w in workers:
            w.stop_flag = True
        for w in workers:
            w.join(10)

    problems = []
    for w in workers:
        ev = w.snapshot()
        down = [e for e in ev if e[0] == "down"]
        if not any(e[1] == "error" for e in down):
            problems.append(f"client {w.idx}: no error reply while the backend was down "
                            f"(kinds seen: {sorted(set(e[1] for e in down))})")
        for ph, kind, detail, dt in ev:
            if kind == "timeout":
                problems.append(f"client {w.idx}: request hung ({ph}): {detail}")
            elif kind == "error" and "backend unavailable" not in detail:
                problems.append(f"client {w.idx}: unexpected error text ({ph}): {detail!r}")
            elif kind == "connerr":
                problems.append(f"client {w.idx}: connection dropped by sluice ({ph}): {detail!r}"
                                " - clients with no session state must keep their connection")
            elif kind in ("bad", "other"):
                problems.append(f"client {w.idx}: {kind} ({ph}): {detail!r}")
            elif ph == "down" and dt > 2 * SLOW:
                problems.append(f"client {w.idx}: a request took {dt:.1f} s while the backend "
                                f"was down (should fail fast)")
    # de-duplicate the noise
    problems = list(dict.fromkeys(problems))
    assert not problems, "\n".join(problems[:30])
    assert recovered, (f"commands through sluice did not succeed again within {5 * SLOW:.0f} s "
                       f"of the backend restart")
    # the very same client connections (sluice's CLIENT ID is per connection)
    for w in workers:
        assert w.client.client_id() == w.client_id, "client connection was replaced"
        assert w.client.set("final", w.idx) is True
    assert srv.client().exists("final") == 1
    del t_down, recovery_time


def test_backend_down_at_startup_then_up(redis_factory, sluice_factory):
    """sluice starts while Redis is down, answers errors, and recovers when
    Redis appears."""
    srv = redis_factory()
    port = srv.port
    srv.stop()
    s = sluice_factory(port)
    c = s.client(socket_timeout=5)
    try:
        with pytest.raises(redis.ResponseError) as ei:
            c.set("a", "1")
        assert "backend unavailable" in str(ei.value)
        srv.start()

        def ok():
            try:
                return c.set("a", "1") is True
            except redis.ResponseError:
                return False
        deadline = time.monotonic() + 5 * SLOW
        while not ok():
            assert time.monotonic() < deadline, "no recovery after the backend came up"
            time.sleep(0.1)
        assert c.get("a") == b"1"
    finally:
        c.close()


def test_proxy_info_backend_state(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port)
    with s.raw() as c:
        assert c.call("GET", "x") is None
    text = _proxy_info_text(s)
    assert "state=up" in text, text
    srv.stop()
    with s.raw() as c:
        c.call("GET", "x")          # lets sluice notice
    deadline = time.monotonic() + 5 * SLOW
    while "state=up" in _proxy_info_text(s):
        assert time.monotonic() < deadline, "PROXY INFO still says state=up with Redis down"
        time.sleep(0.1)
    srv.start()
    deadline = time.monotonic() + 5 * SLOW
    while "state=up" not in _proxy_info_text(s):
        assert time.monotonic() < deadline, "PROXY INFO never went back to state=up"
        time.sleep(0.1)


def _proxy_info_text(s):
    with s.raw() as c:
        v = c.call("PROXY", "INFO")
    assert isinstance(v, bytes), v
    return v.decode()


def test_reconnect_attempts_log_one_line_each(redis_factory, sluice_factory):
    """While Redis is down, each reconnect attempt is one log line naming
    the cause; sluice's own set-up requests failing with the connection are
    not reported as refused by Redis."""
    srv = redis_factory()
    s = sluice_factory(srv.port, log_level="info")
    with s.raw() as c:
        assert c.call(b"SET", b"k", b"v") == "OK"
    srv.stop()
    time.sleep(1.5 * SLOW)
    text = s.log_path.read_text()
    attempts = [l for l in text.splitlines() if "cannot connect" in l]
    assert attempts and all("Connection refused" in l for l in attempts), text[-2000:]
    assert "refused sluice's own request" not in text, text[-2000:]
    srv.start()
    deadline = time.monotonic() + 5 * SLOW
    while True:
        try:
            with s.raw() as c:
                if c.call(b"GET", b"k") is None:
                    break
        except (OSError, EOFError):
            pass
        assert time.monotonic() < deadline, "sluice did not reconnect"
        time.sleep(0.1)
