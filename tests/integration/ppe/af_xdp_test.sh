#!/usr/bin/env bash
# eta-ppe on the lab's veth through DPDK's net_af_xdp (eta-lab up --driver
# af_xdp): ARP + ping, and eta-perf's native client against the peer's kernel
# server, 32 MiB each way, CRC32C-verified end to end.
#   af_xdp_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
need_built "$ETA_PERF" eta-perf
grep -qs ' /sys/fs/bpf bpf ' /proc/mounts || skip "bpffs is not mounted at /sys/fs/bpf (tools/eta setup mounts it)"

lab_up --driver af_xdp
work=$(mktemp -d)
on_exit "rm -rf $work"
grep -q "^device = \"net_af_xdp_$ETA_LAB_INDEX,iface=$ETA_LAB_PPE_IFACE\"" "$ETA_LAB_CONFIG" ||
    fail "eta-lab up --driver af_xdp did not write a net_af_xdp port: $(grep device "$ETA_LAB_CONFIG")"
ppe_config
ppe_start "$work/ppe.toml"
ppe_true "d['ports'][0]['device'].startswith('net_af_xdp')" || fail "eta-stat does not show the net_af_xdp port"
peer ping -c 3 -i 0.2 -W 2 "$ETA_LAB_PPE_IP" > "$work/ping.log" || { cat "$work/ping.log"; fail "the peer cannot ping the PPE over net_af_xdp"; }
# The engine sleeps between pings (idle adaptive); its queue's XSK, polled
# while it sleeps, must be what wakes it (ppe/src/rx_wake.h).
wait_until 10 ppe_true "d['engines'][0]['rx_wakes'] > 0" ||
    fail "no received frame woke the sleeping engine over net_af_xdp: $(ppe_stat --json | head -c 400)"
start_bg srv ip netns exec "$ETA_LAB_NS" timeout 120 "$ETA_PERF" server --transport kernel --port 5631
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :5631' | grep -c . >/dev/null" || fail "the peer's server did not listen"
export ETA_SOCKET=$ETA_LAB_SOCKET
for dir in send recv; do
    timeout 60 "$ETA_PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5631 --direction $dir \
        --bytes 33554432 --verify > "$work/$dir.log" 2>&1 || { cat "$work/$dir.log"; fail "stream $dir over net_af_xdp failed"; }
    grep -q "verified\|bytes match" "$work/$dir.log" || { cat "$work/$dir.log"; fail "stream $dir was not verified"; }
    head -1 "$work/$dir.log"
done
ppe_stop
echo "PASS"
