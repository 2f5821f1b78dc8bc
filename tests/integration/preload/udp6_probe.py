#!/usr/bin/env python3
"""udp6_test.sh's probe of AF_INET6 UDP socket semantics: run once on kernel
sockets (the kernel link's IPv6 addresses) and once under eta-run (the PPE's
IPv6 address); both runs must print the same lines.
  udp6_probe.py BIND_IP6 PEER_IP6
The peer (udp6.py probe-peer) waits on [PEER_IP6]:9110 for "go", then sends
the datagrams below and waits for "connected".
IPV6_PKTINFO is printed as facts that hold on both paths: ipi6_addr the bound
address, ipi6_ifindex the kernel interface holding it (0 where none does: the
PPE's own port)."""
import errno
import fcntl
import select
import socket
import struct
import subprocess
import sys
import termios

bind_ip, peer_ip = sys.argv[1], sys.argv[2]
PEER = (peer_ip, 9110, 0, 0)


def out(*a):
    print(*a, flush=True)


def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, type(e).__name__)


def ifindex_of(ip):
    """The kernel interface holding ip (0: none)."""
    text = subprocess.run(["ip", "-o", "-6", "addr", "show"], capture_output=True, text=True).stdout
    for line in text.splitlines():
        f = line.split()
        if f[3].split("/")[0] == ip:
            return socket.if_nametoindex(f[1].split("@")[0])
    return 0


s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind((bind_ip, 7020))
name = s.getsockname()
out("getsockname", len(name), "port", name[1], "ip ok", name[0] == bind_ip, "flow/scope", name[2], name[3])
out("getpeername unconnected", err(s.getpeername))
out("IPV6_V6ONLY once bound", err(lambda: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)),
    "reads", s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
out("recv with SO_RCVTIMEO and nothing there", err(lambda: s.recv(100)))
out("recv MSG_DONTWAIT, nothing there", err(lambda: s.recv(100, socket.MSG_DONTWAIT)))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 10, 0))
for opt in (socket.IPV6_RECVPKTINFO, socket.IPV6_RECVHOPLIMIT, socket.IPV6_RECVTCLASS):
    s.setsockopt(socket.IPPROTO_IPV6, opt, 1)
out("getsockopt IPV6_RECVPKTINFO", s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO))


def ioctl_int(req):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), req, b"\0" * 4))[0]


out("FIONREAD nothing waiting", ioctl_int(termios.FIONREAD))
want_ifindex = ifindex_of(bind_ip)
s.sendto(b"go", PEER)
p = select.poll()
p.register(s, select.POLLOUT)
out("poll OUT at once", "OUT" if dict(p.poll(0)).get(s.fileno(), 0) & select.POLLOUT else "-")
ep = select.epoll()
ep.register(s, select.EPOLLIN | select.EPOLLET)
out("epoll (edge-triggered) IN", "IN" if dict(ep.poll(10)).get(s.fileno(), 0) & select.EPOLLIN else "-")
out("FIONREAD: the next datagram's size", ioctl_int(termios.FIONREAD))
out("peek 10", s.recv(10, socket.MSG_PEEK) == bytes(range(10)))
data, anc, flags, addr = s.recvmsg(100, 256)
out("recvmsg 100 of 1000:", len(data), "MSG_TRUNC" if flags & socket.MSG_TRUNC else "no flag", "from peer",
    addr == PEER, addr[2:])
out("control messages", [(lvl, typ, len(d)) for lvl, typ, d in anc])
for lvl, typ, d in anc:
    if (lvl, typ) == (socket.IPPROTO_IPV6, socket.IPV6_PKTINFO):
        ip, ifindex = d[:16], struct.unpack("I", d[16:])[0]
        out("IPV6_PKTINFO addr", socket.inet_ntop(socket.AF_INET6, ip) == bind_ip, "ifindex", ifindex == want_ifindex)
    elif (lvl, typ) == (socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT):
        out("IPV6_HOPLIMIT", struct.unpack("i", d)[0])
    elif (lvl, typ) == (socket.IPPROTO_IPV6, socket.IPV6_TCLASS):
        out("IPV6_TCLASS", struct.unpack("i", d)[0])
buf = bytearray(3)
out("recv_into 3 with MSG_TRUNC: real length", s.recv_into(buf, 3, socket.MSG_TRUNC), bytes(buf))
d, anc, flags, a = s.recvmsg(100, socket.CMSG_LEN(8))
out("recvfrom", d, a == PEER, "small control buffer:", "MSG_CTRUNC" if flags & socket.MSG_CTRUNC else "no flag",
    [(lvl, typ, len(x)) for lvl, typ, x in anc])
out("empty datagram", s.recv(100))
out("300 bytes readable", bool(select.select([s], [], [], 10)[0]))
out("300 bytes", len(s.recv(1000)))
out("all read", err(lambda: s.recv(100, socket.MSG_DONTWAIT)))
# Sends Linux refuses on an AF_INET6 socket bound to an IPv6 address.
out("sendto an IPv4 address", err(lambda: s.sendto(b"x", ("::ffff:198.18.9.9", 9))))
own = socket.inet_pton(socket.AF_INET6, bind_ip) + struct.pack("I", 0)
out("sendmsg IPV6_PKTINFO own address", err(lambda: s.sendmsg([b"pktinfo"], [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, own)],
                                                                  0, PEER)))
out("sendmsg IPV6_PKTINFO ::", err(lambda: s.sendmsg([b"pktinfo-any"], [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO,
                                                                          bytes(20))], 0, PEER)))
foreign = socket.inet_pton(socket.AF_INET6, "2001:2:ffff::9") + struct.pack("I", 0)
out("sendmsg IPV6_PKTINFO not ours", err(lambda: s.sendmsg([b"no"], [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, foreign)],
                                                              0, PEER)))
out("sendmsg unknown IPV6 type", err(lambda: s.sendmsg([b"no"], [(socket.IPPROTO_IPV6, 200, bytes(4))], 0, PEER)))
s.connect(PEER)
out("getpeername", s.getpeername() == PEER)
s.send(b"connected")
# AF_UNSPEC: dissolves the association
unspec = struct.pack("H", socket.AF_UNSPEC) + bytes(26)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.connect(s.fileno(), unspec, len(unspec))
out("connect AF_UNSPEC", rc, "getpeername then", err(s.getpeername))
s.connect(PEER)
s.shutdown(socket.SHUT_RD)
out("recv after SHUT_RD, nothing there", s.recv(100))
s.shutdown(socket.SHUT_WR)
out("send after SHUT_WR", err(lambda: s.send(b"after SHUT_WR")))
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.bind((bind_ip, 7022))
out("shutdown unconnected", err(lambda: u.shutdown(socket.SHUT_RDWR)))
# A connected socket's datagram to a port nobody holds: ICMPv6 port
# unreachable, the socket's pending error as Linux keeps it (POLLERR,
# ECONNREFUSED once from the next receive, then SO_ERROR once).
r = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
r.bind((bind_ip, 7024))
r.connect((peer_ip, 9177, 0, 0))
out("send to a closed port", r.send(b"anyone?"))
pl = select.poll()
pl.register(r, select.POLLIN)
out("poll, port unreachable on its way", [ev for _, ev in pl.poll(10000)])
r.settimeout(10)
out("recv after port unreachable", err(lambda: r.recv(100)))
out("poll once it was reported", [ev for _, ev in pl.poll(0)])
out("send again", r.send(b"again"))
out("poll", [ev for _, ev in pl.poll(10000)])
out("SO_ERROR", r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR),
    "then", r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
r.close()
out("done")
