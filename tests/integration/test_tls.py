"""TLS on both sides of sluice (README "TLS"): tls_listen beside a plain
listen, client certificates required / optional / not asked, refused
CAs, hostile peers on the TLS port (plaintext, a handshake that never
ends), large values and pipelines through TLS, real clients (redis-py,
redis-cli), and backend_tls against a redis-server with a TLS port.

Certificates are made by the test with the openssl command line: a CA, a
server certificate (localhost, 127.0.0.1) and a client certificate signed
by it, and a second, unrelated CA with its own client certificate."""

import os
import shutil
import signal
import socket
import ssl
import subprocess

import pytest
import redis

from conftest import _read_log, require_sluice_bin
from helpers import SLOW, Err, encode_command, free_port, wait_until


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _make_ca(d, name):
    _openssl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key",
             "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN=sluice test {name}", cwd=d)


def _make_cert(d, name, ca, cn, ext):
    _openssl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=d)


class Certs:
    def __init__(self, d):
        self.dir = d
        _make_ca(d, "ca")
        _make_ca(d, "otherca")
        _make_cert(d, "server", "ca", "localhost",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth")
        _make_cert(d, "client", "ca", "sluice-client", "extendedKeyUsage=clientAuth")
        _make_cert(d, "stranger", "otherca", "stranger", "extendedKeyUsage=clientAuth")

    def path(self, name):
        return str(self.dir / name)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


def tls_keys(certs, port, auth="no", **more):
    keys = {
        "tls_listen": f"127.0.0.1:{port}",
        "tls_cert_file": certs.path("server.crt"),
        "tls_key_file": certs.path("server.key"),
        "tls_ca_cert_file": certs.path("ca.crt"),
        "tls_auth_clients": auth,
    }
    keys.update(more)
    return keys


def tls_client(certs, port, cert=None, ca="ca.crt", **kw):
    """redis-py over TLS; CERT: "client" or "stranger" (its .crt/.key)."""
    kw.setdefault("socket_timeout", 10 * SLOW)
    kw.setdefault("socket_connect_timeout", 5)
    if cert is not None:
        kw["ssl_certfile"] = certs.path(f"{cert}.crt")
        kw["ssl_keyfile"] = certs.path(f"{cert}.key")
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_cert_reqs="required",
                       ssl_ca_certs=certs.path(ca), **kw)


def bye(client):
    """Close CLIENT's connections (redis-py's close() keeps its pool's)."""
    client.connection_pool.disconnect()


def refused(client):
    """Whether CLIENT cannot run a command (its TLS session was refused)."""
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, ssl.SSLError, OSError):
        return True
    finally:
        client.connection_pool.disconnect()
    return False


def start_tls_sluice(sluice_factory, backend, certs, auth="no", **more):
    port = free_port()
    s = sluice_factory(backend.port, **tls_keys(certs, port, auth, **more))
    s.tls_port = port
    return s


def info_int(s, key):
    return int(s.info()[key])


# --------------------------------------------------------------------------
# client side


def test_plain_and_tls_listeners_side_by_side(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs)
    t = tls_client(certs, s.tls_port)
    p = s.client()
    assert t.set("tls:side", "by-tls") is True
    assert p.get("tls:side") == b"by-tls"
    assert p.set("tls:side", "by-plain") is True
    assert t.get("tls:side") == b"by-plain"
    info = s.info()
    assert info["tls_listeners"] == "1"
    assert info["tls_connected_clients"] == "1"
    t.connection_pool.disconnect()
    p.connection_pool.disconnect()
    wait_until(lambda: info_int(s, "tls_connected_clients") == 0, 5 * SLOW,
               msg="the TLS client to be gone")
    # The plain port does not speak TLS, the TLS port does not speak plain.
    assert refused(tls_client(certs, s.port))


def test_client_certificate_required(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="yes")
    before = info_int(s, "tls_handshake_failures")
    assert refused(tls_client(certs, s.tls_port))
    assert refused(tls_client(certs, s.tls_port, cert="stranger"))
    wait_until(lambda: info_int(s, "tls_handshake_failures") >= before + 2, 5 * SLOW,
               msg="two failed handshakes counted")
    good = tls_client(certs, s.tls_port, cert="client")
    assert good.ping() is True
    assert good.set("tls:cert", "1") is True
    bye(good)


def test_tls_auth_clients_defaults_to_yes(sluice_factory, backend, certs):
    port = free_port()
    keys = tls_keys(certs, port)
    del keys["tls_auth_clients"]
    s = sluice_factory(backend.port, **keys)
    assert refused(tls_client(certs, port))
    c = tls_client(certs, port, cert="client")
    assert c.ping() is True
    bye(c)


def test_client_certificate_optional(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="optional")
    anon = tls_client(certs, s.tls_port)
    assert anon.ping() is True
    signed = tls_client(certs, s.tls_port, cert="client")
    assert signed.ping() is True
    # Optional, yet a certificate shown must be one the CA signed.
    assert refused(tls_client(certs, s.tls_port, cert="stranger"))
    bye(anon)
    bye(signed)


def test_client_certificate_not_asked(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="no")
    c = tls_client(certs, s.tls_port, cert="stranger")
    assert c.ping() is True
    bye(c)


def test_client_refuses_server_of_another_ca(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="no")
    assert refused(tls_client(certs, s.tls_port, ca="otherca.crt"))
    assert s.client().ping() is True


def test_plaintext_to_tls_port_closed_cleanly(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs)
    t = tls_client(certs, s.tls_port)
    assert t.set("tls:plain", "v") is True
    before = info_int(s, "tls_handshake_failures")
    for payload in (b"PING\r\n", encode_command(b"SET", b"k", b"v"), b"\x00" * 4096,
                    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", s.tls_port), timeout=5 * SLOW) as raw:
            raw.sendall(payload)
            got = b""
            try:
                while True:
                    chunk = raw.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except ConnectionResetError:
                pass
            # Never a Redis reply in plaintext; at most a TLS alert record.
            assert b"PONG" not in got and b"OK" not in got
            assert got == b"" or got[0] == 0x15, got[:16]
        assert t.get("tls:plain") == b"v"
    assert info_int(s, "tls_handshake_failures") >= before + 4
    assert s.client().get("tls:plain") == b"v"
    bye(t)


def test_stalled_handshake_blocks_nobody_and_times_out(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, tls_handshake_timeout=500)
    silent = socket.create_connection(("127.0.0.1", s.tls_port), timeout=30 * SLOW)
    # Half a ClientHello: a TLS record header that promises more.
    half = socket.create_connection(("127.0.0.1", s.tls_port), timeout=30 * SLOW)
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    for _ in range(3):
        c = tls_client(certs, s.tls_port)
        assert c.set("tls:stall", "ok") is True
        bye(c)
    assert s.client().get("tls:stall") == b"ok"
    # Both are closed by sluice (a timeout here raises socket.timeout).
    for sock in (silent, half):
        try:
            assert sock.recv(100) == b""
        except ConnectionResetError:
            pass
    silent.close()
    half.close()
    assert info_int(s, "tls_handshake_failures") >= 2
    assert info_int(s, "tls_connected_clients") == 0


def test_large_values_both_ways_and_pipelining(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs)
    c = tls_client(certs, s.tls_port, socket_timeout=60 * SLOW)
    big = os.urandom(6 * 1024 * 1024)
    assert c.set("tls:big", big) is True
    assert c.get("tls:big") == big
    assert backend.client().strlen("tls:big") == len(big)
    pipe = c.pipeline(transaction=False)
    for i in range(2000):
        pipe.set(f"tls:p:{i}", i)
        pipe.get(f"tls:p:{i}")
    replies = pipe.execute()
    assert replies[0::2] == [True] * 2000
    assert replies[1::2] == [str(i).encode() for i in range(2000)]
    # A pipeline of large values at once, both ways.
    vals = [os.urandom(512 * 1024) for _ in range(8)]
    pipe = c.pipeline(transaction=False)
    for i, v in enumerate(vals):
        pipe.set(f"tls:bp:{i}", v)
    for i in range(len(vals)):
        pipe.get(f"tls:bp:{i}")
    replies = pipe.execute()
    assert replies[len(vals):] == vals
    bye(c)


def test_redis_cli_with_client_certificate(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="yes")
    base = ["redis-cli", "-h", "127.0.0.1", "-p", str(s.tls_port), "--tls",
            "--cacert", certs.path("ca.crt")]
    cert = ["--cert", certs.path("client.crt"), "--key", certs.path("client.key")]
    out = subprocess.run(base + cert + ["SET", "tls:cli", "hello"], capture_output=True,
                         text=True, timeout=20 * SLOW)
    assert out.stdout.strip() == "OK", out
    out = subprocess.run(base + cert + ["GET", "tls:cli"], capture_output=True, text=True,
                         timeout=20 * SLOW)
    assert out.stdout.strip() == "hello", out
    out = subprocess.run(base + ["GET", "tls:cli"], capture_output=True, text=True,
                         timeout=20 * SLOW)
    assert "hello" not in out.stdout


def test_tls_clients_with_sessions_and_pubsub(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs)
    c = tls_client(certs, s.tls_port)
    pipe = c.pipeline(transaction=True)
    pipe.set("tls:tx", "1").incr("tls:tx")
    assert pipe.execute() == [True, 2]
    sub = tls_client(certs, s.tls_port).pubsub()
    sub.subscribe("tls:chan")
    wait_until(lambda: sub.get_message(timeout=0.1) is not None, 5 * SLOW, msg="subscribed")
    assert c.publish("tls:chan", "hi") == 1
    msg = wait_until(lambda: sub.get_message(timeout=0.1), 5 * SLOW, msg="message")
    assert msg["data"] == b"hi"
    sub.close()
    bye(c)


# --------------------------------------------------------------------------
# reload and config checks


def _check(config_path):
    return subprocess.run([require_sluice_bin(), "-t", "-c", str(config_path)],
                          capture_output=True, text=True, timeout=20)


def test_config_check_reports_bad_tls_files(tmp_path, certs):
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate\n")
    cfg = tmp_path / "sluice.ini"
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\ntls_listen = 127.0.0.1:7777\n"
                   f"tls_cert_file = {bad}\ntls_key_file = {certs.path('server.key')}\n"
                   "tls_auth_clients = no\n")
    out = _check(cfg)
    assert out.returncode == 1
    assert f"{cfg}:4: tls_cert_file {bad}: cannot load the certificate" in out.stderr, out.stderr
    # A key that is not the certificate's.
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\ntls_listen = 127.0.0.1:7777\n"
                   f"tls_cert_file = {certs.path('server.crt')}\n"
                   f"tls_key_file = {certs.path('client.key')}\ntls_auth_clients = no\n")
    out = _check(cfg)
    assert out.returncode == 1 and f"{cfg}:5: tls_key_file" in out.stderr, out.stderr
    assert "mismatch" in out.stderr
    # Backend side: a missing CA file.
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\nbackend_tls = yes\n"
                   f"backend_tls_ca_cert_file = {tmp_path / 'nope.crt'}\n")
    out = _check(cfg)
    assert out.returncode == 1 and f"{cfg}:4: backend_tls_ca_cert_file" in out.stderr, out.stderr


@pytest.mark.parametrize("text, message", [
    ("tls_listen = 127.0.0.1:7777\ntls_auth_clients = no\n",
     "tls_listen needs tls_cert_file and tls_key_file"),
    ("tls_auth_clients = maybe\n", "must be yes, no or optional, not 'maybe'"),
    ("tls_protocols = TLSv1.2 SSLv3\n", "unknown protocol 'SSLv3'"),
    ("backend_tls = sure\n", "must be yes or no, not 'sure'"),
    ("backend_tls_cert_file = a.crt\n", "backend_tls_cert_file and backend_tls_key_file go together"),
])
def test_config_errors(tmp_path, text, message):
    cfg = tmp_path / "sluice.ini"
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\n" + text)
    out = _check(cfg)
    assert out.returncode == 1
    assert f"{cfg}:3: " in out.stderr and message in out.stderr, out.stderr


def test_auth_clients_needs_a_ca(tmp_path, certs):
    cfg = tmp_path / "sluice.ini"
    cfg.write_text("[proxy]\nbackend = 127.0.0.1:6379\ntls_listen = 127.0.0.1:7777\n"
                   f"tls_cert_file = {certs.path('server.crt')}\n"
                   f"tls_key_file = {certs.path('server.key')}\n")
    out = _check(cfg)
    assert out.returncode == 1 and "needs tls_ca_cert_file" in out.stderr, out.stderr


def test_tls_protocols(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, tls_protocols="TLSv1.3")
    ctx = ssl.create_default_context(cafile=certs.path("ca.crt"))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, OSError)):
        with socket.create_connection(("127.0.0.1", s.tls_port), timeout=5 * SLOW) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as t:
                t.sendall(encode_command(b"PING"))
                t.recv(100)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", s.tls_port), timeout=5 * SLOW) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as t:
            assert t.version() == "TLSv1.3"
            t.sendall(encode_command(b"PING"))
            assert t.recv(100) == b"+PONG\r\n"


def test_reload_reads_certificates_and_keeps_old_on_error(sluice_factory, backend, certs,
                                                          tmp_path):
    cert = tmp_path / "live.crt"
    key = tmp_path / "live.key"
    shutil.copy(certs.path("server.crt"), cert)
    shutil.copy(certs.path("server.key"), key)
    s = start_tls_sluice(sluice_factory, backend, certs, tls_cert_file=str(cert),
                         tls_key_file=str(key))
    cert.write_text("garbage\n")
    with s.raw() as c:
        reply = c.call(b"PROXY", b"RELOAD")
    assert str(reply).startswith(f"ERR not reloaded: {s.config_path}:"), reply
    assert f"tls_cert_file {cert}: cannot load the certificate" in str(reply), reply
    # The old context stays: new TLS clients still get in.
    c = tls_client(certs, s.tls_port)
    assert c.ping() is True
    bye(c)
    # A server certificate of the other CA: after a good reload, clients
    # that trust only the first CA are refused, those that trust the other
    # one get in, which shows the new files are in use.
    (tmp_path / "o").mkdir()
    _make_cert(tmp_path / "o", "srv2", str(certs.dir / "otherca"), "localhost",
               "subjectAltName=IP:127.0.0.1")
    shutil.copy(tmp_path / "o" / "srv2.crt", cert)
    shutil.copy(tmp_path / "o" / "srv2.key", key)
    with s.raw() as c:
        assert c.call(b"PROXY", b"RELOAD") == "OK"
    assert refused(tls_client(certs, s.tls_port))
    c = tls_client(certs, s.tls_port, ca="otherca.crt")
    assert c.ping() is True
    bye(c)
    # SIGHUP with a bad file: nothing changes, sluice goes on.
    key.write_text("garbage\n")
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "TLS certificates not reloaded" in _read_log(s.log_path), 5 * SLOW,
               msg="the failed reload logged")
    c = tls_client(certs, s.tls_port, ca="otherca.crt")
    assert c.ping() is True
    bye(c)


# --------------------------------------------------------------------------
# backend side


class TlsRedis:
    """redis-server with only a TLS port."""

    def __init__(self, d, certs, auth_clients):
        self.port = free_port()
        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        self.log = open(d / "redis.log", "ab")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", certs.path("server.crt"), "--tls-key-file",
             certs.path("server.key"), "--tls-ca-cert-file", certs.path("ca.crt"),
             "--tls-auth-clients", auth_clients, "--save", "", "--appendonly", "no",
             "--dir", str(d)], stdout=self.log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        self.certs = certs
        wait_until(lambda: self.client().ping(), 10, msg="TLS redis-server up")

    def client(self):
        return tls_client(self.certs, self.port, cert="client")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def tls_redis_factory(tmp_path, certs):
    started = []

    def make(auth_clients):
        r = TlsRedis(tmp_path / f"tlsredis{len(started)}", certs, auth_clients)
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


def backend_keys(certs, cert=True, **more):
    keys = {"backend_tls": "yes", "backend_tls_ca_cert_file": certs.path("ca.crt")}
    if cert:
        keys["backend_tls_cert_file"] = certs.path("client.crt")
        keys["backend_tls_key_file"] = certs.path("client.key")
    keys.update(more)
    return keys


def exercise_backend(s, tr):
    """Shared, private (MULTI, BLPOP, SUBSCRIBE) and one-shot connections."""
    c = s.client()
    assert c.set("btls:k", "v") is True
    assert tr.client().get("btls:k") == b"v"
    pipe = c.pipeline(transaction=True)
    pipe.incr("btls:n").incr("btls:n")
    assert pipe.execute() == [1, 2]
    assert c.blpop("btls:empty", timeout=0.1) is None
    big = os.urandom(4 * 1024 * 1024)
    assert c.set("btls:big", big) is True
    assert c.get("btls:big") == big
    sub = s.client().pubsub()
    sub.subscribe("btls:chan")
    wait_until(lambda: sub.get_message(timeout=0.1) is not None, 5 * SLOW, msg="subscribed")
    assert tr.client().publish("btls:chan", "m") == 1
    msg = wait_until(lambda: sub.get_message(timeout=0.1), 5 * SLOW, msg="message")
    assert msg["data"] == b"m"
    sub.close()
    # SCRIPT KILL goes on a one-shot connection.
    with pytest.raises(redis.ResponseError, match="NOTBUSY"):
        c.script_kill()
    bye(c)


def test_backend_tls_with_client_certificate(sluice_factory, tls_redis_factory, certs):
    tr = tls_redis_factory("yes")
    s = sluice_factory(tr.port, **backend_keys(certs, backend_tls_server_name="localhost"))
    exercise_backend(s, tr)
    assert s.info()["tls_backend"] == "yes"


def test_backend_tls_without_client_certificate(sluice_factory, tls_redis_factory, certs):
    tr = tls_redis_factory("no")
    s = sluice_factory(tr.port, **backend_keys(certs, cert=False))
    exercise_backend(s, tr)


def test_backend_tls_refused_without_certificate(sluice_factory, tls_redis_factory, certs):
    tr = tls_redis_factory("yes")
    s = sluice_factory(tr.port, **backend_keys(certs, cert=False))
    with pytest.raises(redis.ResponseError, match="backend unavailable"):
        s.client().set("btls:x", "1")
    assert tr.client().get("btls:x") is None


def test_backend_tls_checks_server_name_and_ca(sluice_factory, tls_redis_factory, certs):
    tr = tls_redis_factory("no")
    s = sluice_factory(tr.port, **backend_keys(certs, backend_tls_server_name="redis.example"))
    with pytest.raises(redis.ResponseError, match="hostname mismatch"):
        s.client().ping()
    s2 = sluice_factory(tr.port, backend_tls="yes",
                        backend_tls_ca_cert_file=certs.path("otherca.crt"))
    with pytest.raises(redis.ResponseError, match="certificate verify failed"):
        s2.client().ping()


def test_tls_on_both_sides(sluice_factory, tls_redis_factory, certs):
    tr = tls_redis_factory("yes")
    port = free_port()
    keys = tls_keys(certs, port, "yes")
    keys.update(backend_keys(certs))
    s = sluice_factory(tr.port, **keys)
    c = tls_client(certs, port, cert="client", socket_timeout=60 * SLOW)
    big = os.urandom(5 * 1024 * 1024)
    assert c.set("both:big", big) is True
    assert c.get("both:big") == big
    pipe = c.pipeline(transaction=False)
    for i in range(1000):
        pipe.incr("both:n")
    assert pipe.execute()[-1] == 1000
    bye(c)
    assert s.client().get("both:n") == b"1000"


def test_tls_clients_authenticate(sluice_factory, backend, certs, tmp_path):
    """Users of the users file log in over TLS like over plain TCP; the TLS
    session gives no permission of its own."""
    users = tmp_path / "users.ini"
    users.write_text("[user app]\npassword = app-secret\ncommands = +@all\nkeys = app:*\n")
    s = start_tls_sluice(sluice_factory, backend, certs, auth="yes", users=str(users))
    anon = tls_client(certs, s.tls_port, cert="client")
    with pytest.raises(redis.AuthenticationError):
        anon.get("app:x")
    bye(anon)
    app = tls_client(certs, s.tls_port, cert="client", username="app", password="app-secret")
    assert app.set("app:x", "1") is True
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.get("other:x")
    bye(app)
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(s.tls_port), "--tls",
                          "--cacert", certs.path("ca.crt"), "--cert", certs.path("client.crt"),
                          "--key", certs.path("client.key"), "--user", "app", "--pass",
                          "app-secret", "--no-auth-warning", "GET", "app:x"],
                         capture_output=True, text=True, timeout=20 * SLOW)
    assert out.stdout.strip() == "1", out


def test_tls_client_that_never_reads_is_cut_off(sluice_factory, backend, certs):
    """A TLS client pipelining large replies it never reads is bounded by
    client_output_buffer_limit like a plain one; other clients go on."""
    s = start_tls_sluice(sluice_factory, backend, certs, client_output_buffer_limit="4mb")
    backend.client().set("tls:1mb", b"x" * (1024 * 1024))
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10 * SLOW)
    raw.connect(("127.0.0.1", s.tls_port))
    ctx = ssl.create_default_context(cafile=certs.path("ca.crt"))
    flooder = ctx.wrap_socket(raw, server_hostname="localhost")
    flooder.sendall(encode_command(b"GET", b"tls:1mb") * 100)
    other = tls_client(certs, s.tls_port)
    for i in range(20):
        assert other.set(f"tls:other:{i}", i) is True
        assert other.get(f"tls:other:{i}") == str(i).encode()
    wait_until(lambda: int(s.info()["output_limit_disconnects"]) >= 1, 10 * SLOW,
               msg="the flooder cut off")
    assert other.ping() is True
    bye(other)
    flooder.close()


# --------------------------------------------------------------------------
# sluice.ini's TLS keys at a reload (README "Reload")


def _rewrite(s, drop=(), **keys):
    lines = [ln for ln in s.config_path.read_text().splitlines()
             if ln.split("=", 1)[0].strip() not in set(drop) | set(keys)]
    s.config_path.write_text("\n".join(lines + [f"{k} = {v}" for k, v in keys.items()]) + "\n")


def test_reload_applies_tls_auth_clients(sluice_factory, backend, certs):
    s = start_tls_sluice(sluice_factory, backend, certs, auth="no")
    c = tls_client(certs, s.tls_port)
    assert c.ping() is True
    _rewrite(s, tls_auth_clients="yes")
    with s.raw() as admin:
        assert admin.call(b"PROXY", b"RELOAD") == "OK"
    assert c.ping() is True                     # its session stays
    bye(c)
    assert refused(tls_client(certs, s.tls_port))   # a new one needs a certificate now
    c = tls_client(certs, s.tls_port, cert="client")
    assert c.ping() is True
    bye(c)


def test_reload_keeps_tls_listen_and_wants_its_certificates(sluice_factory, backend, certs):
    """tls_listen needs a restart: a new sluice.ini without it and without
    the certificates would leave the running TLS listener without them, so
    the reload is refused and changes nothing."""
    s = start_tls_sluice(sluice_factory, backend, certs)
    _rewrite(s, drop=("tls_listen", "tls_cert_file", "tls_key_file"), maxclients=1)
    with s.raw() as admin:
        reply = admin.call(b"PROXY", b"RELOAD")
        assert isinstance(reply, Err), reply
        assert "tls_listen needs tls_cert_file and tls_key_file" in reply, reply
        with s.raw() as other:                  # maxclients = 1 did not apply
            assert other.call(b"PING") == "PONG"
    c = tls_client(certs, s.tls_port)
    assert c.ping() is True
    bye(c)
