#!/usr/bin/env bash
# TCP over IPv6 received through the vnet port (issue 31): eta-ppe on its
# vnet port (eta-lab up --driver vnet: the veths' TSO/GSO on, so the peer's
# TCP over IPv6 sends GSO_TCPV6 super-frames), a python3 sink under eta-run
# --require on the port's IPv6 address, a kernel source in the peer sending
# 64 MiB of seeded random bytes one way (a bulk download: the sink sends only
# ACKs, so segments acknowledge nothing new and may be coalesced): the sha256
# of what went equals the sha256 of what came (byte-exact end to end). The
# port counted IPv6 super-frames received as LRO frames standing for several
# segments each, with the kernel's partial checksums (trusted: MARS dropped
# no segment for its TCP checksum), and MARS took them on the fast path.
# Then the same with the peer's TSO/GSO off (segments, several to a burst):
# MARS coalesced consecutive ones over IPv6 (rx_coalesce_groups/segments
# rose: mars/src/rx/rx_coalesce6.cc), as eta-stat shows.
#   vnet6_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")" && pwd)/stream6.py
py=/usr/bin/python3
BYTES=$((64 << 20)) SEED=47

ppe_lab6 --driver vnet
grep -q '^device = "vnet:' "$ETA_LAB_CONFIG" || fail "eta-lab up --driver vnet wrote no vnet port: $(grep '^device' "$ETA_LAB_CONFIG")"
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"

sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }
port0() { ppe_json "d['ports'][0]['$1']"; }

# stream WHAT: BYTES one way from a kernel source in the peer to a python3
# sink on [$H6] under eta-run --require, sha256 equal at both ends.
stream() {
    local port out sent n got gn
    port=$(free_port)
    start_bg srv timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" "$TOOL" sink "$H6" "$port" \
        >"$work/srv.out" 2>"$work/srv.err"
    wait_until 30 eval "grep -q listening '$work/srv.out' || ! kill -0 $srv_pid"
    grep -q listening "$work/srv.out" || fail "the sink did not listen: $(cat "$work/srv.out" "$work/srv.err")"
    out=$(peer timeout 120 "$py" "$TOOL" source "$H6" "$port" "$BYTES" "$SEED") ||
        { ppe_stat --no-conns; fail "the source in the peer failed $1: $out"; }
    wait "$srv_pid" || fail "the sink exited $? $1: $(cat "$work/srv.out" "$work/srv.err")"
    read -r _ sent n <<<"$out"
    read -r _ got gn < <(grep '^got ' "$work/srv.out")
    [ "$sent" = "$got" ] && [ "$n" -eq "$BYTES" ] && [ "$gn" -eq "$BYTES" ] ||
        fail "not byte-exact over IPv6 through the vnet port $1: sent '$out', the sink '$(cat "$work/srv.out")'"
    SUM=$sent
}

note "the peer's GSO_TCPV6 super-frames: $BYTES bytes to a python3 sink on [$H6] under eta-run --require"
lro_before=$(port0 rx_lro_frames) lro_segs_before=$(port0 rx_lro_segments) partial_before=$(port0 rx_csum_partial)
hits_before=$(sum fastpath_hits)
stream "in super-frames"
# The counters are published periodically: wait for them.
lro_seen() { [ "$(port0 rx_lro_frames)" -gt "$lro_before" ]; }
wait_until 20 lro_seen || true
lro=$(($(port0 rx_lro_frames) - lro_before)) lro_segs=$(($(port0 rx_lro_segments) - lro_segs_before))
partial=$(($(port0 rx_csum_partial) - partial_before)) hits=$(($(sum fastpath_hits) - hits_before))
[ "$lro" -gt 0 ] || { ppe_stat --no-conns; fail "the port counted no IPv6 super-frame (GSO_TCPV6) as an LRO frame"; }
[ "$lro_segs" -ge $((2 * lro)) ] || fail "the IPv6 LRO frames stood for fewer than 2 segments each ($lro_segs for $lro)"
[ "$partial" -gt 0 ] || fail "no IPv6 frame came with the kernel's partial checksum"
[ "$hits" -ge $((lro / 2)) ] || fail "$hits fast-path hits for $lro IPv6 LRO frames: super-frames took the full rules"
[ "$(sum drop_tcp_csum)" -eq 0 ] || fail "MARS dropped $(sum drop_tcp_csum) segments for their TCP checksum: a vouched-for frame was checked"

# A 64 KiB super-frame fills a group on its own (64 KiB at most), so
# coalescing shows with the peer sending segments: its GSO and TSO off.
note "the peer's segments (its tso/gso off): $BYTES bytes again, coalesced by MARS"
peer ethtool -K "$ETA_LAB_PEER_IFACE" tso off gso off >/dev/null || fail "ethtool -K $ETA_LAB_PEER_IFACE tso off gso off in the peer"
groups_before=$(sum rx_coalesce_groups) merged_before=$(sum rx_coalesce_segments)
stream "in segments"
grouped() { [ "$(sum rx_coalesce_groups)" -gt "$groups_before" ]; }
wait_until 20 grouped || true
groups=$(($(sum rx_coalesce_groups) - groups_before)) merged=$(($(sum rx_coalesce_segments) - merged_before))
[ "$groups" -gt 0 ] && [ "$merged" -ge $((2 * groups)) ] ||
    { ppe_stat --no-conns; fail "no IPv6 segments coalesced ($groups groups, $merged segments)"; }
[ "$(sum drop_tcp_csum)" -eq 0 ] || fail "MARS dropped $(sum drop_tcp_csum) segments for their TCP checksum"
ppe_stat --no-conns | grep -c '^vnet p0' >/dev/null || fail "eta-stat shows no vnet line"
ppe_stat --no-conns | grep -E '^vnet p0|coalesced'
ppe_stop
echo "preload_vnet6: $BYTES bytes over IPv6 through the vnet port twice, byte-exact (sha256 ${SUM:0:16}...); $lro IPv6 LRO frames ($lro_segs segments, $hits fast-path hits); then $groups groups of $merged segments coalesced - held"
