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
peer ip neigh show "$ETA_LAB_PPE_IP" | grep -qi "$ETA_LAB_PPE_MAC" ||
    fail "the peer did not learn the PPE's MAC by ARP: $(peer ip neigh show "$ETA_LAB_PPE_IP")"
wait_until 5 ppe_true "d['engines'][0]['stacks'][0]['icmp_echo_in'] >= 3" ||
    fail "eta-stat does not count the echo requests"
[ "$(ppe_json "d['engines'][0]['stacks'][0]['arp_replies_out'] + d['engines'][0]['stacks'][0]['arp_requests_in']")" -ge 1 ] ||
    fail "eta-stat shows no ARP traffic"
[ "$(ppe_json "d['state']")" = running ] || fail "eta-stat does not say running"
ppe_stat --no-conns | grep -q "engines on CPU" || fail "eta-stat's summary lacks the engine line"

note "published files"
cores=$(cat "$ETA_LAB_SOCKET.cores") || fail "no $ETA_LAB_SOCKET.cores"
[[ "$cores" =~ ^[0-9,-]+$ ]] || fail "cores file holds '$cores'"
[ "$(ppe_json "d['engine_cpus']")" = "$cores" ] || fail "eta-stat and the cores file disagree"
grep -qx "port $ETA_LAB_PPE_IP/$ETA_LAB_PREFIX" "$ETA_LAB_SOCKET.net" || fail "no port line in $ETA_LAB_SOCKET.net"
control_cpus=$(taskset -pc "$PPE_REAL_PID" | sed 's/.*: //')
[ "$control_cpus" != "$cores" ] || fail "the control thread runs on the engine CPU $cores"

note "idle CPU (reported, not asserted)"
t0=$(awk '{print $14+$15}' "/proc/$PPE_REAL_PID/stat")
sleep 3
t1=$(awk '{print $14+$15}' "/proc/$PPE_REAL_PID/stat")
echo "eta-ppe used $((t1 - t0)) clock ticks of $((3 * $(getconf CLK_TCK))) in 3 s idle"

note "SIGHUP: log level applied, the rest reported"
sed -i 's/^level = "info"/level = "debug"/' "$work/ppe.toml"
kill -HUP "$PPE_REAL_PID"
wait_until 5 grep -q "reload: applied log.level = debug" "$work/ppe.log" || fail "SIGHUP did not apply the log level"
kill -0 "$PPE_REAL_PID" || fail "eta-ppe died on SIGHUP"
sed -i 's/^mtu = .*/mtu = 1400/' "$work/ppe.toml"
kill -HUP "$PPE_REAL_PID"
wait_until 5 grep -q "\[\[port\]\] changed.*needs a restart" "$work/ppe.log" || fail "SIGHUP did not say the port change needs a restart"

note "SIGTERM stops it and removes what it made"
prefix=$(sed -n 's/^file_prefix = "\(.*\)".*/\1/p' "$work/ppe.toml")
ppe_stop
for f in "$ETA_LAB_SOCKET" "$ETA_LAB_SOCKET.stats" "$ETA_LAB_SOCKET.cores" "$ETA_LAB_SOCKET.net" "/var/run/dpdk/$prefix"; do
    [ ! -e "$f" ] || fail "$f was left behind"
done
peer timeout 5 ping -c 1 -W 1 "$ETA_LAB_PPE_IP" >/dev/null 2>&1 && fail "something still answers ping after the PPE stopped"
echo "PASS"
