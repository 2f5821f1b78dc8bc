#!/usr/bin/env bash
# TCP over IPv6 through eta-ppe for a native DTI program (issue 31, ABI 11):
# dti-echo-server listens on the port's IPv6 address (the lab's
# ETA_LAB_PPE_IP6: dti_bind6 with DTI_BIND6_V6ONLY); a kernel client in the
# peer namespace connects over IPv6, sends 4 MiB of seeded random bytes while
# it reads the echo, half-closes and reads to the end: the sha256 of what
# went and of what came back are equal, and equal to the same exchange with
# a kernel echo server on the kernel link's IPv6 address
# (ETA_LAB_KERNEL_IP6): what eta does, Linux does. eta-stat counts the
# segments in the engine's IPv6 stack. Under ETA_TEST_SHARED=1
# (the port shared with the kernel, issue 29) the eta socket's segments
# stay in the engine and the kernel still answers ping -6.
#   ip6_echo_test.sh ETA_PPE ETA_STAT DTI_ECHO_SERVER
ETA_PPE=$1 ETA_STAT=$2 SERVER=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$SERVER" dti-echo-server
TOOL=$(dirname "$0")/ip6_echo.py
BYTES=$((4 << 20)) SEED=31

ppe_lab6
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"

ip6_before=$(ppe_ip6_segments)

note "dti-echo-server on [$H6] (the engine), a kernel client in the peer"
port=$(free_port)
start_bg srv timeout 150 "$SERVER" --socket "$ETA_LAB_SOCKET" --ip6 "$H6" --port "$port" --count 1 >"$work/srv.out" 2>&1
# Listening, or gone (a refused bind6 fails the test at once, not after the wait).
wait_until 20 eval "grep -q 'listening on port $port' '$work/srv.out' || ! kill -0 $srv_pid"
grep -q "listening on port $port" "$work/srv.out" || fail "dti-echo-server did not listen: $(cat "$work/srv.out")"
eta=$(peer timeout 120 python3 "$TOOL" client "$H6" "$port" "$BYTES" "$SEED") || fail "the client over the engine failed: $eta"
wait "$srv_pid" || fail "dti-echo-server exited $?: $(cat "$work/srv.out")"
grep -q "served 1 connections" "$work/srv.out" || fail "dti-echo-server did not serve the connection: $(cat "$work/srv.out")"
read -r _ sent _ got n _ <<<"$eta"
[ "$sent" = "$got" ] && [ "$n" -eq "$BYTES" ] || fail "over the engine: $eta"
[[ "$eta" == *"local [$ETA_LAB_PEER_IP6]:"* ]] || fail "the client's address is not the peer's IPv6 one: $eta"

# The engine publishes its counters every 10 ms while it works and when it
# naps: the count may trail the exchange by a moment.
ip6_grew() { [ $(($(ppe_ip6_segments) - ip6_before)) -ge $((BYTES / 1500)) ]; }
wait_until 20 ip6_grew || true
ip6_after=$(ppe_ip6_segments)
segs=$((ip6_after - ip6_before))
# 4 MiB in segments of at most one MSS (1,440 bytes at MTU 1500): about 2,900.
[ "$segs" -ge $((BYTES / 1500)) ] ||
    fail "eta-stat counts $segs IPv6 segments in the engine's stack for $BYTES bytes received over IPv6"

note "the same exchange with a kernel echo server on [$ETA_LAB_KERNEL_IP6] (the kernel link)"
kport=$(free_port)
start_bg ksrv timeout 150 python3 "$TOOL" server "$ETA_LAB_KERNEL_IP6" "$kport" >"$work/ksrv.out" 2>&1
wait_until 20 grep -q listening "$work/ksrv.out" || fail "the kernel echo server did not listen: $(cat "$work/ksrv.out")"
kern=$(peer timeout 120 python3 "$TOOL" client "$ETA_LAB_KERNEL_IP6" "$kport" "$BYTES" "$SEED") ||
    fail "the client over the kernel link failed: $kern"
wait "$ksrv_pid" || fail "the kernel echo server exited $?"
read -r _ ksent _ kgot kn _ <<<"$kern"
[ "$ksent" = "$sent" ] && [ "$kgot" = "$got" ] && [ "$kn" -eq "$n" ] ||
    fail "the engine's exchange differs from the kernel's: engine '$eta', kernel '$kern'"

if [ "$(ppe_json "d['ports'][0]['kernel'] is None")" = False ]; then
    note "shared port: the kernel still answers ping -6 $H6"
    out=$(peer ping -6 -n -c 3 -i 0.2 -W 5 "$H6" 2>&1) || fail "ping -6 $H6 on the shared port: $out"
fi
ppe_stop
echo "ip6_echo: $BYTES bytes each way over IPv6 through the engine (sha256 ${sent:0:16}...), as over the kernel link; $segs IPv6 segments in the engine - held"
