"""`make install` into a DESTDIR (issue 22): the binary, the man pages
sluice(8), sluice.ini(5), sluice-rules(5), sluice-users(5) and
sluice-commands(7) (issue 31), README, CHANGELOG and docs/ under
share/doc/sluice, the example configs under share/sluice (nothing under
/etc), and a systemd unit that systemd-analyze accepts."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, require_sluice_bin
from helpers import SLOW

sys.path.insert(0, str(REPO / "tools"))

UNIT = "usr/lib/systemd/system/sluice.service"
MAN = "usr/share/man/man8/sluice.8"
MAN_INI = "usr/share/man/man5/sluice.ini.5"
MANS = [MAN, MAN_INI, "usr/share/man/man5/sluice-rules.5", "usr/share/man/man5/sluice-users.5",
        "usr/share/man/man7/sluice-commands.7"]
DOC = "usr/share/doc/sluice"


def _docs():
    """The docs make install puts under share/doc/sluice, as in the tree."""
    return ["README.md", "CHANGELOG.md"] + sorted(
        "docs/" + p.name for p in (REPO / "docs").glob("*.md"))


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
    assert files == sorted(["usr/bin/sluice", UNIT, "usr/share/sluice/sluice.ini",
                            "usr/share/sluice/rules.ini", "usr/share/sluice/users.ini",
                            "usr/share/sluice/grafana-dashboard.json",
                            "usr/share/sluice/prometheus-alerts.yml"] + MANS +
                           [f"{DOC}/{d}" for d in _docs()]), files
    for d in _docs():
        assert (destdir / DOC / d).read_bytes() == (REPO / d).read_bytes(), d
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


def _render(page):
    """The man page as man shows it (no bold overstrikes); groff's
    warnings (a line it cannot fit, a bad request): none."""
    if shutil.which("man"):
        cmd = ["man", "-l", str(page)]
    elif shutil.which("groff"):
        cmd = ["groff", "-man", "-Tutf8", str(page)]
    else:
        pytest.skip("neither man nor groff is installed")
    env = dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat")
    p = subprocess.run(cmd, capture_output=True, env=env, timeout=30 * SLOW)
    assert p.returncode == 0, p.stderr
    if shutil.which("groff"):
        w = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                           capture_output=True, timeout=30 * SLOW)
        assert w.returncode == 0 and not w.stderr, (page, w.stderr)
    return re.sub(r".\x08", "", p.stdout.decode(errors="replace"))


def test_man_page_renders_and_names_every_key(destdir):
    text = _render(destdir / MAN)
    for section in ("SYNOPSIS", "OPTIONS", "SIGNALS", "CONFIGURATION", "FILES"):
        assert re.search(rf"^{section}$", text, re.M), section
    for word in ("--version", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGTERM", "/etc/sluice/sluice.ini",
                 "sluice.ini(5)", "sluice-commands(7)", "share/doc/sluice"):
        assert word in text, word
    assert "README of the source tree" not in text
    missing = [k for k in _config_keys() if not re.search(rf"\b{k}\b", text)]
    assert not missing, f"config keys the man page lacks: {missing}"
    import check_docs
    names = [n for n, _, _ in check_docs.metrics_list(REPO)]
    assert len(names) > 20
    missing = [n for n in names if f"sluice_{n}" not in text]
    assert not missing, f"metrics the man page lacks: {missing}"


def test_section_5_and_7_pages_render_and_name_what_they_document(destdir):
    """sluice.ini(5) has every key of config.c's table with its default;
    the file pages their keys; sluice-commands(7) every PROXY
    subcommand and lock verb (the lists themselves are tools/check_docs.py's)."""
    ini = _render(destdir / MAN_INI)
    for section in ("NAME", "SYNTAX", "KEYS", "SEE ALSO"):
        assert re.search(rf"^{section}$", ini, re.M), section
    missing = [k for k in _config_keys() if not re.search(rf"^       {k}\b", ini, re.M)]
    assert not missing, f"config keys sluice.ini(5) lacks: {missing}"
    assert ini.count("default:") >= len(_config_keys())
    rules = _render(destdir / "usr/share/man/man5/sluice-rules.5")
    for k in ("match_ip", "match_user", "rate", "burst", "per", "action", "scope", "mode"):
        assert re.search(rf"^       {k}\b", rules, re.M), k
    users = _render(destdir / "usr/share/man/man5/sluice-users.5")
    for k in ("password", "nopass", "commands", "keys", "channels", "enabled", "read_from"):
        assert re.search(rf"^       {k}\b", users, re.M), k
    cmds = _render(destdir / "usr/share/man/man7/sluice-commands.7")
    for w in ("PROXY INFO", "PROXY RELOAD", "PROXY SENTINEL", "PROXY CLUSTER", "LOCK key ttl_ms",
              "UNLOCK key", "RENEW key", "ERRORS", "THROTTLED rule NAME retry_after_ms=N",
              "NOTOWNER the lock is not held by this owner"):
        assert w in re.sub(r"\s+", " ", cmds), w


def test_installed_docs_links_resolve(destdir):
    """README's links to docs/ and the pages' links to each other work
    where they are installed."""
    import check_docs
    problems = [p for p in check_docs.check_links(destdir / DOC)]
    assert not problems, problems


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
