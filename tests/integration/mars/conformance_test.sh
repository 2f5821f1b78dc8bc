#!/usr/bin/env bash
# tools/eta conformance on a few of packetdrill's scripts that pass on both
# sides (the tool itself under test: packetdrill built outside the tree, its
# own lab up and down, both sides run, the table and the pass counts printed).
#   conformance_test.sh CONFORMANCE_RUN BUILD_DIR ETA_PPE SHIM
RUN=$1 BUILD=$2 ETA_PPE=$3 SHIM=$4
. "$(dirname "$0")/../lib.sh"
need_built "$ETA_PPE" eta-ppe
[ -f "$SHIM" ] || skip "the shim is not built ($SHIM)"
ls "$(dirname "$RUN")"/../../../shared/packetdrill/packetdrill-*.tar.gz >/dev/null 2>&1 ||
    skip "packetdrill's source is not beside the tree (../shared/packetdrill/)"
command -v flex >/dev/null && command -v bison >/dev/null || skip "flex and bison are not installed (tools/eta setup)"

# Scripts that pass on Linux and under eta (mars/README.md "Conformance").
scripts=(close/close-on-syn-sent.pkt blocking/blocking-accept.pkt)
out=$(mktemp)
on_exit "rm -f $out"
labs_before=$("$ETA_LAB" list | grep -c '^conf' || true)
rc=0
timeout 500 "$RUN" --build "$BUILD" --per-script 40 --total 300 "${scripts[@]}" >"$out" 2>&1 || rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "tools/conformance/run failed (rc $rc)"
for s in "${scripts[@]}"; do
    grep -Eq "^${s//./\\.} +pass +pass" "$out" || fail "$s: expected pass on both sides"
done
grep -q "pass: linux ${#scripts[@]}, eta ${#scripts[@]}, both ${#scripts[@]};" "$out" || fail "the pass counts are not ${#scripts[@]} and ${#scripts[@]}"
# Its lab is gone again.
labs_after=$("$ETA_LAB" list | grep -c '^conf' || true)
[ "$labs_after" -le "$labs_before" ] || fail "the conformance lab was left up: $("$ETA_LAB" list)"
