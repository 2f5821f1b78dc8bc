#!/usr/bin/env python3
# tests/integration/preload/unreachable_probe.py ADDR PORT: connects to an
# address on an attached subnet that no host holds (nobody answers ARP),
# first blocking, then non-blocking with poll() and SO_ERROR, and prints what
# each answered, one line per fact (compared with the kernel's answers by
# unreachable_test.sh). Elapsed times go to stderr, for the reader only.
# Every wait is bounded (a connect that never reports is a failure, not a hang).
import errno
import select
import socket
import struct
import sys
import time

BOUND_S = 60  # far above ARP's ~3 s, below the SYN retries' ~127 s

addr, port = sys.argv[1], int(sys.argv[2])


def name(e):
    return errno.errorcode.get(e, str(e))


# 1. blocking connect: the error comes back from connect() itself (bounded by
# SO_SNDTIMEO, which ends a blocking connect with EINPROGRESS, as on Linux).
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack('ll', BOUND_S, 0))
t0 = time.monotonic()
try:
    s.connect((addr, port))
    print('blocking connected')
except OSError as e:
    print('blocking', name(e.errno))
print(f'blocking connect took {time.monotonic() - t0:.2f} s', file=sys.stderr)
s.close()

# 2. non-blocking: EINPROGRESS, then poll() reports the failure, and
# SO_ERROR says which.
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setblocking(False)
t0 = time.monotonic()
rc = s.connect_ex((addr, port))
print('nonblocking connect', name(rc))
p = select.poll()
p.register(s, select.POLLOUT)
ev = p.poll(BOUND_S * 1000)
revents = ev[0][1] if ev else 0
bits = [n for n, b in (('POLLOUT', select.POLLOUT), ('POLLERR', select.POLLERR), ('POLLHUP', select.POLLHUP))
        if revents & b]
# Compared: that poll reported the failure (POLLERR). The other bits are the
# reader's only: Linux reports the error (sk_error_report) a moment before it
# closes the socket (tcp_done), so a poller woken in between sees POLLERR
# alone, else POLLOUT POLLERR POLLHUP: the kernel's own answer varies.
print('poll', 'POLLERR' if revents & select.POLLERR else 'timeout' if not ev else 'no POLLERR')
print(f'poll bits {" ".join(bits) if bits else "none"}', file=sys.stderr)
print('SO_ERROR', name(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)))
print(f'non-blocking connect reported after {time.monotonic() - t0:.2f} s', file=sys.stderr)
s.close()
