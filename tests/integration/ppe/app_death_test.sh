#!/usr/bin/env bash
# Killing a native application mid-transfer: the peer sees the connection
# reset, eta-stat shows the application, its connections and its memory
# gone, and the PPE serves the next application normally.
#   app_death_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET
H=$ETA_LAB_PPE_IP

note "a dti server streams to a kernel client in the peer; kill -9 the server"
start_bg srv timeout 120 "$ETA_PERF" server --transport dti --port 5401 > "$work/srv.log"
wait_until 10 grep -q listening "$work/srv.log" || fail "the dti server did not listen"
start_bg cli peer timeout 100 "$ETA_PERF" client --transport kernel --connect "$H" --port 5401 \
    --mode stream --direction recv --duration 60 2>"$work/cli.err" >/dev/null
wait_until 20 ppe_true "sum(c['bytes_out'] for c in d.get('connections', [])) > $((16 << 20))" ||
    fail "no data flowed before the kill"
[ "$(ppe_json "len(d['apps'])")" -eq 1 ] || fail "eta-stat does not show the server"
mem=$(ppe_json "d['apps'][0]['memory_bytes']")
conns=$(ppe_json "d['connections_total']")
echo "before the kill: app memory $mem bytes, $conns connections (listener included)"
[ "$mem" -gt 0 ] && [ "$conns" -ge 2 ] || fail "eta-stat shows no memory or connections for the live app"
# srv_pid is the `timeout` wrapper; the application is its child.
srv_real=$(pgrep -P "$srv_pid" | head -1)
[ -n "$srv_real" ] || fail "cannot find eta-perf under its timeout wrapper"
kill -KILL "$srv_real"
rc=0
wait "$cli_pid" || rc=$?
[ "$rc" -ne 0 ] || fail "the peer's client finished normally although the server was killed"
[ "$rc" -ne 124 ] || fail "the peer's client hung instead of seeing the connection end"
grep -qi "reset" "$work/cli.err" || fail "the peer did not see a reset: $(cat "$work/cli.err")"
echo "peer saw: $(cat "$work/cli.err")"
wait_until 10 ppe_true "len(d['apps']) == 0" || fail "eta-stat still lists the dead application"
wait_until 10 ppe_true "d['connections_total'] == 0" || fail "the dead application's connections remain"
[ "$(ppe_json "d['engines'][0]['stacks'][0]['tcp_resets_out']")" -ge 1 ] || fail "the PPE sent no RST"

note "the next application is served normally"
start_bg srv2 timeout 120 "$ETA_PERF" server --transport dti --port 5402 > "$work/srv2.log"
wait_until 10 grep -q listening "$work/srv2.log" || fail "the second dti server did not listen"
out=$(peer timeout 60 "$ETA_PERF" client --transport kernel --connect "$H" --port 5402 --mode stream \
    --direction send --bytes $((32 << 20)) --verify --json) || fail "transfer to the next app failed: $out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['ok'] and d['verified'], d" "$out" || fail "not verified: $out"
ppe_stop
echo "PASS"
