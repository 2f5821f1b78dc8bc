#!/usr/bin/env bash
# Where an unmodified receiver's CPU goes (issue 13): iperf3's server under
# eta-run (bound to the PPE's address) beside a plain one on the kernel link,
# the same peer client driving each in turn. Per GiB received, from /proc:
# the server's user and system CPU seconds, its voluntary and involuntary
# context switches (sleeps, preemptions), and the engine's CPU; with
# `strace` also the server's system calls (strace -c -f attached for the
# run, which slows it: read the counts, not the CPU, of that run).
# Needs root and a built eta-ppe. Reports; asserts nothing.
#   benchmarks/preload/receiver-profile.sh [BUILD_DIR] [SECONDS] [plain|strace] [REPEAT]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
secs=${2:-5}
mode=${3:-plain}
reps=${4:-1}
case "$mode" in plain|strace) ;; *) echo "mode must be plain or strace, not '$mode'" >&2; exit 2 ;; esac
[[ "$secs" =~ ^[0-9]+$ && "$reps" =~ ^[0-9]+$ ]] || { echo "SECONDS and REPEAT are whole numbers" >&2; exit 2; }
. "$top/tests/integration/lib.sh"
[ -x "$build/ppe/eta-ppe" ] || fail "no eta-ppe in $build/ppe (build it first)"
export ETA_PRELOAD_LIB=$build/preload/libeta-preload.so
[ -f "$ETA_PRELOAD_LIB" ] || fail "no shim at $ETA_PRELOAD_LIB"
[ "$mode" = plain ] || command -v strace >/dev/null || fail "strace is not installed"
lab_up
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
start_bg ppe timeout 900 "$build/ppe/eta-ppe" --config "$ETA_LAB_CONFIG" --foreground
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
wait_until 60 test -S "$ETA_LAB_SOCKET" || fail "eta-ppe did not start"
[ -f "$ETA_LAB_SOCKET.net" ] || export ETA_NET="port $ETA_LAB_PPE_IP/$ETA_LAB_PREFIX"
out=$(mktemp -d)
on_exit "rm -rf $out"
eta_run=("$top/tools/eta-run" --require --socket "$ETA_LAB_SOCKET" --)
start_bg ip_eta timeout 900 "${eta_run[@]}" iperf3 -s --forceflush -B "$ETA_LAB_PPE_IP" -p 5201 > "$out/ip_eta.log" 2>&1
start_bg ip_kernel timeout 900 iperf3 -s --forceflush -B "$ETA_LAB_KERNEL_IP" -p 5201 > "$out/ip_kernel.log" 2>&1
for path in eta kernel; do
    wait_until 20 grep -q "Server listening on 5201" "$out/ip_$path.log" || fail "iperf3 server ($path) did not start"
done
engine=$(pgrep -P "$ppe_pid" -x eta-ppe) || fail "eta-ppe exited"
# "user system" CPU seconds of a process; its "voluntary involuntary" context switches.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{print $14 / hz, $15 / hz}' "/proc/$1/stat"; }
switches() { awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2} END {print v, n}' "/proc/$1/status"; }
printf '%-7s %9s %10s %10s %12s %10s %10s\n' path Gbit/s "user s/GiB" "sys s/GiB" "engine s/GiB" "vcsw/GiB" "nvcsw/GiB"
for rep in $(seq 1 "$reps"); do
    for path in eta kernel; do
        dst=$ETA_LAB_PPE_IP srv=$(pgrep -P "$ip_eta_pid" -x iperf3)
        [ $path = kernel ] && dst=$ETA_LAB_KERNEL_IP srv=$(pgrep -P "$ip_kernel_pid" -x iperf3)
        if [ "$mode" = strace ]; then
            strace -c -f -p "$srv" -o "$out/strace.$path" 2>/dev/null &
            tracer=$!
            wait_until 10 grep -q TracerPid:.[1-9] "/proc/$srv/status" || fail "strace did not attach"
        fi
        read -r u0 s0 < <(cpu "$srv"); read -r e0 x0 < <(cpu "$engine"); read -r v0 n0 < <(switches "$srv")
        peer timeout $((secs + 30)) iperf3 -c "$dst" -p 5201 -t "$secs" --json > "$out/ip.$path"
        read -r u1 s1 < <(cpu "$srv"); read -r e1 x1 < <(cpu "$engine"); read -r v1 n1 < <(switches "$srv")
        if [ "$mode" = strace ]; then
            kill -INT "$tracer"
            wait "$tracer" || true
        fi
        read -r bps bytes < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['end']['sum_received']; print(d['bits_per_second'], d['bytes'])" "$out/ip.$path")
        awk -v p=$path -v by="$bytes" -v bps="$bps" -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" \
            -v e0="$e0" -v x0="$x0" -v e1="$e1" -v x1="$x1" -v v=$((v1 - v0)) -v n=$((n1 - n0)) \
            'BEGIN { g = by / 2^30; u = u1 - u0; s = s1 - s0; e = e1 + x1 - e0 - x0; printf "%-7s %9.2f %10.3f %10.3f %12s %10d %10d\n", p, bps / 1e9, u / g, s / g,
                     p == "eta" ? sprintf("%.3f", e / g) : "-", v / g, n / g }'
        if [ "$mode" = strace ]; then
            # strace -c's table: "% time, seconds, usecs/call, calls, [errors,] syscall"; the calls that
            # matter per GiB (100 or more), then the total.
            awk -v by="$bytes" 'BEGIN { g = by / 2^30 } $NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ {
                if ($NF == "total") t = $4; else if ($4 / g >= 100) printf "        %-14s %8d calls/GiB\n", $NF, $4 / g }
                END { printf "        %-14s %8d calls/GiB\n", "all", t / g }' "$out/strace.$path"
        fi
    done
done
