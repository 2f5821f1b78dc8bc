#!/usr/bin/env bash
# A connect to an address of an attached subnet that no host holds (issue 29):
# nobody answers ARP, so Linux fails it with EHOSTUNREACH after its ARP
# probes (mcast_solicit 3, retrans_time 1 s: ~3 s); eta did the same only
# after the SYN retries (~127 s, ETIMEDOUT).
#   unreachable_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# unreachable_probe.py connects blocking (connect's errno) and non-blocking
# (poll reporting the error, SO_ERROR), first on the kernel over the kernel link (to an
# unused address of its /24: the expected answers), then under eta-run through
# the PPE (an unused address of the PPE's /24). The answers must be the same,
# EHOSTUNREACH among them; eta-stat must count the failed resolutions and the
# connects they failed. The times are printed, not asserted; each wait is
# bounded (60 s: SO_SNDTIMEO on the blocking connect, poll's timeout), far
# above ARP's ~3 s and below the SYN retries' ~127 s, so the old behaviour
# fails the comparison instead of running into the test's timeout.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 600 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"

# .77 of each /24: the lab gives addresses .1 (this host) and .2 (the peer) only.
eta_silent=${ETA_LAB_PPE_IP%.*}.77
kernel_silent=${ETA_LAB_KERNEL_IP%.*}.77
for ip in "$eta_silent" "$kernel_silent"; do
    if peer ip -4 addr show | grep -c " $ip/" >/dev/null; then fail "$ip is in use in the lab: pick another"; fi
done

note "the kernel: connect to $kernel_silent (nobody there)"
timeout 200 "$py" "$here/unreachable_probe.py" "$kernel_silent" 9 > "$work/kernel.out" 2> "$work/kernel.err" ||
    { cat "$work/kernel.out" "$work/kernel.err"; fail "the probe failed on kernel sockets"; }
sed 's/^/    /' "$work/kernel.err"
grep -qx 'blocking EHOSTUNREACH' "$work/kernel.out" ||
    { cat "$work/kernel.out"; fail "the kernel did not answer EHOSTUNREACH: this host is not set up as the test expects"; }

note "eta: connect to $eta_silent (nobody there) under eta-run"
ETA_LOG=fallback,accel timeout 200 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$here/unreachable_probe.py" "$eta_silent" 9 > "$work/eta.out" 2> "$work/eta.err" ||
    { cat "$work/eta.out" "$work/eta.err"; fail "the probe failed under eta-run"; }
grep -v '^eta\[' "$work/eta.err" | sed 's/^/    /'
[ "$(grep -cE '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$work/eta.err")" -ge 2 ] ||
    { cat "$work/eta.err"; fail "the connects did not go through the PPE"; }
cat "$work/eta.out"
diff -u "$work/kernel.out" "$work/eta.out" ||
    fail "under eta-run the connect answered otherwise than on the kernel (- kernel, + eta)"
grep -qx 'SO_ERROR EHOSTUNREACH' "$work/eta.out" || fail "no EHOSTUNREACH in SO_ERROR under eta-run"

note "eta-stat counts the failed resolutions and the connects they failed"
stat_counts() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
st = [s for e in d["engines"] for s in e["stacks"]]
print(sum(s["arp_failed"] for s in st), sum(s["tcp_connects_unreachable"] for s in st))'
}
# The engine publishes its counters every 10 ms while it works and when it
# naps: the counts may trail the probe's last connect by a moment.
counted() { local f u; read -r f u <<< "$(stat_counts)"; [ "$f" -ge 2 ] && [ "$u" -ge 2 ]; }
wait_until 20 counted || true
counts=$(stat_counts)
echo "    arp_failed, tcp_connects_unreachable: $counts"
read -r failed unreachable <<< "$counts"
[ "$failed" -ge 2 ] || fail "eta-stat: arp_failed $failed, expected at least 2 (one per connect)"
[ "$unreachable" -ge 2 ] || fail "eta-stat: tcp_connects_unreachable $unreachable, expected at least 2"
timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" | grep -E '^\s+arp: ' | sed 's/^/    /'
note "ok"
