#!/usr/bin/env bash
# Accelerated sockets passed to another process (SCM_RIGHTS; issue 12), with a
# real eta-ppe in the lab and kernel clients in the peer namespace:
#   - Node.js cluster under eta-run: the primary accepts every connection and
#     passes it to one of 4 workers (fork+exec'd, each its own process); 200
#     connections, 16 at a time, echoed byte-exact by the workers; the PPE
#     took them all (eta-stat), every worker served some (and with
#     ETA_TEST_ENGINES=2, every engine carried some);
#   - python: an accepted connection, then the listener itself, passed over a
#     UNIX datagram socket to an unrelated process (not a child of the
#     sender), which echoes the connection and accepts on the listener after
#     the sender has exited; the listener bound to the PPE's address, then to
#     INADDR_ANY (a hybrid listener: the receiver's accept blocks as the
#     program's listener does, not EAGAIN from the shim's non-blocking
#     kernel half);
#   - python: a connection passed to its own process over a socketpair, its
#     first descriptor closed before the receive: echoed on the received one;
#   - python: a UDP socket, bound to the PPE's address and then to
#     INADDR_ANY (a hybrid), passed to an unrelated process that echoes the
#     peer's datagrams through the PPE after the sender has exited.
#   pass_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
here=$(cd "$(dirname "$0")" && pwd)
# The real interpreter: a wrapper script would attach to the PPE first.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
NODE=$(command -v node || command -v nodejs || true)

lab_up
work=$(mktemp -d)
chmod 755 "$work"
on_exit "rm -rf $work"
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
start_bg ppe timeout 170 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"
H=$ETA_LAB_PPE_IP
passive_opens() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(sum(s['tcp_passive_opens'] for e in d['engines'] for s in e['stacks']))"
}
# The engine publishes its counters every 10 ms while it works and when it
# naps: a count may trail the last echo by a moment.
opens_reached() { [ "$(passive_opens)" -ge "$1" ]; }
. "$(dirname "$0")/engines_lib.sh"
bg() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" env ETA_LOG=${ETA_TEST_LOG:-fallback} timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"
}
no_warning() { ! warnings_in "$1" >/dev/null || { cat "$1"; fail "$2 warned"; }; }

if [ -z "$NODE" ]; then
    [ "${CI:-}" = true ] && fail "nodejs is not installed (tools/eta setup installs it)"
    note "nodejs is not installed: the cluster part is skipped"
else
    note "Node.js cluster (4 workers) under eta-run: the primary passes each connection to a worker"
    before=$(passive_opens)
    per_engine=$(engine_opens)
    p_cluster=$(free_port)   # the workers listen on 0.0.0.0: the kernel half binds in the host namespace
    bg cluster "$work/cluster.log" "$NODE" "$here/pass_cluster.js" "$p_cluster" 4 >"$work/cluster.out"
    wait_until 30 grep -q listening "$work/cluster.out" || { cat "$work/cluster.log" "$work/cluster.out"; fail "the cluster did not listen"; }
    peer timeout 90 "$PY" "$here/pass_peer.py" echo "$H" "$p_cluster" 200 65536 16 ||
        { tail -30 "$work/cluster.log"; fail "cluster: the echoes"; }
    peer timeout 60 "$PY" "$here/pass_peer.py" echo "$H" "$p_cluster" 4 $((4 << 20)) 4 ||
        { tail -30 "$work/cluster.log"; fail "cluster: 4 MiB echoes"; }
    [ "${ETA_TEST_ENGINES:-1}" -gt 1 ] && every_engine_took "$per_engine" "cluster"
    wait_until 20 opens_reached $((before + 204)) ||
        fail "cluster: the PPE took $(($(passive_opens) - before)) connections, not 204 (the kernel served them?)"
    kill -TERM "$cluster_pid"
    wait "$cluster_pid" || true
    conns=$(grep -c "^served by " "$work/cluster.out")
    [ "$conns" -eq 204 ] || fail "cluster: the workers took $conns connections, not 204"
    served=$(grep "^served by " "$work/cluster.out" | sort -u | wc -l)
    [ "$served" -eq 4 ] || { sort "$work/cluster.out" | uniq -c; fail "cluster: $served of 4 workers served connections"; }
    no_warning "$work/cluster.log" "the cluster"
fi

# pass_python BIND PORT: the python case with the sender's listener bound to
# BIND: the PPE's address, then INADDR_ANY (a hybrid listener: its kernel half
# listens too and is O_NONBLOCK for the shim's polling; the receiver must still
# see the program's blocking listener, not EAGAIN; on a shared port
# (ETA_TEST_SHARED=1) the PPE-address listener is hybrid as well).
pass_python() {
    local bind=$1 port=$2 before
    note "python: a connection and then the listener (bound to $bind) passed to an unrelated process"
    rm -f "$work/pass.sock" "$work/pass.sock.got"
    before=$(passive_opens)
    bg receiver "$work/recv.log" "$PY" "$here/pass_fds.py" recv "$work/pass.sock" >"$work/recv.out"
    wait_until 20 grep -q ready "$work/recv.out" || { cat "$work/recv.log"; fail "the receiver did not start"; }
    bg sender "$work/send.log" "$PY" "$here/pass_fds.py" send "$work/pass.sock" "$bind" "$port" >"$work/send.out"
    wait_until 20 grep -q listening "$work/send.out" || { cat "$work/send.log"; fail "the sender did not listen"; }
    peer timeout 60 "$PY" "$here/pass_peer.py" echo "$H" "$port" 1 300000 1 ||
        { cat "$work/send.log" "$work/recv.log"; fail "the passed connection"; }
    wait "$sender_pid" || { cat "$work/send.log"; fail "the sender failed"; }
    grep -q "passed both" "$work/send.out" || fail "the sender did not pass the listener"
    peer timeout 60 "$PY" "$here/pass_peer.py" echo "$H" "$port" 2 100000 1 ||
        { cat "$work/recv.log"; fail "connections on the passed listener bound to $bind (its sender has exited)"; }
    wait "$receiver_pid" || { cat "$work/recv.log" "$work/recv.out"; fail "the receiver failed"; }
    grep -q done "$work/recv.out" || fail "the receiver did not finish"
    wait_until 20 opens_reached $((before + 3)) || fail "python: the PPE took $(($(passive_opens) - before)) connections, not 3"
    no_warning "$work/send.log" "the sender"
    no_warning "$work/recv.log" "the receiver"
}
pass_python "$H" 7140
# Passed to itself, its first descriptor closed before the receive: Linux
# keeps an in-flight socket, and so does the PPE; the received descriptor
# is the same accelerated connection (before: "cannot be used here", an
# unconnected kernel socket, the peer reset).
note "python: a connection passed to its own process, closed there before the receive"
port=$(free_port)
bg selfpass "$work/self.log" "$PY" "$here/pass_fds.py" self "$H" "$port" >"$work/self.out"
wait_until 20 grep -q listening "$work/self.out" || { cat "$work/self.log"; fail "the self-passing process did not listen"; }
peer timeout 60 "$PY" "$here/pass_peer.py" echo "$H" "$port" 1 100000 1 ||
    { cat "$work/self.log"; fail "the connection passed to its own process"; }
wait "$selfpass_pid" || { cat "$work/self.log" "$work/self.out"; fail "the self-passing process failed"; }
grep -q done "$work/self.out" || fail "the self-passing process did not finish"
no_warning "$work/self.log" "the self-passing process"
pass_python 0.0.0.0 "$(free_port)"   # its kernel half binds in the host namespace

# A UDP socket passed to an unrelated process (issue 31): the receiver
# echoes the peer's datagrams through the PPE (the engine's udp_in counts
# them) after the sender has exited.
udp_in() {
    timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(sum(s['udp_in'] for e in d['engines'] for s in e['stacks']))"
}
udp_in_reached() { [ "$(udp_in)" -ge "$1" ]; }
pass_udp() {
    local bind=$1 port=$2
    note "python: a UDP socket (bound to $bind) passed to an unrelated process"
    rm -f "$work/pass.sock" "$work/pass.sock.got"
    bg receiver "$work/recv.log" "$PY" "$here/pass_fds.py" recv-udp "$work/pass.sock" >"$work/recv.out"
    wait_until 20 grep -q ready "$work/recv.out" || { cat "$work/recv.log"; fail "the receiver did not start"; }
    bg sender "$work/send.log" "$PY" "$here/pass_fds.py" send-udp "$work/pass.sock" "$bind" "$port" >"$work/send.out"
    wait "$sender_pid" || { cat "$work/send.log"; fail "the sender failed"; }
    grep -q passed "$work/send.out" || fail "the sender did not pass the UDP socket"
    local in0
    in0=$(udp_in)
    peer timeout 60 "$PY" "$here/udp_peer.py" echo "$H" "$port" ||
        { cat "$work/recv.log" "$work/recv.out"; fail "the passed UDP socket did not echo (bound to $bind)"; }
    peer timeout 10 "$PY" -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'END', ('$H', $port))"
    wait "$receiver_pid" || { cat "$work/recv.log" "$work/recv.out"; fail "the receiver failed"; }
    grep -q '^echoed' "$work/recv.out" || fail "the receiver did not finish"
    wait_until 20 udp_in_reached $((in0 + 33)) || fail "the PPE carried $(($(udp_in) - in0)) datagrams to the passed socket, not 33"
    no_warning "$work/send.log" "the sender"
    no_warning "$work/recv.log" "the receiver"
}
pass_udp "$H" "$(free_port)"
pass_udp 0.0.0.0 "$(free_port)"   # a hybrid: its kernel half binds in the host namespace
note "pass: all passed"
