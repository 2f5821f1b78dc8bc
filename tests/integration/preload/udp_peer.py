#!/usr/bin/env python3
"""The kernel-side peer of udp_test.sh (run in the lab's peer namespace).

  udp_peer.py echo HOST PORT       datagrams of several sizes, each echoed
                                   byte-exact and alone (boundaries kept)
  udp_peer.py relay HOST PORT BACK a burst through socat's relay to BACK,
                                   and answers back, each datagram whole
  udp_peer.py probe-peer PORT     udp_probe.py's partner (see there)
  udp_peer.py trunc HOST PORT CAP  a datagram larger than the server's CAP-byte
                                   buffer comes back cut to CAP; the next one
                                   whole (the rest of the first is gone)
  udp_peer.py refused HOST PORT    a port nobody holds: ICMP port unreachable,
                                   which a connected socket reports as ECONNREFUSED
  udp_peer.py burst HOST PORT FIRST N  datagrams "p<FIRST>" .. "p<FIRST+N-1>", at once
                                   (udp_hybrid.py's PPE half)
Each wait is bounded (10 s per datagram); exit 1 names what differed."""
import errno
import socket
import sys


def sock(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.connect((host, port))
    return s


def pattern(n, seed):
    return bytes((i * 7 + seed * 13) & 0xFF for i in range(n))


def echo(host, port):
    s = sock(host, port)
    sizes = [1, 2, 31, 32, 33, 100, 512, 1000, 1400, 1471, 1472]
    for rnd in range(3):
        for i, n in enumerate(sizes):
            d = pattern(n, rnd * 100 + i)
            s.send(d)
            got = s.recv(65535)
            if got != d:
                print(f"size {n}: sent {len(d)} bytes, got back {len(got)} (or other bytes)")
                return 1
    print(f"echo ok: {3 * len(sizes)} datagrams")
    return 0


def relay(host, port, back_port):
    """socat relays between two UDP sockets under eta (UDP4-LISTEN on the
    PPE's address, UDP4 to us at back_port): a burst sent at once arrives
    at back_port datagram by datagram, and the answers come back the same
    way (socat's PIPE echo would merge a burst: a pipe is a byte stream)."""
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.settimeout(10)
    b.bind(("0.0.0.0", back_port))
    a = sock(host, port)
    burst = [pattern(1 + 131 * k, k) for k in range(12)]  # 1 .. 1442 bytes
    for d in burst:
        a.send(d)
    src = None
    for k, d in enumerate(burst):
        got, src = b.recvfrom(65535)
        if got != d:
            print(f"relayed datagram {k}: {len(d)} bytes sent, {len(got)} arrived")
            return 1
    for d in burst:
        b.sendto(d[::-1], src)
    for k, d in enumerate(burst):
        got = a.recv(65535)
        if got != d[::-1]:
            print(f"answer {k}: {len(d)} bytes sent back, {len(got)} arrived")
            return 1
    print(f"relay ok: {len(burst)} datagrams each way")
    return 0


def trunc(host, port, cap):
    s = sock(host, port)
    big = pattern(1000, 7)
    s.send(big)
    got = s.recv(65535)
    if got != big[:cap]:
        print(f"a 1000-byte datagram to a {cap}-byte reader came back as {len(got)} bytes")
        return 1
    s.send(b"next")
    got = s.recv(65535)
    if got != b"next":
        print(f"the datagram after the truncated one came back as {got[:40]!r}")
        return 1
    print("trunc ok")
    return 0


def refused(host, port):
    s = sock(host, port)
    s.send(b"anyone?")
    try:
        got = s.recv(100)
        print(f"a closed port answered {got!r}")
        return 1
    except ConnectionRefusedError:
        print("refused ok")
        return 0
    except socket.timeout:
        print("no ICMP port unreachable within 10 s")
        return 1


def probe_peer(port):
    """udp_probe.py's partner: waits for "go", sends its datagrams (1000 bytes
    of 0..255, "second", "third", an empty one, 300 bytes), waits for
    "connected" from the probe's connected socket."""
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.settimeout(20)
    b.bind(("0.0.0.0", port))
    go, src = b.recvfrom(100)
    if go != b"go":
        print("expected go, got", go)
        return 1
    for d in (bytes(i & 0xFF for i in range(1000)), b"second", b"third", b"", bytes(300)):
        b.sendto(d, src)
    got, src2 = b.recvfrom(100)
    if got != b"connected" or src2 != src:
        print("expected connected from", src, "got", got, src2)
        return 1
    return 0


def once(host, port):
    """One datagram, echoed (udp_exec.py's child)."""
    s = sock(host, port)
    d = pattern(777, 3)
    s.send(d)
    if s.recv(65535) != d:
        print("the exec'd child's echo differed")
        return 1
    print("once ok")
    return 0


def burst(host, port, first, n):
    s = sock(host, port)
    for i in range(first, first + n):
        s.send(b"p%d" % i)
    print(f"burst ok: {n} datagrams")
    return 0


def main():
    if sys.argv[1] == "probe-peer":
        return probe_peer(int(sys.argv[2]))
    what, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if what == "echo":
        return echo(host, port)
    if what == "once":
        return once(host, port)
    if what == "relay":
        return relay(host, port, int(sys.argv[4]))
    if what == "trunc":
        return trunc(host, port, int(sys.argv[4]))
    if what == "refused":
        return refused(host, port)
    if what == "burst":
        return burst(host, port, int(sys.argv[4]), int(sys.argv[5]))
    print("unknown mode", what)
    return 2


if __name__ == "__main__":
    sys.exit(main())
