#!/usr/bin/env bash
# The native examples end to end: dti-echo-server and dti-echo-client attach
# to a fixture engine (dti-test-engine, loopback transport) and echo data.
set -euo pipefail
engine_bin=$1 server_bin=$2 client_bin=$3
dir=$(mktemp -d /tmp/dti-examples.XXXXXX)
sock=$dir/ppe.sock
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

# Ready when the engine says so (--ready-fd), not when its socket file exists.
"$engine_bin" --socket "$sock" --ready-fd 3 3>"$dir/ready" > "$dir/engine.out" 2>&1 &
pids+=($!)
# Bounded waits by wall time (SECONDS), far above any honest start on a busy machine.
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do grep -qx READY "$dir/ready" && break; sleep 0.05; done
grep -qx READY "$dir/ready" || { echo "engine did not become ready"; cat "$dir/engine.out"; exit 1; }

timeout 90 "$server_bin" --socket "$sock" --port 7007 --count 3 > "$dir/server.out" 2>&1 &
server=$!
pids+=($server)
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do grep -q listening "$dir/server.out" && break; sleep 0.05; done
grep -q listening "$dir/server.out" || { echo "server did not start"; cat "$dir/server.out"; exit 1; }

timeout 30 "$client_bin" --socket "$sock" --port 7007 --messages 200 --size 3000
timeout 30 "$client_bin" --socket "$sock" --port 7007 --messages 10 --size 100000
timeout 30 "$client_bin" --socket "$sock" --port 7007 --messages 1 --size 1
# Nothing listens on 7008: a clear refusal, not a hang (nor a client that
# failed for another reason).
rc=0
out=$(timeout 30 "$client_bin" --socket "$sock" --port 7008 --messages 1 2>&1) || rc=$?
[ $rc -ne 0 ] || { echo "connect to a closed port succeeded?"; exit 1; }
[ $rc -ne 124 ] || { echo "connect to a closed port hung"; exit 1; }
echo "$out" | grep -c "Connection refused" >/dev/null || { echo "unexpected (rc $rc): $out"; exit 1; }
wait "$server"
grep -q "served 3 connections" "$dir/server.out" || { cat "$dir/server.out"; exit 1; }
echo "examples: ok"
