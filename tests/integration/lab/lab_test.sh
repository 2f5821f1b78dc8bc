#!/usr/bin/env bash
# The lab works: eta-lab up/env/down behave, two labs coexist without
# colliding, the kernel link carries real traffic byte for byte, and DPDK
# (net_af_packet, no hugepages, in-memory) opens the accelerated link and
# sees the peer's ARP request. IPv6 (issue 31): each lab has addresses from
# 2001:2::/48 on both links, one /64 per link per lab, distinct between labs;
# the kernel link carries ping -6 both ways.
ETA_LAB=$1
ARP_PROBE=$2
. "$(dirname "$0")/../lib.sh"

note "two labs at once"
lab_up
first_ns=$ETA_LAB_NS first_ip=$ETA_LAB_PPE_IP first_kip=$ETA_LAB_KERNEL_IP first_name=$ETA_LAB_NAME
second=$("$ETA_LAB" up --name "t$$-second") || fail "second lab did not come up"
on_exit "\"$ETA_LAB\" down --name t$$-second"
second_ip=$(sed -n 's/^ETA_LAB_PPE_IP=//p' <<<"$second")
second_kip=$(sed -n 's/^ETA_LAB_KERNEL_IP=//p' <<<"$second")
second_ns=$(sed -n 's/^ETA_LAB_NS=//p' <<<"$second")
second_iface=$(sed -n 's/^ETA_LAB_PPE_IFACE=//p' <<<"$second")
# The default port (no --driver): eta's vnet port (checked again below).
grep -qx "device = \"vnet:$second_iface\"" "$(sed -n 's/^ETA_LAB_CONFIG=//p' <<<"$second")" ||
    fail "a lab without --driver does not name device = \"vnet:$second_iface\" in its config"
[ "$first_ip" != "$second_ip" ] && [ "$first_kip" != "$second_kip" ] && [ "$first_ns" != "$second_ns" ] ||
    fail "labs collide: $first_ip/$first_kip/$first_ns vs $second_ip/$second_kip/$second_ns"
for ip in "$first_ip" "$second_ip" "$first_kip" "$second_kip"; do
    [[ "$ip" == 198.18.* || "$ip" == 198.19.* ]] || fail "address $ip is outside 198.18.0.0/15"
done
second_ip6=$(sed -n 's/^ETA_LAB_PPE_IP6=//p' <<<"$second")
second_kip6=$(sed -n 's/^ETA_LAB_KERNEL_IP6=//p' <<<"$second")
v6s=("$ETA_LAB_PPE_IP6" "$ETA_LAB_PEER_IP6" "$ETA_LAB_KERNEL_IP6" "$ETA_LAB_KERNEL_PEER_IP6" "$second_ip6" "$second_kip6")
for ip in "${v6s[@]}"; do
    [[ "$ip" == 2001:2:* ]] && python3 -c "import ipaddress,sys; sys.exit(0 if ipaddress.ip_address(sys.argv[1]) in ipaddress.ip_network('2001:2::/48') and ipaddress.ip_address(sys.argv[1]).compressed == sys.argv[1] else 1)" "$ip" ||
        fail "IPv6 address '$ip' is not a canonical address inside 2001:2::/48 (RFC 5180)"
done
[ "$(printf '%s\n' "${v6s[@]}" | python3 -c "import ipaddress,sys; print(len({ipaddress.ip_interface(l.strip() + '/64').network for l in sys.stdin}))")" = 4 ] ||
    fail "the labs' IPv6 links do not each have a /64 of their own: ${v6s[*]}"
[ "$ETA_LAB_PREFIX6" = 64 ] || fail "ETA_LAB_PREFIX6 is '$ETA_LAB_PREFIX6', not 64"
grep -qx "address6 = \[\"$ETA_LAB_PPE_IP6/64\"\]" "$ETA_LAB_CONFIG" || fail "the PPE config has no address6 = [\"$ETA_LAB_PPE_IP6/64\"]"
[ "$(cat "/proc/sys/net/ipv6/conf/$ETA_LAB_PPE_IFACE/disable_ipv6")" = 1 ] || fail "the accelerated link's host side has IPv6 on (the PPE owns it)"
peer_addrs=$(peer ip -o -6 addr show dev "$ETA_LAB_PEER_IFACE") || fail "cannot read the peer's IPv6 addresses"
[[ "$peer_addrs" == *"inet6 $ETA_LAB_PEER_IP6/64 "* ]] || fail "the peer's $ETA_LAB_PEER_IFACE does not hold $ETA_LAB_PEER_IP6/64: $peer_addrs"
route=$(ip -6 route get "$ETA_LAB_PEER_IP6" 2>&1) && fail "the host routes IPv6 to the PPE's peer $ETA_LAB_PEER_IP6: $route"
[[ "$route" == *"No route to host"* || "$route" == *"unreachable"* ]] || fail "the host's answer for $ETA_LAB_PEER_IP6 is not unreachable: $route"
[ "$("$ETA_LAB" env --name "$first_name")" = "$("$ETA_LAB" env --name "$first_name")" ] || fail "env is not stable"
# Captured first: under pipefail, grep -q ending the pipe early can make
# the writer's SIGPIPE fail the check.
env_out=$("$ETA_LAB" env --name "$first_name") || fail "eta-lab env failed for a lab that is up"
grep -qx "ETA_LAB_PPE_IP=$first_ip" <<<"$env_out" || fail "env does not repeat up's lines: $env_out"
[ -f "$ETA_LAB_CONFIG" ] || fail "the lab wrote no PPE config at $ETA_LAB_CONFIG"
refused "a second 'up' of the same lab" "is already up" "$ETA_LAB" up --name "$first_name"
addrs=$(ip -o addr show dev "$ETA_LAB_PPE_IFACE") || fail "cannot read the addresses of $ETA_LAB_PPE_IFACE"
[[ "$addrs" != *"inet "* ]] || fail "the accelerated link has a kernel address: $addrs"
# Nothing the host's kernel aims at the PPE's subnet may leave by its default
# route: the lab gives it an unreachable route there.
route=$(ip route get "$ETA_LAB_PEER_IP" 2>&1) && fail "the host routes to the PPE's peer $ETA_LAB_PEER_IP: $route"
[[ "$route" == *"No route to host"* ]] || fail "the host's answer for $ETA_LAB_PEER_IP is not 'No route to host': $route"

note "second lab down leaves nothing"
# What an eta-ppe and programs under the shim leave in the lab's socket
# directory must go with the lab.
second_sock=$(sed -n 's/^ETA_LAB_SOCKET=//p' <<<"$second")
mkdir -p "$second_sock.preload"
touch "$second_sock" "$second_sock.stats" "$second_sock.net" "$second_sock.preload/1"
"$ETA_LAB" down --name "t$$-second"
[ ! -e "$(dirname "$second_sock")" ] || fail "the lab's socket directory $(dirname "$second_sock") survived down"
netns_absent "$second_ns" || fail "namespace $second_ns survived down"
link_absent "$second_iface" || fail "links of the second lab survived down"
second_net=${second_ip%.*}.0/24
# Routes and the list of labs read together under eta-lab's own lock (each
# up and down holds it throughout): a route there now belongs to a lab made
# meanwhile by another test or suite, which then holds that address pair.
left=$(flock "${ETA_LAB_STATE:-/run/eta/lab}/.lock" sh -c \
    'ip route show "$1"; ip -6 route show "$2"; echo "--- labs"; "$3" list' _ "$second_net" "${second_ip6%1}/64" "$ETA_LAB") ||
    fail "cannot read the routes and labs: $left"
if [ "${left%%--- labs*}" != "" ]; then
    grep -qF " $second_ip/24 " <<<"${left#*--- labs}" ||
        fail "the routes to $second_net and ${second_ip6%1}/64 survived down: $left"
    note "$second_net went to a lab made meanwhile"
fi

note "the same lab up and down again"
# Freed: no lab is listed under its name (its registry entry went with it;
# with the links and routes gone, checked above, the pair is free to pick).
# Whether the next 'up' gets that very pair depends on what else brings labs
# up meanwhile (another test, another suite): not asserted.
listed=$("$ETA_LAB" list) || fail "eta-lab list failed"
! grep -q "^t$$-second " <<<"$listed" || fail "the lab is still listed after down: $listed"
again=$("$ETA_LAB" up --name "t$$-second") || fail "the second lab did not come up a second time"
[ -n "$(sed -n 's/^ETA_LAB_PPE_IP=//p' <<<"$again")" ] || fail "the second up printed no address: $again"
"$ETA_LAB" down --name "t$$-second" || fail "second down failed"
netns_absent "$second_ns" || fail "namespace $second_ns survived the second down"
link_absent "$second_iface" || fail "links survived the second down"
refused "env for a lab that is down" "no lab named 't$$-second' is up" "$ETA_LAB" env --name "t$$-second"

note "up --engines: the config's engines and the PPE veth's queues"
eng=$("$ETA_LAB" up --name "t$$-eng" --engines 2) || fail "eta-lab up --engines 2 failed"
on_exit "\"$ETA_LAB\" down --name t$$-eng"
grep -qx "ETA_LAB_ENGINES=2" <<<"$eng" || fail "env does not say ETA_LAB_ENGINES=2: $eng"
eng_iface=$(sed -n 's/^ETA_LAB_PPE_IFACE=//p' <<<"$eng")
grep -q '^cores = \["auto:2"\]' "$(sed -n 's/^ETA_LAB_CONFIG=//p' <<<"$eng")" || fail "the config does not ask for auto:2"
[ -d "/sys/class/net/$eng_iface/queues/rx-1" ] && [ -d "/sys/class/net/$eng_iface/queues/tx-1" ] &&
    [ ! -d "/sys/class/net/$eng_iface/queues/rx-2" ] || fail "$eng_iface does not have exactly 2 rx/tx queues"
grep -qx "ETA_LAB_ENGINES=1" <<<"$env_out" || fail "a lab without --engines does not say ETA_LAB_ENGINES=1"
"$ETA_LAB" down --name "t$$-eng" || fail "down of the 2-engine lab failed"
refused "--engines 0" "bad --engines '0'" "$ETA_LAB" up --name "t$$-bad" --engines 0
refused "--engines 9" "bad --engines '9'" "$ETA_LAB" up --name "t$$-bad" --engines 9
refused "--engines x" "bad --engines 'x'" "$ETA_LAB" up --name "t$$-bad" --engines x
refused "--driver af_xdp with 2 engines" "runs one engine" "$ETA_LAB" up --name "t$$-bad" --engines 2 --driver af_xdp
refused "--driver other" "bad --driver 'tap'" "$ETA_LAB" up --name "t$$-bad" --driver tap
refused "--driver vnet --shared" "cannot be --shared" "$ETA_LAB" up --name "t$$-bad" --driver vnet --shared
# --driver vnet: eta's own port on the veth, with the veths' offloads on
# (the peer's GSO super-frames reach it whole, its TSO frames leave whole).
vn=$("$ETA_LAB" up --name "t$$-vnet" --driver vnet) || fail "eta-lab up --driver vnet failed"
on_exit "\"$ETA_LAB\" down --name t$$-vnet"
vn_iface=$(sed -n 's/^ETA_LAB_PPE_IFACE=//p' <<<"$vn")
vn_ns=$(sed -n 's/^ETA_LAB_NS=//p' <<<"$vn")
vn_peer=$(sed -n 's/^ETA_LAB_PEER_IFACE=//p' <<<"$vn")
grep -qx "device = \"vnet:$vn_iface\"" "$(sed -n 's/^ETA_LAB_CONFIG=//p' <<<"$vn")" ||
    fail "the vnet lab's config does not name device = \"vnet:$vn_iface\""
ethtool -k "$vn_iface" | grep -cx "tcp-segmentation-offload: on" >/dev/null || fail "$vn_iface: TSO is not on"
ethtool -k "$vn_iface" | grep -cx "rx-checksumming: off" >/dev/null || fail "$vn_iface: rx checksumming is not off"
ip netns exec "$vn_ns" ethtool -k "$vn_peer" | grep -cx "generic-segmentation-offload: on" >/dev/null ||
    fail "the peer's $vn_peer: GSO is not on"
"$ETA_LAB" down --name "t$$-vnet" || fail "down of the vnet lab failed"
# The default driver, read from the second lab: it came up with no --driver
# (the first came up through lab_up, which passes ETA_TEST_DRIVER).
grep -qx "ETA_LAB_DRIVER=vnet" <<<"$second" || fail "a lab without --driver does not say ETA_LAB_DRIVER=vnet"
# --shared without --driver: net_af_packet (the kernel cannot share a vnet port).
sh_out=$("$ETA_LAB" up --name "t$$-shdef" --shared) || fail "eta-lab up --shared (no --driver) failed"
on_exit "\"$ETA_LAB\" down --name t$$-shdef"
grep -qx "ETA_LAB_DRIVER=af_packet" <<<"$sh_out" || fail "a --shared lab without --driver does not say ETA_LAB_DRIVER=af_packet"
"$ETA_LAB" down --name "t$$-shdef" || fail "down of the --shared lab failed"

note "kernel link: ping -6 both ways (no duplicate address detection to wait for)"
peer timeout 20 ping -6 -c 2 -i 0.2 -W 2 "$ETA_LAB_KERNEL_IP6" >/dev/null || fail "the peer cannot ping6 $ETA_LAB_KERNEL_IP6"
timeout 20 ping -6 -c 2 -i 0.2 -W 2 "$ETA_LAB_KERNEL_PEER_IP6" >/dev/null || fail "the host cannot ping6 $ETA_LAB_KERNEL_PEER_IP6"

note "kernel link: socat carries 8 MiB byte for byte"
payload=$(mktemp) received=$(mktemp)
on_exit "rm -f $payload $received"
head -c $((8 << 20)) /dev/urandom > "$payload"
start_bg sink peer timeout 120 socat -u "TCP-LISTEN:5001,bind=$ETA_LAB_KERNEL_PEER_IP,reuseaddr" "OPEN:$received,creat,trunc"
wait_until 10 peer bash -c "ss -ltn | grep -c '$ETA_LAB_KERNEL_PEER_IP:5001' >/dev/null" || fail "socat did not listen in the peer"
timeout 30 socat -u "OPEN:$payload" "TCP:$ETA_LAB_KERNEL_PEER_IP:5001" || fail "socat client failed"
wait "$sink_pid" || fail "socat server failed"
cmp -s "$payload" "$received" || fail "bytes differ across the kernel link"

note "congestion control: the lab's own at both ends, whatever the host's default"
# Each side of one connection over the kernel link reads its socket's
# TCP_CONGESTION (the peer's accepted socket, the host's connected one).
conn_cc() {
    local port=$1 out
    out=$(mktemp)
    start_bg ccsrv peer timeout 30 python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode(), flush=True)
c.recv(1)' "$ETA_LAB_KERNEL_PEER_IP" "$port" > "$out"
    wait_until 10 grep -qx listening "$out" || fail "the peer's python3 listener did not start"
    local host_cc
    host_cc=$(timeout 20 python3 -c 'import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()); c.send(b"x")' \
        "$ETA_LAB_KERNEL_PEER_IP" "$port") || fail "cannot connect to the peer's listener on port $port"
    wait "$ccsrv_pid" || fail "the peer's listener failed"
    echo "$host_cc $(sed -n 2p "$out")"
    rm -f "$out"
}
grep -qx "ETA_LAB_CC=cubic" <<<"$env_out" || fail "a lab without --cc does not say ETA_LAB_CC=cubic: $env_out"
got=$(conn_cc 5002)
[ "$got" = "cubic cubic" ] || fail "a connection over the kernel link does not run cubic at both ends (host, peer: $got)"
for net in "198.18.$ETA_LAB_INDEX.0/24" "198.19.$ETA_LAB_INDEX.0/24"; do
    peer ip route show "$net" | grep -c " congctl cubic" >/dev/null || fail "the peer's route to $net carries no congctl cubic"
done
# reno is always built in; a change holds for connections made from then on.
"$ETA_LAB" cc --name "$first_name" reno || fail "eta-lab cc reno failed"
got=$(conn_cc 5004)
[ "$got" = "reno reno" ] || fail "after 'eta-lab cc reno' a new connection does not run reno at both ends (host, peer: $got)"
"$ETA_LAB" env --name "$first_name" | grep -cx "ETA_LAB_CC=reno" >/dev/null || fail "env does not say ETA_LAB_CC=reno after the change"
"$ETA_LAB" cc --name "$first_name" cubic || fail "eta-lab cc cubic failed"
refused "an unknown congestion control" "is not available in this kernel" "$ETA_LAB" cc --name "$first_name" nosuchcc
refused "a malformed congestion control" "bad congestion control" "$ETA_LAB" up --name "t$$-bad" --cc "a b"
refused "cc without a name" "name one congestion control" "$ETA_LAB" cc --name "$first_name"

note "kernel link: iperf3 (1 second)"
start_bg iperf peer timeout 120 iperf3 -s -1 -B "$ETA_LAB_KERNEL_PEER_IP" -p 5201
wait_until 10 peer bash -c "ss -ltn | grep -c ':5201' >/dev/null" || fail "iperf3 did not listen in the peer"
timeout 30 iperf3 -c "$ETA_LAB_KERNEL_PEER_IP" -p 5201 -t 1 --json > "$received" || fail "iperf3 client failed"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); b=d['end']['sum_received']['bytes']; print('iperf3 bytes', b); sys.exit(0 if b > 0 else 1)" "$received" ||
    fail "iperf3 moved no data"

note "accelerated link: DPDK sees the peer's ARP request"
prefix=eta-arp-probe-$$
on_exit "rm -rf /var/run/dpdk/$prefix"
probe_out=$(mktemp)
on_exit "rm -f $probe_out"
start_bg probe timeout 120 "$ARP_PROBE" --vdev "net_af_packet0,iface=$ETA_LAB_PPE_IFACE" --ip "$ETA_LAB_PPE_IP" \
    --timeout 15 --prefix "$prefix" >"$probe_out" 2>&1
wait_until 20 grep -qx READY "$probe_out" || { cat "$probe_out"; fail "arp_probe did not start"; }
# The peer asks for the PPE's address; nobody answers yet, so the kernel keeps asking.
peer ping -c 3 -i 0.3 -W 1 "$ETA_LAB_PPE_IP" >/dev/null 2>&1 || true
rc=0
wait "$probe_pid" || rc=$?
result=$(cat "$probe_out")
echo "$result"
[ $rc -eq 0 ] || fail "DPDK did not see the ARP request (rc $rc)"
echo "lab test passed"
