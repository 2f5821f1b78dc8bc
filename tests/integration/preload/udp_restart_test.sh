#!/usr/bin/env bash
# A UDP socket on INADDR_ANY (a hybrid: the PPE's half and the kernel's) under
# eta-run across kill -9 of eta-ppe and a new one on the same socket (issue 31):
#   udp_restart_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# - udp_hybrid.py echo, blocking in recvfrom, echoes the peer's datagram
#   through the PPE (the engine's udp_in counts it);
# - eta-ppe killed: it echoes a datagram sent to 127.0.0.1 (its kernel half,
#   alone);
# - a new eta-ppe: the program re-attaches by itself (its blocked receive
#   sleeps at most until the next try), its PPE half comes back (the shim's
#   line), and it echoes the peer's datagram through the new PPE (its udp_in
#   counts it). Before: the socket stayed the kernel's alone for good;
# - the socket is a member of a group (IP_ADD_MEMBERSHIP naming the PPE's
#   address): the peer's datagram to the group is echoed through the first
#   PPE and, the membership joined again by the shim, through the new one,
#   each time with the IP_TTL the program set before bind (carried to each PPE);
# - a second such socket (another group: with IP_MULTICAST_ALL, Linux's
#   default, the first socket's membership would bring its datagrams too),
#   also with IP_MULTICAST_IF naming the PPE's address
#   (which the kernel socket of an unshared port cannot take: the shim holds
#   it), goes through execve first (udp_hybrid.py echo-exec): the new image
#   reads IP_MULTICAST_IF back, echoes the group's datagram through the first
#   PPE and, its membership carried in the exec handover and joined again,
#   through the new one. Before: the new image had no record of either;
# - a third (group 239.18.7.9) is passed over SCM_RIGHTS to a process of its
#   own (udp_hybrid.py echo-pass), the sender's copy closed: the receiver
#   likewise, its record the sender's shim wrote beside the pass.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
ppe_config
ppe_start "$work/ppe.toml"

udp_in() { ppe_json 'sum(s["udp_in"] for e in d["engines"] for s in e["stacks"])'; }
# The engine publishes its counters every 10 ms while it works and when it
# naps: the count may trail the echo by a moment.
udp_in_above() { ppe_true "sum(s['udp_in'] for e in d['engines'] for s in e['stacks']) > $1"; }
show() { cat "$work"/echo.* "$work"/exec.* "$work"/pass.* 2>/dev/null || true; }

ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_hybrid.py" echo 239.18.7.7 "$ETA_LAB_PPE_IP" > "$work/echo.out" 2> "$work/echo.err" &
_bg_pids+=($!)
wait_until 30 grep -q '^ready ' "$work/echo.out" || { show; fail "udp_hybrid.py echo did not bind"; }
port=$(awk '/^ready /{print $2}' "$work/echo.out")
grep -q "accelerated (UDP on 0.0.0.0:$port on the PPE and the kernel)" "$work/echo.err" ||
    { show; fail "the socket on 0.0.0.0:$port is not a hybrid"; }
ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_hybrid.py" echo-exec 239.18.7.8 "$ETA_LAB_PPE_IP" > "$work/exec.out" 2> "$work/exec.err" &
_bg_pids+=($!)
exec_pid=$!
wait_until 30 eval "grep -q '^ready ' '$work/exec.out' || ! kill -0 $exec_pid" || true
grep -q '^ready ' "$work/exec.out" || { show; fail "udp_hybrid.py echo-exec did not come up after its exec"; }
xport=$(awk '/^ready /{print $2}' "$work/exec.out")
grep -q "accelerated (UDP on 0.0.0.0:$xport on the PPE and the kernel)" "$work/exec.err" ||
    { show; fail "the socket on 0.0.0.0:$xport is not a hybrid"; }
grep -qx "ready $xport mcast_if $ETA_LAB_PPE_IP" "$work/exec.out" ||
    { show; fail "IP_MULTICAST_IF after exec is not the PPE's address the program set"; }
ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/udp_hybrid.py" echo-pass 239.18.7.9 "$ETA_LAB_PPE_IP" > "$work/pass.out" 2> "$work/pass.err" &
_bg_pids+=($!)
pass_pid=$!
wait_until 30 eval "grep -q '^ready ' '$work/pass.out' || ! kill -0 $pass_pid" || true
grep -q '^ready ' "$work/pass.out" || { show; fail "udp_hybrid.py echo-pass's receiver did not come up"; }
pport=$(awk '/^ready /{print $2}' "$work/pass.out")
grep -qx "ready $pport mcast_if $ETA_LAB_PPE_IP" "$work/pass.out" ||
    { show; fail "IP_MULTICAST_IF in the receiver of the socket is not the PPE's address the sender set"; }

note "the peer's datagram through the PPE"
in0=$(udp_in)
peer timeout 60 "$py" "$here/udp_peer.py" once "$ETA_LAB_PPE_IP" "$port" || { show; fail "no echo through the PPE"; }
wait_until 20 udp_in_above "$in0" || fail "the PPE did not carry the datagram (udp_in $in0 -> $(udp_in))"

# The peer sends one datagram to the group and waits for the echo, which
# comes with the TTL the program set before bind (IP_TTL 9, carried to the
# PPE at bind and to the new PPE with the hybrid's half).
group_echo() {
    local port=${1:-$port} group=${2:-239.18.7.7}
    peer timeout 30 "$py" -c "
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('$ETA_LAB_PEER_IP'))
s.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL
s.settimeout(20)
s.sendto(b'to the group', ('$group', $port))
d, anc, _f, a = s.recvmsg(100, 64)
ttl = [struct.unpack('=i', c[2][:4])[0] for c in anc if c[:2] == (socket.IPPROTO_IP, 2)]
assert d == b'to the group' and a[0] == '$ETA_LAB_PPE_IP', (d, a)
assert ttl == [9], 'the echo came with TTL %s, not the IP_TTL 9 the program set' % ttl"
}
note "the peer's datagram to the group the socket joined, through the PPE"
group_echo || { show; fail "no echo of the group's datagram through the PPE"; }
group_echo "$xport" 239.18.7.8 || { show; fail "no echo of the group's datagram through the PPE after exec"; }
group_echo "$pport" 239.18.7.9 || { show; fail "no echo of the group's datagram through the PPE after SCM_RIGHTS"; }

note "eta-ppe killed (-9): the kernel half alone answers 127.0.0.1"
ppe_kill9
timeout 60 "$py" "$here/udp_peer.py" once 127.0.0.1 "$port" || { show; fail "no echo from the kernel half while the PPE is away"; }

note "a new eta-ppe: the PPE half comes back"
ppe_start "$work/ppe.toml"
wait_until 60 grep -q "UDP on 0.0.0.0:$port on the new PPE again" "$work/echo.err" ||
    { show; fail "the hybrid's PPE half did not come back with the new PPE"; }
[ "$(grep -c 're-attached to the PPE' "$work/echo.err")" -eq 1 ] || { show; fail "expected exactly one re-attach"; }
in0=$(udp_in)
peer timeout 60 "$py" "$here/udp_peer.py" once "$ETA_LAB_PPE_IP" "$port" || { show; fail "no echo through the new PPE"; }
wait_until 20 udp_in_above "$in0" || fail "the new PPE did not carry the datagram (udp_in $in0 -> $(udp_in))"
note "the group's datagram through the new PPE (the membership joined again)"
group_echo || { show; fail "no echo of the group's datagram through the new PPE: the membership did not come back"; }
wait_until 60 grep -q "UDP on 0.0.0.0:$xport on the new PPE again" "$work/exec.err" ||
    { show; fail "the exec'd hybrid's PPE half did not come back with the new PPE"; }
note "the group's datagram through the new PPE to the socket that went through exec"
group_echo "$xport" 239.18.7.8 ||
    { show; fail "no echo of the group's datagram through the new PPE after exec: the membership did not come back"; }
wait_until 60 grep -q "UDP on 0.0.0.0:$pport on the new PPE again" "$work/pass.err" ||
    { show; fail "the passed hybrid's PPE half did not come back with the new PPE"; }
note "the group's datagram through the new PPE to the socket received over SCM_RIGHTS"
group_echo "$pport" 239.18.7.9 ||
    { show; fail "no echo of the group's datagram through the new PPE after SCM_RIGHTS: the membership did not come back"; }
grep -c '^echoed' "$work/echo.out" | sed 's/^/    datagrams echoed: /'
note "ok"
