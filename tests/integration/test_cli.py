"""The sluice command line: -t (config check), -v, -h, refusing bad configs."""

import re
import subprocess

import pytest

from conftest import require_sluice_bin
from helpers import SLOW, free_port


def run(*args, timeout=10 * SLOW):
    return subprocess.run([require_sluice_bin()] + list(args), capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def write(tmp_path, text, name="sluice.ini"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """; a good config
[proxy]
listen = 127.0.0.1:{p1}
listen = 127.0.0.1:{p2}
backend = 127.0.0.1:{b}
log_level = warning
maxclients = 100
timeout = 0
backend_connections = 2
client_output_buffer_limit = 64mb
client_query_buffer_limit = 1gb
proto_max_bulk_len = 512mb
proto_max_multibulk_len = 1048576
"""


def test_check_good_config(tmp_path):
    cfg = write(tmp_path, GOOD.format(p1=free_port(), p2=free_port(), b=free_port()))
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert b"Error" not in p.stderr and not re.search(rb":\d+: ", p.stderr), p.stderr


def test_check_good_config_all_size_suffixes(tmp_path):
    for i, size in enumerate(["1024", "64k", "64kb", "2m", "2mb", "1g", "1gb", "0"]):
        cfg = write(tmp_path, f"[proxy]\nbackend = 127.0.0.1:6379\n"
                              f"client_output_buffer_limit = {size}\n", name=f"s{i}.ini")
        p = run("-t", "-c", str(cfg))
        assert p.returncode == 0, (size, p.stderr)


# (config text, 1-based line of the error or None for "any line", hint)
BAD = {
    "unknown_key": ("[proxy]\nbackend = 127.0.0.1:6379\nno_such_key = 1\n", 3, "no_such_key"),
    "bad_int": ("[proxy]\nbackend = 127.0.0.1:6379\nmaxclients = abc\n", 3, None),
    "bad_size": ("[proxy]\nbackend = 127.0.0.1:6379\nproto_max_bulk_len = lots\n", 3, None),
    "bad_log_level": ("[proxy]\nbackend = 127.0.0.1:6379\nlog_level = loud\n", 3, None),
    "duplicate_key": ("[proxy]\nbackend = 127.0.0.1:6379\nmaxclients = 5\n"
                      "log_level = info\nmaxclients = 6\n", 5, "maxclients"),
    "missing_backend": ("[proxy]\nlisten = 127.0.0.1:7000\n", None, "backend"),
    "bad_backend_address": ("[proxy]\nbackend = nonsense\n", 2, None),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_check_bad_config(case, tmp_path):
    text, line, hint = BAD[case]
    cfg = write(tmp_path, text)
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 1, f"exit {p.returncode}, stderr {p.stderr!r}"
    err = p.stderr.decode(errors="replace")
    pat = re.escape(str(cfg)) + r":(\d+): (.+)"
    found = re.findall(pat, err)
    assert found, f"no '{cfg}:LINE: message' line on stderr:\n{err}"
    if line is not None:
        assert str(line) in [f[0] for f in found], f"expected line {line}:\n{err}"
    if hint is not None:
        assert any(hint in f[1] for f in found), f"message does not mention {hint!r}:\n{err}"


def test_check_reports_every_error(tmp_path):
    cfg = write(tmp_path, "[proxy]\nbackend = 127.0.0.1:6379\nbogus1 = 1\n"
                          "maxclients = abc\nbogus2 = 2\n")
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 1
    lines = re.findall(re.escape(str(cfg)) + r":(\d+): ", p.stderr.decode())
    assert {"3", "4", "5"} <= set(lines), p.stderr


def test_check_missing_file(tmp_path):
    p = run("-t", "-c", str(tmp_path / "nope.ini"))
    assert p.returncode == 1
    assert p.stderr.strip()


@pytest.mark.parametrize("case", ["unknown_key", "bad_int", "duplicate_key", "missing_backend"])
def test_refuses_to_start_with_bad_config(case, tmp_path):
    port = free_port()
    text, _, _ = BAD[case]
    text = text.replace("[proxy]\n", f"[proxy]\nlisten = 127.0.0.1:{port}\n", 1) \
        if "listen" not in text else text
    cfg = write(tmp_path, text)
    try:
        p = run("-c", str(cfg), timeout=10 * SLOW)
    except subprocess.TimeoutExpired:
        pytest.fail("sluice kept running with a bad config")
    assert p.returncode != 0
    assert re.search(re.escape(str(cfg)) + r":\d+: ", p.stderr.decode(errors="replace")), p.stderr


def test_version():
    p = run("-v")
    assert p.returncode == 0, p.stderr
    out = (p.stdout + p.stderr).decode()
    assert re.search(r"\d+\.\d+", out), out


def test_help():
    p = run("-h")
    assert p.returncode == 0, p.stderr
    out = (p.stdout + p.stderr).decode()
    assert "usage" in out.lower(), out
    assert "-c" in out and "-t" in out


def test_bad_option():
    p = run("--no-such-option")
    assert p.returncode != 0


def test_listen_port_in_use(tmp_path, redis_factory):
    """A listen address that cannot be bound is a startup failure, not a hang."""
    srv = redis_factory()
    cfg = write(tmp_path, f"[proxy]\nlisten = 127.0.0.1:{srv.port}\n"
                          f"backend = 127.0.0.1:{srv.port}\n")
    try:
        p = run("-c", str(cfg), timeout=10 * SLOW)
    except subprocess.TimeoutExpired:
        pytest.fail("sluice kept running although its listen port is taken")
    assert p.returncode != 0


# --------------------------------------------------------------------------
# -t: every error of every file, and warnings (exit 0)


BROKEN_INI = """[proxy]
backend = 127.0.0.1:6379
rules = rules.ini
users = users.ini
maxclients = lots
tiemout = 5
"""
BROKEN_RULES = """[limit a]
commands = gett, sett
match_ip = 1.2.3.x, 10.0.0.0/99
rate = 10/s
"""
BROKEN_USERS = """[user app]
password = pw
commands = +gett -@nocat +get
keys = %R~x ~
"""


def _lines(stderr, path):
    """The (line, message) pairs of STDERR about PATH."""
    return re.findall(re.escape(str(path)) + r":(\d+): (.+)", stderr.decode(errors="replace"))


def test_check_prints_every_error_of_every_file(tmp_path):
    """A typo in sluice.ini hides nothing in the rule and users files it
    names, and a line with two bad items gets two errors."""
    cfg = write(tmp_path, BROKEN_INI)
    rules = write(tmp_path, BROKEN_RULES, "rules.ini")
    users = write(tmp_path, BROKEN_USERS, "users.ini")
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 1, p.stderr
    assert [n for n, _ in _lines(p.stderr, cfg)] == ["5", "6"], p.stderr
    assert _lines(p.stderr, rules) == [
        ("2", "commands: unknown command 'gett'"),
        ("2", "commands: unknown command 'sett'"),
        ("3", "match_ip: '1.2.3.x' is not an address or CIDR (e.g. 10.0.0.0/8, ::1)"),
        ("3", "match_ip: '10.0.0.0/99' is not an address or CIDR (e.g. 10.0.0.0/8, ::1)"),
    ], p.stderr
    assert _lines(p.stderr, users) == [
        ("3", "commands: unknown command 'gett'"),
        ("3", "commands: unknown ACL category '@nocat'"),
        ("4", "keys: '%R~x': read/write patterns (%R~, %W~) are not supported"),
        ("4", "keys: '~' without a pattern"),
    ], p.stderr


WARN_RULES = """[limit b]
match_user = nosuchuser, app*
rate = 5/s

[limit c]
keys = foo[], bar[, ok[^]
match_name = x[]y
rate = 5/s
"""


def test_check_warns_and_exits_0(tmp_path):
    """A rule for a user the users file lacks, a glob no subject can match
    and a backend that does not resolve are warnings: exit 0."""
    cfg = write(tmp_path, "[proxy]\nbackend = redis.invalid:7601\nrules = rules.ini\n"
                          "users = users.ini\n")
    rules = write(tmp_path, WARN_RULES, "rules.ini")
    write(tmp_path, "[user app1]\npassword = pw\ncommands = +get\n", "users.ini")
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 0, p.stderr
    found = _lines(p.stderr, cfg)
    assert len(found) == 1 and found[0][0] == "2", p.stderr
    assert found[0][1].startswith("warning: cannot resolve backend redis.invalid:7601: "), found
    warned = sorted(_lines(p.stderr, rules))
    assert [n for n, _ in warned] == ["2", "6", "6", "7"], p.stderr
    assert all(m.startswith("warning: ") for _, m in warned), p.stderr
    assert "'nosuchuser' matches no user" in warned[0][1]
    assert {m.split("'")[1] for _, m in warned[1:3]} == {"foo[]", "bar["}, warned
    assert all("can never match" in m for _, m in warned[1:]), warned
    assert "'x[]y'" in warned[3][1]


def test_check_warns_about_cluster_seed_and_backend_password_user(tmp_path):
    """Without a users file, backend_user is the one user rules can name."""
    cfg = write(tmp_path, f"[proxy]\ncluster = 127.0.0.1:{free_port()} seed.invalid:7000\n"
                          "backend_user = app\nbackend_password = pw\nrules = rules.ini\n")
    rules = write(tmp_path, "[limit a]\nmatch_user = app\nrate = 1/s\n\n"
                            "[limit b]\nmatch_user = other\nrate = 1/s\n", "rules.ini")
    cfg.chmod(0o600)   # a password in a file others read is warned about (test_auth)
    p = run("-t", "-c", str(cfg))
    assert p.returncode == 0, p.stderr
    found = _lines(p.stderr, cfg)
    assert len(found) == 1 and found[0][0] == "2" and "seed.invalid:7000" in found[0][1], p.stderr
    assert [n for n, _ in _lines(p.stderr, rules)] == ["6"], p.stderr
