#!/usr/bin/env bash
# eta-ppe on its vnet port (device = "vnet:<ifname>", ppe/src/vnet_port.h)
# over the lab's veth with the kernel's offloads on (eta-lab up --driver
# vnet): eta-perf's native client against the peer's kernel server, 256 MiB
# received and 256 MiB sent (payloads by reference, tx_zerocopy), CRC32C-verified end to end; the port's counters
# show the offloads at work: the peer's GSO super-frames received as LRO
# frames (standing for several segments each) with partial checksums (the
# engine trusts them), and TSO frames sent, which the peer's kernel took whole
# and its TCP read byte-exact. Then through loss and reordering on both
# directions (eta-lab netem --link both delay 1ms reorder 25% 50% loss 1%):
# 64 MiB each way, still verified (a lost super-frame is 45 segments: SACK,
# out-of-order frames of 64 KiB held in MARS, retransmissions); then 32 MiB
# received through 1% corruption: those frames come without the kernel's
# checksum verdict, MARS checks and drops them, the stream stays verified.
# Last, with the engine stopped, a UDP burst from the peer overflows the
# queue's socket: the kernel's drops are counted as the port's imissed.
#   vnet_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
need_built "$ETA_PERF" eta-perf

lab_up --driver vnet
work=$(mktemp -d)
on_exit "rm -rf $work"
grep -q '^device = "vnet:' "$ETA_LAB_CONFIG" || fail "eta-lab up --driver vnet wrote no vnet port: $(grep '^device' "$ETA_LAB_CONFIG")"
ppe_config
# tx_zerocopy: the TSO frames' payloads go from the send ring into the
# kernel's sendmmsg in place (vnet_port.h), checked below by the stack's
# by-reference counters and the peer's CRC32C of every byte.
sed -i '/^device = /a tx_zerocopy = true' "$work/ppe.toml"
ppe_start "$work/ppe.toml"
grep -q 'tx_zerocopy = true, but' "$work/ppe.log" && fail "eta-ppe refused tx_zerocopy on the vnet port: $(cat "$work/ppe.log")"
start_bg srv ip netns exec "$ETA_LAB_NS" timeout 600 "$ETA_PERF" server --transport kernel --port 5633
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :5633' | grep -c . >/dev/null" || fail "the peer's server did not listen"
export ETA_SOCKET=$ETA_LAB_SOCKET

stream() { # DIRECTION BYTES WHAT
    timeout 120 "$ETA_PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5633 --direction "$1" \
        --bytes "$2" --verify > "$work/$1.log" 2>&1 ||
        { cat "$work/$1.log"; ppe_stat --no-conns; fail "stream $1 of $2 bytes $3 failed or stalled"; }
    grep -q "verified\|bytes match" "$work/$1.log" || { cat "$work/$1.log"; fail "stream $1 $3 was not verified"; }
    head -1 "$work/$1.log"
}
stream recv 268435456 "over the vnet port"
stream send 268435456 "over the vnet port"
# The counters are published periodically: wait for them.
wait_until 10 ppe_true "d['ports'][0]['tx_tso_frames'] > 0 and d['ports'][0]['rx_lro_frames'] > 0" ||
    { ppe_stat --no-conns; fail "the port counted no LRO frames received or no TSO frames sent"; }
ppe_true "d['ports'][0]['rx_lro_segments'] >= 2 * d['ports'][0]['rx_lro_frames']" ||
    fail "the LRO frames stood for fewer than 2 segments each"
ppe_true "d['ports'][0]['rx_csum_partial'] > 0" || fail "no frame came with the kernel's partial checksum"
ppe_true "sum(s['tx_ref_frames'] for e in d['engines'] for s in e['stacks']) > 0 and
          sum(s['tx_ref_bytes'] for e in d['engines'] for s in e['stacks']) >= 128 << 20" ||
    { ppe_stat --no-conns; fail "the stream sent fewer than 128 MiB of its 256 by reference (tx_zerocopy)"; }
ppe_stat --no-conns | grep '^vnet p0' || fail "eta-stat shows no vnet line"

"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link both delay 1ms reorder 25% 50% loss 1%
stream recv 67108864 "through loss and reordering"
stream send 67108864 "through loss and reordering"
# Corruption: netem computes a corrupted frame's checksum in software first
# (the kernel's verdict is then none: the lab's PPE veth has rx off), so
# MARS must check it and drop the bad ones; the stream stays byte-exact.
unknown_before=$(ppe_json "d['ports'][0]['rx_csum_unknown']")
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel corrupt 1%
stream recv 33554432 "through 1% corruption"
wait_until 10 ppe_true "d['ports'][0]['rx_csum_unknown'] > $unknown_before" ||
    fail "corrupted frames came with a checksum verdict: the engine would not check them"
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link both off
# A stopped engine: what the peer sends fills the queue's socket and the
# kernel drops the rest; the port counts those drops as imissed
# (PACKET_STATISTICS) once the engine runs again.
missed_before=$(ppe_json "d['ports'][0]['imissed']")
kill -STOP "$PPE_REAL_PID"
peer timeout 60 python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(60000): s.sendto(b'x' * 1400, (sys.argv[1], 9))
" "$ETA_LAB_PPE_IP" || { kill -CONT "$PPE_REAL_PID"; fail "the peer's UDP burst failed"; }
kill -CONT "$PPE_REAL_PID"
wait_until 20 ppe_true "d['ports'][0]['imissed'] > $missed_before" ||
    { ppe_stat --no-conns; fail "frames the kernel dropped at the stopped engine's socket were not counted (imissed)"; }
echo "socket drops counted: $(ppe_json "d['ports'][0]['imissed']") frames"
ppe_stop
echo "PASS"
