#!/usr/bin/python3
"""gen_commands.py - write proxy/cmd/commands_table.c from redis-server's COMMAND.

Starts a throwaway redis-server on a free loopback port, reads COMMAND, and
writes the command table (names, arity, flags, ACL categories, key specs,
subcommands) as C data. The flag and category names come from the X-macro
lists in proxy/cmd/commands.h, so the header stays the one source of the bits.

    /usr/bin/python3 tools/gen_commands.py [--redis-server PATH] [--output FILE]

The output is deterministic: entries are sorted by name and ids are dense in
that order (each command, then its subcommands).
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "proxy", "cmd", "commands.h")
OUTPUT = os.path.join(ROOT, "proxy", "cmd", "commands_table.c")

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def warn(msg):
    print("gen_commands.py: warning: " + msg, file=sys.stderr)


def die(msg):
    print("gen_commands.py: error: " + msg, file=sys.stderr)
    sys.exit(1)


# --- the bits commands.h defines -------------------------------------------

def header_list(text, macro):
    """The (ID, "name") pairs of the X-macro list MACRO in commands.h."""
    m = re.search(r"#define %s\(X\)((?:.*\\\n)*.*)" % macro, text)
    if m is None:
        die("%s not found in %s" % (macro, HEADER))
    return re.findall(r'X\((\w+),\s*"([^"]+)"\)', m.group(1))


def header_bits():
    """Maps from Redis's flag and category names to C constant names."""
    with open(HEADER) as f:
        text = f.read()
    flags = {name: "CMD_" + ident for ident, name in header_list(text, "CMD_FLAG_LIST")}
    cats = {name: "ACL_" + ident for ident, name in header_list(text, "ACL_CATEGORY_LIST")}
    return flags, cats


# --- the throwaway server ---------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, workdir):
    """Start redis-server on a free loopback port; returns (process, client)."""
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc, client
        except redis.exceptions.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                die("redis-server did not start on port %d" % port)
            time.sleep(0.05)


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def decode(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def read_commands(binary):
    """COMMAND's raw reply (RESP2 arrays, decoded) and the server version."""
    with tempfile.TemporaryDirectory(prefix="gen_commands.") as workdir:
        proc, client = start_server(binary, workdir)
        try:
            # redis-py reshapes COMMAND into dicts and drops the ACL
            # categories; take the reply as the server sent it.
            client.set_response_callback("COMMAND", lambda reply, **kw: reply)
            reply = decode(client.execute_command("COMMAND"))
            version = client.info("server")["redis_version"]
            client.close()
        finally:
            stop_server(proc)
    return reply, str(version)


# --- from COMMAND's reply to entries ---------------------------------------

def pairs(flat):
    """A RESP2 map (flat key/value array) as a dict."""
    if len(flat) % 2 != 0:
        die("odd-length map in COMMAND reply: %r" % (flat,))
    return dict(zip(flat[0::2], flat[1::2]))


def int16(value, what):
    if not isinstance(value, int) or not INT16_MIN <= value <= INT16_MAX:
        die("%s out of int16 range: %r" % (what, value))
    return value


def parse_key_spec(cmd, flat):
    """One key spec as a dict of struct key_spec fields (C expressions)."""
    spec = pairs(flat)
    begin, find = pairs(spec["begin_search"]), pairs(spec["find_keys"])
    bs, fk = pairs(begin["spec"]), pairs(find["spec"])
    out = {}
    where = "%s key spec" % cmd
    if begin["type"] == "index":
        out["begin"] = "KS_BEGIN_INDEX"
        out["index"] = int16(bs["index"], where + " index")
    elif begin["type"] == "keyword":
        out["begin"] = "KS_BEGIN_KEYWORD"
        if not re.fullmatch(r"[A-Za-z0-9_-]+", bs["keyword"]):
            die("%s: unexpected keyword %r" % (where, bs["keyword"]))
        out["keyword"] = '"%s"' % bs["keyword"]
        out["startfrom"] = int16(bs["startfrom"], where + " startfrom")
    else:
        if begin["type"] != "unknown":
            warn("%s: begin_search type %r taken as unknown" % (where, begin["type"]))
        out["begin"] = "KS_BEGIN_UNKNOWN"
    if find["type"] == "range":
        out["find"] = "KS_FIND_RANGE"
        out["lastkey"] = int16(fk["lastkey"], where + " lastkey")
        out["keystep"] = int16(fk["keystep"], where + " keystep")
        out["limit"] = int16(fk["limit"], where + " limit")
    elif find["type"] == "keynum":
        out["find"] = "KS_FIND_KEYNUM"
        out["keynumidx"] = int16(fk["keynumidx"], where + " keynumidx")
        out["firstkey"] = int16(fk["firstkey"], where + " firstkey")
        out["keynumstep"] = int16(fk["keystep"], where + " keystep")
    else:
        if find["type"] != "unknown":
            warn("%s: find_keys type %r taken as unknown" % (where, find["type"]))
        out["find"] = "KS_FIND_UNKNOWN"
    return out


def bit_expr(names, known, kind, cmd, strip=""):
    """NAMES (Redis's words) as an OR of C constants, in header order."""
    order = list(known)
    words = []
    for name in names:
        word = name[len(strip):] if strip and name.startswith(strip) else name
        if word in known:
            words.append(word)
        else:
            warn("%s: unknown %s %r ignored" % (cmd, kind, name))
    words = sorted(set(words), key=order.index)
    return " | ".join(known[w] for w in words) if words else "0"


def parse_entry(raw, flags, cats):
    """One COMMAND entry (a command or subcommand) as a dict."""
    if len(raw) < 10:
        die("short COMMAND entry: %r" % (raw,))
    name, arity, flag_names, _first, _last, _step, acl, _tips, specs, subs = raw[:10]
    name = name.lower()
    return {
        "name": name,
        "arity": int16(arity, name + " arity"),
        "flags": bit_expr(flag_names, flags, "flag", name),
        "acl": bit_expr(acl, cats, "ACL category", name, strip="@"),
        "specs": [parse_key_spec(name, s) for s in specs],
        "subs": sorted((parse_entry(s, flags, cats) for s in subs), key=lambda e: e["name"]),
    }


def assign_ids(commands):
    """Dense ids: each command, then its subcommands, in name order."""
    next_id = 0
    for cmd in commands:
        for entry in [cmd] + cmd["subs"]:
            entry["id"] = next_id
            next_id += 1
    if next_id > 0xFFFF:
        die("too many entries for uint16 ids: %d" % next_id)
    return next_id


# --- C output -----------------------------------------------------------------

def c_ident(name):
    ident = re.sub(r"[^a-z0-9]", "_", name)
    if not re.fullmatch(r"[a-z0-9_]+", ident):
        die("cannot make an identifier of %r" % name)
    return ident


BEGIN_FIELDS = ["begin", "index", "keyword", "startfrom"]
FIND_FIELDS = ["find", "lastkey", "keystep", "limit", "keynumidx", "firstkey", "keynumstep"]


def emit_specs(out, entry):
    if not entry["specs"]:
        return
    out.append("static const struct key_spec ks_%s[] = {" % c_ident(entry["name"]))
    for spec in entry["specs"]:
        begin = ", ".join(".%s = %s" % (f, spec[f]) for f in BEGIN_FIELDS if f in spec)
        find = ", ".join(".%s = %s" % (f, spec[f]) for f in FIND_FIELDS if f in spec)
        out.append("    {%s," % begin)
        out.append("     %s}," % find)
    out.append("};")


def wrap_bits(lead, expr, width=96):
    """LEAD + EXPR + "," as lines of at most WIDTH, broken after a '|'."""
    lines, line = [], lead
    for i, word in enumerate(expr.split(" | ")):
        piece = word if i == 0 else " | " + word
        if i > 0 and len(line) + len(piece) + 1 > width:
            lines.append(line + " |")
            line = " " * len(lead) + word
        else:
            line += piece
    return lines + [line + ","]


def emit_entry(out, entry):
    ident = c_ident(entry["name"])
    specs = ("ks_%s" % ident, len(entry["specs"])) if entry["specs"] else ("NULL", 0)
    subs = ("sub_%s" % ident, len(entry["subs"])) if entry["subs"] else ("NULL", 0)
    out.append('    {.name = "%s", .arity = %d, .id = %d,'
               % (entry["name"], entry["arity"], entry["id"]))
    out.extend(wrap_bits("     .flags = ", entry["flags"]))
    out.extend(wrap_bits("     .acl_categories = ", entry["acl"]))
    out.append("     .key_specs = %s, .key_spec_count = %d," % specs)
    out.append("     .subcommands = %s, .subcommand_count = %d}," % subs)


def emit_table(out, decl, entries):
    out.append("%s = {" % decl)
    for entry in entries:
        emit_entry(out, entry)
    out.append("};")


def render(commands, total, version):
    out = [
        "/* commands_table.c - GENERATED by tools/gen_commands.py from the COMMAND",
        " * output of redis-server %s. Do not edit by hand: rerun" % version,
        " * /usr/bin/python3 tools/gen_commands.py to regenerate. */",
        '#include <stddef.h>',
        "",
        '#include "commands.h"',
        "",
        "/* Read by commands.c, which declares them extern. */",
        "extern const struct command commands_table[];",
        "extern const int commands_table_count;",
        "extern const struct command *const commands_table_by_id[];",
        "extern const int commands_table_id_count;",
    ]
    seen = set()
    everything = [e for c in commands for e in [c] + c["subs"]]
    for entry in everything:
        ident = c_ident(entry["name"])
        if ident in seen:
            die("two entries map to the identifier %r" % ident)
        seen.add(ident)
    out.append("")
    out.append("/* Key specs. */")
    for entry in everything:
        emit_specs(out, entry)
    out.append("")
    out.append("/* Subcommands. */")
    for cmd in commands:
        if cmd["subs"]:
            emit_table(out, "static const struct command sub_%s[]" % c_ident(cmd["name"]),
                       cmd["subs"])
    out.append("")
    out.append("/* Top-level commands, sorted by name. */")
    emit_table(out, "const struct command commands_table[]", commands)
    out.append("const int commands_table_count = %d;" % len(commands))
    out.append("")
    out.append("/* Every entry by id. */")
    out.append("const struct command *const commands_table_by_id[] = {")
    for index, cmd in enumerate(commands):
        out.append("    &commands_table[%d]," % index)
        for i, _ in enumerate(cmd["subs"]):
            out.append("    &sub_%s[%d]," % (c_ident(cmd["name"]), i))
    out.append("};")
    out.append("const int commands_table_id_count = %d;" % total)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--output", default=OUTPUT)
    args = ap.parse_args()

    flags, cats = header_bits()
    reply, version = read_commands(args.redis_server)
    if not version.startswith("7.0."):
        warn("redis-server %s is not 7.0; the table is meant to match 7.0" % version)
    commands = sorted((parse_entry(e, flags, cats) for e in reply), key=lambda e: e["name"])
    total = assign_ids(commands)
    text = render(commands, total, version)
    with open(args.output + ".tmp", "w") as f:
        f.write(text)
    os.replace(args.output + ".tmp", args.output)
    print("gen_commands.py: wrote %s: %d commands, %d entries (redis %s)"
          % (os.path.relpath(args.output), len(commands), total, version))


if __name__ == "__main__":
    main()
