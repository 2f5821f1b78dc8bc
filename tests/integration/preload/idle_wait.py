# Waits that must sleep, not spin: under eta-run, each step waits for a
# socket that does not become ready and reports; the test reads the shim's
# sleep counter (eta-stat) between steps. Steps run when stdin says "go".
#   idle_wait.py PEER BASEPORT NOBODY   (semantics_peer.py at PEER BASEPORT;
#   NOBODY: a lab address no host answers)
import os, select, socket, sys
peer, base, nobody = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def step(what):
    print(what, flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("no go")
step("ready %d" % os.getpid())
# A connect nobody answers: poll for POLLOUT times out.
c = socket.socket(); c.setblocking(False)
try: c.connect((nobody, 80))
except BlockingIOError: pass
p = select.poll(); p.register(c, select.POLLOUT)
step("connecting: poll answered %d" % len(p.poll(2000)))
# A connection whose peer does not read: its send ring fills.
s = socket.create_connection((peer, base + 4)); s.setblocking(False)
sent = 0
while select.select([], [s], [], 1)[1]:  # until a second passes with no room
    try:
        while True: sent += s.send(b'x' * 65536)
    except BlockingIOError: pass
p = select.poll(); p.register(s, select.POLLOUT)
step("full: sent %d" % sent)
step("full: poll answered %d" % len(p.poll(2000)))
step("full: select answered %d" % len(select.select([], [s], [], 2)[1]))
# The peer starts reading: the watch left armed by the waits above wakes this one.
socket.create_connection((peer, base + 7)).close()
print("drained: poll answered %d" % len(p.poll(60000)), flush=True)
