#!/usr/bin/env python3
"""udp_test.sh: a UDP socket bound to the PPE's address survives exec.
  udp_exec.py parent IP PORT   binds, then execs itself as the child with the socket inherited
  udp_exec.py child FD         names the socket, answers one datagram (echo) and exits"""
import os
import socket
import sys

if sys.argv[1] == "parent":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], int(sys.argv[3])))
    s.set_inheritable(True)
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "child", str(s.fileno())])
s = socket.socket(fileno=int(sys.argv[2]))
ip, port = s.getsockname()
print("child ready", ip, port, "type dgram", s.type == socket.SOCK_DGRAM, flush=True)
d, a = s.recvfrom(2000)
s.sendto(d, a)
print("child echoed", len(d), flush=True)
