# Peer-side services for semantics_probe.py: kernel TCP in the lab's peer.
#   semantics_peer.py ADDR BASEPORT
# BASEPORT+0 echo; +1 sends 300000 bytes in 7 pieces, then closes; +2 reads to
# EOF, answers the count and closes; +3 resets after the first byte (SO_LINGER 0); +4
# accepts, reads nothing, keeps the connection open; +5 takes an 8-byte token,
# then reads to EOF and records whether the connection ended with a reset
# ("rst") or a FIN ("fin"); +6 takes a token and answers what +5 recorded
# for it (waiting up to 10 s for that connection to end); +7 starts reading
# every connection +4 holds (then answers "ok"); +9 takes "PORT\n", connects back to the prober's
# address on that port, sends a byte, reads to the end and answers "rst" or
# "fin" (how the prober's accepted socket ended the connection); +10 takes an
# 8-byte token, sends 1000 bytes, then records as +5 does how the connection
# ended; +11 takes "PORT\n", connects back to the prober's address on that
# port, sends 1000 bytes, resets the connection (SO_LINGER 0 close) and then
# answers "done" (the prober accepts only after that: issue 35 item 9).
import os, socket, struct, sys, threading, time
addr, base = sys.argv[1], int(sys.argv[2])
ends, ended = {}, threading.Condition()
def echo(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
def pieces(c):
    data = bytes(i & 0xff for i in range(300000))
    for i in range(7):
        c.sendall(data[i * len(data) // 7:(i + 1) * len(data) // 7]); time.sleep(0.05)
    c.close()
def count(c):
    n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        n += len(b)
    c.sendall(str(n).encode()); c.close()
def reset(c):
    c.recv(1)  # after the client's first byte: its connect() has answered
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); c.close()
held = []
def hold(c): held.append(c)
def drain_all(c):
    # Answers once every connection held so far is being read, so that the
    # prober's next case (a new connection to +4) is never among them: when
    # this ran late on a busy machine it drained that one too, and the next
    # case's sender took far more than its buffer.
    while held:
        h = held.pop()
        threading.Thread(target=lambda h=h: [None for _ in iter(lambda: h.recv(65536), b'')], daemon=True).start()
    c.sendall(b'ok'); c.close()
def token(c):
    t = b''
    while len(t) < 8:
        b = c.recv(8 - len(t))
        if not b: break
        t += b
    return t
def watch_end(c):
    watch_end_after(c, token(c))
def send_then_watch(c):
    t = token(c)
    c.sendall(bytes(range(200)) * 5)
    watch_end_after(c, t)
def watch_end_after(c, t):
    try:
        while c.recv(65536): pass
        how = "fin"
    except ConnectionResetError:
        how = "rst"
    c.close()
    with ended:
        ends[t] = how
        ended.notify_all()
def report(c):
    t = token(c)
    with ended:
        ended.wait_for(lambda: t in ends, timeout=10)
        how = ends.get(t, "none")
    c.sendall(how.encode()); c.close()
def mss(c):
    # The MSS this kernel took from the prober's SYN (issue 35: TCP_MAXSEG
    # set before connect() must reach the wire), then the prober's token.
    c.sendall(b'%d\n' % c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)); c.close()
def connect_back(c):
    port = b''
    while not port.endswith(b'\n'):
        b = c.recv(16)
        if not b: return
        port += b
    d = socket.create_connection((c.getpeername()[0], int(port)), timeout=20)
    d.sendall(b'x')
    try:
        while d.recv(65536): pass
        how = "fin"
    except ConnectionResetError:
        how = "rst"
    d.close()
    c.sendall(how.encode()); c.close()
def connect_reset(c):
    port = b''
    while not port.endswith(b'\n'):
        b = c.recv(16)
        if not b: return
        port += b
    d = socket.create_connection((c.getpeername()[0], int(port)), timeout=20)
    d.sendall(bytes(range(200)) * 5)
    d.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); d.close()
    c.sendall(b'done'); c.close()
handlers = [echo, pieces, count, reset, hold, watch_end, report, drain_all, mss, connect_back, send_then_watch,
            connect_reset]
def quietly(h, c):
    try: h(c)
    except OSError: pass  # the probe resets some connections on purpose
def serve(i, h):
    s = socket.create_server((addr, base + i))
    while True:
        c, _ = s.accept()
        threading.Thread(target=quietly, args=(h, c), daemon=True).start()
for i, h in enumerate(handlers):
    threading.Thread(target=serve, args=(i, h), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
