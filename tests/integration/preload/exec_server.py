"""A server that re-executes itself (exec_test.sh, under eta-run): it listens
on PORT (INADDR_ANY), accepts one connection, reads 10 bytes, tries an exec
that fails (the connection must still work: it sends 'A'), then execs itself
keeping the listener and the connection with unread bytes. The new image
reads the rest, answers the SHA-256 of everything, and echoes one more
connection accepted on the inherited listener.
    exec_server.py PORT SIZE"""
import hashlib
import os
import socket
import sys


def first(port, size):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(8)
    print("listening", flush=True)
    s, _ = l.accept()
    head = b""
    while len(head) < 10:
        head += s.recv(10 - len(head))
    try:
        os.execv("/nonexistent/eta-exec-test", ["nothing"])
    except FileNotFoundError:
        pass
    s.sendall(b"A")
    l.set_inheritable(True)
    s.set_inheritable(True)
    os.execv(sys.executable, [sys.executable, __file__, "second", str(l.fileno()), str(s.fileno()),
                              head.hex(), str(size)])


def second(lfd, sfd, head, size):
    if "ETA_EXEC_STATE" in os.environ:
        sys.exit("ETA_EXEC_STATE was left in the environment")
    l = socket.socket(fileno=lfd)
    s = socket.socket(fileno=sfd)
    data = bytearray(bytes.fromhex(head))
    while len(data) < size:
        b = s.recv(1 << 16)
        if not b:
            sys.exit(f"EOF after {len(data)} of {size} bytes")
        data += b
    s.sendall(hashlib.sha256(data).hexdigest().encode() + b"\n")
    s.close()
    print("exec'd image served the old connection", flush=True)
    c, _ = l.accept()
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        c.sendall(b)
    c.close()
    print("exec'd image served a new connection", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "second":
        second(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        first(int(sys.argv[1]), int(sys.argv[2]))
