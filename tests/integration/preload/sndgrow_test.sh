#!/usr/bin/env bash
# Send rings that grow (issue 30, dti/README.md "Send rings that grow"): an
# unmodified sender (socat) under eta-run streams a file through the PPE to a
# kernel receiver in the lab's peer across `eta-lab netem` delay, where a
# send ring of tcp.sndbuf (256 KiB) caps a stream at 256 KiB per round trip;
# send-buffer autotuning must grow the socket's ring while socat writes
# (eta-stat: tx_ring_grows, none refused) and every byte must arrive as sent.
#   sndgrow_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# (env ETA_LAB: tools/eta-lab). Sizes: ETA_TEST_SNDGROW_MIB (default 32).
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
ETA_LAB=${ETA_LAB:-$(cd "$(dirname "$0")/../../.." && pwd)/tools/eta-lab}
mib=${ETA_TEST_SNDGROW_MIB:-32}
py=/usr/bin/python3

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 600 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"
H=$ETA_LAB_PPE_IP P=$ETA_LAB_PEER_IP

stat_json() { timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json; }
grows() {
    stat_json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(e["tx_ring_grows"] for e in d["engines"]), sum(e["tx_grow_refusals"] for e in d["engines"]))'
}
sent_bytes() {
    stat_json | "$py" -c 'import json, sys; d = json.load(sys.stdin); print(sum(s["tx_bytes"] for e in d["engines"] for s in e["stacks"]))'
}

head -c $((mib << 20)) /dev/urandom > "$work/blob"
want=$(sha256sum < "$work/blob" | cut -d' ' -f1)
read -r before _ <<< "$(grows)"
tx0=$(sent_bytes)

"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel delay 5ms || fail "eta-lab netem failed"
on_exit "\"$ETA_LAB\" netem --name $ETA_LAB_NAME --link accel off"

note "socat under eta-run sends $mib MiB to a kernel socat in the peer, 5 ms each way on the accelerated link"
# The receiver writes what it gets to a file in the peer's view of $work (the
# lab's namespace shares the file system); it ends at the sender's FIN.
start_bg rcv ip netns exec "$ETA_LAB_NS" timeout 300 socat -u TCP-LISTEN:5411,reuseaddr "CREATE:$work/got"
wait_until 10 peer bash -c "ss -ltn | grep -c ':5411 ' >/dev/null" || fail "the receiver in the peer did not listen"
ETA_LOG=fallback,accel timeout 240 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    socat -u "OPEN:$work/blob" "TCP:$P:5411" 2> "$work/eta.err" ||
    { cat "$work/eta.err"; fail "socat under eta-run failed"; }
grep -qE '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$work/eta.err" ||
    { cat "$work/eta.err"; fail "the connection did not go through the PPE"; }
wait "$rcv_pid" || fail "the receiver in the peer failed"
got=$(sha256sum < "$work/got" | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "the peer got $(stat -c %s "$work/got") bytes that differ from the $((mib << 20)) sent"

# The engine publishes its counters every 10 ms while it works and when it
# naps: first wait until they show every byte sent (so the snapshot is past the
# writes and the grows they asked for), then read the grows from a later one.
sent_all() { [ $(($(sent_bytes) - tx0)) -ge $((mib << 20)) ]; }
wait_until 20 sent_all ||
    fail "eta-stat counts $(($(sent_bytes) - tx0)) bytes sent by the engine for the $((mib << 20)) the peer got"
read -r after refused <<< "$(grows)"
echo "    send rings grown: $((after - before)), grows refused: $refused"
[ "$after" -gt "$before" ] ||
    fail "no send ring grew under 5 ms of delay: autotuning is off or the writer never grew its ring"
[ "$refused" -eq 0 ] || fail "eta-stat counts $refused refused send ring grows"
note "ok"
