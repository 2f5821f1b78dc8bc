#!/usr/bin/env python3
"""The lab peer's multicast sender (mcast_test.sh): N datagrams of sizes
1..1400 (a pattern each receiver digests) to GROUP:PORT out of the peer's
lab interface, then END (three times: the receivers stop at the first).

    mcast_send.py GROUP PORT N IFACE_ADDR_OR_INDEX [TTL [BIND_ADDR]]

IFACE_ADDR_OR_INDEX: IP_MULTICAST_IF's address (IPv4) or IPV6_MULTICAST_IF's
index; "-" sets none. TTL: IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS (1 when
not given). BIND_ADDR: bind there first (port 0). Run under eta-run too: a
sender through the PPE.

Prints "sent N BYTES SHA256" for the receivers to match."""
import hashlib
import socket
import struct
import sys

group, port, n, iface = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ttl = int(sys.argv[5]) if len(sys.argv) > 5 else 1
bind_addr = sys.argv[6] if len(sys.argv) > 6 else None
v6 = ':' in group
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if bind_addr:
    s.bind((bind_addr, 0))
if v6:
    if iface != '-':
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, struct.pack('=I', int(iface)))
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, ttl)
    if s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS) != ttl:
        sys.exit('IPV6_MULTICAST_HOPS does not read back %d' % ttl)
else:
    if iface != '-':
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
        if s.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4) != socket.inet_aton(iface):
            sys.exit('IP_MULTICAST_IF does not read back ' + iface)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
    if s.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL) != ttl:
        sys.exit('IP_MULTICAST_TTL does not read back %d' % ttl)
h = hashlib.sha256()
total = 0
for i in range(n):
    size = 1 + (i * 337) % 1400
    d = bytes((i * 7 + j) & 0xff for j in range(size))
    s.sendto(d, (group, port))
    h.update(d)
    total += size
for _ in range(3):
    s.sendto(b'END', (group, port))
print('sent', n, total, h.hexdigest(), flush=True)
