"""PROXY TOP's busiest subjects as bounded Prometheus gauges
(sluice_top_requests_per_second{list,rank,subject}, issue 35 item 4):
"who is noisy" answered in Prometheus. A real redis-server, a noisy
client among quiet ones, the exposition checked by promtool and scraped
by a real Prometheus."""

import subprocess

from conftest import require_sluice_bin
from helpers import SLOW, RawConn, encode_command, wait_until
from test_metrics import prometheus_for, samples, scrape, start_metrics_sluice  # noqa: F401

TOP = "sluice_top_requests_per_second"


def send(port, name, commands):
    """COMMANDS sent pipelined by a client named NAME; replies read."""
    with RawConn(port, timeout=10 * SLOW) as c:
        c.send(encode_command("CLIENT", "SETNAME", name) +
               b"".join(encode_command(*cmd) for cmd in commands))
        for _ in range(len(commands) + 1):
            c.read_reply()


def top_series(body):
    """{(list, rank): (subject, value)} of the gauge in BODY."""
    return {(ls["list"], int(ls["rank"])): (ls["subject"], v)
            for n, ls, v in samples(body) if n == TOP}


def promtool_ok(body):
    check = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=30)
    assert check.returncode == 0, (check.stdout + check.stderr).decode() + "\n" + body


def test_noisy_client_is_rank_one(redis_factory, sluice_factory, prometheus_for):  # noqa: F811
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory)
    prom = prometheus_for(mport)
    for i in range(8):   # more quiet clients than ranks: the bound holds
        send(s.port, f"quiet{i}", [("GET", f"quiet:{i}")] * 3)
    send(s.port, "noisy", [("SET", "secret:token", "v")] + [("GET", "secret:token")] * 600)
    body = scrape(mport)
    promtool_ok(body)
    top = top_series(body)
    assert top[("names", 1)][0] == "noisy", top
    assert top[("names", 1)][1] > 0, top
    assert "name=noisy" in top[("clients", 1)][0], top
    assert top[("commands", 1)][0] == "get", top
    assert top[("users", 1)][0] == "default", top
    assert top[("ips", 1)][0] == "127.0.0.1", top
    # At most top_metrics_count (5) ranks per list, and no key names:
    # they may be data a metrics store should not keep.
    assert max(rank for _, rank in top) == 5, top
    assert {lst for lst, _ in top} == {"clients", "users", "names", "ips", "commands"}, top
    assert "secret:token" not in body
    # Prometheus answers "who is noisy" from the gauge alone.
    wait_until(lambda: prom.query(f'{TOP}{{list="names",rank="1"}}'), 20 * SLOW,
               interval=0.5, msg="Prometheus to scrape the top gauge")
    res = prom.query(f'{TOP}{{list="names",rank="1"}}')
    assert res[0]["metric"]["subject"] == "noisy", res


def test_keys_only_when_asked_and_escaped(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory,
                                         top_metrics_count=2, top_metrics_keys="yes")
    hostile = b'k"\\\n\xff\xfe end'
    with RawConn(s.port, timeout=10 * SLOW) as c:
        c.send(b"".join(encode_command("GET", hostile) for _ in range(50)) +
               b"".join(encode_command("GET", "other") for _ in range(10)) +
               b"".join(encode_command("GET", "third") for _ in range(5)))
        for _ in range(65):
            c.read_reply()
    body = scrape(mport)
    promtool_ok(body)
    top = top_series(body)
    assert top[("keys", 1)][0] == 'k\\"\\\\\\n\ufffd\ufffd end', top
    assert top[("keys", 2)][0] == "other", top
    assert ("keys", 3) not in top and max(rank for _, rank in top) == 2, top


def test_zero_ranks_turns_the_gauge_off(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, top_metrics_count=0)
    send(s.port, "noisy", [("GET", "a")] * 20)
    body = scrape(mport)
    assert f"# TYPE {TOP} gauge" in body
    assert not [n for n, _, _ in samples(body) if n == TOP]


def test_reload_changes_the_ranks(redis_factory, sluice_factory):
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory, top_metrics_count=1)
    for i in range(3):
        send(s.port, f"c{i}", [("GET", "a")] * (10 + i))
    assert max(rank for _, rank in top_series(scrape(mport))) == 1
    s.config_path.write_text(s.config_path.read_text().replace("top_metrics_count = 1",
                                                               "top_metrics_count = 3"))
    with RawConn(s.port, timeout=10 * SLOW) as c:
        assert c.call("PROXY", "RELOAD") == "OK"
    assert max(rank for _, rank in top_series(scrape(mport))) == 3


def test_check_takes_good_values_and_rejects_bad_ones(tmp_path):
    cfg = tmp_path / "sluice.ini"

    def check(count, keys):
        cfg.write_text("[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:2\n"
                       f"top_metrics_count = {count}\ntop_metrics_keys = {keys}\n")
        p = subprocess.run([require_sluice_bin(), "-t", "-c", str(cfg)], capture_output=True,
                           text=True, timeout=30)
        return p.returncode, p.stdout + p.stderr

    code, out = check(20, "yes")
    assert code == 0, out
    code, out = check(21, "maybe")
    assert code != 0, out
    assert f"{cfg}:4: top_metrics_count: 21 is out of range (0 to 20)" in out, out
    assert f"{cfg}:5: top_metrics_keys: must be yes or no, not 'maybe'" in out, out
