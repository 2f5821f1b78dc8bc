#!/usr/bin/env bash
# No `PRODUCER | grep -q` in the tree's shell scripts (tests, benchmarks,
# tools). Under `set -o pipefail` (tests/integration/lib.sh sets it) grep -q
# exits at its first match, a producer still writing gets SIGPIPE, and the
# pipeline fails although the line was there: a verdict that depends on
# scheduling (it failed report_quick once: eta-perf-vs-kernel's --cases check
# called a known exchange unknown). Write `| grep -c PATTERN >/dev/null`
# (reads everything) or `grep -q PATTERN FILE` / `<<<"$var"` instead.
#   grep_q_test.sh SOURCE_ROOT
root=${1:?usage: grep_q_test.sh SOURCE_ROOT}
cd "$root" || exit 1
found=$(grep -rnE '(^|[^|])\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q' tests benchmarks tools \
    --include='*.sh' --include='*.bash' -r 2>/dev/null; \
    grep -rlE '^#!.*(ba)?sh' tests benchmarks tools 2>/dev/null | grep -v '\.sh$' |
        xargs -r grep -nHE '(^|[^|])\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q')
found=$(printf '%s\n' "$found" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#' | grep -v '^$' | grep -v 'grep_q_test.sh')
if [ -n "$found" ]; then
    echo "PRODUCER | grep -q under pipefail is a race (SIGPIPE); use grep -c ... >/dev/null:" >&2
    printf '%s\n' "$found" >&2
    exit 1
fi
echo "grep_q: no 'PRODUCER | grep -q' in tests, benchmarks, tools"
