#!/usr/bin/env bash
# mars against the Linux kernel's TCP, over the lab's accelerated link.
# mars_interop (a test harness: one mars::Stack on DPDK net_af_packet) sends a
# random file to socat in the peer namespace and, at the same time, receives
# another random file from a second socat; both must arrive byte for byte
# (sha256). Rounds: a clean link; the peer's egress impaired with
# `eta-lab netem` (loss/duplication, plus delay and reordering where the
# lab's impairment supports them); then both directions impaired: the same
# netem plus 2% of mars's own frames dropped by the harness (--tx-loss), so
# the stack's retransmissions (fast retransmit, SACK recovery, RTO) have to
# satisfy the kernel's receiver.
#   interop_test.sh ETA_LAB MARS_INTEROP      (MARS_INTEROP_MIB: file size, default 24)
ETA_LAB=$1
INTEROP=$2
. "$(dirname "$0")/../lib.sh"

mib=${MARS_INTEROP_MIB:-24}
# net_af_packet by nature (the harness opens it on the veth): a vnet lab's
# veths pass GSO super-frames that net_af_packet would cut to its frame size.
lab_up --driver af_packet
work=$(mktemp -d)
on_exit "rm -rf $work"
head -c $((mib << 20)) /dev/urandom >"$work/to_kernel"
head -c $((mib << 20)) /dev/urandom >"$work/to_mars"
chmod 755 "$work"
chmod 644 "$work"/to_*

round() {
    local name=$1 tx_loss=${2:-0} prefix=eta-mars-interop-$$-$1
    note "round '$name': $mib MiB each way"
    rm -f "$work/got_kernel" "$work/got_mars"
    on_exit "rm -rf /var/run/dpdk/$prefix"
    start_bg sink peer timeout 150 socat -u "TCP-LISTEN:5001,bind=$ETA_LAB_PEER_IP,reuseaddr" \
        "OPEN:$work/got_kernel,creat,trunc"
    wait_until 10 peer bash -c "ss -ltn | grep -c '$ETA_LAB_PEER_IP:5001' >/dev/null" || fail "socat did not listen in the peer"
    start_bg harness timeout 170 "$INTEROP" --vdev "net_af_packet0,iface=$ETA_LAB_PPE_IFACE" --prefix "$prefix" \
        --ip "$ETA_LAB_PPE_IP" --prefix-len "$ETA_LAB_PREFIX" \
        --send-to "$ETA_LAB_PEER_IP:5001" "$work/to_kernel" --recv-on 5002 "$work/got_mars" --timeout 150 \
        --tx-loss "$tx_loss" \
        >"$work/harness-$name.out" 2>&1
    wait_until 30 grep -qx READY "$work/harness-$name.out" || { cat "$work/harness-$name.out"; fail "mars_interop did not start"; }
    start_bg source peer timeout 150 socat -u "OPEN:$work/to_mars" "TCP:$ETA_LAB_PPE_IP:5002,retry=20,interval=0.5"
    local rc=0
    wait "$harness_pid" || rc=$?
    cat "$work/harness-$name.out"
    [ $rc -eq 0 ] || fail "round '$name': mars_interop failed (rc $rc)"
    wait "$sink_pid" || fail "round '$name': the kernel-side receiver failed"
    wait "$source_pid" || fail "round '$name': the kernel-side sender failed"
    [ "$(sha256sum <"$work/to_kernel")" = "$(sha256sum <"$work/got_kernel")" ] ||
        fail "round '$name': bytes differ mars -> kernel ($(stat -c %s "$work/got_kernel") of $((mib << 20)) arrived)"
    [ "$(sha256sum <"$work/to_mars")" = "$(sha256sum <"$work/got_mars")" ] ||
        fail "round '$name': bytes differ kernel -> mars ($(stat -c %s "$work/got_mars") of $((mib << 20)) arrived)"
    rm -rf "/var/run/dpdk/$prefix"
    echo "round '$name' passed"
}

round clean

on_exit "\"$ETA_LAB\" netem --name $ETA_LAB_NAME off"
if "$ETA_LAB" netem --name "$ETA_LAB_NAME" loss 1% duplicate 1% delay 1ms reorder 5% >/dev/null 2>&1; then
    round impaired-full
    round impaired-both-ways 2
elif "$ETA_LAB" netem --name "$ETA_LAB_NAME" loss 1% duplicate 1% >/dev/null 2>&1; then
    note "this lab impairs loss and duplication only (no delay/reorder)"
    round impaired-loss-dup
    round impaired-both-ways 2
else
    fail "eta-lab netem refused even 'loss 1% duplicate 1%'"
fi
"$ETA_LAB" netem --name "$ETA_LAB_NAME" off >/dev/null 2>&1 || true
echo "mars interop test passed"
