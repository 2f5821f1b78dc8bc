#!/usr/bin/env bash
# Programs eta-run must be honest about, and a busy machine (issue 35, items 7 and 8).
#   loaded_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT [ONLY...]
# ONLY: run just the named cases:
#   unreachable  a Go program and statically linked C programs (LD_PRELOAD cannot reach
#                them): eta-run --require refuses them before they run, saying why;
#                without --require it warns and runs them; a dynamic program is not
#                mistaken for one
#   starting     eta-run started while eta-ppe is still starting waits for it ("waiting
#                for eta-ppe ... to start") and the --require program runs through it
#   asyncio      a Python asyncio HTTP/1.1 keep-alive server under eta-run with a CPU
#                hog on every core answers every request of a bounded load from 64
#                connections, then survives kill -9 of the PPE and serves 127.0.0.1,
#                then re-attaches to a new PPE and serves the peer through it
# Verdicts are on what was answered, never on how fast.
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
shift 4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM
ONLY=("$@")
want() { [ ${#ONLY[@]} -eq 0 ] || printf '%s\n' "${ONLY[@]}" | grep -cx "$1" >/dev/null; }

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
ppe_config
H=$ETA_LAB_PPE_IP
py=$(python3 -c 'import sys; print(sys.executable)')
child_of() { ps -o pid= --ppid "$1" | tr -d ' ' | head -n1; }

if want unreachable; then
    command -v go >/dev/null || skip "go is not installed (golang-go; tools/eta setup)"
    command -v gcc >/dev/null || skip "gcc is not installed (build-essential; tools/eta setup)"
    [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(gcc -print-file-name=libc.a | grep /)" ] ||
        skip "no static C library (libc6-dev)"
    ppe_start "$work/ppe.toml"
    note "a Go server and static C programs: eta-run says LD_PRELOAD cannot reach them"
    mkdir -p "$work/go"
    cat > "$work/go/main.go" <<'GO'
package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("go listening", l.Addr())
	l.Close()
}
GO
    (cd "$work/go" && HOME=$work/go GOCACHE=$work/go/cache GOPATH=$work/go/path GO111MODULE=off \
        timeout 300 go build -o gosrv main.go) || fail "cannot build the Go program"
    printf '#include <stdio.h>\nint main(void) { puts("static ran"); return 0; }\n' > "$work/st.c"
    gcc -static -o "$work/static" "$work/st.c" || fail "gcc -static failed"
    gcc -static-pie -o "$work/static-pie" "$work/st.c" || fail "gcc -static-pie failed"
    gcc -o "$work/dynamic" "$work/st.c" || fail "gcc failed"
    # A script whose interpreter is static: what exec runs is what counts.
    printf '#!%s\n' "$work/static" > "$work/script"
    chmod +x "$work/script"
    runr() { timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$@"; }
    # Refused before it runs: the program's own line must not appear.
    refused "a Go program under --require" "is a Go program" runr "$work/go/gosrv" "$H:7701"
    out=$(runr "$work/go/gosrv" "$H:7701" 2>&1) || true
    [[ "$out" != *"go listening"* ]] || fail "the Go program ran under --require: $out"
    [[ "$out" == *"raw system calls"* && "$out" == *"without --require"* ]] ||
        fail "the refusal does not say why and what to do: $out"
    refused "a static C program under --require" "is statically linked" runr "$work/static"
    refused "a static-pie C program under --require" "is statically linked" runr "$work/static-pie"
    refused "a script run by a static interpreter under --require" "is statically linked" runr "$work/script"
    out=$(runr "$work/static" 2>&1) || true
    [[ "$out" != *"static ran"* ]] || fail "the static program ran under --require: $out"
    # Without --require: a warning, and the program runs (on kernel sockets).
    out=$(timeout 60 "$ETA_RUN" --socket "$ETA_LAB_SOCKET" -- "$work/go/gosrv" "0.0.0.0:0" 2>&1) ||
        fail "the Go program under eta-run (no --require) failed: $out"
    [[ "$out" == *"warning: '$work/go/gosrv' is a Go program"* && "$out" == *"go listening"* ]] ||
        fail "no warning, or the Go program did not run: $out"
    out=$(timeout 60 "$ETA_RUN" --socket "$ETA_LAB_SOCKET" -- "$work/static" 2>&1) ||
        fail "the static program under eta-run (no --require) failed: $out"
    [[ "$out" == *"is statically linked"* && "$out" == *"static ran"* ]] || fail "no warning, or no run: $out"
    # Not mistaken: a dynamic C program and python (through #!/usr/bin/env) run
    # under --require with no such warning.
    out=$(runr "$work/dynamic" 2>&1) || fail "a dynamic C program under --require failed: $out"
    [ "$out" = "static ran" ] || fail "a dynamic C program got a warning: $out"
    printf '#!/usr/bin/env python3\nprint("py ran")\n' > "$work/py.py"
    chmod +x "$work/py.py"
    out=$(PATH=$(dirname "$py"):$PATH runr "$work/py.py" 2>&1) || fail "a python script under --require failed: $out"
    [ "$out" = "py ran" ] || fail "a python script got a warning: $out"
    ppe_stop
fi

if want starting; then
    note "eta-run --require while eta-ppe starts: it waits, then runs through the PPE"
    prefix=$(sed -n 's/^file_prefix = "\(.*\)".*/\1/p' "$work/ppe.toml")
    on_exit "rm -rf /var/run/dpdk/$prefix"
    # eta-ppe is stopped (SIGSTOP) the moment its <socket>.starting mark names
    # it (a watcher polling every millisecond): it cannot serve until it is
    # continued, however slow the machine. Should it have bound its socket
    # before the watcher caught it (a start far quicker than the watcher's
    # poll), that try is not a verdict: it is stopped and started again.
    cat > "$work/catch.py" <<'PY'
import os, signal, sys, time
mark, end = sys.argv[1], time.monotonic() + 120
while time.monotonic() < end:
    try:
        pid = int(open(mark).read().strip() or 0)
    except (OSError, ValueError):
        pid = 0
    if pid:
        os.kill(pid, signal.SIGSTOP)
        print(pid, flush=True)
        sys.exit(0)
    time.sleep(0.001)
sys.exit(1)
PY
    caught=""
    for try in 1 2 3 4 5; do
        rm -f "$work/ready" "$ETA_LAB_SOCKET.starting"
        start_bg catcher "$py" "$work/catch.py" "$ETA_LAB_SOCKET.starting" > "$work/caught"
        start_bg ppe timeout 900 "$ETA_PPE" --config "$work/ppe.toml" --foreground --ready-fd 3 3>"$work/ready" 2>>"$work/ppe.log"
        PPE_PID=$ppe_pid
        wait "$catcher_pid" || { cat "$work/ppe.log"; fail "eta-ppe wrote no $ETA_LAB_SOCKET.starting within 120 s"; }
        real=$(cat "$work/caught")
        [ "$(pgrep -P "$PPE_PID" | head -1)" = "$real" ] || fail "$ETA_LAB_SOCKET.starting names $real, not eta-ppe (pid $(pgrep -P "$PPE_PID"))"
        on_exit "kill -CONT $real"
        if [ ! -S "$ETA_LAB_SOCKET" ]; then caught=$real; break; fi
        note "try $try: eta-ppe bound its socket before it was caught; again"
        kill -CONT "$real"
        PPE_REAL_PID=$real
        wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not become ready"
        ppe_stop
    done
    [ -n "$caught" ] || fail "could not catch eta-ppe while it was starting in 5 tries"
    grep -qx READY "$work/ready" && fail "eta-ppe was READY with its starting mark still there"
    start_bg runner env ETA_LOG=fallback,accel timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" -c "import socket; s = socket.socket(); s.bind(('$H', 7702)); s.listen(); print('bound through the PPE')" \
        >"$work/run.out" 2>"$work/run.err"
    wait_until 60 grep -q "waiting for eta-ppe (pid $caught) at $ETA_LAB_SOCKET to start" "$work/run.err" ||
        { cat "$work/run.err"; fail "eta-run did not say it waits for the starting eta-ppe"; }
    kill -0 "$runner_pid" 2>/dev/null || { cat "$work/run.err"; fail "eta-run did not wait for the starting eta-ppe"; }
    kill -CONT "$caught"
    wait "$runner_pid" || { cat "$work/run.err"; fail "the --require program failed after eta-ppe started"; }
    grep -q "bound through the PPE" "$work/run.out" || fail "the program did not run"
    grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated' "$work/run.err" || { cat "$work/run.err"; fail "the program's socket did not reach the PPE"; }
    wait_until 60 grep -qx READY "$work/ready" || fail "eta-ppe did not say READY"
    [ ! -e "$ETA_LAB_SOCKET.starting" ] || fail "$ETA_LAB_SOCKET.starting is still there once eta-ppe serves"
    PPE_REAL_PID=$caught
    ppe_stop
    # A mark naming a live process that is not eta-ppe (left by one killed
    # while starting, its pid reused) does not make eta-run wait.
    start_bg other sleep 600
    echo "$other_pid" > "$ETA_LAB_SOCKET.starting"
    refused "a --require program with a stale starting mark and no PPE" "no PPE at" \
        timeout 60 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- /bin/true
    rm -f "$ETA_LAB_SOCKET.starting"
fi

if want asyncio; then
    ppe_start "$work/ppe.toml"
    note "asyncio HTTP/1.1 keep-alive server under eta-run, a CPU hog on every core, 64 connections"
    cat > "$work/aserver.py" <<'PY'
import asyncio, sys
BODY = b"hello from asyncio\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s" % (len(BODY), BODY)
served = 0
async def handle(r, w):
    global served
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            if not head:
                break
            w.write(RESP)
            await w.drain()
            served += 1
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()
async def main():
    srv = await asyncio.start_server(handle, "0.0.0.0", int(sys.argv[1]), backlog=512)
    print("serving", flush=True)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
PY
    # The load: C connections, each N keep-alive requests in turn; every
    # answer checked; prints the count it got. Bounded by its own timeout.
    cat > "$work/aclient.py" <<'PY'
import asyncio, sys
host, port, conns, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ok = 0
async def one():
    global ok
    r, w = await asyncio.open_connection(host, port)
    for _ in range(per):
        w.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK"), head
        n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        body = await r.readexactly(n)
        if body == b"hello from asyncio\n":
            ok += 1
    w.close()
async def main():
    await asyncio.gather(*(one() for _ in range(conns)))
    print(ok)
asyncio.run(main())
PY
    n_cpu=$(nproc)
    for i in $(seq 1 "$n_cpu"); do
        start_bg hog timeout 600 bash -c 'while :; do :; done'
    done
    # INADDR_ANY reaches the host's kernel too (the listener's kernel half):
    # a fixed port collides with anything else on the machine holding it
    # (it did: another run's server on 8097), so the kernel picks a free one.
    aport=$(free_port)
    start_bg asrv env ETA_LOG=fallback,accel timeout 600 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
        "$py" "$work/aserver.py" "$aport" >"$work/asrv.out" 2>"$work/asrv.err"
    wait_until 120 grep -q serving "$work/asrv.out" || { cat "$work/asrv.err"; fail "the asyncio server did not start"; }
    got=$(peer timeout 400 python3 "$work/aclient.py" "$H" "$aport" 64 40) || { tail -20 "$work/asrv.err"; fail "the load did not complete (64 connections x 40 requests, under a CPU hog)"; }
    [ "$got" = 2560 ] || fail "the asyncio server answered $got of 2560 requests correctly"
    grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated' "$work/asrv.err" || { cat "$work/asrv.err"; fail "the asyncio server's sockets did not reach the PPE"; }
    note "kill -9 of the PPE under the hog: the asyncio server lives and serves 127.0.0.1"
    srv_real=$(child_of "$asrv_pid")
    ppe_kill9
    wait_until 120 grep -q "the PPE has gone" "$work/asrv.err" || { cat "$work/asrv.err"; fail "the asyncio server did not notice the PPE going"; }
    kill -0 "$srv_real" 2>/dev/null || { cat "$work/asrv.err"; fail "the asyncio server died when the PPE went"; }
    got=$(timeout 200 "$py" "$work/aclient.py" 127.0.0.1 "$aport" 4 5) || { tail -20 "$work/asrv.err"; fail "the asyncio server does not answer 127.0.0.1 after the PPE went"; }
    [ "$got" = 20 ] || fail "after the PPE went, 127.0.0.1 got $got of 20 answers"
    kill -0 "$srv_real" 2>/dev/null || { cat "$work/asrv.err"; fail "the asyncio server died after the PPE went"; }
    note "a new PPE under the hog: the asyncio server re-attaches and serves the peer through it"
    ppe_start "$work/ppe.toml"
    # The server sleeps in epoll_wait with no timeout; the shim's wait tries
    # the PPE again at most a second apart (preload/README.md "re-attach").
    wait_until 120 grep -q "re-attached to the PPE" "$work/asrv.err" || { cat "$work/asrv.err"; fail "the asyncio server did not re-attach to the new PPE"; }
    got=$(peer timeout 400 python3 "$work/aclient.py" "$H" "$aport" 16 10) || { tail -20 "$work/asrv.err"; fail "the asyncio server does not answer the peer through the new PPE"; }
    [ "$got" = 160 ] || fail "through the new PPE the asyncio server answered $got of 160 requests correctly"
    kill -0 "$srv_real" 2>/dev/null || { cat "$work/asrv.err"; fail "the asyncio server died after re-attaching"; }
fi
echo PASS
