#!/usr/bin/env bash
# Native applications behind eta-ppe talk TCP to the real kernel in the peer:
#  - the libdti echo server (dti-echo-server) serves socat in the peer, byte for byte;
#  - eta-perf over dti, both as server (kernel client in the peer) and as
#    client (kernel server in the peer), 256 MiB each way verified with CRC32C;
#  - the same under `eta-lab netem` loss, duplication and reordering (64 MiB);
#  - the receive rings grew in place on the way (autotuning, on by default).
#   traffic_test.sh ETA_PPE ETA_STAT ETA_PERF DTI_ECHO_SERVER
# ETA_TEST_MTU=N runs it all on a lab whose links (eta's and the kernel's)
# have MTU N (jumbo frames), with ETA_TEST_MIB MiB each way (default 256;
# under netem ETA_TEST_NETEM_MIB, default 64 or ETA_TEST_MIB if smaller: the
# lossy transfers run at a fifth of the clean ones' rate, and at 1% loss 64 MiB
# still lose ~450 of the peer's segments, each recovered and verified).
# ETA_TEST_COPY=dmadev runs it with [copy] engine = "dmadev" on DPDK's
# dma_skeleton device (threshold 1024: stream segments go to the device, the
# 1000-byte rr messages stay on the core) and checks in eta-stat that the
# device copied and that every fallback was counted by its reason.
# ETA_TEST_DMA_FAULT=SPEC (with ETA_TEST_COPY=dmadev) has eta-ppe inject that
# failure into the device mid-transfer (ppe/src/dma_copy.h DmaFault; eta-ppe
# honours it in builds with assertions): every byte must still arrive, and
# eta-stat must count the fallback by its reason.
# ETA_TEST_TX_ZEROCOPY=1 runs it with tx_zerocopy = true on the port (segments
# sent with their payload by reference from the send ring; net_af_packet
# takes multi-segment frames) and checks in eta-stat that they were.
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3 ECHO=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
BYTES=$((${ETA_TEST_MIB:-256} << 20))
netem_mib=${ETA_TEST_NETEM_MIB:-64}
[ "$netem_mib" -le "${ETA_TEST_MIB:-256}" ] || netem_mib=${ETA_TEST_MIB:-256}

# The tx_zerocopy variant counts segments by reference one per MSS, as
# net_af_packet sends them (chained frames), so it names that driver (the
# vnet port sends by reference by default, TSO frames of up to 45 segments:
# ppe_vnet checks those);
# so do the injected device faults, whose point (the device's Nth copy) and
# checks (over 1,000 copies after it) count copies of MSS-sized segments (the
# vnet port's LRO frames make a few thousand copies of up to 64 KiB).
driver=()
[ "${ETA_TEST_TX_ZEROCOPY:-}" != 1 ] && [ -z "${ETA_TEST_DMA_FAULT:-}" ] || driver=(--driver af_packet)
lab_up ${ETA_TEST_MTU:+--mtu "$ETA_TEST_MTU"} "${driver[@]}"
if [ -n "${ETA_TEST_MTU:-}" ]; then
    # the PPE's port and the peer's link both carry the MTU asked for
    grep -qx "mtu = $ETA_TEST_MTU" "$ETA_LAB_CONFIG" || fail "the lab's PPE config does not say mtu = $ETA_TEST_MTU"
    # Not `ip link show | grep -q`: under pipefail, ip (which writes each link
    # on its own) gets SIGPIPE when grep has already matched and left.
    peer_links=$(peer ip link show)
    grep -q "mtu $ETA_TEST_MTU " <<<"$peer_links" || fail "the peer's links are not at mtu $ETA_TEST_MTU: $peer_links"
fi
work=$(mktemp -d)
on_exit "rm -rf $work"
if [ "${ETA_TEST_COPY:-}" = dmadev ]; then
    ppe_config "$(printf '[copy]\nengine = "dmadev"\ndevice = "dma_skeleton"\nthreshold = 1024\n')"
else
    ppe_config
fi
if [ "${ETA_TEST_TX_ZEROCOPY:-}" = 1 ]; then
    sed -i '/^device = /a tx_zerocopy = true' "$work/ppe.toml"
    grep -qx 'tx_zerocopy = true' "$work/ppe.toml" || fail "cannot set tx_zerocopy in the lab's PPE config"
fi
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET
H=$ETA_LAB_PPE_IP P=$ETA_LAB_PEER_IP

note "frames wake the sleeping engine: pings 200 ms apart, each arriving while it sleeps"
peer ping -c 3 -i 0.2 -W 2 "$H" > "$work/ping.log" || { cat "$work/ping.log"; fail "the peer cannot ping the PPE"; }
wait_until 10 ppe_true "d['engines'][0]['rx_wakes'] > 0" ||
    fail "no received frame woke the sleeping engine (its af_packet socket is not polled): $(ppe_stat --json | head -c 400)"

note "dti-echo-server behind the PPE, socat in the peer"
start_bg echo timeout 120 "$ECHO" --socket "$ETA_LAB_SOCKET" --port 7007 --count 1
wait_until 10 ppe_true "len(d['apps']) >= 1" ||
    fail "the echo server did not attach"
head -c $((8 << 20)) /dev/urandom > "$work/blob"
# socat sends the blob and writes what comes back; at the blob's end it
# shuts down its sending side and exits once the echo has ended too.
peer timeout 60 socat -t 30 "TCP:$H:7007" STDIO < "$work/blob" > "$work/echoed" 2>"$work/socat.err" ||
    { cat "$work/socat.err"; fail "socat through the PPE failed"; }
cmp "$work/blob" "$work/echoed" || { ppe_stat | grep -B1 -A1 "copy engine" >&2; fail "the echo differs from what was sent"; }
wait "$echo_pid" || fail "dti-echo-server failed"

# transfer LABEL BYTES: BYTES each way in both roles, verified end to end.
transfer() {
    local label=$1 BYTES=$2 out
    note "$label: eta-perf (dti) server <- kernel client in the peer, both directions"
    start_bg srv timeout 300 "$ETA_PERF" server --transport dti --port 5301 > "$work/srv.log"
    wait_until 10 grep -q listening "$work/srv.log" || fail "the dti eta-perf server did not listen"
    for dir in send recv; do
        out=$(peer timeout 240 "$ETA_PERF" client --transport kernel --connect "$H" --port 5301 \
            --mode stream --direction $dir --bytes $BYTES --verify --json) || fail "$label: kernel client ($dir) failed: $out"
        json_true "$out" "d['ok'] and d['verified'] and d['bytes'] == $BYTES and d['peer_bytes'] == $BYTES" ||
            fail "$label: $dir through the PPE not verified: $out"
        echo "$label peer->dti $dir: $out"
    done
    out=$(peer timeout 60 "$ETA_PERF" client --transport kernel --connect "$H" --port 5301 --mode rr --size 1000 \
        --bytes 2000 --duration 60 --verify --json) || fail "$label: rr failed: $out"
    json_true "$out" "d['ok'] and d['transactions'] == 2000" || fail "$label: rr: $out"
    kill "$srv_pid"; wait "$srv_pid" 2>/dev/null || true

    note "$label: eta-perf (dti) client -> kernel server in the peer, both directions"
    # Started without the peer() function so that ksrv_pid is the server's
    # timeout wrapper (ip netns exec execs it) and killing it ends the server.
    start_bg ksrv ip netns exec "$ETA_LAB_NS" timeout 300 "$ETA_PERF" server --transport kernel --port 5302
    wait_until 10 peer bash -c "ss -ltn | grep -c ':5302' >/dev/null" || fail "kernel eta-perf server did not listen"
    for dir in send recv; do
        out=$(timeout 240 "$ETA_PERF" client --transport dti --connect "$P" --port 5302 \
            --mode stream --direction $dir --bytes $BYTES --verify --json) || fail "$label: dti client ($dir) failed: $out"
        json_true "$out" "d['ok'] and d['verified'] and d['bytes'] == $BYTES and d['peer_bytes'] == $BYTES" ||
            fail "$label: dti client $dir not verified: $out"
        echo "$label dti->peer $dir: $out"
    done
    kill "$ksrv_pid"; wait "$ksrv_pid" 2>/dev/null || true
}

transfer clean "$BYTES"
# Receive-buffer autotuning is on by default ([tcp] rcvbuf_max 4M): the
# streams above grew their DTI receive rings in place (MARS asked, the DTI
# engine granted each grow) and every byte was still verified.
# (The engines publish their counters every 10 ms while they work and when they nap.)
wait_until 10 ppe_true "sum(s['tcp_rx_ring_grows'] for e in d['engines'] for s in e['stacks']) > 0" || true
rings=$(ppe_json "[sum(s['tcp_rx_ring_grows'] for e in d['engines'] for s in e['stacks']), sum(e['rx_ring_grows'] for e in d['engines']), sum(e['rx_grow_refusals'] for e in d['engines'])]")
echo "receive rings grown (MARS, DTI engine, refused): $rings"
ppe_true "sum(s['tcp_rx_ring_grows'] for e in d['engines'] for s in e['stacks']) > 0" ||
    fail "no receive ring grew during the transfers: autotuning is off or the DTI rings cannot grow: $rings"
ppe_true "sum(s['tcp_rx_ring_grows'] for e in d['engines'] for s in e['stacks']) == sum(e['rx_ring_grows'] for e in d['engines']) and sum(e['rx_grow_refusals'] for e in d['engines']) == 0" ||
    fail "MARS and the DTI engine disagree on the grows, or one was refused within memory_per_app: $rings"
note "impairments: loss, duplication and reordering on the peer's side of the accelerated link"
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel loss 1% duplicate 1% delay 1ms reorder 5% ||
    fail "eta-lab netem failed"
on_exit "\"$ETA_LAB\" netem --name $ETA_LAB_NAME --link accel off"
transfer netem $((netem_mib << 20))
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel off
wait_until 10 ppe_true "d['engines'][0]['stacks'][0]['tcp_retransmits'] > 0" || true
retrans=$(ppe_json "d['engines'][0]['stacks'][0]['tcp_retransmits']")
echo "PPE retransmissions: $retrans"
[ "$retrans" -gt 0 ] || fail "1% loss caused no retransmissions: the impairment did not reach the PPE's traffic"
if [ "${ETA_TEST_COPY:-}" = dmadev ]; then
    # Every byte above was verified (cmp, CRC32C both ways); now: the device
    # did the copies, and the core's copies are counted by reason.
    ppe_true "d['copy_engine'] == 'dmadev:dma_skeleton' and d['copy_threshold'] == 1024" ||
        fail "eta-stat does not show the dmadev copy engine: $(ppe_stat --json | head -c 600)"
    st=$(ppe_stat --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['engines'][0]['stacks'][0]))")
    echo "copy counters: $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print({k: v for k, v in d.items() if 'cop' in k})" "$st")"
    json_true "$st" "d['copy_engine'] == 'dmadev:dma_skeleton'" || fail "stack 0 does not use the device: $st"
    json_true "$st" "d['copies_offloaded'] > 1000 and d['copy_bytes_offloaded'] >= 1024 * d['copies_offloaded']" ||
        fail "the device made too few copies: $st"
    # (Only in-order segments the fast path takes are offloaded; under netem
    # many rr messages take the full path, so not all 2000 are counted.)
    json_true "$st" "d['copy_fallback_below_threshold'] > 0" ||
        fail "no rr message of 1000 bytes was counted below the threshold: $st"
    fault=${ETA_TEST_DMA_FAULT:-}
    at=${fault#*@}; at=${at%%x*}
    case "${fault%%@*}" in
        "") json_true "$st" "d['copy_fallback_error'] == 0 and d['copy_fallback_device_gone'] == 0 and d['copy_fallback_stalled'] == 0" ||
                fail "the software device failed, stalled or went away: $st" ;;
        vanish) # it took copy number $at (from 0) and went: those after are the core's, the ones in flight redone
            json_true "$st" "d['copies_offloaded'] == $at + 1 and d['copy_fallback_device_gone'] > 1000 and d['copy_fallback_stalled'] == 0 and d['copy_fallback_error'] == 0" ||
                fail "after the device vanished at copy $at: $st" ;;
        error) json_true "$st" "d['copy_fallback_error'] > 0 and d['copy_fallback_device_gone'] == 0 and d['copies_offloaded'] > $at" ||
                fail "injected copy errors not counted, or the device was dropped: $st" ;;
        stall) json_true "$st" "d['copy_fallback_stalled'] > 0 and d['copy_fallback_device_gone'] > 1000" ||
                fail "the stalled device was not abandoned for the core: $st" ;;
        ring_full) json_true "$st" "d['copy_fallback_ring_full'] > 0 and d['copy_fallback_device_gone'] == 0" ||
                fail "refused copies not counted as ring_full: $st" ;;
        *) fail "ETA_TEST_DMA_FAULT=$fault: unknown kind" ;;
    esac
    if [ -n "$fault" ]; then
        grep -q "ETA_TEST_DMA_FAULT=$fault: injecting" "$work/ppe.log" || fail "eta-ppe did not log the injected fault"
        echo "injected $fault mid-transfer: every byte verified; $(grep -c . "$work/ppe.log") log lines"
    fi
    ppe_stat | grep -c "copy engine: dmadev:dma_skeleton, payloads of 1024 bytes or more" >/dev/null ||
        fail "eta-stat's text view does not name the copy engine"
fi
if [ "${ETA_TEST_TX_ZEROCOPY:-}" = 1 ]; then
    # Every byte above was verified; the segments went by reference (the
    # stream's full segments; single and retransmitted ones are copied).
    st=$(ppe_stat --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['engines'][0]['stacks'][0]))")
    echo "by reference: $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print({k: d[k] for k in ('tx_ref_frames', 'tx_ref_bytes', 'tx_run_segments')})" "$st")"
    json_true "$st" "d['tx_ref_frames'] > 10000 and d['tx_ref_bytes'] >= 1000 * d['tx_ref_frames']" ||
        fail "too few segments went by reference: $st"
    ppe_stat | grep -c "segments by reference" >/dev/null || fail "eta-stat's text view does not show segments by reference"
    grep -q "tx_zerocopy = true, but" "$work/ppe.log" && fail "the port did not take tx_zerocopy: $(cat "$work/ppe.log")"
fi
if [ -n "${ETA_TEST_MTU:-}" ]; then
    # Frames larger than Ethernet's 1514 bytes went both ways: the stream
    # moved in jumbo frames (on average well above 1514 bytes per frame).
    for dir in i o; do
        avg=$(ppe_json "d['ports'][0]['${dir}bytes'] // max(1, d['ports'][0]['${dir}packets'])")
        echo "port average ${dir}-frame: $avg bytes"
        [ "$avg" -gt 2000 ] || fail "the port's average frame ($dir) is $avg bytes: no jumbo frames at mtu $ETA_TEST_MTU"
    done
fi
ppe_stop
echo "PASS"
