# tests/integration/lib.sh: shared helpers for integration test scripts.
# Source it, then call lab_up. Everything registered with on_exit, the lab
# included, is undone when the script exits for any reason.
#
#   . "$(dirname "$0")/../lib.sh"
#   lab_up [--mtu N]            # brings up a lab named after this test; sets ETA_LAB_*
#                               # ($ETA_TEST_ENGINES=N: the PPE runs N engines;
#                               #  $ETA_TEST_SHARED=1: its port shared with the kernel)
#   peer CMD...                 # runs CMD in the lab's peer namespace
#   start_bg NAME CMD...        # starts CMD in the background; killed (by PID) at exit
#   fail MESSAGE                # prints and exits 1
#   skip MESSAGE                # exits 77 (meson: skipped); under CI=true it fails instead
#   need_built PATH WHAT        # skip (CI: fail) unless PATH is an executable
#   refused WHY TEXT CMD...     # CMD must fail saying TEXT; fails the test if it succeeds
#                               # or fails for another reason (the probe did not run)
#   link_absent IFACE [NETNS]   # true when the link does not exist, false when it does;
#   netns_absent NAME           # ... the namespace; both fail the test when the probe breaks
#   json_true JSON COND         # a python condition over the parsed JSON (as d); never `assert`,
#                               # which PYTHONOPTIMIZE removes
set -euo pipefail

# Labs run a build tree's eta-ppe as root (they make namespaces and veths);
# eta-ppe refuses root unless told to (issue 34: the packaged service runs it
# as the user eta), so everything built on this library tells it.
export ETA_PPE_ALLOW_ROOT=${ETA_PPE_ALLOW_ROOT:-1}

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

# A test that cannot run says why. On a developer's machine that is a skip;
# under CI (CI=true) it is a failure, so that a green CI run cannot hide a
# test that never ran.
skip() {
    [ "${CI:-}" != true ] || fail "$* (under CI=true a test that cannot run fails)"
    echo "SKIP: $*"
    exit 77
}
need_built() { [ -x "$1" ] || skip "$2 is not built ($1)"; }

# nobody_tools: for a test that runs eta's programs as nobody. A checkout
# nobody cannot read (a clone under /root, mode 700) would make every such
# run fail "Permission denied", or pass a refusal check for that wrong
# reason: then eta-run, eta-stat (ETA_STAT, when set) and the shim with the
# libdti.so its RUNPATH names ($ORIGIN/../dti) are copied into a directory
# nobody may read (removed at exit), and ETA_RUN, ETA_STAT and
# ETA_PRELOAD_LIB (exported) name the copies.
nobody_tools() {
    if runuser -u nobody -- test -r "$ETA_RUN" -a -r "$ETA_PRELOAD_LIB" -a -r "${ETA_STAT:-$ETA_RUN}" 2>/dev/null; then
        return 0
    fi
    local dir
    dir=$(mktemp -d)
    on_exit "rm -rf $dir"
    mkdir -p "$dir/tools" "$dir/preload" "$dir/dti"
    cp "$ETA_RUN" "$dir/tools/eta-run" || fail "cannot copy $ETA_RUN for nobody"
    cp "$ETA_PRELOAD_LIB" "$dir/preload/" || fail "cannot copy $ETA_PRELOAD_LIB for nobody"
    cp -L "$(dirname "$ETA_PRELOAD_LIB")"/../dti/libdti.so* "$dir/dti/" 2>/dev/null || true
    [ -z "${ETA_STAT:-}" ] || cp "$ETA_STAT" "$dir/tools/eta-stat" || fail "cannot copy $ETA_STAT for nobody"
    chmod -R a+rX "$dir"
    ETA_RUN=$dir/tools/eta-run
    [ -z "${ETA_STAT:-}" ] || ETA_STAT=$dir/tools/eta-stat
    export ETA_PRELOAD_LIB="$dir/preload/$(basename "$ETA_PRELOAD_LIB")"
    note "this checkout is not readable by nobody: eta-run, eta-stat and the shim copied to $dir for its runs"
}

# Negative checks must tell "refused as it should be" from "the probe did not
# run" (namespace gone, tool missing): each looks for the specific answer.
refused() {
    local why=$1 text=$2 out rc=0
    shift 2
    out=$("$@" 2>&1) || rc=$?
    [ $rc -ne 0 ] || fail "$why: '$*' succeeded"
    [ $rc -ne 124 ] || fail "$why: '$*' timed out instead of answering"
    [[ "$out" == *"$text"* ]] || fail "$why: '$*' failed, but not with '$text' (rc $rc): $out"
}

link_absent() {
    local out rc=0
    if [ -n "${2:-}" ]; then
        out=$(ip -n "$2" link show "$1" 2>&1) || rc=$?
    else
        out=$(ip link show "$1" 2>&1) || rc=$?
    fi
    [ $rc -ne 0 ] || return 1
    [[ "$out" == *"does not exist"* ]] || fail "cannot tell whether link $1 exists${2:+ in $2}: $out"
}

netns_absent() {
    local list
    list=$(ip netns list) || fail "ip netns list failed"
    ! grep -q "^$1\b" <<<"$list"
}

json_true() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$1"; }

[ "$(id -u)" -eq 0 ] || skip "needs root"

# A test killed outright (meson's SIGKILL after a timeout, a lost CI machine's
# session) runs no cleanup, and its lab stays up holding a lab number. Test
# labs are named t<PID>-...: one whose test process is gone is taken down
# before a new one is made. Labs of tests still running, and labs not named
# by this file, are left alone.
reap_dead_test_labs() {
    local name pid
    while read -r name _; do
        [[ "$name" =~ ^t([0-9]+)- ]] || continue
        pid=${BASH_REMATCH[1]}
        [ "$pid" != "$$" ] || continue
        kill -0 "$pid" 2>/dev/null && continue
        echo "--- taking down lab $name left by test process $pid, which is gone" >&2
        "$ETA_LAB" down --name "$name" >/dev/null 2>&1 || echo "--- could not take down lab $name" >&2
    done < <("$ETA_LAB" list)
}

lab_up() {
    local name
    reap_dead_test_labs
    name=t$$-$(basename "$0" .sh | tr -c 'a-z0-9\n' '-' | cut -c1-12)
    name=${name%-}
    local out
    # ETA_TEST_ENGINES=N runs a test on a lab whose PPE has N engines;
    # ETA_TEST_DRIVER=D on `eta-lab up --driver D` (a test's own --driver wins);
    # ETA_TEST_SHARED=1 on `eta-lab up --shared` (issue 29: the suites with the
    # port shared with the host's kernel), except for a test that asks for the
    # vnet port, which the kernel keeps itself and cannot be shared.
    local shared=
    if [ -n "${ETA_TEST_SHARED:-}" ] && [[ " $* " != *" --driver vnet "* ]]; then shared=--shared; fi
    out=$("$ETA_LAB" up --name "$name" ${ETA_TEST_ENGINES:+--engines "$ETA_TEST_ENGINES"} \
        ${ETA_TEST_DRIVER:+--driver "$ETA_TEST_DRIVER"} $shared "$@") ||
        fail "eta-lab up failed"
    on_exit "\"$ETA_LAB\" down --name $name"
    eval "$out"
    export "${!ETA_LAB_@}"
}

peer() { ip netns exec "$ETA_LAB_NS" "$@"; }

# A TCP port free on the host now, the kernel's pick: a server that listens
# on INADDR_ANY (a hybrid listener under eta-run: its kernel half is bound in
# the host's namespace) takes one of these, not a fixed number, so anything
# else on the machine holding that number cannot fail the test.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

start_bg() {
    local name=$1
    shift
    "$@" &
    _bg_pids+=($!)
    eval "${name}_pid=$!"
}

# wait_until SECS CMD...: waits until CMD succeeds, at most SECS x
# ETA_TEST_WAIT_SCALE (default 3) seconds of wall time (a CMD that itself takes
# a while, like eta-stat on a loaded machine, cannot stretch the bound); for
# readiness checks and counters. SECS is what the event may honestly take with a
# CPU hog beside the suite; the scale is the margin for a far busier machine
# (two suites, a hog and builds on 2 cores, load ~24: a Python server under
# eta-run took over 30 s to listen there). It only lengthens a failure.
wait_until() {
    local secs=$1 end
    shift
    end=$((SECONDS + secs * ${ETA_TEST_WAIT_SCALE:-3}))
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}
