"""Sockets passed between unrelated processes over a UNIX socket (pass_test.sh),
both under eta-run:

  recv UNIX_PATH    binds UNIX_PATH, prints "ready", then takes two
                    descriptors (socket.recv_fds): an accepted connection
                    (said on UNIX_PATH.got), echoed until EOF, then a listening socket, on which it
                    accepts and echoes two connections; prints "done"
  send UNIX_PATH HOST PORT
                    listens on HOST:PORT, prints "listening", accepts one
                    connection and passes it to the receiver, closes its own
                    copy; then passes the listener itself and closes it, and
                    exits once the receiver holds the connection
                    (UNIX_PATH.got: the PPE keeps a socket in flight only
                    while its sender's group lives, and the receiver joins
                    that group with its first claim)
  recv-udp UNIX_PATH
                    binds UNIX_PATH, prints "ready", takes one descriptor (a
                    UDP socket), says so on UNIX_PATH.got, and echoes each
                    datagram to its sender until one says END; prints
                    "echoed N"
  self HOST PORT     listens on HOST:PORT, prints "listening", accepts one
                    connection, passes it to itself over a socketpair of its
                    own, closes the accepted descriptor before it receives
                    the passed one (Linux keeps the socket while it is in
                    flight), echoes on the received one until EOF; prints
                    "done"
  send-udp UNIX_PATH HOST PORT
                    binds a UDP socket to HOST:PORT, passes it to the
                    receiver, closes its own copy, and exits once the
                    receiver has it (UNIX_PATH.got; at most 30 s): the PPE
                    keeps a socket in flight only while its sender's group
                    lives (preload/README.md, "Passing sockets")
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
            # Holding it now (and in the sender's group): the sender may go.
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"got", path + ".got")
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
    got = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    got.bind(path + ".got")
    got.settimeout(30)
    c, _ = lst.accept()
    socket.send_fds(u, [b"conn"], [c.fileno()])
    c.close()  # the receiver's copy keeps it open
    socket.send_fds(u, [b"listener"], [lst.fileno()])
    lst.close()
    if got.recv(16) != b"got":
        sys.exit("FAIL the receiver did not say it has the connection")
    print("passed both", flush=True)


def recv_udp(path):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    u.bind(path)
    print("ready", flush=True)
    msg, fds, _, _ = socket.recv_fds(u, 64, 1)
    if msg != b"udp" or len(fds) != 1:
        sys.exit(f"FAIL got {msg!r} with {len(fds)} descriptors, wanted b'udp' with one")
    s = socket.socket(fileno=fds[0])
    if s.type != socket.SOCK_DGRAM:
        sys.exit(f"FAIL the passed socket is {s.type}, not a datagram socket")
    g = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    g.sendto(b"got", path + ".got")
    n = 0
    s.settimeout(60)
    while True:
        d, a = s.recvfrom(65536)
        if d == b"END":
            break
        s.sendto(d, a)
        n += 1
    print("echoed", n, flush=True)


def send_udp(path, host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, port))
    u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    u.connect(path)
    got = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    got.bind(path + ".got")
    got.settimeout(30)
    socket.send_fds(u, [b"udp"], [s.fileno()])
    s.close()  # the receiver's copy keeps it open
    if got.recv(16) != b"got":
        sys.exit("FAIL the receiver did not say it has the socket")
    print("passed", flush=True)



def to_self(host, port):
    with socket.socket() as l:
        l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        l.bind((host, port))
        l.listen(1)
        print("listening", flush=True)
        c, _ = l.accept()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        socket.send_fds(a, [b"c"], [c.fileno()])
        c.close()
        _, fds, _, _ = socket.recv_fds(b, 16, 1)
    echo(socket.socket(fileno=fds[0]))
    print("done", flush=True)

if __name__ == "__main__":
    if sys.argv[1] == "self":
        to_self(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "recv":
        recv(sys.argv[2])
    elif sys.argv[1] == "recv-udp":
        recv_udp(sys.argv[2])
    elif sys.argv[1] == "send-udp":
        send_udp(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]))
