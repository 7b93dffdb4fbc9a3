#!/usr/bin/python3
"""slowreader.py - the fairness soak of the hardened core, for make bench.

One client pipelines GETs of a large value and never reads its socket;
another client keeps sending GET of a small key. Prints the bystander's
latency (p50, p99, max), the peak of Redis's output buffer for any
connection (CLIENT LIST omem, polled), and the peak memory of sluice.

    slowreader.py SLUICE_PORT REDIS_PORT SLUICE_PID [SECONDS] [N_GETS] [VALUE_BYTES]
"""
import socket
import sys
import threading
import time

import redis


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def pump(port, n_gets, stop):
    """Send N_GETS pipelined GET big, never reading a reply."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(0.2)
    chunk = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 1000
    sent = 0
    while sent < n_gets and not stop.is_set():
        try:
            s.sendall(chunk)
            sent += 1000
        except socket.timeout:
            continue   # sluice stopped reading us: that is the point
    stop.wait()
    s.close()


def main():
    sport, rport, spid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 5
    n_gets = int(sys.argv[5]) if len(sys.argv) > 5 else 20000
    size = int(sys.argv[6]) if len(sys.argv) > 6 else 100000
    direct = redis.Redis(port=rport)
    bystander = redis.Redis(port=sport, socket_timeout=30)
    bystander.set("big", b"x" * size)
    bystander.set("small", b"s")
    hwm_before = vm_hwm_kb(spid)
    stop = threading.Event()
    t = threading.Thread(target=pump, args=(sport, n_gets, stop))
    t.start()
    lat, omem = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        bystander.get("small")
        lat.append(time.monotonic() - t0)
        omem = max([omem] + [int(c.get("omem", 0)) for c in direct.client_list()])
        time.sleep(0.01)
    stop.set()
    t.join()
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
    print(f"bystander GET ms: p50 {p(0.5):.2f}  p99 {p(0.99):.2f}  max {lat[-1] * 1000:.2f}"
          f"  ({len(lat)} GETs)")
    print(f"Redis output buffer peak (omem): {omem / 1048576:.1f} MB;"
          f" sluice peak RSS growth: {(vm_hwm_kb(spid) - hwm_before) / 1024:.1f} MB")


if __name__ == "__main__":
    main()
