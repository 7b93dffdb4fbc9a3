"""Helpers shared by the integration tests: free ports, a raw RESP socket
client and a RESP parser that keeps reply types apart (so that comparing
two parsed replies is as strict as comparing their bytes, except where a
test sorts unordered replies on purpose)."""

import os
import socket
import time
from pathlib import Path


def _is_sanitized(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        return b"__asan_init" in data or b"AddressSanitizer" in data
    except OSError:
        return False


def _timing_scale():
    if os.environ.get("SLUICE_SLOW"):
        return float(os.environ["SLUICE_SLOW"])
    binpath = os.environ.get("SLUICE_BIN") or str(
        Path(__file__).resolve().parents[2] / "build" / "sluice")
    return 3.0 if ("san" in binpath or _is_sanitized(binpath)) else 1.0


# Multiply time limits by this (3 on a sanitizer build).
SLOW = _timing_scale()


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kb(pid):
    """PID's resident memory in KB (0 when unknown)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_until(pred, timeout, interval=0.05, msg="condition"):
    """Poll PRED until it returns a true value; return it, or raise
    AssertionError after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {msg}"
                                 + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval)


# --------------------------------------------------------------------------
# RESP


class Simple(str):
    """A +simple string reply."""

    def __repr__(self):
        return f"Simple({str.__repr__(self)})"


class Err(str):
    """A -error reply (text without the '-')."""

    def __repr__(self):
        return f"Err({str.__repr__(self)})"


class Incomplete(Exception):
    pass


def busy_eval(us):
    """EVAL arguments of a script that keeps Redis busy for US microseconds
    (by its own clock), then returns 1."""
    return (b"EVAL", b"local s = redis.call('TIME') local t = s "
            b"while (t[1] - s[1]) * 1000000 + (t[2] - s[2]) < %d do "
            b"t = redis.call('TIME') end return 1" % us, b"0")


def raw_replies(port, script, timeout=10):
    """Each command of SCRIPT (command tuples) on one new connection to
    PORT, a command at a time: the list of raw replies."""
    with RawConn(port, timeout=timeout) as c:
        return [c.call_raw(*cmd) for cmd in script]


def assert_same_replies(sluice, ref, script, pipelined=False):
    """Run SCRIPT (a list of command tuples) on one connection to sluice and
    one to Redis, a command at a time or, PIPELINED, all sent at once, and
    assert that every raw reply is the same."""
    data = b"".join(encode_command(*cmd) for cmd in script)
    out = []
    for srv in (sluice, ref):
        with srv.raw() as c:
            if pipelined:
                c.send(data)
                out.append([c.read_reply_raw() for _ in script])
            else:
                out.append([c.call_raw(*cmd) for cmd in script])
    for cmd, got, want in zip(script, *out):
        assert got == want, f"{cmd}: sluice {got!r} vs redis {want!r}"


def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, (int, float)):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse_reply(buf, pos=0):
    """Parse one RESP2/RESP3 reply at BUF[POS:]. Returns (value, new_pos);
    raises Incomplete when more bytes are needed."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    t = buf[pos:pos + 1]
    line = buf[pos + 1:end]
    nxt = end + 2
    if t == b"+":
        return Simple(line.decode("utf-8", "replace")), nxt
    if t == b"-":
        return Err(line.decode("utf-8", "replace")), nxt
    if t == b":":
        return int(line), nxt
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete
        return bytes(buf[nxt:nxt + n]), nxt + n + 2
    if t in (b"*", b"~", b">"):
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            v, nxt = parse_reply(buf, nxt)
            items.append(v)
        return items, nxt
    if t == b"%":
        n = int(line)
        items = []
        for _ in range(2 * n):
            v, nxt = parse_reply(buf, nxt)
            items.append(v)
        return ("map", items), nxt
    if t == b"_":
        return None, nxt
    if t == b"#":
        return line == b"t", nxt
    if t == b",":
        return float(line), nxt
    if t == b"(":   # big number: its text, as Redis wrote it
        return ("bignum", bytes(line)), nxt
    raise ValueError(f"bad RESP type byte {t!r} at {pos}: {bytes(buf[pos:pos + 40])!r}")


class RawConn:
    """A plain TCP connection speaking raw RESP."""

    def __init__(self, port, host="127.0.0.1", timeout=5, rcvbuf=None, connect=True):
        self.port = port
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        if connect:
            self.sock.connect((host, port))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def send_command(self, *args):
        self.send(encode_command(*args))

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out waiting for a reply")
        self.sock.settimeout(remaining)
        try:
            d = self.sock.recv(1 << 20)
        except ConnectionResetError:
            d = b""
        if not d:
            self.eof = True
            raise EOFError("connection closed by peer")
        self.buf += d

    def read_reply_raw(self, timeout=None):
        """Read one complete reply and return its raw bytes."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            try:
                _, end = parse_reply(self.buf, 0)
                raw = bytes(self.buf[:end])
                del self.buf[:end]
                return raw
            except Incomplete:
                pass
            self._fill(deadline)

    def read_reply(self, timeout=None):
        raw = self.read_reply_raw(timeout)
        return parse_reply(raw, 0)[0]

    def read_replies(self, n, timeout=None):
        """Read N replies (parsed) with one overall deadline."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        out = []
        pos = 0
        while len(out) < n:
            try:
                v, pos2 = parse_reply(self.buf, pos)
                out.append(v)
                pos = pos2
                continue
            except Incomplete:
                pass
            del self.buf[:pos]
            pos = 0
            self._fill(deadline)
        del self.buf[:pos]
        return out

    def call(self, *args, timeout=None):
        self.send_command(*args)
        return self.read_reply(timeout)

    def call_raw(self, *args, timeout=None):
        self.send_command(*args)
        return self.read_reply_raw(timeout)

    def read_all_until_eof(self, timeout=None):
        """Read until the peer closes. Returns (data, closed): closed is False
        when TIMEOUT passed without EOF."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        data = bytearray(self.buf)
        self.buf.clear()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(data), False
            self.sock.settimeout(remaining)
            try:
                d = self.sock.recv(1 << 20)
            except socket.timeout:
                return bytes(data), False
            except ConnectionResetError:
                self.eof = True
                return bytes(data), True
            if not d:
                self.eof = True
                return bytes(data), True
            data += d

    def is_closed_by_peer(self, timeout):
        """True when the peer closes within TIMEOUT (any pending data is
        discarded)."""
        return self.read_all_until_eof(timeout)[1]
