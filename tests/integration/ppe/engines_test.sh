#!/usr/bin/env bash
# eta-ppe with 2 engines on a 2-engine lab (eta-lab up --engines 2): the PPE's
# own counters show that
#   - each engine owns a queue pair of the port (veth with 2 queues),
#   - attaches go to the engine their HELLO names, ANY in turn, an index
#     >= 2 is refused with a reason; an application attaches to both,
#   - ARP reaches both engines' stacks (shared, counted),
#   - 64 connection attempts from the peer (kernel sockets) to a port with no
#     listener are each answered by the flow's owner (dti_flow_owner): RSTs
#     from both engines, one per attempt, segments steered between them,
#   - an application's outgoing connections (eta-perf dti client, crr and a
#     verified stream, to the peer's kernel server) spread over both engines,
#     each on an engine that owns its flow: none reset, nothing dropped for
#     "no socket" (a port the engine does not own would be answered by the
#     other engine's RST).
# With ETA_TEST_SHARED=1 (the port shared with the kernel) the closed port's
# SYNs are the kernel's: counted as TCP handed to the kernel (exactly 64,
# and nothing else there: no outgoing connection's segment found no socket).
#   engines_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
need_built "$ETA_PERF" eta-perf
N=64

lab_up --engines 2
work=$(mktemp -d)
on_exit "rm -rf $work"
grep -q '^cores = \["auto:2"\]' "$ETA_LAB_CONFIG" || fail "eta-lab up --engines 2 did not write 2 engines"
[ -d "/sys/class/net/$ETA_LAB_PPE_IFACE/queues/rx-1" ] || fail "the PPE's veth has no second rx queue"
ppe_config
ppe_start "$work/ppe.toml"
ppe_true "len(d['engines']) == 2 and d['ports'][0]['queues'] == 2" ||
    fail "eta-stat does not show 2 engines with a queue each: $(ppe_stat --json --no-conns)"

note "attach routing by HELLO"
probe() { timeout 10 python3 "$(dirname "$0")/hello_probe.py" "$ETA_LAB_SOCKET" "$1"; }
[ "$(probe 1)" = "WELCOME engine=1 n_engines=2" ] || fail "HELLO for engine 1: $(probe 1)"
[ "$(probe 0)" = "WELCOME engine=0 n_engines=2" ] || fail "HELLO for engine 0: $(probe 0)"
out=$(probe 2)
[[ "$out" == "REFUSED status=22 engine 2 does not exist"* ]] || fail "HELLO for engine 2 was not refused: $out"
a=$(probe any) b=$(probe any)
[ "$(printf '%s\n%s\n' "$a" "$b" | sort | tr '\n' ' ')" = "WELCOME engine=0 n_engines=2 WELCOME engine=1 n_engines=2 " ] ||
    fail "two ANY attaches did not go to both engines: '$a' '$b'"

note "two applications: each attached to both engines (libdti links every engine), all in eta-stat"
start_bg s1 env ETA_SOCKET="$ETA_LAB_SOCKET" timeout 120 "$ETA_PERF" server --transport dti --port 5621
wait_until 10 ppe_true "len(d['apps']) == 2" || fail "the first server did not attach to both engines"
start_bg s2 env ETA_SOCKET="$ETA_LAB_SOCKET" timeout 120 "$ETA_PERF" server --transport dti --port 5622
wait_until 10 ppe_true "len(d['apps']) == 4" ||
    fail "eta-stat does not show both applications on both engines: $(ppe_json "[(a['pid'], a['engine']) for a in d['apps']]")"
ppe_true "sorted((a['pid'], a['engine']) for a in d['apps']) == sorted((p, e) for p in set(a['pid'] for a in d['apps']) for e in (0, 1)) and len(set(a['pid'] for a in d['apps'])) == 2" ||
    fail "the two applications are not each on both engines: $(ppe_json "[(a['pid'], a['engine']) for a in d['apps']]")"
kill -TERM "$s1_pid" "$s2_pid"
wait "$s1_pid" "$s2_pid" 2>/dev/null || true
wait_until 10 ppe_true "len(d['apps']) == 0" || fail "the servers' attachments did not go away"

note "ARP to every engine"
peer ip neigh flush dev "$ETA_LAB_PEER_IFACE"
peer ping -c 3 -i 0.2 -W 2 "$ETA_LAB_PPE_IP" > "$work/ping.log" || { cat "$work/ping.log"; fail "the peer cannot ping the PPE"; }
wait_until 30 ppe_true "all(e['stacks'][0]['arp_requests_in'] >= 1 for e in d['engines'])" ||
    fail "not every engine's stack saw the peer's ARP request: $(ppe_json "[e['stacks'][0]['arp_requests_in'] for e in d['engines']]")"
# Each engine publishes its own counters (every 10 ms while it works, and when
# it naps): the sharer's and the receivers' may trail one another a moment.
wait_until 30 ppe_true "sum(e['arp_shared_out'] for e in d['engines']) >= 1 and sum(e['arp_shared_in'] for e in d['engines']) == sum(e['arp_shared_out'] for e in d['engines'])" ||
    fail "ARP sharing is not counted: $(ppe_json "[(e['arp_shared_out'], e['arp_shared_in']) for e in d['engines']]")"

note "$N peer connections to a closed port: each answered by its owner"
resets0=$(ppe_json "sum(e['stacks'][0]['tcp_resets_out'] for e in d['engines'])")
# A port shared with the kernel (ETA_TEST_SHARED=1): a SYN to a port no eta
# socket holds is the kernel's (its RST), handed on by the engine that owns
# the flow; the port's counter of TCP frames handed to the kernel counts it.
shared=$(ppe_json "d['ports'][0]['kernel'] is not None")
to_kernel="d['ports'][0]['kernel']['to']['tcp-other-port']['frames']"
[ "$shared" = True ] && tok0=$(ppe_json "$to_kernel")
peer timeout 60 python3 - "$ETA_LAB_PPE_IP" $N > "$work/refused.log" <<'EOF' || { cat "$work/refused.log"; fail "the peer's connection attempts did not all end in a refusal"; }
import socket, sys
host, n = sys.argv[1], int(sys.argv[2])
refused = 0
for i in range(n):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, 9))
    except ConnectionRefusedError:
        refused += 1
    finally:
        s.close()
print(f"refused {refused} of {n}")
sys.exit(0 if refused == n else 1)
EOF
if [ "$shared" = True ]; then
    wait_until 30 ppe_true "$to_kernel - $tok0 >= $N" ||
        fail "fewer than $N SYNs handed to the kernel: $tok0 -> $(ppe_json "$to_kernel")"
else
    wait_until 30 ppe_true "sum(e['stacks'][0]['tcp_resets_out'] for e in d['engines']) - $resets0 >= $N" ||
        fail "fewer than $N RSTs: $(ppe_json "[e['stacks'][0]['tcp_resets_out'] for e in d['engines']]")"
    ppe_true "all(e['stacks'][0]['tcp_resets_out'] > 0 for e in d['engines'])" ||
        fail "only one engine answered: flows are not spread by their owner"
fi
# Every steered segment is counted out by one engine and in (or dropped) by
# another, each in its own snapshot: wait until both are past the segments,
# then none may have been dropped.
wait_until 30 ppe_true "sum(e['steered_out'] for e in d['engines']) > 0 and sum(e['steered_out'] for e in d['engines']) == sum(e['steered_in'] + e['steer_drops'] for e in d['engines'])" ||
    fail "steering counters do not add up: $(ppe_json "[(e['steered_out'], e['steered_in'], e['steer_drops']) for e in d['engines']]")"
ppe_true "sum(e['steer_drops'] for e in d['engines']) == 0" ||
    fail "steered segments were dropped: $(ppe_json "[(e['steered_out'], e['steered_in'], e['steer_drops']) for e in d['engines']]")"
ppe_json "'steered out/in per engine: %s' % [(e['steered_out'], e['steered_in']) for e in d['engines']]"

note "outgoing connections: spread over the engines, each on an engine that owns its flow"
start_bg srv peer timeout 120 "$ETA_PERF" server --transport kernel --port 5611
wait_until 10 sh -c "ip netns exec $ETA_LAB_NS ss -ltnH 'sport = :5611' | grep -c . >/dev/null" || fail "the peer's server did not listen"
opens() { ppe_json "[e['stacks'][0]['tcp_active_opens'] for e in d['engines']]"; }
opens0=$(opens)
export ETA_SOCKET=$ETA_LAB_SOCKET
timeout 60 "$ETA_PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5611 --mode crr --bytes 300 --size 64 \
    > "$work/crr.log" || { cat "$work/crr.log"; fail "crr from an eta application failed"; }
# The counters are published every 10 ms; the 300 opens, on both engines
# (a context's sockets go to the engines in turn).
wait_until 30 ppe_true "sum(a - b for a, b in zip([e['stacks'][0]['tcp_active_opens'] for e in d['engines']], $opens0)) == 300 and min(a - b for a, b in zip([e['stacks'][0]['tcp_active_opens'] for e in d['engines']], $opens0)) > 0" ||
    fail "the crr client's 300 connections were not opened on both engines: $(opens) (before: $opens0)"
timeout 60 "$ETA_PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5611 --mode stream \
    --bytes 33554432 --verify > "$work/stream.log" || { cat "$work/stream.log"; fail "the verified stream failed"; }
grep -q verified "$work/stream.log" || { cat "$work/stream.log"; fail "the stream was not verified byte-exact"; }
# None was reset, and no segment of theirs was answered for "no socket"
# (read once the counters show the stream's connection: past the work).
wait_until 30 ppe_true "sum(e['stacks'][0]['tcp_active_opens'] for e in d['engines']) - sum($opens0) >= 301" ||
    fail "active opens: $(ppe_json "[e['stacks'][0]['tcp_active_opens'] for e in d['engines']]") (before: $opens0), not 301"
ppe_true "sum(e['stacks'][0]['tcp_active_opens'] for e in d['engines']) - sum($opens0) == 301" ||
    fail "active opens: $(ppe_json "[e['stacks'][0]['tcp_active_opens'] for e in d['engines']]") (before: $opens0)"
# (On a shared port a segment with no socket is handed to the kernel instead:
# then the closed port's SYNs are all it got, and MARS counted none.)
if [ "$shared" = True ]; then no_socket="$to_kernel - $tok0"; else no_socket="sum(e['stacks'][0]['drop_tcp_no_socket'] for e in d['engines'])"; fi
ppe_true "sum(e['stacks'][0]['tcp_resets_in'] for e in d['engines']) == 0 and $no_socket == $N" ||
    fail "an outgoing connection's segment found no socket on the engine it was steered to: $(ppe_json "[(e['stacks'][0]['tcp_resets_in'], e['stacks'][0]['drop_tcp_no_socket']) for e in d['engines']]"), no socket: $(ppe_json "$no_socket") of $N"
ppe_json "'active opens per engine: %s, steered out/in: %s' % ([e['stacks'][0]['tcp_active_opens'] for e in d['engines']], [(e['steered_out'], e['steered_in']) for e in d['engines']])"
ppe_stop
echo "PASS"
