#!/usr/bin/env bash
# A forked server re-attaches as one group after a PPE restart (issue 12):
# processes that were one group on the old PPE are one group on the new one,
# an inherited listener is made once and every worker accepts on it again.
#   group_restart_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
# Servers under eta-run, kernel clients in the peer namespace:
#   - nginx (Debian's), master + 4 workers, each request logged with the
#     worker's pid;
#   - a prefork python server: 4 os.fork()ed workers in a blocking accept()
#     on one listener, each answering with its pid;
#   - a listener passed over SCM_RIGHTS to an unrelated process (exec'd, not
#     forked: a group it joined by the claim), both answering with their pid.
# Before the restart and after `kill -9` of eta-ppe and a new one: requests
# are served by at least 2 of the workers (and both pass processes), through
# the new PPE (its own passive opens), and eta-stat lists the workers that
# accepted again. Then a reload (SIGHUP) of nginx, whose master slept in
# sigsuspend through the restart: it re-attaches when it forks the new
# workers, which serve through the new PPE.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
command -v nginx >/dev/null || skip "nginx is not installed (tools/eta setup)"
PY=/usr/bin/python3 # the real interpreter: a wrapper script would attach first
[ -x "$PY" ] || PY=$(command -v python3)

lab_up
work=$(mktemp -d)
chmod 755 "$work" # nginx's workers run as nobody and serve from here
on_exit "rm -rf $work"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
ppe_config
ppe_start "$work/ppe.toml"
H=$ETA_LAB_PPE_IP

bg() {
    local name=$1 log=$2
    shift 2
    start_bg "$name" env ETA_LOG=fallback,accel timeout 300 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@" 2>"$log"
}
passive_opens() { ppe_json "sum(s['tcp_passive_opens'] for e in d['engines'] for s in e['stacks'])"; }
# The engines publish their counters every 10 ms while they work and when they
# nap: a count may trail the last connection by a moment.
opens_reached() { [ "$(passive_opens)" -ge "$1" ]; }

# nginx: master + 4 workers; access log line = the worker's pid. It listens
# on INADDR_ANY, so its kernel half binds in the host's namespace: a port the
# kernel picks (free_port), not a fixed number that another test (this one
# on 2 engines, beside it) or another suite on the machine may hold.
nginx_port=$(free_port)
mkdir -p "$work/nginx/logs" "$work/www"
echo hello > "$work/www/index.html"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 4;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log info;
events { worker_connections 256; }
http {
    access_log off;
    log_format w '\$pid';
    server { listen $nginx_port; root $work/www; access_log $work/nginx/logs/workers.log w; }
}
CONF
ETA_LOG=fallback,accel timeout 20 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx.log" || fail "nginx did not start"
on_exit "kill -KILL \$(cat $work/nginx/nginx.pid 2>/dev/null) \$(cat $work/nginx/workers 2>/dev/null) 2>/dev/null"
wait_until 20 test -s "$work/nginx/nginx.pid" || fail "nginx wrote no pid"
master=$(cat "$work/nginx/nginx.pid")
nginx_workers() { ps -o pid= --ppid "$master" | tr -d ' '; }
wait_until 20 bash -c "[ \$(ps -o pid= --ppid $master | wc -l) -eq 4 ]" || fail "nginx did not start 4 workers"
nginx_workers > "$work/nginx/workers" # for the cleanup: workers outlive a killed master

# The prefork python server: the parent listens, forks 4 workers and waits.
cat > "$work/prefork.py" <<'PY'
import os, socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 8085))
srv.listen(64)
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        while True:
            c, _ = srv.accept()   # blocking, across the PPE restart
            c.recv(100)
            c.sendall(str(os.getpid()).encode())
            c.close()
    kids.append(pid)
print("serving", *kids, file=sys.stderr, flush=True)
for _ in kids:
    os.wait()
PY
# The pass pair: A listens and hands its listener over SCM_RIGHTS to B, an
# unrelated process it starts (exec'd: a group of its own until it claims).
cat > "$work/pass.py" <<'PY'
import os, socket, subprocess, sys
def serve(srv, who):
    print("serving", who, os.getpid(), file=sys.stderr, flush=True)
    while True:
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(str(os.getpid()).encode())
        c.close()
if sys.argv[1] == "receiver":
    u = socket.socket(fileno=int(sys.argv[2]))
    _, fds, _, _ = socket.recv_fds(u, 16, 1)
    serve(socket.socket(fileno=fds[0]), "receiver")
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[2], 8086))
srv.listen(64)
subprocess.Popen([sys.executable, sys.argv[0], "receiver", str(b.fileno())], pass_fds=[b.fileno()])
socket.send_fds(a, [b"l"], [srv.fileno()])
serve(srv, "sender")
PY
bg prefork "$work/prefork.log" "$PY" "$work/prefork.py" "$H"
bg pass "$work/pass.log" "$PY" "$work/pass.py" sender "$H"
wait_until 60 grep -q serving "$work/prefork.log" || { cat "$work/prefork.log"; fail "the prefork server did not start"; }
wait_until 60 bash -c "[ \$(grep -c serving '$work/pass.log') -eq 2 ]" || { cat "$work/pass.log"; fail "the pass pair did not start"; }
read -r -a prefork_kids <<<"$(sed -n 's/^serving //p' "$work/prefork.log")"

# N requests to a pid-answering server on PORT, 8 at a time: the distinct
# pids that answered, one a line (in $work/pids.PORT).
pids_serving() {
    local port=$1 n=$2
    peer timeout 120 "$PY" -c "
import socket, sys
from concurrent.futures import ThreadPoolExecutor
def one(_):
    try:
        s = socket.create_connection(('$H', $port), timeout=30); s.sendall(b'x')
        return s.recv(100).decode()
    except OSError:
        return ''
with ThreadPoolExecutor(8) as ex: got = list(ex.map(one, range($n)))
print('\n'.join(sorted({g for g in got if g})))
print('unanswered', got.count(''), file=sys.stderr)" > "$work/pids.$port" 2>"$work/pids.$port.err"
}
# nginx: N requests (Connection: close, 8 at a time); the workers that
# served them since log line $1.
nginx_served() {
    local from=$1
    peer timeout 120 "$PY" -c "
import socket
from concurrent.futures import ThreadPoolExecutor
def one(_):
    try:
        s = socket.create_connection(('$H', $nginx_port), timeout=30)
        s.sendall(b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
        return b'hello' in s.makefile('rb').read()
    except OSError:
        return False
with ThreadPoolExecutor(8) as ex: print(sum(ex.map(one, range(200))))" > "$work/nginx.ok"
    tail -n +"$((from + 1))" "$work/nginx/logs/workers.log" | sort -u > "$work/nginx.pids"
}
# Every server serves, and at least MIN of its processes accept ($1: when).
check_groups() {
    local when=$1 lines
    lines=$(wc -l < "$work/nginx/logs/workers.log" 2>/dev/null || echo 0)
    nginx_served "$lines"
    [ "$(cat "$work/nginx.ok")" -ge 190 ] || fail "$when: nginx answered $(cat "$work/nginx.ok") of 200 requests"
    [ "$(wc -l < "$work/nginx.pids")" -ge 2 ] ||
        { cat "$work/nginx.log" "$work/nginx/logs/error.log"; fail "$when: only $(wc -l < "$work/nginx.pids") nginx worker(s) accepted 200 connections, expected at least 2 of 4"; }
    pids_serving 8085 200
    [ "$(wc -l < "$work/pids.8085")" -ge 2 ] ||
        { cat "$work/prefork.log" "$work/pids.8085.err"; fail "$when: only $(wc -l < "$work/pids.8085") prefork worker(s) accepted 200 connections, expected at least 2 of 4"; }
    grep -q "unanswered 0" "$work/pids.8085.err" || fail "$when: the prefork server left requests unanswered ($(cat "$work/pids.8085.err"))"
    pids_serving 8086 200
    [ "$(wc -l < "$work/pids.8086")" -eq 2 ] ||
        { cat "$work/pass.log" "$work/pids.8086.err"; fail "$when: $(wc -l < "$work/pids.8086") of the 2 processes sharing a passed listener accepted"; }
    grep -q "unanswered 0" "$work/pids.8086.err" || fail "$when: the pass pair left requests unanswered ($(cat "$work/pids.8086.err"))"
    note "$when: nginx workers $(tr '\n' ' ' < "$work/nginx.pids")/ prefork workers $(tr '\n' ' ' < "$work/pids.8085")/ pass pair $(tr '\n' ' ' < "$work/pids.8086")accepted"
}

check_groups "before the restart"
ppe_kill9 # waits until eta-ppe itself is gone
ppe_start "$work/ppe.toml"
# Each process re-attaches at its next wait (within its backoff, at most 1 s).
wait_until 20 bash -c "[ \$(grep -c 're-attached to the PPE' '$work/prefork.log') -ge 4 ]" ||
    { cat "$work/prefork.log"; fail "the prefork workers did not re-attach"; }
wait_until 20 bash -c "[ \$(grep -c 're-attached to the PPE' '$work/pass.log') -ge 2 ]" ||
    { cat "$work/pass.log"; fail "the pass pair did not re-attach"; }
opens0=$(passive_opens)
check_groups "after kill -9 of the PPE and a new one"
wait_until 20 opens_reached $((opens0 + 590)) ||
    fail "the new PPE accepted $opens0 -> $(passive_opens) connections; expected the 600 requests through it"
# One listener, one group: each was made again once, the others joined.
grep -q "1 listening socket made again, 0 shared" "$work/prefork.log" || { cat "$work/prefork.log"; fail "no prefork process made the listener again"; }
[ "$(grep -c "0 listening sockets made again, 1 shared with its process group" "$work/prefork.log")" -ge 3 ] ||
    { cat "$work/prefork.log"; fail "the other prefork workers did not join the group of the one that made it"; }
grep -q "cannot listen on the new PPE" "$work/prefork.log" "$work/pass.log" "$work/nginx.log" &&
    fail "a process could not listen again on the new PPE (see the logs)"
# eta-stat: every prefork worker is attached to the new PPE and holds a
# socket there (the one listener: in separate groups, all but one held none).
for p in "${prefork_kids[@]}"; do
    ppe_true "any(a['pid'] == $p and a['sockets'] >= 1 for a in d['apps'])" ||
        fail "eta-stat does not list prefork worker $p holding the listener: $(ppe_json "[(a['pid'], a['sockets']) for a in d['apps']]")"
done

# nginx's master slept in sigsuspend through the restart; a reload forks new
# workers from it, which must serve through the new PPE.
kill -HUP "$master"
wait_until 30 bash -c "[ \$(ps -o pid= --ppid $master | grep -vxF -f '$work/nginx/workers' | wc -l) -eq 4 ]" ||
    fail "nginx did not start 4 new workers on reload"
wait_until 30 bash -c "! ps -o pid= --ppid $master | grep -cxF -f '$work/nginx/workers' >/dev/null" ||
    fail "nginx's old workers did not leave after the reload"
nginx_workers >> "$work/nginx/workers"
lines=$(wc -l < "$work/nginx/logs/workers.log")
opens1=$(passive_opens)
nginx_served "$lines"
wait_until 20 opens_reached $((opens1 + 190)) ||
    fail "after the reload: the PPE accepted $opens1 -> $(passive_opens) connections"
[ "$(cat "$work/nginx.ok")" -ge 190 ] ||
    { tail -n 40 "$work/nginx.log" "$work/nginx/logs/error.log"; fail "after the reload: nginx answered $(cat "$work/nginx.ok") of 200 requests"; }
[ "$(wc -l < "$work/nginx.pids")" -ge 2 ] || fail "after the reload: $(wc -l < "$work/nginx.pids") new worker(s) accepted"
grep -q "cannot listen on the new PPE" "$work/nginx.log" && fail "nginx: a listener could not be made again"
note "after the reload: nginx workers $(tr '\n' ' ' < "$work/nginx.pids")accepted through the new PPE"
echo "group restart: nginx (4 workers), a prefork python server (4 workers) and a passed listener re-attached" \
    "as one group each and served through the new PPE by several processes - held"
