# tests/integration/ppe/ppe_lib.sh: starting and stopping eta-ppe in tests.
# Source after ../lib.sh.  Needs ETA_PPE (the binary).
#
#   ppe_config [EXTRA_TOML]     writes $work/ppe.toml: the lab's config plus EXTRA_TOML
#   ppe_lab6 [LAB_UP ARGS]      lab_up, ETA_LAB_PPE_IP6 required, $work, ppe_config; H6, H4
#   ppe_ping6 ADDR [WHEN]       waits (30 s) until the peer's ping -6 ADDR is answered
#   ppe_start CONFIG            starts eta-ppe (adaptive idle, from the config) and waits
#                               until it is ready; PPE_PID (its timeout wrapper) and
#                               PPE_REAL_PID; killed by PID at exit
#   ppe_stop                    SIGTERM, bounded wait; fails unless it exits 0 with no
#                               sanitizer report (UBSan, ASan) in its log
#   ppe_kill9                   SIGKILL to eta-ppe itself (PPE_REAL_PID, not its wrapper);
#                               returns once that process is gone (bounded), wrapper reaped
#   ppe_stat ARGS...            eta-stat for the lab's socket
#   ppe_json EXPR / ppe_true COND   a value of / a condition over eta-stat --json (as d)
# eta-ppe's log goes to $work/ppe.log.
need_built "$ETA_PPE" eta-ppe

# ppe_lab6 [LAB_UP ARGS...]: the IPv6 tests' start: a lab whose eta-lab up
# printed ETA_LAB_PPE_IP6, $work (removed at exit) and the PPE's config in
# $work/ppe.toml (ppe_config); H6 and H4 are the PPE's IPv6 and IPv4 addresses.
ppe_lab6() {
    lab_up "$@"
    [ -n "${ETA_LAB_PPE_IP6:-}" ] || fail "eta-lab up printed no ETA_LAB_PPE_IP6"
    work=$(mktemp -d)
    on_exit "rm -rf $work"
    ppe_config
    H6=$ETA_LAB_PPE_IP6 H4=$ETA_LAB_PPE_IP
}

# ppe_ping6 ADDR [WHEN]: waits (30 s at most) for the peer's ping -6 to ADDR
# to be answered (the PPE's duplicate address detection has let it go).
ppe_ping6() {
    wait_until 30 peer ping -6 -n -c 1 -W 1 "$1" || fail "ping -6 $1: no answer within 30 s${2:+ $2}"
}

ppe_config() {
    cp "$ETA_LAB_CONFIG" "$work/ppe.toml"
    [ $# -eq 0 ] || printf '%s\n' "$1" >> "$work/ppe.toml"
    grep -q '^idle = "adaptive"' "$work/ppe.toml" || fail "the lab's config must use the adaptive idle policy"
}

ppe_start() {
    local config=$1 prefix
    prefix=$(sed -n 's/^file_prefix = "\(.*\)".*/\1/p' "$config")
    on_exit "rm -rf /var/run/dpdk/$prefix"
    rm -f "$work/ready"
    local from
    from=$( (cat "$work/ppe.log" 2>/dev/null || true) | wc -l)
    start_bg ppe timeout 900 "$ETA_PPE" --config "$config" --foreground --ready-fd 3 3>"$work/ready" 2>>"$work/ppe.log"
    PPE_PID=$ppe_pid # the `timeout` wrapper: it passes SIGTERM on and returns eta-ppe's status
    wait_until 60 grep -qx READY "$work/ready" || { cat "$work/ppe.log"; fail "eta-ppe did not become ready"; }
    PPE_REAL_PID=$(pgrep -P "$PPE_PID" | head -1)
    [ -n "$PPE_REAL_PID" ] || fail "cannot find eta-ppe under its timeout wrapper"
    [ -S "$ETA_LAB_SOCKET" ] || fail "eta-ppe is ready but $ETA_LAB_SOCKET is not a socket"
    # Said when it had to wait for a killed predecessor to release the socket.
    tail -n +"$((from + 1))" "$work/ppe.log" | grep "which is exiting, to release" | sed 's/^/--- /' || true
}

ppe_stop() {
    kill -TERM "$PPE_PID"
    local rc=0
    for _ in $(seq 1 100); do kill -0 "$PPE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PPE_PID" 2>/dev/null && fail "eta-ppe did not stop within 10 s of SIGTERM"
    wait "$PPE_PID" || rc=$?
    [ "$rc" -eq 0 ] || fail "eta-ppe exited with $rc after SIGTERM"
    # A sanitizer build: UBSan reports and goes on (exit status 0), so its
    # report in the log is the only trace of undefined behaviour.
    if grep -qE 'runtime error:|ERROR: [A-Za-z]+Sanitizer' "$work/ppe.log"; then
        grep -E -A3 'runtime error:|ERROR: [A-Za-z]+Sanitizer' "$work/ppe.log" >&2
        fail "eta-ppe's log has a sanitizer report"
    fi
}

# A killed eta-ppe goes on exiting for a while (its mappings torn down, its
# control socket still open); the next one must not be started meanwhile.
# Waits for the process itself, not for its `timeout` wrapper; the bound is
# far above any honest exit (a slow machine's teardown takes seconds).
ppe_kill9() {
    kill -KILL "$PPE_REAL_PID"
    wait_until 120 test ! -e "/proc/$PPE_REAL_PID" ||
        fail "eta-ppe (pid $PPE_REAL_PID) was still there 120 s after SIGKILL: $(cat "/proc/$PPE_REAL_PID/status" 2>&1 | head -3)"
    wait "$PPE_PID" 2>/dev/null || true
}

ppe_stat() { timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" "$@"; }

# Reads one value from eta-stat --json with a python expression over `d`.
ppe_json() { ppe_stat --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# A python expression over `d` (eta-stat --json): the TCP segments over IPv6
# the engines' stacks took since their start. Their IPv6 packets, and on a
# port that delivers LRO frames (the vnet port, the lab's default) the further
# segments each frame stood for (a port counts those for both families: only
# a test whose IPv6 flows carry its bytes should compare the sum with them).
PPE_IP6_SEGMENTS="(sum(s['ip6_in'] for e in d['engines'] for s in e['stacks']) + sum(p.get('rx_lro_segments', 0) - p.get('rx_lro_frames', 0) for p in d['ports']))"
ppe_ip6_segments() { ppe_json "$PPE_IP6_SEGMENTS"; }

# Succeeds when a python condition over `d` (eta-stat --json) holds; for
# wait_until, which must re-read the counters on every try.
ppe_true() { ppe_stat --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
