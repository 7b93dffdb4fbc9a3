"""The slow log (PROXY SLOWLOG), PROXY TOP, and the rules' reports of whom
they hit (issue 21).

A slow-log entry is Redis's SLOWLOG entry (id, unix time, duration in µs,
arguments cut as Redis cuts them, client address, client name) followed by
the user and the µs the request spent in Redis: the rest is time in sluice.
PROXY TOP rows are [subject, requests/s over the last 10 s, requests,
rejected, delayed], busiest first, counted in bounded sketches. Each test
starts its own redis-server and sluice.
"""

import re
import time

from helpers import SLOW, Err, RawConn, encode_command, rss_kb, wait_until


def start_pair(redis_factory, sluice_factory, rules=None, users=None, **cfg):
    srv = redis_factory("--enable-debug-command", "yes")
    if rules is not None:
        cfg["rules"] = "rules.ini"
    if users is not None:
        cfg["users"] = "users.ini"
    s = sluice_factory(srv.port, start=False, **cfg)
    if rules is not None:
        (s.dir / "rules.ini").write_text(rules)
    if users is not None:
        (s.dir / "users.ini").write_text(users)
    s.start()
    return srv, s


def local_addr(conn):
    host, port = conn.sock.getsockname()
    return f"{host}:{port}".encode()


def entry_of(entries, *args):
    """The newest slow-log entry whose arguments are ARGS."""
    want = [a.encode() if isinstance(a, str) else a for a in args]
    for e in entries:
        if e[3] == want:
            return e
    raise AssertionError(f"no entry for {args!r} in {entries!r}")


# --------------------------------------------------------------------------
# slow log


def test_debug_sleep_in_slowlog_with_duration_and_time_in_redis(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as c:
        assert c.call("CLIENT", "SETNAME", "sleeper") == "OK"
        before = int(time.time())
        assert c.call("DEBUG", "SLEEP", "0.2") == "OK"
        entries = c.call("PROXY", "SLOWLOG", "GET")
        e = entry_of(entries, "DEBUG", "SLEEP", "0.2")
        assert len(e) == 8
        assert isinstance(e[0], int)
        assert before <= e[1] <= int(time.time()) + 1
        duration, in_redis = e[2], e[7]
        assert 200_000 <= duration < 200_000 + 1_000_000 * SLOW, e
        assert 190_000 <= in_redis <= duration, e
        assert duration - in_redis < 100_000 * SLOW, e   # hardly any time in sluice
        assert e[4] == local_addr(c)
        assert e[5] == b"sleeper"
        assert e[6] == b"default"
        # A fast command is below the default 10 ms.
        assert c.call("PING") == "PONG"
        assert all(x[3] != [b"PING"] for x in c.call("PROXY", "SLOWLOG", "GET", "-1"))


def test_blocking_commands_stay_out_of_the_slow_log_and_request_latency(redis_factory,
                                                                        sluice_factory):
    """A BLPOP that waits 0.3 s and a LOCK ... WAIT that waits: time spent
    waiting on purpose, as Redis leaves blocked time out of its SLOWLOG:
    not in the slow log, and in blocking_command_duration_seconds, not in
    command_duration_seconds (an operator's request-latency panel)."""
    from test_metrics import scrape, value
    from helpers import free_port
    mport = free_port()
    srv, s = start_pair(redis_factory, sluice_factory, metrics_listen=f"127.0.0.1:{mport}")
    with s.raw() as c, s.raw() as holder:
        assert c.call("BLPOP", "nothing", "0.3") is None
        assert isinstance(holder.call("LOCK", "lk", "400"), bytes)
        got = c.call("LOCK", "lk", "1000", "WAIT", "2000", timeout=10 * SLOW)
        assert isinstance(got, bytes), got       # granted once the first one expired
        assert c.call("DEBUG", "SLEEP", "0.05") == "OK"    # a slow command still is
        entries = c.call("PROXY", "SLOWLOG", "GET", "-1")
        names = [e[3][0].upper() for e in entries]
        assert b"BLPOP" not in names and b"LOCK" not in names, entries
        assert b"DEBUG" in names, entries
    body = scrape(mport)
    assert value(body, "sluice_blocking_command_duration_seconds_count", cmd="blpop") == 1
    # LOCK ... WAIT waited on purpose; the holder's LOCK did not.
    assert value(body, "sluice_blocking_command_duration_seconds_count", cmd="lock") == 1
    assert value(body, "sluice_command_duration_seconds_count", cmd="lock") == 1
    assert value(body, "sluice_command_duration_seconds_count", cmd="blpop") is None
    assert value(body, "sluice_command_duration_seconds_count", cmd="debug") == 1


def test_delay_rule_wait_is_time_in_sluice(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, rules="""
[limit slow-gets]
commands = GET
rate = 2/s
burst = 1
action = delay
max_delay = 5s
""")
    with s.raw(timeout=10 * SLOW) as c:
        assert c.call("GET", "k1") is None
        assert c.call("GET", "k2") is None   # waits about 500 ms for a token
        e = entry_of(c.call("PROXY", "SLOWLOG", "GET"), "GET", "k2")
        duration, in_redis = e[2], e[7]
        assert duration >= 300_000, e
        assert in_redis < 50_000 * SLOW, e
        assert duration > 10 * in_redis, e


def test_slowlog_get_len_reset_as_redis(redis_factory, sluice_factory):
    """With a threshold of 0 every command is logged, the slow log's own
    included once its reply is queued, as Redis does: LEN, GET's count,
    RESET and the errors are compared with a real Redis."""
    srv, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=0)
    ref = redis_factory("--slowlog-log-slower-than", "0")
    with s.raw() as c, ref.raw() as r:
        for conn, prefix in ((c, ("PROXY",)), (r, ())):
            assert conn.call(*prefix, "SLOWLOG", "RESET") == "OK"
        for i in range(15):
            assert c.call("SET", f"k{i}", "v") == r.call("SET", f"k{i}", "v") == "OK"
        got, want = c.call("PROXY", "SLOWLOG", "LEN"), r.call("SLOWLOG", "LEN")
        assert got == want == 16   # the RESET and 15 SETs
        got = c.call("PROXY", "SLOWLOG", "GET")
        want = r.call("SLOWLOG", "GET")
        assert len(got) == len(want) == 10               # Redis's default count
        assert [_unprefixed(e[3]) for e in got] == [e[3] for e in want]
        ids = [e[0] for e in got]
        assert ids == sorted(ids, reverse=True)           # newest first
        got = c.call("PROXY", "SLOWLOG", "GET", "2")
        assert [e[3] for e in got] == [[b"PROXY", b"SLOWLOG", b"GET"], [b"PROXY", b"SLOWLOG", b"LEN"]]
        assert len(c.call("PROXY", "SLOWLOG", "GET", "-1")) == 19
        assert c.call("PROXY", "SLOWLOG", "GET", "0") == []
        assert c.call("PROXY", "SLOWLOG", "GET", "-2") == r.call("SLOWLOG", "GET", "-2")
        assert isinstance(c.call("PROXY", "SLOWLOG", "GET", "x"), Err)
        assert c.call("PROXY", "SLOWLOG", "RESET") == r.call("SLOWLOG", "RESET") == "OK"
        assert c.call("PROXY", "SLOWLOG", "LEN") == r.call("SLOWLOG", "LEN") == 1   # the RESET
        assert c.call("PROXY", "SLOWLOG", "LEN") == r.call("SLOWLOG", "LEN") == 2
        assert isinstance(c.call("PROXY", "SLOWLOG", "NOPE"), Err)


def _unprefixed(args):
    return args[1:] if args[:1] == [b"PROXY"] else args


def test_negative_threshold_turns_the_slow_log_off(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=-1)
    with s.raw() as c:
        assert c.call("DEBUG", "SLEEP", "0.05") == "OK"
        assert c.call("PROXY", "SLOWLOG", "LEN") == 0
        assert c.call("PROXY", "SLOWLOG", "GET") == []


def test_max_len_keeps_the_newest(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=0,
                      slowlog_max_len=3)
    with s.raw() as c:
        for i in range(10):
            c.call("SET", f"k{i}", "v")
        assert c.call("PROXY", "SLOWLOG", "LEN") == 3
        got = c.call("PROXY", "SLOWLOG", "GET", "-1")
        assert [e[3] for e in got] == [[b"PROXY", b"SLOWLOG", b"LEN"], [b"SET", b"k9", b"v"],
                                       [b"SET", b"k8", b"v"]]
        assert got[0][0] - got[2][0] == 2


def test_full_log_takes_entries_of_every_size(redis_factory, sluice_factory):
    """A full slow log puts each new entry in the place of its oldest:
    small ones after large ones, and a large one (a long client name, long
    arguments) after small ones, each shown whole."""
    _, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=0,
                      slowlog_max_len=2)
    name = "n" * 500
    with s.raw() as c:
        for i in range(4):
            assert c.call("SET", f"k{i}", "v") == "OK"
        assert c.call("CLIENT", "SETNAME", name) == "OK"
        assert c.call("RPUSH", "big", "a" * 300, "b" * 100) == 2
        got = c.call("PROXY", "SLOWLOG", "GET", "-1")
        assert [e[3] for e in got] == [[b"RPUSH", b"big", b"a" * 128 + b"... (172 more bytes)",
                                        b"b" * 100],
                                       [b"CLIENT", b"SETNAME", name.encode()[:128] +
                                        b"... (372 more bytes)"]]
        assert got[0][5] == got[1][5] == name.encode()   # CLIENT SETNAME's name is its reply's
        assert c.call("CLIENT", "SETNAME", "short") == "OK"
        for i in range(3):
            assert c.call("GET", f"k{i}") == b"v"
        got = c.call("PROXY", "SLOWLOG", "GET", "-1")
        assert [e[3] for e in got] == [[b"GET", b"k2"], [b"GET", b"k1"]]
        assert [e[5] for e in got] == [b"short", b"short"]
        assert c.call("PROXY", "SLOWLOG", "LEN") == 2


def test_arguments_cut_as_redis_cuts_them(redis_factory, sluice_factory):
    """More than 32 arguments: 31 and "... (N more arguments)"; an argument
    over 128 bytes: 128 and "... (N more bytes)". Compared with the entry a
    real Redis makes for the same command; a password is "(redacted)"."""
    _, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=0)
    ref = redis_factory("--slowlog-log-slower-than", "0")
    long_cmd = ("SADD", "set", "x" * 200, "y" * 128, "z" * 129) + tuple(f"m{i}" for i in range(40))
    short_cmd = ("RPUSH", "list", "a" * 300, "b")
    with s.raw() as c, ref.raw() as r:
        for cmd in (long_cmd, short_cmd):
            assert c.call(*cmd) == r.call(*cmd)
            got = entry_of(c.call("PROXY", "SLOWLOG", "GET", "-1"), *_cut(cmd))
            want = r.call("SLOWLOG", "GET", "2")
            want = [e for e in want if e[3][0] == cmd[0].encode()][0]
            assert got[3] == want[3]
        assert got[3][2] == b"a" * 128 + b"... (172 more bytes)"
        assert c.call("AUTH", "nosuchuser", "hunter2")  # an error: no users here
        entries = c.call("PROXY", "SLOWLOG", "GET", "-1")
        assert b"hunter2" not in repr(entries).encode()
        assert entry_of(entries, "AUTH", "(redacted)", "(redacted)")


def test_small_requests_shown_whole_as_redis_shows_them(redis_factory, sluice_factory):
    """A request of up to 128 bytes is kept as its bytes and cut into
    arguments only when PROXY SLOWLOG GET shows it: empty and binary
    arguments (CR LF inside), an inline command, and requests of 127, 128
    and 129 bytes (each side of that bound) show as in a real Redis."""
    _, s = start_pair(redis_factory, sluice_factory, slowlog_log_slower_than=0)
    ref = redis_factory("--slowlog-log-slower-than", "0")
    sized = []
    for target in (127, 128, 129):
        sized.append(next(("SET", "k" * m, "x" * n) for m in range(1, 9) for n in range(120)
                          if len(encode_command("SET", "k" * m, "x" * n)) == target))
    cmds = [("SET", "", "a\r\nb\x00"), ("MSET", "k1", "", "k2", "\r\n")] + sized
    with s.raw() as c, ref.raw() as r:
        for cmd in cmds:
            assert c.call(*cmd) == r.call(*cmd) == "OK"
            want = r.call("SLOWLOG", "GET", "1")[0][3]
            assert want == [a.encode() for a in cmd]
            assert c.call("PROXY", "SLOWLOG", "GET", "1")[0][3] == want
        for conn in (c, r):
            conn.send(b"SET inline   value\r\n")
            assert conn.read_replies(1) == ["OK"]
        want = r.call("SLOWLOG", "GET", "1")[0][3]
        assert c.call("PROXY", "SLOWLOG", "GET", "1")[0][3] == want == [b"SET", b"inline", b"value"]


def _cut(cmd):
    """CMD's arguments as Redis's slow log shows them."""
    args = [a.encode() for a in cmd]
    if len(args) > 32:
        args = args[:31] + [b"... (%d more arguments)" % (len(args) - 31)]
    return [a[:128] + b"... (%d more bytes)" % (len(a) - 128) if len(a) > 128 and
            not a.startswith(b"... (") else a for a in args]


# --------------------------------------------------------------------------
# PROXY TOP


def rows(conn, kind, count=None):
    args = ("PROXY", "TOP", kind) + (("COUNT", str(count)) if count is not None else ())
    return conn.call(*args)


def test_top_clients_ranks_the_busy_client_first(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory)
    with s.raw() as busy, s.raw() as calm, s.raw() as admin:
        busy.call("CLIENT", "SETNAME", "busy")
        calm.call("CLIENT", "SETNAME", "calm")
        busy_id, calm_id = busy.call("CLIENT", "ID"), calm.call("CLIENT", "ID")
        for _ in range(10):
            busy.send(encode_command("INCR", "n") * 100)
            busy.read_replies(100)
            calm.call("INCR", "n")
        top = rows(admin, "CLIENTS")
        assert top[0][0] == (f"id={busy_id} addr={local_addr(busy).decode()} "
                             f"name=busy user=default").encode()
        # CLIENT SETNAME counted under the subject before it (no name).
        assert top[0][2] == 1001 and top[0][3] == 0 and top[0][4] == 0
        assert abs(float(top[0][1]) - 100.1) < 0.01      # 1001 requests over 10 s
        calm_row = [r for r in top if r[0].startswith(b"id=%d addr=%s name=calm " % (
            calm_id, local_addr(calm)))][0]
        assert calm_row[2] == 11 and top.index(calm_row) > 0
        assert rows(admin, "CLIENTS", 1) == top[:1]
        assert rows(admin, "NAMES")[0][0] == b"busy"
        assert rows(admin, "USERS")[0][0] == b"default"
        assert rows(admin, "IPS")[0][0] == b"127.0.0.1"
        assert rows(admin, "COMMANDS")[0][0] == b"incr"
        key = rows(admin, "KEYS")[0]
        assert key[0] == b"n" and key[2] == 1010, key
        assert isinstance(admin.call("PROXY", "TOP", "NOPE"), Err)
        assert isinstance(admin.call("PROXY", "TOP", "KEYS", "COUNT", "-1"), Err)


def test_top_keys_capacity_zero_turns_top_off(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, top_keys_capacity=0)
    with s.raw() as c:
        assert c.call("GET", "k") is None
        assert c.call("PROXY", "TOP", "KEYS") == Err(
            "ERR PROXY TOP is off (top_keys_capacity = 0)")


def test_top_counts_rejected_and_delayed(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, rules="""
[limit no-sets]
commands = SET
rate = 1/h
burst = 1

[limit slow-gets]
commands = GET
rate = 5/s
burst = 1
action = delay
max_delay = 5s
""")
    with s.raw(timeout=10 * SLOW) as c:
        c.call("CLIENT", "SETNAME", "noisy")
        for _ in range(4):
            c.call("SET", "k", "v")
        for _ in range(3):
            c.call("GET", "k")
        row = rows(c, "NAMES")[0]
        assert row[0] == b"noisy" and row[3] == 3 and row[4] == 2, row
        key = [r for r in rows(c, "KEYS") if r[0] == b"k"][0]
        assert key[2] == 7 and key[3] == 3 and key[4] == 2, key


def test_top_keys_names_the_hot_key_among_cold_ones(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory)
    with s.raw(timeout=30 * SLOW) as c:
        for batch in range(20):
            cmds = []
            for i in range(1000):
                cmds.append(encode_command("GET", f"cold:{batch}:{i}"))
                if i % 10 == 0:
                    cmds.append(encode_command("GET", "hot"))
            c.send(b"".join(cmds))
            c.read_replies(len(cmds))
        top = rows(c, "KEYS", 3)
        assert top[0][0] == b"hot" and top[0][2] == 2000, top


def test_memory_flat_over_millions_of_distinct_keys(redis_factory, sluice_factory,
                                                    monkeypatch):
    """sluice's RSS stays flat while one client touches 10 million
    distinct keys (EXISTS with 1,000 keys per command, pipelined 20
    commands at a time): the key sketch keeps top_keys_capacity of them.
    On the sanitizer build ASan's quarantine of freed memory is cut to
    1 MB (by default it holds up to 256 MB of freed blocks, which RSS
    would show as growth)."""
    if SLOW > 1:
        monkeypatch.setenv("ASAN_OPTIONS",
                           "detect_leaks=1:abort_on_error=0:quarantine_size_mb=1")
    _, s = start_pair(redis_factory, sluice_factory)
    total = 10_000_000
    per_cmd, per_batch = 1000, 20
    head = b"*%d\r\n$6\r\nEXISTS\r\n" % (per_cmd + 1)
    n = 0
    rss = []
    t0 = time.monotonic()
    with s.raw(timeout=60 * SLOW) as c:
        while n < total:
            batch = []
            for _ in range(per_batch):
                batch.append(head + b"".join(b"$12\r\nk%011d\r\n" % (n + i) for i in range(per_cmd)))
                n += per_cmd
            c.send(b"".join(batch))
            assert c.read_replies(per_batch) == [0] * per_batch
            if n % (total // 10) == 0:
                rss.append(rss_kb(s.proc.pid))
        top = rows(c, "KEYS", 2000)
    elapsed = time.monotonic() - t0
    print(f"{total} distinct keys in {elapsed:.1f} s; RSS KB after each tenth: {rss}")
    # The sketch is full: it holds top_keys_capacity keys, no more.
    assert isinstance(top, list) and len(top) == 1024, top[:3]
    assert all(row[0].startswith(b"k") and row[2] == 1 for row in top)
    # After the first tenth (buffers at their working size), RSS grows by
    # less than 4 MB over the other nine (a map of every key would need
    # hundreds of MB).
    assert max(rss[1:]) - rss[0] < 4096, rss


# --------------------------------------------------------------------------
# rules say who they hit


def test_rule_report_names_who_it_hit_most(redis_factory, sluice_factory):
    """The first refusal is reported at once; the next ones within 10 s are
    reported together 10 s after, with the subject hit most first."""
    _, s = start_pair(redis_factory, sluice_factory, rules="""
[limit no-sets]
commands = SET
rate = 1/h
burst = 1
per = rule
""")
    with s.raw() as quiet, s.raw() as noisy:
        quiet.call("CLIENT", "SETNAME", "quiet")
        noisy.call("CLIENT", "SETNAME", "noisy")
        assert quiet.call("SET", "a", "1") == "OK"
        assert isinstance(quiet.call("SET", "a", "1"), Err)
        first = wait_until(lambda: re.findall(r"rule no-sets rejected 1 and delayed 0 requests.*",
                                              s.log_path.read_text()), 5 * SLOW,
                           msg="the first report")
        assert f"most hit: user=default name=quiet addr={local_addr(quiet).decode()} (1)" in first[0]
        for _ in range(7):
            assert isinstance(noisy.call("SET", "a", "1"), Err)
        assert isinstance(quiet.call("SET", "a", "1"), Err)
        second = wait_until(lambda: re.findall(r"rule no-sets rejected 8 and delayed 0 requests.*",
                                               s.log_path.read_text()), 15 * SLOW,
                            msg="the report 10 s after the first")
        assert re.search(r"most hit: user=default name=noisy addr=127\.0\.0\.1:\d+ \(7\), "
                         r"user=default name=quiet addr=127\.0\.0\.1:\d+ \(1\)$", second[0]), second


def test_dryrun_report_says_would_have(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, rules="""
[limit trial]
commands = SET
rate = 1/h
burst = 1
mode = dryrun
""")
    with s.raw() as c:
        c.call("CLIENT", "SETNAME", "tester")
        for _ in range(3):
            assert c.call("SET", "a", "1") == "OK"
        line = wait_until(lambda: re.findall(r"rule trial \(dryrun\) would have rejected 1 and "
                                             r"delayed 0 requests.*", s.log_path.read_text()),
                          5 * SLOW, msg="the dry-run report")
        assert "(1 so far); most hit: user=default name=tester addr=" in line[0]


# --------------------------------------------------------------------------
# permissions


USERS = """\
[user default]
password = secret
commands = +@all

[user app]
password = apppw
commands = +@all -@dangerous
keys = *

[user ops]
password = opspw
commands = +@read +proxy|top
keys = *

[user admin]
password = adminpw
commands = +@admin +@read
keys = *
"""


def test_slowlog_and_top_need_admin_or_a_grant(redis_factory, sluice_factory):
    _, s = start_pair(redis_factory, sluice_factory, users=USERS)
    with s.raw() as c:
        assert c.call("PROXY", "TOP", "CLIENTS") == Err("NOAUTH Authentication required.")
        assert c.call("AUTH", "app", "apppw") == "OK"
        for sub in ("SLOWLOG", "TOP"):
            args = ("PROXY", sub, "LEN" if sub == "SLOWLOG" else "KEYS")
            assert c.call(*args) == Err(
                f"NOPERM this user has no permissions to run the 'proxy|{sub.lower()}' command")
        assert c.call("AUTH", "ops", "opspw") == "OK"
        assert isinstance(c.call("PROXY", "TOP", "USERS"), list)
        assert c.call("PROXY", "SLOWLOG", "LEN") == Err(
            "NOPERM this user has no permissions to run the 'proxy|slowlog' command")
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        assert isinstance(c.call("PROXY", "SLOWLOG", "LEN"), int)
        assert {r[0] for r in rows(c, "USERS")} >= {b"default", b"app", b"ops", b"admin"}
        help_text = b" ".join(x if isinstance(x, bytes) else x.encode()
                              for x in c.call("PROXY", "HELP"))
        assert b"SLOWLOG" in help_text and b"TOP" in help_text
