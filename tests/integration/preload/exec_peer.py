"""The peer's side of exec_test.sh (kernel sockets in the lab's peer namespace).

  echo HOST PORT SIZE         send SIZE seeded bytes, shut down writing, read
                              the echo until EOF; exit 0 when byte-exact
  self_exec HOST PORT SIZE    the python server that re-executes itself
                              (exec_server.py): send SIZE bytes, wait for its
                              'A' (sent after a failed exec), read its hash line
                              (sent after the exec), then a second connection
                              echoed through the new image
"""
import hashlib
import random
import socket
import sys
import threading


def fail(msg):
    print("FAIL " + msg, flush=True)
    sys.exit(1)


def echo(host, port, size, seed):
    data = random.Random(seed).randbytes(size)
    c = socket.create_connection((host, port), timeout=30)
    t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)))
    t.start()
    got = bytearray()
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        got += b
    t.join(30)
    c.close()
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        fail(f"echo of {size} bytes: {len(got)} bytes came back, not the same")


def self_exec(host, port, size):
    data = random.Random(size).randbytes(size)
    c = socket.create_connection((host, port), timeout=30)
    t = threading.Thread(target=c.sendall, args=(data,))
    t.start()
    line = b""
    while not line.endswith(b"\n"):
        b = c.recv(1)
        if not b:
            fail(f"the server closed before answering (got {line!r})")
        line += b
    t.join(30)
    want = b"A" + hashlib.sha256(data).hexdigest().encode() + b"\n"
    if line != want:
        fail(f"answer {line!r}, wanted {want!r}")
    c.close()
    echo(host, port, 1 << 20, 9)  # a new connection, served by the new image


if __name__ == "__main__":
    what, host, port, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    (echo if what == "echo" else self_exec)(host, port, size, *([size] if what == "echo" else []))
    print("OK", flush=True)
