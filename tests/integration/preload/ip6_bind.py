#!/usr/bin/env python3
"""TEST TOOL for ip6_bind_test.sh: listeners as servers bind them.

  ip6_bind.py server NAME N SPEC...   listens on each SPEC, HOST,PORT,V6ONLY
      (HOST with a ':' is AF_INET6, else AF_INET; V6ONLY 0 or 1 is set before
      bind, '-' leaves the default), all in this one process; prints for each
      "listening [addr]:port v6only=X" (getsockname, getsockopt(IPV6_V6ONLY)
      read back; '-' for AF_INET) or "bind-error ENAME" (and exits 3), and
      for an AF_INET6 one "fixed [addr]:port ENAME" (setsockopt(IPV6_V6ONLY)
      to the other value once listening: Linux's EINVAL, or "set"), then
      "ready"; then accepts N connections in all, on whichever listener they
      come: for each prints "conn peer [addr]:port local [addr]:port on
      [addr]:port" (and "accepted-v6only X" for AF_INET6: getsockopt on the
      accepted socket) and answers "NAME [addr]:port\\n" (the listener's
      name), then closes it
  ip6_bind.py server-exec NAME N SPEC...  the same, but the listeners go
      through execve (this tool again, inheriting them) before "ready"
  ip6_bind.py server-pass NAME N SPEC...  the same, but the listeners go to
      a child over SCM_RIGHTS (an exec'd process started before they are
      sent), which serves them; this one closes its copies and waits for it
  ip6_bind.py client HOST PORT [BIND] prints the answer, or "error ENAME"
      (BIND: an IPv6 address the client binds first, port 0)
"""
import errno
import os
import selectors
import socket
import subprocess
import sys


def name(a):
    return f"[{a[0]}]:{a[1]}"


def listen_all(specs):
    socks = []
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
        socks.append(l)
    return socks


def serve(tag, n, socks):
    sel = selectors.DefaultSelector()
    for l in socks:
        if l.family == socket.AF_INET6:
            was = l.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
            try:
                l.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 - was)
                print(f"fixed {name(l.getsockname())} set", flush=True)
            except OSError as e:
                print(f"fixed {name(l.getsockname())} {errno.errorcode.get(e.errno, e.errno)}", flush=True)
        sel.register(l, selectors.EVENT_READ)
    print("ready", flush=True)
    done = 0
    while done < n:
        for key, _ in sel.select():
            c, peer = key.fileobj.accept()
            on = name(key.fileobj.getsockname())
            print(f"conn peer {name(peer)} local {name(c.getsockname())} on {on}", flush=True)
            if c.family == socket.AF_INET6:
                print(f"accepted-v6only {c.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)}", flush=True)
            c.sendall(f"{tag} {on}\n".encode())
            c.close()
            done += 1


def server_exec(tag, n, specs):
    socks = listen_all(specs)
    for l in socks:
        l.set_inheritable(True)
    fds = [str(l.fileno()) for l in socks]
    os.execv(sys.executable, [sys.executable, __file__, "adopted", tag, str(n)] + fds)


def server_pass(tag, n, specs):
    socks = listen_all(specs)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = subprocess.Popen([sys.executable, __file__, "receiver", tag, str(n), str(b.fileno()), str(len(socks))],
                             pass_fds=[b.fileno()])
    b.close()
    socket.send_fds(a, [b"L"], [l.fileno() for l in socks])
    if a.recv(1) != b"K":
        sys.exit("the receiver did not take the listeners")
    for l in socks:
        l.close()
    sys.exit(child.wait())


def receiver(tag, n, fd, count):
    a = socket.socket(fileno=fd)
    _, fds, _, _ = socket.recv_fds(a, 1, count)
    socks = [socket.socket(fileno=f) for f in fds]
    a.sendall(b"K")
    serve(tag, n, socks)


def client(host, port, bind=None):
    try:
        s = socket.create_connection((host, port), timeout=20, source_address=(bind, 0) if bind else None)
        print(s.makefile().readline().strip(), flush=True)
    except OSError as e:
        print(f"error {errno.errorcode.get(e.errno, e.errno)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "server":
        serve(sys.argv[2], int(sys.argv[3]), listen_all(sys.argv[4:]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "server-exec":
        server_exec(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "server-pass":
        server_pass(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "adopted":
        serve(sys.argv[2], int(sys.argv[3]), [socket.socket(fileno=int(f)) for f in sys.argv[4:]])
    elif len(sys.argv) == 6 and sys.argv[1] == "receiver":
        receiver(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) == 5 else None)
    else:
        sys.exit(__doc__)
