#!/usr/bin/env bash
# IPv6 listeners handed over, then a PPE restart (issue 31, session 47):
# under eta-run --require, one program listens on [PPE IPv6 address]:P1
# (bound there, the engine's alone) and on [::]:P2 with IPV6_V6ONLY=1, then
# execs itself keeping them (the exec handover); another does the same and
# passes them to a child over SCM_RIGHTS. Once listening, setsockopt
# (IPV6_V6ONLY) on each is EINVAL (Linux's answer for a bound socket) in the
# image that holds them. Then eta-ppe is killed and started again: the
# listeners come back as the program bound them: IPv6 clients reach both,
# IPv4 clients at the PPE's IPv4 address find nothing at P1 or P2
# (ECONNREFUSED: neither came back dual-stack nor on [::]), and a connection
# accepted on the IPv6-only listener reads IPV6_V6ONLY 1, as its listener;
# the shim's log names each as bound ("listening again on the new PPE
# ([address]:P)", "([::]:P, IPv6 only)"). The first PPE lists another IPv6
# address of the lab's prefix before the one the listener is bound to, the
# restarted one only that one: a listener names its address, not its place
# in the PPE's list (before, it was refused EADDRNOTAVAIL after the restart).
# On a port shared with the kernel (ETA_TEST_SHARED=1) the same holds: the
# kernel placeholders hold the addresses and ports (issues 29 and 31), and
# the listeners are hybrids whose PPE halves come back.
#   ip6_handover_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")" && pwd)/ip6_bind.py
py=/usr/bin/python3

ppe_lab6
# An address of the same prefix, listed first by the first PPE only.
OTHER6=$("$py" -c "import ipaddress, sys; print(ipaddress.IPv6Address(sys.argv[1]) + 0x100)" "$H6")
sed "s|^address6 = \[\"$H6/|address6 = [\"$OTHER6/${ETA_LAB_PREFIX6:-64}\", \"$H6/|" "$work/ppe.toml" >"$work/first.toml"
grep -qF "address6 = [\"$OTHER6/" "$work/first.toml" || fail "no second IPv6 address in the first PPE's config: $(grep address6 "$work/ppe.toml")"
ppe_start "$work/first.toml"
ppe_ping6 "$H6" "of eta-ppe's start"

# serve NAME MODE N SPEC...: the tool's server-MODE under eta-run --require in
# the background (pid in NAME_pid), waited for until it is ready (or failed).
serve() {
    local name=$1 mode=$2 n=$3 out=$work/$1
    shift 3
    ETA_LOG=fallback,accel start_bg "$name" timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$TOOL" "server-$mode" "$name" "$n" "$@" >"$out" 2>"$out.err"
    local pid
    eval "pid=\$${name}_pid"
    wait_until 30 eval "grep -q '^ready' '$out' || ! kill -0 $pid"
    grep -q '^ready' "$out" || fail "$name did not listen: $(cat "$out" "$out.err")"
}
ask() { peer timeout 60 "$py" "$TOOL" client "$1" "$2"; }

declare -A p1 p2
for mode in exec pass; do
    p1[$mode]=$(free_port) p2[$mode]=$(free_port)
    note "server-$mode: [$H6]:${p1[$mode]} and [::]:${p2[$mode]} IPV6_V6ONLY=1, handed over by $mode"
    serve "$mode" "$mode" 3 "$H6,${p1[$mode]},-" "::,${p2[$mode]},1"
    grep -qE "accelerated \(\[$H6\]:${p1[$mode]}\)" "$work/$mode.err" ||
        fail "the bind to [$H6]:${p1[$mode]} is not the PPE's: $(cat "$work/$mode.err")"
    grep -qE "listening on \[::\]:${p2[$mode]} on the PPE and the kernel, IPv6 only" "$work/$mode.err" ||
        fail "the IPv6-only listener is not the PPE's: $(cat "$work/$mode.err")"
    for l in "[$H6]:${p1[$mode]}" "[::]:${p2[$mode]}"; do
        grep -qxF "fixed $l EINVAL" "$work/$mode" ||
            fail "setsockopt(IPV6_V6ONLY) on the listening $l after $mode: $(grep "^fixed" "$work/$mode")"
    done
done
grep -q "handed over at exec could not be adopted" "$work/exec.err" && fail "exec: $(cat "$work/exec.err")"

note "eta-ppe killed and started again"
ppe_kill9
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "after the restart"
for mode in exec pass; do
    a=${p1[$mode]} b=${p2[$mode]}
    # The shim's re-attach first: on a shared port the listeners' kernel
    # halves answer clients while it has not re-attached yet (its backoff;
    # seen beside a CPU hog), so an answer alone does not mean the PPE half
    # is back, and the checks below would not be the PPE's.
    wait_until 60 grep -qF "re-attach: the new PPE's network description differs from the previous one's: 1 IPv4 and 1 IPv6 addresses" "$work/$mode.err" ||
        fail "$mode: the shim did not say the new PPE lists other addresses: $(grep "re-attach" "$work/$mode.err")"
    for l in "[$H6]:$a" "[::]:$b, IPv6 only"; do # the shim's log says so too
        wait_until 60 grep -qF "listening again on the new PPE ($l)" "$work/$mode.err" ||
            fail "$mode: no line 'listening again on the new PPE ($l)': $(grep "listening again" "$work/$mode.err")"
    done
    # the first answer once it listens again (a refusal until then)
    wait_until 60 eval "ask $H6 $a >'$work/first' && ! grep -q '^error' '$work/first'" ||
        fail "$mode: no IPv6 client reaches [$H6]:$a after the restart: $(cat "$work/$mode" "$work/$mode.err")"
    [ "$(cat "$work/first")" = "$mode [$H6]:$a" ] ||
        fail "$mode: the IPv6 client of [$H6]:$a after the restart: '$(cat "$work/first")' (it came back elsewhere)"
    got=$(ask "$H6" "$b")
    [ "$got" = "$mode [::]:$b" ] || fail "$mode: the IPv6 client of [::]:$b after the restart: '$got'"
    got=$(ask "$H4" "$a")
    [ "$got" = "error ECONNREFUSED" ] ||
        fail "$mode: an IPv4 client at $H4:$a after the restart: '$got' (the listener on [$H6] came back elsewhere)"
    got=$(ask "$H4" "$b")
    [ "$got" = "error ECONNREFUSED" ] ||
        fail "$mode: an IPv4 client at $H4:$b after the restart: '$got' (the IPv6-only listener came back dual-stack)"
    [ "$(ask "$H6" "$b")" = "$mode [::]:$b" ] || fail "$mode: the second IPv6 client of [::]:$b"
    eval "pid=\$${mode}_pid"
    wait "$pid" || fail "$mode: the server exited $?: $(cat "$work/$mode.err")"
    [ "$(grep -c "^conn peer \[$ETA_LAB_PEER_IP6\]:[0-9]* local \[$H6\]:$b on \[::\]:$b$" "$work/$mode")" -eq 2 ] ||
        fail "$mode: the IPv6-only listener's connections: $(cat "$work/$mode")"
    # accepted-v6only follows each conn line: the [::] listener's say 1
    [ "$(grep -A1 "on \[::\]:$b$" "$work/$mode" | grep -c '^accepted-v6only 1$')" -eq 2 ] ||
        fail "$mode: IPV6_V6ONLY of the IPv6-only listener's connections: $(cat "$work/$mode")"
done
ppe_stop
echo "preload_ip6_handover: [$H6] and [::] IPV6_V6ONLY listeners through exec and SCM_RIGHTS, then a PPE restart: IPv6 only, where they were bound - held"
