"""`make install` into a DESTDIR (issue 22): the binary, the man page
sluice(8), the example configs under share/sluice (nothing under /etc),
and a systemd unit that systemd-analyze accepts."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, require_sluice_bin
from helpers import SLOW

UNIT = "usr/lib/systemd/system/sluice.service"
MAN = "usr/share/man/man8/sluice.8"


@pytest.fixture(scope="module")
def destdir(tmp_path_factory):
    """One install (the binary under test, not a rebuild) into a DESTDIR
    with PREFIX=/usr, done twice: a second install over the first works."""
    d = tmp_path_factory.mktemp("destdir")
    for _ in range(2):
        p = subprocess.run(["make", "-s", "--no-print-directory", "install", f"DESTDIR={d}",
                            "PREFIX=/usr", f"INSTALL_BIN={require_sluice_bin()}"],
                           cwd=REPO, capture_output=True, timeout=120 * SLOW)
        assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    return d


def test_installed_files(destdir):
    files = sorted(str(p.relative_to(destdir)) for p in destdir.rglob("*") if p.is_file())
    assert files == sorted(["usr/bin/sluice", MAN, UNIT, "usr/share/sluice/sluice.ini",
                            "usr/share/sluice/rules.ini", "usr/share/sluice/users.ini",
                            "usr/share/sluice/prometheus-alerts.yml",
                            "usr/share/sluice/grafana-dashboard.json"]), files
    assert not (destdir / "etc").exists()
    assert os.access(destdir / "usr/bin/sluice", os.X_OK)
    assert (destdir / "usr/share/sluice/sluice.ini").read_bytes() == \
        (REPO / "conf/sluice.ini").read_bytes()
    p = subprocess.run([str(destdir / "usr/bin/sluice"), "--version"], capture_output=True,
                       timeout=10 * SLOW)
    assert p.returncode == 0 and p.stdout.startswith(b"sluice "), p


def _config_keys():
    src = (REPO / "proxy/base/config.c").read_text()
    keys = re.findall(r'^\s*\{"(\w+)", config_set_\w+,', src, re.M)
    assert len(keys) > 30, keys
    return keys


def test_man_page_renders_and_names_every_key(destdir):
    page = destdir / MAN
    if shutil.which("man"):
        cmd = ["man", "-l", str(page)]
    elif shutil.which("groff"):
        cmd = ["groff", "-man", "-Tutf8", str(page)]
    else:
        pytest.skip("neither man nor groff is installed")
    env = dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat")
    p = subprocess.run(cmd, capture_output=True, env=env, timeout=30 * SLOW)
    assert p.returncode == 0, p.stderr
    text = re.sub(r".\x08", "", p.stdout.decode(errors="replace"))
    for section in ("SYNOPSIS", "OPTIONS", "SIGNALS", "CONFIGURATION", "FILES"):
        assert re.search(rf"^{section}$", text, re.M), section
    for word in ("--version", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGTERM", "/etc/sluice/sluice.ini"):
        assert word in text, word
    missing = [k for k in _config_keys() if not re.search(rf"\b{k}\b", text)]
    assert not missing, f"config keys the man page lacks: {missing}"
    # groff's warnings (a line it cannot fit, a bad request): none.
    if shutil.which("groff"):
        w = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                           capture_output=True, timeout=30 * SLOW)
        assert w.returncode == 0 and not w.stderr, w.stderr


def test_unit_file(destdir):
    unit = (destdir / UNIT).read_text()
    for line in ("Type=notify", "NotifyAccess=all",
                 "ExecStart=/usr/bin/sluice -c /etc/sluice/sluice.ini",
                 "ExecReload=/bin/kill -USR2 $MAINPID", "DynamicUser=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "NoNewPrivileges=yes"):
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line
    assert re.search(r"^LimitNOFILE=\d+$", unit, re.M)


def test_unit_passes_systemd_analyze_verify(destdir, tmp_path):
    """systemd-analyze verify checks that ExecStart's binary exists and
    that the Documentation= page opens: a copy of the unit names the
    DESTDIR binary, and MANPATH the DESTDIR's man folder."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is missing (Debian package systemd, tools/deps.sh)")
    unit = (destdir / UNIT).read_text().replace("/usr/bin/sluice",
                                                str(destdir / "usr/bin/sluice"))
    copy = tmp_path / "sluice.service"
    copy.write_text(unit)
    env = dict(os.environ, MANPATH=str(destdir / "usr/share/man"), SYSTEMD_LOG_LEVEL="notice")
    p = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                       env=env, cwd=tmp_path, timeout=60 * SLOW)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert p.returncode == 0, out
    # Warnings (an unknown or misspelt key) leave the status 0: none may show.
    assert "sluice.service" not in out, out
