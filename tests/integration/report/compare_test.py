#!/usr/bin/env python3
"""tools/eta bench compare on two made-up results.json files (TEST FIXTURES:
figures with chosen samples), checking its verdicts: a change beyond twice
the larger noise is marked + (better) or - (worse) according to the figure's
direction, a change within the noise is not marked, a deterministic count
that moves is marked, one sample gives '?', and figures only in one file
are listed as such.
Usage: compare_test.py TOOLS_ETA"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ETA = sys.argv.pop(1) if len(sys.argv) > 1 else "tools/eta"


def results(figures):
    return {"schema": 1, "quick": True, "machine": {"commit": "fixture", "date": "fixture"}, "sections": [],
            "figures": figures}


def fig(fid, better, series, noise=None):
    out = {"id": fid, "section": "x", "label": fid, "unit": "u", "better": better,
           "side_by_side": set(series) == {"eta", "kernel"}, "series": {}}
    for name, samples in series.items():
        mean = sum(samples) / len(samples)
        n = noise if noise is not None else (None if len(samples) < 2 else
                                             (sum((s - mean) ** 2 for s in samples) / (len(samples) - 1)) ** 0.5 / mean)
        out["series"][name] = {"value": mean, "samples": samples, "noise": n}
    return out


class Compare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        a = results([fig("tput", "higher", {"eta": [10, 10.2], "kernel": [20, 20.4]}),
                     fig("lat", "lower", {"eta": [100, 101]}),
                     fig("count", "lower", {"value": [199]}, noise=0.0),
                     fig("once", "lower", {"value": [5]}),
                     fig("gone", "lower", {"value": [1, 1.1]})])
        b = results([fig("tput", "higher", {"eta": [15, 15.3], "kernel": [20.1, 20.3]}),
                     fig("lat", "lower", {"eta": [130, 131]}),
                     fig("count", "lower", {"value": [190]}, noise=0.0),
                     fig("once", "lower", {"value": [9]}),
                     fig("new", "lower", {"value": [1, 1.1]})])
        cls.tmp = tempfile.mkdtemp()
        for name, doc in (("a.json", a), ("b.json", b)):
            with open(os.path.join(cls.tmp, name), "w") as f:
                json.dump(doc, f)
        r = subprocess.run([ETA, "bench", "compare", os.path.join(cls.tmp, "a.json"), os.path.join(cls.tmp, "b.json")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        cls.lines = r.stdout.splitlines()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def row(self, fid, series):
        rows = [l for l in self.lines if l.split()[:2] == [fid, series]]
        self.assertEqual(len(rows), 1, self.lines)
        return rows[0].split()

    def test_better_beyond_noise(self):
        r = self.row("tput", "eta")
        self.assertEqual(r[4], "1.500")
        self.assertEqual(r[-2], "+")

    def test_within_noise_unmarked(self):
        self.assertNotIn(self.row("tput", "kernel")[-2], ("+", "-", "?"))

    def test_worse_when_lower_is_better(self):
        self.assertEqual(self.row("lat", "eta")[-2], "-")

    def test_deterministic_count_moves(self):
        self.assertEqual(self.row("count", "value")[-2], "+")

    def test_one_sample_is_unknown(self):
        self.assertEqual(self.row("once", "value")[-2], "?")

    def test_figures_in_one_file_only(self):
        self.assertTrue(any(l.startswith("gone") and "only in A" in l for l in self.lines))
        self.assertTrue(any(l.startswith("new") and "only in B" in l for l in self.lines))
        self.assertIn("2 better, 1 worse beyond noise, 1 within noise, 1 with unknown noise", self.lines[-1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
