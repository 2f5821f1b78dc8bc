#!/usr/bin/env bash
# One port space and local connections on a port shared with the kernel
# (issue 29, part two), in a lab made with `eta-lab up --shared`. On the host:
#  - an eta-run server bound to the PPE's address (not INADDR_ANY) is a hybrid
#    listener: the peer reaches it through MARS, the host through the kernel;
#  - an eta-run client to it (64 MiB each way byte-exact, 2,000 request/response
#    exchanges) connects inside the engine (both ends in MARS, counted in
#    eta-stat's local_conns, nothing through the kernel); an eta-run client to a
#    plain kernel server on the same address goes through the kernel (counted
#    `local`); a plain client reaches the eta-run server's kernel half; an
#    eta-run connect to a port nobody holds is refused (ECONNREFUSED, as Linux);
#  - EADDRINUSE both ways: a port a plain program holds cannot be bound under
#    eta-run, a port an eta-run program holds (bound explicitly, bound to port 0,
#    or the local port of an outgoing connection) cannot be bound by a plain one;
#  - a native DTI client's port lies outside the kernel's ip_local_port_range;
#  - 3,000 short eta-run connections to the peer from ports the kernel picks
#    (MARS's TIME-WAIT on a port the kernel hands out again is recycled);
#  - eta-stat shows the eta-run listener in MARS, a local connection's both ends
#    in MARS, and the kernel-bound clients' `local` sockets;
#  - IPv6 the same way (issues 29 and 31), on the PPE's IPv6 address: an
#    eta-run server bound there (started before the kernel's duplicate address
#    detection may have ended: IP_FREEBIND) is a hybrid listener, reached by the
#    peer through MARS, by a plain client through the kernel and by an eta-run
#    client inside the engine; an eta-run client reaches a plain kernel IPv6
#    server (counted `local`), one to nobody is refused; EADDRINUSE both ways;
#    an outgoing IPv6 connection's port is the kernel's pick, held there; the
#    kernel still answers ping -6 and its own IPv6 server's clients; while the
#    kernel checks the address for duplicates (DAD), an eta-run bind and
#    connect there work, a plain bind gets EADDRNOTAVAIL.
#   shared_local_test.sh ETA_PPE PRELOAD ETA_RUN ETA_STAT ETA_PERF
ETA_PPE=$1 PRELOAD=$2 ETA_RUN=$3 ETA_STAT=$4 ETA_PERF=$5
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$PRELOAD" libeta-preload.so
need_built "$ETA_STAT" eta-stat
need_built "$ETA_PERF" eta-perf
command -v socat >/dev/null || skip "socat is not installed (tools/eta setup installs it)"
HELPER=$(cd "$(dirname "$0")" && pwd)/shared_local.py

# --shared needs the kernel's tap beside the port: af_packet's (the vnet port
# cannot share its interface with the kernel), also under ETA_TEST_DRIVER.
lab_up --driver af_packet --shared
H=$ETA_LAB_PPE_IP P=$ETA_LAB_PEER_IP
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET
grep -qx 'self shared' "$ETA_LAB_SOCKET.net" ||
    fail "eta-ppe's $ETA_LAB_SOCKET.net does not say 'self shared' on a shared port: $(cat "$ETA_LAB_SOCKET.net")"
grep -qx 'self local' "$ETA_LAB_SOCKET.net" ||
    fail "eta-ppe's $ETA_LAB_SOCKET.net does not say 'self local' (local connections in the engine): $(cat "$ETA_LAB_SOCKET.net")"
# Local connections served in the engine, all engines (eta-stat's local_conns).
LOCAL_SUM="sum(s['local_conns'] for e in d['engines'] for s in e['stacks'])"
local_in_engine() { ppe_json "$LOCAL_SUM"; }
# local_now N: waits (counters are published by the engines) until local_conns is N.
# Every wait below is bounded at 120 s and ends at its event: beside a CPU
# hog (preload_loaded) a program's start and eta-stat's view took longer
# than the 10-30 s bounds these waits had.
local_now() { wait_until 120 ppe_true "$LOCAL_SUM == $1"; }

eta() { timeout 120 "$ETA_RUN" --require -- "$@"; }
helper() { python3 "$HELPER" "$@"; }

# The servers live until the test's end (killed at exit), bounded far above
# it: beside other tests at load ~20 the test reached the eta-perf server at
# 440 s, after a 300 s bound had ended it.
start_bg esrv timeout 900 "$ETA_RUN" --require -- python3 "$HELPER" serve "$H" 7201
# IPv6: the eta-run server binds the PPE's IPv6 address at once, while the
# kernel may still be checking it for duplicates (its placeholder then binds
# with IP_FREEBIND); the kernel's own server waits for the kernel's answer
# to ping -6 (DAD over), as any kernel program must.
[ -n "${ETA_LAB_PPE_IP6:-}" ] && [ -n "${ETA_LAB_PEER_IP6:-}" ] || fail "eta-lab up printed no IPv6 addresses"
H6=$ETA_LAB_PPE_IP6 P6=$ETA_LAB_PEER_IP6
ETA_LOG=accel,fallback start_bg esrv6 timeout 900 "$ETA_RUN" --require -- python3 "$HELPER" serve "$H6" 7202 \
    2>"$work/esrv6.err"
wait_until 60 peer ping -6 -n -c 1 -W 1 "$H6" || fail "ping -6 $H6 from the peer: no answer (the kernel answers it)"
start_bg ksrv6 timeout 900 python3 "$HELPER" serve "$H6" 7102
start_bg psrv6 timeout 900 ip netns exec "$ETA_LAB_NS" python3 "$HELPER" serve "$P6" 7402
start_bg ksrv timeout 900 python3 "$HELPER" serve "$H" 7101
start_bg psrv timeout 900 ip netns exec "$ETA_LAB_NS" python3 "$HELPER" serve "$P" 7401
start_bg pperf timeout 900 ip netns exec "$ETA_LAB_NS" "$ETA_PERF" server -t kernel -p 7701
wait_until 30 ppe_true "any(c['state'] == 'LISTEN' and c['local'] == '$H:7201' for c in d['connections'])" ||
    fail "the eta-run server on $H:7201 does not listen in MARS: $(ppe_stat | tail -5)"
wait_until 120 sh -c "ss -Hltn 'src $H:7201' | grep -c . >/dev/null" ||
    fail "the eta-run server's kernel half does not listen on $H:7201 (not a hybrid listener): $(ss -ltn)"
wait_until 120 sh -c "ss -Hltn 'src $H:7101' | grep -c . >/dev/null" || fail "the kernel server did not listen"
wait_until 120 peer sh -c "ss -Hltn 'sport = :7401' | grep -c . >/dev/null" || fail "the peer's server did not listen"

note "the peer reaches the eta-run server on $H:7201 through MARS"
opens0=$(ppe_json "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines'])")
out=$(peer timeout 120 python3 "$HELPER" stream "$H" 7201 8) || fail "the peer's stream to $H:7201 failed: $out"
# The engines publish their counters every 10 ms while they work and when
# they nap: the count may trail the connection by a moment.
wait_until 20 ppe_true "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines']) > $opens0" ||
    fail "the peer's connection to $H:7201 did not go through MARS (passive opens $opens0 -> $(ppe_json "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines'])"))"

note "an eta-run client to the eta-run server on $H:7201, inside the engine: 64 MiB each way, byte-exact"
l0=$(local_in_engine)
out=$(eta python3 "$HELPER" stream "$H" 7201 64 2>"$work/c1.err") ||
    { rc=$?; cat "$work/c1.err" >&2; fail "eta-run client -> eta-run server on $H:7201 (exit status $rc${out:+: $out})"; }
grep -q "goes through the kernel" "$work/c1.err" &&
    fail "the eta-run client's connection to an eta-run server went through the kernel: $(cat "$work/c1.err")"
grep -qi "warning" "$work/c1.err" && fail "a local connection is not worth a warning: $(cat "$work/c1.err")"
local_now $((l0 + 1)) || fail "eta-stat's local_conns went from $l0 to $(local_in_engine), not $((l0 + 1)), for one eta-run -> eta-run connection"
l1=$((l0 + 1))
note "... and 2,000 request/response exchanges"
out=$(eta python3 "$HELPER" rr "$H" 7201 2000 2>&1) || fail "rr between eta-run programs on $H:7201: $out"
local_now $((l1 + 1)) || fail "the eta-run rr connection was not served in the engine (local_conns $l1 -> $(local_in_engine))"

note "an eta-run client to a plain kernel server on $H:7101: through the kernel"
out=$(eta python3 "$HELPER" stream "$H" 7101 16 2>"$work/c2.err") ||
    { cat "$work/c2.err" >&2; fail "eta-run client -> kernel server on $H:7101: $out"; }
grep -q "goes through the kernel: no eta listener there" "$work/c2.err" ||
    fail "the eta-run client did not say once that its connection to a kernel server goes through the kernel: $(cat "$work/c2.err")"
grep -q "^eta\[[0-9]*\]: warning" "$work/c2.err" && fail "a local connection is not worth a warning: $(cat "$work/c2.err")"
note "an eta-run client to $H:7999, where nobody listens: ECONNREFUSED, blocking and non-blocking"
out=$(eta python3 -c "
import errno, select, socket, sys
s = socket.socket()
e = s.connect_ex(('$H', 7999))
if e != errno.ECONNREFUSED: sys.exit('blocking connect answered %s' % errno.errorcode.get(e, e))
s = socket.socket(); s.setblocking(False)
e = s.connect_ex(('$H', 7999))
if e == errno.EINPROGRESS:
    select.select([], [s], [], 30)
    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
sys.exit(0 if e == errno.ECONNREFUSED else 'non-blocking connect answered %s' % errno.errorcode.get(e, e))" 2>&1) ||
    fail "eta-run connect to $H:7999 (nobody listens): $out"
note "a plain client to the eta-run server on $H:7201"
out=$(helper stream "$H" 7201 64 2>&1) || fail "plain client -> eta-run server on $H:7201: $out"
out=$(helper rr "$H" 7201 2000 2>&1) || fail "plain rr client -> eta-run server on $H:7201: $out"
note "an eta-run client that bound the PPE's address first, to the eta-run server (inside the engine)"
l0=$(local_in_engine)
out=$(eta python3 -c "
import socket, sys
s = socket.socket(); s.bind(('$H', 0)); s.connect(('$H', 7201)); s.sendall(b'bound first'); s.shutdown(socket.SHUT_WR)
d = b''
while len(d) < 11:
    b = s.recv(64)
    if not b: break
    d += b
sys.exit(0 if d == b'bound first' else 'answered %r' % d)" 2>&1) || fail "bind($H:0) then connect($H:7201) under eta-run: $out"
local_now $((l0 + 1)) || fail "the bound-first eta-run client's connection was not served in the engine"

note "eta-stat: the eta-run server's kernel half took the plain clients' connections"
wait_until 120 ppe_true "any(p['kernel_accepted'] >= 2 and p['sockets'].get('accelerated', 0) >= 1 for p in d['programs'])" ||
    fail "no eta-run program shows connections taken by its kernel half: $(ppe_json "d['programs']")"

# hold_run DIR CMD...: runs CMD (a `bind` or `connect` of the helper) in the
# background; r is its result (DIR/bound) once it holds (or failed to take)
# the port. It lets go when DIR/done appears.
hold_run() {
    local dir=$1
    shift
    mkdir -p "$dir"
    on_exit "touch $dir/done"
    start_bg holder timeout 150 "$@" >"$dir/out" 2>&1
    wait_until 120 test -e "$dir/bound" || fail "$* did not say whether it holds its port: $(cat "$dir/out")"
    r=$(cat "$dir/bound")
}

note "EADDRINUSE: a plain program holds $H:7501, eta-run cannot bind it"
hold_run "$work/k7501" python3 "$HELPER" bind "$H" 7501 "$work/k7501"
[ "$r" = "ok 7501" ] || fail "the plain program could not bind $H:7501: $r"
out=$(eta python3 -c "
import errno, socket, sys
s = socket.socket()
try:
    s.bind(('$H', 7501))
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRINUSE else 'bind answered %s' % errno.errorcode.get(e.errno))
sys.exit('bind to a port a kernel program holds succeeded')" 2>&1) || fail "eta-run bind($H:7501): $out"
touch "$work/k7501/done"

# A port free on the host (the kernel's pick): the 0.0.0.0 bind below must be
# refused because of the eta-run holder alone, not because anything else on
# the machine (another test, another suite) holds that number.
any_port=$(free_port)
note "EADDRINUSE: an eta-run program holds $H:$any_port, a plain one cannot bind it (nor 0.0.0.0:$any_port)"
hold_run "$work/eany" "$ETA_RUN" --require -- python3 "$HELPER" bind "$H" $any_port "$work/eany"
[ "$r" = "ok $any_port" ] || fail "the eta-run program could not bind $H:$any_port: $r"
out=$(python3 -c "
import errno, socket, sys
for a in ('$H', '0.0.0.0'):
    s = socket.socket()
    try:
        s.bind((a, $any_port))
    except OSError as e:
        if e.errno != errno.EADDRINUSE: sys.exit('bind(%s) answered %s' % (a, errno.errorcode.get(e.errno)))
        continue
    sys.exit('a plain bind(%s:$any_port) succeeded while an eta-run program holds it' % a)" 2>&1) || fail "$out"
touch "$work/eany/done"

# plain_bind_refused PORT WHAT: a plain program's bind to $H:PORT must get
# EADDRINUSE (eta holds WHAT there in the kernel too).
plain_bind_refused() {
    local out
    out=$(python3 -c "
import errno, socket, sys
s = socket.socket()
try:
    s.bind(('$H', $1))
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRINUSE else 'answered %s' % errno.errorcode.get(e.errno))
sys.exit('a plain bind to $2 succeeded')" 2>&1) || fail "$out"
}

note "port 0: the port the kernel picked for an eta-run program is held for it"
hold_run "$work/e0" "$ETA_RUN" --require -- python3 "$HELPER" bind "$H" 0 "$work/e0"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run program could not bind $H:0: $r"
port=${BASH_REMATCH[1]}
[ "$port" -gt 0 ] || fail "bind($H:0) under eta-run got port 0"
wait_until 120 ppe_true "any(c['state'] == 'LISTEN' and c['local'] == '$H:$port' for c in d['connections'])" ||
    fail "MARS does not listen on the kernel's pick $H:$port"
plain_bind_refused "$port" "the port of an eta-run listener bound to port 0"
touch "$work/e0/done"

note "an outgoing eta-run connection's local port is the kernel's pick, and held there"
hold_run "$work/out" "$ETA_RUN" --require -- python3 "$HELPER" connect "$P" 7401 "$work/out"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run client could not connect to $P:7401: $r"
port=${BASH_REMATCH[1]}
wait_until 120 ppe_true "any(c['local'] == '$H:$port' and c['remote'] == '$P:7401' for c in d['connections'])" ||
    fail "the outgoing connection from port $port is not in MARS: $(ppe_stat | tail)"
read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range
[ "$port" -ge "$lo" ] && [ "$port" -le "$hi" ] || fail "local port $port is outside the kernel's ephemeral range $lo-$hi"
plain_bind_refused "$port" "the local port of an eta-run connection"
touch "$work/out/done"

note "3,000 short eta-run connections to the peer, each from a port the kernel picked"
# The client closes first: MARS keeps each in TIME-WAIT, which the kernel
# cannot see, so it soon hands out such a port again (before MARS recycled
# TIME-WAIT on an active open, the connect hung after a few dozen).
wait_until 120 peer sh -c "ss -Hltn 'sport = :7701' | grep -c . >/dev/null" || fail "the peer's eta-perf server did not listen"
out=$(timeout 120 "$ETA_RUN" --require -- "$ETA_PERF" client -t kernel -m crr -s 64 -c "$P" -p 7701 -n 3000 --duration 3600 2>&1) ||
    fail "3,000 connect/request/response/close from kernel-picked ports did not finish (exit status $?): $(tail -3 <<<"$out")"
grep -q "3000 transactions" <<<"$out" || fail "eta-perf crr did not do 3,000 transactions: $out"

note "a native DTI client's port (MARS's own pick) lies outside the kernel's ip_local_port_range"
# The crr client above has exited, but the PPE ends a program's connections on
# its own time: on a busy machine its last one can still be ESTABLISHED here,
# and would be taken for the native client's (from a kernel-picked port).
wait_until 120 ppe_true "not any(c['remote'] == '$P:7701' and c['state'] == 'ESTABLISHED' for c in d['connections'])" ||
    fail "a connection of the exited crr client to $P:7701 is still ESTABLISHED: $(ppe_stat | tail -5)"
start_bg native timeout 150 "$ETA_PERF" client -t dti -m rr -s 64 -c "$P" -p 7701 -n 100000000 --duration 3600
wait_until 120 ppe_true "any(c['remote'] == '$P:7701' and c['state'] == 'ESTABLISHED' for c in d['connections'])" ||
    fail "the native eta-perf client's connection to $P:7701 is not in MARS: $(ppe_stat | tail -5)"
port=$(ppe_json "[c['local'] for c in d['connections'] if c['remote'] == '$P:7701' and c['state'] == 'ESTABLISHED'][0].split(':')[1]")
kill "$native_pid"
[ "$port" -lt "$lo" ] || [ "$port" -gt "$hi" ] ||
    fail "the native client's local port $port is inside the kernel's ip_local_port_range $lo-$hi"
grep -q "MARS's own ephemeral ports are" "$work/ppe.log" || fail "eta-ppe did not say which ephemeral ports it uses"

note "eta-stat shows both ends of an open eta-run -> eta-run local connection in MARS, none in the kernel"
hold_run "$work/loc" "$ETA_RUN" --require -- python3 "$HELPER" connect "$H" 7201 "$work/loc"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run client could not connect to $H:7201: $r"
port=${BASH_REMATCH[1]}
wait_until 120 ppe_true "any(c['local'] == '$H:$port' and c['remote'] == '$H:7201' and c['state'] == 'ESTABLISHED' for c in d['connections']) and any(c['local'] == '$H:7201' and c['remote'] == '$H:$port' for c in d['connections'])" ||
    fail "eta-stat does not show both ends of the local connection from port $port in MARS: $(ppe_stat | tail)"
ss -Htn "src $H:$port dst $H:7201" | grep -c ESTAB >/dev/null && fail "the local connection from port $port is the kernel's too: $(ss -tn)"
plain_bind_refused "$port" "the local port of an eta-run connection inside the engine"
touch "$work/loc/done"

note "eta-stat counts an eta-run client's socket to the kernel server as 'local' while it is open"
hold_run "$work/kloc" "$ETA_RUN" --require -- python3 "$HELPER" connect "$H" 7101 "$work/kloc"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run client could not connect to $H:7101: $r"
port=${BASH_REMATCH[1]}
wait_until 120 ppe_true "any(p['sockets'].get('local', 0) >= 1 for p in d['programs'])" ||
    fail "eta-stat shows no program with a 'local' socket: $(ppe_json "d['programs']")"
ss -Htn "src $H:$port dst $H:7101" | grep -c ESTAB >/dev/null || fail "the connection from port $port to the kernel server is not the kernel's: $(ss -tn)"
# (MARS's refused attempt from the same port leaves the table once the shim
# closed it: eta-stat's snapshot may still show it for a moment.)
wait_until 120 ppe_true "not any(c['local'] == '$H:$port' and c.get('remote') == '$H:7101' for c in d['connections'])" ||
    fail "the connection to the kernel server is in MARS too: $(ppe_stat | grep -F "$H:$port")"
touch "$work/kloc/done"

note "IPv6: the eta-run server on [$H6]:7202 is a hybrid listener (MARS and the kernel)"
# (eta-stat names an IPv6 connection's addresses 0.0.0.0: its table is
# IPv4's; the port says which.)
wait_until 120 ppe_true "any(c['state'] == 'LISTEN' and c['local'].endswith(':7202') for c in d['connections'])" ||
    fail "the eta-run server on [$H6]:7202 does not listen in MARS: $(cat "$work/esrv6.err"; ppe_stat | tail -5)"
grep -qF "accelerated ([$H6]:7202)" "$work/esrv6.err" || fail "the bind to [$H6]:7202 is not the PPE's: $(cat "$work/esrv6.err")"
wait_until 120 sh -c "ss -Hltn 'src [$H6]:7202' | grep -c . >/dev/null" ||
    fail "the eta-run server's kernel half does not listen on [$H6]:7202: $(ss -ltn)"
wait_until 120 sh -c "ss -Hltn 'src [$H6]:7102' | grep -c . >/dev/null" || fail "the kernel IPv6 server did not listen"
wait_until 120 peer sh -c "ss -Hltn 'sport = :7402' | grep -c . >/dev/null" || fail "the peer's IPv6 server did not listen"
note "IPv6: the peer reaches the eta-run server through MARS, and the kernel's server through the kernel"
opens0=$(ppe_json "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines'])")
out=$(peer timeout 120 python3 "$HELPER" stream "$H6" 7202 8) || fail "the peer's stream to [$H6]:7202 failed: $out"
wait_until 20 ppe_true "sum(e['stacks'][0]['tcp_passive_opens'] for e in d['engines']) > $opens0" ||
    fail "the peer's connection to [$H6]:7202 did not go through MARS"
out=$(peer timeout 120 python3 "$HELPER" stream "$H6" 7102 8) || fail "the peer's stream to the kernel's [$H6]:7102 failed: $out"
note "IPv6: an eta-run client to the eta-run server, inside the engine"
l0=$(local_in_engine)
out=$(ETA_LOG=accel,fallback eta python3 "$HELPER" stream "$H6" 7202 16 2>"$work/c6.err") ||
    { cat "$work/c6.err" >&2; fail "eta-run client -> eta-run server on [$H6]:7202: $out"; }
grep -q "goes through the kernel" "$work/c6.err" && fail "the local IPv6 connection went through the kernel: $(cat "$work/c6.err")"
grep -q "reason ipv6" "$work/c6.err" && fail "the IPv6 client was left to the kernel: $(cat "$work/c6.err")"
local_now $((l0 + 1)) || fail "local_conns went from $l0 to $(local_in_engine) for one eta-run -> eta-run IPv6 connection"
note "IPv6: a plain client to the eta-run server (its kernel half)"
out=$(helper stream "$H6" 7202 16 2>&1) || fail "plain client -> eta-run server on [$H6]:7202: $out"
note "IPv6: an eta-run client to the plain kernel server on [$H6]:7102: through the kernel"
out=$(eta python3 "$HELPER" stream "$H6" 7102 16 2>"$work/c7.err") ||
    { cat "$work/c7.err" >&2; fail "eta-run client -> kernel server on [$H6]:7102: $out"; }
grep -q "goes through the kernel: no eta listener there" "$work/c7.err" ||
    fail "the eta-run IPv6 client to a kernel server did not say it goes through the kernel: $(cat "$work/c7.err")"
note "IPv6: an eta-run client to [$H6]:7999, where nobody listens: ECONNREFUSED"
out=$(eta python3 -c "
import errno, socket, sys
s = socket.socket(socket.AF_INET6)
e = s.connect_ex(('$H6', 7999))
sys.exit(0 if e == errno.ECONNREFUSED else 'connect answered %s' % errno.errorcode.get(e, e))" 2>&1) ||
    fail "eta-run connect to [$H6]:7999: $out"
note "IPv6 EADDRINUSE: a plain program holds [$H6]:7502, eta-run cannot bind it"
hold_run "$work/k6" python3 "$HELPER" bind "$H6" 7502 "$work/k6"
[ "$r" = "ok 7502" ] || fail "the plain program could not bind [$H6]:7502: $r"
out=$(eta python3 -c "
import errno, socket, sys
s = socket.socket(socket.AF_INET6)
try:
    s.bind(('$H6', 7502))
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRINUSE else 'bind answered %s' % errno.errorcode.get(e.errno))
sys.exit('bind to a port a kernel program holds succeeded')" 2>&1) || fail "eta-run bind([$H6]:7502): $out"
touch "$work/k6/done"
# plain_bind6_refused PORT WHAT: a plain bind to [$H6]:PORT and [::]:PORT gets EADDRINUSE.
plain_bind6_refused() {
    local out
    out=$(python3 -c "
import errno, socket, sys
for a in ('$H6', '::'):
    s = socket.socket(socket.AF_INET6)
    try:
        s.bind((a, $1))
    except OSError as e:
        if e.errno != errno.EADDRINUSE: sys.exit('bind(%s) answered %s' % (a, errno.errorcode.get(e.errno)))
        continue
    sys.exit('a plain bind([%s]:$1) succeeded while $2 holds it' % a)" 2>&1) || fail "$out"
}
note "IPv6 EADDRINUSE: an eta-run program holds [$H6]:P (bound to port 0), a plain one cannot bind it"
hold_run "$work/e6" "$ETA_RUN" --require -- python3 "$HELPER" bind "$H6" 0 "$work/e6"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run program could not bind [$H6]:0: $r"
port=${BASH_REMATCH[1]}
wait_until 120 ppe_true "any(c['state'] == 'LISTEN' and c['local'].endswith(':$port') for c in d['connections'])" ||
    fail "MARS does not listen on the kernel's pick [$H6]:$port"
plain_bind6_refused "$port" "an eta-run IPv6 listener bound to port 0"
touch "$work/e6/done"
note "IPv6: an outgoing eta-run connection's local port is the kernel's pick, and held there"
hold_run "$work/o6" "$ETA_RUN" --require -- python3 "$HELPER" connect "$P6" 7402 "$work/o6"
[[ "$r" =~ ^ok\ ([0-9]+)$ ]] || fail "the eta-run client could not connect to [$P6]:7402: $r"
port=${BASH_REMATCH[1]}
wait_until 120 ppe_true "any(c['local'].endswith(':$port') and c['remote'].endswith(':7402') for c in d['connections'])" ||
    fail "the outgoing IPv6 connection from port $port is not in MARS: $(ppe_stat | tail)"
[ "$port" -ge "$lo" ] && [ "$port" -le "$hi" ] || fail "local port $port is outside the kernel's ephemeral range $lo-$hi"
plain_bind6_refused "$port" "an eta-run IPv6 connection"
touch "$work/o6/done"
note "IPv6: the kernel still answers ping -6 to [$H6]"
peer ping -6 -n -c 2 -W 2 "$H6" >/dev/null || fail "ping -6 $H6 from the peer is no longer answered"

# The kernel's duplicate address detection, made to last (600 probes on the
# tap alone) by adding the address again: a plain bind there is refused
# while it is tentative, an eta-run bind and connect work (the placeholder's
# IP_FREEBIND retry).
note "IPv6: while the kernel checks [$H6] for duplicates, eta-run binds and connects there; a plain bind waits"
TAP=$ETA_LAB_SHARED_IFACE
[ -n "$TAP" ] || fail "eta-lab up printed no ETA_LAB_SHARED_IFACE"
dad0=$(sysctl -n "net.ipv6.conf.$TAP.dad_transmits")
on_exit "sysctl -qw net.ipv6.conf.$TAP.dad_transmits=$dad0 2>/dev/null || true"
sysctl -qw "net.ipv6.conf.$TAP.dad_transmits=600" || fail "cannot set dad_transmits on $TAP"
ip addr del "$H6/${ETA_LAB_PREFIX6:-64}" dev "$TAP" && ip addr add "$H6/${ETA_LAB_PREFIX6:-64}" dev "$TAP" ||
    fail "cannot add $H6 to $TAP again"
tentative() { ip -6 addr show dev "$TAP" | grep -F " $H6/" | grep -c tentative >/dev/null; }
tentative || fail "$H6 on $TAP is not tentative after being added again: $(ip -6 addr show dev "$TAP")"
out=$(python3 -c "
import errno, socket, sys
s = socket.socket(socket.AF_INET6)
try:
    s.bind(('$H6', 0))
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRNOTAVAIL else 'answered %s' % errno.errorcode.get(e.errno))
sys.exit('a plain bind to the tentative address worked: the check below proves nothing')" 2>&1) || fail "$out"
out=$(eta python3 -c "
import socket
s = socket.socket(socket.AF_INET6)
s.bind(('$H6', 0))
s.listen(1)" 2>&1) || fail "eta-run bind([$H6]:0) while the kernel checks the address: $out"
out=$(eta python3 "$HELPER" stream "$P6" 7402 1 2>&1) || fail "eta-run client to [$P6]:7402 while [$H6] is tentative: $out"
tentative || fail "$H6 stopped being tentative during the check: it proves nothing"
sysctl -qw "net.ipv6.conf.$TAP.dad_transmits=$dad0"
ip addr del "$H6/${ETA_LAB_PREFIX6:-64}" dev "$TAP" && ip addr add "$H6/${ETA_LAB_PREFIX6:-64}" dev "$TAP" ||
    fail "cannot add $H6 to $TAP again"
ppe_stop
echo "PASS"
