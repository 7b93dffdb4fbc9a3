"""The docs cannot drift from the code (issue 31).

test_docs_check: tools/check_docs.py finds every config key, metric, PROXY
subcommand, verb and error text of the code in docs/ and the man pages,
every shell block of README.md and docs/*.md run here or marked as not
run, and every link between the pages resolving.

test_readme_tour: README's five-minute tour, run as a newcomer would type
it, against a sluice started as `make run` starts it (conf/sluice.ini,
with free ports instead of 6379/6380/9121): each `$ ` line of a block
marked `<!-- run: tour -->` is run by one bash, in order, and what it
prints must be what README shows (tokens, retry_after_ms and timings
aside)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, require_sluice_bin, sanitizer_env
from helpers import SLOW, free_port, wait_until

sys.path.insert(0, str(REPO / "tools"))
import check_docs  # noqa: E402


def test_docs_check():
    problems = check_docs.check(REPO)
    assert not problems, "\n".join(problems)


def _tour_blocks(text):
    """[(marker, [(command, [expected lines])])] of README's tour blocks."""
    blocks = []
    for m in re.finditer(r"<!--\s*run:\s*tour(.*?)-->\s*\n```console\n(.*?)```", text, re.S):
        commands = []
        for line in m.group(2).splitlines():
            if line.startswith("$ "):
                commands.append([line[2:], []])
            elif line.startswith(">") and commands and not commands[-1][1]:
                commands[-1][0] += "\n" + line[2:]
            else:
                commands[-1][1].append(line)
        blocks.append((m.group(1), commands))
    return blocks


def _normalize(lines):
    out = []
    for line in lines:
        line = re.sub(r"\b[0-9a-f]{32}\b", "<token>", line)
        line = re.sub(r"retry_after_ms=\d+", "retry_after_ms=N", line)
        if re.fullmatch(r"\(\d+\.\d+s\)", line):
            continue   # redis-cli's timing of a slow command
        out.append(line.rstrip())
    while out and out[-1] == "":
        out.pop()
    return out


def test_readme_tour(tmp_path, redis_factory):
    """The tour's ports and folder are swapped for free ones (and back in
    what is printed), `build/sluice` for the binary under test, and
    redis-cli prints as on a terminal (--no-raw)."""
    bin_ = require_sluice_bin()
    blocks = _tour_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 5, blocks
    srv = redis_factory()
    ports = {"6379": str(srv.port), "6380": str(free_port()), "9121": str(free_port())}
    tour_dir = str(tmp_path / "sluice-tour")
    swap = {**ports, "/tmp/sluice-tour": tour_dir, "build/sluice": bin_}

    def to_test(s):
        for a, b in swap.items():
            s = s.replace(a, b)
        return s

    def to_doc(s):
        # Ports only after a colon: a token's digits must stay as they are.
        for a, b in swap.items():
            s = s.replace(":" + b, ":" + a) if a.isdigit() else s.replace(b, a)
        return s

    # `make run`: tools/run.sh starts conf/sluice.ini's sluice in the foreground.
    conf = tmp_path / "make-run.ini"
    conf.write_text(to_test((REPO / "conf/sluice.ini").read_text()))
    env = sanitizer_env()
    first = subprocess.Popen([bin_, "-c", str(conf)], stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "make-run.log", "wb"), env=env)
    script = ["redis-cli() { command redis-cli --no-raw \"$@\"; }", f"cd {REPO}"]
    n = 0
    for _, commands in blocks:
        for cmd, _ in commands:
            line = to_test(cmd)
            if line.rstrip().endswith("&"):
                # A sluice started in the background: out of the captured
                # output, and given the moment a person takes to type on.
                line = line.rstrip()[:-1] + f" >/dev/null &\necho $! >> {tmp_path / 'jobs'}\n" + \
                    f"for i in $(seq 100); do curl -sf 127.0.0.1:{ports['9121']}/readyz " \
                    ">/dev/null && break; sleep 0.1; done"
            else:
                line = "{ " + line + "\n} 2>&1"
            script += [f"echo '@@{n}@@'", line]
            n += 1
    script.append("echo '@@end@@'")
    try:
        wait_until(lambda: subprocess.run(["redis-cli", "-p", ports["6380"], "PROXY", "PING"],
                                          capture_output=True).stdout == b"PONG\n",
                   10 * SLOW, msg="the make-run sluice answers")
        p = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True,
                           timeout=60 * SLOW, env=env, cwd=REPO)
        got = re.split(r"^@@(\d+|end)@@\n", p.stdout.decode(errors="replace"), flags=re.M)
        outputs = dict(zip(got[1::2], got[2::2]))
        failures, pending = [], []
        n = 0
        for marker, commands in blocks:
            for cmd, expected in commands:
                actual = _normalize(to_doc(outputs.get(str(n), "<not run>")).splitlines())
                if actual != _normalize(expected):
                    msg = f"$ {cmd}\nREADME:\n" + "\n".join(expected) + "\nactual:\n" + "\n".join(actual)
                    (pending if "pending" in marker else failures).append(msg)
                n += 1
        assert not failures, "\n\n".join(failures) + "\nstderr: " + p.stderr.decode()
        if pending:
            pytest.xfail("blocks marked pending differ:\n\n" + "\n\n".join(pending))
    finally:
        jobs = (tmp_path / "jobs").read_text().split() if (tmp_path / "jobs").exists() else []
        for pid in jobs:
            try:
                os.kill(int(pid), 15)
            except (ProcessLookupError, ValueError):
                pass
        if first.poll() is None:
            first.terminate()
        first.wait(timeout=10 * SLOW)


@pytest.mark.parametrize("file,old,new,problem", [
    ("proxy/base/config.c", '    {"metrics_listen",',
     '    {"new_key", config_set_int, F(maxclients), 0, 1, 0, LIVE(NUM)},\n    {"metrics_listen",',
     "key `new_key` (config.c) has no row"),
    ("proxy/base/config.c", '{"timeout", config_set_int, F(timeout_s), 0, 100000000, 0, LIVE(NUM)}',
     '{"timeout", config_set_int, F(timeout_s), 0, 100000000, 0, RESTART(NUM)}',
     "`timeout` applies 'reload', config.c says 'restart'"),
    ("conf/sluice.ini", ";maxclients = 10000", "; (maxclients)", "conf/sluice.ini: key maxclients"),
    ("proxy/base/config.c", "cfg->maxclients = 10000;", "cfg->maxclients = 20000;",
     "`maxclients` defaults to 20000"),
    ("proxy/base/metrics.h", '    X(slowlog_length, GAUGE, "", "Entries in the slow log.")',
     '    X(slowlog_length, GAUGE, "", "Entries in the slow log.")                 \\\n'
     '    X(new_total, COUNTER, "why", "New.")', "metric new_total has no row"),
    ("proxy/cmd/proxysub.h", '    X(help, PROXYSUB_OPEN)',
     '    X(frobnicate, PROXYSUB_OPEN) \\\n    X(help, PROXYSUB_OPEN)',
     "PROXY FROBNICATE (local.c) is not in docs"),
    ("proxy/client/local.c", '    {"auth", "Auth", local_info_auth, 1},',
     '    {"auth", "Auth", local_info_auth, 1},\n    {"extra", "Extra", local_info_auth, 1},',
     "PROXY INFO section 'extra'"),
    ("proxy/verbs/lock.c", 'return "OWNER token must not be empty";',
     'return "OWNER token must not be blank";', "'OWNER token must not be blank'"),
    ("proxy/client/top.c", '"COUNT must be a non-negative integer"',
     '"COUNT must be a whole number"', "COUNT must be a whole number"),
    ("rules/rules.c", '    [KEY_MODE] = {"mode",', '    [KEY_MODE] = {"moda",',
     "key `moda` (rules/rules.c) has no row"),
    ("docs/locks.md", "## Locks across a failover", "## Locks when the primary changes",
     "no such heading"),
    ("docs/tls.md", "<!-- not run: needs certificates", "<!-- needs certificates",
     "a shell block neither run"),
    ("docs/configuration.md", "| `maxclients` |", "| `maxclient` |", "`maxclient`"),
])
def test_docs_check_fails_when_something_is_undocumented(tmp_path, file, old, new, problem):
    """The check on a copy of the tree with one thing added or changed
    in the code (or the docs) without the docs (or the code) following."""
    import shutil
    for d in ("proxy", "rules", "docs", "conf", "tools"):
        shutil.copytree(REPO / d, tmp_path / d)
    for f in ("README.md", "CHANGELOG.md"):
        shutil.copy(REPO / f, tmp_path / f)
    assert not check_docs.check(tmp_path)
    path = tmp_path / file
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    problems = check_docs.check(tmp_path)
    assert any(problem in p for p in problems), problems
