#!/usr/bin/env python3
"""TEST TOOL for vnet6_test.sh: a one-way TCP stream over IPv6 (the receiver
sends nothing back but its ACKs, as a bulk download's client does).

  stream6.py sink HOST PORT                 listens on [HOST]:PORT, prints
      "listening", takes one connection, reads to its end and prints
      "got <sha256> <count>", then closes
  stream6.py source HOST PORT BYTES SEED    connects to [HOST]:PORT, sends BYTES
      seeded random bytes, half-closes, waits for the peer's close and prints
      "sent <sha256> <count>"
"""
import hashlib
import random
import socket
import sys


def sink(host, port):
    ls = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    print("listening", flush=True)
    c, _ = ls.accept()
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.close()
    ls.close()
    print(f"got {h.hexdigest()} {n}", flush=True)


def source(host, port, count, seed):
    data = random.Random(seed).randbytes(count)
    s = socket.create_connection((host, port), timeout=60)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    while s.recv(1 << 16):
        pass
    s.close()
    print(f"sent {hashlib.sha256(data).hexdigest()} {count}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink(sys.argv[2], int(sys.argv[3]))
    else:
        source(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
