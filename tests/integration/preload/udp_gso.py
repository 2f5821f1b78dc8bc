#!/usr/bin/env python3
"""UDP GSO and GRO under eta-run (udp_test.sh): UDP_SEGMENT as a socket
option and as a control message splits one buffer into datagrams as Linux
does; Linux's refusals; UDP_GRO merges what waits as Linux's GRO would.

    udp_gso.py peer ADDR PORT      (the lab's kernel peer: records sizes)
    udp_gso.py app PEER PORT       (under eta-run)
    udp_gso.py gro-app ADDR PORT GO_FIFO   (under eta-run: UDP_GRO receives)
    udp_gso.py burst ADDR PORT     (the peer: the datagrams gro-app reads)

The peer prints each datagram's size as it comes, a line "sizes ..." per
burst ended by a 1-byte datagram, and "gro" once a datagram came back.

gro-app binds ADDR:PORT with UDP_GRO on, prints "ready", and once a line
comes on GO_FIFO (the test has seen the engine take the whole burst) reads
into 64 KiB buffers until it has BURST's datagrams: a line "recv BYTES GSO"
per receive (GSO: the UDP_GRO control message's segment size, 0 without
one), then "sizes ..." cut by those segment sizes, each payload checked."""
import socket
import struct
import sys

SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
mode = sys.argv[1]

if mode == 'peer':
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], int(sys.argv[3])))
    s.settimeout(60)
    print('listening', flush=True)
    sizes = []
    while True:
        d, a = s.recvfrom(65536)
        if d == b'.':
            print('sizes', ' '.join(map(str, sizes)), flush=True)
            sizes = []
            continue
        if d == b'echo':
            s.sendto(b'x' * 700, a)
            continue
        if d == b'bye':
            break
        sizes.append(len(d))
        if any(b != (i * 13) & 0xff for i, b in enumerate(d[:64])):
            print('bad payload', flush=True)
    sys.exit(0)

def pattern(n, seed):
    return bytes((i * 7 + seed) & 0xff for i in range(n))


BURST = [1000] * 20 + [300, 1200, 500]  # a shorter one ends a GRO packet; a longer one starts another

if mode == 'burst':
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i, n in enumerate(BURST):
        s.sendto(pattern(n, i), (sys.argv[2], int(sys.argv[3])))
    sys.exit(0)

if mode == 'gro-app':
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], int(sys.argv[3])))
    s.setsockopt(SOL_UDP, UDP_GRO, 1)
    print('ready', flush=True)
    with open(sys.argv[4]) as go:
        go.readline()
    s.settimeout(20)
    sizes = []
    while len(sizes) < len(BURST):
        d, anc, flags, _ = s.recvmsg(65536, 256)
        gso = [struct.unpack('=i', v[:4])[0] for lvl, t, v in anc if (lvl, t) == (SOL_UDP, UDP_GRO)]
        g = gso[0] if gso else 0
        print('recv', len(d), g, flush=True)
        seg = g or len(d)
        for off in range(0, len(d), seg):
            piece = d[off:off + seg]
            if piece != pattern(len(piece), len(sizes)):
                print('bad payload of datagram', len(sizes), flush=True)
            sizes.append(len(piece))
    print('sizes', ' '.join(map(str, sizes)), flush=True)
    sys.exit(0)

peer, port = sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((peer, port))


def buf(total, seg):
    out = bytearray()
    while len(out) < total:
        k = min(seg, total - len(out))
        out += bytes((i * 13) & 0xff for i in range(k))
    return bytes(out)


def end():
    s.send(b'.')


# the socket option: 5500 bytes in segments of 1000
s.setsockopt(SOL_UDP, UDP_SEGMENT, 1000)
print('opt', s.getsockopt(SOL_UDP, UDP_SEGMENT), flush=True)
print('sent', s.send(buf(5500, 1000)), flush=True)
end()
# a control message overrides it: 1000 bytes in segments of 300
print('sent', s.sendmsg([buf(1000, 300)], [(SOL_UDP, UDP_SEGMENT, struct.pack('=H', 300))]), flush=True)
end()
# a buffer no larger than the segment goes as one datagram
print('sent', s.send(buf(800, 1000)), flush=True)
end()
# over an iovec of several pieces: segments cross the pieces
data = buf(2500, 1000)
print('sent', s.sendmsg([data[:10], data[10:1500], data[1500:]]), flush=True)
end()
s.setsockopt(SOL_UDP, UDP_SEGMENT, 0)
# 128 segments go (current kernels; 64 on older ones); more are Linux's EINVAL; a segment larger
# than the path is EMSGSIZE under eta (never fragmented: the kernel's link
# here would fragment it)
for seg, total in ((100, 12800), (100, 12900), (2000, 4000)):
    try:
        n = s.sendmsg([buf(total, seg)], [(SOL_UDP, UDP_SEGMENT, struct.pack('=H', seg))])
        print('sent', n, flush=True)
        end()
    except OSError as e:
        print('refused', seg, total, e.errno, flush=True)
# UDP_GRO: accepted, read back; a datagram still comes whole
s.setsockopt(SOL_UDP, UDP_GRO, 1)
print('gro', s.getsockopt(SOL_UDP, UDP_GRO), flush=True)
s.send(b'echo')
s.settimeout(20)
d, anc, flags, _ = s.recvmsg(4096, 256)
print('echo', len(d), [(l, t) for l, t, _ in anc], flush=True)
s.send(b'bye')
