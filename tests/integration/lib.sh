# tests/integration/lib.sh: shared helpers for integration test scripts.
# Source it, then call lab_up. Everything registered with on_exit, the lab
# included, is undone when the script exits for any reason.
#
#   . "$(dirname "$0")/../lib.sh"
#   lab_up [--mtu N]            # brings up a lab named after this test; sets ETA_LAB_*
#   peer CMD...                 # runs CMD in the lab's peer namespace
#   start_bg NAME CMD...        # starts CMD in the background; killed (by PID) at exit
#   fail MESSAGE                # prints and exits 1
set -euo pipefail

ETA_LAB=${ETA_LAB:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools" && pwd)/eta-lab}
_cleanups=()
_bg_pids=()

on_exit() { _cleanups+=("$*"); }

_run_cleanups() {
    local rc=$? pid i
    for pid in "${_bg_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${_bg_pids[@]}"; do
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do
        eval "${_cleanups[$i]}" >/dev/null 2>&1 || true
    done
    exit $rc
}
trap _run_cleanups EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "--- $*"; }

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }

lab_up() {
    local name
    name=t$$-$(basename "$0" .sh | tr -c 'a-z0-9\n' '-' | cut -c1-12)
    name=${name%-}
    local out
    out=$("$ETA_LAB" up --name "$name" "$@") || fail "eta-lab up failed"
    on_exit "\"$ETA_LAB\" down --name $name"
    eval "$out"
    export "${!ETA_LAB_@}"
}

peer() { ip netns exec "$ETA_LAB_NS" "$@"; }

start_bg() {
    local name=$1
    shift
    "$@" &
    _bg_pids+=($!)
    eval "${name}_pid=$!"
}

# Waits (bounded) until CMD succeeds; for readiness checks of servers.
wait_until() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    return 1
}
