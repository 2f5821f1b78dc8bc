#!/usr/bin/env python3
"""benchmarks/preload/churn.py: connection churn from one client, one
connection at a time: connect, send 100 bytes, read the echo, close (the
client closes first, so its side goes through TIME-WAIT). Run it under
eta-run and on the kernel link against an echo server in the lab's peer
namespace; it reports, it asserts nothing.

  churn.py HOST PORT COUNT     (COUNT 1..100000; lab addresses only)
Prints: COUNT connections, F failed, P distinct local ports, R/s"""
import socket
import sys
import time


def main():
    if len(sys.argv) != 4 or not sys.argv[3].isdigit() or not 1 <= int(sys.argv[3]) <= 100000:
        sys.exit(__doc__)
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    start = time.time()
    bad = 0
    ports = set()
    for i in range(n):
        try:
            with socket.create_connection((host, port), timeout=5) as c:
                ports.add(c.getsockname()[1])
                c.sendall(b"x" * 100)
                got = b""
                while len(got) < 100:
                    b = c.recv(100 - len(got))
                    if not b:
                        break
                    got += b
                bad += got != b"x" * 100
        except OSError as e:
            bad += 1
            if bad <= 3:
                print(f"connection {i}: {e!r}", file=sys.stderr)
    rate = n / (time.time() - start)
    print(f"{n} connections, {bad} failed, {len(ports)} distinct local ports, {rate:.0f}/s")


if __name__ == "__main__":
    main()
