# tests/integration/preload/engines_lib.sh: sourced by the lab tests that
# pass or exec accelerated sockets (exec_test.sh, pass_test.sh), after
# ../lib.sh; needs ETA_STAT, ETA_LAB_SOCKET and PY.
# Warnings of the shim in log $1 (eta-run's own, that a PPE with as many
# engines as this machine has CPUs leaves the program none of its own, is
# the lab's, not the program's).
warnings_in() { grep "warning" "$1" | grep -v "every allowed CPU is a PPE engine core"; }
# Connections each engine took, one number per engine (ETA_TEST_ENGINES=2:
# passed and exec'd listeners must serve the connections of every engine).
engine_opens() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(sum(s['tcp_passive_opens'] for s in e['stacks'])) for e in d['engines']))"
}
# True when every engine took more connections than at $1 (engine_opens then).
every_engine_above() {
    "$PY" -c "import sys; b, a = sys.argv[1].split(), sys.argv[2].split(); sys.exit(0 if len(a) == len(b) and all(int(y) > int(x) for x, y in zip(b, a)) else 1)" "$1" "$(engine_opens)"
}
# Every engine took more connections than at the start ($1: engine_opens then).
# Engines publish their counters every 10 ms while they work and when they
# nap, so the counts may trail the last connection by a moment.
every_engine_took() {
    wait_until 20 every_engine_above "$1" ||
        fail "$2: connections per engine went from '$1' to '$(engine_opens)': not every engine carried some"
    note "$2: connections per engine '$1' -> '$(engine_opens)'"
}
