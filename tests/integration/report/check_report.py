#!/usr/bin/env python3
"""Checks a report directory written by `tools/eta bench report`.
   check_report.py OUT ABLATION_BUILT(yes|no) SHIM_BENCH(yes|no)"""
import json
import os
import struct
import sys
import zlib

out, ablation, shim = sys.argv[1], sys.argv[2] == "yes", sys.argv[3] == "yes"
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def valid_png(path):
    """Signature, every chunk's CRC, IHDR first with a non-zero size, IDAT
    that inflates, IEND last."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "no PNG signature"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        if pos + 8 > len(data):
            return "truncated chunk header"
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = data[pos + 8 + n:pos + 12 + n]
        if len(body) != n or len(crc) != 4 or struct.unpack(">I", crc)[0] != zlib.crc32(kind + body):
            return f"bad chunk {kind!r}"
        chunks.append(kind)
        if kind == b"IDAT":
            idat += body
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
            if not (w and h):
                return "zero size"
        pos += 12 + n
    if not chunks or chunks[0] != b"IHDR" or chunks[-1] != b"IEND":
        return "IHDR/IEND missing"
    try:
        zlib.decompress(idat)
    except zlib.error as e:
        return f"image data does not inflate: {e}"
    return None


page = open(os.path.join(out, "index.html")).read()
res = json.load(open(os.path.join(out, "results.json")))
sections = {s["id"]: s for s in res["sections"]}

expected = {"mars": "ok", "ablation": "ok" if ablation else "not_available", "fastpath": "ok", "dti": "ok",
            "shim": "ok" if shim else "not_available", "ppe": "ok", "latency": "ok", "programs": "ok",
            "scaling": "ok"}
for sid, status in expected.items():
    check(f"<section id='{sid}'" in page, f"section {sid} missing from index.html")
    s = sections.get(sid)
    check(s is not None, f"section {sid} missing from results.json")
    if s:
        check(s["status"] == status, f"section {sid}: status {s['status']}, expected {status}: {s.get('error')}")
        if status == "not_available":
            check("not available" in page.split(f"<section id='{sid}'")[1].split("</section>")[0].lower(),
                  f"section {sid} does not say it is not available")

for key in ("cpu_model", "cores", "kernel", "dpdk_device", "mtu", "commit", "date"):
    check(res["machine"].get(key) not in (None, ""), f"machine info lacks {key}")
check(not res["machine"]["dpdk_device"].startswith("unknown"), "the DPDK device was not recorded")
for label in ("CPU", "cores", "kernel", "DPDK device", "MTU", "commit", "date"):
    check(f"<td>{label}" in page, f"the page does not show {label}")

plots = [p for s in res["sections"] for p in (s.get("plots") or [])]
pngs = sorted(f for f in os.listdir(out) if f.endswith(".png"))
check(sorted(plots) == pngs, f"PNG files {pngs} differ from the plots results.json lists {sorted(plots)}")
for sid in ("mars", "fastpath", "dti", "ppe", "latency", "programs", "scaling"):
    check(sections.get(sid, {}).get("plots"), f"section {sid} has no plot")
for p in pngs:
    why = valid_png(os.path.join(out, p))
    check(why is None, f"{p} is not a valid PNG: {why}")
    check(f"data-file='{p}'" in page, f"{p} is not on the page")

# Every figure: a unit and, per series, a value and a noise estimate.
figs = {f["id"]: f for f in res["figures"]}
for f in res["figures"]:
    check(f.get("unit"), f"figure {f['id']} has no unit")
    for name, s in f["series"].items():
        check(isinstance(s["value"], (int, float)), f"{f['id']}/{name}: no value")
        check("noise" in s, f"{f['id']}/{name}: no noise estimate")
        check(len(s["samples"]) >= 2 or s["noise"] == 0, f"{f['id']}/{name}: one sample and not deterministic")
    if f["side_by_side"]:
        check({"eta", "kernel"} <= set(f["series"]), f"side-by-side figure {f['id']} lacks eta or kernel")
side_by_side = [
    "ppe.stream send 64 KiB.gbit_per_s", "ppe.stream recv 64 KiB.gbit_per_s", "ppe.rr 64 B.tps", "ppe.rr 4 KiB.tps",
    "ppe.crr 64 B.tps", "ppe.rr 64 B.p50_us", "ppe.rr 64 B.p99_us", "ppe.rr 64 B.cpu_us_per_txn",
    "ppe.stream recv 64 KiB.cpu_s_per_gib", "programs.p50_us", "programs.p99_us", "programs.recv_gbit_per_s",
    "programs.server_cpu_s_per_gib"]
for fid in side_by_side:
    f = figs.get(fid)
    check(f is not None and f["side_by_side"] and {"eta", "kernel"} <= set(f["series"]),
          f"figure {fid} lacks eta and kernel values")
check(figs.get("fastpath.no_timestamps.instructions_per_segment", {}).get("series", {}).get("value", {})
      .get("noise") == 0, "the fast-path instruction count is not marked deterministic")
check(any(k.startswith("mars.BM_RxData") for k in figs), "no MARS RxData figure")
check("dti.round_trip_ns" in figs, "no DTI round-trip figure")
# The latency breakdown (eta-stat --latency --json of the eta-perf section's
# PPE): a row per stage along the request's path, then the request's own;
# p50 <= p99 in every row; complete traces were sampled.
lat_page = page.split("<section id='latency'")[1].split("</section>")[0] if "<section id='latency'" in page else ""
stages_shown = [r.split("</td>")[0] for r in lat_page.split("<tr><td>")[1:]]
check(stages_shown[:2] == ["stack", "event"] and stages_shown[-1] == "request" and
      any(s.startswith("program") for s in stages_shown) and {"transmit", "port"} <= set(stages_shown),
      f"the latency breakdown's table lists {stages_shown}")
for row in lat_page.split("<tr><td>")[1:]:
    cells = [c.split("</td>")[0] for c in ("<td>" + row).split("<td>")[1:]]
    if len(cells) == 7 and cells[2].isdigit():
        check(float(cells[3]) <= float(cells[5]), f"latency breakdown row {cells[0]}: p50 {cells[3]} > p99 {cells[5]}")
check("complete traces" in lat_page and " 0 complete traces" not in lat_page,
      "the latency breakdown does not say how many complete traces it holds")

# The summary opens the page: every headline measured, its ratio eta/kernel
# recomputed here from the figures it names, its verdict the goal's.
summ = res.get("summary") or []
check(len(summ) >= 11, f"results.json's summary has {len(summ)} headlines, expected 11")
check("<section id='summary'" in page and page.index("<section id='summary'") < page.index("What ran where"),
      "the page does not open with the summary")
for r in summ:
    eta = sum(figs[f]["series"]["eta"]["value"] for f in r["figures"] if f in figs)
    kern = sum(figs[f]["series"].get("kernel", {}).get("value", 0) for f in r["figures"] if f in figs)
    check(all(f in figs for f in r["figures"]), f"summary '{r['label']}' names a figure the run lacks")
    check(r["ratio"] is not None and kern and abs(r["ratio"] - eta / kern) < 1e-9 * max(1, eta / kern),
          f"summary '{r['label']}': ratio {r['ratio']} is not eta/kernel of its figures ({eta}/{kern})")
    if r["ratio"] is not None:
        want = r["ratio"] <= r["goal"] if r["better"] == "lower" else r["ratio"] >= r["goal"]
        check(r["met"] == want, f"summary '{r['label']}': met={r['met']} contradicts ratio {r['ratio']:.3f} "
              f"and goal {r['goal']}")
        check(f"{r['ratio']:.2f}×" in page, f"summary '{r['label']}': its ratio is not on the page")

if errors:
    print("FAIL:\n  " + "\n  ".join(errors))
    sys.exit(1)
print(f"report ok: {len(sections)} sections, {len(pngs)} PNGs, {len(figs)} figures")
