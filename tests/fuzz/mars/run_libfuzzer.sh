#!/usr/bin/env bash
# Bounded libFuzzer run of the mars input path over the checked-in corpus.
# New inputs go to a temporary directory (never into the source tree), which
# is removed at exit.   run_libfuzzer.sh FUZZER CORPUS_DIR [libFuzzer flags...]
# The last line it prints is the rate libFuzzer measured, and the CPU time the
# run took (on a shared machine the wall-clock rate depends on the load; the
# rate per CPU second much less):
#   FUZZER: N exec/s (M inputs run in S s; C s of CPU, R inputs per CPU second)
# (N from libFuzzer's final stats; the issue's goal for mars is 5,000 or more
# under the documented ASan/UBSan clang build).
#
# -entropic=0 by default (a flag given after it wins): libFuzzer's entropic
# power schedule recomputes its input weights from per-input feature counts,
# which with this target's ~13,000 features cost more than the target itself
# (measured with the fixture of issue 15: 0.9 ms of libFuzzer per input with
# it, 0.2 ms without), and a 20 s run without it reached more (cov/ft
# 4023/12893 against 3965/12634).
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec_rc=0
start=$(date +%s.%N)
"$fuzzer" "$work" "$corpus" -artifact_prefix="$work/" -print_final_stats=1 -entropic=0 "$@" 2>&1 | tee "$work/log" || exec_rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
# CPU seconds of this shell's children (the fuzzer; tee is negligible). Not
# inside $(...): a subshell has no children of its own to count.
times > "$work/times"
cpu=$(tail -1 "$work/times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
if [ $exec_rc -ne 0 ]; then
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "reproducer (base64) $(basename "$f"):"; base64 -w0 "$f"; echo; }
    done
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
per_cpu=$(awk -v r="${runs:-0}" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", r / c; else print "?" }')
echo "$(basename "$fuzzer"): ${rate:-?} exec/s (${runs:-?} inputs run in $secs s; $cpu s of CPU, $per_cpu inputs per CPU second)"
exit $exec_rc
