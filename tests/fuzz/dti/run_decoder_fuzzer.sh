#!/usr/bin/env bash
# Bounded libFuzzer run of the command decoder over the checked-in corpus,
# then the rate: "executions per second: N" (libFuzzer's own count over the
# whole run). New inputs go to a temporary directory (never into the source
# tree), removed at exit.
#   run_decoder_fuzzer.sh FUZZER CORPUS_DIR [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
"$fuzzer" "$work" "$corpus" -artifact_prefix="$work/" -print_final_stats=1 "$@" 2>"$work/log" || rc=$?
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
exit $rc
