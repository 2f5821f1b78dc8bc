#!/usr/bin/env bash
# A connection through fork + exec + fork + exec (issue 35, item 5), with a
# real eta-ppe in the lab and Debian's git in the peer namespace as the client:
# `git daemon` under eta-run on the PPE address; its listener forks and execs
# `git-daemon --serve` with the connection on stdin and stdout, which forks and
# execs `git upload-pack` (which answers ls-refs through stdio) and closes its
# own copies. `git ls-remote` and `git clone` in the peer get the repository's
# commit; the PPE took the connections. Before the fix the client saw
# "expected flush after ref listing" (upload-pack's stdout reached the kernel
# placeholder: EPIPE, SIGPIPE).
#   git_daemon_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
command -v git >/dev/null || fail "git is missing: run tools/eta setup (Debian's git)"
[ -x "$(git --exec-path)/git-daemon" ] || fail "git daemon is missing from $(git --exec-path): run tools/eta setup"
export ETA_PRELOAD_LIB=$SHIM
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
chmod 755 "$work"
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
# naps: a count may trail the last connection by a moment.
opens_reached() { [ "$(passive_opens)" -ge "$1" ]; }

note "a repository with one commit"
g() { git -c user.email=lab@eta.invalid -c user.name=lab -c init.defaultBranch=main "$@"; }
g init -q --bare "$work/repo.git"
g init -q "$work/src"
echo "issue 35" >"$work/src/README"
g -C "$work/src" add README
g -C "$work/src" commit -q -m "one commit"
g -C "$work/src" push -q "$work/repo.git" HEAD:refs/heads/main
want=$(git -C "$work/src" rev-parse HEAD)

note "git daemon under eta-run on $H:7130, git in the peer"
before=$(passive_opens)
start_bg daemon env ETA_LOG=${ETA_TEST_LOG:-fallback,accel} timeout 150 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    git daemon --export-all --base-path="$work" --reuseaddr --listen="$H" --port=7130 --informative-errors \
    2>"$work/daemon.log"
wait_until 20 peer timeout 5 git ls-remote "git://$H:7130/repo.git" ||
    { cat "$work/daemon.log"; fail "git daemon did not answer git ls-remote in 20 s"; }
for i in 1 2 3; do
    out=$(peer timeout 30 git ls-remote "git://$H:7130/repo.git" 2>"$work/client.err") ||
        { cat "$work/client.err" "$work/daemon.log"; fail "git ls-remote $i failed"; }
    grep -q "^$want[[:space:]]refs/heads/main$" <<<"$out" || { echo "$out"; fail "git ls-remote $i: no refs/heads/main at $want"; }
done
peer timeout 60 git clone -q "git://$H:7130/repo.git" "$work/clone" 2>"$work/client.err" ||
    { cat "$work/client.err" "$work/daemon.log"; fail "git clone failed"; }
[ "$(git -C "$work/clone" rev-parse HEAD)" = "$want" ] || fail "the clone is not at $want"
grep -qx "issue 35" "$work/clone/README" || fail "the clone's README differs"
wait_until 20 opens_reached $((before + 5)) ||
    fail "the PPE took $(($(passive_opens) - before)) connections, not 5 (the kernel served them?)"
grep "warning" "$work/daemon.log" | grep -v "every allowed CPU is a PPE engine core" &&
    { cat "$work/daemon.log"; fail "git daemon warned"; }
kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
note "git daemon: all passed"
