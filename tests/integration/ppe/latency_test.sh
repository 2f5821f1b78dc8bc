#!/usr/bin/env bash
# The latency breakdown (issue 33): an rr exchange through the lab (a kernel
# eta-perf client in the peer, a native eta-perf server under eta-ppe), then
# `eta-stat --latency --json` accounts for every engine stage of the sampled
# requests (counts > 0, every started trace ended one way or another), and
# the engine's share of a sampled request (stack + event + transmit, and the
# whole request frame in -> reply handed to the port) is no longer than the
# slowest round trip the client measured: a request's time in the engine is
# part of its round trip. Maxima are exact (not bucketed); the margin is the
# client's print precision (0.1 us) and the histograms' resolution (1/16), as
# the engine's clock is the TSC at the rate DPDK measured and the client's is
# CLOCK_MONOTONIC. No timing threshold. The text table and
# the Prometheus histograms are checked for their shape.
# The program's side (libdti's own TSC stamps, carried by the reply's SEND):
# the native server's stamps are usable (none refused), program_read /
# program_reply / program_taken have a sample for each, and their sums add
# up to the program stage's (exactly: both are sums of nanoseconds). The
# slow-request log (--latency --slow, text and JSON) lists requests whose
# stages add up to the request and are no longer than the client's slowest
# round trip.
#   latency_test.sh ETA_PPE ETA_STAT ETA_PERF
ETA_PPE=$1 ETA_STAT=$2 ETA_PERF=$3
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/ppe_lib.sh"
need_built "$ETA_PERF" eta-perf

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
# One in 8 frames: enough samples in a short exchange (the default is 64).
sed -i 's/^\[engine\]$/[engine]\nlatency_sample = 8/' "$work/ppe.toml"
grep -qx "latency_sample = 8" "$work/ppe.toml" || fail "cannot set latency_sample in the lab's config"
ppe_start "$work/ppe.toml"
export ETA_SOCKET=$ETA_LAB_SOCKET

[ "$(ppe_stat --latency --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sample_every"])')" = 8 ] ||
    fail "eta-stat --latency does not show latency_sample = 8: $(ppe_stat --latency --json)"

note "rr 64 B for 3 s: a kernel client in the peer, a native server under eta-ppe"
start_bg srv timeout 120 "$ETA_PERF" server --transport dti --port 5701 > "$work/srv.log"
wait_until 10 grep -q listening "$work/srv.log" || fail "the dti server did not listen"
peer timeout 60 "$ETA_PERF" client --transport kernel --connect "$ETA_LAB_PPE_IP" --port 5701 \
    --mode rr --size 64 --duration 3 --json > "$work/cli.json" || fail "the rr client failed: $(cat "$work/cli.json")"
ppe_stat --latency --json > "$work/lat.json" || fail "eta-stat --latency --json failed"
ppe_stat --latency > "$work/lat.txt" || fail "eta-stat --latency failed"
ppe_stat --latency --prometheus > "$work/lat.prom" || fail "eta-stat --latency --prometheus failed"
ppe_stat --latency --slow > "$work/slow.txt" || fail "eta-stat --latency --slow failed"
ppe_stat --latency --slow --json > "$work/slow.json" || fail "eta-stat --latency --slow --json failed"
cat "$work/lat.txt" "$work/slow.txt"
if ppe_stat --slow > "$work/noslow.txt" 2>&1; then fail "eta-stat --slow without --latency was accepted"; fi

python3 - "$work/cli.json" "$work/lat.json" "$work/lat.txt" "$work/lat.prom" "$work/slow.txt" "$work/slow.json" <<'PY' || fail "the breakdown does not account for the exchange"
import json, sys
cli = json.load(open(sys.argv[1]))
lat = json.load(open(sys.argv[2]))
text = open(sys.argv[3]).read()
prom = open(sys.argv[4]).read()
slow_text = open(sys.argv[5]).read()
slow = json.load(open(sys.argv[6]))
bad = []
tot = lat["total"]
st = tot["stages"]
client_max = max(v for q, v in cli["latency_us_quantiles"] if q == 1.0)
print(f"client: {cli['transactions']} transactions, p50 {cli['p50_us']} us, max {client_max} us")
print(f"traces {tot['traces']}, complete {tot['completed']}, no event {tot['no_event']}, no reply {tot['no_reply']}")
if cli["transactions"] <= 0:
    bad.append("the client made no transaction")
for s in ("stack", "event", "transmit", "port", "engine", "request"):
    if st[s]["count"] <= 0:
        bad.append(f"stage {s} has no sample")
prog = st["program_woken"]["count"] + st["program_spin"]["count"]
if prog <= 0:
    bad.append("no program stage (woken or spinning) sampled")
# Every trace ended one way: complete, no event, no reply (at most one in flight).
ended = tot["completed"] + tot["no_event"] + tot["no_reply"]
if not (tot["traces"] - 1 <= ended <= tot["traces"]):
    bad.append(f"{tot['traces']} traces started but {ended} ended")
# Complete traces have every stage once; program is woken xor spinning.
for s in ("transmit", "port", "engine", "request"):
    if st[s]["count"] != tot["completed"]:
        bad.append(f"stage {s} has {st[s]['count']} samples, {tot['completed']} traces completed")
if prog < tot["completed"]:
    bad.append(f"{prog} program samples for {tot['completed']} complete traces")
if st["program_woken"]["count"] != tot["woken"]:
    bad.append("program_woken's count is not the traces' woken count")
# The engine's share of one request is part of that request's round trip.
for s in ("engine", "request"):
    if st[s]["max_us"] > client_max * (1 + lat["resolution"]) + 0.1:
        bad.append(f"stage {s}: the slowest sampled request spent {st[s]['max_us']} us in the engine, "
                   f"more than the client's slowest round trip {client_max} us")
# The engine share is the sum of its stages: stack + event + transmit.
parts = sum(st[s]["sum_us"] for s in ("stack", "event", "transmit"))
# stack/event also hold traces that stopped before the reply: only >=.
if parts + 0.01 < st["engine"]["sum_us"]:
    bad.append(f"engine's sum {st['engine']['sum_us']} us exceeds its stages' {parts} us")
for s, v in st.items():
    if v["count"] and not (v["p50_us"] <= v["p90_us"] <= v["p99_us"] <= v["p999_us"] <= v["max_us"]):
        bad.append(f"stage {s}: percentiles out of order {v}")
for s in st:
    if not any(l.split()[:1] == [s] for l in text.splitlines()):
        bad.append(f"the text table lacks stage {s}")
if 'eta_latency_stage_seconds_bucket{engine="0",stage="request",le="+Inf"} ' + str(st["request"]["count"]) not in prom:
    bad.append("the Prometheus histogram's +Inf bucket is not the request count")
if "# TYPE eta_latency_stage_seconds histogram" not in prom:
    bad.append("no Prometheus histogram family")
# The program's own stamps (libdti): the native server stamps every reply it
# reads and sends through libdti; a trace whose reply went by a SEND queued
# before the read (coalesced) has none (missing), never an impossible one.
print(f"program stamps: usable {tot['program_stamped']}, missing {tot['program_missing']}, refused {tot['program_bad']}")
if tot["program_stamped"] <= 0:
    bad.append("no trace had the program's stamps")
if tot["program_bad"] != 0:
    bad.append(f"{tot['program_bad']} traces had refused program stamps (libdti's own)")
if tot["program_stamped"] + tot["program_missing"] + tot["program_bad"] < tot["completed"]:
    bad.append("complete traces not counted by their program stamps")
for s in ("program_read", "program_reply", "program_taken"):
    if st[s]["count"] != tot["program_stamped"]:
        bad.append(f"stage {s} has {st[s]['count']} samples, {tot['program_stamped']} traces stamped")
if st["program_wake"]["count"] > st["program_woken"]["count"]:
    bad.append("more program_wake samples than woken program stages")
split = sum(st[s]["sum_us"] for s in ("program_wake", "program_read", "program_reply", "program_taken"))
whole = st["program_woken"]["sum_us"] + st["program_spin"]["sum_us"]
# The split covers the stamped traces' program stages exactly (sums of ns).
if split > whole + 0.01 or (tot["program_missing"] == 0 and abs(split - whole) > 0.01):
    bad.append(f"the program's split sums to {split} us, its stage to {whole} us")
# The slow-request log.
reqs = slow["requests"]
if not reqs:
    bad.append("the slow-request log is empty")
if [r["request_us"] for r in reqs] != sorted((r["request_us"] for r in reqs), reverse=True):
    bad.append("the slow-request log is not slowest first")
if len(reqs) > 2 * slow["per_engine"]:
    bad.append(f"{len(reqs)} slow requests listed, more than two intervals of {slow['per_engine']}")
for r in reqs:
    t = r["stages_us"]
    prog = t.get("program_woken", 0) + t.get("program_spin", 0)
    total = t["stack"] + t["event"] + prog + t["transmit"]
    if abs(total - t["request"]) > 0.01:
        bad.append(f"slow request {r}: its stages sum to {total} us, not its {t['request']} us")
    if r["stamped"]:
        sp = sum(t.get(s, 0) for s in ("program_wake", "program_read", "program_reply", "program_taken"))
        if abs(sp - prog) > 0.01:
            bad.append(f"slow request {r}: the program's split sums to {sp} us, not {prog} us")
    if t["request"] > client_max * (1 + lat["resolution"]) + 0.1:
        bad.append(f"slow request of {t['request']} us: longer than the client's slowest round trip {client_max} us")
if "slowest sampled requests" not in slow_text or len(slow_text.splitlines()) < 2 + min(len(reqs), 1):
    bad.append("the --slow text lacks its table")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

kill "$srv_pid" 2>/dev/null || true
wait "$srv_pid" 2>/dev/null || true
ppe_stop
echo "PASS"
