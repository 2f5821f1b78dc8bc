#!/usr/bin/env python3
"""Opens N TCP connections to an eta-perf echo server, holds them all open,
exchanges a message on every one of them (twice), waits for a go-ahead file
to disappear, and closes them. Bounded in time; exits non-zero on any error.

    many_conns.py HOST PORT N HOLD_FILE
"""
import os, resource, selectors, socket, struct, sys, time

host, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# One descriptor per connection: raise the soft limit as far as allowed.
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64
if hard != resource.RLIM_INFINITY and hard < want:
    sys.exit(f"many_conns: {n} connections need {want} open files; the hard limit is {hard}")
resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
SIZE = 100
deadline = time.monotonic() + 240
hello = struct.pack("<IB3xIIQQ", 0x46524550, 2, SIZE, 0, 0, 0)  # echo mode, SIZE-byte messages

def check_time(what):
    if time.monotonic() > deadline:
        sys.exit(f"many_conns: timed out while {what}")

socks = []
sel = selectors.DefaultSelector()
# Connect in waves so the listener's SYN queue never overflows.
while len(socks) < n:
    wave = []
    for _ in range(min(256, n - len(socks))):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((host, port))
        sel.register(s, selectors.EVENT_WRITE)
        wave.append(s)
    pending = set(wave)
    while pending:
        check_time(f"connecting ({len(socks)} up)")
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                sys.exit(f"many_conns: connect failed after {len(socks)}: {os.strerror(err)}")
            sel.unregister(s)
            pending.discard(s)
            s.setblocking(True)
            s.settimeout(30)
            s.sendall(hello)
            socks.append(s)
print(f"{len(socks)} connections open", flush=True)

def exchange(round_no):
    for i, s in enumerate(socks):
        s.sendall(struct.pack("<I", i) + bytes([round_no]) * (SIZE - 4))
    for i, s in enumerate(socks):
        want = struct.pack("<I", i) + bytes([round_no]) * (SIZE - 4)
        got = b""
        while len(got) < SIZE:
            check_time("exchanging")
            chunk = s.recv(SIZE - len(got))
            if not chunk:
                sys.exit(f"many_conns: connection {i} closed in round {round_no}")
            got += chunk
        if got != want:
            sys.exit(f"many_conns: connection {i} echoed wrong bytes in round {round_no}")

exchange(1)
print("round 1 exchanged on every connection", flush=True)
while os.path.exists(hold):
    check_time("holding")
    time.sleep(0.1)
exchange(2)
print("round 2 exchanged on every connection", flush=True)
for s in socks:
    s.close()
print("closed", flush=True)
