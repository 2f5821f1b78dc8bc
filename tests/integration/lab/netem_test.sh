#!/usr/bin/env bash
# eta-lab netem impairs the peer's egress on the kernel link, and each
# impairment shows in real traffic: loss and duplication in ping's counts,
# delay, jitter and rate in its round-trip times, reordering and corruption in
# the frames the host receives (frame_check). 'off' restores a clean link and
# 'eta-lab down' leaves no wire process, namespace or link behind.
#
# The battery runs on eta-wire (ETA_LAB_NETEM=wire), which is what kernels
# without sch_netem get; one last check runs in the default (auto) mode.
# Random impairments are seeded, and their bounds are binomial with a margin
# of six standard deviations: wide, yet far narrower than a broken impairment.
ETA_LAB=$1
export ETA_WIRE=$2
FRAME_CHECK=$3
. "$(dirname "$0")/../lib.sh"

export ETA_LAB_NETEM=wire
lab_up
peer_ip=$ETA_LAB_KERNEL_PEER_IP
peer_mac=$(peer cat "/sys/class/net/$ETA_LAB_KERNEL_PEER_IFACE/address")
wire_tap=${ETA_LAB_KERNEL_PEER_IFACE}w0
out=$(mktemp)
on_exit "rm -f $out"

netem() { "$ETA_LAB" netem --name "$ETA_LAB_NAME" --link kernel "$@"; }

# ping_run ARGS...: pings the peer (bounded), leaves ping's summary in $out and
# sets tx rx dups rtt_min rtt_avg rtt_max.
ping_run() {
    timeout 60 ping -n -q -W 2 "$@" "$peer_ip" >"$out" 2>&1 || true
    tx=$(sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p' "$out")
    rx=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$out")
    dups=$(grep -o '+[0-9]* duplicates' "$out" | tr -dc 0-9 || true)
    dups=${dups:-0}
    read -r rtt_min rtt_avg rtt_max < <(sed -n 's|^rtt min/avg/max/mdev = \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/.*|\1 \2 \3|p' "$out")
    [ -n "$tx" ] && [ -n "$rx" ] || { cat "$out"; fail "could not read ping's summary"; }
}

# is EXPR...: a floating-point comparison evaluated by awk.
is() { awk "BEGIN { exit !($*) }"; }

# within HITS N P: HITS is binomially plausible for N trials of probability P.
within() {
    local hits=$1 n=$2 p=$3
    awk -v h="$hits" -v n="$n" -v p="$p" 'BEGIN { m = n * p; s = 6 * sqrt(n * p * (1 - p)) + 1; exit !(h >= m - s && h <= m + s) }'
}

wire_pid() { cat "${ETA_LAB_STATE:-/run/eta/lab}/$ETA_LAB_NAME.wire-$ETA_LAB_KERNEL_PEER_IFACE.pid" 2>/dev/null; }

# A process is gone when /proc has no live entry for it (zombies count as gone).
gone() { ! grep -qsE '^State:[[:space:]]+[A-WY]' "/proc/$1/status"; }

# capture FRAMES ARGS-FOR-PING...: runs frame_check on the host's side while
# pinging; leaves its counts in the variables it prints (frames, bad_ip, ...).
capture() {
    local frames=$1
    shift
    start_bg cap timeout 40 "$FRAME_CHECK" --iface "$ETA_LAB_KERNEL_IFACE" --src-mac "$peer_mac" \
        --frames "$frames" --timeout 20 >"$out.cap"
    on_exit "rm -f $out.cap"
    wait_until 10 grep -qx READY "$out.cap" || fail "frame_check did not start"
    timeout 60 ping -n -q -W 2 "$@" "$peer_ip" >/dev/null 2>&1 || true
    wait "$cap_pid" || fail "frame_check failed"
    local line
    line=$(tail -1 "$out.cap")
    echo "    frame_check: $line"
    [[ "$line" =~ ^frames=[0-9]+( [a-z_0-9]+=[0-9]+)+$ ]] || fail "frame_check printed '$line'"
    eval "$line"
}

note "baseline: the kernel link is clean"
ping_run -c 20 -i 0.01
[ "$rx" -eq 20 ] && [ "$dups" -eq 0 ] || fail "clean link lost or duplicated: $(cat "$out")"

note "bad arguments are refused with a reason and change nothing"
refused "loss 150%" "0% to 100%" netem loss 150%
refused "an unknown word" "unknown netem argument 'frobnicate'" netem frobnicate
[ -z "$(wire_pid)" ] || fail "a refused setting started a wire"

note "delay 50ms: every round trip takes at least 50 ms more"
netem delay 50ms
first_pid=$(wire_pid)
[ -n "$first_pid" ] || fail "no eta-wire runs after 'netem delay'"
shown=$(netem show)
[[ "$shown" == *"eta-wire pid=$first_pid"* ]] || fail "netem show does not report the wire: $shown"
ping_run -c 10 -i 0.06
echo "    rtt min/avg/max $rtt_min/$rtt_avg/$rtt_max ms"
[ "$rx" -eq 10 ] || fail "delay lost packets: $(cat "$out")"
is "$rtt_min >= 50" || fail "rtt $rtt_min ms is shorter than the 50 ms delay"
# Generous: about the configured delay, not a benchmark.
is "$rtt_avg < 50 + 500" || fail "rtt $rtt_avg ms is far beyond the 50 ms delay"

note "delay 20ms 10ms: jitter spreads round trips between 10 and 30 ms more"
netem delay 20ms 10ms seed 3
[ "$(wire_pid)" = "$first_pid" ] || fail "reconfiguring restarted the wire instead of updating it"
ping_run -c 40 -i 0.03
echo "    rtt min/avg/max $rtt_min/$rtt_avg/$rtt_max ms"
is "$rtt_min >= 10" || fail "rtt $rtt_min ms is below delay minus jitter"
is "$rtt_max - $rtt_min > 1" || fail "no jitter: rtt from $rtt_min to $rtt_max ms"

note "loss 30%: ping loses about 30% of 400 packets"
netem loss 30% seed 7
ping_run -c 400 -i 0.005
lost=$((tx - rx))
echo "    lost $lost of $tx"
within "$lost" "$tx" 0.30 || fail "lost $lost of $tx, not about 30%"

note "duplicate 50%: ping sees about 50 duplicates in 100 replies"
netem duplicate 50% seed 7
ping_run -c 100 -i 0.005
echo "    $dups duplicates, $rx received of $tx"
[ "$rx" -eq "$tx" ] || fail "duplicate lost packets"
within "$dups" "$tx" 0.50 || fail "$dups duplicates of $tx, not about 50%"

note "delay 10ms reorder 25%: some echo replies overtake earlier ones"
netem delay 10ms reorder 25% seed 7
capture 100 -c 100 -l 20 -i 0.002
[ "$echo_replies" -gt 0 ] || fail "no echo replies captured"
[ "$seq_inversions" -gt 0 ] || fail "no reordering seen in $echo_replies echo replies"
[ $((bad_ip + bad_l4)) -eq 0 ] || fail "reordering damaged frames"

note "corrupt 20%: about a fifth of the frames arrive with a bad checksum"
netem corrupt 20% seed 7
capture 200 -c 200 -i 0.005
bad=$((bad_ip + bad_l4))
[ "$ipv4" -gt 100 ] || fail "too few IPv4 frames captured ($ipv4)"
within "$bad" "$ipv4" 0.20 || fail "$bad of $ipv4 frames corrupted, not about 20%"

note "rate 1mbit: ten 1442-byte replies sent at once leave one after another"
netem rate 1mbit
# Each reply takes 1442 * 8 bits / 1 Mbit/s = 11.5 ms on the wire: the
# replies to ten echo requests sent together cannot all arrive before nine
# serializations (104 ms) have passed. A lower bound, so it cannot flake.
ping_run -c 10 -l 10 -s 1400 -i 0.5
echo "    rtt min/avg/max $rtt_min/$rtt_avg/$rtt_max ms"
[ "$rx" -eq 10 ] || fail "rate lost packets: $(cat "$out")"
is "$rtt_min >= 11.5" || fail "rtt $rtt_min ms is shorter than one serialization (11.5 ms)"
is "$rtt_max >= 103" || fail "rtt $rtt_max ms: the replies were not serialized at 1 Mbit/s"

note "off: the link is clean and direct again"
netem delay 50ms duplicate 10%
netem off
gone "$first_pid" || fail "eta-wire (PID $first_pid) survived 'netem off'"
[ -z "$(wire_pid)" ] || fail "netem off left the wire's PID file"
link_absent "$wire_tap" "$ETA_LAB_NS" || fail "netem off left the wire's veth pair"
filters=$(peer tc filter show dev "$ETA_LAB_KERNEL_PEER_IFACE" egress) || fail "cannot list the peer's egress filters"
[ -z "$filters" ] || fail "netem off left the redirect filter: $filters"
ping_run -c 50 -i 0.005
echo "    rtt min/avg/max $rtt_min/$rtt_avg/$rtt_max ms"
[ "$rx" -eq 50 ] && [ "$dups" -eq 0 ] || fail "after off: $(cat "$out")"
is "$rtt_min < 50" || fail "after off the round trip still takes $rtt_min ms"
capture 50 -c 50 -i 0.005
[ "$ipv4" -gt 0 ] && [ $((bad_ip + bad_l4)) -eq 0 ] || fail "after off, frames arrive damaged"

note "default mode (sch_netem where the kernel has it, else eta-wire)"
ETA_LAB_NETEM=auto netem delay 20ms
ping_run -c 5 -i 0.05
is "$rtt_min >= 20" || fail "auto mode: rtt $rtt_min ms is shorter than the 20 ms delay"
netem show

note "down leaves no wire process, namespace or link behind"
"$ETA_LAB" netem --name "$ETA_LAB_NAME" --link both loss 1%
pid=$(wire_pid)
accel_pid=$(cat "${ETA_LAB_STATE:-/run/eta/lab}/$ETA_LAB_NAME.wire-$ETA_LAB_PEER_IFACE.pid" 2>/dev/null)
[ -n "$pid" ] && [ -n "$accel_pid" ] || fail "no wires on both links to check down with"
"$ETA_LAB" down --name "$ETA_LAB_NAME" || fail "eta-lab down failed"
gone "$pid" || fail "eta-wire (PID $pid) survived eta-lab down"
gone "$accel_pid" || fail "eta-wire (PID $accel_pid) on the accelerated link survived eta-lab down"
netns_absent "$ETA_LAB_NS" || fail "namespace $ETA_LAB_NS survived down"
link_absent "$ETA_LAB_KERNEL_IFACE" || fail "link $ETA_LAB_KERNEL_IFACE survived down"
left=$(compgen -G "${ETA_LAB_STATE:-/run/eta/lab}/$ETA_LAB_NAME.*" || true)
[ -z "$left" ] || fail "down left state files: $left"
echo "netem test passed"
