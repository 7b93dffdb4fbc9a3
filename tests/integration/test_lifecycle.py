"""Process life-cycle limits: running out of file descriptors while
accepting, and inline commands as long as Redis takes them."""

import os
import resource
import socket
import time

from helpers import SLOW, RawConn, wait_until

FD_LIMIT = 64


def _cpu_seconds(pid):
    """User + system CPU time of PID so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # Fields after the ")" closing the command name; utime and stime are
    # fields 14 and 15 of the whole line.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _accept_lines(log_path):
    text = log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if "accept" in line]


def test_out_of_fds_pauses_accepting_without_spinning(redis_factory, sluice_factory):
    backend = redis_factory()
    s = sluice_factory(backend.port)
    # Lower the running sluice's limit so that accept fails with EMFILE
    # (sluice raises its own soft limit at start, so set both).
    resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    socks = []
    try:
        for _ in range(FD_LIMIT + 40):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            socks.append(c)
        wait_until(lambda: any("accept failed" in line for line in _accept_lines(s.log_path)),
                   5 * SLOW, msg="sluice to log an accept failure")
        lines_before = len(_accept_lines(s.log_path))
        cpu_before = _cpu_seconds(s.proc.pid)
        time.sleep(3)
        cpu_used = _cpu_seconds(s.proc.pid) - cpu_before
        new_lines = _accept_lines(s.log_path)[lines_before:]
        assert cpu_used < 0.5 * SLOW, f"sluice used {cpu_used:.2f} s CPU in 3 s while out of fds"
        assert len(new_lines) <= 5, f"{len(new_lines)} accept log lines in 3 s:\n" + \
            "\n".join(new_lines[:10])
    finally:
        for c in socks:
            c.close()
    # Once the descriptors are back, new clients are served again.
    def served():
        with s.raw(timeout=2) as c:
            return c.call_raw(b"PING") == b"+PONG\r\n"
    wait_until(served, 5 * SLOW, msg="PING through sluice after the fds came back")
    assert s.proc.poll() is None


def _inline_rpush_then_llen(port, n):
    """Send `RPUSH l a1 ... aN` inline, then LLEN l; return both raw replies."""
    line = b"RPUSH l " + b" ".join(b"a%d" % i for i in range(1, n + 1)) + b"\r\n"
    with RawConn(port, timeout=5 * SLOW) as c:
        c.send(line)
        pushed = c.read_reply_raw()
        return pushed, c.call_raw(b"LLEN", b"l")


def test_inline_command_with_2000_arguments_like_redis(redis_factory, sluice_factory):
    backend = redis_factory()
    ref = redis_factory()
    s = sluice_factory(backend.port)
    got = _inline_rpush_then_llen(s.port, 2000)
    want = _inline_rpush_then_llen(ref.port, 2000)
    assert want == (b":2000\r\n", b":2000\r\n")
    assert got == want
