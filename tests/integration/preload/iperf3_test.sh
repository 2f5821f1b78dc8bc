#!/usr/bin/env bash
# iperf3 over IPv6 and UDP through the PPE (issue 31): the unmodified iperf3
# from Debian under eta-run --require (nothing may fall back) against the
# lab's kernel peer, and the peer's kernel iperf3 against one under eta-run.
#   iperf3_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# - client under eta: TCP over IPv6 both directions (-6, -6 -R), UDP over IPv6 and IPv4 both directions at several
#   bitrates and datagram sizes (-u -b, -l): data moves, no more is received
#   than was sent, the control connection and the data socket are the PPE's
#   (the shim's lines), and the engine counts the datagrams;
# - server under eta (iperf3 -s on [::]: a dual-stack hybrid listener, its
#   UDP data socket on [::] a hybrid too): the peer's kernel clients over
#   IPv6 TCP and IPv6 UDP, and IPv4 UDP reversed, each test on a listener
#   made again (two engines: a listener group, moved or not).
# Loss is reported, not judged: UDP over a busy machine may lose datagrams
# as the kernel's does; what is asserted is the path and the accounting.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
command -v iperf3 >/dev/null || skip "iperf3 is not installed (tools/eta setup installs it)"
export ETA_PRELOAD_LIB=$SHIM
py=/usr/bin/python3

# Two engines: iperf3 -s closes its [::] listener after each test and
# listens again, and a listener made on an engine other than the IPv6
# sockets' (libdti's round robin) is a moved socket with a group of
# siblings: each one must come back (before: the second one fell to the
# kernel and its clients were refused).
ppe_lab6 --engines 2
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
P4=$ETA_LAB_PEER_IP P6=$ETA_LAB_PEER_IP6

counter() { ppe_json "sum(s.get('$1', 0) for e in d['engines'] for s in e['stacks'])"; }

# moved LABEL JSON: data moved, no more received than sent (iperf3's
# receiver reports what it had when the test ended, so a TCP -n run may
# show less than sent). Prints the line the log keeps.
moved() {
    "$py" - "$2" <<'PYEOF' || fail "iperf3 $1: $(cat "$2" | head -c 2000)"
import json, sys
d = json.load(open(sys.argv[1]))
if 'error' in d:
    sys.exit('error: ' + d['error'])
e = d['end']
r, s = e['sum_received']['bytes'], e['sum_sent']['bytes']
lost = e['sum'].get('lost_percent') if 'sum' in e else None
print('        received', r, 'of', s, 'bytes', '' if lost is None else 'lost %.3f%%' % lost,
      '%.0f Mbit/s' % (e['sum_received']['bits_per_second'] / 1e6))
sys.exit(0 if 0 < r <= s else 1)
PYEOF
}

note "iperf3 server in the peer ([::]); iperf3 clients under eta-run --require"
port=$(free_port)
start_bg srv ip netns exec "$ETA_LAB_NS" timeout 240 iperf3 -s -p "$port" >"$work/peer_srv.out" 2>&1
wait_until 10 peer bash -c "ss -ltn | grep -c ':$port ' >/dev/null" || fail "the peer's iperf3 did not listen"
client() { # label, iperf3 arguments
    local label=$1
    shift
    local in0 out0
    in0=$(counter udp_in) out0=$(counter udp_out)
    ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        iperf3 -p "$port" --json "$@" >"$work/c.json" 2>"$work/c.err" || fail "iperf3 $label: $(cat "$work/c.err" "$work/c.json" | head -c 2000)"
    echo "    $label ($*)"
    moved "$label" "$work/c.json"
    grep -qE "fd [0-9]+: accelerated \(" "$work/c.err" || fail "iperf3 $label: its control connection was not the PPE's: $(cat "$work/c.err")"
    ! grep -qE "fd [0-9]+: (kernel|fallback)" "$work/c.err" || fail "iperf3 $label: a socket was the kernel's: $(cat "$work/c.err")"
    if [[ " $* " == *" -u "* ]]; then
        grep -q "accelerated (UDP)" "$work/c.err" || fail "iperf3 $label: its UDP socket was not the PPE's: $(cat "$work/c.err")"
        local in1 out1
        in1=$(counter udp_in) out1=$(counter udp_out)
        echo "        engine: $((in1 - in0)) datagrams in, $((out1 - out0)) out"
        [ $((in1 - in0 + out1 - out0)) -gt 0 ] || fail "iperf3 $label: the engine counted no datagram"
    fi
}
client "TCP over IPv6" -c "$P6" -6 -n 16M
client "TCP over IPv6, reversed" -c "$P6" -6 -R -t 1
client "UDP over IPv6, 10 Mbit/s" -c "$P6" -6 -u -b 10M -t 1
client "UDP over IPv6, 100 Mbit/s, reversed" -c "$P6" -6 -u -b 100M -t 1 -R
client "UDP over IPv6, 64-byte datagrams" -c "$P6" -6 -u -b 5M -l 64 -t 1
client "UDP over IPv4, 50 Mbit/s" -c "$P4" -u -b 50M -t 1
client "UDP over IPv4, 1400-byte datagrams, reversed" -c "$P4" -u -b 50M -l 1400 -t 1 -R

note "iperf3 -s under eta-run --require; the peer's kernel iperf3 clients"
sport=$(free_port)
start_bg esrv env ETA_LOG=fallback,accel timeout 240 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    iperf3 -s -p "$sport" 2>"$work/s.err" >"$work/s.out"
wait_until 30 eval "grep -qF 'accelerated (listening on [::]:$sport ' '$work/s.err' || ! kill -0 $esrv_pid" || true
grep -qF "accelerated (listening on [::]:$sport " "$work/s.err" || fail "iperf3 -s did not listen through the PPE: $(cat "$work/s.err")"
peerclient() {
    local label=$1
    shift
    peer timeout 60 iperf3 -p "$sport" --json "$@" >"$work/pc.json" 2>&1 || fail "the peer's iperf3 $label: $(head -c 2000 "$work/pc.json")"
    echo "    $label ($*)"
    moved "$label" "$work/pc.json"
}
peerclient "TCP over IPv6 to the eta server" -c "$H6" -6 -n 16M
peerclient "UDP over IPv6 to the eta server" -c "$H6" -6 -u -b 20M -t 1
peerclient "UDP over IPv4 from the eta server" -c "$H4" -u -b 20M -t 1 -R
grep -q "accelerated (UDP on \[::\]" "$work/s.err" || fail "the eta server's UDP socket was not a hybrid on [::]: $(cat "$work/s.err")"
! grep -qE "fd [0-9]+: (kernel|fallback)" "$work/s.err" || fail "the eta server: a socket was the kernel's: $(cat "$work/s.err")"
