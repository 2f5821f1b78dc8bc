#!/usr/bin/env python3
"""Runs preload_readiness_prog scenarios under libeta-preload.so attached to
dti's loopback TEST FIXTURE engine: readiness across threads, epoll sets and
fork (see readiness_prog.c). Each program runs under a timeout."""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

SCENARIOS = ["handoff", "handoff_poll", "add_while_sleeping", "epollout", "many", "two_sets", "fork_shared",
             "first_look", "engine_gone_listeners"]  # last: it crashes the fixture engine

EXPECTED_WARNINGS = {
    "engine_gone_listeners": ["the PPE has gone"],
    "select_engine_gone": ["the PPE has gone"],
    "bypass": ["splice() on accelerated socket", "copy_file_range() on accelerated socket",
               "sendfile() on accelerated socket", "fdopen() on accelerated socket",
               "received from another process is an accelerated socket that cannot be used here"],
    "uring": ["io_uring request (opcode"],
    "watchdog": ["a wakeup was lost"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("scenarios", nargs="*", default=SCENARIOS)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="eta-readiness-test-")
    sock = os.path.join(tmp, "ppe.sock")
    ppe = subprocess.Popen([a.fixture, sock], stdout=subprocess.PIPE, text=True)
    failures = []
    try:
        line = ppe.stdout.readline()
        if line.strip() != "READY":
            print("FAIL fixture PPE did not start: " + line)
            return 1
        env = dict(os.environ, LD_PRELOAD=a.shim, ETA_SOCKET=sock, ETA_NET="port 10.9.0.1/24",
                   ETA_LOG="fallback", ETA_SPIN_US="20", ETA_TEST_FIXTURE_PID=str(ppe.pid))
        for k in ("ETA_REQUIRE", "ETA_DISABLE"):
            env.pop(k, None)
        for name in a.scenarios:
            try:
                p = subprocess.run([a.prog, name], env=env, capture_output=True, text=True, timeout=180)  # a hang guard; each program bounds its own waits
                # The warnings a scenario must give, each exactly once; no others.
                expected = EXPECTED_WARNINGS.get(name, [])
                warned = [ln for ln in p.stderr.splitlines() if "warning:" in ln]
                once = all(sum(w in ln for ln in warned) == 1 for w in expected)
                unexpected = [ln for ln in warned if not any(w in ln for w in expected)]
                good = p.returncode == 0 and "OK" in p.stdout and once and not unexpected
                detail = f"rc={p.returncode} out={p.stdout.strip()!r} err={p.stderr.strip()[-600:]!r}"
            except subprocess.TimeoutExpired:
                good, detail = False, "timed out"
            print(("ok   " if good else "FAIL ") + name + ("" if good else ": " + detail))
            if not good:
                failures.append(name)
    finally:
        ppe.send_signal(signal.SIGTERM)
        try:
            ppe.wait(timeout=10)
        except subprocess.TimeoutExpired:
            ppe.kill()
            ppe.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
