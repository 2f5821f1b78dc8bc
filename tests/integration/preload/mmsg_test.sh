#!/usr/bin/env bash
# sendmmsg on an accelerated UDP socket in one batch (issue 31), and recvmmsg.
#   mmsg_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT MMSG_PROBE
# mmsg-probe (mmsg_probe.c: its lines) under eta-run --require against an
# echo server in the peer (mmsg_peer.py, [::] on two ports), over IPv4 (an
# AF_INET socket) and IPv6 (AF_INET6): 64 datagrams of 1..1472 bytes (IPv6
# 1452) in one call, their echoes byte-exact and in order through recvmmsg
# with names; a call mixing two ports (MSG_DONTWAIT); a connected socket's
# call without names; a name too short in the middle of the vector (the
# messages before it sent and counted, the retry from it its EINVAL, the
# rest sent); on IPv6 an AF_INET name on an IPV6_V6ONLY socket in the middle
# (ENETUNREACH on its retry); a socket on the wildcard (the shim's hybrid)
# sending one call alternating between the PPE's peer (the engine) and the
# kernel link's (its kernel half), all echoed. The same program without eta on the kernel
# link prints the same lines (Linux's answers). The shim's log says every
# socket was the PPE's, none fell back; the engine's udp_out counts at least
# the datagrams the probe sent.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4 PROBE=$5
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
need_built "$PROBE" mmsg-probe
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

ppe_lab6
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
UDP_OUT="sum(s['udp_out'] for e in d['engines'] for s in e['stacks'])"

pa=$(free_port) pb=$(free_port)
rm -f "$work/echo.ready"
start_bg echo peer timeout 300 "$py" "$here/mmsg_peer.py" echo "$pa" "$pb" "$work/echo.ready" >"$work/echo.out" 2>&1
wait_until 20 eval "[ -f '$work/echo.ready' ] || ! kill -0 $echo_pid" || true
[ -f "$work/echo.ready" ] || fail "the peer's echo server did not bind: $(cat "$work/echo.out")"

# The probe's datagrams sent per family (mmsg_probe.c): 64 + 16 + 32 + 7
# (+ 2 on IPv6).
sent4=119 sent6=121
for fam in 4 6; do
    if [ $fam = 4 ]; then via=$ETA_LAB_PEER_IP kpeer=$ETA_LAB_KERNEL_PEER_IP; else via=$ETA_LAB_PEER_IP6 kpeer=$ETA_LAB_KERNEL_PEER_IP6; fi
    note "IPv$fam: mmsg-probe on the kernel link ($kpeer), without eta"
    timeout 120 "$PROBE" $fam "$kpeer" "$pa" "$pb" >"$work/kernel$fam.out" 2>&1 ||
        fail "mmsg-probe on the kernel link: $(cat "$work/kernel$fam.out")"
    sed 's/^/    /' "$work/kernel$fam.out"
    note "IPv$fam: mmsg-probe under eta-run --require to the peer ($via) through the engine"
    u0=$(ppe_json "$UDP_OUT")
    ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$PROBE" $fam "$via" "$pa" "$pb" >"$work/eta$fam.out" 2>"$work/eta$fam.err" ||
        fail "mmsg-probe under eta-run: $(cat "$work/eta$fam.out" "$work/eta$fam.err")"
    diff -u "$work/kernel$fam.out" "$work/eta$fam.out" ||
        fail "IPv$fam sendmmsg/recvmmsg answered otherwise through the PPE than on the kernel (- kernel, + eta)"
    want=$((fam == 4 ? sent4 : sent6))
    # (The engines publish their counters every 10 ms while they work and
    # when they nap: a count read at once may trail what they did.)
    wait_until 10 ppe_true "$UDP_OUT >= $((u0 + want))" ||
        fail "IPv$fam: the engine's udp_out went from $u0 to $(ppe_json "$UDP_OUT"), not by the $want datagrams sent"
    nacc=$(grep -c "accelerated (UDP)" "$work/eta$fam.err" || true)
    [ "$nacc" -eq $((fam == 4 ? 3 : 4)) ] ||
        fail "IPv$fam: $nacc of the probe's sockets accelerated: $(cat "$work/eta$fam.err")"
    if grep -E 'kernel socket|fallback' "$work/eta$fam.err"; then
        fail "IPv$fam: a socket of the probe went to the kernel"
    fi
    note "IPv$fam: a hybrid (bound to the wildcard): one call alternating the PPE's peer and the kernel link's"
    u0=$(ppe_json "$UDP_OUT")
    ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$PROBE" hybrid $fam "$via" "$kpeer" "$pa" >"$work/hyb$fam.out" 2>"$work/hyb$fam.err" ||
        fail "mmsg-probe hybrid: $(cat "$work/hyb$fam.out" "$work/hyb$fam.err")"
    sed 's/^/    /' "$work/hyb$fam.out"
    grep -cx "hybrid ret=16 lens=ok echo A=8 B=8 ok" "$work/hyb$fam.out" >/dev/null ||
        fail "IPv$fam hybrid: $(cat "$work/hyb$fam.out")"
    grep -c "on the PPE and the kernel" "$work/hyb$fam.err" >/dev/null ||
        fail "IPv$fam: the wildcard socket is not a hybrid: $(cat "$work/hyb$fam.err")"
    wait_until 10 ppe_true "$UDP_OUT >= $((u0 + 8))" ||
        fail "IPv$fam hybrid: the engine's udp_out went from $u0 to $(ppe_json "$UDP_OUT"), not by its 8"
done
note "one round trip per batch: 640 datagrams of 64 B in 20 calls (vlen 32), far fewer engine commands than datagrams"
ps=$(free_port)
rm -f "$work/sink.ready"
start_bg sink peer timeout 300 "$py" "$here/mmsg_peer.py" sink "$ps" "$work/sink.ready" >"$work/sink.out" 2>&1
wait_until 20 eval "[ -f '$work/sink.ready' ] || ! kill -0 $sink_pid" || true
[ -f "$work/sink.ready" ] || fail "the peer's sink did not bind: $(cat "$work/sink.out")"
COMMANDS="sum(e['commands'] for e in d['engines'])"
c0=$(ppe_json "$COMMANDS") u0=$(ppe_json "$UDP_OUT")
ETA_LOG=fallback timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$PROBE" flood 4 "$ETA_LAB_PEER_IP" "$ps" 640 >"$work/flood.out" 2>&1 || fail "the flood: $(cat "$work/flood.out")"
grep -c "^flood 640 datagrams" "$work/flood.out" >/dev/null || fail "the flood did not send 640: $(cat "$work/flood.out")"
# Once a snapshot shows the 640 sent, it shows the commands that sent them.
wait_until 10 ppe_true "$UDP_OUT >= $((u0 + 640))" ||
    fail "the engine's udp_out went from $u0 to $(ppe_json "$UDP_OUT"), not by the flood's 640"
c1=$(ppe_json "$COMMANDS") u1=$(ppe_json "$UDP_OUT")
echo "    $(cat "$work/flood.out"); engine commands $c0 -> $c1, udp_out $u0 -> $u1"
# 20 SEND_DGRAMS, and the attachment's and the socket's own commands; a round
# trip per datagram (the shim before issue 31) is 640 and more.
[ $((c1 - c0)) -lt 160 ] || fail "the flood took $((c1 - c0)) engine commands for 640 datagrams in 20 calls: not batched"
peer "$py" -c "
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.sendto(b'quit', ('::1', $ps))"
wait "$sink_pid" || fail "the peer's sink exited $?: $(cat "$work/sink.out")"
echo "    the peer's $(cat "$work/sink.out")"
peer "$py" -c "
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.sendto(b'quit', ('::1', $pa))"
wait "$echo_pid" || fail "the peer's echo server exited $?: $(cat "$work/echo.out")"
note "ok"
