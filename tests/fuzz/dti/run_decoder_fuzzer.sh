#!/usr/bin/env bash
# Bounded libFuzzer run of the command decoder over the checked-in corpus,
# then the rate: "executions per second: N" (libFuzzer's own count over the
# whole run), and the same per CPU second: "executions per CPU second: R
# (C s of CPU)" (on a shared machine the wall-clock rate follows the load;
# the rate per CPU second much less; the issue's goal is 20,000 or more under
# the documented ASan/UBSan clang build). New inputs go to a temporary
# directory (never into the source tree), removed at exit.
#   run_decoder_fuzzer.sh FUZZER CORPUS_DIR [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
"$fuzzer" "$work" "$corpus" -artifact_prefix="$work/" -print_final_stats=1 "$@" 2>"$work/log" || rc=$?
# CPU seconds of this shell's children (the fuzzer). Not inside $(...): a
# subshell has no children of its own to count.
times > "$work/times"
cpu=$(tail -1 "$work/times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
tail -n 30 "$work/log"
if [ $rc -ne 0 ]; then
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "reproducer (base64) $(basename "$f"):"; base64 -w0 "$f"; echo; }
    done
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
echo "executions: ${runs:-?}"
echo "executions per second: ${rate:-?}"
per_cpu=$(awk -v r="${runs:-0}" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", r / c; else print "?" }')
echo "executions per CPU second: $per_cpu ($cpu s of CPU)"
exit $rc
