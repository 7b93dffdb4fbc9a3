"""Client authentication in front of a Redis Cluster (README "Users and
permissions", "Redis Cluster"): what sluice refuses itself for a user of
the users file must read as what a cluster node answers that user.

Each reply is compared with the node that owns the key, given the same user
with ACL SETUSER and asked directly."""

import pytest
from redis.crc import key_slot

from cluster_helpers import ClusterRedis
from conftest import Sluice
from helpers import SLOW, RawConn, wait_until

USERS_INI = """\
[user admin]
password = adminpw
commands = +@all
keys = *
channels = *

[user wide]
password = widepw
commands = +@all
keys = app:*
channels = *
"""

ACL_USERS = [
    ["admin", "on", ">adminpw", "+@all", "~*", "&*"],
    ["wide", "on", ">widepw", "+@all", "~app:*", "&*"],
]


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth-cluster")
    cl = ClusterRedis(root / "cluster", replicas=0)
    (root / "users.ini").write_text(USERS_INI)
    s = Sluice(root / "sluice", None, cluster_seeds=cl.seeds,
               extra={"users": str(root / "users.ini")})
    try:
        cl.start()
        for node in cl.nodes:
            with RawConn(node.port, timeout=5) as c:
                for rule in ACL_USERS:
                    assert c.call("ACL", "SETUSER", *rule) == "OK"
        s.start()

        def map_loaded():
            with s.raw() as c:
                assert c.call("AUTH", "admin", "adminpw") == "OK"
                return b"cluster_have_map:1" in c.call("PROXY", "CLUSTER")
        wait_until(map_loaded, 10 * SLOW, msg="sluice to load the slot map")
        yield cl, s
    finally:
        problems = s.stop()
        cl.stop()
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)


def _replies(port, script):
    with RawConn(port, timeout=10) as c:
        return [c.call_raw(*cmd) for cmd in script]


def test_sort_by_and_get_as_a_cluster_node_answers(cluster_env):
    """A node of a Redis 7.0 cluster refuses SORT's BY pattern and GET to
    everyone, before its ACL check; sluice, which refuses them itself to
    a user limited to some keys, says what the node says."""
    cl, s = cluster_env
    owner = cl.slot_owner_port(key_slot(b"app:l"))
    with RawConn(owner, timeout=5) as c:
        assert c.call("AUTH", "admin", "adminpw") == "OK"
        c.call("DEL", "app:l")
        assert c.call("RPUSH", "app:l", "2", "1") == 2
    script = [("AUTH", "wide", "widepw"),
              ("SORT", "app:l", "BY", "nosort", "GET", "x_*"), ("SORT", "app:l", "BY", "w_*"),
              ("SORT_RO", "app:l", "GET", "#"), ("SORT", "app:l", "BY", "nosort")]
    assert _replies(s.port, script) == _replies(owner, script)
