#!/usr/bin/env bash
# IPv6 through a router (issue 31): the peer plays the PPE's IPv6 router. It
# owns an address that is off the PPE's link (BEHIND, 2001:2:0:2<index>::1/128
# on its loopback: a real off-link destination, nothing forwarded), and the
# PPE's config gives the port a default IPv6 route through the peer's
# link-local address (`gateway6`, as routers advertise themselves), so the
# engine must resolve the gateway by neighbour discovery and send through it.
# Under eta-run --require (nothing may fall back to the kernel):
#  - a client connects to a kernel echo server in the peer on [BEHIND]: 4 MiB
#    each way, sha256 equal, from the PPE's IPv6 address, the shim's decision
#    "accelerated" (before routes: not-routed, the kernel's);
#  - a server on [::] answers a kernel client in the peer bound to BEHIND (its
#    SYN-ACK and data go out through the route), 4 MiB byte-exact, the
#    accepted connection named [BEHIND] as accept() gives it;
#  - UDP over IPv6 to [BEHIND] (sendto, and connect + send): datagrams of
#    several sizes echoed byte-exact by a kernel echo server in the peer from
#    the PPE's IPv6 address (the connected client's name), nothing fallen back;
#  - eta-stat: no IPv6 frame dropped for want of a route (ip6_drop_no_route).
# With ETA_TEST_SHARED=1 the same on a port shared with the kernel.
#   ip6_route_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")/../dti" && pwd)/ip6_echo.py
UDP=$(cd "$(dirname "$0")" && pwd)/udp6.py
py=/usr/bin/python3
BYTES=$((4 << 20)) SEED=67

ppe_lab6
BEHIND=$(printf '2001:2:0:2%02x::1' "$ETA_LAB_INDEX")
peer_ll=$("$py" -c "
import ipaddress, sys
m = bytes.fromhex(sys.argv[1].replace(':', ''))
iid = bytes([m[0] ^ 2]) + m[1:3] + b'\xff\xfe' + m[3:]
print(ipaddress.IPv6Address(b'\xfe\x80' + bytes(6) + iid))" "$ETA_LAB_PEER_MAC")
# The peer's loopback holds BEHIND (the namespace goes with the lab; taken out first anyway).
peer ip link set lo up
peer ip -6 addr add "$BEHIND/128" dev lo nodad || fail "cannot give the peer's loopback $BEHIND"
on_exit "peer ip -6 addr del $BEHIND/128 dev lo 2>/dev/null"
grep -q "^address6 = " "$work/ppe.toml" || fail "the lab's config has no address6 line"
sed -i "/^address6 = /a gateway6 = \"$peer_ll\"" "$work/ppe.toml"
grep -q "^gateway6 = \"$peer_ll\"" "$work/ppe.toml" || fail "could not add gateway6 to the config"
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }

note "an eta-run --require client to a kernel server in the peer at [$BEHIND] (off-link: through gateway6 $peer_ll)"
pport=$(free_port)
start_bg psrv peer timeout 150 "$py" "$TOOL" server "$BEHIND" "$pport" >"$work/psrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/psrv.out' || ! kill -0 $psrv_pid"
grep -q listening "$work/psrv.out" || fail "the peer's server did not listen: $(cat "$work/psrv.out")"
cli=$(ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" client "$BEHIND" "$pport" "$BYTES" "$SEED" 2>"$work/cli.err") ||
    fail "the client under eta-run failed: $cli $(cat "$work/cli.err")"
wait "$psrv_pid" || fail "the peer's server exited $?"
read -r _ csent _ cgot cn _ <<<"$cli"
[ "$csent" = "$cgot" ] && [ "$cn" -eq "$BYTES" ] || fail "the client's exchange through the route: '$cli'"
[[ "$cli" == *"local [$H6]:"* ]] || fail "the client's address is not the PPE's IPv6 one: $cli"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$BEHIND\]:$pport\)" "$work/cli.err" ||
    fail "the client's connect was not the PPE's: $(cat "$work/cli.err")"
grep -q "^conn peer \[$H6\]:[0-9]* local \[$BEHIND\]:$pport$" "$work/psrv.out" ||
    fail "the peer's server saw another client: $(cat "$work/psrv.out")"

note "a server on [::] under eta-run --require, a kernel client in the peer from [$BEHIND]"
port=$(free_port)
ETA_LOG=fallback,accel start_bg srv timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" server :: "$port" >"$work/srv.out" 2>"$work/srv.err"
wait_until 30 eval "grep -q listening '$work/srv.out' || ! kill -0 $srv_pid"
grep -q listening "$work/srv.out" || fail "the server did not listen: $(cat "$work/srv.out" "$work/srv.err")"
eta=$(ETA_TEST_SOURCE=$BEHIND peer timeout 120 "$py" "$TOOL" client "$H6" "$port" "$BYTES" "$SEED") ||
    fail "the peer's client from [$BEHIND] failed: $eta"
read -r _ sent _ got n _ <<<"$eta"
[ "$sent" = "$got" ] && [ "$n" -eq "$BYTES" ] && [ "$sent" = "$csent" ] || fail "the server's exchange through the route: '$eta'"
wait "$srv_pid" || fail "the server exited $?: $(cat "$work/srv.out" "$work/srv.err")"
grep -q "^conn peer \[$BEHIND\]:[0-9]* local \[$H6\]:$port$" "$work/srv.out" ||
    fail "accept()/getsockname() of the routed connection: $(cat "$work/srv.out")"

note "UDP over IPv6 to a kernel echo server in the peer at [$BEHIND] (sendto, then connect and send)"
uport=$(free_port)
start_bg usrv peer timeout 60 "$py" "$UDP" echo "$BEHIND" "$uport" 32 >"$work/usrv.out" 2>&1
wait_until 20 eval "grep -q listening '$work/usrv.out' || ! kill -0 $usrv_pid"
grep -q listening "$work/usrv.out" || fail "the peer's UDP echo server is not ready: $(cat "$work/usrv.out")"
for how in sendto connect; do
    ucli=$(ETA_LOG=fallback timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$UDP" client "$BEHIND" "$uport" 6 "$how" 2>"$work/ucli.err") ||
        fail "the UDP client ($how) under eta-run failed: $ucli $(cat "$work/ucli.err")"
    # (Unconnected, its name is [::] as Linux autobinds it; connected, the source the route gave.)
    name=$H6
    [ "$how" = connect ] || name=::
    [ "$ucli" = "client $name ok 16" ] || fail "the UDP client's ($how) exchange through the route: '$ucli'"
    [ ! -s "$work/ucli.err" ] || fail "the UDP client ($how) fell back: $(cat "$work/ucli.err")"
done
wait "$usrv_pid" || fail "the peer's UDP echo server exited $?: $(cat "$work/usrv.out")"
[ "$(grep -c "^echo $H6 " "$work/usrv.out")" = 32 ] || fail "the peer echoed other senders: $(cat "$work/usrv.out")"

wait_until 10 ppe_true "$PPE_IP6_SEGMENTS >= $((2 * BYTES / 1500))" || true
no_route=$(sum ip6_drop_no_route)
[ "$no_route" = 0 ] || fail "eta-stat counts $no_route IPv6 frames dropped for want of a route"
ppe_stop
echo "preload_ip6_route: through gateway6 $peer_ll to [$BEHIND]: an eta-run client's and server's $BYTES bytes each way byte-exact, UDP echoed; no IPv6 frame without a route - held"
