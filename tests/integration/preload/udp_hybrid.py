#!/usr/bin/env python3
"""A UDP socket on INADDR_ANY under eta-run (a hybrid: the PPE's half and the
kernel's, preload/README.md "Which sockets are accelerated"), for udp_test.sh.

  udp_hybrid.py N    (stdin: the test's "go" lines; ETA_SOCKET: eta-run's)
  udp_hybrid.py echo [GROUP IFACE] (udp_restart_test.sh: prints "ready
                     PORT", then echoes every datagram to its sender, for
                     ever; with GROUP, a member of it on the interface whose
                     address is IFACE, so datagrams to the group come too)
  udp_hybrid.py echo-exec GROUP IFACE  the same socket, a member of GROUP
                     on IFACE and IP_MULTICAST_IF IFACE, handed through
                     execve to this tool again (echo-fd FD), which prints
                     "ready PORT mcast_if ADDR" (getsockopt(IP_MULTICAST_IF)
                     in the new image) and echoes as echo does
  udp_hybrid.py echo-pass GROUP IFACE  the same socket, passed over
                     SCM_RIGHTS to a child this tool starts (echo-recv; its
                     own process, exec'd with no sockets of its own), then
                     closed here; the child prints the same "ready" line and
                     echoes; this one waits for it (the child ends with it)

Prints "ready PORT" once bound (port 0: the kernel's pick, the PPE's half at
the same port), then for each "go" line on stdin:
  go1  the peer has sent N datagrams "p<i>" to the PPE's address and the
       engine has them: reads them all with the kernel half idle and prints
       how often the receives looked at the kernel half (a system call each:
       the shim's counters, <ETA_SOCKET>.preload/<pid>, udp_kernel_looks and
       udp_kernel_empty) as "looks L empty E";
  go2  the peer has sent N more and the engine has them: sends N datagrams
       "k<i>" to 127.0.0.1:PORT itself (the kernel half's, on loopback), reads
       all 2N and prints which half each came from in order ("order PK...").
Every datagram must come once, in its half's order (exit 1 otherwise)."""
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys

LOOKS_AT = 240  # offsetof(struct eta_preload_stats, udp_kernel_looks)
STATS_SIZE = 256  # where udp_kernel_empty ends: later counters are appended after it (preload_stats.h)


def counters():
    path = f"{os.environ['ETA_SOCKET']}.preload/{os.getpid()}"
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < STATS_SIZE:
        raise SystemExit(f"{path}: {len(raw)} bytes, expected at least {STATS_SIZE} (another layout of eta_preload_stats?)")
    return struct.unpack_from("<QQ", raw, LOOKS_AT)


def take(s, want, expect_next):
    """Reads `want` datagrams; each half's must come in its order."""
    order = []
    for _ in range(want):
        d = s.recv(2048)
        half, k = d[:1].decode(), int(d[1:])
        if half not in expect_next or k != expect_next[half]:
            raise SystemExit(f"got {d!r}, expected one of {expect_next}")
        expect_next[half] += 1
        order.append(half.upper())
    return "".join(order)


def echo_socket():
    """IP_TTL 9 set before bind: the PPE's half sends with it, on the first
    PPE and on the next."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 9)
    s.bind(("0.0.0.0", 0))
    if len(sys.argv) > 3:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     socket.inet_aton(sys.argv[2]) + socket.inet_aton(sys.argv[3]))
    return s


def echo(s=None):
    """udp_restart_test.sh's server: each datagram back to its sender, for
    ever (blocking, no timeout: it waits across the PPE going and coming)."""
    if s is None:
        s = echo_socket()
        print("ready", s.getsockname()[1], flush=True)
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(d, a)
        print("echoed", len(d), "bytes to", a[0], flush=True)


def main():
    if sys.argv[1] == "echo":
        return echo()
    if sys.argv[1] == "echo-exec":
        s = echo_socket()
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(sys.argv[3]))
        s.set_inheritable(True)
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "echo-fd", str(s.fileno())])
    if sys.argv[1] == "echo-pass":
        s = echo_socket()
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(sys.argv[3]))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "echo-recv", str(theirs.fileno())],
                                 pass_fds=[theirs.fileno()])
        theirs.close()
        socket.send_fds(mine, [b"s"], [s.fileno()])
        s.close()
        mine.recv(1)  # the child has it (or ended)
        return child.wait()
    if sys.argv[1] == "echo-recv":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: it ends with its parent
        if os.getppid() == 1:
            return 1
        link = socket.socket(fileno=int(sys.argv[2]))
        _msg, fds, _flags, _addr = socket.recv_fds(link, 1, 1)
        s = socket.socket(fileno=fds[0])
        link.send(b"k")
        mif = socket.inet_ntoa(s.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4))
        print("ready", s.getsockname()[1], "mcast_if", mif, flush=True)
        return echo(s)
    if sys.argv[1] == "echo-fd":
        s = socket.socket(fileno=int(sys.argv[2]))
        mif = socket.inet_ntoa(s.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4))
        print("ready", s.getsockname()[1], "mcast_if", mif, flush=True)
        return echo(s)
    n = int(sys.argv[1])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 0))
    s.settimeout(30)
    port = s.getsockname()[1]
    print("ready", port, flush=True)
    nxt = {"p": 0}
    for line in sys.stdin:
        if line.strip() == "go1":
            l0, e0 = counters()
            take(s, n, nxt)
            l1, e1 = counters()
            print(f"looks {l1 - l0} empty {e1 - e0}", flush=True)
        elif line.strip() == "go2":
            k = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # loopback: the kernel's
            for i in range(n):
                k.sendto(b"k%d" % i, ("127.0.0.1", port))
            nxt["k"] = 0
            print("order", take(s, 2 * n, nxt), flush=True)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
