#!/usr/bin/env bash
# The Debian packages and the service (issue 34), end to end on this machine:
#   package_test.sh TREE OUT [all|build|install]
# TREE: the source tree (tools/eta package builds from it); OUT: where the
# packages go (built once per run, every check below uses the same ones;
# build/packages, tools/eta package's own: the same copy path keeps ccache hits).
# ETA_TEST_PACKAGES=DIR: use the .deb files in DIR instead of building.
# Stages (default all): build runs 1-3, which change nothing on the host, and
# leaves OUT/checked-tree naming the tree it built and the packages that
# passed; install runs 4-6 (dpkg -i/-P: the whole host sees them, so that
# test runs alone) on those packages when OUT/checked-tree names this very
# tree (its files' contents and HEAD), else it builds and checks them first.
#  1. tools/eta package builds eta, libdti0, libdti-dev;
#  2. dpkg -c shows the expected files; lintian finds no error or warning
#     (those that stay are overridden in debian/ with a reason);
#  3. the man pages render without warnings, and each tool's --help and its
#     man page name the same options;
#  4. they install: user and group eta, /etc/eta/ppe.toml a conffile;
#     systemd-analyze verify accepts the installed unit;
#  5. eta-ppe started as the unit starts it (user eta, exactly the unit's
#     capabilities, its memlock limit, no new privileges) on the lab's port,
#     with a fake NOTIFY_SOCKET (abstract): READY=1 with STATUS=, WATCHDOG=1
#     from the engines' heartbeat; an eta-run program of a member of group
#     eta moves 8 MiB byte-exact through it; a user outside the group is
#     refused with EACCES naming the group; SIGTERM: STOPPING=1, exit 0;
#  6. remove keeps only the conffile; purge leaves no file of the packages
#     and no eta user or group.
TREE=$1 OUT=$2 STAGE=${3:-all}
. "$(dirname "$0")/../lib.sh"
case "$STAGE" in all|build|install) ;; *) fail "stage '$STAGE': expected all, build or install" ;; esac
here=$(cd "$(dirname "$0")" && pwd)
for t in dpkg-buildpackage dh lintian systemd-analyze setpriv prlimit socat man; do
    command -v "$t" >/dev/null || skip "$t is not installed (tools/eta setup installs it)"
done
pkgs=(eta libdti0 libdti-dev)
if [ "$STAGE" != build ]; then
    for p in "${pkgs[@]}"; do
        if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -cx installed >/dev/null; then
            fail "package $p is installed on this machine: this test installs and purges eta's packages; dpkg -P ${pkgs[*]} first"
        fi
    done
    getent passwd eta >/dev/null && fail "a user eta exists without the package: this test's purge would remove it; remove it first (deluser --system eta)"
fi

work=$(mktemp -d)
on_exit "rm -rf $work"
chmod 755 "$work" # read by the unprivileged users below

# The tree tools/eta package copies (tracked and untracked files, not the
# ignored ones, not build*), by content, and HEAD (the packages' version);
# a value that matches nothing when it cannot be computed.
tree_hash() {
    (set -o pipefail
     cd "$TREE" && { git rev-parse HEAD && git ls-files -z --cached --others --exclude-standard |
         grep -zv '^build' | sort -z | xargs -0 -r sha256sum --; } | sha256sum | cut -d' ' -f1) 2>/dev/null ||
        echo "unknown-$$-$RANDOM"
}
stamp=$OUT/checked-tree
checked=
if [ -n "${ETA_TEST_PACKAGES:-}" ]; then
    # For iterating on the checks below: packages built before, not rebuilt.
    note "1. the packages in ETA_TEST_PACKAGES=$ETA_TEST_PACKAGES (not rebuilt)"
    mapfile -t debs < <(ls "$ETA_TEST_PACKAGES"/*.deb)
elif [ "$STAGE" = install ] && [ -f "$stamp" ] && [ "$(head -1 "$stamp")" = "tree $(tree_hash)" ]; then
    mapfile -t debs < <(tail -n +2 "$stamp")
    for d in "${debs[@]}"; do [ -f "$d" ] || fail "$stamp names $d, which is gone"; done
    checked=yes
    note "1-3. the packages pkg_build built and checked from this tree: ${debs[*]##*/}"
else
    rm -f "$stamp"
    hash=$(tree_hash)
    note "1. tools/eta package --out $OUT"
    start=$SECONDS
    mapfile -t debs < <(timeout 1500 "$TREE/tools/eta" package --out "$OUT") || fail "tools/eta package failed"
    note "built in $((SECONDS - start)) s: ${debs[*]##*/}"
fi
deb_of() { local d; for d in "${debs[@]}"; do [[ "$(basename "$d")" == "$1"_* ]] && { echo "$d"; return; }; done; fail "no package $1 among: ${debs[*]}"; }
ETA_DEB=$(deb_of eta) LIB_DEB=$(deb_of libdti0) DEV_DEB=$(deb_of libdti-dev)

check_packages() {
note "2. dpkg -c: the expected files"
expect_in() {
    local deb=$1 list
    shift
    list=$(dpkg -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
    for f in "$@"; do
        grep -Eqx "$f" <<<"$list" || { echo "$list" >&2; fail "$(basename "$deb") lacks $f"; }
    done
}
M='/usr/share/man'
expect_in "$ETA_DEB" /usr/bin/eta-ppe /usr/bin/eta-run /usr/bin/eta-stat /usr/bin/eta-perf /usr/bin/eta-lab \
    '/usr/lib/[a-z0-9_-]+/eta/libeta-preload.so' /etc/eta/ppe.toml /lib/systemd/system/eta-ppe.service \
    $M/man8/eta-ppe.8.gz $M/man5/ppe.toml.5.gz $M/man1/eta-run.1.gz $M/man1/eta-stat.1.gz $M/man1/eta-perf.1.gz \
    $M/man8/eta-lab.8.gz
expect_in "$LIB_DEB" '/usr/lib/[a-z0-9_-]+/libdti.so.0.*'
expect_in "$DEV_DEB" /usr/include/dti/dti.h /usr/include/dti/dti_view.h /usr/include/dti/dti_dgram.h '/usr/lib/[a-z0-9_-]+/libdti.so' '/usr/lib/[a-z0-9_-]+/pkgconfig/dti.pc' \
    $M/man3/libdti.3.gz '/usr/share/doc/libdti-dev/examples/echo_server.c'
dpkg-deb -f "$ETA_DEB" Depends | grep -c 'libdti0' >/dev/null || fail "eta's Depends has no libdti0 (dpkg-shlibdeps): $(dpkg-deb -f "$ETA_DEB" Depends)"

note "2. lintian"
lint=$(timeout 600 lintian --fail-on error,warning "${debs[@]}" 2>&1) || { echo "$lint" >&2; fail "lintian found errors or warnings"; }
[ -z "$lint" ] || echo "$lint" | sed 's/^/    /'

note "3. man pages render without warnings; --help and man page name the same options"
x=$work/x
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$x"; done
for page in "$x"/usr/share/man/man*/*; do
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) || fail "man cannot render $page: $warn"
    [ -z "$warn" ] || fail "$(basename "$page") renders with warnings: $warn"
done
# Long options, one per line, sorted: from --help and from the man page.
long_opts() { grep -oE -- '--[a-z][a-z-]*[a-z]' | sort -u; }
same_options() {
    local tool=$1 page=$2 from_help from_man
    shift 2
    from_help=$("$@" 2>&1 | long_opts)
    from_man=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$page" 2>/dev/null | col -b | sed -n '/^OPTIONS/,/^[A-Z]/p' | long_opts)
    [ -n "$from_help" ] || fail "$tool --help names no option"
    [ "$from_help" = "$from_man" ] ||
        fail "$tool: --help and $(basename "$page") disagree: only in --help: $(comm -23 <(echo "$from_help") <(echo "$from_man") | paste -sd' '); only in the man page: $(comm -13 <(echo "$from_help") <(echo "$from_man") | paste -sd' ')"
}
same_options eta-ppe "$x$M/man8/eta-ppe.8.gz" "$x/usr/bin/eta-ppe" --help
same_options eta-stat "$x$M/man1/eta-stat.1.gz" "$x/usr/bin/eta-stat" --help
same_options eta-run "$x$M/man1/eta-run.1.gz" bash "$x/usr/bin/eta-run" --help
}
[ -n "$checked" ] || check_packages
if [ "$STAGE" = build ]; then
    [ -z "${ETA_TEST_PACKAGES:-}" ] || fail "stage build with ETA_TEST_PACKAGES: nothing was built"
    printf 'tree %s\n' "$hash" > "$stamp.new"
    printf '%s\n' "${debs[@]}" >> "$stamp.new"
    mv -f "$stamp.new" "$stamp"
    note "ok: built and checked; $stamp names them for pkg_package"
    exit 0
fi

note "4. install"
on_exit "dpkg -P ${pkgs[*]}"
out=$(DEBIAN_FRONTEND=noninteractive timeout 300 dpkg -i "${debs[@]}" 2>&1) || { echo "$out" >&2; fail "dpkg -i failed"; }
getent passwd eta >/dev/null || fail "installing eta made no user eta"
getent group eta >/dev/null || fail "installing eta made no group eta"
dpkg-query -W -f='${Conffiles}\n' eta | grep -c '^ /etc/eta/ppe.toml ' >/dev/null || fail "/etc/eta/ppe.toml is not a conffile of eta"
out=$(/usr/bin/eta-ppe --check 2>&1) && fail "eta-ppe --check accepted the packaged ppe.toml, which has no port: $out"
[[ "$out" == *'no [[port]] is configured'* ]] || fail "eta-ppe --check on the packaged (all commented) ppe.toml does not ask for a port: $out"
unit=/lib/systemd/system/eta-ppe.service
v=$(timeout 60 systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify rejects $unit: $v"
[ -z "$v" ] || fail "systemd-analyze verify warns about $unit: $v"

note "5. eta-ppe as the unit starts it, in the lab"
lab_up
key() { sed -n "s/^$1=//p" "$unit" | tail -1; }
caps=$(key AmbientCapabilities)
[ "$(key User)" = eta ] && [ "$(key Type)" = notify ] && [ -n "$caps" ] || fail "$unit: expected User=eta, Type=notify and AmbientCapabilities="
[ "$(key CapabilityBoundingSet)" = "$caps" ] || fail "$unit: CapabilityBoundingSet differs from AmbientCapabilities"
setcaps=$(for c in $caps; do c=${c#CAP_}; printf ',+%s' "${c,,}"; done)
rundir=/run/eta-t$$ # the unit's RuntimeDirectory=, owned by its user
install -d -o eta -g eta -m 0755 "$rundir"
on_exit "rm -rf $rundir"
sock=$rundir/ppe.sock
# The lab's port and engine; the control socket as packaged: in the runtime
# directory, the default mode 0660 (the lab's config opens it to everyone).
sed -e "s|^socket = .*|socket = \"$sock\"|" -e '/^mode = /d' "$ETA_LAB_CONFIG" > "$work/ppe.toml"
chmod 644 "$work/ppe.toml"
on_exit "rm -rf /tmp/dpdk/eta-lab-$ETA_LAB_NAME /var/run/dpdk/eta-lab-$ETA_LAB_NAME"
notify=@eta-notify-t$$
start_bg listener python3 "$here/notify_listener.py" "$notify" "$work/notify.log"
wait_until 30 grep -qx listening "$work/notify.log" || fail "the fake NOTIFY_SOCKET did not come up"
# LimitMEMLOCK=: systemd raises it as root before dropping privileges. A
# machine whose root cannot raise it (no CAP_SYS_RESOURCE, as in some VMs)
# runs at its hard limit, said here; the lab's rings need 2 MiB.
memlock=$(key LimitMEMLOCK | sed 's/infinity/unlimited/')
if ! prlimit --memlock="$memlock" true 2>/dev/null; then
    hard=$(ulimit -Hl)
    memlock=$([ "$hard" = unlimited ] && echo unlimited || echo $((hard * 1024)))
    note "this machine cannot raise RLIMIT_MEMLOCK to the unit's LimitMEMLOCK=$(key LimitMEMLOCK): running at its hard limit ($hard KiB)"
fi
start_bg ppe timeout 600 env NOTIFY_SOCKET="$notify" WATCHDOG_USEC=2000000 \
    prlimit --memlock="$memlock" \
    setpriv --reuid eta --regid eta --init-groups --no-new-privs \
        --inh-caps="-all$setcaps" --ambient-caps="-all$setcaps" --bounding-set="-all$setcaps" \
        /usr/bin/eta-ppe --foreground --config "$work/ppe.toml" 2>"$work/ppe.log"
wait_until 120 grep -qx 'READY=1' "$work/notify.log" || { cat "$work/ppe.log" "$work/notify.log" >&2; fail "eta-ppe sent no READY=1"; }
real=$(pgrep -P "$ppe_pid" -x eta-ppe | head -1)
[ -n "$real" ] || fail "cannot find eta-ppe under its timeout wrapper"
[ "$(stat -c %U "/proc/$real")" = eta ] || fail "eta-ppe runs as $(stat -c %U "/proc/$real"), not eta"
want=0
for c in $caps; do
    n=$(python3 -c "import sys; print({'CAP_NET_ADMIN':12,'CAP_NET_RAW':13,'CAP_IPC_LOCK':14,'CAP_SYS_NICE':23,'CAP_SYS_ADMIN':21,'CAP_BPF':39}[sys.argv[1]])" "$c") || fail "unknown capability $c"
    want=$((want | (1 << n)))
done
have=$((16#$(sed -n 's/^CapEff:[[:space:]]*//p' "/proc/$real/status")))
[ "$have" -eq "$want" ] || fail "eta-ppe's effective capabilities are $(printf %x $have), the unit's $(printf %x $want)"
grep -q '^STATUS=serving on '"$sock"' (group eta)' "$work/notify.log" || fail "no STATUS= line naming the socket and group: $(cat "$work/notify.log")"
wait_until 30 grep -qx 'WATCHDOG=1' "$work/notify.log" || fail "no WATCHDOG=1 within 30 s (WATCHDOG_USEC=2000000): $(cat "$work/notify.log")"
[ "$(stat -c %G "$sock")" = eta ] || fail "$sock belongs to group $(stat -c %G "$sock"), not eta"

note "5. a member of group eta: an eta-run program, 8 MiB byte-exact"
head -c $((8 << 20)) /dev/urandom > "$work/blob"
chmod 644 "$work/blob"
P=$ETA_LAB_PEER_IP
start_bg sink ip netns exec "$ETA_LAB_NS" timeout 120 socat -u "TCP-LISTEN:7341,bind=$P,reuseaddr" "OPEN:$work/got,creat,trunc"
wait_until 30 sh -c "ip netns exec '$ETA_LAB_NS' ss -Hltn 'sport = :7341' | grep -c LISTEN >/dev/null" || fail "the peer's socat did not listen"
ETA_LOG=accel timeout 120 setpriv --reuid nobody --regid nogroup --groups eta \
    /usr/bin/eta-run --require --socket "$sock" -- socat -u "OPEN:$work/blob" "TCP:$P:7341" 2>"$work/run.log" ||
    { cat "$work/run.log" "$work/ppe.log" >&2; fail "eta-run socat as a member of group eta failed"; }
grep -Eq '^eta\[[0-9]+\]: fd [0-9]+: accelerated \(' "$work/run.log" || { cat "$work/run.log" >&2; fail "the member's socat did not go through eta-ppe"; }
wait "$sink_pid" || fail "the peer's socat failed"
cmp -s "$work/blob" "$work/got" || fail "the peer received $(stat -c %s "$work/got") bytes that differ from the 8 MiB sent"

note "5. a user outside group eta is refused, the group named"
refused "a user outside group eta" "only members of group 'eta' may attach" \
    timeout 60 setpriv --reuid nobody --regid nogroup --clear-groups \
    /usr/bin/eta-run --require --socket "$sock" -- socat -u "OPEN:$work/blob" "TCP:$P:7342"
refused "a user outside group eta" "EACCES" \
    timeout 60 setpriv --reuid nobody --regid nogroup --clear-groups \
    /usr/bin/eta-run --require --socket "$sock" -- true

note "5. SIGTERM: STOPPING=1, exit 0"
kill -TERM "$real"
rc=0
wait "$ppe_pid" || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/ppe.log" >&2; fail "eta-ppe exited with $rc after SIGTERM"; }
grep -qx 'STOPPING=1' "$work/notify.log" || fail "no STOPPING=1: $(cat "$work/notify.log")"

note "6. remove keeps the conffile; purge leaves nothing"
# The files of the packages that exist now (none of them is a directory).
present() { local f; while read -r f; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <<<"$files"; }
files=$(for d in "${debs[@]}"; do dpkg -c "$d"; done | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|' | sort -u)
out=$(timeout 300 dpkg -r "${pkgs[@]}" 2>&1) || { echo "$out" >&2; fail "dpkg -r failed"; }
left=$(present)
[ "$left" = /etc/eta/ppe.toml ] || fail "after dpkg -r, expected only /etc/eta/ppe.toml left, found: $(echo $left)"
out=$(timeout 300 dpkg -P "${pkgs[@]}" 2>&1) || { echo "$out" >&2; fail "dpkg -P failed"; }
left=$(present)
[ -z "$left" ] || fail "after dpkg -P these files are left: $(echo $left)"
[ ! -e /etc/eta ] || fail "after dpkg -P /etc/eta is left: $(ls -A /etc/eta)"
getent passwd eta >/dev/null && fail "after dpkg -P the user eta is left"
getent group eta >/dev/null && fail "after dpkg -P the group eta is left"
note "ok"
