"""The peer's side of pass_test.sh (kernel sockets in the lab's namespace).

  echo HOST PORT CONNECTIONS SIZE PARALLEL
      CONNECTIONS connections, PARALLEL at a time, each sending SIZE seeded
      bytes (its own seed), shutting down writing and reading the echo until
      EOF; exit 0 when every echo is byte-exact
"""
import hashlib
import random
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor


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
        return f"connection {seed}: {len(got)} of {size} bytes came back, not the same"
    return None


if __name__ == "__main__":
    host, port, n, size, par = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    with ThreadPoolExecutor(par) as ex:
        errors = [e for e in ex.map(lambda i: echo(host, port, size, i), range(n)) if e]
    for e in errors[:5]:
        print("FAIL " + e, flush=True)
    sys.exit(1 if errors else 0)
