#!/usr/bin/env python3
"""UDP to the host's own addresses (issues 29 and 31; udp6_test.sh runs it).

  udp_self.py serve ADDR PORT READYFILE [epoll]  echo server bound to ADDR:PORT (ADDR
        '0.0.0.0' or '::' for the wildcard; port 0: the kernel's pick); writes
        "ready PORT" to READYFILE once bound, answers each datagram with its
        bytes until one says b'quit' (poll, then recvfrom: a socket timeout;
        epoll: edge-triggered epoll, non-blocking recvfrom until EAGAIN)
  udp_self.py client ADDR PORT MODE N     N datagrams (1..1400 bytes, random)
        to ADDR:PORT, each answered byte-exact within 20 s; MODE 'connected'
        (connect, send, recv), 'unconnected' (sendto, recvfrom: the answer
        from ADDR:PORT) or 'bound' (bound to ADDR:0 first, then unconnected)
  udp_self.py refused ADDR PORT           a connected socket's datagram to a
        port nobody holds: ECONNREFUSED (ICMP port unreachable) within 20 s
  udp_self.py held PEER PEERPORT READYFILE  an unbound socket of PEER's family
        sends one datagram to PEER:PEERPORT (on a shared port the kernel holds
        its port on the wildcard), writes "ready PORT", then echoes every
        datagram until b'quit' (blocking recvfrom)
  udp_self.py taken PORT                  binding 0.0.0.0:PORT answers EADDRINUSE
  udp_self.py quit ADDR PORT              tells a server to end
  udp_self.py edge ADDR N                 edge-triggered epoll, N rounds on one
        socket bound to ADDR: a large datagram (reported, read), then a small
        one and a marker to a second socket; once the marker is there the
        small one is too, and epoll must report it (Linux reports every
        arrival to an edge-triggered member, whatever its size); 400 rounds
        wrap a 256 KiB receive ring twice
Every wait is bounded (socket timeouts); exit status 0 means success.
UDP_SELF_TRACE set: the servers and clients say on stderr what they send and
receive (udp6_test.sh shows the servers' last lines when a client fails).
"""
import errno
import os
import select
import socket
import sys


def family(addr):
    return socket.AF_INET6 if ':' in addr else socket.AF_INET


def ready(path, port):
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write('ready %d\n' % port)
    os.rename(tmp, path)


TRACE = os.environ.get('UDP_SELF_TRACE')


def tr(*a):
    if TRACE:
        print(*a, file=sys.stderr, flush=True)


def echo(s):
    while True:
        data, who = s.recvfrom(65535)
        tr('got', len(data), who)
        if data == b'quit':
            return
        s.sendto(data, who)
        tr('sent', len(data))


def serve(addr, port, readyfile, how='poll'):
    s = socket.socket(family(addr), socket.SOCK_DGRAM)
    s.bind((addr, port))
    if how == 'epoll':
        serve_epoll(s, readyfile)
        return
    # A timeout: Python polls before each receive (the shim's poll() of a
    # placeholder read for host-local senders; `held` receives blocking).
    s.settimeout(180)
    ready(readyfile, s.getsockname()[1])
    echo(s)


def serve_epoll(s, readyfile):
    """Edge-triggered epoll, non-blocking receives until EAGAIN."""
    s.setblocking(False)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | select.EPOLLET)
    ready(readyfile, s.getsockname()[1])
    while True:
        if not ep.poll(180):
            sys.exit('serve epoll: nothing for 180 s')
        while True:
            try:
                data, who = s.recvfrom(65535)
            except BlockingIOError:
                break
            tr('egot', len(data), who)
            if data == b'quit':
                return
            s.sendto(data, who)
            tr('esent', len(data))
        tr('eagain')


def client(addr, port, mode, n):
    s = socket.socket(family(addr), socket.SOCK_DGRAM)
    s.settimeout(6)
    if mode == 'bound':  # bound to the address itself first, then as unconnected
        s.bind((addr, 0))
    if mode == 'connected':
        s.connect((addr, port))
    resent = 0
    for i in range(n):
        size = 1 + (i * 173) % 1400
        data = os.urandom(size)
        # UDP may lose a datagram: one unanswered within 6 s is sent again
        # (twice at most) and counted, so a loss is reported ('resent'), not
        # taken for a path that does not work.
        for attempt in range(3):
            tr('send', i, size, attempt)
            try:
                if mode == 'connected':
                    s.send(data)
                    got = s.recv(2048)
                    who = None
                else:
                    s.sendto(data, (addr, port))
                    got, who = s.recvfrom(2048)
                break
            except TimeoutError:
                if attempt == 2:
                    raise
                resent += 1
        if got != data:
            sys.exit('datagram %d (%d bytes): answered %d bytes, not the same' % (i, size, len(got)))
        if who is not None and (socket.inet_pton(family(addr), who[0]) != socket.inet_pton(family(addr), addr)
                                or who[1] != port):
            sys.exit('datagram %d answered from %s:%d, not %s:%d' % (i, who[0], who[1], addr, port))
    print('ok %d from %s' % (n, s.getsockname()[0]) + (' resent %d' % resent if resent else ''))


def refused(addr, port):
    s = socket.socket(family(addr), socket.SOCK_DGRAM)
    s.settimeout(20)
    s.connect((addr, port))
    s.send(b'anyone?')
    try:
        s.recv(64)
    except OSError as e:
        if e.errno == errno.ECONNREFUSED:
            print('ok refused')
            return
        sys.exit('recv answered %s, not ECONNREFUSED' % errno.errorcode.get(e.errno, e))
    sys.exit('recv got an answer from a port nobody holds')


def held(peer, peerport, readyfile):
    s = socket.socket(family(peer), socket.SOCK_DGRAM)
    s.sendto(b'hello', (peer, peerport))
    ready(readyfile, s.getsockname()[1])
    echo(s)


def taken(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(('0.0.0.0', port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            print('EADDRINUSE')
            return
        raise
    sys.exit('0.0.0.0:%d was free: the kernel does not hold the port' % port)


def edge(addr, n):
    fam = family(addr)
    srv = socket.socket(fam, socket.SOCK_DGRAM)
    srv.bind((addr, 0))
    srv.setblocking(False)
    mark = socket.socket(fam, socket.SOCK_DGRAM)
    mark.bind((addr, 0))
    mark.settimeout(20)
    cli = socket.socket(fam, socket.SOCK_DGRAM)
    ep = select.epoll()
    ep.register(srv.fileno(), select.EPOLLIN | select.EPOLLET)
    to, to_mark = srv.getsockname()[:2], mark.getsockname()[:2]

    def reported(what):
        # bounded: 20 s only when the edge was lost
        if not ep.poll(20):
            sys.exit('round %d: the %s datagram was never reported (edge-triggered epoll)' % (r, what))

    for r in range(n):
        big, small = os.urandom(1000 + r * 37 % 400), os.urandom(1 + r % 90)
        cli.sendto(big, to)
        reported('large')
        if srv.recv(2048) != big:
            sys.exit('round %d: not the large datagram' % r)
        # the small one, then the marker: the engine delivers them in order
        cli.sendto(small, to)
        cli.sendto(b'mark', to_mark)
        if mark.recv(64) != b'mark':
            sys.exit('round %d: not the marker' % r)
        reported('small')
        if srv.recv(2048) != small:
            sys.exit('round %d: not the small datagram' % r)
        try:
            srv.recv(2048)
            sys.exit('round %d: a datagram nobody sent' % r)
        except BlockingIOError:
            pass
    print('ok edge %d' % n)


def quit_(addr, port):
    socket.socket(family(addr), socket.SOCK_DGRAM).sendto(b'quit', (addr, port))


def main():
    a = sys.argv[1:]
    if a[0] == 'serve':
        serve(a[1], int(a[2]), a[3], *a[4:5])
    elif a[0] == 'client':
        client(a[1], int(a[2]), a[3], int(a[4]))
    elif a[0] == 'refused':
        refused(a[1], int(a[2]))
    elif a[0] == 'held':
        held(a[1], int(a[2]), a[3])
    elif a[0] == 'taken':
        taken(int(a[1]))
    elif a[0] == 'edge':
        edge(a[1], int(a[2]))
    elif a[0] == 'quit':
        quit_(a[1], int(a[2]))
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
