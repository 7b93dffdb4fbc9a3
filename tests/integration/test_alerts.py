"""The alerting rules sluice ships (conf/prometheus-alerts.yml) and their
runbook (docs/runbook.md): promtool checks and unit-tests every alert
(tests/prometheus/alerts_test.yml, Prometheus's own rule engine), every
alert has its runbook section and uses only metrics sluice exports, and a
real Prometheus loading the shipped file raises SluiceBackendDown and
SluiceNotReady when the Redis behind a real sluice goes away."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import SLOW, wait_until
from test_metrics import Prometheus, hreq, scrape, start_metrics_sluice

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "conf" / "prometheus-alerts.yml"
RUNBOOK = REPO / "docs" / "runbook.md"
METRICS_H = REPO / "proxy" / "base" / "metrics.h"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool not installed (Debian's prometheus)")


def alert_names():
    return re.findall(r"^\s+- alert: (\w+)$", ALERTS.read_text(), re.M)


def test_promtool_checks_the_rules():
    p = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in p.stdout, p.stdout


def test_every_alert_fires_on_its_series():
    """promtool test rules: each alert fires on the series that should fire
    it (and the healthy instances beside them do not)."""
    tests = REPO / "tests" / "prometheus" / "alerts_test.yml"
    p = subprocess.run(["promtool", "test", "rules", tests.name], capture_output=True,
                       text=True, timeout=60, cwd=tests.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    tested = set(re.findall(r"alertname: (\w+)", tests.read_text()))
    assert tested == set(alert_names()), set(alert_names()) ^ tested


def test_every_alert_has_a_runbook_section_and_known_metrics():
    text = RUNBOOK.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^#+ (.+)$", text, re.M)}
    families = set(re.findall(r"^\s*X\((\w+),", METRICS_H.read_text(), re.M))
    rules = ALERTS.read_text()
    for name in alert_names():
        assert name.lower() in headings, f"docs/runbook.md has no section '{name}'"
        assert f"docs/runbook.md#{name.lower()}" in rules, name
    used = set(re.findall(r"\bsluice_(\w+?)(?:_bucket|_count|_sum)?\b", rules))
    unknown = {m for m in used if m not in families}
    assert not unknown, f"alerts use metrics sluice does not export: {unknown}"


class AlertingPrometheus(Prometheus):
    """A Prometheus scraping TARGET every second and evaluating the shipped
    alerting rules every second."""

    def __init__(self, tmpdir, target):
        super().__init__(tmpdir, target)
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(f"rule_files: ['{ALERTS}']\n" + cfg.read_text())

    def alerts(self):
        """{alertname: state} of the alerts pending or firing now."""
        status, _, body = hreq(self.port, "/api/v1/alerts")
        assert status == 200, body
        return {a["labels"]["alertname"]: a["state"]
                for a in json.loads(body)["data"]["alerts"]}


def test_real_prometheus_raises_backend_down_and_not_ready(redis_factory, sluice_factory,
                                                           tmp_path):
    """The shipped rules, loaded by a real Prometheus scraping a real
    sluice: quiet while Redis serves; Redis stopped, SluiceBackendDown and
    SluiceNotReady go pending (then firing after their `for:`)."""
    srv, s, mport = start_metrics_sluice(redis_factory, sluice_factory)
    prom = AlertingPrometheus(tmp_path / "prom", f"127.0.0.1:{mport}").start()
    try:
        wait_until(lambda: prom.scalar("sluice_ready") == 1, 30 * SLOW,
                   msg="Prometheus scraping sluice")
        assert "sluice_ready 1" in scrape(mport)
        assert prom.alerts() == {}
        srv.stop()
        assert "sluice_ready 0" in scrape(mport)
        wait_until(lambda: {"SluiceBackendDown", "SluiceNotReady"} <= set(prom.alerts()),
                   30 * SLOW, interval=0.5, msg="the alerts to be raised: %s" % prom.alerts())
        q = "ALERTS{alertname=\"SluiceBackendDown\"}"
        res = prom.query(q)
        assert res and res[0]["metric"]["backend"] == f"127.0.0.1:{srv.port}", res
    finally:
        prom.stop()
