#!/usr/bin/env bash
# 10,000 concurrent connections from the peer to one native (dti) server
# behind eta-ppe, all held open and all exchanging data; eta-stat reports
# them with their per-connection memory.
#   many_conns_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
N=10000

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
# Small rings: 10k connections x 32 KiB fit one application's region.
ppe_config "$(printf '[tcp]\nrcvbuf = "16K"\nsndbuf = "16K"\nmax_sockets = 16384\nsyn_backlog = 4096\n[limits]\nsockets_per_app = 10240\nmemory_per_app = "1G"')"
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET

start_bg srv timeout 400 "$ETA_PERF" server --transport dti --port 5501 > "$work/srv.log"
wait_until 10 grep -q listening "$work/srv.log" || fail "the dti server did not listen"
touch "$work/hold"
# ip netns exec (not the peer function) so that cli_pid is the client's own
# timeout wrapper: killing it at exit ends the client.
start_bg cli ip netns exec "$ETA_LAB_NS" timeout 300 python3 "$(dirname "$0")/many_conns.py" "$ETA_LAB_PPE_IP" 5501 $N "$work/hold" \
    > "$work/cli.log" 2>&1
round1_or_gone() { grep -q "round 1 exchanged" "$work/cli.log" || ! kill -0 "$cli_pid" 2>/dev/null; }
wait_until 280 round1_or_gone
grep -q "round 1 exchanged" "$work/cli.log" || { cat "$work/cli.log"; fail "the peer could not open and use $N connections"; }
# The connection table is published every 250 ms.
wait_until 30 ppe_true "d['connections_total'] > $N" || fail "eta-stat does not count $N connections"
ppe_json "'connections %d, established %d, per-connection ring memory %s bytes, app region %d bytes' % (d['connections_total'], sum(1 for c in d['connections'] if c['state']=='ESTABLISHED'), sorted(set(c['memory_bytes'] for c in d['connections'] if c['state']=='ESTABLISHED')), d['apps'][0]['region_bytes'])"
est=$(ppe_json "sum(1 for c in d['connections'] if c['state']=='ESTABLISHED')")
[ "$est" -ge $N ] || fail "only $est established connections in eta-stat"
[ "$(ppe_json "min(c['memory_bytes'] for c in d['connections'] if c['state']=='ESTABLISHED')")" -eq 32768 ] ||
    fail "per-connection memory is not reported as the two 16 KiB rings"
rm -f "$work/hold"
wait "$cli_pid" || { cat "$work/cli.log"; fail "the peer's client failed"; }
grep -q "round 2 exchanged" "$work/cli.log" || fail "the second round did not complete"
ppe_stop
echo "PASS"
