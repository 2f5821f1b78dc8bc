#!/usr/bin/env bash
# Side by side in one run, the same server program twice: one process under
# eta-run bound to the PPE's address (its TCP goes through the PPE), one plain
# process bound to the kernel link's address (no shim at all). The same client
# in the lab's peer namespace drives both.
#   sockperf ping-pong, 64 B: p50 / p99 latency
#   iperf3 peer -> server (the server receives): throughput and the server's
#   CPU seconds per GiB (utime+stime from /proc, ETA's "host CPU")
# Needs root and a built eta-ppe. Reports; asserts nothing.
#   benchmarks/preload/bench.sh [BUILD_DIR] [SECONDS]
# ETA_BENCH_REPEAT=N measures N times in the same lab (eta, kernel, eta, ...).
# With ETA_BENCH_JSON=FILE it also writes one JSON object per path to FILE
# (the table's figures plus the distribution of sockperf's per-message latencies,
# µs at fixed quantiles, for CDFs).
# ETA_BENCH_READER=0 leaves out the blocking reader's 512 MiB per path and
# repetition (its line at the end; `tools/eta bench report --quick`, which
# does not show it).
# ETA_BENCH_LATENCY=FILE writes eta-stat --latency there after the first
# sockperf run through eta (the stages of its sampled requests).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
secs=${2:-5}
. "$top/tests/integration/lib.sh"
ppe_bin=$build/ppe/eta-ppe
[ -x "$ppe_bin" ] || fail "no eta-ppe at $ppe_bin (build it first)"
export ETA_PRELOAD_LIB=$build/preload/libeta-preload.so
[ -f "$ETA_PRELOAD_LIB" ] || fail "no shim at $ETA_PRELOAD_LIB"
lab_up
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
start_bg ppe timeout 600 "$ppe_bin" --config "$ETA_LAB_CONFIG" --foreground
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
wait_until 60 test -S "$ETA_LAB_SOCKET" || fail "eta-ppe did not start"
[ -f "$ETA_LAB_SOCKET.net" ] || export ETA_NET="port $ETA_LAB_PPE_IP/$ETA_LAB_PREFIX"
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
# The engine's posted receives (eta-stat; issue 13): "posts posted_bytes", summed over engines.
posted() {
    "$build/ppe/eta-stat" --socket "$ETA_LAB_SOCKET" --json 2>/dev/null |
        python3 -c "import json,sys; e=json.load(sys.stdin)['engines']; print(sum(x.get('posts',0) for x in e), sum(x.get('posted_bytes',0) for x in e))" ||
        echo "0 0"
}

# Background programs are started as commands (not shell functions), so the
# PID start_bg records is the program's own and cleanup reaches it.
out=$(mktemp -d)
on_exit "rm -rf $out"
eta_run=("$top/tools/eta-run" --require --socket "$ETA_LAB_SOCKET" --)
start_bg sp_eta timeout 600 "${eta_run[@]}" sockperf server --tcp -i "$ETA_LAB_PPE_IP" -p 11111 > "$out/sp_eta.log" 2>&1
start_bg sp_kernel timeout 600 sockperf server --tcp -i "$ETA_LAB_KERNEL_IP" -p 11111 > "$out/sp_kernel.log" 2>&1
start_bg ip_eta timeout 600 "${eta_run[@]}" iperf3 -s --forceflush -B "$ETA_LAB_PPE_IP" -p 5201 > "$out/ip_eta.log" 2>&1
start_bg ip_kernel timeout 600 iperf3 -s --forceflush -B "$ETA_LAB_KERNEL_IP" -p 5201 > "$out/ip_kernel.log" 2>&1
# The PPE's address is not the kernel's, so ss cannot see those listeners:
# wait for the programs to say they are listening.
for path in eta kernel; do
    wait_until 20 grep -q "to block on socket" "$out/sp_$path.log" || { cat "$out/sp_$path.log"; fail "sockperf server ($path) did not start"; }
    wait_until 20 grep -q "Server listening on 5201" "$out/ip_$path.log" || { cat "$out/ip_$path.log"; fail "iperf3 server ($path) did not start"; }
done

engine=$(pgrep -P "$ppe_pid" -x eta-ppe) || fail "eta-ppe exited"
printf '%-8s %12s %12s %14s %16s %16s\n' path "p50 (us)" "p99 (us)" "recv (Gbit/s)" "server CPU s/GiB" "engine CPU s/GiB"
for rep in $(seq 1 "${ETA_BENCH_REPEAT:-1}"); do
for path in eta kernel; do
    dst=$ETA_LAB_PPE_IP ip_server=$(pgrep -P "$ip_eta_pid" -x iperf3)
    [ $path = kernel ] && dst=$ETA_LAB_KERNEL_IP ip_server=$(pgrep -P "$ip_kernel_pid" -x iperf3)
    sp_server=$(pgrep -P "$sp_eta_pid" -x sockperf)
    [ $path = kernel ] && sp_server=$(pgrep -P "$sp_kernel_pid" -x sockperf)
    s0=$(cpu_s "$sp_server")
    peer timeout $((secs + 30)) sockperf ping-pong --tcp -i "$dst" -p 11111 -t "$secs" -m 64 \
        --full-log "$out/sp-full.$path" > "$out/sp.$path"
    s1=$(cpu_s "$sp_server")
    txns=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' "$out/sp.$path" | head -1)
    p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$out/sp.$path")
    p99=$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' "$out/sp.$path")
    [ -z "$p50" ] || [ -z "$p99" ] || echo "$path $p50 $p99" >> "$out/latency"
    # ETA_BENCH_LATENCY=FILE: the engine's latency breakdown of the sampled
    # requests (eta-stat --latency) once sockperf's first eta run is done.
    if [ -n "${ETA_BENCH_LATENCY:-}" ] && [ $path = eta ] && [ "$rep" = 1 ]; then
        sleep 0.3 # published every 250 ms (a report, not a test)
        "$build/ppe/eta-stat" --socket "$ETA_LAB_SOCKET" --latency > "$ETA_BENCH_LATENCY" 2>&1 || true
    fi
    c0=$(cpu_s "$ip_server") e0=$(cpu_s "$engine")
    read -r posts0 pbytes0 < <(posted)
    peer timeout $((secs + 30)) iperf3 -c "$dst" -p 5201 -t "$secs" --json > "$out/ip.$path"
    c1=$(cpu_s "$ip_server") e1=$(cpu_s "$engine")
    sleep 0.3 # eta-stat's counters are published every 250 ms (a report, not a test: no assertion waits on it)
    read -r posts1 pbytes1 < <(posted)
    read -r bps bytes < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['end']['sum_received']; print(d['bits_per_second'], d['bytes'])" "$out/ip.$path")
    awk -v p="$path" -v a="$p50" -v b="$p99" -v bps="$bps" -v by="$bytes" -v c0="$c0" -v c1="$c1" \
        -v e0="$e0" -v e1="$e1" \
        'BEGIN { gib = by / 2^30; e = p == "eta" ? sprintf("%.3f", (e1 - e0) / gib) : "-"
                 printf "%-8s %12s %12s %14.2f %16.3f %16s\n", p, a, b, bps / 1e9, (c1 - c0) / gib, e }'
    [ $path = eta ] && awk -v n=$((posts1 - posts0)) -v pb=$((pbytes1 - pbytes0)) -v by="$bytes" \
        'BEGIN { printf "         (iperf3 server under eta-run: %d posted reads, %.0f%% of its bytes written by the engine)\n", n, (by > 0 ? 100 * pb / by : 0) }'
    # A blocking reader (issue 13): python3 recv_into() of 1 MiB, 512 MiB from the peer; its CPU from
    # accept to end of stream (getrusage), as "path cpu_s bytes posts posted_bytes" for the closing line.
    port=$((5301 + rep * 2)); [ $path = eta ] || port=$((port + 1))
    if [ "${ETA_BENCH_READER:-1}" != 0 ]; then
    reader=(python3 -c "
import resource, socket, sys
l = socket.create_server((sys.argv[1], int(sys.argv[2])))
print('listening', flush=True)
c, _ = l.accept()  # blocking: recv_into() blocks (and posts, under eta-run)
r0 = resource.getrusage(resource.RUSAGE_SELF)
buf = bytearray(1 << 20)
total = 0
while True:
    n = c.recv_into(buf)
    if n == 0:
        break
    total += n
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, total)" "$dst" "$port")
    [ $path = eta ] && reader=("${eta_run[@]}" "${reader[@]}")
    coproc RD { timeout 120 "${reader[@]}" 2>/dev/null; }
    # Copies of the coprocess's output and pid: bash unsets RD and RD_PID (and closes RD's descriptor)
    # once it reaps the coprocess, which on a busy machine can come before the last read below.
    rd_pid=${RD_PID:-}
    if [ -n "${RD[0]:-}" ]; then exec {rd}<&"${RD[0]}"; else exec {rd}</dev/null; fi
    read -r -t 20 ready <&"$rd" || true
    read -r posts0 pbytes0 < <(posted)
    peer timeout 60 bash -c "head -c $((512 << 20)) /dev/zero | socat -u - TCP:$dst:$port" || true
    read -r -t 60 rcpu rbytes <&"$rd" || true
    exec {rd}<&-
    [ -z "$rd_pid" ] || wait "$rd_pid" 2>/dev/null || true
    sleep 0.3 # eta-stat's counters are published every 250 ms
    read -r posts1 pbytes1 < <(posted)
    echo "$path ${rcpu:-0} ${rbytes:-0} $((posts1 - posts0)) $((pbytes1 - pbytes0))" >> "$out/reader"
    fi
    # For the closing lines: the servers' own CPU per sockperf transaction and per GiB iperf3 sent them.
    echo "$path $(awk -v s0="$s0" -v s1="$s1" -v n="${txns:-0}" -v c0="$c0" -v c1="$c1" -v by="$bytes" \
        'BEGIN { printf "%.3f %.4f", (n > 0 ? (s1 - s0) * 1e6 / n : 0), (c1 - c0) / (by / 2^30) }')" >> "$out/host_cpu"
    if [ -n "${ETA_BENCH_JSON:-}" ]; then
        python3 - "$path" "$p50" "$p99" "$bps" "$bytes" "$c0" "$c1" "$e0" "$e1" "$out/sp-full.$path" "$rep" >> "$ETA_BENCH_JSON" <<'PY'
import json, sys
path, p50, p99, bps, nbytes, c0, c1, e0, e1, full, rep = sys.argv[1:]
gib = float(nbytes) / 2**30
lat = []
for line in open(full):  # "packet, txTime (s), rxTime (s), latency (µs, RTT / 2 as sockperf reports it)"
    parts = [p.strip() for p in line.split(",")]
    try:
        if len(parts) == 4:
            lat.append(float(parts[3]))
    except ValueError:
        continue
lat.sort()
# The distribution at fixed quantiles (as eta-perf --json gives it): small, and enough for a CDF.
grid = [i / 100 for i in range(1, 100)] + [0.995, 0.999, 0.9995, 0.9999, 1.0]
quantiles = [[q, round(lat[min(len(lat) - 1, int(q * len(lat)))], 2)] for q in grid] if lat else []
print(json.dumps({"path": path, "rep": int(rep), "p50_us": float(p50 or 0), "p99_us": float(p99 or 0),
                  "recv_gbit_per_s": float(bps) / 1e9, "server_cpu_s_per_gib": (float(c1) - float(c0)) / gib,
                  "engine_cpu_s_per_gib": (float(e1) - float(e0)) / gib if path == "eta" else None,
                  "latency_samples": len(lat), "latency_us_quantiles": quantiles}))
PY
    fi
done
done
# The issue-13 lines, means over repetitions (the programs' own CPU, not the PPE's: the engine's is in the table).
awk '{ t[$1] += $2; g[$1] += $3; n[$1]++ }
     END { if (n["eta"] && n["kernel"] && t["kernel"] > 0 && g["kernel"] > 0) {
               printf "host CPU per transaction (rr 64 B): eta/kernel = %.2fx  (sockperf server: eta %.2f us, kernel %.2f us)\n", (t["eta"] / n["eta"]) / (t["kernel"] / n["kernel"]), t["eta"] / n["eta"], t["kernel"] / n["kernel"]
               printf "host CPU per GiB received: eta/kernel = %.2fx  (iperf3 server: eta %.3f s, kernel %.3f s)\n", (g["eta"] / n["eta"]) / (g["kernel"] / n["kernel"]), g["eta"] / n["eta"], g["kernel"] / n["kernel"] } }' "$out/host_cpu"
# iperf3 reads non-blocking sockets (it sets O_NONBLOCK and select()s), which never post; a blocking
# reader's large reads do (issue 13).
awk '$3 > 0 { c[$1] += $2; b[$1] += $3; p[$1] += $4; pb[$1] += $5 }
     END { if (b["eta"] && b["kernel"] && c["kernel"] > 0) {
               e = c["eta"] / (b["eta"] / 2^30); k = c["kernel"] / (b["kernel"] / 2^30)
               printf "blocking reader (python3 recv_into 1 MiB) CPU per GiB: eta/kernel = %.2fx  (eta %.3f s, kernel %.3f s; %d posts, %.0f%% of the bytes written by the engine)\n", e / k, e, k, p["eta"], 100 * pb["eta"] / b["eta"] } }' "$out/reader" 2>/dev/null || true
# Issue 33's closing lines: sockperf's ping-pong latency, eta against the kernel (means over repetitions).
awk '{ a[$1] += $2; b[$1] += $3; n[$1]++ }
     END { if (n["eta"] && n["kernel"] && a["kernel"] > 0 && b["kernel"] > 0) {
               printf "latency rr 64 B p50: eta/kernel = %.2fx  (sockperf ping-pong: eta %.2f us, kernel %.2f us)\n", (a["eta"] / n["eta"]) / (a["kernel"] / n["kernel"]), a["eta"] / n["eta"], a["kernel"] / n["kernel"]
               printf "latency rr 64 B p99: eta/kernel = %.2fx  (sockperf ping-pong: eta %.2f us, kernel %.2f us)\n", (b["eta"] / n["eta"]) / (b["kernel"] / n["kernel"]), b["eta"] / n["eta"], b["kernel"] / n["kernel"] } }' "$out/latency" 2>/dev/null || true
