#!/usr/bin/env bash
# [[port]] flow_isolate (issue 29) on the real DPDK devices this machine has
# (no bifurcated NIC here): a device with no rte_flow (net_null) and one whose
# rte_flow cannot take eta's rules (DPDK's net_tap: no ARP item; on this VM's
# kernel no multiq qdisc either) stop eta-ppe at start with one clear message
# naming the port, what the device refused (isolated mode, or the rule and
# its pattern) and what to do instead; non-zero exit, no crash, no hang,
# nothing left behind (socket, stats, DPDK runtime files, the tap).
# The config's refusals (flow_isolate with kernel = "shared", on af_packet)
# are checked through eta-ppe too, and --check's listing of an address6's
# IPv6 rules.
#   flow_isolate_test.sh ETA_PPE
ETA_PPE=$1
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
work=$(mktemp -d)
on_exit "rm -rf $work"
sock=$work/run/ppe.sock
prefix="eta-flowiso-$$"
tap="etafi$$"
tap=${tap:0:15}
on_exit "ip link del $tap 2>/dev/null || true"

config() {
    cat <<TOML
[engine]
cores = ["auto:1"]
[dpdk]
memory = "no-huge"
memory_mb = 256
file_prefix = "$prefix"
[[port]]
device = "$1"
address = "198.18.252.1/24"
flow_isolate = true
${2:-}
[control]
socket = "$sock"
TOML
}

left_nothing() {
    [ ! -e "$sock" ] && [ ! -e "$sock.stats" ] && [ ! -e "/var/run/dpdk/$prefix" ] || fail "$1: left files behind"
    link_absent "$tap" || fail "$1: the tap $tap is left behind"
}

# start NAME WANT... : --check accepts the config, a start fails with every WANT on its error line.
start() {
    local name=$1 out rc=0 line want
    shift
    out=$(timeout 30 "$ETA_PPE" --config "$work/$name.toml" --check 2>&1) ||
        fail "$name: --check rejects a well-formed config: $out"
    # --check lists the rules a start would program, and what stays the kernel's.
    grep -qF 'port "port0": flow rule tcp4: eth / ipv4 dst 198.18.252.1 proto tcp / tcp -> queue 0' <<<"$out" &&
        grep -qF 'port "port0": flow rule arp: eth / type arp / arp_eth_ipv4 tpa 198.18.252.1 -> queue 0' <<<"$out" &&
        grep -qF 'port "port0": left to the kernel'"'"'s netdev: everything not to 198.18.252.1' <<<"$out" ||
        fail "$name: --check does not list the flow rules: $out"
    rc=0
    out=$(timeout 60 "$ETA_PPE" --config "$work/$name.toml" --foreground 2>&1) || rc=$?
    [ "$rc" -ne 0 ] || fail "$name: eta-ppe started: $out"
    [ "$rc" -ne 124 ] || fail "$name: eta-ppe hung"
    [ "$rc" -lt 128 ] || fail "$name: eta-ppe died of signal $((rc - 128)): $out"
    line=$(grep -F 'eta-ppe: error: ' <<<"$out") || fail "$name: no error line in: $out"
    [ "$(wc -l <<<"$line")" -eq 1 ] || fail "$name: more than one error line: $line"
    for want in "$@"; do
        grep -qF -- "$want" <<<"$line" || fail "$name: '$want' missing from: $line"
    done
    left_nothing "$name"
    echo "ok  $name: $line"
}

note "net_null: no rte_flow at all, isolated mode refused"
config net_null0 > "$work/null.toml"
start null 'port "port0" (net_null0): flow_isolate = true, but the device cannot enter rte_flow isolated mode' \
    'use kernel = "shared"' 'two NICs'

note "an address6: --check lists its IPv6 rules (tcp6, udp6, icmp6, nd6 at its solicited-node group)"
config net_null0 'address6 = ["2001:2:0:fc::1/64"]' > "$work/null6.toml"
out=$(timeout 30 "$ETA_PPE" --config "$work/null6.toml" --check 2>&1) || fail "address6: --check rejects it: $out"
for want in 'flow rule tcp6: eth / ipv6 dst 2001:2:0:fc::1 proto tcp / tcp -> queue 0' \
    'flow rule udp6: eth / ipv6 dst 2001:2:0:fc::1 proto udp / udp -> queue 0' \
    'flow rule icmp6: eth / ipv6 dst 2001:2:0:fc::1 proto icmpv6 -> queue 0' \
    'flow rule nd6: eth / ipv6 dst ff02::1:ff00:1 proto icmpv6 / icmpv6 type 135 -> queue 0' \
    'the kernel must hold no address of its own in solicited-node group ff02::1:ff00:1'; do
    grep -qF -- "$want" <<<"$out" || fail "address6: '$want' missing from --check: $out"
done
left_nothing null6

note "net_tap: isolated mode taken, one of eta's rules refused, named with its pattern"
config "net_tap0,iface=$tap" > "$work/tap.toml"
start tap "port \"port0\" (net_tap0,iface=$tap): flow_isolate = true, but the NIC refused rule \"" \
    ' -> queue 0" (' 'use kernel = "shared"'

note "refused in the config: with kernel = \"shared\", on net_af_packet"
for c in "shared|net_null0|kernel = \"shared\"|cannot be used with kernel = \"shared\"" \
         "af_packet|net_af_packet0,iface=lo||\"net_af_packet0\" has no rte_flow isolated mode"; do
    IFS='|' read -r name dev extra want <<<"$c"
    config "$dev" "$extra" > "$work/$name.toml"
    for mode in --check --foreground; do
        refused "$name ($mode)" "port[0].flow_isolate: $want" timeout 30 "$ETA_PPE" --config "$work/$name.toml" $mode
        left_nothing "$name ($mode)"
    done
    echo "ok  $name: refused by the config"
done
