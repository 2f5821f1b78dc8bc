#!/usr/bin/env bash
# IPv6 flows spread over two engines (issue 31), as IPv4's do: on a lab whose
# PPE runs 2 engines
#   - neighbour discovery: the peer's solicitations for the port's IPv6
#     address reach both engines' stacks (each keeps its own neighbour cache)
#     and only the first answers (advertisements counted on engine 0 alone);
#   - a native server (dti-echo-server --ip6 on the port's address: a
#     V6ONLY listener group) serving 16 IPv6 connections of kernel clients
#     in the peer, byte-exact, accepted on both engines;
#   - python3 on [::] under eta-run --require (one listener group taking both
#     families on every engine): 32 IPv6 connections from a kernel client in
#     the peer, each echoed byte-exact, are accepted on both engines
#     (eta-stat's per-engine tcp_passive_opens), and IPv4 clients of the
#     same listener still work;
#   - a program under eta-run --require connecting out over IPv6 32 times to
#     a kernel server in the peer: the connections are opened on both engines
#     (tcp_active_opens), each echoed byte-exact, none reset and no segment
#     of theirs found no socket on the engine it was steered to (each
#     engine picked ports whose flows it owns: dti_flow_owner6);
#   - a native client (dti-echo-client --ip6 --bind-port P) bound to [::]:P
#     before its connect6, 16 times on 16 ports: libdti moves the socket to
#     its flow's owner where that is not the engine it was made on
#     (dti__place_for_connect6, the source from the region's app_ip6), so
#     every exchange echoes and nothing is reset; the same 12 times to the
#     peer's link-local address (the source: the region's app_ll6).
# With ETA_TEST_SHARED=1 the advertisements are the kernel's (engine 0 hands
# solicitations to it, once); the IPv6 clients run there too (their ports
# the kernel's picks, held by their placeholders: issues 29 and 31).
#   engines6_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT DTI_ECHO_CLIENT DTI_ECHO_SERVER
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4 CLIENT=$5 SERVER=$6
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
need_built "$CLIENT" dti-echo-client
need_built "$SERVER" dti-echo-server
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")/../dti" && pwd)/ip6_echo.py
PY=/usr/bin/python3
. "$(dirname "$0")/engines_lib.sh"
N=32 BYTES=65536

ppe_lab6 --engines 2
ppe_start "$work/ppe.toml"
ppe_true "len(d['engines']) == 2" || fail "eta-stat does not show 2 engines"
ppe_ping6 "$H6" "of eta-ppe's start"
shared=$(ppe_json "d['ports'][0]['kernel'] is not None")
# per_engine KEY: the stack counter KEY of each engine, one number each.
per_engine() { ppe_json "' '.join(str(e['stacks'][0]['$1']) for e in d['engines'])"; }
# grew_on BEFORE AFTER: which engines' numbers grew ("0 1", "0", ...).
grew_on() { "$PY" -c "import sys; b, a = sys.argv[1].split(), sys.argv[2].split(); print(' '.join(str(i) for i, (x, y) in enumerate(zip(b, a)) if int(y) > int(x)))" "$1" "$2"; }
# opened_on_both ACT0 N WHAT: N more active opens than ACT0 (per_engine's),
# on both engines, and no segment of them reset or without its socket since
# rst0 (published every 10 ms while the engines work: wait for all N).
opened_on_both() {
    local act0=$1 n=$2 what=$3
    wait_until 20 ppe_true "sum(e['stacks'][0]['tcp_active_opens'] for e in d['engines']) - sum(int(x) for x in '$act0'.split()) >= $n" ||
        fail "active opens $act0 -> $(per_engine tcp_active_opens): not $n more"
    [ "$(grew_on "$act0" "$(per_engine tcp_active_opens)")" = "0 1" ] ||
        fail "$what were not opened on both engines: $act0 -> $(per_engine tcp_active_opens)"
    ppe_true "sum(e['stacks'][0]['tcp_resets_in'] + e['stacks'][0]['drop_tcp_no_socket'] for e in d['engines']) == $rst0" ||
        fail "a segment of $what was reset or found no socket on its engine: $(ppe_json "[(e['stacks'][0]['tcp_resets_in'], e['stacks'][0]['drop_tcp_no_socket']) for e in d['engines']]")"
}

note "neighbour discovery: solicitations reach both engines, engine 0 alone answers"
ns0=$(per_engine nd_ns_in) na0=$(per_engine nd_na_out)
for i in 1 2 3; do
    peer ip -6 neigh flush dev "$ETA_LAB_PEER_IFACE"
    peer ping -6 -n -c 1 -W 2 "$H6" >/dev/null || fail "ping -6 $H6 after the peer forgot the PPE's address"
done
wait_until 20 eval '[ "$(grew_on "$ns0" "$(per_engine nd_ns_in)")" = "0 1" ]' ||
    fail "not every engine's stack saw the peer's solicitations: $ns0 -> $(per_engine nd_ns_in)"
if [ "$shared" = True ]; then
    [ "$(grew_on "$na0" "$(per_engine nd_na_out)")" = "" ] ||
        fail "on a shared port the kernel answers solicitations, not the engines: $na0 -> $(per_engine nd_na_out)"
else
    wait_until 20 eval '[ "$(grew_on "$na0" "$(per_engine nd_na_out)")" = "0" ]' ||
        fail "advertisements not from engine 0 alone: $na0 -> $(per_engine nd_na_out)"
fi

note "dti-echo-server on [$H6] (native, V6ONLY): 16 IPv6 connections from the peer, accepted on both engines"
port=$(free_port)
opens0=$(engine_opens)
start_bg dsrv timeout 300 "$SERVER" --socket "$ETA_LAB_SOCKET" --ip6 "$H6" --port "$port" --count 16 >"$work/dsrv.out" 2>&1
wait_until 20 eval "grep -q 'listening on port $port' '$work/dsrv.out' || ! kill -0 $dsrv_pid"
grep -q "listening on port $port" "$work/dsrv.out" || fail "dti-echo-server did not listen: $(cat "$work/dsrv.out")"
for i in $(seq 1 16); do
    r=$(peer timeout 60 "$PY" "$TOOL" client "$H6" "$port" $BYTES "$i") || fail "IPv6 client $i of dti-echo-server failed: $r"
    read -r _ sent _ got n _ <<<"$r"
    [ "$sent" = "$got" ] && [ "$n" -eq $BYTES ] || fail "IPv6 client $i of dti-echo-server: the echo differs: $r"
done
wait "$dsrv_pid" || fail "dti-echo-server exited $?: $(cat "$work/dsrv.out")"
every_engine_took "$opens0" "16 IPv6 connections to dti-echo-server"

note "python3 on [::] under eta-run: $N IPv6 connections from the peer, accepted on both engines"
port=$(free_port)
opens0=$(engine_opens)
ETA_LOG=fallback,accel start_bg srv timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$PY" "$TOOL" server :: "$port" $((N + 4)) >"$work/srv.out" 2>"$work/srv.err"
wait_until 30 eval "grep -q listening '$work/srv.out' || ! kill -0 $srv_pid"
grep -q listening "$work/srv.out" || fail "the server did not listen: $(cat "$work/srv.out" "$work/srv.err")"
grep -qE "listening on \[::\]:$port on the PPE" "$work/srv.err" || fail "the [::] listener is not the PPE's: $(cat "$work/srv.err")"
for i in $(seq 1 $N); do
    r=$(peer timeout 60 "$PY" "$TOOL" client "$H6" "$port" $BYTES "$i") || fail "IPv6 client $i failed: $r"
    read -r _ sent _ got n _ <<<"$r"
    [ "$sent" = "$got" ] && [ "$n" -eq $BYTES ] || fail "IPv6 client $i: the echo differs: $r"
done
every_engine_took "$opens0" "$N IPv6 connections to [::]"
for i in 1 2 3 4; do
    r=$(peer timeout 60 "$PY" "$TOOL" client "$ETA_LAB_PPE_IP" "$port" $BYTES "$i") || fail "IPv4 client $i failed: $r"
    read -r _ sent _ got _ <<<"$r"
    [ "$sent" = "$got" ] || fail "IPv4 client $i of the dual-stack listener: $r"
done
wait "$srv_pid" || fail "the server exited $?: $(cat "$work/srv.err")"
[ "$(grep -c "^conn peer \[$ETA_LAB_PEER_IP6\]:[0-9]* local \[$H6\]:$port$" "$work/srv.out")" -eq $N ] ||
    fail "the server did not accept $N IPv6 connections with their names: $(cat "$work/srv.out")"

note "a program under eta-run connecting out over IPv6 $N times: on both engines, each on a port its engine owns"
pport=$(free_port)
start_bg psrv peer timeout 300 "$PY" "$TOOL" server "$ETA_LAB_PEER_IP6" "$pport" $N >"$work/psrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/psrv.out' || ! kill -0 $psrv_pid"
grep -q listening "$work/psrv.out" || fail "the peer's server did not listen: $(cat "$work/psrv.out")"
cat >"$work/clients.py" <<'EOF'
import random, socket, sys
host, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    data = random.Random(i).randbytes(size)
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        got.extend(b)
    s.close()
    if got != data:
        sys.exit(f"connection {i}: {len(got)} bytes back, not the {size} sent")
print(f"{n} connections echoed")
EOF
act0=$(per_engine tcp_active_opens) rst0=$(ppe_json "sum(e['stacks'][0]['tcp_resets_in'] + e['stacks'][0]['drop_tcp_no_socket'] for e in d['engines'])")
out=$(ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$PY" "$work/clients.py" "$ETA_LAB_PEER_IP6" "$pport" $N $BYTES 2>"$work/cli.err") ||
    fail "the clients under eta-run failed: $out $(tail -5 "$work/cli.err")"
wait "$psrv_pid" || fail "the peer's server exited $?: $(tail -5 "$work/psrv.out")"
[ "$(grep -cE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$ETA_LAB_PEER_IP6\]:$pport\)" "$work/cli.err")" -eq $N ] ||
    fail "not every connect was the PPE's: $(head -5 "$work/cli.err")"
opened_on_both "$act0" "$N" "the $N IPv6 connects"
note "active opens per engine: $act0 -> $(per_engine tcp_active_opens)"

note "a native client bound to [::]:P before connect6, 16 ports: placed on its flow's owner"
nport=$(free_port)
start_bg nsrv peer timeout 300 "$PY" "$TOOL" server "$ETA_LAB_PEER_IP6" "$nport" 16 >"$work/nsrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/nsrv.out' || ! kill -0 $nsrv_pid"
grep -q listening "$work/nsrv.out" || fail "the peer's server did not listen: $(cat "$work/nsrv.out")"
act0=$(per_engine tcp_active_opens)
for p in $(seq 41001 41016); do
    out=$(timeout 60 "$CLIENT" --socket "$ETA_LAB_SOCKET" --ip6 "$ETA_LAB_PEER_IP6" --port "$nport" --bind-port "$p" \
        --messages 4 --size 10000 2>&1) || fail "dti-echo-client bound to [::]:$p: $out"
    [ "$out" = "ok: 4 messages, 40000 bytes echoed" ] || fail "dti-echo-client bound to [::]:$p: $out"
done
wait "$nsrv_pid" || fail "the peer's server exited $?: $(tail -5 "$work/nsrv.out")"
[ "$(grep -c "^conn peer \[$H6\]:4[0-9]* " "$work/nsrv.out")" = 16 ] ||
    fail "the peer did not see 16 connections from [$H6] on the bound ports: $(cat "$work/nsrv.out")"
opened_on_both "$act0" 16 "16 bound connects"

# The peer's link-local address (fe80:: and its MAC's modified EUI-64).
pll=$(python3 -c "
import ipaddress, sys
m = bytes.fromhex(sys.argv[1].replace(':', ''))
print(ipaddress.IPv6Address(b'\xfe\x80' + bytes(6) + bytes([m[0] ^ 2]) + m[1:3] + b'\xff\xfe' + m[3:]))" \
    "$(peer cat "/sys/class/net/$ETA_LAB_PEER_IFACE/address")")
note "the same bound to [::]:P, 12 ports, to the peer's link-local address [$pll]"
lport=$(free_port)
start_bg lsrv peer timeout 300 "$PY" "$TOOL" server :: "$lport" 12 >"$work/lsrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/lsrv.out' || ! kill -0 $lsrv_pid"
grep -q listening "$work/lsrv.out" || fail "the peer's [::] server did not listen: $(cat "$work/lsrv.out")"
act0=$(per_engine tcp_active_opens)
for p in $(seq 42001 42012); do
    out=$(timeout 60 "$CLIENT" --socket "$ETA_LAB_SOCKET" --ip6 "$pll" --port "$lport" --bind-port "$p" \
        --messages 4 --size 10000 2>&1) || fail "dti-echo-client bound to [::]:$p, to [$pll]: $out"
    [ "$out" = "ok: 4 messages, 40000 bytes echoed" ] || fail "dti-echo-client bound to [::]:$p, to [$pll]: $out"
done
wait "$lsrv_pid" || fail "the peer's [::] server exited $?: $(tail -5 "$work/lsrv.out")"
[ "$(grep -c "^conn peer \[fe80:" "$work/lsrv.out")" = 12 ] ||
    fail "the peer did not see 12 connections from a link-local address: $(cat "$work/lsrv.out")"
opened_on_both "$act0" 12 "12 bound connects to a link-local address"
ppe_stop
echo "preload_engines6: IPv6 on 2 engines: $N connections in and $N out on both engines, echoed byte-exact; ND answered once - held"
