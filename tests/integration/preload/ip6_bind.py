#!/usr/bin/env python3
"""TEST TOOL for ip6_bind_test.sh: listeners as servers bind them.

  ip6_bind.py server NAME N SPEC...   listens on each SPEC, HOST,PORT,V6ONLY
      (HOST with a ':' is AF_INET6, else AF_INET; V6ONLY 0 or 1 is set before
      bind, '-' leaves the default), all in this one process; prints for each
      "listening [addr]:port v6only=X" (getsockname, getsockopt(IPV6_V6ONLY)
      read back; '-' for AF_INET) or "bind-error ENAME" (and exits 3), then
      "ready"; then accepts N connections in all, on whichever listener they
      come: for each prints "conn peer [addr]:port local [addr]:port on
      [addr]:port" and answers "NAME [addr]:port\\n" (the listener's name),
      then closes it
  ip6_bind.py client HOST PORT [BIND] prints the answer, or "error ENAME"
      (BIND: an IPv6 address the client binds first, port 0)
"""
import errno
import selectors
import socket
import sys


def name(a):
    return f"[{a[0]}]:{a[1]}"


def server(tag, n, specs):
    sel = selectors.DefaultSelector()
    for spec in specs:
        host, port, v6only = spec.split(",")
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        l = socket.socket(fam, socket.SOCK_STREAM)
        if fam == socket.AF_INET6 and v6only != "-":
            l.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
        try:
            l.bind((host, int(port)))
            l.listen(8)
        except OSError as e:
            print(f"bind-error {errno.errorcode.get(e.errno, e.errno)} {spec}", flush=True)
            sys.exit(3)
        got = l.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) if fam == socket.AF_INET6 else "-"
        print(f"listening {name(l.getsockname())} v6only={got}", flush=True)
        sel.register(l, selectors.EVENT_READ)
    print("ready", flush=True)
    done = 0
    while done < n:
        for key, _ in sel.select():
            c, peer = key.fileobj.accept()
            on = name(key.fileobj.getsockname())
            print(f"conn peer {name(peer)} local {name(c.getsockname())} on {on}", flush=True)
            c.sendall(f"{tag} {on}\n".encode())
            c.close()
            done += 1


def client(host, port, bind=None):
    try:
        s = socket.create_connection((host, port), timeout=20, source_address=(bind, 0) if bind else None)
        print(s.makefile().readline().strip(), flush=True)
    except OSError as e:
        print(f"error {errno.errorcode.get(e.errno, e.errno)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) == 5 else None)
    else:
        sys.exit(__doc__)
