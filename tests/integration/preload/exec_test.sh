#!/usr/bin/env bash
# exec keeps accelerated sockets (issue 12), with a real eta-ppe in the lab and
# kernel clients in the peer namespace:
#   - socat TCP4-LISTEN:...,fork,reuseaddr EXEC:cat,nofork under eta-run: each
#     connection's child execs cat on the connection itself (inetd style);
#     and EXEC:cat (cat behind a socketpair); echoes of 1 B to 4 MiB, sha256,
#     and 16 of 1000 B (ETA_TEST_ENGINES=2: every engine carried some);
#   - a python server that execs itself keeping its listener and a connection
#     with unread bytes (after an exec that failed), then serves a new one.
#   exec_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
# The real interpreter: a wrapper script would attach to the PPE first.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 280 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"
H=$ETA_LAB_PPE_IP
passive_opens() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(sum(s['tcp_passive_opens'] for e in d['engines'] for s in e['stacks']))"
}
# The engine publishes its counters every 10 ms while it works and when it
# naps: a count may trail the last connection by a moment.
opens_reached() { [ "$(passive_opens)" -ge "$1" ]; }
. "$(dirname "$0")/engines_lib.sh"
bg() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" env ETA_LOG=${ETA_TEST_LOG:-fallback,accel} timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"
}

for opts in ",nofork" ""; do
    port=$(free_port)   # TCP4-LISTEN binds INADDR_ANY: its kernel half is in the host namespace
    note "socat TCP4-LISTEN:$port,fork,reuseaddr EXEC:cat$opts under eta-run, clients in the peer"
    before=$(passive_opens)
    per_engine=$(engine_opens)
    # -t 30: after the client's EOF socat waits for cat's echo at most that
    # long (its default, 0.5 s, cut the echo short on a busy machine).
    bg socat "$work/socat$port.log" socat -d -d -t 30 "TCP4-LISTEN:$port,fork,reuseaddr" "EXEC:cat$opts" >/dev/null
    wait_until 20 grep -q "listening on" "$work/socat$port.log" || { cat "$work/socat$port.log"; fail "socat did not listen"; }
    for size in 1 1000 100000 $((4 << 20)); do
        peer timeout 60 "$PY" "$here/exec_peer.py" echo "$H" "$port" "$size" ||
            { tail -20 "$work/socat$port.log"; fail "socat EXEC:cat$opts: the echo of $size bytes"; }
    done
    # More connections, so that on several engines each carries some (the
    # peer's ports decide which one: all 16 on one of two is 1 in 32768).
    for i in $(seq 16); do
        peer timeout 30 "$PY" "$here/exec_peer.py" echo "$H" "$port" 1000 ||
            { tail -20 "$work/socat$port.log"; fail "socat EXEC:cat$opts: small echo $i"; }
    done
    [ "${ETA_TEST_ENGINES:-1}" -gt 1 ] && every_engine_took "$per_engine" "socat EXEC:cat$opts"
    wait_until 20 opens_reached $((before + 4)) ||
        fail "socat EXEC:cat$opts: the PPE took $(($(passive_opens) - before)) connections, not 4 (the kernel served them?)"
    warnings_in "$work/socat$port.log" >/dev/null && { cat "$work/socat$port.log"; fail "socat EXEC:cat$opts warned"; }
    kill -TERM "$socat_pid"
    wait "$socat_pid" || true
done

note "a python server execs itself keeping its listener and a connection with unread data"
before=$(passive_opens)
p_exec=$(free_port)   # exec_server.py binds INADDR_ANY
bg server "$work/server.log" "$PY" "$here/exec_server.py" "$p_exec" 300000 >"$work/server.out"
wait_until 20 grep -q listening "$work/server.out" || { cat "$work/server.log"; fail "the python server did not listen"; }
peer timeout 60 "$PY" "$here/exec_peer.py" self_exec "$H" "$p_exec" 300000 ||
    { cat "$work/server.log" "$work/server.out"; fail "the server that execs itself"; }
wait "$server_pid" || { cat "$work/server.log"; fail "the python server failed"; }
grep -q "served a new connection" "$work/server.out" || fail "the exec'd image did not serve"
wait_until 20 opens_reached $((before + 2)) || fail "the PPE took $(($(passive_opens) - before)) connections, not 2"
warnings_in "$work/server.log" >/dev/null && { cat "$work/server.log"; fail "the python server warned"; }
note "exec: all passed"
