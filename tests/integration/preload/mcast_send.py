#!/usr/bin/env python3
"""The lab peer's multicast sender (mcast_test.sh): N datagrams of sizes
1..1400 (a pattern each receiver digests) to GROUP:PORT out of the peer's
lab interface, then END (three times: the receivers stop at the first).

    mcast_send.py GROUP PORT N IFACE_ADDR_OR_INDEX

Prints "sent N BYTES SHA256" for the receivers to match."""
import hashlib
import socket
import struct
import sys

group, port, n, iface = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
v6 = ':' in group
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, struct.pack('=I', int(iface)))
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
else:
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
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
