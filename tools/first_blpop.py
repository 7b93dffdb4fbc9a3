#!/usr/bin/python3
"""Latency of a client's first blocking command through sluice, with and
without spare private connections (backend_spare_connections). Starts its
own redis-server and two sluice instances on free loopback ports, then,
ROUNDS times each: a fresh client sends BLPOP on a list that has an element
(so Redis answers at once) and waits for the reply. Prints median and p99
in microseconds. A measurement, not a test: nothing is asserted.

    tools/first_blpop.py [SLUICE_BIN] [ROUNDS]
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"nothing listens on {port}")


def call(sock, *args):
    out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    sock.sendall(out)
    data = b""
    while not data.endswith(b"\r\n") or data.count(b"\r\n") < (5 if data.startswith(b"*") else 1):
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("connection closed")
        data += chunk
    return data


def measure(port, rounds):
    setup = socket.create_connection(("127.0.0.1", port))
    times = []
    for _ in range(rounds):
        call(setup, b"RPUSH", b"bench:first", b"x")
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        call(c, b"BLPOP", b"bench:first", b"0")
        times.append((time.perf_counter() - t0) * 1e6)
        c.close()
        time.sleep(0.005)   # let sluice refill its spares, as between real sessions
    setup.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/sluice"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    procs = []
    with tempfile.TemporaryDirectory() as d:
        rport = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                                       "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL))
        wait_port(rport)
        ports = {}
        for spares in (2, 0):
            port = free_port()
            conf = os.path.join(d, f"s{spares}.ini")
            with open(conf, "w") as f:
                f.write(f"[proxy]\nlisten = 127.0.0.1:{port}\nbackend = 127.0.0.1:{rport}\n"
                        f"backend_spare_connections = {spares}\nlog_level = warning\n")
            procs.append(subprocess.Popen([binary, "-c", conf], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            wait_port(port)
            ports[spares] = port
        time.sleep(0.2)
        try:
            for spares, port in ports.items():
                med, p99 = measure(port, rounds)
                print(f"first BLPOP, backend_spare_connections={spares}: "
                      f"median {med:.0f} us, p99 {p99:.0f} us ({rounds} sessions)")
            med, p99 = measure(rport, rounds)
            print(f"first BLPOP, redis-server directly: median {med:.0f} us, p99 {p99:.0f} us")
        finally:
            for p in procs:
                p.terminate()
                p.wait()


if __name__ == "__main__":
    main()
