#!/usr/bin/env python3
"""benchmarks/report: every benchmark of the project in one run, one page.

  report.py run --build DIR --out DIR [--quick]
      runs each benchmark (a failed one is recorded with its error; the rest
      still run) and writes OUT/index.html (self-contained, no network),
      OUT/*.png (matplotlib) and OUT/results.json (every figure with its
      unit, its samples and a noise estimate from the repetitions).
  report.py compare A.json B.json
      per figure and series: both values, B/A, and whether the change is
      beyond the noise measured for that figure.

Reports numbers; asserts nothing. Called by `tools/eta bench report` and
`tools/eta bench compare`.

(~900 lines in one file, over the tree's ~800: one pipeline, run -> plot ->
page, whose sections share the Results type and follow the page's order; the
benchmarks (the bench_* functions) are the seam to split on if it grows.)
"""
import argparse
import base64
import datetime
import html
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = 1

# Published anchors drawn as reference lines, each with its source.
ANCHOR_CLARK = (186, "Clark et al. 1989 (seed 002): 186 instructions per segment")
ANCHOR_JACOBSON = (100, "Jacobson: < 100 instructions per segment")
ANCHOR_ETA_HOST_CPU = (20, "ETA prototype (seed 003, Fig. 5): host CPU < 20% when sending")

ABLATION_CONFIGS = ["rtc", "prefetch", "strands", "async_copy", "all"]


class Failed(Exception):
    """A benchmark could not produce its numbers; the message says why."""


def run_cmd(cmd, timeout, env=None, cwd=ROOT):
    """Runs a command; returns stdout or raises Failed with its stderr tail."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    except OSError as e:
        raise Failed(f"cannot run {cmd[0]}: {e}")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: a benchmark takes its labs and eta-ppe down on it (a
        # SIGKILL left the scaling section's labs up); SIGKILL if it does not go.
        p.terminate()
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        raise Failed(f"{' '.join(cmd)} did not finish within {timeout} s")
    if p.returncode != 0:
        tail = "\n".join((err + out).strip().splitlines()[-25:])
        raise Failed(f"{' '.join(cmd)} exited with {p.returncode}:\n{tail}")
    return out


# ---- figures ---------------------------------------------------------------


class Results:
    """Every number of the run. A figure has a unit, which way is better, and
    one or more series (eta and kernel side by side, or a single value), each
    with its samples (one per repetition) and a noise estimate."""

    def __init__(self):
        self.figures = []
        self.by_id = {}

    def add(self, fid, section, label, unit, better, series, deterministic=False):
        """series: {name: [samples]}. Noise: the coefficient of variation of
        the samples (0 for deterministic counts; None from one sample)."""
        fig = {"id": fid, "section": section, "label": label, "unit": unit, "better": better,
               "side_by_side": "eta" in series and "kernel" in series, "series": {}}
        for name, samples in series.items():
            samples = [float(s) for s in samples if s is not None]
            if not samples:
                continue
            mean = statistics.fmean(samples)
            if deterministic:
                noise = 0.0
            elif len(samples) >= 2 and mean != 0:
                noise = statistics.stdev(samples) / abs(mean)
            else:
                noise = None
            fig["series"][name] = {"value": mean, "samples": samples, "noise": noise}
        if not fig["series"]:
            return None
        if fid in self.by_id:
            raise Failed(f"internal error: figure {fid} recorded twice")
        self.figures.append(fig)
        self.by_id[fid] = fig
        return fig

    def value(self, fid, series="value"):
        f = self.by_id.get(fid)
        return f["series"][series]["value"] if f and series in f["series"] else None


# ---- plotting ----------------------------------------------------------------


def plt():
    try:
        import matplotlib
    except ImportError:
        raise Failed(f"matplotlib cannot be imported by {sys.executable}: install Debian's python3-matplotlib "
                     "(tools/eta setup) and run this with Debian's /usr/bin/python3")
    matplotlib.use("Agg")
    import matplotlib.pyplot as p
    return p


COLORS = {"eta": "#1f77b4", "kernel": "#7f7f7f", "engine": "#aec7e8"}


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt().close(fig)
    return name


def grouped_bars(out, name, title, ylabel, groups, series, values, errors=None, ref_lines=(), log=False):
    """values[s][g]: bar height of series s in group g (None: no bar)."""
    p = plt()
    fig, ax = p.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [values[s][g] if values[s][g] is not None else 0 for g in range(len(groups))]
        err = [errors[s][g] or 0 for g in range(len(groups))] if errors else None
        ax.bar(xs, ys, width, label=s, color=COLORS.get(s), yerr=err, capsize=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
    for (y, text), style in zip(ref_lines, ["--", ":", "-."]):
        ax.axhline(y, linestyle=style, color="#d62728", linewidth=1.2, label=text)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save(fig, out, name)


def cdf_plot(out, name, title, dists):
    """dists: {series: [[quantile, µs], ...]}. Left: CDF, log x. Right: the
    tail as 1 - F on log-log axes."""
    p = plt()
    fig, (a1, a2) = p.subplots(1, 2, figsize=(10, 4))
    for s, qs in dists.items():
        if not qs:
            continue
        q = [x[0] for x in qs]
        v = [max(x[1], 1e-3) for x in qs]
        a1.plot(v, q, label=s, color=COLORS.get(s), marker=".")
        tail = [(vv, 1 - qq) for qq, vv in zip(q, v) if qq < 1]
        a2.plot([t[0] for t in tail], [t[1] for t in tail], label=s, color=COLORS.get(s), marker=".")
    a1.set_xscale("log")
    a1.set_xlabel("latency (µs, log)")
    a1.set_ylabel("fraction of requests ≤ x")
    a1.set_title(title + ": CDF")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("latency (µs, log)")
    a2.set_ylabel("fraction slower than x (log)")
    a2.set_title("tail")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    return save(fig, out, name)


def stacked_cpu(out, name, title, ylabel, groups, app, engine, kernel):
    """Per group: eta's bar (application + engine stacked) beside the kernel's."""
    p = plt()
    fig, ax = p.subplots(figsize=(8, 4))
    xs = range(len(groups))
    w = 0.38
    eta_x = [x - w / 2 for x in xs]
    ax.bar(eta_x, [a or 0 for a in app], w, label="eta: application", color=COLORS["eta"])
    ax.bar(eta_x, [e or 0 for e in engine], w, bottom=[a or 0 for a in app], label="eta: engine (eta-ppe)",
           color=COLORS["engine"], hatch="//")
    ax.bar([x + w / 2 for x in xs], [k or 0 for k in kernel], w, label="kernel link: application",
           color=COLORS["kernel"])
    ax.set_xticks(list(xs))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save(fig, out, name)


# ---- machine -------------------------------------------------------------------


def machine_info():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = "unknown"
    try:
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"cpu_model": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "load_average": os.getloadavg()[0], "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "dpdk_device": "unknown (the eta-perf benchmark did not run)", "mtu": None}


# ---- the benchmarks ----------------------------------------------------------------
#
# Each returns a section dict: text (short, plain), table (rows), plots; it
# adds its figures to `res`. Raising Failed (or anything) marks it failed.


def gbench_json(stdout):
    try:
        return json.loads(stdout)["benchmarks"]
    except (ValueError, KeyError) as e:
        raise Failed(f"Google Benchmark output is not JSON: {e}")


def bench_mars(ctx, res):
    binary = os.path.join(ctx.build, "benchmarks/mars/mars_bench")
    if not os.path.exists(binary):
        raise Failed(f"{binary} is not built (tools/eta build)")
    reps = 2 if ctx.quick else 3
    cmd = [binary, "--benchmark_format=json", f"--benchmark_repetitions={reps}",
           f"--benchmark_min_time={0.01 if ctx.quick else 0.2}"]
    if ctx.quick:  # one of each kind (1M connections take ~10 s of setup each; 10,000 several)
        cmd.append("--benchmark_filter=^(BM_RxData/csum_offloaded:0/ts:0|BM_RxPureAck|BM_TxSegments/csum_offloaded:0|"
                   "BM_Lookup/conns:1/spread:0)/")
    runs = gbench_json(run_cmd(cmd, 900))
    samples = {}
    for b in runs:
        if b.get("run_type") != "iteration" or "items_per_second" not in b:
            continue
        samples.setdefault(b["run_name"], []).append(1e9 / b["items_per_second"])
    rows, names = [], []
    for name, ns in samples.items():
        fig = res.add(f"mars.{name}.ns_per_frame", "mars", f"{name}: time per frame", "ns", "lower",
                      {"value": ns})
        names.append(name)
        noise = fig["series"]["value"]["noise"]
        rows.append([name, f"{fig['series']['value']['value']:.1f}", f"{1e3 / fig['series']['value']['value']:.1f}",
                     fmt_noise(noise)])
    p = plt()
    fig, ax = p.subplots(figsize=(9, 0.35 * len(names) + 1.2))
    vals = [res.value(f"mars.{n}.ns_per_frame") for n in names]
    errs = [statistics.stdev(samples[n]) if len(samples[n]) > 1 else 0 for n in names]
    ax.barh(range(len(names)), vals, xerr=errs, color=COLORS["eta"], capsize=2)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ns per frame (log; mean of %d repetitions, bar = stdev)" % reps)
    ax.set_title("MARS microbenchmarks (test fixture, in process)")
    plot = save(fig, ctx.out, "mars_micro.png")
    return {"text": f"`{' '.join(os.path.relpath(c, ROOT) if c.startswith('/') else c for c in cmd)}`. "
                    "Time per frame from items_per_second; bursts of 32 frames; see benchmarks/README.md.",
            "table": [["benchmark", "ns/frame", "M frames/s", "noise"]] + rows, "plots": [plot]}


def bench_ablation(ctx, res):
    binary = os.path.join(ctx.build, "benchmarks/mars/mars_ablation")
    if not os.path.exists(binary):
        return {"status": "not_available",
                "text": f"Not available in this build: {os.path.relpath(binary, ROOT)} is not built "
                        "(the latency-hiding ablation benchmark is not in this tree yet)."}
    reps = 2 if ctx.quick else 3
    cmd = [binary, "--benchmark_format=json", f"--benchmark_repetitions={reps}"]
    if ctx.quick:
        # 1 against 10,000 connections (the cache misses the techniques hide), full-size segments only.
        cmd += ["--benchmark_filter=^BM_RxAblation/[a-z_]+/(1|10000)/1460$", "--benchmark_min_time=0.02"]
    runs = gbench_json(run_cmd(cmd, 900))
    samples = {}
    for b in runs:
        if b.get("run_type") != "iteration" or "ns_per_frame" not in b:
            continue
        parts = b["run_name"].split("/")
        if len(parts) < 4:
            continue
        samples.setdefault((parts[1], parts[2], parts[3]), []).append(b["ns_per_frame"])
    if not samples:
        raise Failed("mars_ablation reported no BM_RxAblation/<config>/<connections>/<bytes> with ns_per_frame")
    configs = [c for c in ABLATION_CONFIGS if any(k[0] == c for k in samples)]
    configs += sorted({k[0] for k in samples} - set(configs))
    groups = sorted({(int(k[1]), int(k[2])) for k in samples})
    values, errors, rows = {}, {}, []
    for c in configs:
        values[c], errors[c] = [], []
        for conns, size in groups:
            s = samples.get((c, str(conns), str(size)))
            if not s:
                values[c].append(None)
                errors[c].append(None)
                continue
            f = res.add(f"ablation.{c}.{conns}.{size}.ns_per_frame", "ablation",
                        f"ablation {c}, {conns} connections, {size} B segments", "ns", "lower", {"value": s})
            values[c].append(f["series"]["value"]["value"])
            errors[c].append(statistics.stdev(s) if len(s) > 1 else 0)
            rows.append([c, str(conns), str(size), f"{values[c][-1]:.1f}", fmt_noise(f["series"]["value"]["noise"])])
    labels = [f"{n:,} conns\n{b} B" for n, b in groups]
    p = plt()
    fig, ax = p.subplots(figsize=(10, 4))
    width = 0.8 / len(configs)
    cmap = p.get_cmap("viridis")
    for i, c in enumerate(configs):
        xs = [g + (i - (len(configs) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v or 0 for v in values[c]], width, yerr=[e or 0 for e in errors[c]], capsize=2, label=c,
               color=cmap(i / max(1, len(configs) - 1)))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("ns per frame")
    ax.set_title("MARS receive path: latency-hiding techniques (after seed 003, Fig. 11)")
    ax.legend(fontsize=8, ncol=len(configs))
    plot = save(fig, ctx.out, "mars_ablation.png")
    return {"text": f"`{os.path.relpath(binary, ROOT)}`, counter ns_per_frame, {reps} repetitions.",
            "table": [["config", "connections", "segment B", "ns/frame", "noise"]] + rows, "plots": [plot]}


FUNC_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*)$")


def bench_fastpath(ctx, res):
    script = os.path.join(ROOT, "benchmarks/mars/fastpath-instructions")
    n = 200 if ctx.quick else 1000  # a count per segment: n changes only how long callgrind runs
    results, where = {}, {}
    for ts in (False, True):
        cmd = [script, "--build", ctx.build, "-n", str(n), "--verbose"] + (["--ts"] if ts else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        if r.returncode != 0:
            raise Failed(f"{' '.join(cmd)} exited with {r.returncode}:\n" + "\n".join(r.stderr.splitlines()[-20:]))
        m = re.search(r"^(\d+) instructions per segment$", r.stdout, re.M)
        c = re.search(r"payload copy (\d+), buffer owner's PacketIo (\d+)", r.stdout)
        if not m:
            raise Failed("fastpath-instructions did not end with 'N instructions per segment':\n" + r.stdout)
        key = "timestamps" if ts else "no_timestamps"
        results[key] = (int(m.group(1)), int(c.group(1)) if c else None, int(c.group(2)) if c else None)
        if not ts:  # the function table of the first run: where the instructions go
            for line in r.stderr.splitlines():
                f = FUNC_LINE.match(line)
                if f and "PROGRAM TOTALS" not in line:
                    fn = f.group(2).split(":", 1)[-1]
                    fn = re.sub(r"\(.*", "", fn).split(" [")[0]
                    where[fn] = where.get(fn, 0) + int(f.group(1).replace(",", "")) / n
    rows = []
    for key, (count, copy, owner) in results.items():
        res.add(f"fastpath.{key}.instructions_per_segment", "fastpath",
                f"receive fast path, {key.replace('_', ' ')}: instructions per segment", "instructions", "lower",
                {"value": [count]}, deterministic=True)
        rows.append([key.replace("_", " "), str(count), str(copy), str(owner)])
    groups = ["TCP, no timestamps", "TCP, timestamps"]
    vals = {"eta (MARS)": [results["no_timestamps"][0], results["timestamps"][0]]}
    plots = [grouped_bars(ctx.out, "fastpath.png", "Receive fast path: instructions per segment (callgrind)",
                          "instructions per segment", groups, list(vals), vals,
                          ref_lines=[ANCHOR_CLARK, ANCHOR_JACOBSON])]
    if where:
        top = sorted(where.items(), key=lambda kv: -kv[1])[:12]
        p = plt()
        fig, ax = p.subplots(figsize=(8, 0.3 * len(top) + 1.2))
        ax.barh(range(len(top)), [v for _, v in top], color=COLORS["eta"])
        ax.set_yticks(range(len(top)))
        ax.set_yticklabels([k[:70] for k, _ in top], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("instructions per segment (self cost; the copy and the fixture's PacketIo included here)")
        ax.set_title("Where the fast path's instructions go (no timestamps)")
        plots.append(save(fig, ctx.out, "fastpath_where.png"))
    return {"text": f"`benchmarks/mars/fastpath-instructions -n {n} [--ts]`: callgrind, deterministic (noise 0). "
                    "The payload copy and the frames' owner are not counted in the total. Target ≤ 100.",
            "table": [["mode", "instructions/segment", "payload copy (not counted)", "PacketIo (not counted)"]] + rows,
            "plots": plots}


def bench_dti(ctx, res):
    binary = os.path.join(ctx.build, "benchmarks/dti/dti_bench")
    if not os.path.exists(binary):
        raise Failed(f"{binary} is not built")
    reps = 2 if ctx.quick else 3
    iters = "20000" if ctx.quick else "200000"
    pp, rtt, ratio, signal = [], [], [], {}
    for _ in range(reps):
        out = run_cmd([binary, "--iters", iters], 300)
        m1 = re.search(r"ping-pong round trip: ([\d.]+) ns", out)
        m2 = re.search(r"DTI NOP command->completion round trip: ([\d.]+) ns", out)
        if not (m1 and m2):
            raise Failed("dti_bench output not understood:\n" + out)
        pp.append(float(m1.group(1)))
        rtt.append(float(m2.group(1)))
        ratio.append(rtt[-1] / pp[-1])
        for m in re.finditer(r"^\s+(\S+)\s+batch (\d+)\s+([\d.]+) req/s\s+([\d.]+) cmds/doorbell\s+([\d.]+) wakeups/req",
                             out, re.M):
            k = (m.group(1), m.group(2))
            signal.setdefault(k, {"cmds": [], "wakes": []})
            signal[k]["cmds"].append(float(m.group(4)))
            signal[k]["wakes"].append(float(m.group(5)))
    res.add("dti.pingpong_ns", "dti", "bare cache-line ping-pong round trip", "ns", "lower", {"value": pp})
    res.add("dti.round_trip_ns", "dti", "DTI NOP command → completion round trip", "ns", "lower", {"value": rtt})
    res.add("dti.ratio", "dti", "DTI round trip / ping-pong (target ≤ 2)", "ratio", "lower", {"value": ratio})
    rows = [["ping-pong round trip", f"{statistics.fmean(pp):.0f} ns", fmt_noise(res.by_id['dti.pingpong_ns']['series']['value']['noise'])],
            ["DTI round trip", f"{statistics.fmean(rtt):.0f} ns", fmt_noise(res.by_id['dti.round_trip_ns']['series']['value']['noise'])],
            ["ratio (target ≤ 2×)", f"{statistics.fmean(ratio):.2f}", fmt_noise(res.by_id['dti.ratio']['series']['value']['noise'])]]
    for (rate, batch), v in signal.items():
        res.add(f"dti.signal.{rate}.b{batch}.cmds_per_doorbell", "dti", f"{rate} batch {batch}: commands per doorbell",
                "commands", "higher", {"value": v["cmds"]})
        res.add(f"dti.signal.{rate}.b{batch}.wakeups_per_request", "dti", f"{rate} batch {batch}: wakeups per request",
                "wakeups", "lower", {"value": v["wakes"]})
        rows.append([f"load {rate}, batch {batch}", f"{statistics.fmean(v['cmds']):.2f} cmds/doorbell",
                     f"{statistics.fmean(v['wakes']):.3f} wakeups/req"])
    vals = {"ping-pong": [statistics.fmean(pp)], "DTI round trip": [statistics.fmean(rtt)]}
    errs = {"ping-pong": [statistics.stdev(pp) if reps > 1 else 0], "DTI round trip": [statistics.stdev(rtt) if reps > 1 else 0]}
    plot = grouped_bars(ctx.out, "dti.png", "DTI round trip beside the bare cache-line ping-pong (app cpu 0, engine cpu 1)",
                        "ns", ["round trip"], list(vals), vals, errs,
                        ref_lines=[(2 * statistics.fmean(pp), "target: 2× the ping-pong (issue)")])
    return {"text": f"`build/benchmarks/dti/dti_bench --iters {iters}`, {reps} runs.",
            "table": [["figure", "value", ""]] + rows, "plots": [plot]}


def bench_shim(ctx, res):
    script = os.path.join(ROOT, "benchmarks/preload/shim-instructions")
    def count(calls):
        with tempfile.TemporaryDirectory(prefix="eta-report-shim-") as tmp:
            path = os.path.join(tmp, "shim.json")
            cmd = [script, "--build", ctx.build, "-n", "200" if ctx.quick else "1000", "--calls", calls, "--json", path]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
            if r.returncode != 0 or not os.path.exists(path):
                raise Failed(f"{' '.join(cmd)} exited with {r.returncode}:\n" + "\n".join(r.stderr.splitlines()[-20:]))
            return json.load(open(path))

    data = count("recv,send,epoll,poll")
    calls = data["calls"]
    # send is counted with the engine held (shim_calls.c: a SEND queued, not
    # taken), no longer with its pace; three samples (quick: two) still give
    # it a noise figure (±0.5 seen between sittings); the others are counts.
    send_samples = [calls["send"]["instructions_per_call"]] + [
        count("send")["calls"]["send"]["instructions_per_call"] for _ in range(1 if ctx.quick else 2)]
    rows, names, vals = [], [], []
    for name, c in calls.items():
        samples = send_samples if name == "send" else [c["instructions_per_call"]]
        res.add(f"shim.{name}.instructions_per_call", "shim", f"shim {name}: {c['what']}", "instructions", "lower",
                {"value": samples}, deterministic=name != "send")
        mean = statistics.fmean(samples)
        rows.append([name, c["what"], f"{mean:.0f}", str(c["budget"] or "–")])
        names.append(name)
        vals.append(mean)
    plot = grouped_bars(ctx.out, "shim.png", "Shim: instructions per call on a warm accelerated socket (callgrind)",
                        "instructions per call (log)", names, ["eta (shim + libdti)"],
                        {"eta (shim + libdti)": vals},
                        ref_lines=[(150, "budget: recv, send (issue 13)"), (300, "budget: epoll_wait (issue 13)")],
                        log=True)
    return {"text": f"`benchmarks/preload/shim-instructions -n {data['iterations']}`: an ordinary sockets program "
                    "under the shim, attached to dti's loopback test fixture engine; callgrind counts only the "
                    "measured calls (shim, libdti, libc), not the engine. send is counted with the engine held, so "
                    "that every counted send rides on a SEND queued and not taken.",
            "table": [["call", "what", "instructions", "budget"]] + rows, "plots": [plot]}


PPE_CASES = [("stream", "send", 65536, "stream send 64 KiB"), ("stream", "recv", 65536, "stream recv 64 KiB"),
             ("rr", "send", 64, "rr 64 B"), ("rr", "send", 4096, "rr 4 KiB"), ("crr", "send", 64, "crr 64 B")]


def need_root():
    if os.geteuid() != 0:
        raise Failed("needs root (it brings up the lab's network namespaces and starts eta-ppe); run as root")


def bench_ppe(ctx, res):
    need_root()
    reps = 2 if ctx.quick else 3
    duration = 0.5 if ctx.quick else 5
    cmd = [os.path.join(ROOT, "benchmarks/ppe/eta-perf-vs-kernel"), "--build", ctx.build, "--duration",
           str(duration), "--repeat", str(reps), "--json"]
    if ctx.quick:  # only the exchanges this page shows
        cmd += ["--cases", ",".join(f"{m} {d} {n}" for m, d, n, _ in PPE_CASES)]
    out = run_cmd(cmd, 900)
    rows_in = [json.loads(l) for l in out.splitlines() if l.strip().startswith("{")]
    ppe = next((r["ppe"] for r in rows_in if "ppe" in r), None)
    ctx.latency = next((r["latency"] for r in rows_in if "latency" in r), None)
    if ppe and ppe.get("ports"):
        ctx.machine["dpdk_device"] = ppe["ports"][0]["device"]
        ctx.machine["mtu"] = ppe["ports"][0]["mtu"]
        ctx.machine["engines"] = len(ppe["engines"])
    data, quant, failed = {}, {}, []
    for r in rows_in:
        if "ppe" in r or "latency" in r:
            continue
        if "error" in r:
            failed.append(r.get("path", "?"))
            continue
        if r.get("peer_cc"):
            continue  # an exchange under another congestion control than the lab's (its own line there)
        case = next((c for c in PPE_CASES if (c[0], c[1], c[2]) == (r["mode"], r["direction"], r["size"])), None)
        if not case:
            continue
        d = data.setdefault(case[3], {}).setdefault(r["path"], {})
        for k in ("gbit_per_s", "tps", "p50_us", "p99_us", "cpu_s_per_gib", "cpu_us_per_txn",
                  "engine_cpu_s_per_gib", "engine_cpu_us_per_txn"):
            if k in r:
                d.setdefault(k, []).append(r[k])
        d.setdefault("host_cpu_pct", []).append(100 * r["cpu_s"] / r["seconds"] if r["seconds"] else 0)
        if r.get("latency_us_quantiles") and r["rep"] == 1:
            quant.setdefault(case[3], {})[r["path"]] = r["latency_us_quantiles"]
    if not data:
        raise Failed("eta-perf-vs-kernel produced no results")
    metrics = [("gbit_per_s", "Gbit/s", "Gbit/s", "higher"), ("tps", "transactions/s", "1/s", "higher"),
               ("p50_us", "p50 latency", "µs", "lower"), ("p99_us", "p99 latency", "µs", "lower"),
               ("cpu_s_per_gib", "app CPU per GiB", "s/GiB", "lower"),
               ("cpu_us_per_txn", "app CPU per transaction", "µs", "lower"),
               ("host_cpu_pct", "app (host) CPU while running", "% of one core", "lower")]
    rows = [["exchange", "path", "Gbit/s", "trans/s", "p50 µs", "p99 µs", "app CPU s/GiB", "engine CPU s/GiB",
             "app CPU µs/txn", "engine CPU µs/txn"]]
    for ex, paths in data.items():
        stream = ex.startswith("stream")
        for key, label, unit, better in metrics:
            if stream and key in ("tps", "p50_us", "p99_us", "cpu_us_per_txn"):
                continue
            if not stream and key in ("cpu_s_per_gib", "gbit_per_s") and ex != "rr 4 KiB":
                continue
            series = {p: paths[p][key] for p in ("eta", "kernel") if p in paths and key in paths[p]}
            res.add(f"ppe.{ex}.{key}", "ppe", f"eta-perf {ex}: {label}", unit, better, series)
        # The engine's CPU per unit of what the exchange measures (both for rr 4 KiB).
        engine_keys = [("engine_cpu_s_per_gib", "s/GiB", "per GiB")] if stream else \
            [("engine_cpu_us_per_txn", "µs", "per transaction")]
        if ex == "rr 4 KiB":
            engine_keys.append(("engine_cpu_s_per_gib", "s/GiB", "per GiB"))
        for key, unit, what in engine_keys:
            if key in paths.get("eta", {}):
                res.add(f"ppe.{ex}.{key}", "ppe", f"eta-perf {ex}: engine CPU {what}", unit, "lower",
                        {"eta": paths["eta"][key]})
        for path in ("eta", "kernel"):
            if path not in paths:
                continue
            m = lambda k, f: format(statistics.fmean(paths[path][k]), f) if k in paths[path] else ""
            rows.append([ex, path, m("gbit_per_s", ".2f"), "" if stream else m("tps", ",.0f"),
                         "" if stream else m("p50_us", ".1f"), "" if stream else m("p99_us", ".1f"),
                         m("cpu_s_per_gib", ".3f"), m("engine_cpu_s_per_gib", ".3f"),
                         "" if stream else m("cpu_us_per_txn", ".2f"), "" if stream else m("engine_cpu_us_per_txn", ".2f")])
    plots = []
    v = lambda fid, s: res.value(fid, s)
    tput = ["stream send 64 KiB", "stream recv 64 KiB", "rr 4 KiB"]
    vals = {s: [v(f"ppe.{e}.gbit_per_s", s) for e in tput] for s in ("eta", "kernel")}
    plots.append(grouped_bars(ctx.out, "ppe_throughput.png", "eta-perf: throughput, eta vs kernel link", "Gbit/s",
                              tput, ["eta", "kernel"], vals, errors_of(res, "ppe", tput, "gbit_per_s")))
    trans = ["rr 64 B", "rr 4 KiB", "crr 64 B"]
    vals = {s: [v(f"ppe.{e}.tps", s) for e in trans] for s in ("eta", "kernel")}
    plots.append(grouped_bars(ctx.out, "ppe_tps.png", "eta-perf: transactions per second, eta vs kernel link",
                              "transactions/s", trans, ["eta", "kernel"], vals, errors_of(res, "ppe", trans, "tps")))
    for ex in ("rr 64 B", "rr 4 KiB"):
        if ex in quant:
            plots.append(cdf_plot(ctx.out, f"ppe_cdf_{ex.replace(' ', '_')}.png", f"eta-perf {ex} latency", quant[ex]))
    stream = ["stream send 64 KiB", "stream recv 64 KiB", "rr 4 KiB"]
    plots.append(stacked_cpu(ctx.out, "ppe_cpu_gib.png", "CPU per GiB moved: application, and eta's engine",
                             "CPU seconds per GiB", stream, [v(f"ppe.{e}.cpu_s_per_gib", "eta") for e in stream],
                             [v(f"ppe.{e}.engine_cpu_s_per_gib", "eta") for e in stream],
                             [v(f"ppe.{e}.cpu_s_per_gib", "kernel") for e in stream]))
    plots.append(stacked_cpu(ctx.out, "ppe_cpu_txn.png", "CPU per transaction: application, and eta's engine",
                             "CPU µs per transaction", trans, [v(f"ppe.{e}.cpu_us_per_txn", "eta") for e in trans],
                             [v(f"ppe.{e}.engine_cpu_us_per_txn", "eta") for e in trans],
                             [v(f"ppe.{e}.cpu_us_per_txn", "kernel") for e in trans]))
    vals = {s: [v("ppe.stream send 64 KiB.host_cpu_pct", s)] for s in ("eta", "kernel")}
    plots.append(grouped_bars(ctx.out, "ppe_host_cpu.png", "Application (host) CPU while sending 64 KiB writes",
                              "% of one core", ["stream send 64 KiB"], ["eta", "kernel"], vals,
                              ref_lines=[ANCHOR_ETA_HOST_CPU]))
    text = (f"`benchmarks/ppe/eta-perf-vs-kernel --duration {duration} --repeat {reps} --json` (root; own lab). "
            "One kernel eta-perf server in the peer namespace; the client reaches it through eta-ppe (native DTI) "
            "and over the kernel link, alternately, in the same run. Values are means over the repetitions; "
            "engine CPU is eta-ppe's utime+stime over each eta exchange. The PPE's port is DPDK net_af_packet on "
            "a veth: numbers for this VM, not for eta on a real NIC.")
    if failed:
        text += f" Failed exchanges: {len(failed)} ({', '.join(failed)})."
    return {"text": text, "table": rows, "plots": plots}


# The path of a request through the engine and the program, in order; the
# program's stage is split by its own stamps where it stamped (libdti).
LATENCY_PATH = [("stack", "frame → through MARS"), ("event", "→ event published"),
                ("program_wake", "program: woken"), ("program_read", "program: data read"),
                ("program_reply", "program: reply submitted"), ("program_taken", "→ command taken"),
                ("transmit", "→ reply handed to the port"), ("port", "the port's tx pass")]


def bench_latency(ctx, res):
    """The latency breakdown (eta-stat --latency --json) the eta-perf
    section left: per stage p50/p99 stacked along the request's path. One
    snapshot, no repetitions: a table and a plot, no figures for compare."""
    lat = getattr(ctx, "latency", None)
    if not lat:
        raise Failed("no latency breakdown: the eta-perf section did not run or its eta-ppe gave none "
                     "(eta-stat --latency --json)")
    tot = lat["total"]
    st = tot["stages"]
    if tot["completed"] <= 0:
        raise Failed(f"no complete sampled request (traces {tot['traces']}, sampling one in {lat['sample_every']})")
    # Where the program did not stamp, its stage is shown whole.
    split = tot.get("program_stamped", 0) > 0
    path = [(k, d) for k, d in LATENCY_PATH if split or not k.startswith("program_")]
    if not split:
        path.insert(2, ("program", "program (event → command), no stamps"))
        st = dict(st, program={q: st["program_woken"][q] + st["program_spin"][q] for q in ("p50_us", "p99_us")}
                  | {"count": st["program_woken"]["count"] + st["program_spin"]["count"]})
    rows = [["stage", "what", "count", "p50 µs", "p90 µs", "p99 µs", "max µs"]]
    for k, d in path + [("request", "the whole request (frame in → reply to the port)")]:
        v = st[k]
        rows.append([k, d, str(v["count"]), f"{v['p50_us']:.2f}", f"{v.get('p90_us', 0):.2f}", f"{v['p99_us']:.2f}",
                     f"{v.get('max_us', 0):.2f}"])
    p = plt()
    fig, ax = p.subplots(figsize=(8, 3.6))
    cmap = p.get_cmap("tab10")
    for row, q in enumerate(("p50_us", "p99_us")):
        left = 0.0
        for i, (k, _) in enumerate(path):
            w = st[k][q]
            ax.barh(row, w, left=left, color=cmap(i % 10), label=k if row == 0 else None, edgecolor="white")
            left += w
        ax.plot([st["request"][q]], [row], marker="|", markersize=22, color="#d62728",
                label="whole request" if row == 0 else None)
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["p50", "p99"])
    ax.invert_yaxis()
    ax.set_xlabel("µs (each stage's own percentile, stacked along the path; | the request's)")
    ax.set_title("Where a sampled request's time goes (eta-stat --latency)")
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    plot = save(fig, ctx.out, "latency_breakdown.png")
    text = (f"`eta-stat --latency --json` after the eta-perf section's eta exchanges (one in {lat['sample_every']} "
            f"received frames traced; {tot['completed']} complete traces of {tot['traces']}, program woken in "
            f"{tot['woken']}; the program's own stamps usable in {tot.get('program_stamped', 0)}, missing in "
            f"{tot.get('program_missing', 0)}, refused in {tot.get('program_bad', 0)}). Each bar segment is that "
            "stage's own percentile: percentiles of parts do not add up to the whole's, so the stacked p99 is an "
            "upper view of where the tail can come from; the mark is the request's own percentile. Histograms "
            f"resolve to 1/{round(1 / lat['resolution'])} of a value.")
    return {"text": text, "table": rows, "plots": [plot]}


def errors_of(res, section, groups, key):
    out = {}
    for s in ("eta", "kernel"):
        out[s] = []
        for g in groups:
            f = res.by_id.get(f"{section}.{g}.{key}")
            ser = f["series"].get(s) if f else None
            out[s].append(statistics.stdev(ser["samples"]) if ser and len(ser["samples"]) > 1 else 0)
    return out


def bench_programs(ctx, res):
    need_root()
    reps = 2 if ctx.quick else 3
    secs = 1 if ctx.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        jf = os.path.join(tmp, "programs.jsonl")
        env = dict(os.environ, ETA_BENCH_JSON=jf, ETA_BENCH_REPEAT=str(reps))
        if ctx.quick:  # the blocking reader's 512 MiB streams: not on this page
            env["ETA_BENCH_READER"] = "0"
        run_cmd([os.path.join(ROOT, "benchmarks/preload/bench.sh"), ctx.build, str(secs)], 600, env=env)
        rows_in = [json.loads(l) for l in open(jf) if l.strip()]
    data, quant = {}, {}
    for r in rows_in:
        d = data.setdefault(r["path"], {})
        for k in ("p50_us", "p99_us", "recv_gbit_per_s", "server_cpu_s_per_gib", "engine_cpu_s_per_gib"):
            if r.get(k) is not None:
                d.setdefault(k, []).append(r[k])
        if r["rep"] == 1:
            quant[r["path"]] = r["latency_us_quantiles"]
    metrics = [("p50_us", "sockperf ping-pong 64 B p50 latency", "µs", "lower"),
               ("p99_us", "sockperf ping-pong 64 B p99 latency", "µs", "lower"),
               ("recv_gbit_per_s", "iperf3 receive throughput", "Gbit/s", "higher"),
               ("server_cpu_s_per_gib", "iperf3 server CPU per GiB received", "s/GiB", "lower")]
    rows = [["path", "p50 µs", "p99 µs", "recv Gbit/s", "server CPU s/GiB", "engine CPU s/GiB"]]
    for key, label, unit, better in metrics:
        res.add(f"programs.{key}", "programs", label, unit, better,
                {p: data[p][key] for p in ("eta", "kernel") if p in data and key in data[p]})
    if "eta" in data and "engine_cpu_s_per_gib" in data["eta"]:
        res.add("programs.engine_cpu_s_per_gib", "programs", "eta-ppe CPU per GiB received", "s/GiB", "lower",
                {"eta": data["eta"]["engine_cpu_s_per_gib"]})
    for p in ("eta", "kernel"):
        if p in data:
            m = lambda k, f: format(statistics.fmean(data[p][k]), f) if k in data[p] else "–"
            rows.append([p, m("p50_us", ".1f"), m("p99_us", ".1f"), m("recv_gbit_per_s", ".2f"),
                         m("server_cpu_s_per_gib", ".3f"), m("engine_cpu_s_per_gib", ".3f")])
    plots = [cdf_plot(ctx.out, "programs_sockperf_cdf.png", "sockperf ping-pong 64 B (unmodified, eta-run vs kernel)",
                      quant)]
    vals = {s: [res.value("programs.recv_gbit_per_s", s)] for s in ("eta", "kernel")}
    plots.append(grouped_bars(ctx.out, "programs_iperf3.png", "iperf3 receive throughput (unmodified server)",
                              "Gbit/s", ["iperf3 peer → server"], ["eta", "kernel"], vals))
    plots.append(stacked_cpu(ctx.out, "programs_cpu.png", "iperf3 server CPU per GiB received", "CPU seconds per GiB",
                             ["iperf3 receive"], [res.value("programs.server_cpu_s_per_gib", "eta")],
                             [res.value("programs.engine_cpu_s_per_gib", "eta")],
                             [res.value("programs.server_cpu_s_per_gib", "kernel")]))
    return {"text": f"`ETA_BENCH_REPEAT={reps} benchmarks/preload/bench.sh BUILD {secs}` (root; own lab): the same unmodified "
                    "programs (sockperf, iperf3) twice in one run, one under eta-run bound to the PPE's address, one "
                    "plain on the kernel link's, driven from the lab's peer namespace. CDF from the first run's "
                    "per-message latencies (sockperf --full-log).",
            "table": rows, "plots": plots}


def bench_scaling(ctx, res):
    need_root()
    secs = 0.5 if ctx.quick else 5
    reps = 2 if ctx.quick else 3
    counts = [n for n in (1, 2, 4, 8) if n <= min(os.cpu_count() or 1, 8)]
    out = run_cmd([os.path.join(ROOT, "benchmarks/ppe/scale"), "--build", ctx.build, "--engines",
                   " ".join(map(str, counts)), "--duration", str(secs), "--repeat", str(reps), "--json"],
                  int(600 + 20 * reps * secs * len(counts)))  # a bound, not a pace: 160 s ran out at load ~24
    rows_in = [json.loads(l) for l in out.splitlines() if l.strip().startswith("{")]
    # Every repetition is a sample; tables and plots show the means.
    samples = {}
    for r in rows_in:
        samples.setdefault((r["engines"], r["mode"], r["path"]), []).append(r)
    by = {}
    for key, rs in samples.items():
        m = dict(rs[0])
        for k in ("gbit_s", "trans_s", "gbit_s_per_engine", "trans_s_per_engine", "busy_cores", "steered_in"):
            if k in m:
                m[k] = statistics.fmean(x[k] for x in rs)
        by[key] = m
    rows = [["engines", "path", "stream recv Gbit/s", "per engine core", "rr 64 B trans/s", "per engine core",
             "busy cores (stream)", "steered in (stream)"]]
    for n in counts:
        for key, mode, field, label, unit in (("stream_gbit_per_s", "stream", "gbit_s", "stream recv 64 KiB", "Gbit/s"),
                                              ("rr_trans_per_s", "rr", "trans_s", "rr 64 B", "trans/s")):
            series = {path: [x[field] for x in samples[(n, mode, path)]] for path in ("eta", "kernel")
                      if (n, mode, path) in samples}
            if series:
                res.add(f"scaling.{n}_engines.{key}", "scaling", f"{label} with {n} engine(s), {n} client(s)", unit,
                        "higher", series)
        for path in ("eta", "kernel"):
            st, rr = by.get((n, "stream", path)), by.get((n, "rr", path))
            if not st or not rr:
                continue
            rows.append([str(n), path, f"{st['gbit_s']:.2f}",
                         f"{st['gbit_s_per_engine']:.2f}" if path == "eta" else "–", f"{rr['trans_s']:.0f}",
                         f"{rr['trans_s_per_engine']:.0f}" if path == "eta" else "–", f"{st['busy_cores']:.2f}",
                         f"{st['steered_in']:.0f}" if "steered_in" in st else "–"])
    p = plt()
    fig, (a1, a2) = p.subplots(1, 2, figsize=(9, 3.5))
    for ax, mode, key, title in ((a1, "stream", "gbit_s", "stream recv 64 KiB (Gbit/s)"),
                                 (a2, "rr", "trans_s", "rr 64 B (trans/s)")):
        for path in ("eta", "kernel"):
            xs = [n for n in counts if (n, mode, path) in by]
            ax.plot(xs, [by[(n, mode, path)][key] for n in xs], marker="o", color=COLORS[path], label=path)
        ax.set_xticks(counts)
        ax.set_xlabel("engines (eta) / clients (both)")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    plot = save(fig, ctx.out, "scaling.png")
    return {"text": f"`benchmarks/ppe/scale --engines \"{' '.join(map(str, counts))}\" --duration {secs} --repeat {reps} "
                    "--json` "
                    "(root; a lab per engine count): N native eta-perf clients at once, one per engine (attached "
                    "with DTI_ENGINE_ANY), against the peer's kernel server, beside the same N clients on the "
                    f"kernel link. This machine has {os.cpu_count()} CPUs shared by the peer, the clients and the "
                    "engines, so more engines than free cores cannot scale here.",
            "table": rows, "plots": [plot]}


SECTIONS = [
    ("mars", "MARS microbenchmarks", bench_mars, 10, 150),
    ("ablation", "MARS latency-hiding ablation", bench_ablation, 5, 300),
    ("fastpath", "Receive fast path: instructions per segment", bench_fastpath, 8, 40),
    ("dti", "DTI round trip and signalling", bench_dti, 14, 45),
    ("shim", "Shim: per-call instruction counts", bench_shim, 12, 40),
    ("ppe", "eta-perf: eta vs the kernel link", bench_ppe, 60, 260),
    ("latency", "Latency breakdown: where a sampled request's time goes", bench_latency, 0, 0),
    ("programs", "Unmodified programs under eta-run vs the kernel link", bench_programs, 60, 120),
    ("scaling", "Scaling with engines", bench_scaling, 80, 60),
]


# ---- the summary a reader sees first ---------------------------------------------

# Each headline figure of the run, eta against the kernel, with its goal (the
# issue that set it) and whether this run meets it. `parts` lists the figure
# ids summed per side (the engine's CPU is eta's too: host CPU is the program's
# plus the engine's); `better` says which way the ratio eta/kernel should go.
HEADLINES = [
    ("latency rr 64 B p50 (eta-perf, native DTI)", ["ppe.rr 64 B.p50_us"], "µs", "lower", 0.5, "issue 33"),
    ("latency rr 64 B p99 (eta-perf, native DTI)", ["ppe.rr 64 B.p99_us"], "µs", "lower", 1.0, "issue 33"),
    ("latency ping-pong 64 B p50 (sockperf, unmodified)", ["programs.p50_us"], "µs", "lower", 0.5, "issue 33"),
    ("latency ping-pong 64 B p99 (sockperf, unmodified)", ["programs.p99_us"], "µs", "lower", 1.0, "issue 33"),
    ("rr 64 B rate", ["ppe.rr 64 B.tps"], "trans/s", "higher", 1.0, "design card"),
    ("crr 64 B rate (connect, request, response)", ["ppe.crr 64 B.tps"], "trans/s", "higher", 1.0, "design card"),
    ("stream receive, 64 KiB writes", ["ppe.stream recv 64 KiB.gbit_per_s"], "Gbit/s", "higher", 1.0, "issue 30"),
    ("stream send, 64 KiB writes", ["ppe.stream send 64 KiB.gbit_per_s"], "Gbit/s", "higher", 1.0, "issue 30"),
    ("host CPU per rr 64 B transaction (program + engine)",
     ["ppe.rr 64 B.cpu_us_per_txn", "ppe.rr 64 B.engine_cpu_us_per_txn"], "µs", "lower", 1.0, "issue 30"),
    ("host CPU per GiB received (program + engine)",
     ["ppe.stream recv 64 KiB.cpu_s_per_gib", "ppe.stream recv 64 KiB.engine_cpu_s_per_gib"], "s/GiB", "lower",
     1.0, "issue 30"),
    ("real program: iperf3 receive (unmodified)", ["programs.recv_gbit_per_s"], "Gbit/s", "higher", 1.0, "issue 30"),
]


def summary(res):
    """One row per headline: eta, kernel, eta/kernel, the goal and whether it
    is met. A figure the run did not produce (a failed section) is a row that
    says so, never a silent gap."""
    rows = []
    for label, parts, unit, better, goal, source in HEADLINES:
        eta = kern = None
        if all(res.value(fid, "eta") is not None for fid in parts) and res.value(parts[0], "kernel") is not None:
            eta = sum(res.value(fid, "eta") for fid in parts)
            # The kernel's side has no engine: its CPU is all the program's (the
            # kernel's own work is charged to the program's system time).
            kern = sum(res.value(fid, "kernel") or 0 for fid in parts)
        row = {"label": label, "unit": unit, "better": better, "goal": goal, "source": source,
               "figures": parts, "eta": eta, "kernel": kern, "ratio": None, "met": None}
        if eta is not None and kern:
            row["ratio"] = eta / kern
            row["met"] = row["ratio"] <= goal if better == "lower" else row["ratio"] >= goal
        rows.append(row)
    return rows


def summary_table(rows):
    out = [["headline", "eta", "kernel", "eta/kernel", "goal", "met"]]
    for r in rows:
        if r["ratio"] is None:
            out.append([r["label"], "not measured (its section failed)", "", "", "", "–"])
            continue
        goal = ("≤ " if r["better"] == "lower" else "≥ ") + f"{r['goal']:.1f}× ({r['source']})"
        num = lambda v: f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"
        out.append([r["label"], f"{num(r['eta'])} {r['unit']}", f"{num(r['kernel'])} {r['unit']}",
                    f"{r['ratio']:.2f}×", goal, "yes" if r["met"] else "NO"])
    return out


def fmt_noise(n):
    return "one sample" if n is None else ("deterministic" if n == 0 else f"±{100 * n:.1f}%")


# ---- the page ---------------------------------------------------------------------


def table_html(rows):
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def code_spans(text):
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def write_page(ctx, sections, elapsed, rows):
    m = ctx.machine
    measured = sum(r["ratio"] is not None for r in rows)
    met = sum(bool(r["met"]) for r in rows)
    css = ("body{font-family:sans-serif;max-width:1100px;margin:1em auto;color:#222}"
           "table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
           "text-align:right}th{background:#eee}td:first-child{text-align:left}img{max-width:100%;display:block;"
           "margin:.5em 0}.failed{color:#b00}.na{color:#777}pre{background:#f6f6f6;padding:.5em;overflow:auto}"
           "section{border-top:1px solid #ddd;margin-top:1.5em}")
    info = [["CPU", m["cpu_model"]], ["cores", str(m["cores"])], ["kernel", m["kernel"]],
            ["DPDK device (eta-ppe's port)", m["dpdk_device"]], ["MTU", str(m["mtu"] or "unknown")],
            ["engines", str(m.get("engines", "unknown"))], ["commit", m["commit"]], ["date", m["date"]],
            ["load average at start", f"{m['load_average']:.2f}"],
            ["mode", "quick (short durations, fewer points)" if ctx.quick else "full"],
            ["took", f"{elapsed:.0f} s"]]
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>eta benchmark report</title>"
           f"<style>{css}</style></head><body><h1>eta benchmark report</h1>"
           "<p>eta (the PPE, MARS, the DTI and the shim) beside the Linux kernel, measured side by side in one run. "
           "Benchmarks report; they assert nothing. Noise is the spread between repetitions "
           "(coefficient of variation); compare two runs with <code>tools/eta bench compare A.json B.json</code>. "
           "All figures with units: <a href='results.json'>results.json</a>.</p>",
           "<section id='summary'><h2>Summary: eta against the kernel</h2>",
           f"<p>{met} of {measured} headline goals met in this run"
           + (f" ({len(rows) - measured} not measured: their section failed)" if measured < len(rows) else "")
           + f"; load average {m['load_average']:.2f} at the start "
           "(a busy machine moves ratios; compare sittings of the same load).</p>",
           table_html(summary_table(rows)), "</section>",
           "<h2>What ran where</h2>", table_html([["what", "value"]] + info), "<h2>Contents</h2><ul>"]
    for s in sections:
        out.append(f"<li><a href='#{s['id']}'>{html.escape(s['title'])}</a> — {s['status']}</li>")
    out.append("</ul>")
    for s in sections:
        out.append(f"<section id='{s['id']}' data-status='{s['status']}'><h2>{html.escape(s['title'])}</h2>")
        if s["status"] == "failed":
            out.append(f"<p class='failed'><b>FAILED</b> after {s['elapsed_s']:.0f} s:</p>"
                       f"<pre class='failed'>{html.escape(s.get('error', ''))}</pre>")
        elif s["status"] == "not_available":
            out.append(f"<p class='na'>{code_spans(s.get('text', ''))}</p>")
        if s["status"] != "not_available" and s.get("text"):
            out.append(f"<p>{code_spans(s['text'])}</p>")
        for plot in s.get("plots", []):
            # Embedded as data: URIs so the page is one self-contained file; the PNGs are also beside it.
            data = base64.b64encode(open(os.path.join(ctx.out, plot), "rb").read()).decode()
            out.append(f"<img src='data:image/png;base64,{data}' alt='{html.escape(plot)}' data-file='{plot}'>")
        out.append(table_html(s.get("table")))
        if s.get("pre"):
            out.append(f"<pre>{html.escape(s['pre'])}</pre>")
        out.append("</section>")
    out.append("</body></html>")
    with open(os.path.join(ctx.out, "index.html"), "w") as f:
        f.write("\n".join(out))


# ---- run / compare -------------------------------------------------------------------


class Ctx:
    pass


def remove_earlier_report(out):
    """A plot from an earlier run must not pass for this run's: removes what
    an earlier report in OUT listed as its own (and nothing else)."""
    try:
        old = json.load(open(os.path.join(out, "results.json")))
        files = [p for s in old.get("sections", []) for p in (s.get("plots") or [])]
    except (OSError, ValueError):
        files = []
    for f in files + ["index.html", "results.json"]:
        if os.path.basename(f) == f and os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))


def cmd_run(args):
    ctx = Ctx()
    ctx.build = os.path.abspath(args.build)
    ctx.out = os.path.abspath(args.out)
    ctx.quick = args.quick
    only = set(args.only.split(",")) if args.only else None
    os.makedirs(ctx.out, exist_ok=True)
    remove_earlier_report(ctx.out)
    ctx.machine = machine_info()
    todo = [s for s in SECTIONS if not only or s[0] in only]
    ablation_built = os.path.exists(os.path.join(ctx.build, "benchmarks/mars/mars_ablation"))
    expect = sum(s[3] if ctx.quick else s[4] for s in todo if s[0] != "ablation" or ablation_built)
    print(f"eta bench report: {len(todo)} benchmarks, {'quick' if ctx.quick else 'full'} mode; expect about "
          f"{expect // 60} min {expect % 60} s on a 2-core VM (longer when it is busy). Output: {ctx.out}",
          flush=True)
    res = Results()
    sections = []
    t0 = time.monotonic()
    for i, (sid, title, fn, _, _) in enumerate(todo):
        el = time.monotonic() - t0
        print(f"[{i + 1}/{len(todo)}] {title} ... ({len(todo) - i - 1} left after this, "
              f"elapsed {int(el) // 60}:{int(el) % 60:02d})", flush=True)
        s0 = time.monotonic()
        try:
            sec = fn(ctx, res) or {}
            sec.setdefault("status", "ok")
        except Failed as e:
            sec = {"status": "failed", "error": str(e)}
        except Exception:  # a bug in one section must not lose the others
            sec = {"status": "failed", "error": traceback.format_exc()}
        sec.update(id=sid, title=title, elapsed_s=time.monotonic() - s0)
        print(f"      {sec['status']} in {sec['elapsed_s']:.0f} s"
              + (": " + sec["error"].splitlines()[0] if sec["status"] == "failed" else ""), flush=True)
        sections.append(sec)
    elapsed = time.monotonic() - t0
    rows = summary(res)
    write_page(ctx, sections, elapsed, rows)
    doc = {"schema": SCHEMA, "quick": ctx.quick, "machine": ctx.machine, "elapsed_s": elapsed, "summary": rows,
           "sections": [{k: s.get(k) for k in ("id", "title", "status", "error", "text", "plots", "elapsed_s")}
                        for s in sections],
           "figures": res.figures}
    with open(os.path.join(ctx.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    for r in summary_table(rows)[1:]:
        print(f"  {r[0]:<52} {r[3]:>7}  goal {r[4]:<22} met: {r[5]}", flush=True)
    failed = [s["id"] for s in sections if s["status"] == "failed"]
    print(f"eta bench report: done in {int(elapsed) // 60}:{int(elapsed) % 60:02d}; "
          f"{len(sections) - len(failed)} of {len(sections)} sections without failure"
          + (f" (failed: {', '.join(failed)})" if failed else "") + f". Open {os.path.join(ctx.out, 'index.html')}",
          flush=True)
    return 0


def load_results(path):
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        sys.exit(f"eta bench compare: cannot read {path}: {e} (give two results.json of tools/eta bench report)")
    if d.get("schema") != SCHEMA or "figures" not in d:
        sys.exit(f"eta bench compare: {path} is not a results.json of tools/eta bench report (schema {SCHEMA})")
    return d


def cmd_compare(args):
    a, b = load_results(args.a), load_results(args.b)
    fa = {f["id"]: f for f in a["figures"]}
    fb = {f["id"]: f for f in b["figures"]}
    print(f"A: {args.a} ({a['machine'].get('commit')}, {a['machine'].get('date')})")
    print(f"B: {args.b} ({b['machine'].get('commit')}, {b['machine'].get('date')})")
    print("Changes beyond twice the larger noise of the two runs are marked: + better, - worse; "
          "'?' where a run has one sample (noise unknown).")
    print(f"{'figure':<62} {'series':<7} {'A':>12} {'B':>12} {'B/A':>7}  {'noise A/B':>13}  mark")
    counts = {"+": 0, "-": 0, "": 0, "?": 0}
    for fid in [f["id"] for f in a["figures"]] + [i for i in fb if i not in fa]:
        if fid not in fa or fid not in fb:
            where = "A" if fid in fa else "B"
            print(f"{fid[:62]:<62} only in {where}")
            continue
        x, y = fa[fid], fb[fid]
        for s in x["series"]:
            if s not in y["series"]:
                continue
            va, vb = x["series"][s]["value"], y["series"][s]["value"]
            na, nb = x["series"][s]["noise"], y["series"][s]["noise"]
            ratio = vb / va if va else float("inf")
            if na is None or nb is None:
                mark = "?"
            elif abs(ratio - 1) > 2 * max(na, nb):
                better = (ratio > 1) == (x["better"] == "higher")
                mark = "+" if better else "-"
            else:
                mark = ""
            counts[mark] += 1
            nt = f"{fmt_noise(na)}/{fmt_noise(nb)}" if (na or nb) else ("0/0" if na == nb == 0 else "?")
            print(f"{fid[:62]:<62} {s:<7} {va:>12.4g} {vb:>12.4g} {ratio:>7.3f}  {nt:>13}  {mark}  {x['unit']}")
    print(f"{counts['+']} better, {counts['-']} worse beyond noise, {counts['']} within noise, "
          f"{counts['?']} with unknown noise")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run every benchmark and write the report")
    r.add_argument("--build", required=True, help="the meson build directory")
    r.add_argument("--out", required=True, help="where index.html, the PNGs and results.json go")
    r.add_argument("--quick", action="store_true", help="short durations, fewer points (about 4 minutes on the 2-core VM at load ~5)")
    r.add_argument("--only", help="comma-separated section ids (" + ",".join(s[0] for s in SECTIONS) + ")")
    c = sub.add_parser("compare", help="compare two results.json")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "run":
        if args.only:
            unknown = set(args.only.split(",")) - {s[0] for s in SECTIONS}
            if unknown:
                ap.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}")
        return cmd_run(args)
    return cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
