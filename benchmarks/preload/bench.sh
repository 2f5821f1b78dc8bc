#!/usr/bin/env bash
# Side by side in one run, against the same server process: a server under
# eta-run listens on INADDR_ANY, so the peer reaches it through the PPE
# (accelerated link) and through the kernel (kernel link).
#   sockperf ping-pong, 64 B: p50 / p99 latency
#   iperf3 peer -> server (the server receives): throughput and the server's
#   CPU seconds per GiB (utime+stime from /proc, ETA's "host CPU")
# Needs root and a built eta-ppe. Reports; asserts nothing.
#   benchmarks/preload/bench.sh [BUILD_DIR] [SECONDS]
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
out=$(mktemp -d)
on_exit "rm -rf $out"
eta_run() { "$top/tools/eta-run" --require --socket "$ETA_LAB_SOCKET" -- "$@"; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

start_bg sp eta_run sockperf server --tcp -p 11111
start_bg ip eta_run iperf3 -s -p 5201
wait_until 20 bash -c "ss -ltnp | grep -q ':11111' && ss -ltnp | grep -q ':5201'" || fail "servers did not start"
ip_server=$(pgrep -P "$ip_pid" -x iperf3 || echo "$ip_pid")

printf '%-8s %12s %12s %14s %16s\n' path "p50 (us)" "p99 (us)" "recv (Gbit/s)" "server CPU s/GiB"
for path in eta kernel; do
    dst=$ETA_LAB_PPE_IP
    [ $path = kernel ] && dst=$ETA_LAB_KERNEL_IP
    peer timeout $((secs + 30)) sockperf ping-pong --tcp -i "$dst" -p 11111 -t "$secs" -m 64 > "$out/sp.$path"
    p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$out/sp.$path")
    p99=$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' "$out/sp.$path")
    c0=$(cpu_s "$ip_server")
    peer timeout $((secs + 30)) iperf3 -c "$dst" -p 5201 -t "$secs" --json > "$out/ip.$path"
    c1=$(cpu_s "$ip_server")
    read -r bps bytes < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['end']['sum_received']; print(d['bits_per_second'], d['bytes'])" "$out/ip.$path")
    awk -v p="$path" -v a="$p50" -v b="$p99" -v bps="$bps" -v by="$bytes" -v c0="$c0" -v c1="$c1" \
        'BEGIN { printf "%-8s %12s %12s %14.2f %16.3f\n", p, a, b, bps / 1e9, (c1 - c0) / (by / 2^30) }'
done
