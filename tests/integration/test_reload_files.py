"""Files read on reload cannot hang the loop.

PROXY RELOAD (and SIGHUP) read the rule file on the event loop. A FIFO
named as that file would block the open for ever, /dev/zero would be read
for ever, a huge file for long: each is refused with FILE:0: a reason,
the old rules stay, and other clients are served meanwhile.
"""

import os
import time

import pytest

from conftest import DIRECT
from helpers import SLOW, Err, RawConn

RULES = "[limit gets]\ncommands = GET\nrate = 1000/s\nburst = 10\n"


def _make_fifo(path):
    os.mkfifo(path)


def _make_dev_zero(path):
    os.symlink("/dev/zero", path)


def _make_huge(path):
    with open(path, "wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)   # sparse: nothing written


@pytest.mark.skipif(DIRECT, reason="sluice's reload")
@pytest.mark.parametrize("make, why", [
    (_make_fifo, "not a regular file"),
    (_make_dev_zero, "not a regular file"),
    (_make_huge, "larger than 16777216 bytes"),
], ids=["fifo", "dev-zero", "huge"])
def test_reload_refuses_files_that_would_block(redis_factory, sluice_factory, make, why):
    srv = redis_factory()
    s = sluice_factory(srv.port, start=False, rules="rules.ini")
    rules = s.dir / "rules.ini"
    rules.write_text(RULES)
    s.start()
    rules.unlink()
    make(rules)
    t0 = time.monotonic()
    with RawConn(s.port, timeout=3 * SLOW) as c:
        reply = c.call(b"PROXY", b"RELOAD")
    assert time.monotonic() - t0 < 1 * SLOW
    assert isinstance(reply, Err) and f"{rules}:0: {why}" in reply, reply
    with RawConn(s.port, timeout=1 * SLOW) as c:
        assert c.call(b"PROXY", b"PING") == "PONG"
        assert c.call(b"PROXY", b"RULES")[0][1] == b"gets"   # the old rules stay
