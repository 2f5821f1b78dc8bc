#!/usr/bin/env python3
"""A stand-in for systemd's notification socket (sd_notify(3)), for tests.

notify_listener.py ADDRESS LOG: binds a datagram socket at ADDRESS (a path,
or @name for the abstract namespace), writes "listening" to LOG, then each
datagram's lines ("READY=1", "STATUS=...", "WATCHDOG=1") to LOG as they
come. Runs until killed (the test ends it by PID).
"""
import socket
import sys


def main():
    addr, log = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
    with open(log, "a", buffering=1) as out:
        out.write("listening\n")
        while True:
            msg = s.recv(4096).decode("utf-8", "replace")
            for line in msg.splitlines():
                if line:
                    out.write(line + "\n")


if __name__ == "__main__":
    main()
