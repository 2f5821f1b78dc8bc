#!/usr/bin/env bash
# UDP through the PPE (issue 31): a real Debian program, socat, serves UDP
# under eta-run --require on the PPE's address, its socket a DTI datagram
# socket (MARS's UDP; nothing through the kernel), and the lab's kernel peer
# talks to it.
#   udp_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# - echo: `socat UDP4-LISTEN:P,bind=PPE PIPE` (recvfrom MSG_PEEK, connect,
#   read, write) answers datagrams of 1 to 1472 bytes byte-exact;
# - relay: `socat UDP4-LISTEN:P,bind=PPE UDP4:PEER:9000` (a second socket,
#   unbound, connected through the PPE's subnet: the PPE's too) carries a
#   burst datagram by datagram both ways, boundaries kept;
# - truncation: with `-b 100` a 1000-byte datagram is read as its first 100
#   bytes, the rest discarded (the next read is the next datagram);
# - the peer sending to a port nobody holds gets ICMP port unreachable
#   (ECONNREFUSED on its connected socket; MARS's, counted udp_no_port, or on
#   a port shared with the kernel the kernel's, counted as handed to it);
# - udp_probe.py answers the same on the kernel link and through the PPE:
#   a connected socket's ICMP port unreachable (POLLERR, ECONNREFUSED once, SO_ERROR),
#   getsockname/getpeername, SO_RCVTIMEO and MSG_DONTWAIT (EAGAIN), poll and
#   edge-triggered epoll waiting for a datagram,
#   MSG_PEEK, recvmsg's MSG_TRUNC flag, MSG_TRUNC's real length, the sender's
#   address, an empty datagram, connect; a socket connected through the PPE
#   names the PPE's address (getsockname), as Linux names its source;
# - IP_TOS reaches the wire, the socket's option and one datagram's control
#   message (the peer's IP_RECVTOS reads them), and IP_TTL (IP_RECVTTL);
# - UDP_SEGMENT (GSO), the option and a control message: the peer gets the
#   buffer as datagrams of the segment size (across an iovec's pieces, 128
#   at most: Linux's EINVAL past it); UDP_GRO: a burst waiting in the ring
#   comes as receives of merged datagrams with their segment size (udp_gso.py);
# - exec: a UDP socket bound to the PPE's address, inherited across exec,
#   answers a datagram in the new image;
# - a hybrid (udp_hybrid.py, bound to INADDR_ANY): with its kernel half idle
#   the receives of a burst through the PPE look at that half (a system call)
#   at most once per 16 datagrams (the shim's counter); with both halves full
#   neither starves;
# - eta-stat counts the datagrams (udp_in, udp_out) and shows no fallback.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
command -v socat >/dev/null || skip "socat is not installed (tools/eta setup installs it)"
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 600 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"

stat_udp() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
st = [s for e in d["engines"] for s in e["stacks"]]
k = d["ports"][0]["kernel"]  # null unless the port is shared with the kernel
print(sum(s["udp_in"] for s in st), sum(s["udp_out"] for s in st), sum(s["udp_no_port"] for s in st),
      k["to"]["udp"]["frames"] if k else "-")'
}
read -r in0 out0 noport0 kudp0 <<< "$(stat_udp)"

serve() { # port, socat buffer size: one server under eta-run
    ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        socat -b "$2" "UDP4-LISTEN:$1,bind=$ETA_LAB_PPE_IP" PIPE 2> "$work/socat$1.err" &
    _bg_pids+=($!)
    # accelerated once bound: the shim logs the socket with its PPE address
    wait_until 30 grep -q "accelerated ($ETA_LAB_PPE_IP:$1)" "$work/socat$1.err" ||
        { cat "$work/socat$1.err"; fail "socat's UDP socket on port $1 was not accelerated"; }
}

note "socat UDP echo under eta-run, the kernel peer sends datagrams of 1..1472 bytes"
serve 7007 8192
peer timeout 120 "$py" "$here/udp_peer.py" echo "$ETA_LAB_PPE_IP" 7007 ||
    { cat "$work/socat7007.err"; fail "the echo through the PPE differed"; }
if grep -E 'fd [0-9]+: (kernel|fallback)' "$work/socat7007.err" | grep -ci udp >/dev/null; then
    cat "$work/socat7007.err"; fail "a UDP socket of socat went to the kernel"
fi

note "relay: socat between two UDP sockets under eta (bound to the PPE's address; connected to the peer)"
ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    socat -b 8192 "UDP4-LISTEN:7009,bind=$ETA_LAB_PPE_IP" "UDP4:$ETA_LAB_PEER_IP:9000" 2> "$work/relay.err" &
_bg_pids+=($!)
wait_until 30 grep -q "accelerated ($ETA_LAB_PPE_IP:7009)" "$work/relay.err" ||
    { cat "$work/relay.err"; fail "socat's listening UDP socket was not accelerated"; }
peer timeout 60 "$py" "$here/udp_peer.py" relay "$ETA_LAB_PPE_IP" 7009 9000 ||
    { cat "$work/relay.err"; fail "the relay through the PPE differed"; }
grep -q "accelerated (UDP)" "$work/relay.err" ||
    { cat "$work/relay.err"; fail "socat's UDP socket connected to the peer was not accelerated"; }

note "truncation: socat -b 100 reads a 1000-byte datagram as 100 bytes"
serve 7008 100
peer timeout 60 "$py" "$here/udp_peer.py" trunc "$ETA_LAB_PPE_IP" 7008 100 ||
    { cat "$work/socat7008.err"; fail "truncation differed"; }

note "a port nobody holds: ICMP port unreachable to the peer"
peer timeout 60 "$py" "$here/udp_peer.py" refused "$ETA_LAB_PPE_IP" 7099 || fail "no port unreachable"

note "socket semantics: the same answers on the kernel link and through the PPE (udp_probe.py)"
probe() { # bind address, peer address, output file; then the run itself
    local bind=$1 peer_ip=$2 out=$3
    shift 3
    peer timeout 60 "$py" "$here/udp_peer.py" probe-peer 9100 > "$out.peer" 2>&1 &
    local ppid=$!
    _bg_pids+=($ppid)
    # the probe's "go" is sent once: the peer's socket must be bound first
    wait_until 20 bash -c "ip netns exec $ETA_LAB_NS ss -uln | grep -c ':9100 ' >/dev/null" ||
        { cat "$out.peer"; fail "the probe's peer did not bind port 9100"; }
    timeout 60 "$@" "$py" "$here/udp_probe.py" "$bind" "$peer_ip" > "$out" 2> "$out.err" ||
        { cat "$out" "$out.err" "$out.peer"; fail "udp_probe.py failed ($bind)"; }
    wait "$ppid" || { cat "$out.peer"; fail "the probe's peer failed ($bind)"; }
}
probe "$ETA_LAB_KERNEL_IP" "$ETA_LAB_KERNEL_PEER_IP" "$work/probe-kernel.out"
probe "$ETA_LAB_PPE_IP" "$ETA_LAB_PEER_IP" "$work/probe-eta.out" \
    env ETA_LOG=fallback,accel "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" --
grep -q "accelerated ($ETA_LAB_PPE_IP:7010)" "$work/probe-eta.out.err" ||
    { cat "$work/probe-eta.out.err"; fail "the probe's socket was not accelerated"; }
sed 's/^/    /' "$work/probe-eta.out"
diff -u "$work/probe-kernel.out" "$work/probe-eta.out" ||
    fail "UDP calls answered otherwise through the PPE than on the kernel (- kernel, + eta)"

note "exec: a UDP socket bound to the PPE's address is the new image's (it answers a datagram)"
ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_exec.py" parent "$ETA_LAB_PPE_IP" 7011 > "$work/exec.out" 2> "$work/exec.err" &
exec_pid=$!
_bg_pids+=($exec_pid)
wait_until 60 grep -q "^child ready $ETA_LAB_PPE_IP 7011 type dgram True" "$work/exec.out" ||
    { cat "$work/exec.out" "$work/exec.err"; fail "the exec'd image does not hold the UDP socket"; }
peer timeout 60 "$py" "$here/udp_peer.py" once "$ETA_LAB_PPE_IP" 7011 ||
    { cat "$work/exec.out" "$work/exec.err"; fail "the exec'd image did not answer through the PPE"; }
wait "$exec_pid" || { cat "$work/exec.out" "$work/exec.err"; fail "the exec'd image failed"; }

note "a hybrid (bound to INADDR_ANY): its kernel half looked at only when the PPE's is empty or its turn came"
# udp_hybrid.py under eta-run: the peer's datagrams to the PPE's address are
# its PPE half's, its own to 127.0.0.1 its kernel half's. Each burst is read
# once the engine has it all (eta-stat's udp_in), so every receive finds a
# datagram waiting in the PPE's half: with the kernel half idle, the receives
# look at it (a system call) once per 16 of the PPE's datagrams, not every
# other one (before); with both halves full, they take turns.
hy_n=96
mkfifo "$work/hy.go"
exec 7<>"$work/hy.go"
ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_hybrid.py" "$hy_n" < "$work/hy.go" > "$work/hy.out" 2> "$work/hy.err" &
hy_pid=$!
_bg_pids+=($hy_pid)
wait_until 30 grep -q '^ready ' "$work/hy.out" || { cat "$work/hy.out" "$work/hy.err"; fail "udp_hybrid.py did not bind"; }
hy_port=$(awk '/^ready /{print $2}' "$work/hy.out")
grep -q "accelerated (UDP on 0.0.0.0:$hy_port on the PPE and the kernel)" "$work/hy.err" ||
    { cat "$work/hy.err"; fail "udp_hybrid.py's socket on 0.0.0.0:$hy_port is not a hybrid"; }
udp_in_reached() { local i _x; read -r i _x <<< "$(stat_udp)"; [ "$i" -ge "$1" ]; }
hy_burst() { # the peer sends hy_n datagrams numbered from $1; the engine has them all
    local i0 _x
    read -r i0 _x <<< "$(stat_udp)"
    peer timeout 60 "$py" "$here/udp_peer.py" burst "$ETA_LAB_PPE_IP" "$hy_port" "$1" "$hy_n" > /dev/null ||
        fail "the peer's burst to the hybrid failed"
    wait_until 30 udp_in_reached $((i0 + hy_n)) || fail "the engine did not count the burst to the hybrid ($i0 + $hy_n)"
}
hy_burst 0
echo go1 >&7
wait_until 60 grep -q '^looks ' "$work/hy.out" || { cat "$work/hy.out" "$work/hy.err"; fail "udp_hybrid.py did not read the PPE's burst"; }
read -r _w looks _w empty <<< "$(grep '^looks ' "$work/hy.out")"
echo "    $hy_n datagrams of the PPE's, the kernel half idle: $looks looks at it ($empty empty)"
[ "$looks" -le $((hy_n / 16 + 1)) ] ||
    fail "the receives looked at the idle kernel half $looks times for $hy_n datagrams (at most $((hy_n / 16 + 1)))"
hy_burst "$hy_n"
echo go2 >&7
wait_until 60 grep -q '^order ' "$work/hy.out" || { cat "$work/hy.out" "$work/hy.err"; fail "udp_hybrid.py did not read both halves"; }
wait "$hy_pid" || { cat "$work/hy.out" "$work/hy.err"; fail "udp_hybrid.py failed"; }
exec 7>&-
order=$(awk '/^order /{print $2}' "$work/hy.out")
first=${order:0:$hy_n}
np=$(tr -cd P <<< "$first" | wc -c) nk=$(tr -cd K <<< "$first" | wc -c)
echo "    both halves full: the first $hy_n receives took $np of the PPE's, $nk of the kernel's"
[ "$np" -ge $((hy_n / 4)) ] && [ "$nk" -ge $((hy_n / 4)) ] ||
    fail "a half starved while both were full: $np of the PPE's and $nk of the kernel's in the first $hy_n ($order)"

note "connect, then getsockname: the PPE's address (the source toward the peer, as Linux fixes it)"
got=$(ETA_LOG=accel timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(('$ETA_LAB_PEER_IP', 9))
print(s.getsockname()[0])" 2>"$work/name.err") || fail "the connected socket: $(cat "$work/name.err")"
[ "$got" = "$ETA_LAB_PPE_IP" ] || fail "getsockname after connect: '$got', not $ETA_LAB_PPE_IP (the kernel link names its source so)"
[ "$kudp0" != - ] || grep -qE "fd [0-9]+: accelerated \(UDP\)" "$work/name.err" ||
    fail "the connected socket was not the PPE's: $(cat "$work/name.err")"

note "IP_TOS and IP_TTL under eta-run, the socket's and one datagram's TOS (a control message): the peer's IP_RECVTOS, IP_RECVTTL"
qport=$(free_port)
start_bg tosrx peer timeout 30 "$py" -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL (not in Python 3.11)
s.bind(('$ETA_LAB_PEER_IP', $qport)); s.settimeout(20)
print('listening', flush=True)
for _ in range(4):
    d, anc, _, a = s.recvmsg(64, 128)
    print('tos', d.decode(), [x[0] for l, t, x in anc if t == socket.IP_TOS],
          'ttl', [int.from_bytes(x[:4], 'little') for l, t, x in anc if t == socket.IP_TTL], flush=True)" >"$work/tos.out" 2>&1
wait_until 20 eval "grep -q listening '$work/tos.out' || ! kill -0 $tosrx_pid"
ETA_LOG=fallback,accel timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x28)
s.sendto(b'dscp', ('$ETA_LAB_PEER_IP', $qport))
s.sendmsg([b'ce'], [(socket.IPPROTO_IP, socket.IP_TOS, bytes([3]))], 0, ('$ETA_LAB_PEER_IP', $qport))
s.sendto(b'again', ('$ETA_LAB_PEER_IP', $qport))
s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 33)
assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TTL) == 33
s.sendto(b'ttl', ('$ETA_LAB_PEER_IP', $qport))" 2>"$work/tos.err" || fail "the IP_TOS sender: $(cat "$work/tos.err")"
wait "$tosrx_pid" || fail "the peer's receiver: $(cat "$work/tos.out")"
[ "$(tr '\n' ' ' < "$work/tos.out")" = "listening tos dscp [40] ttl [64] tos ce [3] ttl [64] tos again [40] ttl [64] tos ttl [40] ttl [33] " ] ||
    fail "the TOS bytes and TTLs (the socket's, one datagram's control message, the socket's; IP_TTL 33): $(cat "$work/tos.out")"
[ "$kudp0" != - ] || grep -qE "fd [0-9]+: accelerated \(UDP\)" "$work/tos.err" ||
    fail "the IP_TOS sender's socket was not the PPE's: $(cat "$work/tos.err")"

note "UDP_SEGMENT (GSO) under eta-run: one buffer sent as datagrams of the segment size; UDP_GRO accepted"
gport=$(free_port)
start_bg gsorx peer timeout 60 "$py" "$here/udp_gso.py" peer "$ETA_LAB_PEER_IP" "$gport" >"$work/gso.peer" 2>&1
wait_until 20 eval "grep -q listening '$work/gso.peer' || ! kill -0 $gsorx_pid"
ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_gso.py" app "$ETA_LAB_PEER_IP" "$gport" >"$work/gso.out" 2>"$work/gso.err" ||
    fail "udp_gso.py: $(cat "$work/gso.out" "$work/gso.err")"
wait "$gsorx_pid" || fail "the GSO peer: $(cat "$work/gso.peer")"
hundreds=$(printf '100 %.0s' $(seq 128))
expect_peer="listening|sizes 1000 1000 1000 1000 1000 500|sizes 300 300 300 100|sizes 800|sizes 1000 1000 500|sizes ${hundreds% }|"
[ "$(tr '\n' '|' < "$work/gso.peer")" = "$expect_peer" ] ||
    fail "the peer's datagrams (socket option, control message, one short buffer, an iovec, 128 segments): $(cat "$work/gso.peer")"
expect_app="opt 1000|sent 5500|sent 1000|sent 800|sent 2500|sent 12800|refused 100 12900 22|refused 2000 4000 90|gro 1|echo 700 []|"
[ "$(tr '\n' '|' < "$work/gso.out")" = "$expect_app" ] ||
    fail "udp_gso.py's answers (129 segments EINVAL, a segment past the MTU EMSGSIZE, UDP_GRO read back): $(cat "$work/gso.out")"
[ "$kudp0" != - ] || grep -qE "fd [0-9]+: accelerated \(UDP\)" "$work/gso.err" ||
    fail "udp_gso.py's socket was not the PPE's: $(cat "$work/gso.err")"

note "UDP_GRO under eta-run: datagrams of one flow waiting in the ring come as one receive with their segment size"
gport=$(free_port)
mkfifo "$work/gro.go"
read -r gin0 _rest <<< "$(stat_udp)"
start_bg groapp env ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_gso.py" gro-app "$ETA_LAB_PPE_IP" "$gport" "$work/gro.go" >"$work/gro.out" 2>"$work/gro.err"
wait_until 20 eval "grep -q ready '$work/gro.out' || ! kill -0 $groapp_pid" || true
grep -q ready "$work/gro.out" || fail "udp_gso.py gro-app did not bind: $(cat "$work/gro.out" "$work/gro.err")"
peer timeout 20 "$py" "$here/udp_gso.py" burst "$ETA_LAB_PPE_IP" "$gport" || fail "the peer's burst"
# the whole burst in the socket's ring before the program reads
gro_taken() { local i _r; read -r i _r <<< "$(stat_udp)"; [ $((i - gin0)) -ge 23 ]; }
wait_until 20 gro_taken || fail "the engine did not take the peer's 23 datagrams"
echo go > "$work/gro.go"
wait "$groapp_pid" || fail "udp_gso.py gro-app: $(cat "$work/gro.out" "$work/gro.err")"
twenties=$(printf '1000 %.0s' $(seq 20))
expect_gro="ready|recv 20300 1000|recv 1700 1200|sizes ${twenties}300 1200 500|"
[ "$(tr '\n' '|' < "$work/gro.out")" = "$expect_gro" ] ||
    fail "UDP_GRO receives (20 of 1000 and a 300 as one, then 1200 and 500 as one): $(cat "$work/gro.out")"

note "eta-stat counts the datagrams"
read -r in1 out1 noport1 kudp1 <<< "$(stat_udp)"
echo "    udp_in $((in1 - in0)), udp_out $((out1 - out0)), udp_no_port $((noport1 - noport0)), to the kernel $kudp0 -> $kudp1"
# echo: 33 each way; relay: 24 in, 24 out; trunc: 2 each way
[ $((in1 - in0)) -ge 59 ] || fail "eta-stat: udp_in grew by $((in1 - in0)), expected at least 59"
[ $((out1 - out0)) -ge 59 ] || fail "eta-stat: udp_out grew by $((out1 - out0)), expected at least 59"
# The closed port's datagram: MARS answers it (udp_no_port) on a port of its
# own; on a port shared with the kernel (ETA_TEST_SHARED=1) it is the kernel's
# (a kernel program may hold the port; the kernel sent the port unreachable
# checked above), counted as a UDP frame handed to the kernel.
if [ "$kudp0" = - ]; then
    [ $((noport1 - noport0)) -ge 1 ] || fail "eta-stat: udp_no_port did not count the closed port's datagram"
else
    [ $((kudp1 - kudp0)) -ge 1 ] || fail "eta-stat: the closed port's datagram was not counted as handed to the kernel ($kudp0 -> $kudp1)"
fi
note "ok"
