#!/usr/bin/env bash
# eta-stat's machine-readable outputs from a real eta-ppe carrying traffic:
# `--prometheus` parsed by the Prometheus client's text parser and `--json`
# by Python's json must agree with each other and show the traffic; with
# `--output FILE --watch` the file is replaced whole and removed once
# eta-ppe is gone.
#   eta_stat_test.sh ETA_PPE ETA_STAT ETA_PERF
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
ETA_PPE=$1 ETA_STAT=$2 PERF=$3
. "$here/../ppe/ppe_lib.sh"
py=/usr/bin/python3
[ -x $py ] || py=python3

lab_up
work=$(mktemp -d)
on_exit "rm -rf $work"
ppe_config
ppe_start "$work/ppe.toml"
start_bg srv ip netns exec "$ETA_LAB_NS" timeout 300 "$PERF" server --transport kernel --port 5601
wait_until 10 peer bash -c "ss -ltn | grep -c ':5601' >/dev/null" || fail "peer eta-perf server did not listen"

note "traffic through the PPE (eta-perf rr over DTI, 1 s)"
ETA_SOCKET=$ETA_LAB_SOCKET timeout 60 "$PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5601 \
    --mode rr --size 64 --duration 1 --json > "$work/perf.json" || fail "eta-perf client failed"

note "a stream received through the PPE in 1 MiB reads (eta-perf posts them: the engine writes into its memory)"
rx0=$(ppe_json "sum(s['rx_bytes'] for e in d['engines'] for s in e['stacks'])")
ETA_SOCKET=$ETA_LAB_SOCKET timeout 60 "$PERF" client --transport dti --connect "$ETA_LAB_PEER_IP" --port 5601 \
    --mode stream --direction recv --size 1048576 --bytes 67108864 --verify --json > "$work/recv.json" ||
    fail "eta-perf stream recv failed"
# The engine publishes its counters every 10 ms while it works and when it
# naps: wait until they show the stream's bytes received (past the work and
# the posts it made), so every snapshot below, in every format, is too.
wait_until 20 ppe_true "sum(s['rx_bytes'] for e in d['engines'] for s in e['stacks']) >= $rx0 + (64 << 20)" ||
    fail "eta-stat counts $(($(ppe_json "sum(s['rx_bytes'] for e in d['engines'] for s in e['stacks'])") - rx0)) bytes received for the stream of $((64 << 20))"
ppe_stat > "$work/now.txt" || fail "eta-stat failed"
grep -Eq '^posted receives e0: posts [1-9][0-9]*  bytes [1-9][0-9]*  fallbacks 0  faults 0$' "$work/now.txt" ||
    fail "eta-stat's text shows no posted receives: $(grep -i posted "$work/now.txt")"

note "--prometheus and --json of the same PPE"
start_bg watcher timeout 120 "$ETA_STAT" --socket "$ETA_LAB_SOCKET" --prometheus --watch 0.2 --output "$work/eta.prom"
wait_until 10 test -s "$work/eta.prom" || fail "eta-stat --output did not write $work/eta.prom"
ppe_stat --prometheus > "$work/now.prom" || fail "eta-stat --prometheus failed"
ppe_stat --json > "$work/now.json" || fail "eta-stat --json failed"
$py - "$work/now.prom" "$work/now.json" "$work/eta.prom" "$work/perf.json" <<'PY'
import json, sys
from prometheus_client.parser import text_string_to_metric_families
prom_text, snap, watched, perf = (open(sys.argv[1]).read(), json.load(open(sys.argv[2])), open(sys.argv[3]).read(),
                                  json.load(open(sys.argv[4])))
fams = {f.name: f for f in text_string_to_metric_families(prom_text)}
def one(name, **labels):
    s = [x for x in fams[name].samples if all(x.labels.get(k) == v for k, v in labels.items())]
    assert len(s) == 1, f"{name} {labels}: {len(s)} samples"
    return s[0]
errors = []
def check(c, msg):
    if not c: errors.append(msg)
check(one("eta_ppe_info").labels["pid"] == str(snap["pid"]), "ppe pid differs between the formats")
check(one("eta_ppe_info").labels["state"] == "running", "PPE not running")
eng = snap["engines"][0]
rx = one("eta_engine_rx_packets", engine="0").value
check(rx > 0, "no received packets after traffic")
check(rx <= eng["rx_packets"], "rx packets: the earlier --prometheus snapshot counts more than the later --json")
check(fams["eta_engine_rx_packets"].type == "counter", "rx packets not a counter")
check(one("eta_stack_tcp_established", engine="0", port="0").value >= 1, "no established connection counted")
check(one("eta_stack_drops", engine="0", port="0", reason="tcp_csum").value == eng["stacks"][0]["drop_tcp_csum"],
      "tcp_csum drops differ")
port = snap["ports"][0]
info = one("eta_port_info", port="0")
check(info.labels["device"] == port["device"] and info.labels["address"] == port["address"], "port identity differs")
check(one("eta_port_mtu_bytes", port="0").value == port["mtu"], "MTU differs")
check(perf["transactions"] > 0, "eta-perf made no transactions")
posted = sum(e["posted_bytes"] for e in snap["engines"])
check(sum(e["posts"] for e in snap["engines"]) > 0 and posted >= 1 << 20, "no posted receive counted after the recv stream")
check(one("eta_engine_posted_bytes", engine="0").value == eng["posted_bytes"], "posted bytes differ between the formats")
check(one("eta_engine_post_faults", engine="0").value == 0, "a posted receive faulted")
for line in prom_text.splitlines():
    if line.startswith("eta_"):
        name = line.split("{")[0].split()[0]
        base = name[:-6] if name.endswith("_total") else name
        check(base in fams or name in fams, f"sample {name} outside a family")
wf = {f.name for f in text_string_to_metric_families(watched)}
check(set(fams) == wf, "the --output file does not hold the same families")
if errors:
    sys.exit("FAIL: " + "; ".join(errors))
print(f"{len(fams)} metric families agree with the JSON snapshot; rx {int(rx)} packets")
PY

note "the --output file goes away with eta-ppe"
ppe_stop
wait_until 10 bash -c "! test -e '$work/eta.prom'" ||
    { ls -la "$work" >&2; ps -o pid,stat,args -p "$watcher_pid" >&2 || true; fail "eta-stat left $work/eta.prom behind after eta-ppe stopped"; }
wait_until 10 bash -c "! kill -0 $watcher_pid" || fail "eta-stat --watch did not exit after eta-ppe stopped"
ls "$work" | grep -c '\.tmp\.' >/dev/null && fail "eta-stat left a temporary file behind"
echo PASS
