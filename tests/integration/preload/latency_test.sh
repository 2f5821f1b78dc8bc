#!/usr/bin/env bash
# The latency breakdown of a program under the shim (issue 33): an unmodified
# Python echo server (blocking recv()/send(): the shim's receive view, its
# general receive that sleeps, its send view and dti_send_note()) under
# eta-run, a kernel Python rr client in the peer (64 B requests, each round
# trip timed). Then `eta-stat --latency --json`:
#   - the program's side is accounted for: its stamps are usable in sampled
#     requests (program_stamped > 0, none refused), and every complete trace
#     is counted by them; the shim's stamps of a read after a sleep give
#     program_wake samples; fewer traces lack the stamps than carry them
#     (missing: a read the engine's token had not reached yet, never the
#     shim's paths as such: without its stamps all would be missing);
#   - the program's split (wake + read + reply + taken) sums exactly to its
#     stage (both are sums of nanoseconds), also per slow request, and each
#     slow request's stages sum to its request time;
#   - the engine's request time (frame in -> reply to the port) of every
#     sampled request is no longer than the client's slowest round trip,
#     within the histograms' resolution (1/16) and the client's print
#     precision: a request's time in the engine is part of its round trip.
# No timing threshold: every verdict is about counts and sums.
#   latency_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_STAT" eta-stat
export ETA_PRELOAD_LIB=$SHIM

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
# One in 8 frames: enough samples in a short exchange (the default is 64).
sed -i 's/^\[engine\]$/[engine]\nlatency_sample = 8/' "$work/ppe.toml"
grep -qx "latency_sample = 8" "$work/ppe.toml" || fail "cannot set latency_sample in the lab's config"
ppe_start "$work/ppe.toml"

cat > "$work/echo.py" <<'PY'
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1])))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(4096)
    if not d:
        break
    c.sendall(d)
print("done", flush=True)
PY
cat > "$work/rr.py" <<'PY'
import json, socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((host, port), timeout=20)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"r" * 64
rtts = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    t0 = time.monotonic_ns()
    s.sendall(msg)
    got = 0
    while got < len(msg):
        d = s.recv(len(msg) - got)
        if not d:
            sys.exit("the server closed mid-exchange")
        got += len(d)
    rtts.append((time.monotonic_ns() - t0) / 1000.0)
s.close()
rtts.sort()
print(json.dumps({"transactions": len(rtts), "p50_us": rtts[len(rtts) // 2], "max_us": rtts[-1]}))
PY

note "rr 64 B for 3 s: a kernel Python client in the peer, a Python echo server under eta-run"
p_echo=$(free_port)   # the server binds INADDR_ANY: its kernel half is in the host namespace
start_bg srv env ETA_LOG=fallback timeout 120 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    python3 "$work/echo.py" "$p_echo" > "$work/srv.log" 2> "$work/srv.err"
wait_until 60 grep -q listening "$work/srv.log" || fail "the echo server did not listen: $(cat "$work/srv.err")"
peer timeout 60 python3 "$work/rr.py" "$ETA_LAB_PPE_IP" "$p_echo" 3 > "$work/cli.json" ||
    fail "the rr client failed: $(cat "$work/cli.json")"
wait_until 60 grep -q done "$work/srv.log" || fail "the echo server did not see the end: $(cat "$work/srv.err")"
ppe_stat --latency --json > "$work/lat.json" || fail "eta-stat --latency --json failed"
ppe_stat --latency > "$work/lat.txt" || fail "eta-stat --latency failed"
ppe_stat --latency --slow --json > "$work/slow.json" || fail "eta-stat --latency --slow --json failed"
cat "$work/lat.txt"

python3 - "$work/cli.json" "$work/lat.json" "$work/slow.json" <<'PY' || fail "the breakdown does not account for the shim program"
import json, sys
cli = json.load(open(sys.argv[1]))
lat = json.load(open(sys.argv[2]))
slow = json.load(open(sys.argv[3]))
bad = []
tot = lat["total"]
st = tot["stages"]
res = lat["resolution"]
print(f"client: {cli['transactions']} transactions, p50 {cli['p50_us']:.1f} us, max {cli['max_us']:.1f} us")
print(f"traces {tot['traces']}, complete {tot['completed']}, woken {tot['woken']}; program stamps: usable "
      f"{tot['program_stamped']}, missing {tot['program_missing']}, refused {tot['program_bad']}; "
      f"program_wake samples {st['program_wake']['count']}")
if cli["transactions"] <= 0:
    bad.append("the client made no transaction")
if tot["completed"] <= 0:
    bad.append("no complete trace")
if tot["program_stamped"] <= 0:
    bad.append("no trace had the program's stamps: the shim does not stamp")
if tot["program_bad"] != 0:
    bad.append(f"{tot['program_bad']} traces had refused program stamps")
if tot["program_missing"] >= tot["program_stamped"]:
    bad.append(f"{tot['program_missing']} traces lack the program's stamps, only {tot['program_stamped']} carry them")
if tot["program_stamped"] + tot["program_missing"] + tot["program_bad"] < tot["completed"]:
    bad.append("complete traces not counted by their program stamps")
for s in ("program_read", "program_reply", "program_taken"):
    if st[s]["count"] != tot["program_stamped"]:
        bad.append(f"stage {s} has {st[s]['count']} samples, {tot['program_stamped']} traces stamped")
if st["program_woken"]["count"] > 0 and st["program_wake"]["count"] <= 0:
    bad.append("the program slept in sampled requests but no read stamped its wakeup (program_wake)")
if st["program_wake"]["count"] > st["program_woken"]["count"]:
    bad.append("more program_wake samples than woken program stages")
split = sum(st[s]["sum_us"] for s in ("program_wake", "program_read", "program_reply", "program_taken"))
whole = st["program_woken"]["sum_us"] + st["program_spin"]["sum_us"]
if split > whole + 0.01 or (tot["program_missing"] == 0 and abs(split - whole) > 0.01):
    bad.append(f"the program's split sums to {split} us, its stage to {whole} us")
for s in ("engine", "request"):
    if st[s]["max_us"] > cli["max_us"] * (1 + res) + 0.1:
        bad.append(f"stage {s}: a sampled request spent {st[s]['max_us']} us in the engine, more than the "
                   f"client's slowest round trip {cli['max_us']:.1f} us")
reqs = slow["requests"]
if not reqs:
    bad.append("the slow-request log is empty")
if not any(r["stamped"] for r in reqs):
    bad.append("no slow request carries the program's stamps")
for r in reqs:
    t = r["stages_us"]
    prog = t.get("program_woken", 0) + t.get("program_spin", 0)
    if abs(t["stack"] + t["event"] + prog + t["transmit"] - t["request"]) > 0.01:
        bad.append(f"slow request {r}: its stages do not sum to its request time")
    if r["stamped"]:
        sp = sum(t.get(s, 0) for s in ("program_wake", "program_read", "program_reply", "program_taken"))
        if abs(sp - prog) > 0.01:
            bad.append(f"slow request {r}: the program's split sums to {sp} us, not {prog} us")
    if t["request"] > cli["max_us"] * (1 + res) + 0.1:
        bad.append(f"slow request of {t['request']} us: longer than the client's slowest round trip")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

kill "$srv_pid" 2>/dev/null || true
wait "$srv_pid" 2>/dev/null || true
ppe_stop
echo "PASS"
