#!/usr/bin/env bash
# tools/eta bench report --quick into a temporary directory, then checks the
# result as a reader would get it: every section present (each ok, or plainly
# marked not available where its benchmark is not in the tree), every plot a
# valid PNG, results.json with eta and kernel values for every side-by-side
# figure and a noise estimate for each, the page opened in headless Chromium
# with every image loaded, and `tools/eta bench compare` of the run with
# itself finding no change.
#   report_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
. "$top/tests/integration/lib.sh"
build=${1:?usage: report_test.sh BUILD_DIR}
command -v chromium >/dev/null || fail "chromium is not installed (tools/eta setup installs it)"

work=$(mktemp -d)
on_exit "rm -rf $work"
out=$work/report

note "tools/eta bench report --quick (each benchmark brings up and removes its own lab)"
timeout -k 10 900 "$top/tools/eta" bench report --build "$build" --quick --out "$out" | tee "$work/progress.txt" ||
    fail "tools/eta bench report exited with an error"
grep -qE '^\[1/[0-9]+\]' "$work/progress.txt" || fail "no progress lines ([i/n] name ...) on the terminal"
grep -q 'expect about' "$work/progress.txt" || fail "the report did not say up front how long it takes"

note "sections, PNGs, results.json"
# The ablation and the shim's counts are in the tree: each must run ("ok"),
# never report itself not available.
python3 "$here/check_report.py" "$out" yes yes

note "the page in headless Chromium: every image loaded"
# A copy of the page with a script that records, once everything has loaded,
# each image's natural size in the DOM that --dump-dom prints.
python3 - "$out/index.html" "$work/check.html" <<'PY'
import sys
page = open(sys.argv[1]).read()
probe = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({file: i.dataset.file, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}));
  const p = document.createElement('pre'); p.id = 'image-probe'; p.textContent = JSON.stringify(imgs);
  document.body.appendChild(p);
});
</script></body>"""
assert page.count("</body>") == 1, "index.html must end its body once"
open(sys.argv[2], "w").write(page.replace("</body>", probe))
PY
# Root needs --no-sandbox; a private profile keeps root's home untouched.
timeout -k 5 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$work/chromium" --virtual-time-budget=10000 --dump-dom "file://$work/check.html" \
    > "$work/dom.html" 2> "$work/chromium.log" || { tail -20 "$work/chromium.log"; fail "chromium failed"; }
python3 - "$work/dom.html" "$out/results.json" <<'PY'
import html, json, re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'<pre id="image-probe">(.*?)</pre>', dom, re.S)
if not m:
    sys.exit("FAIL: the probe did not run in Chromium (no #image-probe in the dumped DOM)")
imgs = json.loads(html.unescape(m.group(1)))
plots = [p for s in json.load(open(sys.argv[2]))["sections"] for p in (s.get("plots") or [])]
shown = [i["file"] for i in imgs]
if sorted(shown) != sorted(plots):
    sys.exit(f"FAIL: the page shows {sorted(shown)}, results.json lists {sorted(plots)}")
bad = [i for i in imgs if not (i["complete"] and i["w"] > 0 and i["h"] > 0)]
if bad:
    sys.exit(f"FAIL: images not loaded in Chromium: {bad}")
print(f"Chromium loaded all {len(imgs)} images")
PY

note "tools/eta bench compare: a run against itself"
"$top/tools/eta" bench compare "$out/results.json" "$out/results.json" > "$work/compare.txt" ||
    fail "bench compare exited with an error"
grep -q ' 0 worse beyond noise' "$work/compare.txt" || { cat "$work/compare.txt"; fail "a run differs from itself"; }
grep -qE '^0 better' "$work/compare.txt" || { cat "$work/compare.txt"; fail "a run differs from itself"; }
grep -q 'ppe.rr 64 B.tps' "$work/compare.txt" || fail "compare does not list the eta-perf rr figure"
if "$top/tools/eta" bench compare "$out/results.json" "$out/index.html" > /dev/null 2> "$work/err.txt"; then
    fail "bench compare accepted a file that is not results.json"
fi
grep -q 'not a results.json\|cannot read' "$work/err.txt" || { cat "$work/err.txt"; fail "unclear error for a bad file"; }
echo "PASS"
