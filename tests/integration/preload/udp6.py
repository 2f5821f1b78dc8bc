#!/usr/bin/env python3
"""UDP over IPv6 for udp6_test.sh: a server and clients, plain Python sockets.

  udp6.py server PORT N          AF_INET6 on [::]:PORT (dual-stack), IPV6_RECVPKTINFO
                                 and IPV6_RECVHOPLIMIT on; prints "ready PORT", then
                                 answers N datagrams with the same bytes (sendto the
                                 sender) and prints one line per datagram:
                                 "got SENDER PORT LEN dst=ADDR ifindex=I hlim=H names=..."
                                 (each control message as it came, the flow info and
                                 scope of the sender's name); then waits for "quit"
  udp6.py client HOST PORT FAM [connect]
                                 FAM 6 or 4: a kernel client (or one under eta-run):
                                 datagrams of several sizes, each echoed byte-exact
                                 and alone (sendto, or connect and send);
                                 prints "client LOCAL_NAME ok N"
  udp6.py pair PORT N            [::]:PORT IPV6_V6ONLY beside 0.0.0.0:PORT: N datagrams
                                 echoed, "pair 6|4 SENDER LEN" for each
  udp6.py mapped ADDR PORT N     bound to ::ffff:ADDR: N datagrams echoed,
                                 "mapped SENDER FLOW SCOPE LEN" for each
  udp6.py probe-peer PORT        udp6_probe.py's partner (see there)
  udp6.py life-parent ADDR P1 P2 bound to [ADDR]:P1 and [::]:P2 (IPV6_V6ONLY), execs
                                 itself (life-child): "child NAME1 NAME2 family .. v6only ..",
                                 then echoes on both until "quit", "echoed 1|2 SENDER LEN"
  udp6.py quit HOST PORT         ends the server
  udp6.py echo HOST PORT N       a kernel echo server on HOST:PORT for N datagrams
Each wait is bounded (10 s per datagram); exit 1 names what differed."""
import errno
import os
import select
import socket
import struct
import sys


def pattern(n, seed):
    return bytes((i * 7 + seed * 13) & 0xFF for i in range(n))


def server(port, n):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
    s.bind(("::", port))
    s.settimeout(60)
    name = s.getsockname()
    print("ready", name[1], "name", name[0], flush=True)
    for _ in range(n):
        data, anc, flags, sender = s.recvmsg(65535, 1024)
        dst, ifx, hlim, other = "-", "-", "-", []
        for level, typ, val in anc:
            if level == socket.IPPROTO_IPV6 and typ == socket.IPV6_PKTINFO:
                dst = socket.inet_ntop(socket.AF_INET6, val[:16])
                ifx = struct.unpack("I", val[16:20])[0]
            elif level == socket.IPPROTO_IPV6 and typ == socket.IPV6_HOPLIMIT:
                hlim = struct.unpack("i", val)[0]
            else:
                other.append((level, typ, len(val)))
        s.sendto(data, sender)
        print("got", sender[0], sender[1], len(data), "dst=%s ifindex=%s hlim=%s flow=%d scope=%d flags=%d other=%s"
              % (dst, ifx, hlim, sender[2], sender[3], flags, other), flush=True)
    while s.recv(100) != b"quit":
        pass
    print("quit", flush=True)


def pair(port, n):
    """[::]:PORT IPV6_V6ONLY and 0.0.0.0:PORT side by side in one program."""
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s6.bind(("::", port))
    s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s4.bind(("0.0.0.0", port))
    print("ready", port, "v6only", s6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY), flush=True)
    for _ in range(n):
        ready, _w, _x = select.select([s6, s4], [], [], 60)
        if not ready:
            sys.exit("pair: nothing for 60 s")
        for s in ready:
            data, frm = s.recvfrom(65535)
            s.sendto(data, frm)
            print("pair", 6 if s is s6 else 4, frm[0], len(data), flush=True)


def mapped(addr, port, n):
    """An AF_INET6 socket bound to ::ffff:<IPv4 address> (what Java's sockets do)."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind(("::ffff:" + addr, port))
    s.settimeout(60)
    print("ready", port, "name", s.getsockname()[0], flush=True)
    for _ in range(n):
        data, frm = s.recvfrom(65535)
        s.sendto(data, frm)
        print("mapped", frm[0], frm[2], frm[3], len(data), flush=True)


def client(host, port, fam, how="sendto"):
    af = socket.AF_INET6 if fam == "6" else socket.AF_INET
    s = socket.socket(af, socket.SOCK_DGRAM)
    s.settimeout(10)
    if how == "connect":
        s.connect((host, port))
        peer = s.getpeername()
        if peer[0] != host or peer[1] != port:
            sys.exit("client: getpeername %s after connect to %s:%d" % (peer, host, port))
    sizes = [1, 2, 31, 100, 512, 1000, 1400, 1452] + ([1472] if af == socket.AF_INET else [])
    count = 0
    for rnd in range(2):
        for i, n in enumerate(sizes):
            d = pattern(n, rnd * 100 + i + (50 if af == socket.AF_INET else 0))
            if how == "connect":
                s.send(d)
            else:
                s.sendto(d, (host, port))
            got, frm = s.recvfrom(65535)
            if got != d:
                sys.exit("client: %d bytes sent, %d came back (or other bytes)" % (n, len(got)))
            if frm[0] != host or frm[1] != port:
                sys.exit("client: the answer came from %s, not %s:%d" % (frm, host, port))
            count += 1
    print("client", s.getsockname()[0], "ok", count, flush=True)


def probe_peer(port):
    """udp6_probe.py's partner: waits for "go", sends its datagrams (1000 bytes
    of 0..255, "second", "third", an empty one, 300 bytes), then expects
    "pktinfo", "pktinfo-any" and "connected" from the probe."""
    b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    b.settimeout(20)
    b.bind(("::", port))
    go, src = b.recvfrom(100)
    if go != b"go":
        sys.exit("expected go, got %r" % go)
    for d in (bytes(i & 0xFF for i in range(1000)), b"second", b"third", b"", bytes(300)):
        b.sendto(d, src)
    for want in (b"pktinfo", b"pktinfo-any", b"connected"):
        got, src2 = b.recvfrom(100)
        if got != want or src2 != src:
            sys.exit("expected %r from %s, got %r from %s" % (want, src, got, src2))


def life_parent(addr, port1, port2):
    """Bound to [ADDR]:PORT1 and [::]:PORT2 (IPV6_V6ONLY), then exec: the new
    image (life_child) holds both."""
    s1 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s1.bind((addr, port1))
    s2 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s2.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s2.bind(("::", port2))
    for s in (s1, s2):
        s.set_inheritable(True)
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "life-child", str(s1.fileno()),
                              str(s2.fileno())])


def life_child(fd1, fd2):
    """Names both sockets, then echoes what comes to either until "quit" (a
    socket whose receive fails is left: "error 1|2 ERRNO")."""
    socks = [socket.socket(fileno=fd1), socket.socket(fileno=fd2)]
    names = ["[%s]:%d" % s.getsockname()[:2] for s in socks]
    only = [s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) for s in socks]
    all_ = list(socks)
    print("child", names[0], names[1], "family", socks[0].family == socket.AF_INET6, socks[1].family == socket.AF_INET6,
          "v6only", only[0], only[1], flush=True)
    while True:
        ready, _w, _x = select.select(socks, [], [], 120)
        if not ready:
            sys.exit("life-child: nothing for 120 s")
        for s in ready:
            try:
                data, frm = s.recvfrom(65535)
            except OSError as e:  # the PPE went: a socket on its address alone fails (not the [::] one)
                print("error", all_.index(s) + 1, errno.errorcode[e.errno], flush=True)
                socks.remove(s)
                continue
            if data == b"quit":
                print("quit", flush=True)
                return
            s.sendto(data, frm)
            print("echoed", all_.index(s) + 1, frm[0], len(data), flush=True)


def quit_(host, port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.sendto(b"quit", (host, port))


def echo(host, port, n):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind((host, port))
    s.settimeout(30)
    print("listening", flush=True)
    for _ in range(n):
        data, frm = s.recvfrom(65535)
        s.sendto(data, frm)
        print("echo", frm[0], len(data), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "server":
        server(int(a[1]), int(a[2]))
    elif a[0] == "client":
        client(a[1], int(a[2]), a[3], *a[4:])
    elif a[0] == "pair":
        pair(int(a[1]), int(a[2]))
    elif a[0] == "mapped":
        mapped(a[1], int(a[2]), int(a[3]))
    elif a[0] == "probe-peer":
        probe_peer(int(a[1]))
    elif a[0] == "life-parent":
        life_parent(a[1], int(a[2]), int(a[3]))
    elif a[0] == "life-child":
        life_child(int(a[1]), int(a[2]))
    elif a[0] == "quit":
        quit_(a[1], int(a[2]))
    elif a[0] == "echo":
        echo(a[1], int(a[2]), int(a[3]))
    else:
        sys.exit("unknown role " + a[0])
