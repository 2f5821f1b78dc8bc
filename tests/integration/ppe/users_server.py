#!/usr/bin/env python3
"""A SO_REUSEPORT server for the users test (runs under eta-run).

    users_server.py HOST PORT HOLD_FILE
        binds HOST:PORT (the PPE's address: only the PPE decides) with SO_REUSEPORT; prints "EADDRINUSE" and exits 0
        when the port is taken (after binding PORT+1, to show it reaches the PPE), else "listening", then answers each
        connection with "<pid>\\n" until HOLD_FILE is gone; prints
        "served N" at the end. Bounded: 120 s.
"""
import errno, os, socket, sys, time

host, port, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 120
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    ls.bind((host, port))
    ls.listen(64)
except OSError as e:
    if e.errno == errno.EADDRINUSE:
        # The next port is free: binding it shows this process does reach the
        # PPE (eta-run --log accel logs it), so the refusal was the PPE's.
        free = socket.socket()
        free.bind((host, port + 1))
        print("EADDRINUSE", flush=True)
        sys.exit(0)
    raise
print("listening", flush=True)
ls.settimeout(0.2)
served = 0
while os.path.exists(hold):
    if time.monotonic() > deadline:
        sys.exit("users_server: timed out")
    try:
        c, _ = ls.accept()
    except socket.timeout:
        continue
    with c:
        c.settimeout(10)
        c.sendall(f"{os.getpid()}\n".encode())
    served += 1
print(f"served {served}", flush=True)
