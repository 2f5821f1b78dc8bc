#!/usr/bin/env python3
"""udp_test.sh's probe of UDP socket semantics: run once on kernel sockets
(the kernel link) and once under eta-run (the PPE); both runs must print the
same lines. Python's socket module is a thin wrapper over the calls.
  udp_probe.py BIND_IP PEER_IP
The peer (udp_probe_peer in udp_peer.py) waits on PEER_IP:9100 for "go",
then sends the datagrams below and waits for "connected"."""
import errno
import select
import socket
import struct
import sys

bind_ip, peer_ip = sys.argv[1], sys.argv[2]
PEER = (peer_ip, 9100)


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
out("peek 10", s.recv(10, socket.MSG_PEEK) == bytes(range(10)))
data, anc, flags, addr = s.recvmsg(100)
out("recvmsg 100 of 1000:", len(data), "MSG_TRUNC" if flags & socket.MSG_TRUNC else "no flag", "from peer", addr == PEER)
buf = bytearray(3)
out("recv_into 3 with MSG_TRUNC: real length", s.recv_into(buf, 3, socket.MSG_TRUNC), bytes(buf))
d, a = s.recvfrom(100)
out("recvfrom", d, a == PEER)
out("empty datagram", s.recv(100))
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
try:
    u.shutdown(socket.SHUT_RDWR)
except OSError as e:
    out("shutdown unconnected", errno.errorcode[e.errno])
out("done")
