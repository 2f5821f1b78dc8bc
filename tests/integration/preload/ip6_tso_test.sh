#!/usr/bin/env bash
# TCP over IPv6 sends TSO frames through the vnet port (issue 31): on a lab
# with the kernel's offloads (eta-lab up --driver vnet), an eta-run --require
# client (python3, tests/integration/dti/ip6_echo.py) connects over IPv6 to a
# kernel echo server in the peer and sends 16 MiB while it reads the echo.
# The engine's stack sends the connection's data in runs and as TSO frames
# (mars/checksum_offload.h, IPv6: the pseudo-header seed, no IP checksum),
# which the vnet port hands to the kernel as VIRTIO_NET_HDR_GSO_TCPV6
# (ppe/src/vnet_port.cc): eta-stat's tx_tso_frames rises during the transfer,
# and what the peer echoed is byte for byte what the client sent (sha256
# both ways), so every segment the kernel cut from a TSO frame carried the
# right bytes, sequence numbers and checksums (the peer's TCP took them).
#   ip6_tso_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")/../dti" && pwd)/ip6_echo.py
py=/usr/bin/python3
BYTES=$((16 << 20)) SEED=67

ppe_lab6 --driver vnet
grep -q '^device = "vnet:' "$ETA_LAB_CONFIG" || fail "eta-lab up --driver vnet wrote no vnet port"
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }

pport=$(free_port)
start_bg psrv peer timeout 150 "$py" "$TOOL" server "$ETA_LAB_PEER_IP6" "$pport" >"$work/psrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/psrv.out' || ! kill -0 $psrv_pid"
grep -q listening "$work/psrv.out" || fail "the peer's server did not listen: $(cat "$work/psrv.out")"
tso_before=$(ppe_json "d['ports'][0]['tx_tso_frames']")
runs_before=$(sum tx_runs)
cli=$(ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" client "$ETA_LAB_PEER_IP6" "$pport" "$BYTES" "$SEED" 2>"$work/cli.err") ||
    fail "the client under eta-run failed: $cli $(cat "$work/cli.err")"
wait "$psrv_pid" || fail "the peer's server exited $?"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$ETA_LAB_PEER_IP6\]:$pport\)" "$work/cli.err" ||
    fail "the client's connect was not the engine's: $(cat "$work/cli.err")"
read -r _ csent _ cgot cn _ <<<"$cli"
[ "$cn" -eq "$BYTES" ] && [ "$csent" = "$cgot" ] || fail "the echo differs from what was sent: '$cli'"
[[ "$cli" == *"local [$H6]:"* ]] || fail "the client's address is not the PPE's IPv6 one: $cli"
wait_until 10 ppe_true "d['ports'][0]['tx_tso_frames'] > $tso_before" ||
    { ppe_stat --no-conns; fail "no TSO frame sent for $BYTES bytes over IPv6 (tx_tso_frames $tso_before)"; }
tso=$(( $(ppe_json "d['ports'][0]['tx_tso_frames']") - tso_before ))
runs=$(( $(sum tx_runs) - runs_before ))
[ "$runs" -gt 0 ] || fail "the engine's stack sent no run over IPv6"
ppe_stop
echo "preload_ip6_tso: $BYTES bytes over IPv6 through the vnet port, echoed byte-exact; $tso TSO frames, $runs runs"
