#!/usr/bin/env bash
# Bounded libFuzzer run of the mars input path over the checked-in corpus.
# New inputs go to a temporary directory (never into the source tree), which
# is removed at exit.   run_libfuzzer.sh FUZZER CORPUS_DIR [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 corpus=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec_rc=0
"$fuzzer" "$work" "$corpus" -artifact_prefix="$work/" -print_final_stats=1 "$@" || exec_rc=$?
if [ $exec_rc -ne 0 ]; then
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "reproducer (base64) $(basename "$f"):"; base64 -w0 "$f"; echo; }
    done
fi
exit $exec_rc
