#!/usr/bin/env bash
# One address, two stacks (issue 29): a lab made with `eta-lab up --shared`,
# whose PPE config says kernel = "shared". The host's kernel holds the PPE's
# address through the tap eta-ppe makes, so from the peer namespace:
#  - a plain kernel TCP server (python3, not under eta-run) on the PPE's address
#    answers, byte for byte, while an eta-run server (the same under the shim) on
#    another port of the same address answers too;
#  - ping to the PPE's address (the kernel answers it), a UDP exchange with a
#    kernel UDP socket on that address, IPv6 link-local ping to the tap;
#  - IPv6 (issue 31): the tap holds the port's address6 (the lab's
#    ETA_LAB_PPE_IP6); the peer pings it and a plain kernel TCP server on it
#    echoes 2 MiB byte-exact; one on [::] echoes 2 MiB through the tap's
#    link-local address; on the host an eta-run client reaches the kernel
#    server on the IPv6 address (a local connect in the engine first, then
#    the kernel's try: no eta listener there);
#  - a plain host program's outgoing TCP and UDP from the shared address to
#    the peer (the answers come in through the PPE's port and go to the kernel);
#  - eta-stat (table, JSON, Prometheus) counts what went to and came from the kernel;
#  - eta-ppe killed (SIGKILL): its tap stays (persistent), with the address and
#    a route the host put through it; restarted: the tap is taken over as it
#    is (the route still there) and kernel traffic on the port resumes;
#    stopped (SIGTERM): the tap stays too (eta-lab down removes it).
#   shared_test.sh ETA_PPE ETA_STAT PRELOAD ETA_RUN
ETA_PPE=$1 ETA_STAT=$2 PRELOAD=$3 ETA_RUN=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$PRELOAD" libeta-preload.so
command -v socat >/dev/null || skip "socat is not installed (tools/eta setup installs it)"

# --shared needs the kernel's tap beside the port: af_packet's (the vnet port
# cannot share its interface with the kernel), also under ETA_TEST_DRIVER.
lab_up --driver af_packet --shared
grep -qx 'kernel = "shared".*' "$ETA_LAB_CONFIG" || grep -c '^kernel = "shared"' "$ETA_LAB_CONFIG" >/dev/null ||
    fail "eta-lab up --shared wrote no kernel = \"shared\" into $ETA_LAB_CONFIG"
[ -n "$ETA_LAB_SHARED_IFACE" ] || fail "eta-lab up --shared names no kernel interface (ETA_LAB_SHARED_IFACE)"
TAP=$ETA_LAB_SHARED_IFACE H=$ETA_LAB_PPE_IP P=$ETA_LAB_PEER_IP
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET

note "the PPE made $TAP: the port's MAC, the PPE's address"
addrs=$(ip -o addr show dev "$TAP" 2>&1) || fail "no kernel interface $TAP after eta-ppe started: $addrs"
[[ "$addrs" == *"inet $H/$ETA_LAB_PREFIX"* ]] || fail "$TAP does not hold $H/$ETA_LAB_PREFIX: $addrs"
tap_mac=$(cat "/sys/class/net/$TAP/address")
port_mac=$(ppe_json "d['ports'][0]['mac']")
[ "$tap_mac" = "$port_mac" ] || fail "$TAP has MAC $tap_mac, the port $port_mac: one host, one MAC"

# Servers: a TCP echo (python3: socat's PIPE can block writing into its own
# full pipe with megabytes in flight) as a plain kernel program on the PPE's
# address, the same under eta-run on another port of it, one in the peer for
# the host's outgoing connection; a kernel UDP echo (socat) on the address.
cat > "$work/echo.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
while True:
    c, _ = s.accept()
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
PY
# Waits are bounded at 120 s and end at their event: at load ~24, with another
# test beside this one, the eta-run server was listening in MARS only after
# the 30 s this wait had (each eta-stat check is a Python start).
start_bg ktcp timeout 900 python3 "$work/echo.py" "$H" 7101
start_bg etcp timeout 900 "$ETA_RUN" --require -- python3 "$work/echo.py" "$H" 7201
start_bg kudp timeout 900 socat -T 60 "UDP-RECVFROM:7301,bind=$H,reuseaddr,fork" PIPE
start_bg ptcp timeout 900 ip netns exec "$ETA_LAB_NS" python3 "$work/echo.py" "$P" 7401
start_bg pudp timeout 900 ip netns exec "$ETA_LAB_NS" socat -T 60 "UDP-RECVFROM:7402,bind=$P,reuseaddr,fork" PIPE
# Listening in MARS, not only attached: a SYN before that is the kernel's (which resets it).
wait_until 120 ppe_true "any(c['state'] == 'LISTEN' and c['local'].endswith(':7201') for c in d['connections'])" ||
    fail "the eta-run server does not listen through the PPE: $(ppe_stat | tail -5)"
wait_until 120 sh -c "ss -Hltn 'src $H:7101' | grep -c . >/dev/null" || fail "the kernel TCP server did not listen"
wait_until 120 peer sh -c "ss -Hltn 'sport = :7401' | grep -c . >/dev/null" || fail "the peer's TCP server did not listen"
wait_until 120 peer sh -c "ss -Hlun 'sport = :7402' | grep -c . >/dev/null" || fail "the peer's UDP echo did not bind"
head -c $((2 << 20)) /dev/urandom > "$work/blob"

# What the two stacks and the tap saw, for a failure's message.
diag() {
    { ppe_stat | grep -E '^kernel|^ +0 ' || true; ip -s link show "$TAP" || true; ss -tni || true
      peer ss -tni || true; tail -5 "$work/ppe.log"; } >&2
}

# echo_from_peer LABEL PORT [SOCAT-ADDRESS]: 2 MiB through a TCP echo on
# the PPE's address (default TCP:$H:PORT), byte-exact.
echo_from_peer() {
    local label=$1 port=$2 to=${3:-TCP:$H:$2}
    rm -f "$work/echoed.$port"
    peer timeout 60 socat -t 30 "$to" STDIO < "$work/blob" > "$work/echoed.$port" 2>"$work/socat.$port.err" ||
        { cat "$work/socat.$port.err" >&2; diag; fail "$label: socat from the peer to $to failed"; }
    cmp -s "$work/blob" "$work/echoed.$port" || { diag;
        fail "$label: the echo from $H:$port differs from what was sent ($(stat -c %s "$work/echoed.$port") of $(stat -c %s "$work/blob") bytes came back; $(cmp "$work/blob" "$work/echoed.$port" 2>&1 | head -1)); $(ppe_stat | grep '^kernel' || true)"; }
}

note "a plain kernel TCP server on $H:7101 answers the peer, byte-exact"
echo_from_peer "kernel server" 7101
note "an eta-run server on $H:7201 answers too, byte-exact"
opens0=$(ppe_json "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines'])")
echo_from_peer "eta-run server" 7201
# The engines publish their counters every 10 ms while they work and when
# they nap: the count may trail the connection by a moment.
wait_until 20 ppe_true "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines']) > $opens0" ||
    fail "the connection to the eta-run server did not go through MARS (passive opens $opens0 -> $(ppe_json "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines'])"))"
note "both again, at once"
echo_from_peer "kernel server, second" 7101 &
k2=$!
echo_from_peer "eta-run server, second" 7201
wait "$k2" || fail "the second kernel-server exchange failed"

note "ping to $H (the kernel answers it)"
peer ping -c 3 -i 0.2 -W 2 "$H" > "$work/ping.log" || { cat "$work/ping.log"; fail "the peer cannot ping $H"; }

note "UDP to a kernel socket on $H:7301"
out=$(echo "udp hello $$" | peer timeout 10 socat -t 3 - "UDP:$H:7301") || fail "the UDP exchange with $H:7301 failed"
[ "$out" = "udp hello $$" ] || fail "the kernel's UDP echo answered '$out'"

note "a plain host program's outgoing TCP from $H to the peer"
rm -f "$work/echoed"
timeout 60 socat -t 30 "TCP:$P:7401,bind=$H" STDIO < "$work/blob" > "$work/echoed" 2>"$work/socat.err" ||
    { cat "$work/socat.err" >&2; fail "the host's connection from $H to $P:7401 failed"; }
cmp -s "$work/blob" "$work/echoed" || fail "the echo from the peer's server differs"

note "a plain host program's outgoing UDP from $H to the peer"
out=$(echo "udp out $$" | timeout 10 socat -t 3 - "UDP:$P:7402,bind=$H") || fail "the host's UDP exchange from $H with $P:7402 failed"
[ "$out" = "udp out $$" ] || fail "the peer's UDP echo answered '$out' to the host's datagram from $H"

note "IPv6: the peer pings the tap's link-local address"
ll=$(ip -o -6 addr show dev "$TAP" scope link | awk '{print $4}' | cut -d/ -f1 | head -1)
[ -n "$ll" ] || fail "$TAP has no IPv6 link-local address: $(ip -o -6 addr show dev "$TAP")"
# (the peer's own link-local address may still be tentative: DAD takes a second)
wait_until 120 peer ping -6 -c 1 -W 1 "$ll%$ETA_LAB_PEER_IFACE" ||
    fail "the peer cannot ping6 $ll on $ETA_LAB_PEER_IFACE"

H6=$ETA_LAB_PPE_IP6
note "IPv6: the tap holds the port's address6 $H6; the peer pings it and a kernel TCP server on it echoes"
[ -n "$H6" ] || fail "the lab gives the PPE no IPv6 address (ETA_LAB_PPE_IP6)"
grep -qF "address6 = [\"$H6/$ETA_LAB_PREFIX6\"]" "$ETA_LAB_CONFIG" || fail "the lab's PPE config has no address6 = [\"$H6/$ETA_LAB_PREFIX6\"]"
[[ "$(ip -o -6 addr show dev "$TAP")" == *"inet6 $H6/$ETA_LAB_PREFIX6 "* ]] ||
    fail "$TAP does not hold $H6/$ETA_LAB_PREFIX6: $(ip -o -6 addr show dev "$TAP")"
json_true "$(ppe_stat --json)" "d['ports'][0]['address6'] == ['$H6/$ETA_LAB_PREFIX6']" ||
    fail "eta-stat --json does not list the port's address6: $(ppe_json "d['ports'][0].get('address6')")"
table=$(ppe_stat) || fail "eta-stat failed"
grep -qF "ipv6 p0:  $H6/$ETA_LAB_PREFIX6" <<<"$table" || fail "eta-stat's table does not list $H6: $(grep -i ipv6 <<<"$table")"
grep -qF "$ETA_LAB_PPE_IP/$ETA_LAB_PREFIX $H6/$ETA_LAB_PREFIX6 mtu" "$work/ppe.log" ||
    fail "eta-ppe's start log does not list $H6: $(grep ' up: ' "$work/ppe.log" | tail -1)"
# The kernel's duplicate address detection (about a second) before the address is usable.
wait_until 120 sh -c "ip -6 addr show dev $TAP | grep -F ' $H6/' | grep -cv tentative >/dev/null" ||
    fail "$H6 on $TAP stays tentative (duplicate address detection): $(ip -6 addr show dev "$TAP")"
peer timeout 20 ping -6 -c 3 -i 0.2 -W 2 "$H6" > "$work/ping6.log" || { cat "$work/ping6.log"; diag; fail "the peer cannot ping6 $H6"; }
start_bg ktcp6 timeout 900 python3 "$work/echo.py" "$H6" 7102
wait_until 120 sh -c "ss -Hltn 'src [$H6]:7102' | grep -c . >/dev/null" || fail "the kernel TCP server on [$H6]:7102 did not listen"
echo_from_peer "kernel server over IPv6" 7102 "TCP6:[$H6]:7102"
note "IPv6: a kernel TCP server on [::] echoes the peer through the tap's link-local address"
# [::] is the host's whole namespace: a port the kernel picks, not a fixed
# number another test (or another suite beside this one) may hold.
ll_port=$(free_port)
start_bg ktcpll timeout 900 python3 "$work/echo.py" :: "$ll_port"
wait_until 120 sh -c "ss -Hltn 'sport = :$ll_port' | grep -c . >/dev/null" || fail "the kernel TCP server on [::]:$ll_port did not listen"
echo_from_peer "kernel server over IPv6 link-local" "$ll_port" "TCP6:[$ll%$ETA_LAB_PEER_IFACE]:$ll_port"
note "IPv6 on the host: an eta-run client to the kernel server on [$H6]:7102 (the engine refuses, the kernel connects)"
rm -f "$work/echoed6"
timeout 60 "$ETA_RUN" --require -- socat -t 30 "TCP6:[$H6]:7102" STDIO < "$work/blob" > "$work/echoed6" 2>"$work/socat6.err" ||
    { cat "$work/socat6.err" >&2; fail "an eta-run client on the host cannot reach the kernel server on [$H6]:7102"; }
cmp -s "$work/blob" "$work/echoed6" || fail "the eta-run client's echo from [$H6]:7102 differs ($(stat -c %s "$work/echoed6") of $(stat -c %s "$work/blob") bytes)"

note "eta-stat counts what went to and came from the kernel"
cond="all(d['ports'][0]['kernel']['to'][r]['frames'] > 0 for r in ('tcp-other-port', 'udp', 'icmp', 'arp', 'ipv6'))"
cond="$cond and d['ports'][0]['kernel']['from_frames'] > 0 and d['ports'][0]['kernel']['iface'] == '$TAP'"
wait_until 120 ppe_true "$cond" || fail "eta-stat --json does not count the forwarded frames: $(ppe_json "d['ports'][0]['kernel']")"
table=$(ppe_stat) || fail "eta-stat failed"
grep -q "^kernel p0 ($TAP): to the kernel " <<<"$table" || fail "eta-stat's table has no kernel line: $table"
prom=$(ppe_stat --prometheus) || fail "eta-stat --prometheus failed"
grep -qE '^eta_port_kernel_to_frames_total\{.*reason="udp".*\} [1-9]' <<<"$prom" ||
    fail "eta-stat --prometheus has no counted eta_port_kernel_to_frames_total for udp: $(grep kernel <<<"$prom" | head)"
grep -qE '^eta_port_kernel_from_frames_total\{.*\} [1-9]' <<<"$prom" || fail "no eta_port_kernel_from_frames_total"

note "eta-ppe killed: its tap stays, with the host's address and routes; restarted: it is taken over, kernel traffic resumes"
# A route of the host's own through the tap (as a server's default route
# would be): it must survive the restart, as the address does. The host's
# routing table is shared by every test (and suite) on the machine: a /32
# named after this lab's number, which no other live lab has.
via_tap=198.18.250.${ETA_LAB_INDEX:?}/32
ip route add "$via_tap" via "$P" dev "$TAP" || fail "cannot add a route to $via_tap through $TAP"
on_exit "ip route del $via_tap dev $TAP 2>/dev/null || true"
ppe_kill9
[[ "$(ip -o addr show dev "$TAP" 2>&1)" == *"inet $H/$ETA_LAB_PREFIX"* ]] ||
    fail "$TAP or its address went with the killed eta-ppe: $(ip -o addr show dev "$TAP" 2>&1)"
ppe_start "$work/ppe.toml"
grep -q "kernel interface $TAP taken over" "$work/ppe.log" ||
    fail "the restarted eta-ppe did not take $TAP over: $(grep -i "$TAP" "$work/ppe.log" | tail -3)"
[ "$(cat "/sys/class/net/$TAP/address")" = "$port_mac" ] || fail "the restarted PPE's $TAP has another MAC"
ip route show "$via_tap" | grep -c "dev $TAP" >/dev/null || fail "the host's route through $TAP did not survive the restart"
wait_until 120 peer ping -c 1 -W 1 "$H" || fail "the peer cannot ping $H after the restart"
[[ "$(ip -o -6 addr show dev "$TAP")" == *"inet6 $H6/$ETA_LAB_PREFIX6 "* ]] ||
    fail "$TAP lost $H6 across the restart: $(ip -o -6 addr show dev "$TAP")"
wait_until 120 peer ping -6 -c 1 -W 1 "$H6" || fail "the peer cannot ping6 $H6 after the restart"
echo_from_peer "kernel server after the restart" 7101
out=$(echo "udp again $$" | peer timeout 10 socat -t 3 - "UDP:$H:7301") || fail "UDP after the restart failed"
[ "$out" = "udp again $$" ] || fail "the kernel's UDP echo answered '$out' after the restart"

note "eta-ppe stopped (SIGTERM): the tap stays for the next start"
ppe_stop
[ -e "/sys/class/net/$TAP" ] || fail "$TAP went with the stopped eta-ppe (it should stay, persistent)"
echo "PASS"
