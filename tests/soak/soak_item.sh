#!/usr/bin/env bash
# One item of tools/eta soak (tests/soak/soak runs them all). Each item brings
# up its own lab and eta-ppe and takes them down again, also on failure.
# The last line it prints on stdout is its summary; exit 0 when it held.
#   soak_item.sh BUILD transfer ROUNDS BYTES
#   soak_item.sh BUILD appkill APPS BATCH
#   soak_item.sh BUILD synflood COUNT RATE
BUILD=$1 ITEM=$2
shift 2
ETA_PPE=$BUILD/ppe/eta-ppe ETA_STAT=$BUILD/ppe/eta-stat PERF=$BUILD/ppe/eta-perf
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
need_built "$PERF" eta-perf
need_built "$ETA_STAT" eta-stat
. "$here/../integration/ppe/ppe_lib.sh"

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET
P=$ETA_LAB_PEER_IP H=$ETA_LAB_PPE_IP
stacks_sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }

# 1 GiB each way (by default), ROUNDS rounds, under the issue's impairment:
# eta-perf's native client against a kernel server in the peer, CRC32C (ISA-L)
# over every byte on both ends. A stall is a transfer slower than 2 MB/s on
# average (bounded by `timeout`).
item_transfer() {
    local rounds=$1 bytes=$2 impair="loss 1% duplicate 1% reorder 5% corrupt 0.1% delay 1ms"
    start_bg srv ip netns exec "$ETA_LAB_NS" timeout 7200 "$PERF" server --transport kernel --port 5601
    wait_until 10 peer bash -c "ss -ltn | grep -c ':5601' >/dev/null" || fail "peer eta-perf server did not listen"
    # shellcheck disable=SC2086
    "$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel $impair >/dev/null || fail "eta-lab netem $impair failed"
    local bound=$((60 + bytes / (2 << 20))) r dir out longest=0 rates=""
    for r in $(seq 1 "$rounds"); do
        for dir in send recv; do
            out=$(timeout "$bound" "$PERF" client --transport dti --connect "$P" --port 5601 --mode stream \
                --direction "$dir" --size 65536 --bytes "$bytes" --verify --json) ||
                fail "transfer: round $r $dir failed or stalled (no end within $bound s): $out"
            json_true "$out" "d['ok'] and d['verified'] and d['bytes'] == $bytes and d['peer_bytes'] == $bytes" ||
                fail "transfer: round $r $dir not byte-exact: $out"
            read -r secs gbps < <(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["seconds"], d["gbit_per_s"])' "$out")
            echo "round $r $dir: $bytes bytes in $secs s ($gbps Gbit/s), CRC32C verified"
            rates+="$gbps "
            longest=$(python3 -c "print(max($longest, $secs))")
        done
    done
    "$ETA_LAB" netem --name "$ETA_LAB_NAME" --link accel off >/dev/null || true
    # What the impairment did, as eta-ppe saw it over the whole run.
    local rtx
    rtx=$(ppe_json "'%d out-of-order segments, %d D-SACKs sent, %d corrupt segments dropped, %d retransmits' % tuple(
        sum(s[k] for e in d['engines'] for s in e['stacks']) for k in
        ('tcp_ooo_segments', 'tcp_dsacks_sent', 'drop_tcp_csum', 'tcp_retransmits'))")
    echo "transfer: $rounds of $rounds rounds, $(numfmt --to=iec-i "$bytes")B each way under netem $impair:" \
        "byte-exact (CRC32C), $(python3 -c "import sys; x=[float(v) for v in sys.argv[1:]]; print('%.3f-%.3f Gbit/s' % (min(x), max(x)))" $rates)," \
        "longest $longest s (bound $bound s); eta-ppe: $rtx - held"
}

# APPS native applications, BATCH at a time, each killed with SIGKILL while
# its stream to the peer runs; then eta-stat must be back at its baseline.
item_appkill() {
    local apps=$1 batch=$2 killed=0 pids i n
    start_bg srv ip netns exec "$ETA_LAB_NS" timeout 3600 "$PERF" server --transport kernel --port 5602
    wait_until 10 peer bash -c "ss -ltn | grep -c ':5602' >/dev/null" || fail "peer eta-perf server did not listen"
    local ooo0
    ooo0=$(stacks_sum ooo_frames_used)
    ppe_true "d['apps'] == [] and d['connections_total'] == 0" || fail "appkill: eta-stat not at baseline before: $(ppe_stat --json --no-conns)"
    established() { peer ss -Htn state established '( sport = :5602 )' | wc -l; }
    while [ "$killed" -lt "$apps" ]; do
        n=$(( apps - killed < batch ? apps - killed : batch ))
        pids=()
        for i in $(seq 1 "$n"); do
            "$PERF" client --transport dti --connect "$P" --port 5602 --mode stream --direction send \
                --duration 60 >/dev/null 2>&1 &
            pids+=($!)
            _bg_pids+=($!)
        done
        # Mid-transfer: every one of them has its connection up and sending.
        wait_until 30 bash -c "[ \$(ip netns exec $ETA_LAB_NS ss -Htn state established '( sport = :5602 )' | wc -l) -ge $n ]" ||
            fail "appkill: $n applications did not all connect (after $killed killed): $(established) established"
        kill -KILL "${pids[@]}"
        for i in "${pids[@]}"; do wait "$i" 2>/dev/null || true; done
        killed=$((killed + n))
        kill -0 "$PPE_REAL_PID" 2>/dev/null || fail "appkill: eta-ppe died after $killed applications were killed"
        # The PPE resets their connections: the peer's server sees them go.
        wait_until 30 bash -c "[ \$(ip netns exec $ETA_LAB_NS ss -Htn state established '( sport = :5602 )' | wc -l) -eq 0 ]" ||
            fail "appkill: connections of killed applications stay established in the peer ($(established))"
    done
    wait_until 60 ppe_true "d['apps'] == [] and d['connections_total'] == 0 and
        sum(s['conns_open'] for e in d['engines'] for s in e['stacks']) == 0 and
        sum(s['ooo_frames_used'] for e in d['engines'] for s in e['stacks']) <= $ooo0" ||
        fail "appkill: eta-stat did not return to its baseline: $(ppe_stat --json --no-conns)"
    # The PPE still serves: one more application, verified.
    local out
    out=$(timeout 60 "$PERF" client --transport dti --connect "$P" --port 5602 --mode stream --direction send \
        --bytes $((16 << 20)) --verify --json) || fail "appkill: the PPE does not serve a new application: $out"
    json_true "$out" "d['ok'] and d['verified']" || fail "appkill: new application's transfer not verified: $out"
    echo "appkill: $apps of $apps applications killed with SIGKILL mid-transfer ($batch at a time): eta-ppe lives on," \
        "eta-stat back at baseline (0 apps, 0 connections, out-of-order frames $ooo0), a new application verified - held"
}

# A SYN flood at the PPE address from the peer while a peer client is served
# by a native server on the PPE: its request/response run and new connections
# during the flood must succeed, and the PPE must have answered with cookies.
item_synflood() {
    local count=$1 rate=$2
    start_bg srv timeout 600 "$PERF" server --transport dti --port 5603 > "$work/srv.log"
    wait_until 10 grep -q listening "$work/srv.log" || fail "synflood: the dti server did not listen"
    # The peer's kernel would answer the PPE's SYN-ACKs with resets (freeing
    # the half-open connections): drop those, for the flood's ports only.
    peer nft -f - <<EOF || fail "synflood: cannot install the peer's nft rule"
table inet etasoak {
  chain out { type filter hook output priority 0; ip daddr $H tcp sport 1024-32767 tcp flags & rst == rst drop; }
}
EOF
    local secs=$(( count / rate + 4 ))
    start_bg cli peer timeout $((secs + 60)) "$PERF" client --transport kernel --connect "$H" --port 5603 \
        --mode rr --size 64 --duration "$secs" --json > "$work/rr.json"
    start_bg flood peer timeout $((secs + 60)) python3 "$here/syn_flood.py" --src "$P" --dst "$H" --port 5603 \
        --count "$count" --rate "$rate" > "$work/flood.out"
    # New connections while the flood runs (ephemeral ports, above the flood's).
    local crr=0 out
    while kill -0 "$flood_pid" 2>/dev/null; do
        out=$(peer timeout 20 "$PERF" client --transport kernel --connect "$H" --port 5603 --mode crr --size 64 \
            --bytes 20 --json) || fail "synflood: a new connection during the flood failed: $out"
        crr=$((crr + 1))
    done
    wait "$flood_pid" || fail "synflood: the flood failed: $(cat "$work/flood.out")"
    wait "$cli_pid" || fail "synflood: the client being served failed: $(cat "$work/rr.json")"
    json_true "$(cat "$work/rr.json")" "d['ok'] and d['transactions'] > 0" || fail "synflood: client not served: $(cat "$work/rr.json")"
    local cookies ok tps
    cookies=$(stacks_sum tcp_syncookies_sent)
    ok=$(stacks_sum tcp_syncookies_ok)
    tps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%d transactions, %.0f/s, p99 %.0f us" % (d["transactions"], d["tps"], d["p99_us"]))' "$work/rr.json")
    [ "$cookies" -gt 0 ] || fail "synflood: the PPE sent no SYN cookie (the flood did not fill the SYN queue)"
    peer nft delete table inet etasoak || true
    echo "synflood: $(cat "$work/flood.out") at $H: the client kept being served ($tps) and $crr rounds of" \
        "20 new connections succeeded during it; $cookies SYN cookies sent, $ok validated - held"
}

case "$ITEM" in
    transfer) item_transfer "$@" ;;
    appkill) item_appkill "$@" ;;
    synflood) item_synflood "$@" ;;
    *) fail "unknown soak item '$ITEM'" ;;
esac
ppe_stop
