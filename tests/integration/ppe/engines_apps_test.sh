#!/usr/bin/env bash
# Applications on a 2-engine PPE (issue 11): needs libdti that attaches an
# application to EVERY engine (one region and control connection each, a
# listener on every engine). Checks, with unmodified programs (python3 under
# eta-run) against kernel peers:
#   - a server with one listening socket accepts 64 connections from the
#     peer, both engines carry some of them (eta-stat), every byte echoed
#     back exactly (both directions);
#   - a SO_REUSEPORT group of 4 sockets receives connections on every member;
#   - an eta-run client's 16 outgoing connections to a peer server are all
#     opened without a reset or a "no socket" drop (each on its own engine),
#     and 16 more from bound source ports (29000..29015: libdti places each
#     on the engine that owns its flow; below the kernel's ephemeral range, so
#     no connection or TIME-WAIT of another test in the host holds one: the
#     shim's INADDR_ANY bind takes the port in the kernel too).
# libdti attaches the program to every engine (one link each, a listener
# group over both): a program found on one engine only fails the test.
# ENGINES=1 runs the same program checks on a 1-engine lab (what can be
# checked before libdti's half lands: python under the shim, the reuseport
# spread); the per-engine checks need 2.
#   [ENGINES=1|2] engines_apps_test.sh ETA_PPE ETA_STAT LIBETA_PRELOAD ETA_RUN
ETA_PPE=$1 ETA_STAT=$2 SHIM=$3 ETA_RUN=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
[ -f "$SHIM" ] || skip "libeta-preload.so is not built ($SHIM)"
export ETA_PRELOAD_LIB=$SHIM
APP=$(dirname "$0")/engines_apps.py
N=64
ENGINES=${ENGINES:-2}

lab_up --engines "$ENGINES"
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
run_bg() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" > "$log" 2>&1
}
# Engines the program with this pid is attached to.
engines_of() { ppe_json "sorted(set(a['engine'] for a in d['apps'] if a['pid'] == $1))"; }

note "one listening socket, $N connections, both engines"
p_one=$(free_port)   # INADDR_ANY: the kernel half binds in the host namespace
run_bg srv "$work/srv.log" python3 "$APP" server "$p_one" $N 1
wait_until 60 grep -q listening "$work/srv.log" || { cat "$work/srv.log"; fail "the server under eta-run did not listen"; }
srv_real=$(pgrep -P "$srv_pid" | head -1)
wait_until 30 ppe_true "len(set(a['engine'] for a in d['apps'])) >= 1" || fail "the server did not attach"
if [ "$ENGINES" = 2 ] && [ "$(engines_of "$srv_real")" != "[0, 1]" ]; then
    fail "the application is attached to engine(s) $(engines_of "$srv_real") only: libdti must attach it to every engine"
fi
touch "$work/hold"
start_bg cli peer timeout 150 python3 "$APP" client "$ETA_LAB_PPE_IP" "$p_one" $N 65536 "$work/hold"
wait_until 60 ppe_true "sum(e['connections'] for e in d['engines']) >= $N" ||
    fail "eta-stat does not show $N connections: $(ppe_json "[e['connections'] for e in d['engines']]")"
# (Each engine publishes its own counters: one may trail the other a moment.)
wait_until 30 ppe_true "len(d['engines']) == $ENGINES and all(e['connections'] >= 4 for e in d['engines'])" ||
    fail "not both engines carry connections: $(ppe_json "[e['connections'] for e in d['engines']]")"
ppe_json "'connections per engine: %s' % [e['connections'] for e in d['engines']]"
rm -f "$work/hold"
wait "$cli_pid" || fail "the peer's client failed (echo mismatch or error)"
wait "$srv_pid" || { cat "$work/srv.log"; fail "the server failed"; }
grep -q "^accepted $N " "$work/srv.log" || { cat "$work/srv.log"; fail "the server did not accept $N connections"; }

note "SO_REUSEPORT group of 4"
p_rp=$(free_port)
run_bg rp "$work/rp.log" python3 "$APP" server "$p_rp" $N 4
wait_until 60 grep -q listening "$work/rp.log" || { cat "$work/rp.log"; fail "the reuseport server did not listen"; }
# No hold file: the client closes right after its echo round.
peer timeout 150 python3 "$APP" client "$ETA_LAB_PPE_IP" "$p_rp" $N 4096 "$work/no-hold" || fail "reuseport: the peer's client failed"
wait "$rp_pid" || { cat "$work/rp.log"; fail "the reuseport server failed"; }
python3 - "$work/rp.log" <<'EOF' || fail "not every member of the SO_REUSEPORT group got connections: $(cat "$work/rp.log")"
import ast, re, sys
m = re.search(r"per member (\[.*\])", open(sys.argv[1]).read())
counts = ast.literal_eval(m.group(1))
print("per member", counts)
sys.exit(0 if len(counts) == 4 and min(counts) > 0 else 1)
EOF

note "outgoing connections from an eta-run client"
# The engines publish their counters every 10 ms while they work and when they
# nap: before a check that nothing was reset or found no socket, wait until
# the counters show the client's 16 connections established (past their
# handshakes, where a connection on the wrong engine would show).
established() { ppe_json "sum(s['tcp_established'] for e in d['engines'] for s in e['stacks'])"; }
past_connections() {
    wait_until 30 ppe_true "sum(s['tcp_established'] for e in d['engines'] for s in e['stacks']) >= $1 + 16" ||
        fail "the counters do not show the client's 16 connections established: $1 -> $(established)"
}
start_bg psrv peer timeout 150 python3 "$APP" server 7303 16 1
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :7303' | grep -c . >/dev/null" || fail "the peer's server did not listen"
before=$(ppe_json "sum(s['tcp_resets_in'] + s['drop_tcp_no_socket'] for e in d['engines'] for s in e['stacks'])")
est0=$(established)
timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- python3 "$APP" client "$ETA_LAB_PEER_IP" 7303 16 65536 "$work/none" ||
    fail "the eta-run client's outgoing connections failed"
wait "$psrv_pid" || fail "the peer's server failed"
past_connections "$est0"
ppe_true "sum(s['tcp_resets_in'] + s['drop_tcp_no_socket'] for e in d['engines'] for s in e['stacks']) == $before" ||
    fail "an outgoing connection was reset or its segments found no socket"

note "outgoing connections from bound source ports (each placed on its flow's owner)"
start_bg bsrv peer timeout 150 python3 "$APP" server 7304 16 1
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :7304' | grep -c . >/dev/null" || fail "the peer's server did not listen"
before=$(ppe_json "sum(s['tcp_resets_in'] + s['drop_tcp_no_socket'] for e in d['engines'] for s in e['stacks'])")
est0=$(established)
timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    python3 "$APP" client "$ETA_LAB_PEER_IP" 7304 16 65536 "$work/none" 29000 ||
    fail "the eta-run client's connections from bound ports failed"
wait "$bsrv_pid" || fail "the peer's server (bound clients) failed"
past_connections "$est0"
ppe_true "sum(s['tcp_resets_in'] + s['drop_tcp_no_socket'] for e in d['engines'] for s in e['stacks']) == $before" ||
    fail "a connection from a bound port was reset or its segments found no socket"
ppe_stop
echo "PASS"
