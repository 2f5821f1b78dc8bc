#!/usr/bin/env bash
# A real DNS server through the PPE (issue 31): Debian's dnsmasq under
# eta-run --require on the lab, answering the kernel peer's dig over UDP and
# TCP.
#   dns_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT [address|wildcard]
# - address (preload_dns): dnsmasq --listen-address=PPE --bind-interfaces
#   (its sockets bound to the PPE's address): its UDP socket and its TCP
#   listener are the PPE's (the shim's log);
# - wildcard (preload_dns_wildcard): dnsmasq as it is configured by default
#   (0.0.0.0 and [::], IP_PKTINFO to learn the address a query came to and
#   to answer from it) on a lab whose port is shared with the kernel (the
#   PPE's address on a kernel interface, as dnsmasq's interface check wants):
#   its UDP sockets and TCP listeners on 0.0.0.0 and [::] are hybrids (the
#   PPE's and the kernel's), and `dig -6` (UDP and +tcp) to the PPE's IPv6
#   address gets the same answers, its UDP queries through the engine;
# - either way `dig` and `dig +tcp` from the peer get the configured address
#   for three names under eta.lab, as the same dnsmasq on the kernel link
#   answers them; eta-stat counts the queries' datagrams in the engine
#   (udp_in/udp_out) and shows dnsmasq's sockets accelerated, none fallen
#   back to the kernel (netlink ones aside).
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4 mode=${5:-address}
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
command -v dnsmasq >/dev/null || skip "dnsmasq is not installed (tools/eta setup installs dnsmasq-base)"
command -v dig >/dev/null || skip "dig is not installed (tools/eta setup installs bind9-dnsutils)"
export ETA_PRELOAD_LIB=$SHIM
py=/usr/bin/python3

case "$mode" in
    address) lab_up ;;
    wildcard) if [ -n "${ETA_TEST_SHARED:-}" ]; then lab_up; else lab_up --shared; fi ;;
    *) fail "unknown mode '$mode' (allowed: address, wildcard)" ;;
esac
work=$(mktemp -d)
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 600 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"

answer=198.18.7.7 # data in the answers only (RFC 2544's block): nothing is sent there

stat_udp() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
st = [s for e in d["engines"] for s in e["stacks"]]
print(sum(s["udp_in"] for s in st), sum(s["udp_out"] for s in st))'
}

# The sockets of the program named $1 by where they went (eta-stat --json),
# as "reason count" lines.
stat_sockets() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
for p in d["programs"]:
    if p["name"] == sys.argv[1]:
        for k, v in sorted(p["sockets"].items()):
            print(k, v)' "$1"
}

# dnsmasq with the test's options; $1: log file, the rest: how it listens.
dnsmasq_args() {
    local port=$1
    shift
    echo --keep-in-foreground --conf-file=/dev/null --user=root "--pid-file=$work/dnsmasq.pid" --no-resolv --no-hosts \
        --log-facility=- --log-queries "--address=/eta.lab/$answer" "--port=$port" "$@"
}

# dig from the peer: $1 server, $2 port, $3 name, the rest dig's options.
# Prints the answer section's addresses.
ask() {
    local server=$1 port=$2 name=$3
    shift 3
    peer timeout 30 dig "@$server" -p "$port" +time=5 +tries=2 +short "$@" "$name" A
}

check_answers() { # server port log [dig option]: dig over UDP and TCP, three names
    local server=$1 port=$2 log=$3 name got
    for name in eta.lab host.eta.lab a.b.eta.lab; do
        for how in +notcp +tcp; do
            got=$(ask "$server" "$port" "$name" "$how" ${4:+"$4"}) || { cat "$log"; fail "dig $how $name @$server failed"; }
            [ "$got" = "$answer" ] || { cat "$log"; fail "dig $how $name @$server answered '$got', expected $answer"; }
        done
    done
}

note "the kernel link first (the same dnsmasq, no eta): what the answers are"
kport=$(free_port)
start_bg kdns timeout 300 dnsmasq $(dnsmasq_args "$kport" "--listen-address=$ETA_LAB_KERNEL_IP" --bind-interfaces) \
    2>"$work/kernel.log"
wait_until 30 grep -q "started, version" "$work/kernel.log" || { cat "$work/kernel.log"; fail "dnsmasq did not start"; }
check_answers "$ETA_LAB_KERNEL_IP" "$kport" "$work/kernel.log"
kill "$kdns_pid"
wait "$kdns_pid" 2>/dev/null

if [ "$mode" = address ]; then
    note "dnsmasq on the PPE's address (--listen-address --bind-interfaces) under eta-run --require"
    listen=("--listen-address=$ETA_LAB_PPE_IP" --bind-interfaces)
    accepted='^(accelerated|not-inet) '
else
    note "dnsmasq in its default wildcard mode (0.0.0.0 and [::]) under eta-run --require, the port shared"
    listen=()
    accepted='^(accelerated|not-inet) ' # its [::] sockets too (UDP over IPv6: the shim's hybrid)
fi
read -r in0 out0 <<< "$(stat_udp)"
port=$(free_port)
start_bg dns env ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    dnsmasq $(dnsmasq_args "$port" "${listen[@]}") 2>"$work/dns.log"
wait_until 30 grep -q "started, version" "$work/dns.log" || { cat "$work/dns.log"; fail "dnsmasq did not start under eta-run"; }
if [ "$mode" = address ]; then
    n=$(grep -c "accelerated ($ETA_LAB_PPE_IP:$port)" "$work/dns.log")
    [ "$n" -ge 2 ] || { cat "$work/dns.log"; fail "dnsmasq's UDP socket and TCP listener were not both accelerated ($n)"; }
else
    grep -q "accelerated (UDP on 0.0.0.0:$port on the PPE and the kernel)" "$work/dns.log" ||
        { cat "$work/dns.log"; fail "dnsmasq's UDP socket on 0.0.0.0 is not a hybrid"; }
    grep -q "accelerated (listening on 0.0.0.0:$port on the PPE and the kernel)" "$work/dns.log" ||
        { cat "$work/dns.log"; fail "dnsmasq's TCP listener on 0.0.0.0 is not a hybrid"; }
fi
check_answers "$ETA_LAB_PPE_IP" "$port" "$work/dns.log"
if [ "$mode" = wildcard ] && [ -n "${ETA_LAB_PPE_IP6:-}" ]; then
    # dnsmasq drops an IPv6 query whose IPV6_PKTINFO names no interface
    # (ifindex 0): over IPv6 it answers on a port whose addresses a kernel
    # interface holds (shared), as here.
    note "dig -6 @$ETA_LAB_PPE_IP6: its [::] sockets (UDP over IPv6 through the engine, TCP)"
    grep -qF "accelerated (UDP on [::]:$port on the PPE and the kernel, IPv6 only)" "$work/dns.log" ||
        { cat "$work/dns.log"; fail "dnsmasq's UDP socket on [::] is not a hybrid"; }
    wait_until 30 peer ping -6 -n -c 1 -W 1 "$ETA_LAB_PPE_IP6" >/dev/null || fail "ping -6 $ETA_LAB_PPE_IP6: no answer"
    read -r in6 _o <<< "$(stat_udp)"
    check_answers "$ETA_LAB_PPE_IP6" "$port" "$work/dns.log" -6
    # the queries came through the engine (its [::] half), not the kernel's
    udp6_counted() { local i o; read -r i o <<< "$(stat_udp)"; [ $((i - in6)) -ge 3 ]; }
    wait_until 20 udp6_counted || { cat "$work/dns.log"; fail "eta-stat: the engine did not count the IPv6 UDP queries"; }
fi
# The engine publishes its counters every 10 ms while it works and when it
# naps: the counts may trail the last answer by a moment.
counted() { local i o; read -r i o <<< "$(stat_udp)"; [ $((i - in0)) -ge 3 ] && [ $((o - out0)) -ge 3 ]; }
wait_until 20 counted || true
read -r in1 out1 <<< "$(stat_udp)"
echo "    udp_in $((in1 - in0)), udp_out $((out1 - out0)) for 3 UDP queries"
[ $((in1 - in0)) -ge 3 ] && [ $((out1 - out0)) -ge 3 ] ||
    { cat "$work/dns.log"; fail "eta-stat: the engine did not count the UDP queries ($((in1 - in0)) in, $((out1 - out0)) out)"; }
stat_sockets dnsmasq > "$work/sockets"
sed 's/^/    dnsmasq sockets: /' "$work/sockets"
if grep -v -E "$accepted" "$work/sockets" | grep -cv ' 0$' >/dev/null; then
    cat "$work/dns.log"; fail "dnsmasq has sockets fallen back to the kernel"
fi
kill "$dns_pid"
wait "$dns_pid" 2>/dev/null
note "ok"
