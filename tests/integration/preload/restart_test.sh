#!/usr/bin/env bash
# PPE restart without restarting programs (issue 12): servers under eta-run
# keep running across `kill -9` of eta-ppe and a new eta-ppe on the same
# socket, re-attach by themselves and serve peer clients through the new PPE.
#   restart_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT [CYCLES]
# CYCLES (default 1): kill + restart rounds; tools/eta soak runs 50.
# Servers: redis-server (epoll) and a Python loop in epoll_wait without a
# timeout on the PPE address; a Python server whose
# thread sleeps in a blocking accept() on the PPE address across the restart;
# Python's http.server on INADDR_ANY (poll; a hybrid listener whose kernel
# half serves 127.0.0.1 while the PPE is away).
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4 CYCLES=${5:-1}
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
command -v redis-server >/dev/null || skip "redis-server is not installed (tools/eta setup)"
[[ "$CYCLES" =~ ^[0-9]+$ ]] && [ "$CYCLES" -ge 1 ] || fail "CYCLES must be a positive number, not '$CYCLES'"

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
ppe_config
ppe_start "$work/ppe.toml"

P=$ETA_LAB_PEER_IP H=$ETA_LAB_PPE_IP
py=$(python3 -c 'import sys; print(sys.executable)')
# Each program in the background under eta-run, its stderr (the shim's lines)
# in a log. Its own bound outlasts the whole run (the soak's bound for CYCLES
# is 120 + 90 s a cycle): on_exit ends it; the bound is for a run that could
# not. (A fixed 900 s ended the programs of the soak's 50 cycles in cycle
# 31-40 on a busy machine: every later failure was theirs.)
prog_bound=$((600 + CYCLES * 90))
bg() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" env ETA_LOG=fallback,accel timeout "$prog_bound" "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"
}
child_of() { ps -o pid= --ppid "$1" | tr -d ' ' | head -n1; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
passive_opens() { ppe_json "sum(s['tcp_passive_opens'] for e in d['engines'] for s in e['stacks'])"; }
# The engines publish their counters every 10 ms while they work and when they
# nap: a count may trail the last connection by a moment.
opens_reached() { [ "$(passive_opens)" -ge "$1" ]; }

# A thread in a blocking accept() on the PPE address, serving echo; a second
# thread keeps the interpreter's main thread out of the way.
cat > "$work/echo.py" <<'PY'
import socket, sys, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 8097))
srv.listen(16)
print("serving", file=sys.stderr, flush=True)
def serve():
    while True:
        c, _ = srv.accept()     # blocking, across the PPE restart
        data = c.recv(100)
        c.sendall(data)
        c.close()
t = threading.Thread(target=serve)
t.start()
t.join()
PY
# An event loop that sleeps in epoll_wait with no timeout: nothing but the
# shim's own retry can wake it for the new PPE.
cat > "$work/ep.py" <<'PY'
import select, socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 8099))
srv.listen(16)
srv.setblocking(False)
ep = select.epoll()
ep.register(srv.fileno(), select.EPOLLIN)
print("serving", file=sys.stderr, flush=True)
while True:
    for fd, ev in ep.poll():          # timeout -1
        try:
            c, _ = srv.accept()
        except BlockingIOError:
            continue
        c.setblocking(True)
        c.sendall(c.recv(100))
        c.close()
PY
bg epoll "$work/epoll.log" "$py" "$work/ep.py" "$H"
bg redis "$work/redis.log" redis-server --bind "$H" --port 6390 --save "" --appendonly no --daemonize no --protected-mode no
bg echo "$work/echo.log" "$py" "$work/echo.py" "$H"
# INADDR_ANY reaches the host's kernel too: a fixed port collides with
# another run of this test on the machine, so the kernel picks a free one.
web_port=$(free_port)
bg web "$work/web.log" "$py" -m http.server "$web_port" --directory "$work"
wait_until 20 grep -q "$H:6390" "$work/redis.log" || { cat "$work/redis.log"; fail "redis did not listen on the PPE"; }
wait_until 20 grep -q "serving" "$work/epoll.log" || { cat "$work/epoll.log"; fail "epoll server did not start"; }
wait_until 20 grep -q "serving" "$work/echo.log" || { cat "$work/echo.log"; fail "echo server did not start"; }
wait_until 20 grep -q "0.0.0.0:$web_port" "$work/web.log" || { cat "$work/web.log"; fail "http.server did not listen"; }
echo hello > "$work/hello.txt"
r_pid=$(child_of "$redis_pid") e_pid=$(child_of "$echo_pid") w_pid=$(child_of "$web_pid") p_pid=$(child_of "$epoll_pid")

# One request to each server from the peer, through the PPE. Every server is
# asked each time, so that a failure names all that do not answer (one
# program's listener lost, or the whole PPE not serving).
serve_all() {
    local bad=() r
    r=$(peer timeout 30 redis-cli -h "$H" -p 6390 ping 2>&1) || true
    [ "$r" = PONG ] || bad+=("redis does not answer: $r")
    [ "$(peer timeout 30 python3 -c "
import socket; s = socket.create_connection(('$H', 8097), timeout=25); s.sendall(b'e$1'); print(s.recv(100).decode())" 2>/dev/null)" = "e$1" ] ||
        bad+=("the echo server (blocking accept) does not answer")
    [ "$(peer timeout 30 python3 -c "
import socket; s = socket.create_connection(('$H', 8099), timeout=25); s.sendall(b'p$1'); print(s.recv(100).decode())" 2>/dev/null)" = "p$1" ] ||
        bad+=("the epoll server (epoll_wait without timeout) does not answer")
    [ "$(peer timeout 30 curl -s "http://$H:$web_port/hello.txt")" = hello ] || bad+=("http.server does not answer")
    [ "${#bad[@]}" -eq 0 ] && return 0
    local IFS=';'
    echo "${bad[*]}" | sed 's/;/; /g' > "$work/why"
    return 1
}
alive() {
    for p in "$r_pid:redis:$work/redis.log" "$e_pid:echo:$work/echo.log" "$w_pid:http.server:$work/web.log" \
        "$p_pid:epoll server:$work/epoll.log"; do
        kill -0 "${p%%:*}" 2>/dev/null || { cat "${p##*:}"; fail "$(cut -d: -f2 <<<"$p") died ($1)"; }
    done
}
reattached() { grep -c "re-attached to the PPE" "$1" || true; }
gone() { grep -c "the PPE has gone" "$1" || true; }

wait_until 120 serve_all 0 || fail "before any restart: $(cat "$work/why")"
# Descriptors other than sockets and pipes (the shim's and libdti's eventfds,
# epoll sets, memfds; the program's own epoll and files): a re-attach gives
# back every one the old attachment held, so redis and the epoll server
# (one thread each on the data path) hold as many after each restart as
# before the first. Sockets are left out: connections come and go.
own_fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 ! -lname 'socket:*' ! -lname 'pipe:*' 2>/dev/null | wc -l; }
export -f own_fds
r_fds0=$(own_fds "$r_pid") p_fds0=$(own_fds "$p_pid")
# A connection open through the PPE when it dies stays dead: once the new PPE
# is up, the peer's next segment on it is answered with a reset.
peer timeout 90 python3 -c "
import os, socket, time
s = socket.create_connection(('$H', 6390)); s.sendall(b'PING\\r\\n'); s.recv(100)
print('open', flush=True)
end = time.time() + 80
while not os.path.exists('$work/go') and time.time() < end: time.sleep(0.05)
s.settimeout(20)
try:
    for _ in range(20):
        s.sendall(b'PING\\r\\n')
        if not s.recv(100): print('eof'); break
        time.sleep(0.2)
    else: print('answered')
except OSError as e:
    print('error', e.errno)" > "$work/held.out" &
held_pid=$!
_bg_pids+=("$held_pid")
wait_until 60 grep -q open "$work/held.out" || fail "held redis connection did not open"

for cycle in $(seq 1 "$CYCLES"); do
    ppe_kill9 # waits until eta-ppe itself is gone
    # Each program says once per kill that the PPE went: counted, so that a
    # later cycle does not pass on an earlier cycle's line.
    for l in redis echo web epoll; do
        wait_until 20 bash -c "[ \$(grep -c 'the PPE has gone' '$work/$l.log') -ge $cycle ]" ||
            { cat "$work/$l.log"; fail "cycle $cycle: $l did not notice the PPE going ($(gone "$work/$l.log") times in $cycle kills)"; }
    done
    alive "cycle $cycle, PPE killed"
    if [ "$cycle" -eq 1 ]; then
        # Away: nobody spins (each wakes at most once a second to try again),
        # and the INADDR_ANY listener serves 127.0.0.1 through its kernel half.
        r0=$(cpu_ticks "$r_pid") e0=$(cpu_ticks "$e_pid") w0=$(cpu_ticks "$w_pid") p0=$(cpu_ticks "$p_pid") t0=$(date +%s%N)
        sleep 2 # the interval CPU time is measured over, not a wait for an event
        r1=$(cpu_ticks "$r_pid") e1=$(cpu_ticks "$e_pid") w1=$(cpu_ticks "$w_pid") p1=$(cpu_ticks "$p_pid") t1=$(date +%s%N)
        wall=$(( (t1 - t0) * $(getconf CLK_TCK) / 1000000000 ))
        note "CPU while the PPE is away: redis $((r1 - r0)), echo $((e1 - e0)), http.server $((w1 - w0)), epoll server $((p1 - p0)) of $wall ticks"
        limit=$(( wall / 20 > 3 ? wall / 20 : 3 ))
        for v in "redis $((r1 - r0))" "echo $((e1 - e0))" "http.server $((w1 - w0))" "epoll-server $((p1 - p0))"; do
            [ "${v#* }" -le "$limit" ] || fail "${v% *} spins while the PPE is away (${v#* } of $wall ticks)"
        done
        [ "$(timeout 30 curl -s "http://127.0.0.1:$web_port/hello.txt")" = hello ] ||
            fail "http.server does not serve 127.0.0.1 through its kernel half while the PPE is away"
    fi
    ppe_start "$work/ppe.toml"
    # Re-attach: each program within its backoff (at most 1 s), then serves.
    for l in redis echo web epoll; do
        wait_until 20 bash -c "[ \$(grep -c 're-attached to the PPE' '$work/$l.log') -ge $cycle ]" ||
            { cat "$work/$l.log"; fail "cycle $cycle: $l did not re-attach to the new PPE"; }
    done
    wait_until 120 serve_all "$cycle" || {
        cat "$work/redis.log" "$work/echo.log" "$work/web.log" "$work/ppe.log"
        # What the new PPE holds (its listeners and connections, its
        # counters): a listener made again but refusing, or one never made.
        timeout 20 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" || true
        fail "cycle $cycle, new PPE: $(cat "$work/why")"; }
    if [ "$cycle" -eq 1 ]; then
        touch "$work/go"
        wait_until 30 grep -qE "^(error|eof|answered)" "$work/held.out" || fail "the peer's held connection got no answer"
        grep -qE "^error (104|32)" "$work/held.out" ||
            fail "the connection open when the PPE died was not reset on the new PPE: $(cat "$work/held.out")"
    fi
    # The new PPE carried those connections (its counters start at 0), and
    # eta-stat shows the programs attached again.
    wait_until 20 opens_reached 4 ||
        fail "cycle $cycle: the new PPE accepted $(passive_opens) connections, expected 4 or more"
    opens=$(passive_opens)
    ppe_true "{a['pid'] for a in d['apps']} >= {$r_pid, $e_pid, $w_pid, $p_pid}" ||
        fail "cycle $cycle: eta-stat does not list the four programs as attached"
    ppe_true "all(p['reattaches'] == $cycle for p in d['programs'] if p['pid'] in ($r_pid, $e_pid, $w_pid, $p_pid))" ||
        fail "cycle $cycle: eta-stat's programs do not count $cycle re-attaches"
    alive "cycle $cycle, PPE back"
    for v in "redis:$r_pid:$r_fds0" "epoll server:$p_pid:$p_fds0"; do
        IFS=: read -r name pid base <<<"$v"
        wait_until 20 bash -c "[ \$(own_fds $pid) -eq $base ]" || {
            ls -l "/proc/$pid/fd"
            fail "cycle $cycle: $name holds $(own_fds "$pid") descriptors besides sockets and pipes, $base before any restart: a re-attach left some behind"; }
    done
    for l in redis echo web epoll; do
        n=$(reattached "$work/$l.log")
        [ "$n" -eq "$cycle" ] || fail "cycle $cycle: $l logged $n re-attaches, expected one per restart"
    done
    [ "$CYCLES" -eq 1 ] || echo "restart cycle $cycle of $CYCLES: served through the new PPE ($opens connections)"
done
echo "restart: $CYCLES of $CYCLES kill -9 + restart cycles of eta-ppe: redis (epoll), an epoll loop without timeout," \
    "a blocking accept and http.server (poll, INADDR_ANY) lived on, re-attached once each time and served through every new PPE - held"
