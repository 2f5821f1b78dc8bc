#!/usr/bin/env python3
"""Attaches to eta-ppe's control socket with a hand-made HELLO naming an
engine, and prints what came back: "WELCOME engine=E n_engines=N" or
"REFUSED status=S text". Bounded (5 s). For the multi-engine test: it checks
the control thread's routing without libdti.

    hello_probe.py SOCKET ENGINE     (ENGINE: an index, or "any")
"""
import array, os, re, socket, struct, sys

path, want = sys.argv[1], sys.argv[2]
engine = 0xFFFFFFFF if want == "any" else int(want)
# struct dti_ctl_msg (dti/abi/dti_abi.h): magic, type, abi_version, status,
# index, pid, region_size, engine, n_engines, text[88]; 128 bytes.
FMT = "<IIIiIIQII88s"
MAGIC, HELLO, WELCOME, REFUSED = 0x4C544344, 1, 2, 3
# DTI_ABI_VERSION, read from the header it is defined in (a number written
# here went stale when the ABI moved on).
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dti", "include", "dti", "dti.h")
with open(HEADER) as h:
    ABI = int(re.search(r"^#define DTI_ABI_VERSION (\d+)u?$", h.read(), re.M).group(1))
assert struct.calcsize(FMT) == 128
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(5)
s.connect(path)
s.send(struct.pack(FMT, MAGIC, HELLO, ABI, 0, 0, os.getpid(), 0, engine, 0, b"hello_probe"))
msg, anc, _, _ = s.recvmsg(128, socket.CMSG_SPACE(4 * 4))
for level, kind, data in anc:  # close the region memfd and doorbell we were given
    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
        fds = array.array("i")
        fds.frombytes(data[: len(data) - len(data) % 4])
        for fd in fds:
            os.close(fd)
if len(msg) < 128:
    sys.exit(f"hello_probe: short reply ({len(msg)} bytes)")
magic, typ, _, status, _, _, _, eng, n, text = struct.unpack(FMT, msg)
if typ == WELCOME:
    print(f"WELCOME engine={eng} n_engines={n}")
elif typ == REFUSED:
    reason = text.split(b"\x00")[0].decode()
    print(f"REFUSED status={status} {reason}")
else:
    sys.exit(f"hello_probe: unexpected message type {typ}")
