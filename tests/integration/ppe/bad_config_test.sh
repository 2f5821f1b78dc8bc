#!/usr/bin/env bash
# Bad configs of each kind are rejected before anything starts: one message
# naming the file, the key and what is allowed; non-zero exit; nothing left
# behind (no control socket, no stats, no DPDK runtime files).
#   bad_config_test.sh ETA_PPE
ETA_PPE=$1
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
work=$(mktemp -d)
on_exit "rm -rf $work"
sock=$work/run/ppe.sock
iface=lo # exists everywhere; no traffic is sent (every case fails before DPDK starts)

good() {
    cat <<TOML
[engine]
cores = ["auto:1"]
idle = "adaptive"
[dpdk]
memory = "no-huge"
file_prefix = "eta-badcfg-$$"
[[port]]
device = "net_af_packet0,iface=$iface"
address = "198.18.250.1/24"
[control]
socket = "$sock"
TOML
}

# expect NAME EXPECTED-TEXT... < config: both --check and a real start fail with it.
expect() {
    local name=$1 out rc mode
    shift
    cat > "$work/$name.toml"
    for mode in --check --foreground; do
        rc=0
        out=$(timeout 30 "$ETA_PPE" --config "$work/$name.toml" $mode 2>&1) || rc=$?
        [ "$rc" -ne 0 ] || fail "$name ($mode): accepted"
        [ "$rc" -ne 124 ] || fail "$name ($mode): hung"
        [ "$(wc -l <<<"$out")" -eq 1 ] || fail "$name ($mode): more than one line: $out"
        grep -q "$work/$name.toml" <<<"$out" || fail "$name ($mode): the message does not name the file: $out"
        local want
        for want in "$@"; do
            grep -qF -- "$want" <<<"$out" || fail "$name ($mode): '$want' missing from: $out"
        done
        [ ! -e "$sock" ] && [ ! -e "$sock.stats" ] && [ ! -e "/var/run/dpdk/eta-badcfg-$$" ] ||
            fail "$name ($mode): left files behind"
    done
    echo "ok  $name: $out"
}

good > "$work/good.toml"
timeout 30 "$ETA_PPE" --config "$work/good.toml" --check >/dev/null || fail "the good config is rejected"

good | sed 's/^idle = .*/idle = "lazy"/' | expect bad_value 'engine.idle' '"spin", "adaptive", "sleep"'
good | sed 's/^idle = "adaptive"/&\nspinn_us = 3/' | expect unknown_key 'unknown key' 'spinn_us'
good | sed 's/^idle = .*/idle = 5/' | expect wrong_type 'engine.idle' 'expected one of'
good | sed 's|^address = .*|address = "198.18.250.300/24"|' | expect bad_address 'port[0].address' 'not an IPv4 address'
good | sed 's/^cores = .*/cores = ["core:1", "pu:1"]/' | expect overlapping_cores 'engine.cores' 'overlap'
good | sed 's/^cores = .*/cores = ["core:4000"]/' | expect missing_core 'engine.cores' '"core:4000" does not exist'
good | sed 's/^cores = .*/cores = ["auto:64"]/' | expect too_many_cores 'engine.cores' 'auto:64'
good | sed "s|iface=$iface|iface=eta-no-such0|" | expect no_device 'port[0].device' 'interface "eta-no-such0" does not exist'
good | sed "s|net_af_packet0,iface=$iface|vnet:eta-no-such0|" | expect vnet_no_iface 'port[0].device' 'interface "eta-no-such0" does not exist'
good | sed "s|net_af_packet0,iface=$iface|vnet:|" | expect vnet_no_name 'port[0].device' 'wants an interface name'
good | sed 's/^memory = .*/memory = "huge"/' | sed 's/^\[dpdk\]/[dpdk]\nmemory_mb = 1048576/' |
    expect no_hugepages 'dpdk.memory' '"huge" is forced'
good | sed '/^\[\[port\]\]/,$d' | expect no_port 'no [[port]] is configured'
good | sed 's/^\[control\]/[limits]\nsockets_per_app = 100000\n[control]/' | expect region_too_big 'limits.memory_per_app'
good | sed 's/^\[control\]/[copy]\nengine = "dsa"\n[control]/' | expect bad_copy_engine 'copy.engine' '"dsa" is not a copy engine' '"cpu"' '"dmadev"'
good | sed 's/^\[control\]/[copy]\nengine = "dmadev"\n[control]/' | expect copy_without_device 'copy.engine' 'needs device = '

# [[port]] address6 (issue 31): each bad IPv6 address refused with the line
# that holds it (line 10: after address) and what to write instead.
v6() { good | sed "s|^address = .*|&\naddress6 = [$1]|"; }
v6 '"2001:2:0:fa::1/64", "2001:2:0:fb::1", "fd00:e7a::1/128"' > "$work/good6.toml"
timeout 30 "$ETA_PPE" --config "$work/good6.toml" --check >/dev/null || fail "good6: a good address6 list is rejected"
echo "ok  good6: accepted"
at=':10: port[0].address6: '
v6 '"fe80::1/64"' | expect v6_link_local "$at" 'link-local' 'derived from its MAC'
v6 '"ff02::1"' | expect v6_multicast "$at" 'multicast' 'must be unicast'
v6 '"::"' | expect v6_unspecified "$at" 'unspecified address'
v6 '"::1/128"' | expect v6_loopback "$at" 'loopback address'
v6 '"::ffff:198.18.250.1"' | expect v6_mapped "$at" 'IPv4-mapped' 'native IPv6 address'
v6 '"2001:2:0:fa::1/64", "2001:2:0:fa::1/80"' | expect v6_duplicate "$at" '"2001:2:0:fa::1/80" is listed twice'
v6 '"2001:2:0:fa::1/129"' | expect v6_prefix_big "$at" 'prefix length "129"; allowed 1 to 128'
v6 '"2001:2:0:fa::1/0"' | expect v6_prefix_zero "$at" 'prefix length "0"; allowed 1 to 128'
v6 '"2001:2:0:fa::g1"' | expect v6_not_address "$at" 'is not an IPv6 address' '2001:2:0:1::1/64'
v6 '"198.18.250.1/24"' | expect v6_ipv4 "$at" 'is not an IPv6 address'
v6 "$(for i in 1 2 3 4 5 6 7 8 9; do printf '"2001:2:0:fa::%s", ' "$i"; done)" | expect v6_too_many "$at" '9 addresses; at most 8'
good | sed 's|^address = .*|&\naddress6 = "2001:2:0:fa::1/64"|' | expect v6_not_array "$at" 'expected an array of strings'
good | sed 's|^address = .*|&\naddress6 = [1]|' | expect v6_not_string "$at" 'expected strings in the array'
# One address on two ports.
{ good; printf '[[port]]\nname = "second"\ndevice = "net_af_packet1,iface=%s"\naddress = "198.18.251.1/24"\naddress6 = ["2001:2:0:fa::1/64"]\n' "$iface"; } |
    sed "0,/^address = .*/s||&\naddress6 = [\"2001:2:0:fa::1\"]|" | expect v6_two_ports 'port[1].address6' 'given to two ports'

note "a missing DMA device: the config is fine, the start (DPDK up) refuses it and says what to do"
good | sed 's/^\[control\]/[copy]\nengine = "dmadev"\ndevice = "wq9.9"\n[control]/' > "$work/no_dma.toml"
timeout 30 "$ETA_PPE" --config "$work/no_dma.toml" --check >/dev/null || fail "no_dma: --check rejects a well-formed [copy]"
rc=0
out=$(timeout 60 "$ETA_PPE" --config "$work/no_dma.toml" --foreground 2>&1) || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "no_dma: eta-ppe started (or hung: $rc) without its DMA device: $out"
line=$(grep -F 'no DMA device' <<<"$out") || fail "no_dma: no 'no DMA device' message in: $out"
for want in "$work/no_dma.toml:" 'copy.device: no DMA device "wq9.9"' 'DPDK found: ' 'dma_skeleton' 'engine = "cpu"'; do
    grep -qF -- "$want" <<<"$line" || fail "no_dma: '$want' missing from: $line"
done
[ ! -e "$sock" ] && [ ! -e "$sock.stats" ] && [ ! -e "/var/run/dpdk/eta-badcfg-$$" ] || fail "no_dma: left files behind"
echo "ok  no_dma: $line"

note "no permission: an unprivileged user cannot open the interface"
command -v setpriv >/dev/null || fail "setpriv (util-linux) is missing"
good | sed "s|^socket = .*|socket = \"$work/nobody/ppe.sock\"|" > "$work/nobody.toml"
mkdir -p "$work/nobody" && chmod 777 "$work/nobody" && chmod 755 "$work" && chmod 644 "$work/nobody.toml"
rc=0
out=$(timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$ETA_PPE" \
    --config "$work/nobody.toml" --check 2>&1) || rc=$?
[ "$rc" -ne 0 ] || fail "an unprivileged user was allowed to open $iface"
# Every capability the port needs is named (issue 34: ppe/src/privilege.cc).
grep -qF 'missing capabilities: CAP_NET_RAW' <<<"$out" && grep -qF 'CAP_NET_ADMIN' <<<"$out" ||
    fail "no permission message naming CAP_NET_RAW and CAP_NET_ADMIN: $out"
echo "ok  no_permission: $out"

note "a second eta-ppe on a live socket is refused, naming the holder's pid; a stopped holder too"
# A listening UNIX socket stands in for a running PPE; it listens until killed.
python3 - "$sock" > "$work/holder.out" <<'PY' &
import os, signal, socket, sys
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen(1)
print("up", flush=True)
while True: signal.pause()
PY
holder=$!
on_exit "kill -CONT $holder; kill $holder"
wait_until 30 grep -qx up "$work/holder.out" || fail "the stand-in socket did not listen"
rc=0
out=$(timeout 30 "$ETA_PPE" --config "$work/good.toml" --check 2>&1) || rc=$?
[ "$rc" -ne 0 ] && grep -qF "(pid $holder) is already serving $sock" <<<"$out" || fail "live socket not detected: $out"
echo "ok  live holder: $out"
# Stopped is alive: refused at once (no wait), saying how to continue it.
kill -STOP "$holder"
wait_until 30 grep -q '^State:.*T' "/proc/$holder/status" || fail "the stand-in did not stop"
rc=0
out=$(timeout 30 "$ETA_PPE" --config "$work/good.toml" --check 2>&1) || rc=$?
[ "$rc" -ne 0 ] && grep -qF "(pid $holder), which serves $sock, is stopped" <<<"$out" &&
    grep -qF "kill -CONT $holder" <<<"$out" || fail "stopped holder not named: $out"
[[ "$out" != *"waiting for"* ]] || fail "eta-ppe waited for a stopped holder as if it were exiting: $out"
echo "ok  stopped holder: $out"
kill -CONT "$holder"
kill "$holder"
wait "$holder" 2>/dev/null || true
echo "PASS"
