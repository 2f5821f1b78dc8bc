#!/usr/bin/env python3
"""mmsg_probe's partner in the peer (mmsg_test.sh): plain kernel sockets.

  mmsg_peer.py echo PORT_A PORT_B READY_FILE   [::]:PORT_A and [::]:PORT_B (both
                     families): each datagram back to its sender, until a
                     datagram b"quit" (or 300 s); prints "echoed N"
  mmsg_peer.py sink PORT READY_FILE   [::]:PORT: counts datagrams until b"quit"
                     (or 300 s); prints "sink N"
READY_FILE is written once the sockets are bound."""
import select
import socket
import sys
import time


def bind(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("::", port))
    return s


def main():
    mode = sys.argv[1]
    ports = [int(p) for p in sys.argv[2:-1]]
    socks = [bind(p) for p in ports]
    open(sys.argv[-1], "w").close()
    end = time.monotonic() + 300
    n = 0
    while time.monotonic() < end:
        ready, _, _ = select.select(socks, [], [], 1.0)
        for s in ready:
            data, sender = s.recvfrom(65535)
            if data == b"quit":
                print("echoed" if mode == "echo" else "sink", n, flush=True)
                return
            n += 1
            if mode == "echo":
                s.sendto(data, sender)
    print("timeout", n, flush=True)
    sys.exit(1)


main()
