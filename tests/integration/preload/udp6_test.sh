#!/usr/bin/env bash
# UDP over IPv6 through the engine for an unmodified program: Python's
# AF_INET6 datagram sockets under eta-run --require (nothing may fall back).
#   udp6_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# - a server on [::] (dual-stack: the shim's hybrid, its PPE half bound [::]
#   in the engine) answers a kernel IPv6 client in the peer (to the port's
#   address6, which only the engine holds on this lab) and a kernel IPv4
#   client (to the PPE's IPv4 address), byte-exact, each datagram alone;
#   recvmsg names the senders as an AF_INET6 socket does (the IPv6 peer as
#   it is, the IPv4 one ::ffff:a.b.c.d, flow info and scope 0) with the
#   control messages it asked for: IPV6_PKTINFO's destination (the PPE's IPv6
#   address, or ::ffff:<PPE IPv4>; ifindex 0 where no kernel interface holds
#   it), IPV6_HOPLIMIT the peer's 64 for IPv6 datagrams (none for IPv4 ones,
#   as Linux); eta-stat lists its socket accelerated, none fallen back;
# - udp6_probe.py answers the same on the kernel link's IPv6 addresses and
#   bound to the PPE's: names, SO_RCVTIMEO/MSG_DONTWAIT, poll and edge-
#   triggered epoll, FIONREAD, MSG_PEEK, MSG_TRUNC both ways, IPV6_PKTINFO/
#   IPV6_HOPLIMIT/IPV6_TCLASS and MSG_CTRUNC, an empty datagram, sends with
#   IPV6_PKTINFO (its own address, ::, not ours) and an unknown type, an IPv4
#   destination, connect, AF_UNSPEC, shutdown, IPV6_V6ONLY once bound, a
#   connected socket's ICMPv6 port unreachable (POLLERR, ECONNREFUSED once, SO_ERROR);
# - a client under eta-run (unbound, sendto the peer's IPv6 address, on-link
#   of the port's prefix) is the PPE's (the shim's log) and gets a kernel echo
#   server's answers byte-exact; connected (connect, send), its name is the
#   PPE's IPv6 address;
# - a bind to [PPE IPv6]:0: the engine's port, in getsockname and the shim's line;
# - [::] IPV6_V6ONLY beside 0.0.0.0 on one port in one program, each family
#   reaching its own socket; a bind to ::ffff:<PPE IPv4> the PPE's over IPv4,
#   senders v4-mapped;
# - IPV6_TCLASS under eta-run reaches the wire, the socket's option and one
#   datagram's control message (the peer's IPV6_RECVTCLASS reads them), and
#   IPV6_UNICAST_HOPS (IPV6_RECVHOPLIMIT);
# - exec, then kill -9 of eta-ppe and a new one: sockets on [PPE IPv6]:P1 and
#   [::]:P2 (IPV6_V6ONLY) are the new image's with their names and option,
#   answer through the PPE; the [::] one's PPE half comes back on the new PPE
#   IPv6 only (relisten.c) and answers again;
# - UDP to the host's own addresses (issues 29 and 31), IPv4 and IPv6
#   (udp_self.py): eta-run clients, connected and not, to eta-run servers on
#   the PPE's address and on the wildcard, byte-exact, through the engine's
#   local loop (eta-stat's local_frames); a connected one to a port nobody
#   holds gets ECONNREFUSED; the peer still reaches both servers through MARS;
#   edge-triggered epoll reports a small datagram that came after a large
#   one (udp_self.py edge: 400 rounds, the receive ring wrapping; reported
#   by marks in datagrams until session 55, it was lost and its server
#   slept for good, preload/README.md "Readiness and waiting").
# On a port shared with the kernel (preload_udp6_shared, ETA_TEST_SHARED=1)
# the same sockets are the PPE's (the shim's log says so), their ports held
# in the kernel by the placeholders: a plain program binding the UDP port an
# eta IPv6 socket holds gets EADDRINUSE, and the other way; the socket on the
# PPE's address is a hybrid there (its placeholder read), which serves while
# the PPE is away and comes back with the new one; UDP to the host's own
# addresses goes through the kernel (the eta-run clients' sockets `local`):
# eta-run clients reach a plain server, plain clients the eta-run servers
# (their placeholders read: the shim's line), and an unbound eta-run IPv6
# socket whose port the kernel holds on [::] gets datagrams sent to ::1 and
# 127.0.0.1 at that port, as on Linux.
# Link-local there (issue 31): an eta-run socket's sendto the peer's fe80::
# address with the tap's index as scope is the engine's (the shim's log), the
# replies' senders scoped to the tap; a connected one's names scoped too;
# scope 0 is the kernel's (counted), answered as a plain socket's sendto is.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

ppe_lab6
ppe_start "$work/ppe.toml"
# On a port shared with the kernel (ETA_TEST_SHARED=1) the placeholders
# hold the IPv6 UDP ports in the kernel too (one port space, checked below).
if [ "$(ppe_json "d['ports'][0]['kernel'] is None")" = True ]; then shared=; else shared=1; fi
# READY means the port's IPv6 addresses passed duplicate address detection
# (a second after start): a client's first connect and send right after it
# go from the PPE's address. Before, the address was still tentative there:
# the connect named :: and the send failed EADDRNOTAVAIL (dig -6 timed out).
note "right after READY, a connected IPv6 client under eta-run sends from [$H6]"
first=$(ETA_LOG=fallback timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.connect(('$ETA_LAB_PEER_IP6', 9177))
s.send(b'first')
print(s.getsockname()[0])" 2>&1) || fail "the first IPv6 send after READY: $first"
[ "$first" = "$H6" ] || fail "the first IPv6 client after READY named $first, not $H6"
ppe_ping6 "$H6" "of eta-ppe's start"

# The sockets of the program named $1 by where they went (eta-stat --json),
# as "reason count" lines.
stat_sockets() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
for p in d["programs"]:
    if p["name"] == sys.argv[1]:
        for k, v in sorted(p["sockets"].items()):
            print(k, v)' "$1"
}

note "python3 UDP on [::] under eta-run --require; kernel clients in the peer to [$H6] and $H4"
port=$(free_port)
n6=16 n4=18 # udp6.py client's datagrams per family
start_bg srv env ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" server "$port" $((n6 + n4)) >"$work/srv.out" 2>"$work/srv.err"
wait_until 30 eval "grep -q '^ready ' '$work/srv.out' || ! kill -0 $srv_pid"
grep -q "^ready $port name ::$" "$work/srv.out" || fail "the server did not bind [::]:$port: $(cat "$work/srv.out" "$work/srv.err")"
grep -qF "accelerated (UDP on [::]:$port on the PPE and the kernel)" "$work/srv.err" ||
    fail "the server's socket on [::] is not a hybrid: $(cat "$work/srv.err")"
peer timeout 60 "$py" "$here/udp6.py" client "$H6" "$port" 6 >"$work/c6.out" 2>&1 ||
    fail "the IPv6 client: $(cat "$work/c6.out" "$work/srv.out" "$work/srv.err")"
peer timeout 60 "$py" "$here/udp6.py" client "$H4" "$port" 4 >"$work/c4.out" 2>&1 ||
    fail "the IPv4 client: $(cat "$work/c4.out" "$work/srv.out" "$work/srv.err")"
wait_until 10 eval "[ \$(grep -c '^got ' '$work/srv.out') -ge $((n6 + n4)) ]" || true
sed 's/^/    /' "$work/srv.out" | head -3
if [ "$(ppe_json "d['ports'][0]['kernel'] is None")" = True ]; then ifx=0; else ifx='[0-9]*'; fi
g6=$(grep -cE "^got $ETA_LAB_PEER_IP6 [0-9]+ [0-9]+ dst=$H6 ifindex=$ifx hlim=64 flow=0 scope=0 flags=0 other=\[\]$" "$work/srv.out")
g4=$(grep -cE "^got ::ffff:$ETA_LAB_PEER_IP [0-9]+ [0-9]+ dst=::ffff:$H4 ifindex=$ifx hlim=- flow=0 scope=0 flags=0 other=\[\]$" \
    "$work/srv.out")
[ "$g6" -eq "$n6" ] && [ "$g4" -eq "$n4" ] ||
    fail "recvmsg's senders and control messages: $g6 of $n6 IPv6 and $g4 of $n4 IPv4 datagrams as Linux gives them: $(cat "$work/srv.out")"
stat_sockets python3 >"$work/sockets"
sed 's/^/    python3 sockets: /' "$work/sockets"
grep -q '^accelerated [1-9]' "$work/sockets" || fail "eta-stat does not list the server's socket accelerated"
if grep -v '^accelerated ' "$work/sockets" | grep -cv ' 0$' >/dev/null; then
    fail "eta-stat counts sockets of the server fallen back to the kernel: $(cat "$work/sockets")"
fi
# eta-stat's socket table names its protocol and family: UDP over IPv6 on [::]
# (the engines publish it while they work and when they nap: a bounded wait).
wait_until 10 ppe_true "any(u['proto'] == 'udp' and u['family'] == 6 and u['local'] == '[::]:$port' for u in d['udp_sockets'])" ||
    fail "eta-stat's socket table does not list the server's UDP socket on [::]:$port: $(ppe_json "d.get('udp_sockets')")"
ppe_stat | grep -E "^udp sockets|udp6 +\[::\]:$port " | sed 's/^/    eta-stat: /' || true
peer "$py" "$here/udp6.py" quit "$H6" "$port"
wait "$srv_pid" || fail "the server exited $?: $(cat "$work/srv.out" "$work/srv.err")"
if grep -E 'fd [0-9]+: (kernel|fallback)' "$work/srv.err"; then fail "a socket of the server went to the kernel"; fi

note "socket semantics: the same answers on the kernel link and on the PPE's IPv6 address (udp6_probe.py)"
probe() { # bind address, peer address, output file; then the run itself
    local bind=$1 peer_ip=$2 out=$3
    shift 3
    peer timeout 60 "$py" "$here/udp6.py" probe-peer 9110 > "$out.peer" 2>&1 &
    local ppid=$!
    _bg_pids+=($ppid)
    wait_until 20 bash -c "ip netns exec $ETA_LAB_NS ss -uln | grep -c ':9110 ' >/dev/null" ||
        { cat "$out.peer"; fail "the probe's peer did not bind port 9110"; }
    timeout 60 "$@" "$py" "$here/udp6_probe.py" "$bind" "$peer_ip" > "$out" 2> "$out.err" ||
        { cat "$out" "$out.err" "$out.peer"; fail "udp6_probe.py failed ($bind)"; }
    wait "$ppid" || { cat "$out.peer"; fail "the probe's peer failed ($bind)"; }
}
probe "$ETA_LAB_KERNEL_IP6" "$ETA_LAB_KERNEL_PEER_IP6" "$work/probe-kernel.out"
probe "$H6" "$ETA_LAB_PEER_IP6" "$work/probe-eta.out" \
    env ETA_LOG=fallback,accel "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" --
grep -qF "accelerated ([$H6]:7020)" "$work/probe-eta.out.err" ||
    { cat "$work/probe-eta.out.err"; fail "the probe's socket was not accelerated"; }
sed 's/^/    /' "$work/probe-eta.out"
diff -u "$work/probe-kernel.out" "$work/probe-eta.out" ||
    fail "AF_INET6 UDP calls answered otherwise through the PPE than on the kernel (- kernel, + eta)"

note "bound to [$H6]:0: the engine's pick (shared: the kernel's), named by getsockname and in the shim's line"
got=$(ETA_LOG=accel timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('$H6', 0))
print(s.getsockname()[1])" 2>"$work/port0.err") || fail "the bind to port 0: $(cat "$work/port0.err")"
[ "$got" -gt 0 ] 2>/dev/null && grep -qF "accelerated ([$H6]:$got)" "$work/port0.err" ||
    fail "the bind to [$H6]:0: getsockname port '$got', the shim said: $(cat "$work/port0.err")"

if [ -n "$shared" ]; then
    note "one port space: a plain program cannot bind the UDP port an eta IPv6 socket holds, nor eta a plain one's"
    # (plain: a kernel program, no shim; it answers what its bind got)
    plain_bind() { "$py" -c "
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    s.bind((sys.argv[1], int(sys.argv[2]))); print('bound')
except OSError as e:
    print(e.strerror)" "$@"; }
    start_bg hold env ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import os, socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('$H6', 0))
c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
c.sendto(b'x', ('$ETA_LAB_PEER_IP6', 9))
print('ports', s.getsockname()[1], c.getsockname()[0], c.getsockname()[1], flush=True)
while not os.path.exists('$work/hold.done'):
    time.sleep(0.05)" >"$work/hold.out" 2>"$work/hold.err"
    wait_until 30 eval "grep -q '^ports ' '$work/hold.out' || ! kill -0 $hold_pid"
    read -r _ bp cname cp <"$work/hold.out" || fail "the eta holder: $(cat "$work/hold.out" "$work/hold.err")"
    [ "$cname" = "::" ] || fail "an unbound client's name after its first send: [$cname]:$cp, not [::] (Linux's autobind)"
    [ "$(grep -cE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \((\[$H6\]:$bp|UDP)\)" "$work/hold.err")" -eq 2 ] ||
        fail "the holder's sockets are not both the PPE's: $(cat "$work/hold.err")"
    for a in "$H6" "::"; do
        for p in "$bp" "$cp"; do
            r=$(plain_bind "$a" "$p")
            [ "$r" = "Address already in use" ] || fail "a plain bind to [$a]:$p, which an eta socket holds: $r"
        done
    done
    touch "$work/hold.done"
    wait "$hold_pid" || fail "the eta holder exited $?: $(cat "$work/hold.err")"
    r=$(plain_bind "$H6" "$bp")
    [ "$r" = "bound" ] || fail "a plain bind to [$H6]:$bp once the eta socket closed: $r"
    kp=$(free_port)
    start_bg kern "$py" -c "
import os, socket, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('$H6', $kp))
print('bound', flush=True)
while not os.path.exists('$work/kern.done'):
    time.sleep(0.05)" >"$work/kern.out" 2>&1
    wait_until 30 eval "grep -q '^bound' '$work/kern.out' || ! kill -0 $kern_pid"
    grep -q '^bound' "$work/kern.out" || fail "the plain holder: $(cat "$work/kern.out")"
    r=$(ETA_LOG=fallback timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    s.bind(('$H6', $kp)); print('bound')
except OSError as e:
    print(e.strerror)" 2>"$work/kbind.err")
    touch "$work/kern.done"
    wait "$kern_pid" || fail "the plain holder exited $?"
    [ "$r" = "Address already in use" ] ||
        fail "an eta bind to [$H6]:$kp, which a plain program holds: $r $(cat "$work/kbind.err")"
fi

note "[::] IPV6_V6ONLY beside 0.0.0.0 on one port in one program: each family reaches its socket"
port=$(free_port)
start_bg pair env ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" pair "$port" $((n6 + n4)) >"$work/pair.out" 2>"$work/pair.err"
wait_until 30 eval "grep -q '^ready ' '$work/pair.out' || ! kill -0 $pair_pid"
grep -q "^ready $port v6only 1" "$work/pair.out" || fail "the pair did not bind: $(cat "$work/pair.out" "$work/pair.err")"
grep -qF "accelerated (UDP on [::]:$port on the PPE and the kernel, IPv6 only)" "$work/pair.err" &&
    grep -qF "accelerated (UDP on 0.0.0.0:$port on the PPE and the kernel)" "$work/pair.err" ||
    fail "the pair's sockets are not both hybrids: $(cat "$work/pair.err")"
peer timeout 60 "$py" "$here/udp6.py" client "$H6" "$port" 6 >"$work/p6.out" 2>&1 ||
    fail "the IPv6 client of the pair: $(cat "$work/p6.out" "$work/pair.out")"
peer timeout 60 "$py" "$here/udp6.py" client "$H4" "$port" 4 >"$work/p4.out" 2>&1 ||
    fail "the IPv4 client of the pair: $(cat "$work/p4.out" "$work/pair.out")"
wait "$pair_pid" || fail "the pair exited $?: $(cat "$work/pair.out" "$work/pair.err")"
[ "$(grep -c "^pair 6 $ETA_LAB_PEER_IP6 " "$work/pair.out")" -eq "$n6" ] &&
    [ "$(grep -c "^pair 4 $ETA_LAB_PEER_IP " "$work/pair.out")" -eq "$n4" ] ||
    fail "each family's datagrams to its own socket: $(cat "$work/pair.out")"

note "bound to ::ffff:$H4 (the PPE's IPv4 address v4-mapped): the PPE's over IPv4, names v4-mapped"
port=$(free_port)
start_bg mapd env ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" mapped "$H4" "$port" "$n4" >"$work/mapd.out" 2>"$work/mapd.err"
wait_until 30 eval "grep -q '^ready ' '$work/mapd.out' || ! kill -0 $mapd_pid"
grep -q "^ready $port name ::ffff:$H4$" "$work/mapd.out" || fail "the v4-mapped bind: $(cat "$work/mapd.out" "$work/mapd.err")"
grep -qF "accelerated ($H4:$port)" "$work/mapd.err" || fail "the v4-mapped bind is not the PPE's: $(cat "$work/mapd.err")"
peer timeout 60 "$py" "$here/udp6.py" client "$H4" "$port" 4 >"$work/m4.out" 2>&1 ||
    fail "the IPv4 client of the v4-mapped socket: $(cat "$work/m4.out" "$work/mapd.out")"
wait "$mapd_pid" || fail "the v4-mapped server exited $?: $(cat "$work/mapd.out" "$work/mapd.err")"
[ "$(grep -c "^mapped ::ffff:$ETA_LAB_PEER_IP 0 0 " "$work/mapd.out")" -eq "$n4" ] ||
    fail "the v4-mapped socket's senders: $(cat "$work/mapd.out")"

note "a client under eta-run --require to a kernel echo server in the peer ([$ETA_LAB_PEER_IP6])"
qport=$(free_port)
start_bg pecho peer timeout 60 "$py" "$here/udp6.py" echo "$ETA_LAB_PEER_IP6" "$qport" "$n6" >"$work/echo.out" 2>&1
wait_until 20 eval "grep -q listening '$work/echo.out' || ! kill -0 $pecho_pid"
grep -q listening "$work/echo.out" || fail "the peer's echo server did not bind: $(cat "$work/echo.out")"
ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" client "$ETA_LAB_PEER_IP6" "$qport" 6 >"$work/cli.out" 2>"$work/cli.err" ||
    fail "the client under eta-run: $(cat "$work/cli.out" "$work/cli.err" "$work/echo.out")"
wait "$pecho_pid" || fail "the peer's echo server exited $?: $(cat "$work/echo.out")"
grep -qx "client :: ok $n6" "$work/cli.out" || fail "the client's exchange: $(cat "$work/cli.out")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(UDP\)" "$work/cli.err" ||
    fail "the client's socket was not the PPE's: $(cat "$work/cli.err")"
[ "$(grep -c "^echo $H6 " "$work/echo.out")" -eq "$n6" ] ||
    fail "the peer's echo server did not see every datagram from [$H6]: $(cat "$work/echo.out")"

note "a connected client under eta-run --require (connect, then send and recv) to the same kind of server"
qport=$(free_port)
start_bg pecho peer timeout 60 "$py" "$here/udp6.py" echo "$ETA_LAB_PEER_IP6" "$qport" "$n6" >"$work/echo2.out" 2>&1
wait_until 20 eval "grep -q listening '$work/echo2.out' || ! kill -0 $pecho_pid"
ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" client "$ETA_LAB_PEER_IP6" "$qport" 6 connect >"$work/cli2.out" 2>"$work/cli2.err" ||
    fail "the connected client under eta-run: $(cat "$work/cli2.out" "$work/cli2.err" "$work/echo2.out")"
wait "$pecho_pid" || fail "the peer's echo server exited $?: $(cat "$work/echo2.out")"
# connected: its name is the PPE's IPv6 address, as Linux's route lookup gives it
grep -qx "client $H6 ok $n6" "$work/cli2.out" || fail "the connected client's exchange: $(cat "$work/cli2.out")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(UDP\)" "$work/cli2.err" ||
    fail "the connected client's socket was not the PPE's: $(cat "$work/cli2.err")"

note "IPV6_TCLASS and IPV6_UNICAST_HOPS under eta-run, the socket's and one datagram's class (a control message): the peer's IPV6_RECVTCLASS, IPV6_RECVHOPLIMIT"
qport=$(free_port)
start_bg tcrx peer timeout 30 "$py" -c "
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
s.bind(('$ETA_LAB_PEER_IP6', $qport)); s.settimeout(20)
print('listening', flush=True)
for _ in range(4):
    d, anc, _, a = s.recvmsg(64, 128)
    print('tclass', d.decode(), [int.from_bytes(x[:4], 'little') for l, t, x in anc if t == socket.IPV6_TCLASS],
          'hops', [int.from_bytes(x[:4], 'little') for l, t, x in anc if t == socket.IPV6_HOPLIMIT], flush=True)" \
    >"$work/tc.out" 2>&1
wait_until 20 eval "grep -q listening '$work/tc.out' || ! kill -0 $tcrx_pid"
ETA_LOG=fallback,accel timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x28)
assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS) == 0x28
s.sendto(b'dscp', ('$ETA_LAB_PEER_IP6', $qport))
s.sendmsg([b'ect1'], [(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, (1).to_bytes(4, 'little'))], 0, ('$ETA_LAB_PEER_IP6', $qport))
s.sendto(b'again', ('$ETA_LAB_PEER_IP6', $qport))
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 17)
assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS) == 17
s.sendto(b'hops', ('$ETA_LAB_PEER_IP6', $qport))" 2>"$work/tc.err" || fail "the IPV6_TCLASS sender: $(cat "$work/tc.err")"
wait "$tcrx_pid" || fail "the peer's receiver: $(cat "$work/tc.out")"
[ "$(tr '\n' ' ' < "$work/tc.out")" = "listening tclass dscp [40] hops [64] tclass ect1 [1] hops [64] tclass again [40] hops [64] tclass hops [40] hops [17] " ] ||
    fail "the traffic classes and hop limits (the socket's, one datagram's control message, the socket's; IPV6_UNICAST_HOPS 17): $(cat "$work/tc.out")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(UDP\)" "$work/tc.err" ||
    fail "the IPV6_TCLASS sender's socket was not the PPE's: $(cat "$work/tc.err")"

note "exec, then a PPE restart: sockets on [$H6]:P1 and [::]:P2 (IPV6_V6ONLY) kept as bound"
p1=$(free_port) p2=$(free_port)
start_bg life env ETA_LOG=fallback,accel timeout 200 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp6.py" life-parent "$H6" "$p1" "$p2" >"$work/life.out" 2>"$work/life.err"
wait_until 30 eval "grep -q '^child ' '$work/life.out' || ! kill -0 $life_pid"
grep -qx "child \[$H6\]:$p1 \[::\]:$p2 family True True v6only 1 1" "$work/life.out" ||
    fail "the exec'd image's sockets: $(cat "$work/life.out" "$work/life.err")"
for p in "$p1" "$p2"; do
    peer timeout 60 "$py" "$here/udp6.py" client "$H6" "$p" 6 >"$work/l$p.out" 2>&1 ||
        fail "after exec, port $p: $(cat "$work/l$p.out" "$work/life.out" "$work/life.err")"
done
ppe_kill9
# Not shared: the socket on the PPE's address alone fails now (ECONNREFUSED,
# as an IPv4 one); the [::] one's kernel half serves. Shared: that socket is
# a hybrid too (its placeholder read: host-local senders), whose kernel half
# serves alone meanwhile and whose PPE half comes back, as the [::] one's.
if [ -z "$shared" ]; then
    wait_until 30 grep -q "^error 1 ECONNREFUSED" "$work/life.out" ||
        fail "the socket on [$H6] once the PPE went: $(cat "$work/life.out" "$work/life.err")"
fi
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of the new eta-ppe's start"
wait_until 60 grep -qF "UDP on [::]:$p2 on the new PPE again" "$work/life.err" ||
    fail "the [::] socket's PPE half did not come back with the new PPE: $(cat "$work/life.err")"
peer timeout 60 "$py" "$here/udp6.py" client "$H6" "$p2" 6 >"$work/l2.out" 2>&1 ||
    fail "after the restart, port $p2: $(cat "$work/l2.out" "$work/life.out" "$work/life.err")"
if [ -n "$shared" ]; then
    wait_until 60 grep -qF "UDP on [$H6]:$p1 on the new PPE again" "$work/life.err" ||
        fail "the [$H6] socket's PPE half did not come back with the new PPE: $(cat "$work/life.err")"
    grep -q "^error 1 " "$work/life.out" && fail "the [$H6] socket failed on a shared port: $(cat "$work/life.out")"
    peer timeout 60 "$py" "$here/udp6.py" client "$H6" "$p1" 6 >"$work/l1.out" 2>&1 ||
        fail "after the restart, port $p1: $(cat "$work/l1.out" "$work/life.out" "$work/life.err")"
fi
# IPv6 only on the new PPE too: an IPv4 datagram to the port finds no socket
# there (the kernel half is not reachable at the PPE's address either)
peer "$py" -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'v4', ('$H4', $p2))"
peer "$py" "$here/udp6.py" quit "$H6" "$p2"
wait "$life_pid" || fail "the exec'd image exited $?: $(cat "$work/life.out" "$work/life.err")"
[ "$(grep -c "^echoed 2 $ETA_LAB_PEER_IP6 " "$work/life.out")" -eq $((2 * n6)) ] &&
    [ "$(grep -c "^echoed 1 $ETA_LAB_PEER_IP6 " "$work/life.out")" -eq $((${shared:+2 * }n6)) ] ||
    fail "the exec'd image's echoes (an IPv4 datagram must not reach the IPv6-only socket): $(cat "$work/life.out")"
# UDP to the host's own addresses (issues 29 and 31), both families, as on
# Linux: eta-run and plain programs on this host exchange datagrams through
# the PPE's address. Not shared: the engine carries them to itself (MARS's
# local loop, eta-stat's local_frames), a port nobody holds answers ICMP port
# unreachable (a connected sender's ECONNREFUSED). Shared: they go through
# the kernel (an eta-run client's socket is the kernel's, `local`), which
# loops them to whichever socket holds the port: a plain program's, or an
# eta socket's placeholder, which the shim reads as a hybrid's kernel half.
selfpy=$here/udp_self.py
export UDP_SELF_TRACE=1 # udp_self.py: a trace on stderr (a failure shows the servers' last lines)
LOCAL_FRAMES="sum(s['local_frames'] for e in d['engines'] for s in e['stacks'])"
UDP_IN="sum(s['udp_in'] for e in d['engines'] for s in e['stacks'])"
# self_server NAME ADDR [plain|epoll]: udp_self.py's echo server on ADDR port
# 0 (under eta-run --require, polling before each receive or with epoll; or
# plain); sport: its port.
self_server() {
    local name=$1 addr=$2 pid
    rm -f "$work/$name.ready"
    if [ "${3:-}" = plain ]; then
        start_bg "$name" timeout 200 "$py" "$selfpy" serve "$addr" 0 "$work/$name.ready" 2>"$work/$name.err"
    else
        start_bg "$name" env ETA_LOG=fallback,accel timeout 200 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
            "$py" "$selfpy" serve "$addr" 0 "$work/$name.ready" ${3:-} 2>"$work/$name.err"
    fi
    pid=$(eval echo "\$${name}_pid")
    wait_until 30 eval "[ -f '$work/$name.ready' ] || ! kill -0 $pid"
    sport=$(sed -n 's/^ready //p' "$work/$name.ready" 2>/dev/null || true)
    [ -n "$sport" ] || fail "the $name server on $addr did not bind: $(cat "$work/$name.err")"
}
# self_counters: the stacks' UDP and local-loop counters, for a failure's message.
self_counters() {
    ppe_json "{k: sum(s.get(k, 0) for e in d['engines'] for s in e['stacks']) for k in sorted(set(k for e in d['engines'] for s in e['stacks'] for k in s)) if ('udp' in k or 'local' in k or 'drop' in k or 'icmp' in k) and sum(s.get(k, 0) for e in d['engines'] for s in e['stacks'])}" 2>&1 || true
    ppe_json "[(e.get('loops'), e.get('sleeps'), e.get('wakeups'), e.get('commands')) for e in d['engines']]" 2>&1 || true; sleep 1; ppe_json "[(e.get('loops'), e.get('sleeps'), e.get('wakeups'), e.get('commands')) for e in d['engines']]" 2>&1 || true; ppe_stat 2>&1 | grep -i -E 'udp|app|ring' | head -20 || true
    for t in /proc/"${PPE_REAL_PID:-0}"/task/*; do echo "$(cat "$t/comm" 2>/dev/null) $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"; done 2>/dev/null | tr '\n' ';' || true
    # the servers' last lines (UDP_SELF_TRACE: what each received and answered)
    for n in es4 ee4 ew4 es6 ee6 ew6; do
        [ ! -f "$work/$n.err" ] || echo "== $n: $(tail -4 "$work/$n.err" | tr '\n' '|')"
    done
}
# self_client WHO ADDR PORT: udp_self.py clients (connected, unconnected;
# eta-run ones also bound to ADDR first) to ADDR:PORT, under eta-run
# --require (WHO eta), plain or in the peer; byte-exact echoes.
self_client() {
    local who=$1 addr=$2 port=$3 mode out modes="connected unconnected"
    [ "$who" != eta ] || modes="$modes bound"
    for mode in $modes; do
        if [ "$who" = eta ]; then
            out=$(ETA_LOG=fallback,accel timeout 90 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
                "$py" "$selfpy" client "$addr" "$port" "$mode" 24 2>&1) ||
                fail "$who $mode client -> $addr:$port: $out; counters: $(self_counters)"
        elif [ "$who" = peer ]; then
            out=$(peer timeout 90 "$py" "$selfpy" client "$addr" "$port" "$mode" 24 2>&1) ||
                fail "$who $mode client -> $addr:$port: $out; counters: $(self_counters)"
        else
            out=$(timeout 90 "$py" "$selfpy" client "$addr" "$port" "$mode" 24 2>&1) ||
                fail "$who $mode client -> $addr:$port: $out; counters: $(self_counters)"
        fi
        grep -q "^ok 24 from " <<<"$out" || fail "$who $mode client -> $addr:$port: $out; counters: $(self_counters)"
        if grep -c " resent " <<<"$out" >/dev/null; then # a datagram lost (see udp_self.py): said, with the counters
            echo "    NOTE: $who $mode client -> $addr:$port: $(grep "^ok" <<<"$out"); counters: $(self_counters)"
        fi
        if [ "$who" = eta ] && [ "$mode" = bound ]; then
            # bound to the PPE's address first: the PPE's (on a shared port a
            # hybrid whose placeholder is read: the answers come there)
            grep -c "accelerated ($addr:[0-9]*)\|accelerated (\[$addr\]:[0-9]*)" <<<"$out" >/dev/null ||
                fail "the eta-run client bound to $addr is not the PPE's: $out"
        elif [ "$who" = eta ] && [ -n "$shared" ]; then
            # a shared port: the kernel's socket, counted `local`
            grep -c "kernel socket, reason local" <<<"$out" >/dev/null ||
                fail "the eta-run client to $addr:$port on a shared port is not the kernel's ('local'): $out"
        elif [ "$who" = eta ]; then
            grep -c "accelerated (UDP)" <<<"$out" >/dev/null ||
                fail "the eta-run client to $addr:$port is not the PPE's: $out"
        fi
    done
}
# self_quit ADDR PORT: ends a udp_self.py server (sent under eta-run: a port
# not shared has no kernel route to the PPE's address)
self_quit() { timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" "$selfpy" quit "$1" "$2"; }
for fam in 4 6; do
    if [ $fam = 4 ]; then A=$H4 W=0.0.0.0; else A=$H6 W=::; fi
    note "IPv$fam: edge-triggered epoll reports a small datagram after a large one (400 rounds, ring wraps)"
    out=$(ETA_LOG=fallback timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$selfpy" edge "$A" 400 2>&1) || fail "IPv$fam edge-triggered epoll: $out; counters: $(self_counters)"
    grep -c "^ok edge 400$" <<<"$out" >/dev/null || fail "IPv$fam edge-triggered epoll: $out"
    note "IPv$fam: eta-run UDP client -> eta-run UDP servers on [$A] (bound there, polling or with epoll, and on [$W])"
    f0=$(ppe_json "$LOCAL_FRAMES")
    self_server "es$fam" "$A"
    aport=$sport
    if [ -n "$shared" ]; then
        grep -qF "UDP port $aport is shared with the kernel: its placeholder is read too" "$work/es$fam.err" ||
            fail "the eta-run server on $A:$aport does not read its placeholder: $(cat "$work/es$fam.err")"
    fi
    self_client eta "$A" "$aport"
    self_server "ee$fam" "$A" epoll
    eport=$sport
    self_client eta "$A" "$eport"
    self_server "ew$fam" "$W"
    wport=$sport
    grep -qF "on the PPE and the kernel" "$work/ew$fam.err" ||
        fail "the eta-run server on $W:$wport is not a hybrid: $(cat "$work/ew$fam.err")"
    self_client eta "$A" "$wport"
    if [ -z "$shared" ]; then
        f1=$(ppe_json "$LOCAL_FRAMES")
        # at least 4 clients x 24 datagrams each way, through the engine's local loop
        [ "$f1" -ge $((f0 + 4 * 24 * 2)) ] ||
            fail "IPv$fam: eta-stat's local_frames went from $f0 to $f1, by less than 192 (the engine did not carry them)"
    fi
    note "IPv$fam: an eta-run connected UDP client to [$A]:P where nobody is: ECONNREFUSED"
    nport=$(free_port)
    out=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$selfpy" refused "$A" "$nport" 2>&1) || fail "IPv$fam refused: $out"
    if [ -n "$shared" ]; then
        note "IPv$fam shared: eta-run UDP client -> plain server on [$A]; plain client -> eta-run servers"
        self_server "ks$fam" "$A" plain
        self_client eta "$A" "$sport"
        self_quit "$A" "$sport"
        self_client plain "$A" "$aport"
        self_client plain "$A" "$eport"
        self_client plain "$A" "$wport"
    fi
    note "IPv$fam: the peer still reaches both servers through the engine"
    u0=$(ppe_json "$UDP_IN")
    self_client peer "$A" "$aport"
    self_client peer "$A" "$wport"
    u1=$(ppe_json "$UDP_IN")
    [ "$u1" -ge $((u0 + 4 * 24)) ] || fail "IPv$fam: the peer's datagrams to the servers did not go through MARS (udp_in $u0 -> $u1)"
    self_quit "$A" "$aport"
    self_quit "$A" "$eport"
    self_quit "$A" "$wport"
    for n in "es$fam" "ee$fam" "ew$fam" ${shared:+"ks$fam"}; do
        wait "$(eval echo "\$${n}_pid")" || fail "the $n server exited $?: $(cat "$work/$n.err")"
    done
done
# held_start NAME PEER: udp_self.py's held socket under eta-run --require
# (unbound, its first datagram to PEER at a free port); hport: its port, which
# the shim's line says is held and read in the kernel.
held_start() {
    local name=$1 pid
    rm -f "$work/$name.ready"
    start_bg "$name" env ETA_LOG=fallback,accel timeout 200 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$selfpy" held "$2" "$(free_port)" "$work/$name.ready" 2>"$work/$name.err"
    pid=$(eval echo "\$${name}_pid")
    wait_until 30 eval "[ -f '$work/$name.ready' ] || ! kill -0 $pid"
    hport=$(sed -n 's/^ready //p' "$work/$name.ready" 2>/dev/null || true)
    [ -n "$hport" ] || fail "the $name socket did not send: $(cat "$work/$name.err")"
    grep -qF "UDP port $hport is shared with the kernel: its placeholder is read too" "$work/$name.err" ||
        fail "the unbound $name socket's port is not held and read in the kernel: $(cat "$work/$name.err")"
}
if [ -n "$shared" ]; then
    note "shared: an unbound eta-run IPv6 socket's placeholder held on [::]: datagrams to ::1 and 127.0.0.1 at its port reach it"
    held_start held "$ETA_LAB_PEER_IP6"
    out=$(timeout 60 "$py" "$selfpy" client ::1 "$hport" unconnected 8 2>&1) || fail "plain client -> [::1]:$hport: $out"
    out=$(timeout 60 "$py" "$selfpy" client 127.0.0.1 "$hport" connected 8 2>&1) || fail "plain client -> 127.0.0.1:$hport: $out"
    "$py" "$selfpy" quit ::1 "$hport"
    wait "$held_pid" || fail "the held socket's program exited $?: $(cat "$work/held.err")"
    note "shared: an unbound eta-run IPv4 socket's port held on 0.0.0.0: a plain bind of it is EADDRINUSE, datagrams to 127.0.0.1 and $H4 at it reach the socket"
    held_start held4 "$ETA_LAB_PEER_IP"
    grep -qF "accelerated (UDP)" "$work/held4.err" || fail "the unbound IPv4 socket is not the PPE's: $(cat "$work/held4.err")"
    out=$("$py" "$selfpy" taken "$hport" 2>&1) || fail "a plain bind of the eta socket's port $hport: $out"
    out=$(timeout 60 "$py" "$selfpy" client 127.0.0.1 "$hport" unconnected 8 2>&1) || fail "plain client -> 127.0.0.1:$hport: $out"
    out=$(timeout 60 "$py" "$selfpy" client "$H4" "$hport" connected 8 2>&1) || fail "plain client -> $H4:$hport: $out"
    "$py" "$selfpy" quit 127.0.0.1 "$hport"
    wait "$held4_pid" || fail "the held IPv4 socket's program exited $?: $(cat "$work/held4.err")"
fi
if [ -n "$shared" ]; then
    # Link-local (issue 31): the port's kernel interface (its tap) names the
    # PPE's link; fe80:: with its index as scope id is the engine's.
    tap=$(ip -6 -o addr show to "$H6" | awk '{print $2; exit}')
    tidx=$(cat "/sys/class/net/$tap/ifindex")
    ppe_ll=$(ip -6 -o addr show dev "$tap" scope link | awk '{sub(/\/.*/, "", $4); print $4; exit}')
    pdev=$(peer ip -6 -o addr show to "$ETA_LAB_PEER_IP6" | awk '{print $2; exit}')
    peer_ll=$(peer ip -6 -o addr show dev "$pdev" scope link | awk '{sub(/\/.*/, "", $4); print $4; exit}')
    [ -n "$ppe_ll" ] && [ -n "$peer_ll" ] || fail "no link-local address on $tap ($ppe_ll) or the peer's $pdev ($peer_ll)"
    note "shared: an eta-run UDP client to the peer's [$peer_ll%$tap] (index $tidx): the engine's, replies named with that scope"
    lport=$(free_port)
    start_bg llecho peer timeout 60 "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('::', $lport))
print('listening', flush=True)
for i in range(4):
    d, a = s.recvfrom(2000)
    print('from', a[0], flush=True)
    s.sendto(d[::-1], a)" >"$work/llecho.out" 2>&1
    wait_until 20 eval "grep -q listening '$work/llecho.out' || ! kill -0 $llecho_pid"
    ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import errno, socket, sys
to = ('$peer_ll', $lport, 0, $tidx)
z = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    z.sendto(b'z', ('$peer_ll', $lport, 0, 0))
    print('scope0 sent')
except OSError as e:
    print('scope0', errno.errorcode.get(e.errno, e.errno))
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(20)
for i in range(2):
    d = bytes([i + 1]) * 1200 + b'x'
    s.sendto(d, to)
    g, a = s.recvfrom(2000)
    if g != d[::-1]:
        sys.exit('the reply differs')
    print('reply', a[0], a[1], a[3])
c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
c.settimeout(20)
c.connect(to)
for i in range(2):
    d = bytes([i + 7]) * 900 + b'y'
    c.send(d)
    if c.recv(2000) != d[::-1]:
        sys.exit('the connected reply differs')
print('connected', c.getsockname()[0], c.getsockname()[3], c.getpeername()[0], c.getpeername()[3])" \
        >"$work/llcli.out" 2>"$work/llcli.err" || fail "the link-local UDP client: $(cat "$work/llcli.out" "$work/llcli.err")"
    wait "$llecho_pid" || fail "the peer's echo server exited $?: $(cat "$work/llecho.out")"
    # scope 0: the kernel's, answered as a plain socket in the peer is (Linux's
    # UDP sends it where its routes say, no EINVAL as TCP's connect)
    ref=$(peer "$py" -c "
import errno, socket
z = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    z.sendto(b'z', ('$ppe_ll', 9, 0, 0))
    print('scope0 sent')
except OSError as e:
    print('scope0', errno.errorcode.get(e.errno, e.errno))")
    [ -n "$ref" ] && grep -qx "$ref" "$work/llcli.out" ||
        fail "sendto a link-local address without a scope id: eta-run's '$(grep ^scope0 "$work/llcli.out")', Linux's '$ref'"
    [ "$(grep -cx "reply $peer_ll $lport $tidx" "$work/llcli.out")" = 2 ] ||
        fail "recvfrom's sender (want [$peer_ll]:$lport scope $tidx): $(cat "$work/llcli.out")"
    grep -qx "connected $ppe_ll $tidx $peer_ll $tidx" "$work/llcli.out" ||
        fail "the connected socket's names (want $ppe_ll and $peer_ll, scope $tidx): $(cat "$work/llcli.out")"
    [ "$(grep -c "accelerated (UDP)" "$work/llcli.err")" = 2 ] && [ "$(grep -c "kernel socket" "$work/llcli.err")" = 1 ] ||
        fail "the link-local UDP sockets are not the engine's: $(cat "$work/llcli.err")"
    [ "$(grep -cx "from $ppe_ll" "$work/llecho.out")" = 4 ] || fail "the peer's echo server saw: $(cat "$work/llecho.out")"
fi
note "ok"
