#!/usr/bin/env bash
# Bounded libFuzzer run of the mars input path over the checked-in corpus.
# New inputs go to a temporary directory (never into the source tree), which
# is removed at exit.   run_libfuzzer.sh FUZZER CORPUS_DIR [libFuzzer flags...]
# The last line it prints is the rate libFuzzer measured:
#   FUZZER: N exec/s (M inputs run in S s)
# (N from libFuzzer's final stats; the issue's goal for mars is 5,000 or more
# under the documented ASan/UBSan clang build).
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec_rc=0
start=$(date +%s.%N)
"$fuzzer" "$work" "$corpus" -artifact_prefix="$work/" -print_final_stats=1 "$@" 2>&1 | tee "$work/log" || exec_rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
if [ $exec_rc -ne 0 ]; then
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "reproducer (base64) $(basename "$f"):"; base64 -w0 "$f"; echo; }
    done
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "$(basename "$fuzzer"): ${rate:-?} exec/s (${runs:-?} inputs run in $secs s)"
exit $exec_rc
