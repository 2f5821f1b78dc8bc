#!/usr/bin/env bash
# UDP sendmmsg's rate and a plain sendto's instructions under the shim
# (issue 31), side by side in one lab: mmsg-probe (tests/integration/preload/
# mmsg_probe.c) under eta-run with each shim given, and plain on the kernel
# link; a sink in the lab's peer namespace (mmsg_peer.py). Reports; asserts
# nothing. Needs root and a built eta-ppe.
#   benchmarks/preload/udp-mmsg.sh [BUILD_DIR] [N] [SHIM...]
# N datagrams of 64 B per flood (sendmmsg, vlen 32; default 200000), ETA_BENCH_REPEAT
# floods per path (default 3, alternating). Each SHIM (default BUILD_DIR's)
# is also counted by callgrind: instructions inside sendto() per call (64 B
# to a name; 2,000 calls less 1,000), whole and without libdti's wait for
# the engine's answer (dti__run_sync, whose spins depend on the engine's pace);
# and inside sendmmsg() per datagram (vlen 32; 6,400 datagrams less 3,200).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
n=${2:-200000}
shift $(($# > 2 ? 2 : $#))
shims=("$@")
[ ${#shims[@]} -gt 0 ] || shims=("$build/preload/libeta-preload.so")
. "$top/tests/integration/lib.sh"
probe=$build/tests/integration/preload/mmsg-probe
peerpy=$top/tests/integration/preload/mmsg_peer.py
[ -x "$build/ppe/eta-ppe" ] && [ -x "$probe" ] || fail "build eta-ppe and mmsg-probe first"
lab_up
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
start_bg ppe timeout 1200 "$build/ppe/eta-ppe" --config "$ETA_LAB_CONFIG" --foreground
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
wait_until 60 test -S "$ETA_LAB_SOCKET" || fail "eta-ppe did not start"
out=$(mktemp -d)
on_exit "rm -rf $out"
port=$(free_port)
start_bg sink ip netns exec "$ETA_LAB_NS" timeout 1200 python3 "$peerpy" sink "$port" "$out/ready" >"$out/sink" 2>&1
wait_until 20 test -f "$out/ready" || fail "the sink did not start"
run() { # SHIM|kernel
    if [ "$1" = kernel ]; then
        timeout 300 "$probe" flood 4 "$ETA_LAB_KERNEL_PEER_IP" "$port" "$n"
    else
        ETA_PRELOAD_LIB=$1 timeout 300 "$top/tools/eta-run" --require --socket "$ETA_LAB_SOCKET" -- \
            "$probe" flood 4 "$ETA_LAB_PEER_IP" "$port" "$n"
    fi
}
for rep in $(seq 1 "${ETA_BENCH_REPEAT:-3}"); do
    for path in "${shims[@]}" kernel; do
        echo "$path: $(run "$path")"
    done
done
# callgrind's instructions inside sendto() for K calls: "total wait" (the
# wait: libdti's dti__run_sync, inclusive).
counted() { # SHIM K [CALL MODE]: CALL (default sendto) counted in mmsg-probe's MODE (default sendto)
    ETA_PRELOAD_LIB=$1 timeout 300 "$top/tools/eta-run" --require --socket "$ETA_LAB_SOCKET" -- \
        valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect="${3:-sendto}" \
        "$probe" "${4:-sendto}" 4 "$ETA_LAB_PEER_IP" "$port" "$2" >/dev/null 2>&1 || fail "callgrind of ${3:-sendto} under $1"
    callgrind_annotate --inclusive=yes "$out/cg" 2>/dev/null | python3 -c '
import re, sys
tot = wait = 0
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) ", line)
    if not m:
        continue
    v = int(m.group(1).replace(",", ""))
    if "PROGRAM TOTALS" in line:
        tot = v
    elif re.search(r"[ :]dti__run_sync[ \[]|[ :]dti__run_sync$", line):
        wait = max(wait, v)
print(tot, wait)'
}
# Per call: 2,000 calls less 1,000 (the first call's adoption and attach
# cancel out).
for shim in "${shims[@]}"; do
    read -r t1 w1 <<<"$(counted "$shim" 1000)"
    read -r t2 w2 <<<"$(counted "$shim" 2000)"
    echo "$shim: sendto $(((t2 - t1) / 1000)) instructions per call, $(((t2 - w2 - t1 + w1) / 1000)) without the wait for the engine's answer"
    read -r t1 w1 <<<"$(counted "$shim" 3200 sendmmsg flood)"
    read -r t2 w2 <<<"$(counted "$shim" 6400 sendmmsg flood)"
    echo "$shim: sendmmsg (vlen 32) $(((t2 - t1) / 3200)) instructions per datagram, $(((t2 - w2 - t1 + w1) / 3200)) without the wait"
done
ip netns exec "$ETA_LAB_NS" python3 -c "
import socket
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b'quit', ('::1', $port))"
wait "$sink_pid" || true
echo "the sink: $(cat "$out/sink")"
