"""Sockets passed between unrelated processes over a UNIX socket (pass_test.sh),
both under eta-run:

  recv UNIX_PATH    binds UNIX_PATH, prints "ready", then takes two
                    descriptors (socket.recv_fds): an accepted connection,
                    echoed until EOF, then a listening socket, on which it
                    accepts and echoes two connections; prints "done"
  send UNIX_PATH HOST PORT
                    listens on HOST:PORT, prints "listening", accepts one
                    connection and passes it to the receiver, closes its own
                    copy; then passes the listener itself and closes it
"""
import socket
import sys


def echo(c):
    with c:
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            c.sendall(b)


def recv(path):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    u.bind(path)
    print("ready", flush=True)
    for want in (b"conn", b"listener"):
        msg, fds, _, _ = socket.recv_fds(u, 64, 1)
        if msg != want or len(fds) != 1:
            sys.exit(f"FAIL got {msg!r} with {len(fds)} descriptors, wanted {want!r} with one")
        s = socket.socket(fileno=fds[0])
        if want == b"conn":
            echo(s)
            print("echoed the passed connection", flush=True)
        else:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 1:
                sys.exit("FAIL the passed listener does not listen")
            for _ in range(2):
                c, _ = s.accept()
                echo(c)
            print("served two connections on the passed listener", flush=True)
            s.close()
    print("done", flush=True)


def send(path, host, port):
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, port))
    lst.listen(8)
    print("listening", flush=True)
    u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    u.connect(path)  # Python 3.11's send_fds drops its address argument
    c, _ = lst.accept()
    socket.send_fds(u, [b"conn"], [c.fileno()])
    c.close()  # the receiver's copy keeps it open
    socket.send_fds(u, [b"listener"], [lst.fileno()])
    lst.close()
    print("passed both", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(sys.argv[2])
    else:
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]))
