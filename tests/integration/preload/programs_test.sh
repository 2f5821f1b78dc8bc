#!/usr/bin/env bash
# Unmodified programs through the PPE under eta-run, against kernel peers in
# the lab's peer namespace; data checked byte for byte where it is data.
#   programs_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT [ONLY...]
# ONLY: run just the named cases (socat curl python posted iperf3 sockperf redis nginx
# memcached privileged dualstack ppe_death; ppe_death kills the PPE, so it must come last).
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
shift 4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
want() { [ $# -eq 0 ] || [ ${#ONLY[@]} -eq 0 ] || printf '%s\n' "${ONLY[@]}" | grep -cx "$1" >/dev/null; }
ONLY=("$@")

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
chmod 755 "$work"   # nginx's workers run as nobody and serve from here
mkdir -p "$(dirname "$ETA_LAB_SOCKET")"
on_exit "rm -rf /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
# Waits for a program to start or say something are bounded at 120 s: on a
# busy machine (load ~23, another test beside this one) a Python program
# under eta-run took 20 s to start; a wait ends as soon as its event comes.
# Ready means eta-ppe said so (--ready-fd), not that its socket file exists.
start_bg ppe timeout 880 "$ETA_PPE" --config "$ETA_LAB_CONFIG" --foreground --ready-fd 3 3>"$work/ready"
wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"
# The shim learns the PPE's network from <socket>.net, published before READY.
[ -f "$ETA_LAB_SOCKET.net" ] || fail "eta-ppe is ready but published no $ETA_LAB_SOCKET.net"

# What eta-stat (--json, as d) says; opens ACTIVE|PASSIVE sums the PPE's TCP opens.
stat_py() { timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
opens() { stat_py "sum(s['tcp_$1_opens'] for e in d['engines'] for s in e['stacks'])"; }
stack_rx_bytes() { stat_py "sum(s['rx_bytes'] for e in d['engines'] for s in e['stacks'])"; }
# at_least WHAT GOT WANT: GOT >= WANT, both numbers.
at_least() { [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || fail "$1: $2, expected at least $3"; }
# opens_grew ACTIVE|PASSIVE BEFORE N: the PPE's opens grew by N or more since
# BEFORE; for wait_until (the engines publish their counters every 10 ms while
# they work and when they nap: a count may trail the last connection).
opens_grew() { [ $(($(opens "$1") - $2)) -ge "$3" ]; }
# iperf3_moved LABEL JSON-FILE: the receiver got data, no more than was sent.
iperf3_moved() {
    python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['end']; r=e['sum_received']['bytes']; s=e['sum_sent']['bytes']; print('received', r, 'of', s, 'bytes sent'); sys.exit(0 if 0 < r <= s else 1)" \
        "$2" || fail "iperf3 $1: no data moved, or more received than sent"
}
P=$ETA_LAB_PEER_IP        # the peer, reached through the PPE
H=$ETA_LAB_PPE_IP         # this host as the peer sees it through the PPE
run() { timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" --log fallback -- "$@"; }
# Every socket that reached the PPE is logged "accelerated" with ETA_LOG=accel.
runlog() { local log=$1; shift; ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"; }
# The same in the background: start_bg's PID is the program's timeout itself
# (not a subshell), so the cleanup's SIGTERM reaches the program.
bglog() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" env ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"
}
# The shim's own line for a socket that reached the PPE (preload/src/config.c, eta_count);
# the bare word would also match its warnings ("... can be accelerated").
accelerated() { grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$1" || { cat "$1" >&2; fail "$2: nothing went through the PPE"; }; }

head -c $((64 << 20)) /dev/urandom > "$work/blob"
sum=$(sha256sum < "$work/blob" | cut -d' ' -f1)

if want socat; then
    p_socat=$(free_port)
    note "socat: eta client -> kernel server in the peer"
    start_bg sink ip netns exec "$ETA_LAB_NS" timeout 60 socat -u "TCP-LISTEN:7001,bind=$P,reuseaddr" "OPEN:$work/got1,creat,trunc"
    wait_until 10 peer bash -c "ss -ltn | grep -c ':7001' >/dev/null" || fail "peer socat did not listen"
    rc=0
    runlog "$work/l1" socat -d -d -u "OPEN:$work/blob" "TCP:$P:7001" || rc=$?
    [ "$rc" -eq 0 ] || fail "socat client under eta-run failed (exit $rc; 124: its 120 s bound): $(tail -20 "$work/l1");
the receiver got $(stat -c %s "$work/got1" 2>/dev/null || echo none) of $((64 << 20)) bytes; the PPE's connections: $(stat_py "[(c['state'], c['bytes_in'], c['bytes_out'], c.get('retransmits')) for c in d.get('connections', [])]" 2>&1);
the engines' commands refused unanswered, send ring grows and grows refused: $(stat_py "[(e['rejected_commands'], e['tx_ring_grows'], e['tx_grow_refusals']) for e in d['engines']]" 2>&1)"
    wait "$sink_pid" || fail "peer socat failed"
    accelerated "$work/l1" "socat client"
    [ "$(sha256sum < "$work/got1" | cut -d' ' -f1)" = "$sum" ] || fail "socat: bytes differ (eta -> kernel)"
    note "socat: kernel client in the peer -> eta server"
    bglog src "$work/l2" socat -u "TCP-LISTEN:$p_socat,reuseaddr" "OPEN:$work/got2,creat,trunc"
    wait_until 120 grep -q "listening on 0.0.0.0:$p_socat" "$work/l2" || { cat "$work/l2"; fail "socat server under eta-run did not listen"; }
    peer timeout 60 socat -u "OPEN:$work/blob" "TCP:$H:$p_socat" || fail "peer socat client failed"
    wait "$src_pid" || fail "socat server under eta-run failed"
    [ "$(sha256sum < "$work/got2" | cut -d' ' -f1)" = "$sum" ] || fail "socat: bytes differ (kernel -> eta)"
fi

if want curl; then
    note "curl and wget download from a kernel web server in the peer"
    start_bg web ip netns exec "$ETA_LAB_NS" timeout 120 python3 -m http.server 8080 --bind "$P" --directory "$work"
    wait_until 120 peer bash -c "ss -ltn | grep -c ':8080' >/dev/null" || fail "peer web server did not listen"
    runlog "$work/l3" curl -sS -o "$work/curl.out" "http://$P:8080/blob" || fail "curl failed"
    accelerated "$work/l3" curl
    [ "$(sha256sum < "$work/curl.out" | cut -d' ' -f1)" = "$sum" ] || fail "curl: checksum differs"
    runlog "$work/l4" wget -q -O "$work/wget.out" "http://$P:8080/blob" || fail "wget failed"
    accelerated "$work/l4" wget
    [ "$(sha256sum < "$work/wget.out" | cut -d' ' -f1)" = "$sum" ] || fail "wget: checksum differs"
fi

if want python; then
    p_web=$(free_port)
    note "python3 -m http.server under eta-run, a Python socket client in the peer"
    # The interpreter itself, not a wrapper script (pyenv's shim would run
    # several programs under the shim before python starts).
    py=$(python3 -c 'import sys; print(sys.executable)')
    bglog pyweb "$work/l5" "$py" -m http.server $p_web --directory "$work"
    wait_until 120 grep -q "0.0.0.0:$p_web" "$work/l5" || { cat "$work/l5"; fail "http.server did not listen"; }
    got=$(peer timeout 60 python3 -c "
import socket, hashlib, sys
s = socket.create_connection(('$H', $p_web))
s.sendall(b'GET /blob HTTP/1.0\r\nHost: x\r\n\r\n')
data = bytearray()
while True:
    b = s.recv(1 << 16)
    if not b: break
    data += b
print(hashlib.sha256(data.split(b'\r\n\r\n', 1)[1]).hexdigest())") || fail "python client failed"
    [ "$got" = "$sum" ] || fail "python: checksum differs"
fi

if want posted; then
    note "posted receive: a Python reader under eta-run, 1 MiB blocking reads, the engine writes into its buffer"
    # The peer's kernel socat sends the blob; the reader (recv_into, recv and
    # recv(MSG_WAITALL) in turn) reports bytes, CRC-32 and SHA-256.
    start_bg blobsrc ip netns exec "$ETA_LAB_NS" timeout 60 socat -u "OPEN:$work/blob" "TCP-LISTEN:7003,bind=$P,reuseaddr"
    wait_until 10 peer bash -c "ss -ltn | grep -c ':7003' >/dev/null" || fail "peer socat did not listen"
    engine_posts() { stat_py "sum(e['$1'] for e in d['engines'])"; }
    posts0=$(engine_posts posts) pbytes0=$(engine_posts posted_bytes)
    py=$(python3 -c 'import sys; print(sys.executable)')
    got=$(runlog "$work/l9" "$py" -c "
import hashlib, socket, sys, zlib
s = socket.create_connection(('$P', 7003))  # blocking: recv() blocks in the shim
buf = bytearray(1 << 20)
mv = memoryview(buf)
crc, h, total, i = 0, hashlib.sha256(), 0, 0
while True:
    if i % 3 == 0:
        n = s.recv_into(mv, 1 << 20)
    else:
        b = s.recv(1 << 20, socket.MSG_WAITALL if i % 3 == 2 else 0)
        n = len(b)
        mv[:n] = b
    if n == 0:
        break
    crc = zlib.crc32(mv[:n], crc)
    h.update(mv[:n])
    total += n
    i += 1
print(total, format(crc, '08x'), h.hexdigest())") || { cat "$work/l9"; fail "python reader under eta-run failed"; }
    wait "$blobsrc_pid" || fail "peer socat failed"
    accelerated "$work/l9" "python reader"
    want_crc=$(python3 -c "import zlib,sys; print(format(zlib.crc32(open(sys.argv[1],'rb').read()), '08x'))" "$work/blob")
    [ "$got" = "$((64 << 20)) $want_crc $sum" ] || fail "posted receive: got '$got', want '$((64 << 20)) $want_crc $sum'"
    # The engine wrote part of them straight into the reader's buffer
    # (eta-stat's counters are published every 250 ms).
    posted_some() { [ $(($(engine_posts posts) - posts0)) -ge 1 ] && [ $(($(engine_posts posted_bytes) - pbytes0)) -ge $((1 << 20)) ]; }
    wait_until 10 posted_some ||
        fail "posted receive: the engine made $(($(engine_posts posts) - posts0)) posts, wrote $(($(engine_posts posted_bytes) - pbytes0)) bytes"
    note "posted receive: $(($(engine_posts posts) - posts0)) posts, $(($(engine_posts posted_bytes) - pbytes0)) of $((64 << 20)) bytes written by the engine"
fi

if want iperf3; then
    p_iperf=$(free_port)
    note "iperf3: eta client -> peer server, both directions, -P 4"
    start_bg ips ip netns exec "$ETA_LAB_NS" timeout 200 iperf3 -s -B "$P" -p 5201
    wait_until 10 peer bash -c "ss -ltn | grep -c ':5201' >/dev/null" || fail "peer iperf3 did not listen"
    for args in "" "-R" "-P 4"; do
        before=$(opens active)
        # shellcheck disable=SC2086
        run iperf3 -c "$P" -p 5201 -n 32M $args --json > "$work/ip.json" || fail "iperf3 client $args failed"
        iperf3_moved "client $args" "$work/ip.json"
        # The control connection and each stream went through the PPE.
        n_conns=$((2 + $([ "$args" = "-P 4" ] && echo 3 || echo 0)))
        wait_until 20 opens_grew active "$before" "$n_conns" || true
        at_least "iperf3 client $args: connections the PPE opened" $(($(opens active) - before)) "$n_conns"
    done
    note "iperf3: eta server, peer client"
    # -4: the IPv4 listener this case has always measured (on [::] it would be dual-stack, see README).
    bglog ipe "$work/l6" iperf3 -4 -s -p $p_iperf
    wait_until 120 grep -q "0.0.0.0:$p_iperf" "$work/l6" || { cat "$work/l6"; fail "iperf3 server under eta-run did not listen"; }
    for args in "" "-R" "-P 4"; do
        before=$(opens passive)
        # shellcheck disable=SC2086
        peer timeout 60 iperf3 -c "$H" -p $p_iperf -n 32M $args --json > "$work/ip.json" || fail "peer iperf3 client $args failed"
        iperf3_moved "server, peer client $args" "$work/ip.json"
        n_conns=$((2 + $([ "$args" = "-P 4" ] && echo 3 || echo 0)))
        wait_until 20 opens_grew passive "$before" "$n_conns" || true
        at_least "iperf3 server $args: connections the PPE accepted" $(($(opens passive) - before)) "$n_conns"
    done
fi

if want sockperf; then
    p_sp=$(free_port)
    note "sockperf server under eta-run: ping-pong and throughput from the peer (TCP)"
    bglog sp "$work/l7" sockperf server --tcp -p $p_sp
    wait_until 120 grep -q "0.0.0.0:$p_sp" "$work/l7" || { cat "$work/l7"; fail "sockperf server did not listen"; }
    before=$(opens passive)
    # sockperf_pp LABEL OUT ARGS...: the peer's ping-pong; every message of
    # the measured run answered, none dropped or out of order (recvd: the
    # answers).
    sockperf_pp() {
        local label=$1 out=$2 counts sent
        shift 2
        peer timeout 60 sockperf ping-pong "$@" -i "$H" -t 2 -m 64 > "$out" || fail "$label failed"
        grep -q "percentile 50.000" "$out" || fail "$label reported no latency"
        counts=$(sed -n 's/.*\[Valid Duration\].*SentMessages=\([0-9]*\); ReceivedMessages=\([0-9]*\).*/\1 \2/p' "$out")
        read -r sent recvd <<<"$counts"
        at_least "$label messages answered" "${recvd:-none}" 1
        [ "$recvd" -eq "$sent" ] || fail "$label: $recvd answers to $sent messages"
        grep -q "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0" "$out" ||
            { cat "$out"; fail "$label saw dropped, duplicated or reordered messages"; }
    }
    sockperf_pp "sockperf ping-pong" "$work/sp.out" --tcp -p $p_sp
    wait_until 20 opens_grew passive "$before" 1 || true
    at_least "sockperf ping-pong: connections the PPE accepted" $(($(opens passive) - before)) 1
    in0=$(stack_rx_bytes)
    peer timeout 60 sockperf throughput --tcp -i "$H" -p $p_sp -t 2 -m 1024 > "$work/sp.out" || fail "sockperf throughput failed"
    msgs=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' "$work/sp.out")
    at_least "sockperf throughput messages sent" "${msgs:-none}" 1
    # They all went through the PPE: its stack received at least their bytes
    # (eta-stat's counters are published every 250 ms).
    carried_all() { [ $(($(stack_rx_bytes) - in0)) -ge $((msgs * 1024)) ]; }
    wait_until 10 carried_all ||
        fail "sockperf throughput: the PPE received $(($(stack_rx_bytes) - in0)) bytes, $msgs messages of 1024 were sent"

    # UDP (sockperf's default): the same server binary on a UDP socket
    # through the engine (issue 31), every ping answered.
    p_spu=$(free_port)
    note "sockperf UDP server under eta-run: ping-pong from the peer"
    bglog spu "$work/l7u" sockperf server -i "$H" -p $p_spu
    # (its own lines are not in the log: the shim's is; a server that
    # could not bind exits, and the wait ends with it)
    wait_until 120 eval "grep -q '$H:$p_spu' '$work/l7u' || ! kill -0 $spu_pid" || true
    grep -q "$H:$p_spu" "$work/l7u" || { cat "$work/l7u"; fail "sockperf UDP server did not bind"; }
    accelerated "$work/l7u" "sockperf UDP server"
    udp0=$(stat_py "sum(s['udp_in'] for e in d['engines'] for s in e['stacks'])")
    sockperf_pp "sockperf UDP ping-pong" "$work/spu.out" -p $p_spu
    udp_grew() { [ $(($(stat_py "sum(s['udp_in'] for e in d['engines'] for s in e['stacks'])") - udp0)) -ge "$recvd" ]; }
    wait_until 10 udp_grew || fail "sockperf UDP ping-pong: the engine took fewer datagrams than the $recvd answered"
fi

if want redis; then
    p_redis=$(free_port)
    note "redis-server under eta-run, redis-benchmark -n 20000 from the peer"
    bglog rs "$work/l8" redis-server --port $p_redis --save "" --appendonly no --protected-mode no
    wait_until 120 grep -q "0.0.0.0:$p_redis" "$work/l8" || { cat "$work/l8"; fail "redis-server did not listen"; }
    peer timeout 180 redis-benchmark -h "$H" -p $p_redis -n 100000 -c 50 -t set,get -q > "$work/rb.out" 2>&1 ||
        { cat "$work/rb.out"; fail "redis-benchmark failed"; }
    grep -qi "error" "$work/rb.out" && { cat "$work/rb.out"; fail "redis-benchmark reported errors"; }
    [ "$(peer timeout 10 redis-cli -h "$H" -p $p_redis ping)" = PONG ] || fail "redis does not answer PING"
    # eta-stat shows the program under the shim: its accelerated sockets and accepts.
    shown=$(stat_py "[(p['sockets'].get('accelerated', 0), p['accepted']) for p in d['programs'] if p['name'] == 'redis-server' and p['attached']]")
    python3 -c "import sys; v=eval(sys.argv[1]); sys.exit(0 if len(v) == 1 and v[0][0] >= 1 and v[0][1] >= 50 else 1)" "$shown" ||
        fail "eta-stat does not show redis-server under the shim with its sockets and 50+ accepts: $shown"
fi

# blob_or_report PORT LABEL: the blob over HTTP from the peer (curl, 120 s at
# most) into $got as its sha256. A fetch still running after wait_until's 20
# has stalled (64 MiB take 1-3 s here, beside a hog too): what the PPE (its
# connections but those in TIME_WAIT, each program's waits) and the peer's kernel (ss) see is
# printed while it stalls, so a failure says where the bytes stopped.
blob_or_report() {
    local out=$work/blob.$2 cp
    rm -f "$out"
    peer timeout 120 curl -sS -o "$out" -w "%{time_total}" "http://$H:$1/blob" > "$out.time" &
    cp=$!
    if ! wait_until 20 eval "! kill -0 $cp"; then
        echo "--- stalled: $(stat -c %s "$out" 2>/dev/null || echo no) bytes of $((64 << 20)) received; eta-stat and ss -tinm in the peer:"
        timeout 10 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" 2>&1 | grep -v TIME_WAIT || true
        peer ss -tinm "( sport = :$1 or dport = :$1 )" 2>&1 || true
    fi
    if wait "$cp"; then got=$(sha256sum < "$out" | cut -d' ' -f1); else got="curl failed"; fi
    echo "    blob ($2): $(cat "$out.time" 2>/dev/null || echo '?') s" # how long, for a run that comes near the bound
}

if want nginx; then
    note "nginx daemon mode, worker_processes 2, wrk keep-alive and Connection: close"
    mkdir -p "$work/nginx/logs" "$work/www"
    cp "$work/blob" "$work/www/blob"
    echo hello > "$work/www/index.html"
    p_nginx=$(free_port)   # listen PORT is INADDR_ANY: its kernel half binds in the host namespace
    cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log info;
events { worker_connections 1024; }
http {
    access_log $work/nginx/logs/access.log;
    log_format w '\$pid';
    server { listen $p_nginx; root $work/www; access_log $work/nginx/logs/workers.log w; }
}
CONF
    # By its full path: a binary upgrade (below) execs argv[0].
    ETA_LOG=fallback timeout 20 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf" || fail "nginx did not start"
    on_exit "kill -TERM \$(cat $work/nginx/nginx.pid 2>/dev/null) 2>/dev/null"
    on_exit "kill -TERM \$(cat $work/nginx/nginx.pid.oldbin 2>/dev/null) 2>/dev/null"
    wait_until 120 test -s "$work/nginx/nginx.pid" || fail "nginx wrote no pid"
    peer timeout 60 wrk -t 2 -c 20 -d 1 "http://$H:$p_nginx/" > "$work/wrk1" || fail "wrk keep-alive failed"
    peer timeout 60 wrk -t 2 -c 20 -d 3 -H "Connection: close" "http://$H:$p_nginx/" > "$work/wrk2" || fail "wrk close failed"
    grep -q "Non-2xx\|Socket errors" "$work/wrk1" "$work/wrk2" && { cat "$work/wrk1" "$work/wrk2"; fail "wrk saw errors"; }
    [ "$(sort -u "$work/nginx/logs/workers.log" | wc -l)" -ge 2 ] || fail "not both nginx workers served"
    blob_or_report "$p_nginx" first
    [ "$got" = "$sum" ] || fail "nginx: the blob differs ($got)"

    # The binary upgrade: the master execs a new master that inherits the
    # listeners (its environment holds only NGINX= and TZ), the old workers
    # and master leave, and the new ones serve alone through the PPE.
    if [ "${ETA_TEST_ENGINES:-1}" != 1 ]; then
        note "nginx binary upgrade: not on several engines (exec hands no sockets over there: preload/README.md)"
    else
    note "nginx binary upgrade: USR2, WINCH and QUIT to the old master; the new one serves"
    old=$(cat "$work/nginx/nginx.pid")
    kill -USR2 "$old"
    wait_until 120 test -s "$work/nginx/nginx.pid.oldbin" || fail "nginx started no new master on USR2"
    wait_until 120 bash -c "[ -s $work/nginx/nginx.pid ] && [ \"\$(cat $work/nginx/nginx.pid)\" != $old ]" ||
        fail "the new nginx master wrote no pid"
    kill -WINCH "$old"
    # (the new master is a child of the old one too)
    wait_until 30 bash -c "! ps -o cmd= --ppid $old | grep -c 'worker process' >/dev/null" || fail "the old nginx workers did not leave"
    kill -QUIT "$old"
    wait_until 30 bash -c "! kill -0 $old 2>/dev/null" || fail "the old nginx master did not leave"
    blob_or_report "$p_nginx" upgraded
    [ "$got" = "$sum" ] || { tail -5 "$work/nginx/logs/error.log"; grep "eta\[" "$work/nginx/logs/error.log" | tail -20 || true
        fail "nginx after its binary upgrade: not served ($got)"; }
    peer timeout 60 wrk -t 2 -c 20 -d 1 "http://$H:$p_nginx/" > "$work/wrk3" || fail "wrk after the upgrade failed"
    grep -q "Non-2xx\|Socket errors" "$work/wrk3" && { cat "$work/wrk3"; fail "wrk saw errors after the upgrade"; }
    fi
fi
# The PID of the program a start_bg'd `timeout` runs (eta-run execs it).
child_of() { ps -o pid= --ppid "$1" | tr -d ' ' | head -n1; }
# CPU time (user + system, clock ticks) of a process, from /proc.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
stat_of() { peer timeout 10 memcstat --servers="$1" | awk -v k="$2" '$1 == k":" { print $2 }'; }

if want memcached; then
    p_mc=$(free_port)
    # memcached's main thread accepts and hands each connection to a worker
    # thread, which adds it to its own epoll: every connection must be served.
    note "memcached -t 4 under eta-run, memcslap --concurrency=16 --execute-number=5000 from the peer"
    bglog mc "$work/l9" memcached -u root -t 4 -p $p_mc -l 0.0.0.0 -U 0
    wait_until 120 grep -q "0.0.0.0:$p_mc" "$work/l9" || { cat "$work/l9"; fail "memcached did not listen"; }
    peer timeout 120 memcslap --servers="$H:$p_mc" --concurrency=16 --execute-number=5000 --test=set \
        > "$work/ms.out" 2>&1 || { cat "$work/ms.out"; fail "memcslap failed or timed out (connections not served)"; }
    sets=$(stat_of "$H:$p_mc" cmd_set)
    [ "$sets" = 80000 ] || { cat "$work/ms.out"; fail "memcached set $sets of 80000 keys"; }
fi

if want privileged; then
    # The kernel's rule, applied by the PPE: ports below
    # net.ipv4.ip_unprivileged_port_start need CAP_NET_BIND_SERVICE.
    note "privileged ports: nobody cannot bind $H:80 through the PPE, root can"
    nobody_tools
    py=/usr/bin/python3 # Debian's (the package list's): other users may run it
    cat > "$work/bind.py" <<PY
import socket
s = socket.socket()
try:
    s.bind(("$H", 80))
    print("bound 80")
except PermissionError:
    print("EACCES 80")
h = socket.socket()
h.bind(("$H", 8090))
h.listen()
print("bound 8090")
PY
    chmod 644 "$work/bind.py"
    ETA_LOG=accel timeout 30 runuser -u nobody -- "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$work/bind.py" > "$work/priv.out" 2> "$work/priv.err" || { cat "$work/priv.err"; fail "python as nobody failed"; }
    grep -qx "EACCES 80" "$work/priv.out" || { cat "$work/priv.out"; fail "nobody bound port 80 on the PPE address"; }
    grep -qx "bound 8090" "$work/priv.out" || { cat "$work/priv.out"; fail "nobody could not bind port 8090"; }
    accelerated "$work/priv.err" "python as nobody"
    ETA_LOG=accel timeout 30 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$py" "$work/bind.py" \
        > "$work/priv.out" 2> "$work/priv.err" || { cat "$work/priv.err"; fail "python as root failed"; }
    grep -qx "bound 80" "$work/priv.out" || { cat "$work/priv.out" "$work/priv.err"; fail "root could not bind port 80 on the PPE address"; }
fi

if want dualstack; then
    p_ds=$(free_port)
    # Python's create_server(dualstack_ipv6=True): [::] with IPV6_V6ONLY off.
    note "dual-stack listener: python3 on [::] under eta-run, IPv4 client in the peer"
    cat > "$work/dual.py" <<'PY'
import socket, sys
srv = socket.create_server(("", int(sys.argv[1])), family=socket.AF_INET6, dualstack_ipv6=True)
print("serving", flush=True)
c, addr = srv.accept()
c.sendall((addr[0] + "\n").encode())
c.sendall(c.recv(100))
c.close()
PY
    py=$(python3 -c 'import sys; print(sys.executable)')
    bglog dual "$work/l12" "$py" "$work/dual.py" "$p_ds"
    wait_until 120 grep -q "listening on \[::\]:$p_ds" "$work/l12" || { cat "$work/l12"; fail "dual-stack listener not accelerated"; }
    got=$(peer timeout 20 python3 -c "
import socket
s = socket.create_connection(('$H', $p_ds))
f = s.makefile('rb')
print(f.readline().decode().strip())
s.sendall(b'echo')
print(f.read(4).decode())") || fail "IPv4 client of the dual-stack listener failed"
    [ "$got" = "::ffff:$P
echo" ] || fail "dual-stack listener: got '$got', want the v4-mapped ::ffff:$P and the echo"
    wait "$dual_pid" || { cat "$work/l12"; fail "dual-stack server failed"; }
fi

if want ppe_death; then
    # After the PPE is killed, servers neither die nor spin: a listener on the
    # PPE address reports nothing, an INADDR_ANY listener is its kernel half.
    note "PPE killed under memcached (INADDR_ANY and PPE-address listeners, an open connection)"
    p_mca=$(free_port)   # INADDR_ANY: its kernel half binds in the host namespace
    bglog mca "$work/l10" memcached -u root -t 4 -p "$p_mca" -l 0.0.0.0 -U 0
    bglog mcp "$work/l11" memcached -u root -t 4 -p 11313 -l "$H" -U 0
    # A libuv event loop (uvloop) listening on the PPE address: libuv asserts
    # on a listener reported with POLLERR/POLLHUP and no POLLIN.
    cat > "$work/uv.py" <<'PY'
import asyncio, sys, uvloop
async def echo(r, w):
    w.write(await r.read(100)); await w.drain(); w.close()
async def main():
    srv = await asyncio.start_server(echo, sys.argv[1], 8096)
    print("serving", file=sys.stderr, flush=True)
    await srv.serve_forever()
uvloop.install()
asyncio.run(main())
PY
    bglog uv "$work/l13" /usr/bin/python3 "$work/uv.py" "$H"
    wait_until 120 grep -q "serving" "$work/l13" || { cat "$work/l13"; fail "uvloop server did not start"; }
    [ "$(peer timeout 10 python3 -c "
import socket; s = socket.create_connection(('$H', 8096)); s.sendall(b'uv'); print(s.recv(10).decode())")" = uv ] ||
        fail "uvloop server does not echo through the PPE"
    wait_until 120 grep -q "0.0.0.0:$p_mca" "$work/l10" || { cat "$work/l10"; fail "memcached (any) did not listen"; }
    wait_until 120 grep -q "$H:11313" "$work/l11" || { cat "$work/l11"; fail "memcached ($H) did not listen"; }
    [ "$(stat_of "$H:11313" curr_connections)" != "" ] || fail "memcached ($H) does not answer through the PPE"
    # Connections open through the PPE when it dies (closed by the cleanup).
    for port in "$p_mca" 11313; do
        start_bg hold ip netns exec "$ETA_LAB_NS" timeout 60 socat -u "TCP:$H:$port" OPEN:/dev/null
    done
    wait_until 10 peer bash -c "ss -tn state established | grep -c ':11313' >/dev/null" || fail "held connection did not open"
    a_pid=$(child_of "$mca_pid") p_pid=$(child_of "$mcp_pid") u_pid=$(child_of "$uv_pid")
    ppe_real=$(child_of "$ppe_pid")
    kill -KILL "$ppe_real"
    # eta-ppe itself (not its `timeout` wrapper) gone before anything else: bounded.
    wait_until 120 test ! -e "/proc/$ppe_real" || fail "eta-ppe (pid $ppe_real) was still there 120 s after SIGKILL"
    wait_until 120 grep -q "the PPE has gone" "$work/l11" || { cat "$work/l11"; fail "memcached did not notice the PPE going"; }
    alive() { kill -0 "$1" 2>/dev/null || { cat "$3"; fail "$2 died when the PPE went"; }; }
    alive "$a_pid" "memcached (INADDR_ANY)" "$work/l10"
    alive "$p_pid" "memcached ($H)" "$work/l11"
    alive "$u_pid" "the uvloop server (libuv)" "$work/l13"
    a0=$(cpu_ticks "$a_pid") p0=$(cpu_ticks "$p_pid") u0=$(cpu_ticks "$u_pid") t0=$(date +%s%N)
    sleep 3 # the interval CPU time is measured over, not a wait for an event
    a1=$(cpu_ticks "$a_pid") p1=$(cpu_ticks "$p_pid") u1=$(cpu_ticks "$u_pid") t1=$(date +%s%N)
    wall=$(( (t1 - t0) * $(getconf CLK_TCK) / 1000000000 ))
    note "CPU after the PPE went: memcached(any) $((a1 - a0)), memcached(PPE address) $((p1 - p0)), uvloop $((u1 - u0)) of $wall ticks"
    # Spinning takes a CPU (on a machine busy with other work, still a good
    # share of wall time); asleep, memcached uses ~0 (its 1 s clock tick).
    limit=$(( wall / 50 > 2 ? wall / 50 : 2 ))
    [ $((a1 - a0)) -le "$limit" ] || fail "memcached (INADDR_ANY) spins after the PPE went"
    [ $((p1 - p0)) -le "$limit" ] || fail "memcached ($H) spins after the PPE went"
    [ $((u1 - u0)) -le "$limit" ] || fail "the uvloop server spins after the PPE went"
    alive "$a_pid" "memcached (INADDR_ANY)" "$work/l10"
    alive "$p_pid" "memcached ($H)" "$work/l11"
    alive "$u_pid" "the uvloop server (libuv)" "$work/l13"
    # The INADDR_ANY listener still serves local clients through its kernel half.
    [ -n "$(timeout 10 memcstat --servers=127.0.0.1:$p_mca | grep curr_connections)" ] ||
        fail "memcached (INADDR_ANY) does not serve 127.0.0.1 after the PPE went"
fi
echo "preload programs test passed"
