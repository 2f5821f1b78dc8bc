#!/usr/bin/env python3
"""eta-stat's machine-readable outputs, parsed by real parsers.

Runs the stat_format_fixture program (a TEST FIXTURE: a made-up snapshot,
every counter a distinct value) and checks that
  - the Prometheus output parses with the Prometheus Python client's text
    parser, every family has HELP and TYPE, names/types/labels are as
    documented, and values are the fixture's;
  - the JSON output parses with Python's json and carries the same values.
Usage: stat_format_test.py FIXTURE_BINARY
"""
import json
import subprocess
import sys
import unittest

from prometheus_client.parser import text_string_to_metric_families

FIXTURE = sys.argv.pop(1) if len(sys.argv) > 1 else None


def run(fmt):
    return subprocess.run([FIXTURE, fmt], check=True, capture_output=True, text=True, timeout=30).stdout


class Prometheus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = run("prometheus")
        cls.families = {f.name: f for f in text_string_to_metric_families(cls.text)}
        cls.snap = json.loads(run("json"))

    def sample(self, family, **labels):
        f = self.families[family]
        hits = [s for s in f.samples if all(s.labels.get(k) == v for k, v in labels.items())]
        self.assertEqual(len(hits), 1, f"{family} {labels}: {len(hits)} samples")
        return hits[0]

    def test_every_family_has_help_and_type(self):
        helps = {l.split()[2] for l in self.text.splitlines() if l.startswith("# HELP ")}
        types = {l.split()[2]: l.split()[3] for l in self.text.splitlines() if l.startswith("# TYPE ")}
        self.assertEqual(helps, set(types))
        # The text format names a counter's family with its _total; the parser drops it.
        types = {(n[:-6] if t == "counter" and n.endswith("_total") else n): t for n, t in types.items()}
        self.assertEqual(set(types), set(self.families))
        for name, t in types.items():
            if t == "counter":
                self.assertIn(f"# TYPE {name}_total counter", self.text)
        for name, f in self.families.items():
            self.assertTrue(f.documentation, name)
            self.assertEqual(types[name], f.type, name)
            self.assertTrue(name.startswith("eta_"), name)

    def test_rejected_commands(self):
        self.assertEqual(self.sample("eta_engine_rejected_commands", engine="1").value, 12)

    def test_counters_end_in_total(self):
        for f in self.families.values():
            for s in f.samples:
                if f.type == "counter":
                    self.assertTrue(s.name.endswith("_total"), s.name)
                else:
                    self.assertEqual(s.name, f.name)

    def test_engine_counters_per_engine(self):
        for e, eng in enumerate(self.snap["engines"]):
            labels = {"engine": str(e), "cpu": str(eng["cpu"])}
            for key in ("loops", "busy_polls", "idle_polls", "sleeps", "rx_packets", "tx_packets", "tx_dropped",
                        "wakeups", "wake_submits", "doorbells", "commands", "events", "steered_out",
                        "steered_in", "steer_drops", "arp_shared_out", "arp_shared_in", "owner_kicks",
                        "digest_rx_bytes", "digest_tx_bytes", "digest_ranges", "digest_mismatches", "rx_wakes",
                        "posts", "posted_bytes", "post_fallbacks", "post_faults"):
                self.assertEqual(self.families["eta_engine_" + key].type, "counter")
                self.assertEqual(self.sample("eta_engine_" + key, **labels).value, eng[key], key)
            self.assertEqual(self.sample("eta_engine_cycles", **labels).value, eng["total_cycles"])
            self.assertEqual(self.sample("eta_engine_apps", **labels).value, eng["apps"])
            self.assertAlmostEqual(self.sample("eta_engine_busy_seconds", **labels).value, 2.0 * (e + 1))
            self.assertGreater(eng["steered_in"], 0, "the fixture fills every engine counter")
            self.assertAlmostEqual(self.sample("eta_engine_busy_share", **labels).value, eng["busy_share"])
            self.assertAlmostEqual(eng["busy_share"], eng["busy_cycles"] / eng["total_cycles"])
            conns = sum(s["conns_open"] for s in eng["stacks"])
            self.assertEqual(eng["connections"], conns)
            self.assertEqual(self.sample("eta_engine_connections", **labels).value, conns)

    def test_drops_by_reason(self):
        f = self.families["eta_stack_drops"]
        self.assertEqual(f.type, "counter")
        reasons = {s.labels["reason"] for s in f.samples}
        self.assertIn("tcp_csum", reasons)
        self.assertIn("arp_queue_full", reasons)
        self.assertEqual(len(reasons), 20)  # every drop counter of mars::StackStats
        for e, eng in enumerate(self.snap["engines"]):
            for p, st in enumerate(eng["stacks"]):
                for reason in reasons:
                    s = self.sample("eta_stack_drops", engine=str(e), port=str(p), reason=reason)
                    self.assertEqual(s.value, st["drop_" + reason])
                self.assertEqual(self.sample("eta_stack_rx_frames", engine=str(e), port=str(p)).value,
                                 st["rx_frames"])
                self.assertEqual(self.families["eta_stack_conns_open"].type, "gauge")
                self.assertEqual(self.sample("eta_stack_conns_open", engine=str(e), port=str(p)).value,
                                 st["conns_open"])

    def test_every_stack_counter_is_exported(self):
        st = self.snap["engines"][0]["stacks"][0]
        for key in st:
            if key == "port":
                continue
            if key.startswith("drop_"):
                self.sample("eta_stack_drops", engine="0", port="0", reason=key[5:])
            elif key == "copy_engine":
                self.assertEqual(self.sample("eta_stack_copy_engine_info", engine="1", port="0").labels["device"],
                                 "dmadev:wq2.1")
            else:
                self.assertIn("eta_stack_" + key, self.families, key)

    def test_ports(self):
        for p, port in enumerate(self.snap["ports"]):
            info = self.sample("eta_port_info", port=str(p))
            self.assertEqual(info.labels["name"], port["name"])
            self.assertEqual(info.labels["mac"], port["mac"])
            self.assertEqual(info.labels["address"], port["address"])
            self.assertEqual(info.labels["address6"], ",".join(port["address6"]))
            for prom, key in (("rx_packets", "ipackets"), ("tx_packets", "opackets"), ("rx_bytes", "ibytes"),
                              ("tx_bytes", "obytes"), ("rx_missed", "imissed"), ("rx_errors", "ierrors"),
                              ("tx_errors", "oerrors"), ("rx_nombuf", "rx_nombuf")):
                self.assertEqual(self.sample("eta_port_" + prom, port=str(p)).value, port[key], prom)
            self.assertEqual(self.sample("eta_port_mtu_bytes", port=str(p)).value, 1500)

    def test_apps_by_pid(self):
        self.assertEqual(len(self.snap["apps"]), 2)
        for app in self.snap["apps"]:
            pid = str(app["pid"])
            self.assertEqual(self.sample("eta_app_sockets", pid=pid).labels["name"], app["name"])
            for key in ("commands", "doorbells", "wakeups", "events"):
                self.assertEqual(self.sample("eta_app_" + key, pid=pid).value, app[key])
            self.assertEqual(self.sample("eta_app_rx_bytes", pid=pid).value, app["bytes_in"])
            self.assertEqual(self.sample("eta_app_memory_bytes", pid=pid).value, app["memory_bytes"])

    def test_programs_under_the_shim(self):
        pr = self.snap["programs"][0]
        l = {"pid": str(pr["pid"]), "name": pr["name"]}
        self.assertEqual(self.families["eta_program_sockets"].type, "counter")
        self.assertEqual(self.sample("eta_program_sockets", reason="accelerated", **l).value,
                         pr["sockets"]["accelerated"])
        self.assertEqual(self.sample("eta_program_sockets", reason="loopback", **l).value, pr["sockets"]["loopback"])
        self.assertEqual(self.sample("eta_program_accepted", **{"from": "ppe"}, **l).value, pr["accepted"])
        self.assertEqual(self.sample("eta_program_accepted", **{"from": "kernel"}, **l).value,
                         pr["kernel_accepted"])
        self.assertEqual(self.sample("eta_program_waits", ended="spinning", **l).value, pr["spins"])
        self.assertEqual(self.sample("eta_program_waits", ended="sleeping", **l).value, pr["sleeps"])
        self.assertEqual(self.sample("eta_program_accelerated_open", **l).value, pr["accelerated_open"])
        self.assertEqual(self.sample("eta_program_bypass_refused", **l).value, pr["bypass_refused"])
        self.assertEqual(self.sample("eta_program_attached", **l).value, 1)
        # The shim's watchdog (preload/README.md): its wakes, and the lost wakeups it recovered.
        self.assertEqual(self.sample("eta_program_watchdog_wakes", **l).value, pr["watchdog_wakes"])
        self.assertEqual(self.sample("eta_program_lost_wakeups", **l).value, pr["lost_wakeups"])
        self.assertNotEqual(pr["watchdog_wakes"], pr["lost_wakeups"])

    def test_ppe_info_and_connections(self):
        info = self.sample("eta_ppe_info")
        self.assertEqual(info.labels["pid"], "4242")
        self.assertEqual(info.labels["state"], "running")
        self.assertEqual(self.sample("eta_connections").value, 4)
        self.assertEqual(self.sample("eta_connections_by_state", state="ESTABLISHED").value, 3)
        self.assertEqual(self.sample("eta_connections_by_state", state="LISTEN").value, 1)
        # UDP sockets (issue 31): counted apart, never in the TCP states.
        self.assertEqual(self.sample("eta_udp_sockets").value, 2)
        self.assertEqual(sum(s.value for s in self.families["eta_connections_by_state"].samples), 4)


class Json(unittest.TestCase):
    def test_parses_with_the_fixture_values(self):
        d = json.loads(run("json"))
        self.assertEqual(d["pid"], 4242)
        self.assertEqual(d["config"], '/etc/eta/"odd\\name".toml')  # escaped by the library, read back intact
        self.assertEqual(len(d["engines"]), 2)
        self.assertEqual(len(d["engines"][1]["stacks"]), 2)
        self.assertEqual(d["engines"][0]["busy_cycles"], 4_000_000_000)
        # When each engine published what the table shows (a reader tells stale counters).
        self.assertEqual([e["published_ns"] for e in d["engines"]], [7_000_000_000, 7_000_000_001])
        # Commands an engine refused without an answer (a program broke the protocol, or a bug).
        self.assertEqual([e["rejected_commands"] for e in d["engines"]], [11, 12])
        self.assertEqual(d["ports"][1]["address"], "198.18.0.2/24")
        self.assertEqual(d["ports"][0]["address6"], [])
        self.assertEqual(d["ports"][1]["address6"], ["2001:2:0:1::1/64", "fd00::2/128"])
        self.assertEqual([a["name"] for a in d["apps"]], ["redis-server", "nginx"])
        self.assertEqual([c["state"] for c in d["connections"]], ["LISTEN", "ESTABLISHED", "ESTABLISHED", "ESTABLISHED"])
        self.assertEqual(d["connections"][0]["local"], "198.18.0.1:6379")
        # Each socket's protocol and family (issue 31).
        self.assertEqual([(c["proto"], c["family"]) for c in d["connections"]], [("tcp", 4)] * 3 + [("tcp", 6)])
        self.assertEqual(d["udp_sockets_total"], 2)
        self.assertEqual(d["udp_sockets"], [
            {"sock": 7, "app_pid": 101, "proto": "udp", "family": 6, "local": "[::]:53", "remote": "",
             "rx_queued_bytes": 96, "rx_datagrams": 3, "drops": 2, "memory_bytes": 262144},
            {"sock": 8, "app_pid": 101, "proto": "udp", "family": 4, "local": "198.18.0.1:5000",
             "remote": "198.18.0.9:53", "rx_queued_bytes": 0, "rx_datagrams": 0, "drops": 0, "memory_bytes": 0}])
        # An IPv6 connection names its IPv6 addresses (version 19), bracketed as ss prints them.
        self.assertEqual((d["connections"][3]["local"], d["connections"][3]["remote"]),
                         ("[2001:2:0:1::1]:443", "[2001:2:0:1::2]:50000"))
        self.assertEqual([(p["pid"], p["name"], p["attached"]) for p in d["programs"]], [(300, "memcached", True)])
        self.assertEqual(sorted(d["programs"][0]["sockets"]), ["accelerated", "loopback"])
        # Each engine's port-0 stack names its own device; other ports copy with the core.
        self.assertEqual(d["copy_engine"], "dmadev:wq0.0,wq2.1")
        self.assertEqual(d["copy_threshold"], 512)
        self.assertEqual([[s["copy_engine"] for s in e["stacks"]] for e in d["engines"]],
                         [["dmadev:wq0.0", "cpu"], ["dmadev:wq2.1", "cpu"]])
        values = [v for e in d["engines"] for s in e["stacks"] for k, v in s.items()
                  if k not in ("port", "copy_engine")]
        self.assertEqual(len(values), len(set(values)), "each stack counter read from its own field")

    def test_rejects_unknown_format(self):
        r = subprocess.run([FIXTURE, "xml"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage", r.stderr)


class Latency(unittest.TestCase):
    """eta-stat --latency (stat_latency.h) on the fixture: engine 0 recorded
    1..1000 us in every stage, engine 1 one sample of 5 ms per stage."""
    STAGES = ["stack", "event", "program_woken", "program_spin", "transmit", "port", "engine", "request",
              "program_wake", "program_read", "program_reply", "program_taken"]

    @classmethod
    def setUpClass(cls):
        cls.j = json.loads(run("latency-json"))
        cls.text = run("latency-text")
        cls.prom = run("latency-prometheus")
        cls.slow = run("latency-slow")
        cls.families = {f.name: f for f in text_string_to_metric_families(cls.prom)}

    def test_json_merges_engines(self):
        t = self.j["total"]
        self.assertEqual(self.j["sample_every"], 64)
        self.assertEqual(list(t["stages"]), self.STAGES)
        e0, e1 = self.j["engines"]
        for k in ("traces", "completed", "woken", "no_event", "no_reply", "program_stamped", "program_missing",
                  "program_bad"):
            self.assertEqual(t[k], e0[k] + e1[k], k)
        for s in self.STAGES:
            st = t["stages"][s]
            self.assertEqual(st["count"], 1001, s)
            self.assertEqual(st["max_us"], 5000.0, s)  # max is exact: engine 1's sample
            self.assertEqual(e0["stages"][s]["count"], 1000)
            # Rank ceil(0.5 * 1001) = 501: 501 us, answered as its bucket's upper end (<= 1/16 above).
            self.assertGreaterEqual(st["p50_us"], 501.0)
            self.assertLessEqual(st["p50_us"], 501.0 * 17 / 16)
            self.assertLessEqual(st["p50_us"], st["p90_us"])
            self.assertLessEqual(st["p99_us"], st["p999_us"])
        self.assertEqual(self.j["resolution"], 1 / 16)

    def test_text_table(self):
        lines = self.text.splitlines()
        self.assertIn("one in 64 frames", lines[0])
        header = [l for l in lines if l.startswith("stage")]
        self.assertEqual(header[0].split()[:7], ["stage", "count", "p50", "p90", "p99", "p99.9", "max"])
        rows = {l.split()[0]: l.split() for l in lines if l.split() and l.split()[0] in self.STAGES}
        self.assertEqual(list(rows), self.STAGES)
        self.assertEqual(rows["request"][1], "1001")
        self.assertEqual(rows["request"][6], "5000.00")

    def test_prometheus_histograms(self):
        f = self.families["eta_latency_stage_seconds"]
        self.assertEqual(f.type, "histogram")
        for e in ("0", "1"):
            for s in self.STAGES:
                buckets = [x for x in f.samples if x.name.endswith("_bucket") and x.labels["engine"] == e
                           and x.labels["stage"] == s]
                les = [float(x.labels["le"]) for x in buckets]
                self.assertEqual(les, sorted(les))
                counts = [x.value for x in buckets]
                self.assertEqual(counts, sorted(counts), "cumulative")
                count = [x.value for x in f.samples if x.name.endswith("_count") and x.labels == {"engine": e, "stage": s}]
                self.assertEqual(counts[-1], count[0])  # +Inf == _count
                self.assertEqual(count[0], 1000 if e == "0" else 1)
        # engine 0, stage stack: values 1..1000 us; below 2^20 ns (1.048576 ms) all 1000, below 2^19 ns 524.
        b = {x.labels["le"]: x.value for x in f.samples if x.name.endswith("_bucket")
             and x.labels["engine"] == "0" and x.labels["stage"] == "stack"}
        self.assertEqual(b["0.001048576"], 1000)
        self.assertEqual(b["0.000524288"], 524)
        sums = {x.labels["stage"]: x.value for x in f.samples if x.name.endswith("_sum") and x.labels["engine"] == "1"}
        self.assertAlmostEqual(sums["request"], 0.005)
        t = self.families["eta_latency_traces"]
        self.assertEqual(t.type, "counter")
        self.assertEqual({x.labels["outcome"] for x in t.samples}, {"started", "complete", "no_event", "no_reply"})

    def test_slow_log(self):
        """The slow-request log (--slow and the JSON's "slow"): slowest first
        across engines and intervals; a request's stages in path order, the
        program's split only where it stamped."""
        slow = self.j["slow"]
        self.assertEqual(slow["per_engine"], 8)
        self.assertEqual(slow["interval_s"], 10.0)
        reqs = slow["requests"]
        self.assertEqual([r["request_us"] for r in reqs], [5.0, 3.0, 2.0, 1.0])
        self.assertEqual([(r["engine"], r["interval"]) for r in reqs], [(1, "open"), (0, "done"), (0, "done"), (0, "done")])
        first, second = reqs[0], reqs[1]
        self.assertTrue(first["woken"])
        self.assertFalse(first["stamped"])
        self.assertNotIn("program_read", first["stages_us"])
        self.assertIn("program_woken", first["stages_us"])
        self.assertEqual(list(second["stages_us"]),
                         ["stack", "event", "program_spin", "program_read", "program_reply", "program_taken",
                          "transmit", "port", "request"])
        st = second["stages_us"]
        self.assertAlmostEqual(st["stack"] + st["event"] + st["program_spin"] + st["transmit"], st["request"])
        self.assertAlmostEqual(st["program_read"] + st["program_reply"] + st["program_taken"], st["program_spin"])
        lines = self.slow.splitlines()
        self.assertIn("slowest sampled requests", lines[0])
        self.assertEqual(lines[1].split()[:4], ["eng", "intvl", "request", "stack"])
        rows = [l.split() for l in lines[2:6]]
        self.assertEqual([r[2] for r in rows], ["5.00", "3.00", "2.00", "1.00"])
        self.assertEqual(rows[0][:2], ["1", "open"])
        self.assertEqual(rows[0][6], "-")  # no stamps: no split
        self.assertEqual(rows[1][7], "0.10")  # program_read of the 3 us request


if __name__ == "__main__":
    unittest.main(verbosity=2)
