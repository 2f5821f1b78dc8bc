#!/usr/bin/env bash
# Local connections over IPv6 inside the engine for native DTI programs
# (issue 29; mars/README.md "Local connections"): dti-echo-server listens on
# the port's IPv6 address (the lab's ETA_LAB_PPE_IP6, dti_bind6 with
# DTI_BIND6_V6ONLY) and dti-local6-client, on the same host, connects to it
# with dti_connect6: both ends are sockets of the engine's stack, the bytes
# come back unchanged, each end names the address on both sides, and
# eta-stat counts the connection as local. The same to the port's
# link-local address (fe80:: and the modified EUI-64 of its MAC; DTI names
# no scope: the engine serves one port). A connect6 to a port of that address
# nobody listens on is refused (ECONNREFUSED).
#   local6_test.sh ETA_PPE ETA_STAT DTI_ECHO_SERVER DTI_LOCAL6_CLIENT
ETA_PPE=$1 ETA_STAT=$2 SERVER=$3 CLIENT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$SERVER" dti-echo-server
need_built "$CLIENT" dti-local6-client
MESSAGES=64 SIZE=16384

ppe_lab6
ppe_start "$work/ppe.toml"
mac=$(cat "/sys/class/net/$ETA_LAB_PPE_IFACE/address")
LL=$(python3 -c "import ipaddress, sys
m = bytes.fromhex(sys.argv[1].replace(':', ''))
print(ipaddress.IPv6Address(b'\xfe\x80' + bytes(6) + bytes([m[0] ^ 2]) + m[1:3] + b'\xff\xfe' + m[3:]))" "$mac")
# DAD has let both addresses go once the peer's pings are answered.
ppe_ping6 "$H6" "of eta-ppe's start"
ppe_ping6 "$LL%$ETA_LAB_PEER_IFACE"

sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }
conns0=$(sum local_conns) frames0=$(sum local_frames)

# One exchange: dti-echo-server on [ADDR]:port, the client to it.
exchange() {
    local addr=$1 port out
    port=$(free_port)
    start_bg srv timeout 120 "$SERVER" --socket "$ETA_LAB_SOCKET" --ip6 "$addr" --port "$port" --count 1 >"$work/srv.out" 2>&1
    wait_until 20 eval "grep -q 'listening on port $port' '$work/srv.out' || ! kill -0 $srv_pid"
    grep -q "listening on port $port" "$work/srv.out" || fail "dti-echo-server on [$addr] did not listen: $(cat "$work/srv.out")"
    out=$(timeout 60 "$CLIENT" --socket "$ETA_LAB_SOCKET" --ip6 "$addr" --port "$port" --messages $MESSAGES --size $SIZE 2>&1) ||
        fail "the local client to [$addr]:$port failed: $out"
    wait "$srv_pid" || fail "dti-echo-server exited $?: $(cat "$work/srv.out")"
    grep -q "served 1 connections" "$work/srv.out" || fail "dti-echo-server did not serve the connection: $(cat "$work/srv.out")"
    [[ "$out" == "ok: $MESSAGES messages, $((MESSAGES * SIZE)) bytes echoed local [$addr]:"*" peer [$addr]:$port" ]] ||
        fail "to [$addr]:$port: $out"
    echo "$out"
}

note "to the port's address [$H6]: both ends in the engine"
exchange "$H6"
note "to the port's link-local address [$LL]"
exchange "$LL"

note "to a port of [$H6] nobody listens on: refused"
port=$(free_port)
out=$(timeout 30 "$CLIENT" --socket "$ETA_LAB_SOCKET" --ip6 "$H6" --port "$port" --refused 2>&1) ||
    fail "a connect6 to [$H6]:$port with no listener: $out"

# The engine publishes its counters every 10 ms while it works and when it naps.
counted() { [ $(($(sum local_conns) - conns0)) -ge 2 ]; }
wait_until 20 counted || true
conns=$(($(sum local_conns) - conns0)) frames=$(($(sum local_frames) - frames0))
[ "$conns" -eq 2 ] || fail "eta-stat counts $conns local connections, not 2"
# Each message crosses the loop twice (out and echoed) in segments of at most one MSS.
[ "$frames" -ge $((2 * MESSAGES * SIZE / 1500)) ] ||
    fail "eta-stat counts $frames local frames for $((MESSAGES * SIZE)) bytes echoed twice"
ppe_stop
echo "local6: $((MESSAGES * SIZE)) bytes echoed to [$H6] and to [$LL] inside the engine, a connect6 with no listener refused; $conns local connections, $frames local frames - held"
