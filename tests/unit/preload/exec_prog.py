"""An unmodified program (python3 under libeta-preload.so) for the exec
scenarios of run_exec_tests.py; prints OK when every check held.

  self_exec  a server keeps its listener (non-blocking, a connection in its
             stash or backlog), an established connection with unread data,
             and a client across os.execv of itself; a connection whose server
             side is close-on-exec sees EOF; then it goes on serving
  bare_env   os.execve of itself with an environment of its own making (only
             PATH, as nginx's binary upgrade passes only NGINX= and TZ): the
             new image still loads the shim, keeps its listener and a
             connection with unread data, and serves; an exec handing over
             no socket leaves such an environment as given
  exec_fail  os.execv of a path that does not exist: ENOENT, nothing changed
  spawn      subprocess (vfork + exec) hands a connection to a child program
  plain      an accelerated echo (after a forged ETA_EXEC_STATE)
  client     PORT SIZE [N]: N times (default 1, one connection after the
             other) sends SIZE bytes (seeded) to 10.9.0.1:PORT, reads the echo
             until EOF, compares
  pass       socket.send_fds (SCM_RIGHTS) hands an established connection,
             then the listener, to another program (pass_child), which joins
             this process's group; this process closes both, and the child
             serves 64 connections on the listener. A process's sockets
             alternate between engines when the PPE runs several, so both
             engines' siblings of the listener must have reached the child.
"""
import errno
import fcntl
import hashlib
import os
import random
import socket
import sys
import threading

PPE = "10.9.0.1"


def check(cond, what):
    if not cond:
        print("FAIL " + what, flush=True)
        sys.exit(1)


def recv_exact(s, n):
    s.settimeout(10)
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        check(b, f"EOF after {len(out)} of {n} bytes")
        out += b
    return out


def payload(seed, n):
    return random.Random(seed).randbytes(n)


def echo_through(a, b, n, seed):
    """a sends n bytes to b in a thread; b sends them back; a checks them."""
    data = payload(seed, n)
    t = threading.Thread(target=a.sendall, args=(data,))
    t.start()
    got = recv_exact(b, n)
    t.join(10)
    check(got == data, f"{n} bytes arrived changed")
    t = threading.Thread(target=b.sendall, args=(got,))
    t.start()
    back = recv_exact(a, n)
    t.join(10)
    check(back == data, f"{n} bytes came back changed")


def self_exec():
    l = socket.socket()
    l.bind((PPE, 0))
    l.listen(8)
    port = l.getsockname()[1]
    c = socket.create_connection((PPE, port))
    s, _ = l.accept()
    x = socket.create_connection((PPE, port))
    xs, _ = l.accept()  # stays close-on-exec: gone with the old image
    c2 = socket.create_connection((PPE, port))
    c3 = socket.create_connection((PPE, port))
    a2, _ = l.accept()  # may take c3's too (kept for the next accept)
    data = payload(1, 3000)
    c.sendall(data)
    check(recv_exact(s, 100) == data[:100], "first 100 bytes before exec")
    # 40 KiB more that arrive unread before the exec (the ring holds 64 KiB).
    c.sendall(payload(2, 40000))
    l.setblocking(False)
    keep = [l, s, c, x, c2, c3, a2]
    for o in keep:
        o.set_inheritable(True)
    check(not xs.get_inheritable(), "xs is close-on-exec")
    fds = ",".join(str(o.fileno()) for o in keep)
    os.execv(sys.executable, [sys.executable, __file__, "self_exec_2", fds, str(port)])


def self_exec_2(fds, port):
    check("ETA_EXEC_STATE" not in os.environ, "ETA_EXEC_STATE left in the environment")
    l, s, c, x, c2, c3, a2 = (socket.socket(fileno=int(f)) for f in fds.split(","))
    port = int(port)
    check(l.getsockname() == (PPE, port), f"listener's name {l.getsockname()}")
    check(fcntl.fcntl(l.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK, "the listener stayed non-blocking")
    check(recv_exact(s, 2900) == payload(1, 3000)[100:], "the rest of what arrived before exec")
    check(recv_exact(s, 40000) == payload(2, 40000), "the 40 KiB that arrived before exec")
    check(s.getpeername() == c.getsockname(), "peer names")
    x.settimeout(10)
    check(x.recv(1) == b"", "a connection whose server side was close-on-exec ends (EOF)")
    echo_through(c, s, 5, 3)
    echo_through(c, s, 1 << 20, 4)  # much more than the rings hold
    c2.sendall(b"two")
    check(recv_exact(a2, 3) == b"two", "the connection accepted before exec")
    l.setblocking(True)
    l.settimeout(10)
    a3, _ = l.accept()  # c3's, from the stash or the backlog
    c3.sendall(b"three")
    check(recv_exact(a3, 5) == b"three", "a connection that waited in the listener across exec")
    c4 = socket.create_connection((PPE, port))
    a4, _ = l.accept()
    echo_through(c4, a4, 100000, 5)
    # New connections alternate between engines when the PPE runs several:
    # the listener's siblings came across the exec too.
    for i in range(8):
        k = socket.create_connection((PPE, port), timeout=10)
        ka, _ = l.accept()
        echo_through(k, ka, 1000, 20 + i)
        k.close()
        ka.close()
    for o in (s, c, x, c2, c3, a2, a3, a4, c4, l):
        o.close()
    print("OK", flush=True)


def bare_env():
    l = socket.socket()
    l.bind((PPE, 0))
    l.listen(8)
    port = l.getsockname()[1]
    c = socket.create_connection((PPE, port))
    s, _ = l.accept()
    c.sendall(payload(6, 5000))  # unread across the exec
    for o in (l, s, c):
        o.set_inheritable(True)
    fds = ",".join(str(o.fileno()) for o in (l, s, c))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    os.execve(sys.executable, [sys.executable, __file__, "bare_env_2", fds, str(port)], env)


def bare_env_2(fds, port):
    check("libeta-preload" in os.environ.get("LD_PRELOAD", ""), "the shim is preloaded in the new image")
    check("ETA_SOCKET" in os.environ, "ETA_SOCKET came along")
    check("ETA_EXEC_STATE" not in os.environ, "ETA_EXEC_STATE left in the environment")
    l, s, c = (socket.socket(fileno=int(f)) for f in fds.split(","))
    check(recv_exact(s, 5000) == payload(6, 5000), "what arrived before exec")
    echo_through(c, s, 100000, 7)
    # A new connection to the fixture's address: only the PPE has it, so
    # this works only if the new image's listener and client are accelerated.
    c2 = socket.create_connection((PPE, int(port)), timeout=10)
    l.settimeout(10)
    a2, _ = l.accept()
    echo_through(c2, a2, 3000, 8)
    # No socket to hand over (every one is close-on-exec): the environment
    # the program gives is left exactly as it is.
    import subprocess
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('LD_PRELOAD', '-'))"],
                         env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=30)
    check(out.stdout.strip() == "-", f"an exec with nothing to hand over kept its environment ({out.stdout!r})")
    for o in (c2, a2, s, c, l):
        o.close()
    print("OK", flush=True)


def exec_fail():
    l = socket.socket()
    l.bind((PPE, 0))
    l.listen(8)
    port = l.getsockname()[1]
    c = socket.create_connection((PPE, port))
    s, _ = l.accept()
    for o in (l, s, c):
        o.set_inheritable(True)
    c.sendall(b"before")
    fds_before = sorted(os.listdir("/proc/self/fd"))
    try:
        os.execv("/nonexistent/eta-exec-test", ["nothing"])
        check(False, "exec of a missing path returned")
    except OSError as e:
        check(e.errno == errno.ENOENT, f"errno {e.errno}, not ENOENT")
    check(sorted(os.listdir("/proc/self/fd")) == fds_before, "descriptors changed by the failed exec")
    check(all(o.get_inheritable() for o in (l, s, c)), "inheritable flags changed")
    check(recv_exact(s, 6) == b"before", "data after the failed exec")
    echo_through(c, s, 200000, 6)
    c5 = socket.create_connection((PPE, port))
    a5, _ = l.accept()
    echo_through(c5, a5, 1000, 7)
    print("OK", flush=True)


def spawn():
    """subprocess (vfork + execve in CPython) hands a connection to a child
    program. The sockets are made on a worker thread, so the main thread that
    spawns has no DTI context of its own: the exec in the vfork child must not
    make one (it would live in the parent's memory with the child's
    descriptors)."""
    made = {}

    def make():
        l = socket.socket()
        l.bind((PPE, 0))
        l.listen(8)
        c = socket.create_connection((PPE, l.getsockname()[1]))
        s, _ = l.accept()
        c.sendall(b"ping")
        made.update(l=l, c=c, s=s)

    t = threading.Thread(target=make)
    t.start()
    t.join(10)
    c, s = made["c"], made["s"]
    import subprocess
    p = subprocess.run([sys.executable, __file__, "spawn_child", str(s.fileno())], pass_fds=[s.fileno()],
                       timeout=30, capture_output=True, text=True)
    check(p.returncode == 0 and "OK" in p.stdout, f"child: rc={p.returncode} {p.stdout!r} {p.stderr!r}")
    check(recv_exact(c, 4) == b"pong", "the child's answer")  # the main thread waits here
    echo_through(c, s, 100000, 10)
    # inetd style: the connection as the child's stdin and stdout (dup2 in the vfork child).
    c.sendall(b"ping")
    p = subprocess.run([sys.executable, __file__, "spawn_child", "0"], stdin=s, stdout=s, stderr=subprocess.PIPE,
                       timeout=30, text=True)
    check(p.returncode == 0, f"stdio child: rc={p.returncode} {p.stderr!r}")
    check(recv_exact(c, 6) == b"pongOK", "the stdio child's answer")
    echo_through(c, s, 100000, 11)
    # The listener too: the child accepts one connection on it, then the parent
    # goes on accepting on it.
    l = made["l"]
    port = l.getsockname()[1]
    child = subprocess.Popen([sys.executable, __file__, "accept_child", str(l.fileno())], pass_fds=[l.fileno()],
                             stdout=subprocess.PIPE, text=True)
    c1 = socket.create_connection((PPE, port))
    c1.sendall(b"abc")
    check(recv_exact(c1, 3) == b"xyz", "the child served a connection on the inherited listener")
    out, _ = child.communicate(timeout=30)
    check(child.returncode == 0 and "OK" in out, f"listener child: rc={child.returncode} {out!r}")
    c2 = socket.create_connection((PPE, port))
    l.settimeout(10)
    a2, _ = l.accept()
    echo_through(c2, a2, 1000, 12)
    print("OK", flush=True)


def spawn_child(fd):
    s = socket.socket(fileno=fd)
    check(recv_exact(s, 4) == b"ping", "what arrived before the spawn")
    s.sendall(b"pong")
    if fd == 0:
        s.sendall(b"OK")  # stdout is the connection itself
    else:
        print("OK", flush=True)  # exits without closing: the parent still holds it


def accept_child(fd):
    l = socket.socket(fileno=fd)
    l.settimeout(10)
    a, _ = l.accept()
    check(recv_exact(a, 3) == b"abc", "what the first client sent")
    a.sendall(b"xyz")
    a.close()
    print("OK", flush=True)


def plain():
    check("ETA_EXEC_STATE" not in os.environ, "ETA_EXEC_STATE left in the environment")
    l = socket.socket()
    l.bind((PPE, 0))
    l.listen(8)
    c = socket.create_connection((PPE, l.getsockname()[1]))
    s, _ = l.accept()
    echo_through(c, s, 100000, 8)
    print("OK", flush=True)


def client(port, size, n=1):
    data = payload(size, size)
    for i in range(n):
        c = socket.create_connection((PPE, port), timeout=10)
        t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)))
        t.start()
        got = b""
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            got += b
        t.join(10)
        c.close()
        check(len(got) == size, f"echo {i} of {size} bytes: {len(got)} came back")
        check(hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), f"echo {i} of {size} bytes differs")
    print("OK", flush=True)


PASSED_CONNECTIONS = 64


def pass_sockets():
    import subprocess
    l = socket.socket()
    l.bind((PPE, 0))
    l.listen(PASSED_CONNECTIONS)
    port = l.getsockname()[1]
    c = socket.create_connection((PPE, port))
    s, _ = l.accept()
    c.sendall(b"before")
    mine, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, __file__, "pass_child", str(theirs.fileno())],
                             pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, text=True)
    theirs.close()
    socket.send_fds(mine, [b"C"], [s.fileno()])
    s.close()  # in flight: the PPE keeps it for the child
    check(recv_exact(c, 5) == b"after", "the child's answer on the passed connection")
    c.settimeout(10)
    check(c.recv(1) == b"", "the child's close is the last: EOF")
    socket.send_fds(mine, [b"L"], [l.fileno()])
    l.close()  # the child alone accepts from here
    mine.settimeout(20)
    check(mine.recv(1) == b"R", "the child took the listener")
    for i in range(PASSED_CONNECTIONS):
        k = socket.create_connection((PPE, port), timeout=10)
        data = payload(100 + i, 1000 + i)
        k.sendall(data)
        check(recv_exact(k, len(data)) == data, f"connection {i}: the echo differs")
        k.close()
    out, _ = child.communicate(timeout=30)
    check(child.returncode == 0 and "OK" in out, f"receiver: rc={child.returncode} {out!r}")
    print("OK", flush=True)


def pass_child(fd):
    u = socket.socket(fileno=fd)
    u.settimeout(20)
    _, fds, _, _ = socket.recv_fds(u, 16, 1)
    check(len(fds) == 1, "a connection arrived")
    conn = socket.socket(fileno=fds[0])
    check(recv_exact(conn, 6) == b"before", "bytes sent before the pass")
    conn.sendall(b"after")
    conn.close()
    _, fds, _, _ = socket.recv_fds(u, 16, 1)
    check(len(fds) == 1, "the listener arrived")
    l = socket.socket(fileno=fds[0])
    l.settimeout(20)
    u.sendall(b"R")
    for i in range(PASSED_CONNECTIONS):
        a, _ = l.accept()
        a.sendall(recv_exact(a, 1000 + i))
        a.close()
    print("OK", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "self_exec":
        self_exec()
    elif what == "self_exec_2":
        self_exec_2(sys.argv[2], sys.argv[3])
    elif what == "bare_env":
        bare_env()
    elif what == "bare_env_2":
        bare_env_2(sys.argv[2], sys.argv[3])
    elif what == "exec_fail":
        exec_fail()
    elif what == "spawn":
        spawn()
    elif what == "accept_child":
        accept_child(int(sys.argv[2]))
    elif what == "spawn_child":
        spawn_child(int(sys.argv[2]))
    elif what == "plain":
        plain()
    elif what == "client":
        client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    elif what == "pass":
        pass_sockets()
    elif what == "pass_child":
        pass_child(int(sys.argv[2]))
    else:
        sys.exit("unknown scenario " + what)
