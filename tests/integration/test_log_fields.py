"""JSON log lines with fields (issue 35 item 5): with log_format = json,
the lines that have parts carry them as fields beside msg, with an
"event": the log_connections lines, the operator controls' audit lines,
a rule's report of whom it hit, a backend that cannot be reached or
refuses sluice's login. msg stays the text line's message."""

import json
import re

import pytest

from conftest import DIRECT
from helpers import SLOW, RawConn, free_port, wait_until

pytestmark = pytest.mark.skipif(DIRECT, reason="sluice's own log")


def json_lines(s):
    """Every line of S's log_file (json.log), each parsed as JSON."""
    path = s.dir / "json.log"
    text = path.read_text("utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def events(s, name):
    return [o for o in json_lines(s) if o.get("event") == name]


def wait_event(s, name, pred=lambda o: True):
    wait_until(lambda: [o for o in events(s, name) if pred(o)], 10 * SLOW,
               msg=f"a {name} line in the JSON log")
    return [o for o in events(s, name) if pred(o)][-1]


def json_sluice(sluice_factory, backend_port, **extra):
    return sluice_factory(backend_port, log_format="json", log_file="json.log", **extra)


def test_connection_lines_have_fields(redis_factory, sluice_factory):
    srv = redis_factory()
    s = json_sluice(sluice_factory, srv.port, log_connections="yes")
    with RawConn(s.port, timeout=5 * SLOW) as c:
        local = "127.0.0.1:%d" % c.sock.getsockname()[1]
        assert c.call("CLIENT", "SETNAME", "worker-1") == "OK"
        assert c.call("SET", "k", "v") == "OK"
        assert c.call("GET", "k") == b"v"
        assert c.call("QUIT") == "OK"
    closed = wait_event(s, "client_closed", lambda o: o["addr"] == local)
    opened = [o for o in events(s, "client_connected") if o["addr"] == local]
    assert len(opened) == 1, opened
    assert opened[0]["level"] == "notice" and opened[0]["tls"] is False, opened
    assert opened[0]["client"] == closed["client"] and isinstance(closed["client"], int)
    assert opened[0]["msg"] == f"client {closed['client']} connected from {local}", opened
    assert closed["level"] == "notice", closed
    assert closed["user"] == "default" and closed["name"] == "worker-1", closed
    assert closed["reason"] == "QUIT", closed
    assert closed["commands"] == 4, closed
    assert closed["bytes_in"] > 0 and closed["bytes_out"] > 0, closed
    assert isinstance(closed["duration"], float) and 0 <= closed["duration"] < 60, closed
    assert closed["msg"].startswith(f"client {closed['client']} closed: QUIT; from {local}, "
                                    "user default, name worker-1, "), closed
    # Every line of the file is one JSON object; lines without parts keep
    # the four keys they always had.
    for o in json_lines(s):
        assert {"time", "pid", "level", "msg"} <= set(o), o
        if "event" not in o:
            assert set(o) == {"time", "pid", "level", "msg"}, o


def test_unnamed_client_has_null_name(redis_factory, sluice_factory):
    srv = redis_factory()
    s = json_sluice(sluice_factory, srv.port, log_connections="yes")
    with RawConn(s.port, timeout=5 * SLOW) as c:
        local = "127.0.0.1:%d" % c.sock.getsockname()[1]
        assert c.call("PING") == "PONG"
    closed = wait_event(s, "client_closed", lambda o: o["addr"] == local)
    assert closed["name"] is None and closed["reason"] == "closed by the client", closed
    assert ", name -, " in closed["msg"], closed


def test_audit_line_of_pause_has_who_and_from_where(redis_factory, sluice_factory):
    srv = redis_factory()
    s = json_sluice(sluice_factory, srv.port, start=False, users="users.ini")
    (s.dir / "users.ini").write_text("[user admin]\npassword = adminpw\ncommands = +@all\n"
                                     "keys = *\n")
    s.start()
    with RawConn(s.port, timeout=5 * SLOW) as c:
        local = "127.0.0.1:%d" % c.sock.getsockname()[1]
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        assert c.call("PROXY", "PAUSE", "WRITE", "TIMEOUT", "60000") == "OK"
        assert c.call("PROXY", "RESUME") == "OK"
    pause = wait_event(s, "control", lambda o: o["command"].startswith("PROXY PAUSE"))
    assert pause["user"] == "admin" and pause["addr"] == local, pause
    assert pause["command"] == "PROXY PAUSE WRITE TIMEOUT 60000", pause
    assert pause["result"] == "writes paused until the timeout or PROXY RESUME", pause
    assert pause["level"] == "notice" and isinstance(pause["client"], int), pause
    assert pause["msg"] == (f"PROXY PAUSE WRITE TIMEOUT 60000 by user 'admin' from {local} "
                            f"(client {pause['client']}): {pause['result']}"), pause
    resume = wait_event(s, "control", lambda o: o["command"] == "PROXY RESUME")
    assert resume["user"] == "admin" and resume["result"] == "resuming", resume


def test_rule_report_names_whom_it_hit(redis_factory, sluice_factory):
    srv = redis_factory()
    s = json_sluice(sluice_factory, srv.port, start=False, rules="rules.ini")
    (s.dir / "rules.ini").write_text("[limit few-gets]\ncommands = GET\nrate = 1/h\nburst = 1\n"
                                     "per = rule\n")
    s.start()
    with RawConn(s.port, timeout=5 * SLOW) as c:
        local = "127.0.0.1:%d" % c.sock.getsockname()[1]
        assert c.call("CLIENT", "SETNAME", "noisy") == "OK"
        for _ in range(5):
            c.call("GET", "k")
    hit = wait_event(s, "rule_hits")
    assert hit["rule"] == "few-gets" and hit["dryrun"] is False, hit
    assert hit["rejected"] >= 1 and hit["delayed"] == 0, hit
    assert hit["user"] == "default" and hit["name"] == "noisy" and hit["addr"] == local, hit
    assert f"user=default name=noisy addr={local}" in hit["most_hit"], hit
    assert hit["msg"].startswith("rule few-gets rejected "), hit


def test_backend_failure_has_backend_and_reason(sluice_factory):
    dead = free_port()
    s = json_sluice(sluice_factory, dead)
    down = wait_event(s, "backend_connect_failed")
    assert down["backend"] == f"127.0.0.1:{dead}", down
    assert "refused" in down["reason"].lower(), down
    assert isinstance(down["retry_ms"], int), down
    assert down["msg"].startswith(f"backend 127.0.0.1:{dead}: cannot connect: "), down


def test_refused_login_has_backend_and_reason(redis_factory, sluice_factory):
    srv = redis_factory()
    with srv.client() as c:
        c.config_set("requirepass", "right")
    s = json_sluice(sluice_factory, srv.port, backend_password="wrong")
    refused = wait_event(s, "backend_login_refused")
    assert refused["level"] == "warning" and refused["backend"] == f"127.0.0.1:{srv.port}"
    assert "WRONGPASS" in refused["reason"] or "invalid" in refused["reason"], refused
    assert refused["msg"] == f"backend 127.0.0.1:{srv.port} refused sluice's login: " + \
        refused["reason"], refused


def test_backend_lost_has_backend_and_reason(redis_factory, sluice_factory):
    srv = redis_factory()
    s = json_sluice(sluice_factory, srv.port)
    with RawConn(s.port, timeout=5 * SLOW) as c:
        assert c.call("SET", "k", "v") == "OK"   # the shared connection is up
    srv.stop()
    lost = wait_event(s, "backend_lost")
    assert lost["level"] == "warning" and lost["backend"] == f"127.0.0.1:{srv.port}", lost
    assert lost["reason"] and isinstance(lost["retry_ms"], int), lost
    assert lost["msg"] == (f"backend 127.0.0.1:{srv.port} connection lost: {lost['reason']}; "
                           f"reconnecting in {lost['retry_ms']} ms"), lost


def test_text_lines_are_unchanged(redis_factory, sluice_factory):
    srv = redis_factory()
    s = sluice_factory(srv.port, log_connections="yes")
    with RawConn(s.port, timeout=5 * SLOW) as c:
        local = "127.0.0.1:%d" % c.sock.getsockname()[1]
        assert c.call("QUIT") == "OK"

    def closed_line():
        return re.search(r"^\d+:S .* \* client (\d+) closed: QUIT; from " + re.escape(local) +
                         r", user default, name -, \d+\.\d{3} s, 1 commands, \d+ bytes in, "
                         r"\d+ bytes out$", s.log_path.read_text(), re.M)
    wait_until(closed_line, 10 * SLOW, msg="the text close line")
    assert "{" not in s.log_path.read_text()
