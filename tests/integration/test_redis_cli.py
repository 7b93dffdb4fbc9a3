"""redis-cli pointed at sluice prints what it prints against Redis."""

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")


def cli(port, *args, stdin=None):
    p = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                       input=stdin, capture_output=True, timeout=20)
    return p.returncode, p.stdout, p.stderr


def test_redis_cli_basic(sluice, clean):
    assert cli(sluice.port, "ping")[:2] == (0, b"PONG\n")
    assert cli(sluice.port, "set", "k", "v")[:2] == (0, b"OK\n")
    assert cli(sluice.port, "get", "k")[:2] == (0, b"v\n")


SESSIONS = [
    ["set", "k", "v"],
    ["get", "k"],
    ["get", "nosuchkey"],
    ["incr", "n"],
    ["rpush", "l", "a", "b", "c"],
    ["lrange", "l", "0", "-1"],
    ["hset", "h", "f", "1", "g", "2"],
    ["hgetall", "h"],
    ["zadd", "z", "1", "a", "2.5", "b"],
    ["zrange", "z", "0", "-1", "withscores"],
    ["get"],
    ["lpush", "k", "x"],
    ["nosuchcommand", "arg"],
    ["-n", "2", "set", "indb2", "yes"],
    ["-n", "2", "get", "indb2"],
    ["get", "indb2"],
    ["-r", "3", "incr", "rep"],
    ["--no-raw", "lrange", "l", "0", "-1"],
    ["--no-raw", "get", "nosuchkey"],
    ["--no-raw", "get"],
    ["--raw", "hgetall", "h"],
    ["-x", "set", "fromstdin"],
    ["get", "fromstdin"],
    ["type", "l"],
    ["dbsize"],
    ["echo", "hello world"],
    ["client", "setname", "cli"],
    ["client", "getname"],
    ["hello", "2"],
]


def test_redis_cli_same_output_as_redis(sluice, ref, clean):
    diffs = []
    for args in SESSIONS:
        stdin = b"from-stdin" if "-x" in args else None
        got = cli(sluice.port, *args, stdin=stdin)
        want = cli(ref.port, *args, stdin=stdin)
        if args[0] == "hello" or args[:2] == ["--no-raw", "hello"]:
            continue
        if got != want:
            diffs.append(f"redis-cli {' '.join(args)}:\n    sluice: {got!r}\n    redis:  {want!r}")
    assert not diffs, "\n".join(diffs)


def test_redis_cli_hello_2(sluice):
    code, out, err = cli(sluice.port, "hello", "2")
    assert code == 0, err
    lines = out.split(b"\n")
    assert b"proto" in lines
    assert lines[lines.index(b"proto") + 1] == b"2"


def test_redis_cli_stdin_commands(sluice, ref, clean):
    """Commands read from stdin, one a line (redis-cli sends them one by one)."""
    script = b"set a 1\nincr a\nget a\nmulti\nincr a\nexec\nget a\n"
    got = subprocess.run(["redis-cli", "-p", str(sluice.port)], input=script,
                         capture_output=True, timeout=20)
    want = subprocess.run(["redis-cli", "-p", str(ref.port)], input=script,
                          capture_output=True, timeout=20)
    assert (got.returncode, got.stdout) == (want.returncode, want.stdout)
