#!/usr/bin/env bash
# IPv6 in the engine (issue 31): on a lab port that is eta's alone (not
# shared: the host side of the link has IPv6 off, so nothing but MARS can
# answer there), MARS is the IPv6 host for the port's address6 (the lab's
# ETA_LAB_PPE_IP6) and for its link-local address. From the peer (Linux):
#  - ping -6 to the global address is answered once duplicate address
#    detection has let it go (bounded wait), five of five after that;
#  - ping -6 to the link-local address, fe80:: with the modified EUI-64 of
#    the port's MAC (RFC 4291 2.5.1), through the peer's interface;
#  - the peer's neighbour cache holds the port's MAC for the global address
#    (MARS answered its solicitation);
#  - eta-stat counts it: echo requests in, ICMPv6 out, advertisements out,
#    and no duplicate address found.
# With ETA_TEST_SHARED=1 (the port shared with the kernel) the same pings must
# be answered, by the kernel: MARS hands the echoes and the solicitation on
# (counted as IPv6 to the kernel) and sends no ICMPv6 itself.
#   ipv6_test.sh ETA_PPE ETA_STAT
ETA_PPE=$1 ETA_STAT=$2
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat

lab_up
[ -n "${ETA_LAB_PPE_IP6:-}" ] || fail "eta-lab up printed no ETA_LAB_PPE_IP6"
grep -q "^address6 = \[\"$ETA_LAB_PPE_IP6/" "$ETA_LAB_CONFIG" || fail "the lab's config gives the port no address6 $ETA_LAB_PPE_IP6"
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
H6=$ETA_LAB_PPE_IP6 IF=$ETA_LAB_PEER_IFACE
mac=$(cat "/sys/class/net/$ETA_LAB_PPE_IFACE/address")
ll=$(python3 -c "
import ipaddress, sys
m = bytes.fromhex(sys.argv[1].replace(':', ''))
iid = bytes([m[0] ^ 2]) + m[1:3] + b'\xff\xfe' + m[3:]
print(ipaddress.IPv6Address(b'\xfe\x80' + bytes(6) + iid))" "$mac")

note "ping -6 $H6 (MARS, after its duplicate address detection)"
wait_until 30 peer ping -6 -n -c 1 -W 1 "$H6" || {
    ppe_stat || true
    fail "ping -6 $H6 got no answer within 30 s of eta-ppe's start"; }
out=$(peer ping -6 -n -c 5 -i 0.2 -W 5 "$H6" 2>&1) || fail "ping -6 $H6: $out"
grep -q ' 0% packet loss' <<<"$out" || fail "ping -6 $H6 lost echoes: $out"

note "ping -6 $ll%$IF (the link-local address from the port's MAC $mac)"
out=$(peer ping -6 -n -c 3 -i 0.2 -W 5 "$ll%$IF" 2>&1) || fail "ping -6 $ll%$IF: $out"
grep -q ' 0% packet loss' <<<"$out" || fail "ping -6 $ll%$IF lost echoes: $out"

neigh=$(peer ip -6 neigh show "$H6" dev "$IF")
[[ "$neigh" == *"lladdr $mac"* ]] || fail "the peer's neighbour cache has no $mac for $H6: '$neigh'"

sum() { ppe_json "sum(s['$1'] for e in d['engines'] for s in e['stacks'])"; }
# The engines publish their counters every 10 ms while they work and when they
# nap: wait until they show the echoes, then read the rest from later snapshots.
wait_until 10 ppe_true "sum(s['icmp6_echo_in'] for e in d['engines'] for s in e['stacks']) >= 9" || true
echo_in=$(sum icmp6_echo_in) icmp6_out=$(sum icmp6_out) na_out=$(sum nd_na_out) dup=$(sum nd_dad_duplicates)
note "eta-stat: icmp6_echo_in $echo_in, icmp6_out $icmp6_out, nd_na_out $na_out, nd_dad_duplicates $dup"
[ "$echo_in" -ge 9 ] || fail "eta-stat counts $echo_in ICMPv6 echo requests, the peer sent at least 9 that were answered"
[ "$dup" -eq 0 ] || fail "eta-stat counts $dup duplicate addresses on a lab link nobody else holds"
if [ "$(ppe_json "d['ports'][0]['kernel'] is None")" = True ]; then
    # At least the 9 echo replies the peer got (the first ping answered, 5, 3).
    # Not one per echo request: one that came during DAD is not answered
    # (RFC 4862 5.4), and with several engines DAD's own messages, which
    # made up for it, are the first engine's alone.
    [ "$icmp6_out" -ge 9 ] || fail "eta-stat counts $icmp6_out ICMPv6 messages sent for the 9 echo replies the peer got"
    [ "$na_out" -ge 1 ] || fail "eta-stat counts no neighbour advertisement sent, yet the peer learned $mac"
    who=MARS
else
    # A port shared with the kernel (ETA_TEST_SHARED=1): the kernel is the
    # IPv6 host there (it holds address6 on its tap, the same MAC and so the
    # same link-local address); MARS sees each echo and solicitation and
    # hands it on without answering (ppe/README.md "Sharing the port").
    # (eta-ppe's control thread publishes the port's counters every 100 ms.)
    wait_until 10 ppe_true "d['ports'][0]['kernel']['to']['ipv6']['frames'] >= $((echo_in + 1))" || true
    to6=$(ppe_json "d['ports'][0]['kernel']['to']['ipv6']['frames']")
    [ "$to6" -ge $((echo_in + 1)) ] ||
        fail "eta-stat counts $to6 IPv6 frames handed to the kernel for $echo_in echo requests and a solicitation"
    [ "$icmp6_out" -eq 0 ] || fail "MARS sent $icmp6_out ICMPv6 messages on a port whose kernel answers them"
    who="the kernel (shared port: MARS handed on $to6 IPv6 frames)"
fi
ppe_stop
echo "ipv6: $who answered ping -6 to $H6 and $ll%$IF and the peer's neighbour solicitation - held"
