#!/usr/bin/env python3
"""Echo server and client for the 2-engine application test (plain sockets:
the server runs under eta-run, the client in the peer or under eta-run).

    engines_apps.py server PORT CONNS MEMBERS
        MEMBERS listening sockets on PORT (SO_REUSEPORT when MEMBERS > 1);
        echoes every connection; once CONNS connections were accepted and
        closed prints "accepted A per member [..]" and exits. Bounded: 120 s.
    engines_apps.py client HOST PORT CONNS SIZE HOLD_FILE
        opens CONNS connections at once, sends SIZE random bytes on each,
        checks every echoed byte, prints "ok CONNS", holds them open while
        HOLD_FILE exists (the test reads the PPE's counters meanwhile), then
        closes them. Bounded: 120 s. Exits 1 on any mismatch.
"""
import os, selectors, socket, sys, time

deadline = time.monotonic() + 120


def check_time(what):
    if time.monotonic() > deadline:
        sys.exit(f"engines_apps: timed out while {what}")


def server(port, conns, members):
    sel = selectors.DefaultSelector()
    listeners = []
    for m in range(members):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if members > 1:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(256)
        ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ, ("listener", m))
        listeners.append(ls)
    print("listening", flush=True)
    per_member = [0] * members
    accepted = closed = 0
    while closed < conns:
        check_time(f"serving ({accepted} accepted, {closed} closed)")
        for key, _ in sel.select(timeout=1):
            kind, data = key.data
            if kind == "listener":
                try:
                    c, _ = key.fileobj.accept()
                except BlockingIOError:
                    continue
                c.settimeout(30)  # sendall below waits for room, bounded
                per_member[data] += 1
                accepted += 1
                sel.register(c, selectors.EVENT_READ, ("conn", None))
                continue
            c = key.fileobj
            chunk = c.recv(65536)
            if not chunk:
                sel.unregister(c)
                c.close()
                closed += 1
                continue
            c.sendall(chunk)
    print(f"accepted {accepted} per member {per_member}", flush=True)


def client(host, port, conns, size, hold, first_port=0):
    socks = []
    for i in range(conns):
        # first_port: each connection from its own bound source port
        src = ("", first_port + i) if first_port else None
        s = socket.create_connection((host, port), timeout=30, source_address=src)
        socks.append(s)
    for s in socks:
        data = os.urandom(size)
        s.sendall(data)
        got = bytearray()
        while len(got) < size:
            check_time("reading the echo")
            chunk = s.recv(size - len(got))
            if not chunk:
                sys.exit("engines_apps: the server closed early")
            got += chunk
        if bytes(got) != data:
            sys.exit("engines_apps: the echo differs from what was sent")
    print(f"ok {conns}", flush=True)
    while os.path.exists(hold):
        check_time("holding the connections")
        time.sleep(0.05)
    for s in socks:
        s.close()


if sys.argv[1] == "server":
    server(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
           int(sys.argv[7]) if len(sys.argv) > 7 else 0)
