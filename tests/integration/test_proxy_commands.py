"""sluice's own PROXY commands."""

import re

from conftest import parse_info
from helpers import Err


def _info(c):
    v = c.call("PROXY", "INFO")
    assert isinstance(v, bytes), f"PROXY INFO is not a bulk string: {v!r}"
    return v.decode()


def test_proxy_ping(sluice):
    with sluice.raw() as c:
        assert c.call_raw("PROXY", "PING") == b"+PONG\r\n"
        c.send(b"PROXY PING\r\n")           # inline
        assert c.read_reply_raw() == b"+PONG\r\n"
        c.send(b"proxy ping\r\n")           # case-insensitive like Redis commands
        assert c.read_reply_raw() == b"+PONG\r\n"


def test_proxy_ping_redispy(sluice):
    c = sluice.client()
    assert c.execute_command("PROXY", "PING") in (True, b"PONG", "PONG")
    c.close()


def test_proxy_info_fields(sluice, r):
    r.set("pi", "1")
    for _ in range(3):
        r.get("pi")
    with sluice.raw() as c:
        text = _info(c)
    lines = text.splitlines()
    for line in lines:
        assert line == "" or line.startswith("#") or ":" in line, f"not INFO style: {line!r}"
    f = parse_info(text)
    for field in ("uptime_in_seconds", "connected_clients", "total_requests"):
        assert field in f, f"{field} missing from PROXY INFO:\n{text}"
        assert re.fullmatch(r"\d+", f[field].strip()), (field, f[field])
    assert int(f["connected_clients"]) >= 2          # r and the asking connection
    assert int(f["total_requests"]) >= 4
    get_lines = [ln for ln in lines if ln.startswith("cmdstat_get:")]
    assert get_lines, f"no cmdstat_get line:\n{text}"
    assert "calls=" in get_lines[0]
    assert any("state=up" in ln for ln in lines), f"no backend line with state=up:\n{text}"


def _cmdstat_calls(text, cmd):
    for ln in text.splitlines():
        if ln.startswith(f"cmdstat_{cmd}:"):
            m = re.search(r"calls=(\d+)", ln)
            assert m, ln
            return int(m.group(1))
    return 0


def test_proxy_info_counters_move(sluice, r):
    with sluice.raw() as c:
        before = _info(c)
        for i in range(10):
            c.call("GET", f"cnt{i}")
        c.call("SET", "cnt", "1")
        after = _info(c)
    fb, fa = parse_info(before), parse_info(after)
    assert int(fa["total_requests"]) >= int(fb["total_requests"]) + 11
    assert _cmdstat_calls(after, "get") == _cmdstat_calls(before, "get") + 10
    assert _cmdstat_calls(after, "set") >= _cmdstat_calls(before, "set") + 1


def test_proxy_info_connected_clients_tracks(sluice):
    from helpers import RawConn, wait_until
    with sluice.raw() as probe:
        base = int(parse_info(_info(probe))["connected_clients"])
        extra = [RawConn(sluice.port) for _ in range(7)]
        for e in extra:
            assert e.call("PING") == "PONG"
        assert int(parse_info(_info(probe))["connected_clients"]) == base + 7
        for e in extra:
            e.close()
        wait_until(lambda: int(parse_info(_info(probe))["connected_clients"]) == base, 5,
                   msg="connected_clients back to its base value")


def test_proxy_unknown_subcommand_is_error(sluice):
    with sluice.raw() as c:
        v = c.call("PROXY", "NOSUCHTHING")
        assert isinstance(v, Err) and v.startswith("ERR"), v
        v = c.call("PROXY")
        assert isinstance(v, Err), v
        assert c.call("PING") == "PONG"


def test_proxy_help(sluice):
    with sluice.raw() as c:
        v = c.call("PROXY", "HELP")
        assert not isinstance(v, Err), v
        assert c.call("PING") == "PONG"
