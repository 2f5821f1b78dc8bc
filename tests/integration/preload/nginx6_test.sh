#!/usr/bin/env bash
# nginx listening on [::] through the engine (issue 31): Debian's nginx under
# eta-run --require, two workers, `listen [::]:PORT ipv6only=off` (one
# dual-stack listener, one PPE listener for both families). From the peer:
#  - curl -6 to [PPE IPv6] and curl to the PPE's IPv4 address fetch a 2 MiB
#    file, sha256 equal to the file's;
#  - wrk over IPv6 and over IPv4 (keep-alive), no errors, no non-2xx;
#  - nginx's access log names each client as nginx sees it from accept():
#    the peer's IPv6 address, and the peer's IPv4 address v4-mapped
#    (::ffff:a.b.c.d, as Linux gives a dual-stack socket);
#  - nothing of nginx fell back to the kernel (the shim's log), and eta-stat
#    counts IPv6 packets in the engine.
#   nginx6_test.sh ETA_PPE LIBETA_PRELOAD ETA_RUN ETA_STAT
ETA_PPE=$1 SHIM=$2 ETA_RUN=$3 ETA_STAT=$4
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../ppe/ppe_lib.sh"
need_built "$ETA_PPE" eta-ppe
need_built "$ETA_STAT" eta-stat
command -v nginx >/dev/null || skip "nginx is not installed (tools/eta setup)"
command -v wrk >/dev/null || skip "wrk is not installed (tools/eta setup)"
export ETA_PRELOAD_LIB=$SHIM

ppe_lab6
chmod 755 "$work" # nginx's workers run as nobody and serve from here
ppe_start "$work/ppe.toml"
ppe_ping6 "$H6" "of eta-ppe's start"
ip6_before=$(ppe_ip6_segments)

mkdir -p "$work/nginx/logs" "$work/www"
head -c $((2 << 20)) /dev/urandom > "$work/www/blob"
want=$(sha256sum < "$work/www/blob" | cut -d' ' -f1)
echo hello > "$work/www/index.html"
port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log info;
events { worker_connections 1024; }
http {
    log_format peer '\$remote_addr \$server_addr \$status';
    access_log $work/nginx/logs/access.log peer;
    server { listen [::]:$port ipv6only=off; root $work/www; }
}
CONF
note "nginx on [::]:$port (ipv6only=off) under eta-run --require"
ETA_LOG=fallback,accel timeout 20 "$ETA_RUN" --require --socket "$ETA_LAB_SOCKET" -- \
    "$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx.err" ||
    fail "nginx did not start: $(cat "$work/nginx.err")"
on_exit "kill -TERM \$(cat $work/nginx/nginx.pid 2>/dev/null) 2>/dev/null"
wait_until 60 test -s "$work/nginx/nginx.pid" || fail "nginx wrote no pid"
grep -qE "listening on \[::\]:$port on the PPE" "$work/nginx.err" "$work/nginx/logs/error.log" ||
    fail "nginx's [::] listener is not the PPE's: $(cat "$work/nginx.err" "$work/nginx/logs/error.log")"

for url in "http://[$H6]:$port/blob" "http://$H4:$port/blob"; do
    got=$(peer timeout 60 curl -sS -g --max-time 50 "$url" | sha256sum | cut -d' ' -f1)
    [ "$got" = "$want" ] || fail "curl $url: the file differs ($got, want $want)"
done
for url in "http://[$H6]:$port/" "http://$H4:$port/"; do
    peer timeout 60 wrk -t 2 -c 10 -d 1 "$url" > "$work/wrk.out" 2>&1 || fail "wrk $url failed: $(cat "$work/wrk.out")"
    # (A timeout, wrk's 2 s, says how busy the machine was, not what eta did: reported, not judged.)
    ! grep -cE "Non-2xx|Socket errors: connect [1-9]|Socket errors: .*(read|write) [1-9]" "$work/wrk.out" >/dev/null ||
        fail "wrk $url saw errors: $(cat "$work/wrk.out")"
    grep -qE "Requests/sec: +[0-9]" "$work/wrk.out" || fail "wrk $url: no rate: $(cat "$work/wrk.out")"
done
# nginx writes its access log as requests end: the lines are there once wrk returned.
grep -c "^$ETA_LAB_PEER_IP6 $H6 200$" "$work/nginx/logs/access.log" >/dev/null ||
    fail "no request logged from [$ETA_LAB_PEER_IP6] to [$H6]: $(head -5 "$work/nginx/logs/access.log")"
grep -c "^::ffff:$ETA_LAB_PEER_IP ::ffff:$H4 200$" "$work/nginx/logs/access.log" >/dev/null ||
    fail "no request logged from ::ffff:$ETA_LAB_PEER_IP to ::ffff:$H4: $(grep -v ":$ETA_LAB_PEER_IP6 " "$work/nginx/logs/access.log" | head -5)"
# Every request came from one of the two, named as above (whatever its status:
# wrk may leave a last request unanswered when its time is up).
others=$(grep -vc -e "^$ETA_LAB_PEER_IP6 $H6 " -e "^::ffff:$ETA_LAB_PEER_IP ::ffff:$H4 " "$work/nginx/logs/access.log" || true)
[ "$others" = 0 ] || fail "$others requests logged with other addresses: $(grep -v -e "^$ETA_LAB_PEER_IP6 $H6 " -e "^::ffff:$ETA_LAB_PEER_IP ::ffff:$H4 " "$work/nginx/logs/access.log" | head -5)"
! grep -cE "fd [0-9]+: (kernel|fallback)" "$work/nginx.err" "$work/nginx/logs/error.log" >/dev/null ||
    fail "a socket of nginx went to the kernel: $(grep -hE "fd [0-9]+: (kernel|fallback)" "$work/nginx.err" "$work/nginx/logs/error.log" | head -5)"
segs=$(( $(ppe_ip6_segments) - ip6_before ))
[ "$segs" -ge $(((2 << 20) / 1500)) ] || fail "eta-stat counts $segs IPv6 segments in the engine for a 2 MiB request over IPv6"
master=$(cat "$work/nginx/nginx.pid")
kill -QUIT "$master"
wait_until 30 eval "! kill -0 $master 2>/dev/null" || fail "nginx did not quit"
ppe_stop
echo "preload_nginx6: nginx on [::] under eta-run served curl -6 and curl (2 MiB, byte-exact) and wrk over both families through the engine; $(wc -l < "$work/nginx/logs/access.log") requests logged with their real addresses - held"
