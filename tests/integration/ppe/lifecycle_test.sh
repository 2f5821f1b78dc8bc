#!/usr/bin/env bash
# eta-ppe starts from the lab's config, answers ARP and ping from the peer,
# publishes its counters, cores and network, idles without burning its core,
# and stops cleanly on SIGTERM leaving nothing behind.
#   lifecycle_test.sh ETA_PPE ETA_STAT
ETA_PPE=$1 ETA_STAT=$2
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"

note "--check accepts the lab's config"
ppe_config
timeout 20 "$ETA_PPE" --config "$work/ppe.toml" --check || fail "--check rejected the lab's config"

note "start, ARP and ping from the peer"
ppe_start "$work/ppe.toml"
peer timeout 10 ping -c 3 -i 0.2 -W 2 "$ETA_LAB_PPE_IP" || fail "the peer cannot ping the PPE"
neigh=$(peer ip neigh show "$ETA_LAB_PPE_IP") || fail "cannot read the peer's neighbour table"
grep -qi "$ETA_LAB_PPE_MAC" <<<"$neigh" ||
    fail "the peer did not learn the PPE's MAC by ARP: $(peer ip neigh show "$ETA_LAB_PPE_IP")"
wait_until 30 ppe_true "d['engines'][0]['stacks'][0]['icmp_echo_in'] >= 3" ||
    fail "eta-stat does not count the echo requests"
[ "$(ppe_json "d['engines'][0]['stacks'][0]['arp_replies_out'] + d['engines'][0]['stacks'][0]['arp_requests_in']")" -ge 1 ] ||
    fail "eta-stat shows no ARP traffic"
[ "$(ppe_json "d['state']")" = running ] || fail "eta-stat does not say running"
summary=$(ppe_stat --no-conns) || fail "eta-stat failed"
grep -q "engines on CPU" <<<"$summary" || fail "eta-stat's summary lacks the engine line: $summary"

note "published files"
cores=$(cat "$ETA_LAB_SOCKET.cores") || fail "no $ETA_LAB_SOCKET.cores"
[[ "$cores" =~ ^[0-9,-]+$ ]] || fail "cores file holds '$cores'"
[ "$(ppe_json "d['engine_cpus']")" = "$cores" ] || fail "eta-stat and the cores file disagree"
grep -qx "port $ETA_LAB_PPE_IP/$ETA_LAB_PREFIX" "$ETA_LAB_SOCKET.net" || fail "no port line in $ETA_LAB_SOCKET.net"
control_cpus=$(taskset -pc "$PPE_REAL_PID" | sed 's/.*: //')
[ "$control_cpus" != "$cores" ] || fail "the control thread runs on the engine CPU $cores"

note "idle: eta-ppe's CPU time beside a busy loop's over the same 3 s"
# Side by side, so a loaded machine slows both alike: an engine that polls
# its core while idle gets about as much CPU as the busy loop does (one
# runnable thread each); the adaptive idle policy sleeps and must use far
# less. A quarter is a wide margin both ways (measured: 5 ticks vs 120).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
start_bg spin bash -c 'while :; do :; done'
p0=$(cpu_ticks "$PPE_REAL_PID") s0=$(cpu_ticks "$spin_pid")
sleep 3 # the measured interval, not a wait for an event
p1=$(cpu_ticks "$PPE_REAL_PID") s1=$(cpu_ticks "$spin_pid")
kill "$spin_pid"
wait "$spin_pid" 2>/dev/null || true
echo "over 3 s idle: eta-ppe used $((p1 - p0)) clock ticks, a busy loop beside it $((s1 - s0))"
[ $((s1 - s0)) -gt 0 ] || fail "the busy loop got no CPU time: the measurement did not run"
[ $(((p1 - p0) * 4)) -lt $((s1 - s0)) ] ||
    fail "idle eta-ppe used $((p1 - p0)) ticks, not far below a busy loop's $((s1 - s0)): it burns its core"

note "SIGHUP: log level applied, the rest reported"
sed -i 's/^level = "info"/level = "debug"/' "$work/ppe.toml"
kill -HUP "$PPE_REAL_PID"
wait_until 30 grep -q "reload: applied log.level = debug" "$work/ppe.log" || fail "SIGHUP did not apply the log level"
kill -0 "$PPE_REAL_PID" || fail "eta-ppe died on SIGHUP"
sed -i 's/^mtu = .*/mtu = 1400/' "$work/ppe.toml"
kill -HUP "$PPE_REAL_PID"
wait_until 30 grep -q "\[\[port\]\] changed.*needs a restart" "$work/ppe.log" || fail "SIGHUP did not say the port change needs a restart"

note "SIGTERM stops it and removes what it made"
prefix=$(sed -n 's/^file_prefix = "\(.*\)".*/\1/p' "$work/ppe.toml")
ppe_stop
for f in "$ETA_LAB_SOCKET" "$ETA_LAB_SOCKET.stats" "$ETA_LAB_SOCKET.cores" "$ETA_LAB_SOCKET.net" "/var/run/dpdk/$prefix"; do
    [ ! -e "$f" ] || fail "$f was left behind"
done
# ping exits 1 for "no reply" and 2 for errors; only its summary tells that
# the probe ran and nothing answered.
rc=0
out=$(peer timeout 5 ping -n -c 2 -i 0.2 -W 1 "$ETA_LAB_PPE_IP" 2>&1) || rc=$?
[ $rc -ne 0 ] || fail "something still answers ping after the PPE stopped: $out"
[[ "$out" == *"2 packets transmitted, 0 received"* ]] || fail "the ping probe did not run (rc $rc): $out"
echo "PASS"
