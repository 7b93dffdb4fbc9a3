#!/usr/bin/python3
"""acl_cases.py - ask a real redis-server 7.0 which requests its ACL allows,
for the rule lists of tests/unit/test_users.c, and print the answers as the
C rows of that test's tables. The unit test then holds Redis's verdicts as
data; Redis is not needed when the test runs.

    redis-server --port 46379 --save '' &
    tools/acl_cases.py 46379 > /tmp/rows.c

Each case: (kind, grant, request). kind "cmd": grant is the `commands`
value (keys and channels all); "keys": grant is `keys` globs (+@all);
"chan": grant is `channels` globs (+@all). Uses ACL DRYRUN (Redis 7.0)."""
import sys

import redis

CMD_CASES = [
    ("+@all", "get k"), ("+@all", "config set maxmemory 1"),
    ("+@all -@dangerous", "config get maxmemory"), ("+@all -@dangerous", "flushall"),
    ("+@all -@dangerous", "keys *"), ("+@all -@dangerous", "get k"),
    ("+@all -@dangerous", "client id"), ("+@all -@dangerous", "client kill id 1"),
    ("+@all -@dangerous", "debug sleep 0"), ("+@all -@dangerous", "eval return 0"),
    ("+@read", "get k"), ("+@read", "set k v"), ("+@read", "hgetall h"),
    ("+@read", "object encoding k"), ("+@read", "memory usage k"),
    ("+@read", "scan 0"), ("+@read", "ping"), ("+@read", "info"),
    ("+@read", "xread streams s 0"), ("+@read", "sort k"), ("+@read", "sort_ro k"),
    ("+get", "get k"), ("+get", "mget k"), ("+get", "getex k"),
    ("+config", "config get maxmemory"), ("+config", "config set maxmemory 1"),
    ("+config|get", "config get maxmemory"), ("+config|get", "config set maxmemory 1"),
    ("+config -config|set", "config get maxmemory"),
    ("+config -config|set", "config set maxmemory 1"),
    ("+config|get -config", "config get maxmemory"),
    ("+@all -config", "config get maxmemory"), ("+@all -config", "get k"),
    ("+@all -config +config|get", "config get maxmemory"),
    ("+@all -config +config|get", "config resetstat"),
    ("+@slow", "config get maxmemory"), ("+@slow", "client id"), ("+@slow", "get k"),
    ("+@slow", "keys *"), ("+@fast", "get k"), ("+@fast", "client id"),
    ("+@all -@slow", "client id"), ("+@all -@slow", "config get x"),
    ("+@all -@slow", "get k"), ("+@all -@slow +client|id", "client id"),
    ("+@connection", "client id"), ("+@connection", "client setname n"),
    ("+@connection", "ping"), ("+@connection", "echo x"), ("+@connection", "select 0"),
    ("+@admin", "config get x"), ("+@admin", "get k"), ("+@admin", "client kill id 1"),
    ("+@admin", "client list"), ("+@admin", "acl whoami"), ("+@admin", "acl setuser x"),
    ("+@admin -@dangerous", "config get x"),
    ("+@write", "set k v"), ("+@write", "get k"), ("+@write", "del k"),
    ("+@write -del", "del k"), ("+@write -del", "unlink k"),
    ("+@keyspace", "del k"), ("+@keyspace", "type k"), ("+@keyspace", "get k"),
    ("+@pubsub", "publish c m"), ("+@pubsub", "subscribe c"),
    ("+@pubsub", "pubsub channels"), ("+@pubsub", "get k"),
    ("+@scripting", "eval return 0"), ("+@scripting", "evalsha abc 0"),
    ("+@scripting", "script load x"), ("+@scripting", "function list"),
    ("+@transaction", "multi"), ("+@transaction", "exec"), ("+@transaction", "watch k"),
    ("+@string", "append k v"), ("+@string", "lpush k v"), ("+@hash", "hset h f v"),
    ("+@list", "blpop k 0"), ("+@blocking", "blpop k 0"), ("+@blocking", "lpop k"),
    ("+@stream", "xadd s * f v"), ("+@geo", "geoadd g 1 1 m"),
    ("+@hyperloglog", "pfadd h a"), ("+@bitmap", "setbit k 1 1"),
    ("+@set", "sadd s m"), ("+@sortedset", "zadd z 1 m"),
    ("+@all -@all", "get k"), ("+@all -@all +get", "get k"), ("+@all -@all +get", "set k v"),
    ("-@all +@read -@read", "get k"),
    ("+@read -get", "get k"), ("+@read -get", "mget k"), ("-get +get", "get k"),
    ("+client|id +client|info", "client info"), ("+client|id +client|info", "client list"),
    ("+client", "client list"), ("+client -client|kill", "client kill id 1"),
    ("+client -client|kill", "client id"),
    ("+object|encoding", "object encoding k"), ("+object|encoding", "object freq k"),
    ("+command", "command"), ("+command", "command count"), ("+command|count", "command"),
    ("+command|count", "command count"),
    ("+@read", "auth pw"), ("+@read", "hello"), ("+@read", "quit"), ("+@read", "reset"),
    ("+get", "auth pw"),
]

KEY_CASES = [
    ("*", "get anything"), ("app:*", "get app:1"), ("app:*", "get other"),
    ("app:*", "mset app:1 v app:2 v"), ("app:*", "mset app:1 v other v"),
    ("app:*", "del app:1 app:2 app:3"), ("app:*", "del app:1 x app:3"),
    ("app:*", "eval s 2 app:1 app:2 other"), ("app:*", "eval s 2 app:1 other app:3"),
    ("app:*", "eval s 0 other"), ("app:*", "ping"), ("app:*", "publish other m"),
    ("app:* tmp:?", "rename app:1 tmp:1"), ("app:* tmp:?", "rename app:1 tmp:12"),
    ("app:*", "sort app:1 store other"), ("app:*", "sort app:1 store app:2"),
    ("app:*", "zunionstore app:d 2 app:1 other"), ("app:*", "xread streams app:s other 0 0"),
    ("app:*", "blmove app:1 app:2 left right 0"), ("app:*", "lmove app:1 other left right"),
    ("app:*", "object encoding other"), ("app:*", "spublish other m"),
    ("a[bc]d", "get abd"), ("a[bc]d", "get aed"), ("h?llo", "get hello"),
    ("h\\*", "get h*"), ("h\\*", "get hx"),
    ("app:*", "eval s 5 app:1"), ("app:*", "eval s 1"), ("app:*", "eval s x other"),
    ("app:*", "migrate h 1 other 0 10"), ("app:*", "sort app:1 by other"),
    ("app:*", "georadius app:g 0 0 1 km store other"),
    ("app:*", "xreadgroup group g c streams app:1 other 0 0"),
    ("app:*", "lmpop 2 app:1 other left"), ("app:*", "zrangestore other app:1 0 1"),
    ("app:*", "memory usage other"), ("app:*", "bitop and app:d app:1 other"),
    ("app:*", "pfcount app:1 other"), ("app:*", "exists other"), ("app:*", "object help"),
]

CHAN_CASES = [
    ("*", "subscribe anything"), ("news.*", "publish news.sport m"),
    ("news.*", "publish other m"), ("news.*", "subscribe news.a news.b"),
    ("news.*", "subscribe news.a other"), ("news.*", "psubscribe news.*"),
    ("news.*", "psubscribe news.sp*"), ("news.sport", "psubscribe news.*"),
    ("news.*", "spublish news.a m"), ("news.*", "spublish other m"),
    ("news.*", "ssubscribe news.a other"), ("news.*", "unsubscribe other"),
    ("news.*", "punsubscribe other"), ("news.*", "get k"),
    ("news.* other", "psubscribe other"),
]


def verdict(r, grant_args, request):
    r.execute_command("ACL", "SETUSER", "t", "reset", "on", "nopass", *grant_args)
    reply = r.execute_command("ACL", "DRYRUN", "t", *request.split())
    return 1 if reply == b"OK" else 0


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    r = redis.Redis(port=int(sys.argv[1]))
    for kind, cases in (("cmd", CMD_CASES), ("keys", KEY_CASES), ("chan", CHAN_CASES)):
        print(f"/* {kind} */")
        for grant, request in cases:
            if kind == "cmd":
                args = grant.split() + ["~*", "&*"]
            elif kind == "keys":
                args = ["+@all", "&*"] + ["~" + g for g in grant.split()]
            else:
                args = ["+@all", "~*"] + ["&" + g for g in grant.split()]
            ok = verdict(r, args, request)
            print(f"    {{{c_string(grant)}, {c_string(request)}, {ok}}},")
    r.execute_command("ACL", "DELUSER", "t")


if __name__ == "__main__":
    main()
