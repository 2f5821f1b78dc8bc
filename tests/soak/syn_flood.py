#!/usr/bin/env python3
"""SYN flood for tools/eta soak: bare SYNs from a raw socket, bounded in count
and rate, to a lab address only (198.18.0.0/15, RFC 2544).

    syn_flood.py --src A.B.C.D --dst A.B.C.D --port P [--count N] [--rate PER_S]
                 [--sports LO-HI]

Run it in the lab's peer namespace (root: raw socket). Source ports are drawn
from --sports so the namespace can drop its kernel's resets for them (the
kernel answers the PPE's SYN-ACKs with RST otherwise, which frees the PPE's
half-open connections and is no flood). Prints how many it sent and the rate.
"""
import argparse
import ipaddress
import random
import socket
import struct
import sys
import time

LAB = ipaddress.ip_network("198.18.0.0/15")


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def syn(src: bytes, dst: bytes, sport: int, dport: int, seq: int) -> bytes:
    # TCP header with one option: MSS 1460 (a SYN without it gets the minimum).
    opts = struct.pack("!BBH", 2, 4, 1460)
    off = (20 + len(opts)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, off << 4, 0x02, 64240, 0, 0) + opts
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    total = 20 + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, random.getrandbits(16), 0, 64, socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return ip + tcp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rate", type=int, default=5000, help="SYNs per second (at most)")
    ap.add_argument("--sports", default="1024-32767")
    a = ap.parse_args()
    for name in ("src", "dst"):
        if ipaddress.ip_address(getattr(a, name)) not in LAB:
            print(f"syn_flood: --{name} {getattr(a, name)} is not a lab address (198.18.0.0/15)", file=sys.stderr)
            return 2
    if not (1 <= a.count <= 1_000_000 and 1 <= a.rate <= 100_000):
        print("syn_flood: --count 1..1000000, --rate 1..100000", file=sys.stderr)
        return 2
    lo, hi = (int(x) for x in a.sports.split("-"))
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    src, dst = socket.inet_aton(a.src), socket.inet_aton(a.dst)
    start = time.monotonic()
    batch = max(1, a.rate // 100)  # paced in 10 ms steps
    sent = 0
    while sent < a.count:
        for _ in range(min(batch, a.count - sent)):
            s.sendto(syn(src, dst, random.randint(lo, hi), a.port, random.getrandbits(32)), (a.dst, 0))
            sent += 1
        due = start + sent / a.rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
    took = time.monotonic() - start
    print(f"sent {sent} SYNs in {took:.1f} s ({sent / took:.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
