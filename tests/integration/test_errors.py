"""Error replies through sluice are byte-identical to Redis's."""

import pytest
import redis

from helpers import assert_same_replies

SETUP = [("SET", "str", "notanint"), ("SET", "num", "5")]

CASES = {
    "unknown_command": ("NOSUCHCOMMAND", "a", "b"),
    "unknown_command_noargs": ("FOOBAR",),
    "unknown_command_long_args": ("FOOBAR", "x" * 200, "y"),
    "wrong_arity_get": ("GET",),
    "wrong_arity_get_extra": ("GET", "a", "b"),
    "wrong_arity_set": ("SET", "k"),
    "wrongtype": ("LPUSH", "str", "x"),
    "wrongtype_read": ("HGET", "str", "f"),
    "incr_not_integer": ("INCR", "str"),
    "incrby_bad_arg": ("INCRBY", "num", "abc"),
    "incrbyfloat_bad": ("INCRBYFLOAT", "str", "1"),
    "syntax_error": ("SET", "k", "v", "BADOPT"),
    "syntax_error_zadd": ("ZADD", "z", "NX", "XX", "1", "a"),
    "exec_without_multi": ("EXEC",),
    "discard_without_multi": ("DISCARD",),
    "expire_bad_int": ("EXPIRE", "num", "soon"),
    "bad_float": ("ZADD", "z", "notfloat", "a"),
    "lrange_bad_index": ("LRANGE", "l", "a", "b"),
    "unknown_subcommand": ("OBJECT", "FOO", "x"),
    "select_out_of_range": ("SELECT", "1000"),
    "xadd_bad_id": ("XADD", "s", "bad-id", "f", "v"),
    "empty_command_name": ("",),
}


def _errors(srv):
    out = {}
    with srv.raw() as c:
        for cmd in SETUP:
            c.call(*cmd)
        for name, cmd in CASES.items():
            out[name] = c.call_raw(*cmd)
    return out


@pytest.fixture(scope="module")
def error_replies(sluice, ref, backend):
    for srv in (backend, ref):
        srv.client().flushall()
    return _errors(sluice), _errors(ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_reply_identical(case, error_replies):
    got, want = error_replies[0][case], error_replies[1][case]
    assert want.startswith(b"-"), f"test bug: Redis did not error for {case}: {want!r}"
    assert got == want, f"sluice: {got!r}\nredis:  {want!r}"


def test_errors_pipelined_identical(sluice, ref, clean):
    """The same errors sent all at once in one pipeline, interleaved with
    successful commands: same replies in the same order."""
    cmds = list(SETUP)
    for cmd in CASES.values():
        cmds.append(cmd)
        cmds.append(("PING",))
    assert_same_replies(sluice, ref, cmds, pipelined=True)


def _exc_text(client, *args):
    try:
        client.execute_command(*args)
    except redis.ResponseError as e:
        return type(e).__name__, str(e)
    return None


@pytest.mark.parametrize("cmd", [
    ("NOSUCHCOMMAND", "x"), ("GET",), ("LPUSH", "str", "x"), ("INCR", "str"),
    ("SET", "k", "v", "BADOPT"), ("EXEC",),
])
def test_error_redispy_identical(cmd, r, ref_r):
    for c in (r, ref_r):
        c.set("str", "abc")
    want = _exc_text(ref_r, *cmd)
    assert want is not None
    assert _exc_text(r, *cmd) == want


def test_error_in_multi_identical(sluice, ref, clean):
    """Errors while queueing and at EXEC time (EXECABORT, runtime errors)."""
    script = [("SET", "s", "x"), ("MULTI",), ("INCR", "s"), ("GET",), ("EXEC",),
              ("MULTI",), ("INCR", "s"), ("SET", "t", "1"), ("EXEC",),
              ("MULTI",), ("NOSUCHCMD",), ("EXEC",)]
    assert_same_replies(sluice, ref, script)
