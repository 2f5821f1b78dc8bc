#!/usr/bin/env python3
"""udp_test.sh's probe of UDP socket semantics: run once on kernel sockets
(the kernel link) and once under eta-run (the PPE); both runs must print the
same lines. Python's socket module is a thin wrapper over the calls.
  udp_probe.py BIND_IP PEER_IP
The peer (udp_probe_peer in udp_peer.py) waits on PEER_IP:9100 for "go",
then sends the datagrams below and waits for "connected".
Ancillary data (IP_PKTINFO, SO_TIMESTAMPNS, IP_RECVTOS, IP_RECVTTL) and
FIONREAD/SIOCOUTQ are printed as facts that hold on both paths: ipi_addr and
ipi_spec_dst are the bound address, ipi_ifindex the kernel interface
holding it (0 where none does: the PPE's own port), the stamp between the
clock readings around the exchange."""
import errno
import fcntl
import select
import socket
import struct
import subprocess
import sys
import termios
import time

bind_ip, peer_ip = sys.argv[1], sys.argv[2]
PEER = (peer_ip, 9100)
# linux/in.h and asm-generic/socket.h (Python's module lacks some)
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = getattr(socket, "SCM_TIMESTAMPNS", SO_TIMESTAMPNS)


def out(*a):
    print(*a, flush=True)


s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((bind_ip, 7010))
out("getsockname port", s.getsockname()[1], "ip ok", s.getsockname()[0] == bind_ip)
try:
    s.getpeername()
except OSError as e:
    out("getpeername unconnected", errno.errorcode[e.errno])
# SO_RCVTIMEO: a blocking receive that times out answers EAGAIN
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
try:
    s.recv(100)
except OSError as e:
    out("recv with SO_RCVTIMEO and nothing there", errno.errorcode[e.errno])
try:
    s.recv(100, socket.MSG_DONTWAIT)
except OSError as e:
    out("recv MSG_DONTWAIT, nothing there", errno.errorcode[e.errno])
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 10, 0))
# ancillary data asked for before anything arrives (the kernel notes it then)
for level, name in ((socket.IPPROTO_IP, IP_PKTINFO), (socket.SOL_SOCKET, SO_TIMESTAMPNS),
                    (socket.IPPROTO_IP, IP_RECVTOS), (socket.IPPROTO_IP, IP_RECVTTL)):
    s.setsockopt(level, name, 1)
out("getsockopt IP_PKTINFO", s.getsockopt(socket.IPPROTO_IP, IP_PKTINFO),
    "SO_TIMESTAMPNS", s.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS))


def ioctl_int(req):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), req, b"\0" * 4))[0]


out("FIONREAD nothing waiting", ioctl_int(termios.FIONREAD), "SIOCOUTQ", ioctl_int(termios.TIOCOUTQ))


def ifindex_of(ip):
    """The kernel interface holding ip (0: none)."""
    text = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for line in text.splitlines():
        f = line.split()
        if f[3].split("/")[0] == ip:
            return socket.if_nametoindex(f[1].split("@")[0])
    return 0


want_ifindex = ifindex_of(bind_ip)
t0 = time.time_ns()
s.sendto(b"go", PEER)
p = select.poll()
p.register(s, select.POLLOUT)
ev = dict(p.poll(0)).get(s.fileno(), 0)
out("poll OUT at once", "OUT" if ev & select.POLLOUT else "-")
ep = select.epoll()
ep.register(s, select.EPOLLIN | select.EPOLLET)
ev = dict(ep.poll(10)).get(s.fileno(), 0)  # waits for the peer's first datagram
out("epoll (edge-triggered) IN", "IN" if ev & select.EPOLLIN else "-")
p.modify(s, select.POLLIN)
ev = dict(p.poll(0)).get(s.fileno(), 0)
out("poll IN", "IN" if ev & select.POLLIN else "-")
out("FIONREAD: the next datagram's size", ioctl_int(termios.FIONREAD))
out("peek 10", s.recv(10, socket.MSG_PEEK) == bytes(range(10)))
data, anc, flags, addr = s.recvmsg(100, 256)
t1 = time.time_ns()
out("recvmsg 100 of 1000:", len(data), "MSG_TRUNC" if flags & socket.MSG_TRUNC else "no flag", "from peer", addr == PEER,
    "MSG_CTRUNC" if flags & socket.MSG_CTRUNC else "no MSG_CTRUNC")
out("control messages", [(lvl, typ, len(d)) for lvl, typ, d in anc])
for lvl, typ, d in anc:
    if (lvl, typ) == (socket.SOL_SOCKET, SCM_TIMESTAMPNS):
        sec, nsec = struct.unpack("qq", d)
        ts = sec * 10**9 + nsec
        # between the clock readings around the exchange (0.5 s of slack for
        # the engine's TSC-derived clock against the system's)
        out("SO_TIMESTAMPNS within the exchange", t0 - 5 * 10**8 <= ts <= t1 + 5 * 10**8, 0 <= nsec < 10**9)
    elif (lvl, typ) == (socket.IPPROTO_IP, IP_PKTINFO):
        ifindex, spec, dst = struct.unpack("i4s4s", d)
        out("IP_PKTINFO addr", socket.inet_ntoa(dst) == bind_ip, "spec_dst", socket.inet_ntoa(spec) == bind_ip,
            "ifindex", ifindex == want_ifindex)
    elif (lvl, typ) == (socket.IPPROTO_IP, socket.IP_TTL):
        out("IP_TTL", struct.unpack("i", d)[0])
    elif (lvl, typ) == (socket.IPPROTO_IP, socket.IP_TOS):
        out("IP_TOS", d)
buf = bytearray(3)
out("recv_into 3 with MSG_TRUNC: real length", s.recv_into(buf, 3, socket.MSG_TRUNC), bytes(buf))
# a control buffer with room for the stamp and part of IP_PKTINFO: cut, MSG_CTRUNC
d, anc, flags, a = s.recvmsg(100, socket.CMSG_SPACE(16) + socket.CMSG_LEN(4))
out("recvfrom", d, a == PEER, "small control buffer:", "MSG_CTRUNC" if flags & socket.MSG_CTRUNC else "no flag",
    [(lvl, typ, len(x)) for lvl, typ, x in anc])
out("FIONREAD, an empty datagram waiting", ioctl_int(termios.FIONREAD))
out("empty datagram", s.recv(100))
out("300 bytes readable", bool(select.select([s], [], [], 10)[0]))
out("FIONREAD, 300 bytes waiting", ioctl_int(termios.FIONREAD))
out("300 bytes", len(s.recv(1000)))
try:
    s.recv(100, socket.MSG_DONTWAIT)
except OSError as e:
    out("all read", errno.errorcode[e.errno])
s.connect(PEER)
out("getpeername", s.getpeername() == PEER)
s.send(b"connected")
s.shutdown(socket.SHUT_RD)
out("recv after SHUT_RD, nothing there", s.recv(100))
s.shutdown(socket.SHUT_WR)
try:
    s.send(b"after SHUT_WR")
except OSError as e:
    out("send after SHUT_WR", errno.errorcode[e.errno])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((bind_ip, 7012))
# options a bound socket takes as the kernel does (QUIC stacks set path MTU
# discovery's mode after bind; SO_REUSEADDR after bind lets a later socket
# share the port): each set, then read back
IP_MTU_DISCOVER, IP_PMTUDISC_PROBE, IP_FREEBIND, IP_BIND_ADDRESS_NO_PORT = 10, 3, 15, 24
for name, level, opt, v in (("IP_MTU_DISCOVER", socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE),
                            ("IP_FREEBIND", socket.IPPROTO_IP, IP_FREEBIND, 1),
                            ("IP_BIND_ADDRESS_NO_PORT", socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1),
                            ("SO_REUSEADDR", socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)):
    u.setsockopt(level, opt, v)
    out("after bind", name, u.getsockopt(level, opt))
u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u2.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
u2.bind((bind_ip, 7012))
out("a second socket on the port, SO_REUSEADDR set after the first's bind:", u2.getsockname()[1])
u2.close()
try:
    u.shutdown(socket.SHUT_RDWR)
except OSError as e:
    out("shutdown unconnected", errno.errorcode[e.errno])
# A connected socket's datagram to a port nobody holds: the peer's stack
# answers ICMP port unreachable, which Linux (no IP_RECVERR) makes the
# socket's pending error: poll shows POLLERR, the next receive answers
# ECONNREFUSED, once; after another, SO_ERROR reads it, once; the socket
# keeps sending.
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.bind((bind_ip, 7014))
r.connect((peer_ip, 9177))
out("send to a closed port", r.send(b"anyone?"))
pl = select.poll()
pl.register(r, select.POLLIN)
out("poll, port unreachable on its way", [ev for _, ev in pl.poll(10000)])
r.settimeout(10)
try:
    out("recv", r.recv(100))
except OSError as e:
    out("recv after port unreachable", errno.errorcode.get(e.errno, type(e).__name__))
out("poll once it was reported", [ev for _, ev in pl.poll(0)])
out("send again", r.send(b"again"))
out("poll", [ev for _, ev in pl.poll(10000)])
out("SO_ERROR", errno.errorcode.get(r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), 0),
    "then", r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
r.close()
out("done")
