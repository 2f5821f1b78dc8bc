#!/usr/bin/env python3
"""A multicast receiver (mcast_test.sh), run under eta-run: one socket bound
and joined as `how` says, reading datagrams until the sender's END.

    mcast_recv.py HOW GROUP PORT [IFACE_ADDR_OR_SOURCE]

HOW (the ways real receivers join):
  any4     bind 0.0.0.0:PORT, IP_ADD_MEMBERSHIP (ip_mreq) naming IFACE_ADDR
  group4   bind GROUP:PORT, ip_mreqn with no interface (index 0, INADDR_ANY)
  mcast4   bind 0.0.0.0:PORT, MCAST_JOIN_GROUP (RFC 3678), interface 0
  ssm4     bind 0.0.0.0:PORT, IP_ADD_SOURCE_MEMBERSHIP from SOURCE via IFACE 0.0.0.0
  all4     bind 0.0.0.0:PORT, no membership: Linux's IP_MULTICAST_ALL (on by
           default) gives it the groups other sockets of the host joined
  any6     bind [::]:PORT, IPV6_JOIN_GROUP, interface IFACE_INDEX (0 when not given)
  group6   bind [GROUP]:PORT, MCAST_JOIN_GROUP at SOL_IPV6, interface 0

Prints "ready" once joined, then at END "ttl T..." (the TTLs or hop limits
the datagrams came with, IP_RECVTTL / IPV6_RECVHOPLIMIT, each once, sorted)
and "got N BYTES SHA256 SENDER", where N counts the datagrams before END (a
duplicate or a loss changes it) and the digest covers them in order."""
import hashlib
import socket
import struct
import sys

how, group, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
extra = sys.argv[4] if len(sys.argv) > 4 else None
v6 = how.endswith('6')
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
MCAST_JOIN_GROUP = 42
IP_ADD_SOURCE_MEMBERSHIP = 39  # <linux/in.h> (not in Python 3.11's socket module)
IP_RECVTTL = 12


def group_req(family, addr, ifindex=0):
    # struct group_req: uint32 interface, padding to 8, sockaddr_storage (128)
    if family == socket.AF_INET:
        sa = struct.pack('=H', socket.AF_INET) + b'\0\0' + socket.inet_aton(addr)
    else:
        sa = struct.pack('=H', socket.AF_INET6) + b'\0\0' + b'\0' * 4 + socket.inet_pton(socket.AF_INET6, addr)
    return struct.pack('=I4x', ifindex) + sa.ljust(128, b'\0')


if how == 'any4':
    s.bind(('0.0.0.0', port))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(extra))
elif how == 'group4':
    s.bind((group, port))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(group) + socket.inet_aton('0.0.0.0') + struct.pack('=i', 0))
elif how == 'mcast4':
    s.bind(('0.0.0.0', port))
    s.setsockopt(socket.IPPROTO_IP, MCAST_JOIN_GROUP, group_req(socket.AF_INET, group))
elif how == 'ssm4':
    s.bind(('0.0.0.0', port))
    # struct ip_mreq_source: multiaddr, interface, sourceaddr
    s.setsockopt(socket.IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP,
                 socket.inet_aton(group) + socket.inet_aton('0.0.0.0') + socket.inet_aton(extra))
elif how == 'all4':
    s.bind(('0.0.0.0', port))
    IP_MULTICAST_ALL = 49
    print('mcast_all', s.getsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL), flush=True)
elif how == 'any6':
    s.bind(('::', port))
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                 socket.inet_pton(socket.AF_INET6, group) + struct.pack('=I', int(extra or 0)))
elif how == 'group6':
    s.bind((group, port))
    s.setsockopt(socket.IPPROTO_IPV6, MCAST_JOIN_GROUP, group_req(socket.AF_INET6, group))
else:
    sys.exit('unknown HOW ' + how)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
else:
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
print('ready', flush=True)
s.settimeout(60)
h = hashlib.sha256()
n = total = 0
sender = None
ttls = set()
while True:
    d, anc, _flags, a = s.recvmsg(65536, 64)
    if d == b'END':
        break
    n += 1
    total += len(d)
    h.update(d)
    sender = a[0]
    for level, kind, data in anc:
        if (level, kind) in ((socket.IPPROTO_IP, 2), (socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT)):  # IP_TTL
            ttls.add(struct.unpack('=i', data[:4])[0])
print('ttl', *sorted(ttls), flush=True)
print('got', n, total, h.hexdigest(), sender, flush=True)
