#!/usr/bin/env bash
# An unmodified program's dual-stack listener over IPv6 through the engine
# (issue 31): python3 under eta-run --require listens on [::] (IPV6_V6ONLY
# off: the shim's hybrid listener, whose PPE half now binds [::] in the
# engine, sock6.c); from the peer a kernel client connects to the port's
# IPv6 address (ETA_LAB_PPE_IP6, which only the engine holds on this lab)
# and sends 4 MiB while it reads the echo: sha256 equal both ways and equal
# to the same exchange with the same server on the kernel link. accept() and
# getsockname() give the program sockaddr_in6 with the real IPv6 addresses;
# an IPv4 client of the same listener still goes through the PPE, shown
# v4-mapped (the dual-stack hybrid kept working). eta-stat counts the IPv6
# packets in the engine's stack and the program's connection accepted
# through the PPE (none from the kernel half). Then an eta-run --require
# client connects over IPv6 to a kernel server in the peer (on-link of the
# port's address6: the shim's decision from eta-ppe's "port6" line): through
# the engine (from the PPE's IPv6 address), sha256 both ways. Both the
# server's listener and that client set IPV6_TCLASS 0xb8 (DSCP EF) and
# IP_TOS 0x28 (AF11): nftables counters in the peer see every segment from
# the PPE of the IPv6 connections marked EF and of the IPv4 one AF11, none
# otherwise (each family's own option, carried to the engine and inherited
# by accepted connections, as Linux).
#   ip6_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")/../dti" && pwd)/ip6_echo.py
py=/usr/bin/python3
BYTES=$((4 << 20)) SEED=61

ppe_lab6
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
# The marks of what the PPE sends the peer, counted there (the lab's
# namespace goes with the lab; the table is taken out first anyway).
peer nft -f - <<EOF || fail "nftables counters in the peer namespace"
table inet eta_marks {
    counter s6_ef {}
    counter s6_other {}
    counter s4_af11 {}
    counter s4_other {}
    counter c6_ef {}
    counter c6_other {}
    chain input {
        type filter hook input priority 0;
    }
}
EOF
on_exit "peer nft delete table inet eta_marks 2>/dev/null"
# marked NAME: bytes counted by counter NAME (bytes, not packets: on the vnet
# port the PPE's TSO frames reach the peer whole, a packet each).
marked() { peer nft list counter inet eta_marks "$1" | sed -n 's/.*bytes \([0-9]*\).*/\1/p'; }
# mark_rules PORT DIR "FAMILY saddr ADDR" NAME DSCP: what the PPE sends from
# (DIR sport) or to (dport) PORT, counted in NAME_DSCP when marked DSCP, else NAME_other.
mark_rules() {
    peer nft add rule inet eta_marks input $3 tcp "$2" "$1" "${3%% *}" dscp "$5" counter name "$4_$5" &&
        peer nft add rule inet eta_marks input $3 tcp "$2" "$1" "${3%% *}" dscp != "$5" counter name "$4_other"
}
ip6_before=$(ppe_ip6_segments)
# ip6_grew BEFORE: the engines counted a segment's worth of IPv6 packets for
# each 1500 of $BYTES since BEFORE; for wait_until (they publish their counters
# every 10 ms while they work and when they nap: a count may trail the exchange).
ip6_grew() { [ $(($(ppe_ip6_segments) - $1)) -ge $((BYTES / 1500)) ]; }

note "python3 on [::] under eta-run --require; a kernel client in the peer to [$H6], then to $ETA_LAB_PPE_IP"
port=$(free_port)
mark_rules "$port" sport "ip6 saddr $H6" s6 ef && mark_rules "$port" sport "ip saddr $ETA_LAB_PPE_IP" s4 af11 ||
    fail "nftables rules in the peer namespace"
ETA_LOG=fallback,accel ETA_TEST_TCLASS=0xb8 ETA_TEST_TOS=0x28 start_bg srv timeout 200 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" server :: "$port" 2 >"$work/srv.out" 2>"$work/srv.err"
wait_until 30 eval "grep -q listening '$work/srv.out' || ! kill -0 $srv_pid"
grep -q listening "$work/srv.out" || fail "the server did not listen: $(cat "$work/srv.out" "$work/srv.err")"
grep -qE "listening on \[::\]:$port on the PPE and the kernel" "$work/srv.err" ||
    fail "the [::] listener is not the PPE's: $(cat "$work/srv.err")"
eta=$(peer timeout 120 "$py" "$TOOL" client "$H6" "$port" "$BYTES" "$SEED") || fail "the IPv6 client failed: $eta"
read -r _ sent _ got n _ <<<"$eta"
[ "$sent" = "$got" ] && [ "$n" -eq "$BYTES" ] || fail "over the engine: $eta"
# The program's own counters (eta-stat, while it runs): accepted through the PPE, not the kernel half.
wait_until 10 ppe_true "any(p['accepted'] == 1 and p['kernel_accepted'] == 0 for p in d['programs'])" ||
    fail "eta-stat does not count the IPv6 connection accepted through the PPE: $(ppe_stat --json | head -c 2000)"
# Its socket table names each socket's protocol and family: the listener TCP over IPv6 on [::].
wait_until 10 ppe_true "any(c['proto'] == 'tcp' and c['family'] == 6 and c['state'] == 'LISTEN' and c['local'] == '[::]:$port' for c in d['connections'])" ||
    fail "eta-stat's socket table does not list the listener on [::]:$port as TCP over IPv6: $(ppe_json "[(c['proto'], c['family'], c['state'], c['local']) for c in d['connections']]")"
eta4=$(peer timeout 120 "$py" "$TOOL" client "$ETA_LAB_PPE_IP" "$port" 100000 7) || fail "the IPv4 client failed: $eta4"
read -r _ s4 _ g4 _ <<<"$eta4"
[ "$s4" = "$g4" ] || fail "IPv4 over the dual-stack listener: $eta4"
wait "$srv_pid" || fail "the server exited $?: $(cat "$work/srv.out" "$work/srv.err")"
grep -q "^conn peer \[$ETA_LAB_PEER_IP6\]:[0-9]* local \[$H6\]:$port$" "$work/srv.out" ||
    fail "accept()/getsockname() of the IPv6 connection: $(cat "$work/srv.out")"
grep -q "^conn peer \[::ffff:$ETA_LAB_PEER_IP\]:[0-9]* local \[::ffff:$ETA_LAB_PPE_IP\]:$port$" "$work/srv.out" ||
    fail "accept()/getsockname() of the IPv4 connection (v4-mapped): $(cat "$work/srv.out")"
wait_until 20 ip6_grew "$ip6_before" || true
segs=$(( $(ppe_ip6_segments) - ip6_before ))
[ "$segs" -ge $((BYTES / 1500)) ] || fail "eta-stat counts $segs IPv6 segments in the engine for $BYTES bytes received over IPv6"
[ "$(marked s6_ef)" -ge "$BYTES" ] && [ "$(marked s6_other)" = 0 ] ||
    fail "the listener's IPV6_TCLASS 0xb8: $(marked s6_ef) bytes of its IPv6 connection marked EF, $(marked s6_other) not"
[ "$(marked s4_af11)" -ge 100000 ] && [ "$(marked s4_other)" = 0 ] ||
    fail "the listener's IP_TOS 0x28: $(marked s4_af11) bytes of its IPv4 connection marked AF11, $(marked s4_other) not"

note "an eta-run --require client to a kernel IPv6 server in the peer ([$ETA_LAB_PEER_IP6])"
pport=$(free_port)
mark_rules "$pport" dport "ip6 saddr $H6" c6 ef || fail "nftables rules in the peer namespace"
start_bg psrv peer timeout 150 "$py" "$TOOL" server "$ETA_LAB_PEER_IP6" "$pport" >"$work/psrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/psrv.out' || ! kill -0 $psrv_pid"
grep -q listening "$work/psrv.out" || fail "the peer's server did not listen: $(cat "$work/psrv.out")"
ip6_mid=$(ppe_ip6_segments)
cli=$(ETA_LOG=fallback,accel ETA_TEST_TCLASS=0xb8 ETA_TEST_TOS=0x28 timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" client "$ETA_LAB_PEER_IP6" "$pport" "$BYTES" "$SEED" 2>"$work/cli.err") ||
    fail "the client under eta-run failed: $cli $(cat "$work/cli.err")"
wait "$psrv_pid" || fail "the peer's server exited $?"
read -r _ csent _ cgot cn _ <<<"$cli"
[ "$csent" = "$sent" ] && [ "$cgot" = "$got" ] && [ "$cn" -eq "$BYTES" ] || fail "the client's exchange: '$cli' (the server's was '$eta')"
[[ "$cli" == *"local [$H6]:"* ]] || fail "the client's address is not the PPE's IPv6 one: $cli"
[ "$(marked c6_ef)" -ge "$BYTES" ] && [ "$(marked c6_other)" = 0 ] ||
    fail "the client's IPV6_TCLASS 0xb8 (its IP_TOS 0x28 is IPv4's): $(marked c6_ef) bytes marked EF, $(marked c6_other) not"
# (On a port shared with the kernel too, ETA_TEST_SHARED=1: its kernel
# placeholder holds the port the kernel picked, issues 29 and 31.)
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$ETA_LAB_PEER_IP6\]:$pport\)" "$work/cli.err" ||
    fail "the client's connect was not the PPE's: $(cat "$work/cli.err")"
wait_until 20 ip6_grew "$ip6_mid" || true
csegs=$(( $(ppe_ip6_segments) - ip6_mid ))
[ "$csegs" -ge $((BYTES / 1500)) ] || fail "eta-stat counts $csegs IPv6 segments in the engine for the client's $BYTES bytes"

note "the same exchange with the same server on the kernel link ([$ETA_LAB_KERNEL_IP6], no eta-run)"
kport=$(free_port)
start_bg ksrv timeout 150 "$py" "$TOOL" server "$ETA_LAB_KERNEL_IP6" "$kport" >"$work/ksrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/ksrv.out' || ! kill -0 $ksrv_pid"
kern=$(peer timeout 120 "$py" "$TOOL" client "$ETA_LAB_KERNEL_IP6" "$kport" "$BYTES" "$SEED") ||
    fail "the client over the kernel link failed: $kern"
wait "$ksrv_pid" || fail "the kernel echo server exited $?"
read -r _ ksent _ kgot _ <<<"$kern"
[ "$ksent" = "$sent" ] && [ "$kgot" = "$got" ] || fail "the engine's exchange differs from the kernel's: '$eta' / '$kern'"
ppe_stop
echo "preload_ip6: [::] under eta-run served $BYTES bytes over IPv6 through the engine (as the kernel link), IPv4 too; a client under eta-run sent $BYTES to the peer over IPv6; $segs + $csegs IPv6 segments in the engine - held"
