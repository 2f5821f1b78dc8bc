#!/usr/bin/env bash
# Engine-computed payload digests against a kernel peer in the lab:
# dti-pdu-server behind eta-ppe receives framed PDUs from pdu-peer (kernel
# TCP in the peer namespace, digests by ISA-L there) and checks each digest
# with the one the engine computed. Byte-exact (payload streams compared)
# and digest-exact (per-PDU digest lists compared), plain and under
# `eta-lab netem` loss, duplication and reordering; a PDU sent with a wrong
# digest is the one reported; eta-stat counts the bytes digested. Then
# eta-perf --verify --digest engine both ways against a kernel eta-perf in
# the peer: the engine's send and receive digests equal the peer's CRC32C.
#   pdu_digest_test.sh ETA_PPE ETA_STAT DTI_PDU_SERVER PDU_PEER ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 SERVER=$3 PEER_TOOL=$4 PERF=$5
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$SERVER" dti-pdu-server
need_built "$PEER_TOOL" pdu-peer
need_built "$PERF" eta-perf

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
H=$ETA_LAB_PPE_IP

# run LABEL COUNT MAXLEN SEED [CORRUPT]: one connection; leaves the server's
# exit status in $server_rc.
run() {
    local label=$1 count=$2 maxlen=$3 seed=$4 corrupt=${5:-}
    note "$label: $count PDUs up to $maxlen bytes"
    rm -f "$work"/srv.* "$work"/peer.*
    start_bg srv timeout 240 "$SERVER" --socket "$ETA_LAB_SOCKET" --port 7010 \
        --out "$work/srv.payload" --digests "$work/srv.digests"
    wait_until 10 ppe_true "len(d['apps']) >= 1" || fail "dti-pdu-server did not attach"
    peer timeout 180 "$PEER_TOOL" "$H" 7010 "$count" "$maxlen" "$seed" \
        "$work/peer.payload" "$work/peer.digests" $corrupt || fail "$label: pdu-peer failed"
    server_rc=0
    wait "$srv_pid" || server_rc=$?
    cmp "$work/peer.payload" "$work/srv.payload" || fail "$label: payload bytes differ"
    cmp "$work/peer.digests" "$work/srv.digests" || {
        diff "$work/peer.digests" "$work/srv.digests" | head
        fail "$label: digests differ from ISA-L's in the peer"
    }
}

run plain 400 70000 1
[ "$server_rc" -eq 0 ] || fail "plain: dti-pdu-server exited $server_rc"

"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel loss 1% duplicate 1% delay 1ms reorder 5% ||
    fail "eta-lab netem failed"
on_exit "\"$ETA_LAB\" netem --name $ETA_LAB_NAME --link accel off"
run netem 300 70000 2
[ "$server_rc" -eq 0 ] || fail "netem: dti-pdu-server exited $server_rc"
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel off

run corrupt 50 5000 3 17
[ "$server_rc" -eq 3 ] || fail "corrupt: dti-pdu-server exited $server_rc, not 3 (a mismatch)"
[ "$(grep -c BAD "$work/srv.digests")" -eq 1 ] && grep -q '^17 .* BAD$' "$work/srv.digests" ||
    fail "corrupt: the wrong digest was not reported for PDU 17 alone"

# eta-stat: every payload byte went through the digest (the last run's at least).
total=$(python3 -c "import sys; print(sum(int(l.split()[1]) for f in sys.argv[1:] for l in open(f)))" \
    "$work/srv.digests")
# (The engines publish their counters every 10 ms while they work and when they nap.)
wait_until 20 ppe_true "sum(e['digest_rx_bytes'] for e in d['engines']) >= $total" ||
    fail "eta-stat does not show the digested bytes: $(ppe_stat --json | head -c 2000)"

note "eta-perf --digest engine, both directions, kernel eta-perf in the peer"
start_bg perfsrv ip netns exec "$ETA_LAB_NS" timeout 240 "$PERF" server --transport kernel --port 5303
wait_until 10 peer bash -c "ss -ltn | grep -c ':5303' >/dev/null" || fail "the peer's eta-perf server did not listen"
tx0=$(ppe_json "sum(e['digest_tx_bytes'] for e in d['engines'])")
for dir in send recv; do
    out=$(ETA_SOCKET=$ETA_LAB_SOCKET timeout 120 "$PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" \
        --port 5303 --direction "$dir" --bytes $((64 << 20)) --verify --digest engine --json) ||
        fail "eta-perf --digest engine ($dir) failed: $out"
    json_true "$out" "d['ok'] and d['verified'] and d['digest'] == 'engine' and d['peer_bytes'] == 64 << 20" ||
        fail "eta-perf --digest engine ($dir) did not verify: $out"
done
wait_until 20 ppe_true "sum(e['digest_tx_bytes'] for e in d['engines']) >= $tx0 + (64 << 20)" ||
    fail "the send digest's bytes do not show in eta-stat"
ppe_stop
note "ok"
