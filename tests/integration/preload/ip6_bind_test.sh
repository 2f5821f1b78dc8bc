#!/usr/bin/env bash
# IPv6 listeners as servers write them, through the engine (issue 31,
# session 46), all under eta-run --require with clients in the lab's peer:
# - a specific IPv6 address of the PPE (ETA_LAB_PPE_IP6, which only the
#   engine holds): python3 -m http.server --bind it serves a file to curl -6
#   (sha256 equal); a listener bound there names it (getsockname), takes
#   IPv6 clients (accept's names: the peer's and that address) and refuses
#   IPv4 ones at the PPE's IPv4 address (nothing listens there);
# - an IPv6 address that is not the PPE's (ETA_LAB_KERNEL_IP6) stays the
#   kernel's (counted ipv6) and works there;
# - [::] with IPV6_V6ONLY=1 (set before bind, read back 1) beside an IPv4
#   listener on the same port, in another program and in the same one: no
#   EADDRINUSE, IPv6 clients reach the IPv6 listener, IPv4 ones the IPv4
#   listener, both through the PPE (eta-stat: accepted, none from a kernel
#   half);
# - ::ffff:<PPE IPv4> (issue 35 item 6) is the PPE's IPv4 listener: an IPv4
#   client reaches it, named v4-mapped;
# - IPV6_V6ONLY once listening (on the address and on [::]) is EINVAL, as Linux
#   answers a bound socket, and a connection accepted on the IPv6-only
#   listener reads 1, its listener's (session 47);
# - an eta-run client on this host to the PPE's IPv6 address (curl -6 to the
#   http.server above): a local connection inside the engine (`self local6`,
#   issue 29), byte-exact, counted in eta-stat's local_conns;
# - a client bound to [::] (port 0) connects to the peer through the engine;
# - unbound IPv6 clients (IPV6_V6ONLY default, 0, 1 set before connect) read
#   back after connect what a kernel socket reads for the same calls (on a
#   shared port the connect's hold made the placeholder IPv6-only);
# - an IPv6 client whose first connect is refused connects again (bound to
#   the PPE's IPv6 address, and unbound: on a shared port its port is held;
#   and after a refused v4-mapped connect, to an IPv6 address); the reverse:
#   refused at an IPv6 address of the peer, then to ::ffff:<peer IPv4>
#   through the PPE, byte-exact, O_NONBLOCK, FD_CLOEXEC and options as set
#   (on a shared port a fresh placeholder in the IPv6-held one's place).
# - link-local (issue 31): the peer's fe80:: address on the lab's kernel
#   link with that link's index as scope is the kernel's (counted ipv6) and
#   works; scope 0 is Linux's EINVAL; on a shared port, fe80:: with the tap's
#   index is the engine's: an eta-run client to the peer's link-local address
#   (byte-exact both ways, getsockname/getpeername scoped to the tap, the
#   peer sees the PPE's link-local address), a [::] listener accepting the
#   peer's link-local client (accept's and the connection's names scoped,
#   the engine's passive opens count it).
# On a port shared with the kernel (ETA_TEST_SHARED=1; meson's
# preload_ip6_shared) all of it runs too: the kernel placeholder binds the
# PPE's IPv6 address first (one port space, issues 29 and 31), and the
# listeners there are hybrids.
#   ip6_bind_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
TOOL=$(cd "$(dirname "$0")" && pwd)/ip6_bind.py
py=/usr/bin/python3

ppe_lab6
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"

# serve NAME OUT N SPEC...: the tool's server under eta-run --require in the
# background (pid in NAME_pid), waited for until it is ready (or failed).
serve() {
    local name=$1 out=$2 n=$3
    shift 3
    ETA_LOG=fallback,accel start_bg "$name" timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$TOOL" server "$name" "$n" "$@" >"$out" 2>"$out.err"
    local pid
    eval "pid=\$${name}_pid"
    wait_until 30 eval "grep -q '^ready' '$out' || ! kill -0 $pid"
    grep -q '^ready' "$out" || fail "$name did not listen: $(cat "$out" "$out.err")"
}
ask() { peer timeout 60 "$py" "$TOOL" client "$1" "$2"; }
accel_programs() { ppe_json "sum(1 for p in d['programs'] if p['accepted'] >= 1 and p['kernel_accepted'] == 0)"; }

note "python3 -m http.server --bind $H6 under eta-run --require; curl -6 from the peer"
mkdir "$work/www"
head -c 1000000 /dev/urandom >"$work/www/blob"
hport=$(free_port)
ETA_LOG=fallback,accel start_bg http timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" -m http.server --bind "$H6" --directory "$work/www" "$hport" >"$work/http.out" 2>"$work/http.err"
wait_until 30 eval "grep -qE '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$H6\]:$hport\)' '$work/http.err' || ! kill -0 $http_pid"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$H6\]:$hport\)" "$work/http.err" ||
    fail "http.server's bind to [$H6]:$hport is not the PPE's: $(cat "$work/http.out" "$work/http.err")"
wait_until 30 peer curl -6 -sS -g -o /dev/null "http://[$H6]:$hport/" ||
    fail "curl -6 reaches no http.server at [$H6]:$hport: $(cat "$work/http.err")"
peer timeout 60 curl -6 -sS -g -o "$work/got" "http://[$H6]:$hport/blob" || fail "curl -6 of the file failed"
[ "$(sha256sum <"$work/got")" = "$(sha256sum <"$work/www/blob")" ] || fail "the file curl got over IPv6 differs"
wait_until 10 ppe_true "any(p['accepted'] >= 2 and p['kernel_accepted'] == 0 for p in d['programs'])" ||
    fail "eta-stat does not count http.server's connections through the PPE: $(ppe_stat --json | head -c 2000)"

note "curl -6 under eta-run on this host to the same server: a local connection inside the engine"
local_sum="sum(s['local_conns'] for e in d['engines'] for s in e['stacks'])"
l0=$(ppe_json "$local_sum")
ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    curl -6 -sS -g -o "$work/got-local" "http://[$H6]:$hport/blob" 2>"$work/curl-local.err" ||
    fail "curl -6 under eta-run to [$H6]:$hport on this host: $(cat "$work/curl-local.err")"
cmp -s "$work/got-local" "$work/www/blob" || fail "the file curl got over a local IPv6 connection differs"
wait_until 10 ppe_true "$local_sum >= $l0 + 1" ||
    fail "eta-stat's local_conns stayed $(ppe_json "$local_sum") (was $l0): the connection to [$H6] was not the engine's: $(cat "$work/curl-local.err")"
kill "$http_pid"
wait "$http_pid" 2>/dev/null || true

note "a listener on [$H6] only: its names, IPv6 clients, no IPv4 at $H4"
port=$(free_port)
serve spec "$work/spec" 1 "$H6,$port,-"
# (v6only=1: Linux's bind to an IPv6 address makes the socket IPv6-only)
grep -q "^listening \[$H6\]:$port v6only=1$" "$work/spec" || fail "getsockname and IPV6_V6ONLY of the bound listener: $(cat "$work/spec")"
grep -qxF "fixed [$H6]:$port EINVAL" "$work/spec" ||
    fail "setsockopt(IPV6_V6ONLY) on the listener bound to [$H6] is not Linux's EINVAL: $(grep ^fixed "$work/spec")"
got=$(ask "$H4" "$port")
[ "$got" = "error ECONNREFUSED" ] || fail "an IPv4 client of a listener on [$H6]: '$got' (nothing listens at $H4:$port)"
got=$(ask "$H6" "$port")
[ "$got" = "spec [$H6]:$port" ] || fail "the IPv6 client of [$H6]:$port: '$got'"
wait "$spec_pid" || fail "the listener on [$H6] exited $?: $(cat "$work/spec.err")"
grep -q "^conn peer \[$ETA_LAB_PEER_IP6\]:[0-9]* local \[$H6\]:$port on \[$H6\]:$port$" "$work/spec" ||
    fail "accept()/getsockname() of the connection: $(cat "$work/spec")"

note "a listener on [$H6] port 0: the engine's pick, named"
serve zero "$work/zero" 1 "$H6,0,-"
zport=$(sed -n "s/^listening \[$H6\]:\([0-9]*\) .*/\1/p" "$work/zero")
[ -n "$zport" ] && [ "$zport" -ne 0 ] || fail "getsockname after bind to [$H6]:0: $(cat "$work/zero")"
got=$(ask "$H6" "$zport")
[ "$got" = "zero [$H6]:$zport" ] || fail "the client of [$H6]:$zport (port 0's pick): '$got'"
wait "$zero_pid" || fail "the port-0 listener exited $?"

note "a client bound to [$H6] (port 0) connects to a kernel server in the peer through the engine"
pport=$(free_port)
start_bg psrv peer timeout 60 "$py" "$TOOL" server peer 1 "$ETA_LAB_PEER_IP6,$pport,-" >"$work/psrv" 2>&1
wait_until 20 eval "grep -q '^ready' '$work/psrv' || ! kill -0 $psrv_pid"
got=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" client "$ETA_LAB_PEER_IP6" "$pport" "$H6" 2>"$work/bcli.err")
[ "$got" = "peer [$ETA_LAB_PEER_IP6]:$pport" ] || fail "the client bound to [$H6]: '$got' $(cat "$work/bcli.err")"
wait "$psrv_pid" || fail "the peer's server exited $?"
grep -q "^conn peer \[$H6\]:[0-9]* local \[$ETA_LAB_PEER_IP6\]:$pport" "$work/psrv" ||
    fail "the bound client's connection, as the peer saw it: $(cat "$work/psrv")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$H6\]:[0-9]+\)" "$work/bcli.err" ||
    fail "the client's bind to [$H6] is not the PPE's: $(cat "$work/bcli.err")"

note "a client bound to [::] (port 0) connects to the peer through the engine"
# (Its PPE half binds [::] at the port the kernel gave: before, the IPv4
# wildcard, and the engine refused its CONNECT6 with EAFNOSUPPORT.)
pport=$(free_port)
start_bg asrv peer timeout 60 "$py" "$TOOL" server peer 1 "$ETA_LAB_PEER_IP6,$pport,-" >"$work/asrv" 2>&1
wait_until 20 eval "grep -q '^ready' '$work/asrv' || ! kill -0 $asrv_pid"
grep -q '^ready' "$work/asrv" || fail "the peer's server did not listen: $(cat "$work/asrv")"
got=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$py" "$TOOL" client "$ETA_LAB_PEER_IP6" "$pport" :: 2>"$work/acli.err")
[ "$got" = "peer [$ETA_LAB_PEER_IP6]:$pport" ] || fail "the client bound to [::]: '$got' $(cat "$work/acli.err")"
wait "$asrv_pid" || fail "the peer's server exited $?"
grep -q "^conn peer \[$H6\]:[0-9]* local \[$ETA_LAB_PEER_IP6\]:$pport" "$work/asrv" ||
    fail "the [::]-bound client's connection, as the peer saw it: $(cat "$work/asrv")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$ETA_LAB_PEER_IP6\]:$pport\)" "$work/acli.err" ||
    fail "the [::]-bound client's connect is not the PPE's: $(cat "$work/acli.err")"

note "unbound IPv6 clients: IPV6_V6ONLY after connect reads as on a kernel socket (default, 0, 1)"
# (On a shared port the connect's hold binds the placeholder to [$H6], which
# makes the kernel socket IPv6-only; Linux's autobind leaves the value the
# program had. The reference: the same calls on a kernel socket to [::1].)
pport=$(free_port)
start_bg vsrv peer timeout 60 "$py" "$TOOL" server peer 3 "$ETA_LAB_PEER_IP6,$pport,-" >"$work/vsrv" 2>&1
wait_until 20 eval "grep -q '^ready' '$work/vsrv' || ! kill -0 $vsrv_pid"
grep -q '^ready' "$work/vsrv" || fail "the peer's server did not listen: $(cat "$work/vsrv")"
out=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
ref = socket.socket(socket.AF_INET6)
ref.bind(('::1', 0))
ref.listen(8)
keep = []
for v in (None, 0, 1):
    got = []
    for dest in (ref.getsockname()[:2], ('$ETA_LAB_PEER_IP6', $pport)):
        s = socket.socket(socket.AF_INET6)
        if v is not None:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v)
        s.connect(dest)
        got.append(s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
        keep.append(s)
    print('v6only', v, 'kernel', got[0], 'eta', got[1], flush=True)" 2>"$work/vcli.err") ||
    fail "unbound IPv6 clients reading IPV6_V6ONLY: $out $(cat "$work/vcli.err")"
[ "$(grep -cE "accelerated \(\[$ETA_LAB_PEER_IP6\]:$pport\)" "$work/vcli.err")" = 3 ] ||
    fail "the clients' connects to the peer are not the PPE's: $(cat "$work/vcli.err")"
[ "$(grep -c "reason loopback" "$work/vcli.err")" = 3 ] || fail "the reference connects to [::1] are not the kernel's: $(cat "$work/vcli.err")"
for v in None 0 1; do
    line=$(grep "^v6only $v " <<<"$out") || fail "no answer for IPV6_V6ONLY $v: $out"
    read -r _ _ _ kv _ ev <<<"$line"
    [ "$kv" = "$ev" ] || fail "getsockopt(IPV6_V6ONLY) after an unbound connect ($v set before): eta $ev, the kernel $kv"
done
[ "$(grep -c "kernel 1 eta 1$" <<<"$out")" -ge 1 ] && [ "$(grep -c "kernel 0 eta 0$" <<<"$out")" -ge 1 ] ||
    fail "expected both values among the answers: $out"
wait "$vsrv_pid" || fail "the peer's server exited $?"

note "an IPv6 client whose first connect is refused connects again (bound to [$H6], and unbound)"
# (Linux lets a socket whose connect failed connect again; the shim gives it
# a new PPE half bound where the first was: its IPv6 address.)
rport=$(free_port) aport=$(free_port)
start_bg rsrv peer timeout 60 "$py" "$TOOL" server again 3 "$ETA_LAB_PEER_IP6,$aport,-" >"$work/rsrv" 2>&1
wait_until 20 eval "grep -q '^ready' '$work/rsrv' || ! kill -0 $rsrv_pid"
grep -q '^ready' "$work/rsrv" || fail "the peer's server did not listen: $(cat "$work/rsrv")"
out=$(timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import errno, socket, sys
for bind in ('$H6', None):
    s = socket.socket(socket.AF_INET6)
    if bind:
        s.bind((bind, 0))
    e = s.connect_ex(('$ETA_LAB_PEER_IP6', $rport))
    if e != errno.ECONNREFUSED:
        sys.exit('%s: the first connect answered %s' % (bind, errno.errorcode.get(e, e)))
    e = s.connect_ex(('$ETA_LAB_PEER_IP6', $aport))
    if e:
        sys.exit('%s: the second connect answered %s' % (bind, errno.errorcode.get(e, e)))
    print(s.makefile().readline().strip())
# a first connect to a v4-mapped address (IPv4 through the PPE), refused;
# then one to an IPv6 address from the same socket, as Linux lets it
s = socket.socket(socket.AF_INET6)
e = s.connect_ex(('::ffff:$ETA_LAB_PEER_IP', $rport))
if e != errno.ECONNREFUSED:
    sys.exit('v4-mapped: the first connect answered %s' % errno.errorcode.get(e, e))
e = s.connect_ex(('$ETA_LAB_PEER_IP6', $aport))
if e:
    sys.exit('v4-mapped, then IPv6: the second connect answered %s' % errno.errorcode.get(e, e))
print(s.makefile().readline().strip())
if '${ETA_TEST_SHARED:-}':  # one port space: the kernel holds its IPv6 port too
    k = socket.socket(socket.AF_INET6)
    k.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        k.bind(('::', s.getsockname()[1]))
        sys.exit('v4-mapped, then IPv6: [::]:%d IPv6-only bound beside it' % s.getsockname()[1])
    except OSError as x:
        if x.errno != errno.EADDRINUSE:
            raise" 2>&1) || fail "a second IPv6 connect after a refused one: $out"
[ "$(grep -c "^again \[$ETA_LAB_PEER_IP6\]:$aport$" <<<"$out")" = 3 ] || fail "the second connects' answers: $out"
wait "$rsrv_pid" || fail "the peer's server exited $?"

note "the reverse: refused at [$ETA_LAB_PEER_IP6], then the same socket to ::ffff:$ETA_LAB_PEER_IP through the PPE"
# (Linux tries it: its autobind left IPV6_V6ONLY 0. On a shared port the
# first connect's hold bound the placeholder to [$H6], IPv6-only: a fresh
# one takes its place on the descriptor, with its flags and options; before,
# ENETUNREACH.)
head -c 300000 /dev/urandom >"$work/rblob"
r6port=$(free_port) r4port=$(free_port)
start_bg rev4 peer timeout 60 "$py" -c "
import socket
l = socket.socket()
l.bind(('$ETA_LAB_PEER_IP', $r4port))
l.listen(2)
print('ready', flush=True)
for i in range(2):
    c, a = l.accept()
    print('from', a[0], flush=True)
    got = b''
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
    c.sendall(got[::-1])
    c.close()" >"$work/rev4" 2>&1
wait_until 20 eval "grep -q '^ready' '$work/rev4' || ! kill -0 $rev4_pid"
grep -q '^ready' "$work/rev4" || fail "the peer's IPv4 server did not listen: $(cat "$work/rev4")"
est="sum(s['tcp_established'] for e in d['engines'] for s in e['stacks'])"
e0=$(ppe_json "$est")
# Two sockets: O_NONBLOCK set before the first connect (the kernel socket's),
# and set by FIONBIO after the refused blocking one (the PPE's by then).
out=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import errno, fcntl, os, select, socket, sys
def name(e):
    return errno.errorcode.get(e, e)
def kflags(fd):  # the kernel file's flags, as /proc shows them
    for line in open('/proc/self/fdinfo/%d' % fd):
        if line.startswith('flags:'):
            return int(line.split()[1], 8)
data = open('$work/rblob', 'rb').read()
for mode in ('before', 'after'):
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 5)
    fd = s.fileno()
    d = os.dup(fd)  # a copy: the same socket, before and after
    if mode == 'before':
        s.setblocking(False)
        e = s.connect_ex(('$ETA_LAB_PEER_IP6', $r6port))
        if e != errno.EINPROGRESS:
            sys.exit('%s: the IPv6 connect answered %s' % (mode, name(e)))
        select.select([], [s], [], 30)
        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if e != errno.ECONNREFUSED:
            sys.exit('%s: the IPv6 connect ended with %s' % (mode, name(e)))
        e = s.connect_ex(('::ffff:$ETA_LAB_PEER_IP', $r4port))
        if e != errno.ECONNABORTED:  # Linux: the failure reported (SO_ERROR took it), then a new attempt
            sys.exit('%s: the next connect answered %s' % (mode, name(e)))
    else:
        e = s.connect_ex(('$ETA_LAB_PEER_IP6', $r6port))
        if e != errno.ECONNREFUSED:
            sys.exit('%s: the IPv6 connect answered %s' % (mode, name(e)))
        s.setblocking(False)
    e = s.connect_ex(('::ffff:$ETA_LAB_PEER_IP', $r4port))
    if e != errno.EINPROGRESS:
        sys.exit('%s: the v4-mapped connect answered %s' % (mode, name(e)))
    select.select([], [s], [], 30)
    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if e:
        sys.exit('%s: the v4-mapped connect ended with %s' % (mode, name(e)))
    print(mode, 'fd', s.fileno() == fd,
          'nonblock', bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK), bool(kflags(fd) & os.O_NONBLOCK),
          'cloexec', bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC), bool(kflags(fd) & os.O_CLOEXEC),
          'nodelay', s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
          'keepalive', s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
          'priority', s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY),
          'v6only', s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY),
          'dup', os.fstat(d).st_ino == os.fstat(fd).st_ino, flush=True)
    os.close(d)
    print(mode, 'names', s.getsockname()[0], s.getpeername()[0], s.getpeername()[1], flush=True)
    s.setblocking(True)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = b''
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    print(mode, 'bytes', got[::-1] == data, flush=True)
    s.close()" 2>"$work/rev.err") || fail "refused at IPv6, then v4-mapped: $out $(cat "$work/rev.err")"
wait "$rev4_pid" || fail "the peer's IPv4 server exited $?: $(cat "$work/rev4")"
for mode in before after; do
    grep -qx "$mode fd True nonblock True True cloexec True True nodelay 1 keepalive 1 priority 5 v6only 0 dup True" <<<"$out" ||
        fail "the socket's flags and options after the v4-mapped connect ($mode): $out"
    grep -qx "$mode names ::ffff:$H4 ::ffff:$ETA_LAB_PEER_IP $r4port" <<<"$out" ||
        fail "the v4-mapped connection's names ($mode): $out"
    grep -qx "$mode bytes True" <<<"$out" || fail "the bytes over the v4-mapped connection differ ($mode): $out"
done
[ "$(grep -cx "from $H4" "$work/rev4")" = 2 ] || fail "the peer saw the connections from another address: $(cat "$work/rev4")"
[ "$(grep -cE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$ETA_LAB_PEER_IP6\]:$r6port\)" "$work/rev.err")" = 2 ] ||
    fail "the IPv6 connects were not the PPE's: $(cat "$work/rev.err")"
wait_until 10 ppe_true "$est >= $e0 + 2" ||
    fail "the v4-mapped connections are not the engine's (tcp_established $(ppe_json "$est"), was $e0): $(cat "$work/rev.err")"

note "[$ETA_LAB_KERNEL_IP6], not the PPE's: the kernel's"
kport=$(free_port)
serve kern "$work/kern" 1 "$ETA_LAB_KERNEL_IP6,$kport,-"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: kernel socket, reason ipv6" "$work/kern.err" ||
    fail "a bind to the kernel's IPv6 address is not the kernel's, counted ipv6: $(cat "$work/kern.err")"
got=$(ask "$ETA_LAB_KERNEL_IP6" "$kport")
[ "$got" = "kern [$ETA_LAB_KERNEL_IP6]:$kport" ] || fail "the client of the kernel's [$ETA_LAB_KERNEL_IP6]: '$got'"
wait "$kern_pid" || fail "the kernel's listener exited $?"

note "[::] IPV6_V6ONLY=1 and 0.0.0.0 on one port, two programs"
before=$(accel_programs)
vport=$(free_port)
serve six "$work/six" 2 "::,$vport,1"
grep -q "^listening \[::\]:$vport v6only=1$" "$work/six" || fail "the IPv6-only listener: $(cat "$work/six")"
grep -qxF "fixed [::]:$vport EINVAL" "$work/six" || fail "setsockopt(IPV6_V6ONLY) on the listening [::]: $(grep ^fixed "$work/six")"
grep -qE "listening on \[::\]:$vport on the PPE and the kernel, IPv6 only" "$work/six.err" ||
    fail "the IPv6-only listener is not the PPE's: $(cat "$work/six.err")"
serve four "$work/four" 2 "0.0.0.0,$vport,-"
got=$(ask "$H6" "$vport")
[ "$got" = "six [::]:$vport" ] || fail "an IPv6 client: '$got' (the IPv6-only listener should answer)"
got=$(ask "$H4" "$vport")
[ "$got" = "four [0.0.0.0]:$vport" ] || fail "an IPv4 client: '$got' (the IPv4 listener should answer)"
wait_until 10 eval '[ "$(accel_programs)" -ge $((before + 2)) ]' ||
    fail "eta-stat does not count both programs' connections through the PPE: $(ppe_stat --json | head -c 2000)"
# (Their second connections end them: a program's counters go at its exit.)
[ "$(ask "$H6" "$vport")" = "six [::]:$vport" ] && [ "$(ask "$H4" "$vport")" = "four [0.0.0.0]:$vport" ] ||
    fail "the second IPv6 or IPv4 client of the two programs"
wait "$six_pid" || fail "the IPv6-only program exited $?"
wait "$four_pid" || fail "the IPv4 program exited $?"
grep -q "^conn peer \[$ETA_LAB_PEER_IP6\]:[0-9]* local \[$H6\]:$vport on \[::\]:$vport$" "$work/six" ||
    fail "the IPv6-only listener's connection: $(cat "$work/six")"
grep -A1 "^conn peer \[$ETA_LAB_PEER_IP6\]" "$work/six" | grep -c "^accepted-v6only 1$" >/dev/null ||
    fail "IPV6_V6ONLY of the IPv6-only listener's accepted connection is not its listener's: $(cat "$work/six")"

note "[::] IPV6_V6ONLY=1 and $H4 on one port, one program; ::ffff:$H4 (v4-mapped) in another"
bport=$(free_port)
serve both "$work/both" 2 "::,$bport,1" "$H4,$bport,-"
got6=$(ask "$H6" "$bport") got4=$(ask "$H4" "$bport")
[ "$got6" = "both [::]:$bport" ] && [ "$got4" = "both [$H4]:$bport" ] ||
    fail "one program's two listeners: IPv6 '$got6', IPv4 '$got4'"
wait "$both_pid" || fail "the program with both listeners exited $?"
mport=$(free_port)
serve mapped "$work/mapped" 1 "::ffff:$H4,$mport,-"
grep -q "^listening \[::ffff:$H4\]:$mport v6only=0$" "$work/mapped" || fail "the v4-mapped listener: $(cat "$work/mapped")"
grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \($H4:$mport\)" "$work/mapped.err" ||
    fail "the bind to ::ffff:$H4 is not the PPE's: $(cat "$work/mapped.err")"
got=$(ask "$H4" "$mport")
[ "$got" = "mapped [::ffff:$H4]:$mport" ] || fail "the v4-mapped listener's client: '$got'"
wait "$mapped_pid" || fail "the v4-mapped listener exited $?"
grep -q "^conn peer \[::ffff:$ETA_LAB_PEER_IP\]:[0-9]* local \[::ffff:$H4\]:$mport" "$work/mapped" ||
    fail "the v4-mapped connection's names: $(cat "$work/mapped")"
# Link-local (issue 31): the scope id names a kernel interface. The peer's
# fe80:: address on the lab's kernel link, scoped to this host's end of it,
# stays the kernel's (counted ipv6) and works there; scope 0 is Linux's EINVAL.
ll_of() { "$@" ip -6 -o addr show scope link | awk -v d="$LL_DEV" '$2 == d {sub(/\/.*/, "", $4); print $4; exit}'; }
dev_of() { "$@" ip -6 -o addr show to "$LL_TO" | awk '{print $2; exit}'; }
# peer_listen6 NAME PYTHON: a python3 server in the peer on [::]:$llport
# (its output in $work/NAME), PYTHON run on the listener l once it listens;
# returns once it says so (or has ended).
peer_listen6() {
    start_bg "$1" peer timeout 60 "$py" -c "import socket
l = socket.socket(socket.AF_INET6)
l.bind(('::', $llport))
l.listen(2)
print('ready', flush=True)
$2" >"$work/$1" 2>&1
    local pid
    pid=$(eval echo "\$${1}_pid")
    wait_until 20 eval "grep -q '^ready' '$work/$1' || ! kill -0 $pid"
}
LL_TO=$ETA_LAB_KERNEL_IP6 kdev=$(dev_of)
kidx=$(cat "/sys/class/net/$kdev/ifindex")
LL_TO=$ETA_LAB_KERNEL_PEER_IP6 kpdev=$(dev_of peer)
kpeer_ll=$(LL_DEV=$kpdev ll_of peer)
[ -n "$kdev" ] && [ -n "$kpeer_ll" ] || fail "the lab's kernel link: no interface ($kdev) or peer link-local address ($kpeer_ll)"
note "link-local to the peer's [$kpeer_ll%$kdev] (the kernel link): the kernel's; scope 0: EINVAL"
llport=$(free_port)
peer_listen6 llk "c, a = l.accept()
c.sendall(b'kernel-link')
c.close()"
out=$(ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import errno, socket
s = socket.socket(socket.AF_INET6)
try:
    s.connect(('$kpeer_ll', $llport, 0, 0))
    print('scope0 connected')
except OSError as e:
    print('scope0', errno.errorcode.get(e.errno, e.errno))
s = socket.socket(socket.AF_INET6)
s.connect(('$kpeer_ll', $llport, 0, $kidx))
print('kernel-link', s.recv(100).decode(), s.getsockname()[3], s.getpeername()[3])" 2>"$work/llk.err") ||
    fail "link-local connects on the kernel link: $out $(cat "$work/llk.err")"
grep -qx "scope0 EINVAL" <<<"$out" || fail "a link-local connect without a scope id is not Linux's EINVAL: $out"
grep -qx "kernel-link kernel-link $kidx $kidx" <<<"$out" || fail "the link-local connection on the kernel link: $out"
[ "$(grep -c "kernel socket, reason ipv6" "$work/llk.err")" = 2 ] ||
    fail "the link-local connects on the kernel link are not the kernel's, counted ipv6: $(cat "$work/llk.err")"
wait "$llk_pid" || fail "the peer's server exited $?: $(cat "$work/llk")"

if [ -n "${ETA_TEST_SHARED:-}" ]; then
    # The PPE's port has a kernel interface (its tap): fe80:: with its index
    # is the engine's, both ways (connect, accept), named with that scope.
    LL_TO=$H6 tap=$(dev_of)
    tidx=$(cat "/sys/class/net/$tap/ifindex")
    ppe_ll=$(LL_DEV=$tap ll_of)
    LL_TO=$ETA_LAB_PEER_IP6 pdev=$(dev_of peer)
    peer_ll=$(LL_DEV=$pdev ll_of peer)
    [ -n "$ppe_ll" ] && [ -n "$peer_ll" ] || fail "no link-local address on $tap ($ppe_ll) or the peer's $pdev ($peer_ll)"
    ppe_ping6 "$ppe_ll%$pdev" "(the PPE's link-local address)"
    note "an eta-run client to the peer's [$peer_ll%$tap] (index $tidx): through the engine, byte-exact"
    head -c 300000 /dev/urandom >"$work/llblob"
    llport=$(free_port)
    peer_listen6 lls "c, a = l.accept()
print('from', a[0], flush=True)
got = b''
while True:
    b = c.recv(65536)
    if not b:
        break
    got += b
c.sendall(got[::-1])
c.close()"
    ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket, sys
data = open('$work/llblob', 'rb').read()
s = socket.socket(socket.AF_INET6)
s.connect(('$peer_ll', $llport, 0, $tidx))
print('names', s.getsockname()[0], s.getsockname()[3], s.getpeername()[0], s.getpeername()[1], s.getpeername()[3],
      file=sys.stderr)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
open('$work/llgot', 'wb').write(got[::-1])" 2>"$work/llc.err" || fail "the link-local client: $(cat "$work/llc.err")"
    wait "$lls_pid" || fail "the peer's server exited $?: $(cat "$work/lls")"
    cmp -s "$work/llgot" "$work/llblob" || fail "the bytes over the link-local connection differ"
    grep -qE "^eta\[[0-9]+\]: fd [0-9]+: accelerated \(\[$peer_ll\]:$llport\)" "$work/llc.err" ||
        fail "the link-local connect is not the engine's: $(cat "$work/llc.err")"
    grep -qx "names $ppe_ll $tidx $peer_ll $llport $tidx" "$work/llc.err" ||
        fail "getsockname/getpeername of the link-local connection (want $ppe_ll and $peer_ll, scope $tidx): $(cat "$work/llc.err")"
    grep -qx "from $ppe_ll" "$work/lls" || fail "the peer saw the connection from another address: $(cat "$work/lls")"

    note "a link-local connection through exec and SCM_RIGHTS: still the engine's, names scoped $tidx"
    llport=$(free_port)
    peer_listen6 llx "for i in range(2):
    c, a = l.accept()
    c.sendall(c.recv(100)[::-1])
    c.close()"
    ETA_LOG=fallback,accel timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import os, socket, sys
def names(s):
    return '%s %d %s %d' % (s.getsockname()[0], s.getsockname()[3], s.getpeername()[0], s.getpeername()[3])
if len(sys.argv) > 1:  # the new image: the connection it was handed at exec
    s = socket.socket(fileno=int(sys.argv[1]))
    s.sendall(b'exec')
    print('exec', s.recv(100).decode(), names(s), flush=True)
    a, b = socket.socketpair(socket.AF_UNIX)
    pid = os.fork()
    if pid == 0:  # a process of its own receives the next one (SCM_RIGHTS)
        _, fds, _, _ = socket.recv_fds(b, 1, 1)
        u = socket.socket(fileno=fds[0])
        u.sendall(b'passed')
        print('passed', u.recv(100).decode(), names(u), flush=True)
        os._exit(0)
    t = socket.socket(socket.AF_INET6)
    t.connect(('$peer_ll', $llport, 0, $tidx))
    socket.send_fds(a, [b'x'], [t.fileno()])
    t.close()
    sys.exit(os.waitpid(pid, 0)[1])
s = socket.socket(socket.AF_INET6)
s.connect(('$peer_ll', $llport, 0, $tidx))
s.set_inheritable(True)
os.execv(sys.executable, [sys.executable, '-c', open('/proc/self/cmdline').read().split(chr(0))[2], str(s.fileno())])
" >"$work/llx.out" 2>"$work/llx.err" || fail "the link-local connection through exec (exit $?): $(cat "$work/llx.out" "$work/llx.err")"
    wait "$llx_pid" || fail "the peer's server exited $?: $(cat "$work/llx")"
    grep -qx "exec cexe $ppe_ll $tidx $peer_ll $tidx" "$work/llx.out" ||
        fail "the link-local connection after exec: $(cat "$work/llx.out" "$work/llx.err")"
    grep -qx "passed dessap $ppe_ll $tidx $peer_ll $tidx" "$work/llx.out" ||
        fail "the link-local connection passed by SCM_RIGHTS: $(cat "$work/llx.out" "$work/llx.err")"
    [ "$(grep -cE "accelerated \(\[$peer_ll\]:$llport\)" "$work/llx.err")" = 2 ] && ! grep -c "kernel socket" "$work/llx.err" >/dev/null ||
        fail "the link-local connections through exec and SCM_RIGHTS are not the engine's: $(cat "$work/llx.err")"
    grep -c "could not be adopted" "$work/llx.err" >/dev/null && fail "exec: $(cat "$work/llx.err")"

    note "a [::] listener under eta-run accepts the peer's link-local client: names scoped $tidx"
    opens="sum(s['tcp_passive_opens'] for e in d['engines'] for s in e['stacks'])"
    l0=$(ppe_json "$opens")
    llport=$(free_port)
    ETA_LOG=fallback,accel start_bg lla timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" -c "
import socket
l = socket.socket(socket.AF_INET6)
l.bind(('::', $llport))
l.listen(2)
print('ready', flush=True)
c, a = l.accept()
print('accepted', a[0], a[3], c.getpeername()[0], c.getpeername()[3], c.getsockname()[0], c.getsockname()[3], flush=True)
c.sendall(c.recv(100)[::-1])
c.close()" >"$work/lla" 2>"$work/lla.err"
    wait_until 30 eval "grep -q '^ready' '$work/lla' || ! kill -0 $lla_pid"
    got=$(peer timeout 30 "$py" -c "
import socket
s = socket.create_connection(('$ppe_ll%$pdev', $llport))
s.sendall(b'link-local')
print(s.recv(100).decode())") || fail "the peer's link-local client: $got $(cat "$work/lla.err")"
    [ "$got" = "lacol-knil" ] || fail "the peer's link-local client got '$got'"
    wait "$lla_pid" || fail "the [::] listener exited $?: $(cat "$work/lla.err")"
    grep -qx "accepted $peer_ll $tidx $peer_ll $tidx $ppe_ll $tidx" "$work/lla" ||
        fail "accept()'s and the connection's names (want $peer_ll and $ppe_ll, scope $tidx): $(cat "$work/lla")"
    wait_until 10 ppe_true "$opens >= $l0 + 1" ||
        fail "the engine did not take the link-local connection (tcp_passive_opens $(ppe_json "$opens"), was $l0)"
fi
ppe_stop
echo "preload_ip6_bind: [$H6] (http.server, curl -6), [::] IPV6_V6ONLY beside IPv4 (two programs, one), ::ffff:$H4 through the PPE; [$ETA_LAB_KERNEL_IP6] the kernel's - held"
