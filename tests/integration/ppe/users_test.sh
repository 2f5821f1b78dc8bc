#!/usr/bin/env bash
# Users stay apart (issue 12), with real programs under eta-run as root and
# as nobody:
#   - the control socket and the files beside it carry the modes [control]
#     mode gives (default 0660 / 0640: eta-ppe's user and group; the lab's
#     config 0666 / 0644);
#   - with the default mode and no allowed_users, nobody cannot reach the PPE
#     (a clear refusal from eta-run --require; eta-stat cannot read the
#     counters either);
#   - with allowed_users = ["root"], nobody reaches the socket but is refused
#     by uid, with a clear message;
#   - with allowed_users = ["root", "nobody"]: nobody's SO_REUSEPORT bind to
#     the PPE address and port root's SO_REUSEPORT listener holds fails with
#     EADDRINUSE, from the PPE (a bind to the PPE's address has no kernel
#     half; one to 0.0.0.0 would be answered by the kernel first) (Linux
#     groups reuseport sockets of one effective uid only); a second root
#     server's succeeds, and both root servers receive connections from the
#     peer;
#   - allowed_users naming a user the mode keeps out is a start-up error.
#   users_test.sh ETA_PPE ETA_STAT LIBETA_PRELOAD ETA_RUN
ETA_PPE=$1 ETA_STAT=$2 SHIM=$3 ETA_RUN=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
[ -f "$SHIM" ] || skip "libeta-preload.so is not built ($SHIM)"
command -v runuser >/dev/null || fail "runuser (util-linux) is missing"
export ETA_PRELOAD_LIB=$SHIM
nobody_tools
SERVER=$(dirname "$0")/users_server.py
PY=/usr/bin/python3 # Debian's: other users may run it
PORT=7400
N=32

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
chmod 755 "$work"
# nobody must reach the lab's socket directory and run the server script.
chmod 755 "$(dirname "$ETA_LAB_SOCKET")" 2>/dev/null || true
cp "$SERVER" "$work/server.py" && chmod 644 "$work/server.py"

mode_of() { stat -c %a "$1"; }
check_modes() { # SOCKET_MODE FILE_MODE
    local f
    [ "$(mode_of "$ETA_LAB_SOCKET")" = "$1" ] || fail "control socket mode $(mode_of "$ETA_LAB_SOCKET"), expected $1"
    for f in stats cores net; do
        [ "$(mode_of "$ETA_LAB_SOCKET.$f")" = "$2" ] || fail "$ETA_LAB_SOCKET.$f mode $(mode_of "$ETA_LAB_SOCKET.$f"), expected $2"
    done
}
# A config: the lab's, with [control] mode replaced (or removed: the default)
# and [limits] allowed_users appended when given.
config_with() { # MODE_LINE|"" ALLOWED_USERS_TOML|""
    sed '/^mode = /d' "$ETA_LAB_CONFIG" > "$work/ppe.toml"
    [ -z "$1" ] || sed -i "s|^socket = .*|&\n$1|" "$work/ppe.toml"
    [ -z "$2" ] || printf '[limits]\nallowed_users = %s\n' "$2" >> "$work/ppe.toml"
}
as_nobody() { timeout 30 runuser -u nobody -- "$@"; }

note "default mode: only eta-ppe's user and group reach the PPE"
config_with "" ""
ppe_start "$work/ppe.toml"
check_modes 660 640
rc=0
as_nobody "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$PY" -c 'import socket; socket.socket().bind(("0.0.0.0", 0))' \
    > "$work/deny.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || { cat "$work/deny.out"; fail "nobody ran under eta-run --require with a socket of mode 0660"; }
grep -qi "no permission\|permission denied" "$work/deny.out" || { cat "$work/deny.out"; fail "nobody's refusal does not say why"; }
rc=0
as_nobody "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --json > "$work/stat.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "nobody read the PPE's counters with a socket of mode 0660"
ppe_stop

note "allowed_users = [\"root\"]: nobody reaches the socket and is refused by uid"
config_with "mode = 0o666" '["root"]'
ppe_start "$work/ppe.toml"
check_modes 666 644
rc=0
as_nobody "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$PY" -c 'import socket; socket.socket().bind(("0.0.0.0", 0))' \
    > "$work/deny.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || { cat "$work/deny.out"; fail "nobody attached although allowed_users names only root"; }
grep -q "uid 65534 is not allowed to attach" "$work/deny.out" || { cat "$work/deny.out"; fail "nobody's refusal does not name the rule"; }
ppe_stop

note "allowed_users naming a user the socket's mode keeps out: a start-up error"
config_with "" '["root", "nobody"]'
rc=0
out=$(timeout 30 "$ETA_PPE" --config "$work/ppe.toml" --check 2>&1) || rc=$?
[ "$rc" -eq 1 ] || { echo "$out"; fail "eta-ppe --check accepted allowed_users that mode 0660 keeps out (exit $rc)"; }
grep -q 'limits.allowed_users: user "nobody" (uid 65534) could not connect' <<<"$out" || { echo "$out"; fail "unclear message: $out"; }

note "SO_REUSEPORT across users: nobody cannot join root's group, root can"
config_with "mode = 0o666" '["root", "nobody"]'
ppe_start "$work/ppe.toml"
touch "$work/hold" && chmod 644 "$work/hold"
start_bg srv1 timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" --log accel -- "$PY" "$work/server.py" "$ETA_LAB_PPE_IP" $PORT "$work/hold" \
    > "$work/srv1.out" 2> "$work/srv1.err"
wait_until 20 grep -q listening "$work/srv1.out" || { cat "$work/srv1.out" "$work/srv1.err"; fail "root's first server did not listen"; }
grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$work/srv1.err" || { cat "$work/srv1.err"; fail "root's server is not accelerated"; }
# (Its hold file does not exist: should it get the port, it stops at once.)
as_nobody "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" --log accel -- "$PY" "$work/server.py" "$ETA_LAB_PPE_IP" $PORT "$work/no-hold" \
    > "$work/nobody.out" 2> "$work/nobody.err" || { cat "$work/nobody.out" "$work/nobody.err"; fail "nobody's server failed"; }
grep -qx EADDRINUSE "$work/nobody.out" || { cat "$work/nobody.out" "$work/nobody.err"; fail "nobody joined root's SO_REUSEPORT group on port $PORT"; }
grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$work/nobody.err" || { cat "$work/nobody.err"; fail "nobody's server could not bind a free port on the PPE (the refusal proves nothing)"; }
start_bg srv2 timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- "$PY" "$work/server.py" "$ETA_LAB_PPE_IP" $PORT "$work/hold" \
    > "$work/srv2.out" 2> "$work/srv2.err"
wait_until 20 grep -q 'listening\|EADDRINUSE' "$work/srv2.out" || { cat "$work/srv2.out" "$work/srv2.err"; fail "root's second server did not start"; }
grep -qx listening "$work/srv2.out" || { cat "$work/srv2.out"; fail "root's second SO_REUSEPORT server could not join the group"; }
peer timeout 60 python3 - "$ETA_LAB_PPE_IP" $PORT $N > "$work/pids" <<'PY' || fail "the peer's client failed"
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    with socket.create_connection((host, port), timeout=10) as s:
        s.settimeout(10)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
        print(data.decode().strip())
PY
[ "$(wc -l < "$work/pids")" -eq $N ] || { cat "$work/pids"; fail "the peer got $(wc -l < "$work/pids") answers of $N"; }
servers=$(sort -u "$work/pids" | wc -l)
[ "$servers" -eq 2 ] || { sort "$work/pids" | uniq -c; fail "$N connections reached $servers server(s), expected both of root's"; }
rm -f "$work/hold"
wait "$srv1_pid" || { cat "$work/srv1.out" "$work/srv1.err"; fail "root's first server failed"; }
wait "$srv2_pid" || { cat "$work/srv2.out" "$work/srv2.err"; fail "root's second server failed"; }
note "connections per server: $(sort "$work/pids" | uniq -c | awk '{print $1}' | paste -sd/)"
ppe_stop
echo "PASS"
