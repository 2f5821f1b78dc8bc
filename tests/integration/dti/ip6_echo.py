#!/usr/bin/env python3
"""TEST TOOL for ip6_echo_test.sh: one TCP connection over IPv6.

  ip6_echo.py client HOST PORT BYTES SEED   sends BYTES seeded random bytes to
      [HOST]:PORT while reading the echo, then half-closes and reads to the
      end; prints "sent <sha256> got <sha256> <count> local [addr]:port"
  ip6_echo.py server HOST PORT [N]          an echo server for N connections
      (default 1), one after the other, on [HOST]:PORT (IPV6_V6ONLY, but on
      "::": dual-stack); prints "listening" once it listens, then for each
      connection "conn peer [addr]:port local [addr]:port" (as accept() and
      getsockname() give them) and echoes until the peer's end of stream

  With ETA_TEST_TCLASS and/or ETA_TEST_TOS set (integers), the client's
  socket, or the server's listener, sets IPV6_TCLASS (AF_INET6 sockets only)
  and IP_TOS before it connects or binds.
  With ETA_TEST_SOURCE set (an address), the client binds to it (port 0)
  before it connects.
"""
import hashlib
import os
import random
import socket
import sys
import threading


def marks(s):
    """The traffic class and TOS the environment asks for, before connect or bind."""
    if "ETA_TEST_TCLASS" in os.environ and s.family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, int(os.environ["ETA_TEST_TCLASS"], 0))
    if "ETA_TEST_TOS" in os.environ:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(os.environ["ETA_TEST_TOS"], 0))


def client(host, port, n, seed):
    data = random.Random(seed).randbytes(n)
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    s = socket.socket(family, kind, proto)
    marks(s)
    if "ETA_TEST_SOURCE" in os.environ:
        s.bind((os.environ["ETA_TEST_SOURCE"], 0))
    s.settimeout(60)
    s.connect(addr)
    got = bytearray()

    def reader():
        while True:
            b = s.recv(1 << 16)
            if not b:
                return
            got.extend(b)

    t = threading.Thread(target=reader)
    t.start()
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    t.join(90)
    if t.is_alive():
        sys.exit(f"the echo did not end: {len(got)} of {n} bytes back")
    local = s.getsockname()
    s.close()
    print(f"sent {hashlib.sha256(data).hexdigest()} got {hashlib.sha256(got).hexdigest()} {len(got)} "
          f"local [{local[0]}]:{local[1]}", flush=True)


def server(host, port, n):
    l = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    l.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if host == "::" else 1)
    marks(l)
    l.bind((host, port))
    l.listen(4)
    print("listening", flush=True)
    for _ in range(n):
        c, peer = l.accept()
        local = c.getsockname()
        print(f"conn peer [{peer[0]}]:{peer[1]} local [{local[0]}]:{local[1]}", flush=True)
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            c.sendall(b)
        c.close()
    l.close()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) == 5 else 1)
    else:
        sys.exit(__doc__)
