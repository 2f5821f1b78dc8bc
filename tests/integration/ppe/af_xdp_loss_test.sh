#!/usr/bin/env bash
# eta-ppe on net_af_xdp through 1% loss both ways (eta-lab netem --link both
# loss 1%): eta-perf's native client against the peer's kernel server, 128 MiB
# received (the peer sends through the loss: out-of-order frames pile up in
# MARS, so the pool's buffers are used deep) and 32 MiB sent, CRC32C-verified
# end to end, each within 90 s; afterwards, with the
# loss removed, the port still receives (pings answered, rx frames counted).
# Before the fix the stream stalled within a second and the port never
# received again: the pool's buffers beyond the UMEM net_af_xdp registered
# were dropped by the kernel one by one until its fill ring was empty
# (ppe/README.md, "net_af_xdp's buffers").
#   af_xdp_loss_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
need_built "$ETA_PERF" eta-perf
grep -qs ' /sys/fs/bpf bpf ' /proc/mounts || skip "bpffs is not mounted at /sys/fs/bpf (tools/eta setup mounts it)"

lab_up --driver af_xdp
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
start_bg srv ip netns exec "$ETA_LAB_NS" timeout 300 "$ETA_PERF" server --transport kernel --port 5632
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :5632' | grep -c . >/dev/null" || fail "the peer's server did not listen"
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link both loss 1%
export ETA_SOCKET=$ETA_LAB_SOCKET
for run in "recv 134217728" "send 33554432"; do
    read -r dir bytes <<< "$run"
    timeout 90 "$ETA_PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5632 --direction $dir \
        --bytes "$bytes" --verify > "$work/$dir.log" 2>&1 ||
        { cat "$work/$dir.log"; ppe_stat --no-conns; fail "stream $dir through 1% loss over net_af_xdp failed or stalled"; }
    grep -q "verified\|bytes match" "$work/$dir.log" || { cat "$work/$dir.log"; fail "stream $dir was not verified"; }
    head -1 "$work/$dir.log"
done
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link both off
rx_before=$(ppe_json "d['ports'][0]['ipackets']")
peer ping -c 3 -i 0.2 -W 2 "$ETA_LAB_PPE_IP" > "$work/ping.log" ||
    { cat "$work/ping.log"; ppe_stat --no-conns; fail "after the lossy streams the PPE's net_af_xdp port no longer answers pings"; }
# The device's counters are published periodically: wait for them.
wait_until 10 ppe_true "d['ports'][0]['ipackets'] >= $rx_before + 3" ||
    fail "the port counted $(( $(ppe_json "d['ports'][0]['ipackets']") - rx_before )) received frames for 3 answered pings"
ppe_stop
echo "PASS"
