"""Helper of shared_local_test.sh (issue 29): the same program runs plain and
under eta-run, so that each side of a local connection can be either.

  serve ADDR PORT            echo server (a thread per connection), bound to ADDR
  stream ADDR PORT MIB       MIB MiB each way through an echo, byte-exact
                             (random bytes sent from a thread, the echo compared)
  rr ADDR PORT N             N request/response exchanges of 100 bytes, each checked
  bind ADDR PORT DIR         bind (and listen) ADDR:PORT: writes "ok PORT" (the port
                             bound) or the errno's name to DIR/bound, then holds the
                             port until DIR/done exists (at most 120 s)
  connect ADDR PORT DIR      connects to ADDR:PORT: writes "ok LOCALPORT" to
                             DIR/bound, holds the connection as `bind` does
ADDR may be IPv6 (the socket is then AF_INET6).
Exit status 0 and "ok ..." on stdout when it worked; otherwise a message.
"""
import errno
import hashlib
import os
import socket
import sys
import threading
import time


def echo(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def serve(addr, port):
    s = socket.socket(family(addr))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def stream(addr, port, mib):
    c = socket.create_connection((addr, port), timeout=120)
    sent = hashlib.sha256()
    total = mib << 20

    def writer():
        left = total
        while left:
            chunk = os.urandom(min(left, 1 << 18))
            sent.update(chunk)
            c.sendall(chunk)
            left -= len(chunk)
        c.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=writer)
    t.start()
    got = hashlib.sha256()
    n = 0
    while True:
        d = c.recv(1 << 18)
        if not d:
            break
        got.update(d)
        n += len(d)
    t.join()
    c.close()
    if n != total or got.digest() != sent.digest():
        sys.exit(f"stream to {addr}:{port}: {n} of {total} bytes came back, "
                 f"{'the same' if got.digest() == sent.digest() else 'different'} bytes")
    print(f"ok {n}")


def rr(addr, port, count):
    c = socket.create_connection((addr, port), timeout=60)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(count):
        msg = (b"%08d" % i) * 12 + b"rrrr"
        c.sendall(msg)
        got = b""
        while len(got) < len(msg):
            d = c.recv(len(msg) - len(got))
            if not d:
                sys.exit(f"rr to {addr}:{port}: closed at exchange {i}")
            got += d
        if got != msg:
            sys.exit(f"rr to {addr}:{port}: exchange {i} answered {got[:20]!r}")
    c.close()
    print(f"ok {count}")


def hold(d, text):
    with open(os.path.join(d, "bound.tmp"), "w") as f:
        f.write(text + "\n")
    os.rename(os.path.join(d, "bound.tmp"), os.path.join(d, "bound"))
    end = time.monotonic() + 120
    while not os.path.exists(os.path.join(d, "done")) and time.monotonic() < end:
        time.sleep(0.05)


def bind(addr, port, d):
    s = socket.socket(family(addr))
    try:
        s.bind((addr, port))
        s.listen(8)
    except OSError as e:
        hold(d, errno.errorcode.get(e.errno, str(e.errno)))
        return
    hold(d, f"ok {s.getsockname()[1]}")


def connect(addr, port, d):
    s = socket.create_connection((addr, port), timeout=60)
    hold(d, f"ok {s.getsockname()[1]}")


if __name__ == "__main__":
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "serve":
        serve(addr, port)
    elif mode == "stream":
        stream(addr, port, int(sys.argv[4]))
    elif mode == "rr":
        rr(addr, port, int(sys.argv[4]))
    elif mode == "bind":
        bind(addr, port, sys.argv[4])
    elif mode == "connect":
        connect(addr, port, sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode}")
