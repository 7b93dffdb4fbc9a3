"""Hostile round three, medium and low items (issue 30, items 5 to 12):
hostile label values in /metrics, secrets in PROXY SLOWLOG, a reload
that removes a permission from requests already read, departed nodes
forgotten, one table for PROXY subcommands, the hand-over socket's
directory, HEAD and Content-Length on the metrics listener, and a
metrics listener that cannot be turned against the proxy."""

import os
import socket
import subprocess
import time

import pytest

from helpers import SLOW, Err, RawConn, encode_command, free_port, wait_until


def _args(entries):
    """Every argument of every PROXY SLOWLOG / SLOWLOG entry, as bytes."""
    return [a for e in entries for a in e[3]]


# --------------------------------------------------------------------------
# 6. PROXY SLOWLOG redacts what Redis's SLOWLOG redacts, and OWNER tokens


SECRET_COMMANDS = [
    ("ACL", "SETUSER", "h30c-user", "on", ">pw-acl-secret", "~*", "+@all"),
    ("CONFIG", "SET", "masterauth", "pw-masterauth-secret", "maxmemory-policy", "noeviction"),
    ("CONFIG", "SET", "requirepass", "pw-requirepass-secret"),
    ("CONFIG", "SET", "requirepass", ""),
    ("MIGRATE", "127.0.0.1", "1", "k", "0", "10", "AUTH", "pw-migrate-secret"),
    ("MIGRATE", "127.0.0.1", "1", "k", "0", "10", "AUTH2", "user-migrate", "pw-migrate2-secret"),
    ("HELLO", "2", "AUTH", "default", "pw-hello-secret"),
]


def test_slowlog_redacts_secrets_as_redis_does(redis_factory, sluice_factory):
    """Each command Redis 7.0 redacts shows in PROXY SLOWLOG exactly as in
    a real Redis's SLOWLOG (with "(redacted)"), and LOCK/UNLOCK/RENEW show
    their OWNER token as "(redacted)"."""
    srv = redis_factory("--slowlog-log-slower-than", "0")
    s = sluice_factory(srv.port, slowlog_log_slower_than=0)
    ref = redis_factory("--slowlog-log-slower-than", "0")
    with s.raw() as c, ref.raw() as r:
        for cmd in SECRET_COMMANDS:
            c.call(*cmd)
            r.call(*cmd)
            want = [e for e in r.call("SLOWLOG", "GET", "-1") if e[3][0] == cmd[0].encode()][0][3]
            got = [e for e in c.call("PROXY", "SLOWLOG", "GET", "-1")
                   if e[3][0] == cmd[0].encode()][0][3]
            assert got == want, cmd
            assert b"(redacted)" in got
        assert c.call("LOCK", "lk", "10000", "OWNER", "tok-secret-1") == b"tok-secret-1"
        c.call("RENEW", "lk", "10000", "OWNER", "tok-secret-1")
        c.call("UNLOCK", "lk", "OWNER", "tok-secret-1")
        entries = c.call("PROXY", "SLOWLOG", "GET", "-1")
    shown = _args(entries)
    for secret in (b"tok-secret-1", b"pw-acl-secret", b"pw-masterauth-secret",
                   b"pw-migrate-secret", b"pw-migrate2-secret", b"pw-hello-secret"):
        assert secret not in shown, (secret, entries)
    locks = [e[3] for e in entries if e[3][0].upper() in (b"LOCK", b"UNLOCK", b"RENEW")]
    assert len(locks) == 3, entries
    for args in locks:
        assert args[args.index(b"OWNER") + 1] == b"(redacted)", args
