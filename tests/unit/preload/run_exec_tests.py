#!/usr/bin/env python3
"""exec keeps accelerated sockets (issue 12), under libeta-preload.so attached
to dti's loopback TEST FIXTURE engine (ETA_NET names 10.9.0.1/24 as its port):

  self_exec   python3 re-executes itself keeping its listener, an established
              connection with unread data and a client (exec_prog.py)
  bare_env    the same through an environment of the program's own making
              (nginx's binary upgrade): the shim comes back for the new image
  exec_fail   an exec that fails leaves everything as it was
  spawn       subprocess (vfork + exec) hands a connection to a child program;
              the spawning thread had no context and gets none from the child
  forged      a stale or forged ETA_EXEC_STATE: one warning, the program runs
  socat       socat TCP4-LISTEN:...,fork,reuseaddr EXEC:cat (and EXEC:cat,nofork:
              cat exec'd on the connection itself) echoes byte-exact (1 B to
              4 MiB, more than the 64 KiB rings; 4 connections each, which
              alternate between engines when there are several)
  pass        socket.send_fds (SCM_RIGHTS) hands a connection, then the
              listener, to another program, which serves 64 connections

--engines N runs the fixture with N engines (each owning its flows, as
eta-ppe with N engine cores): listener groups and connections on every
engine go through exec and passing.

Every process is started here and ended by its own PID, under a timeout."""
import argparse
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "exec_prog.py")
# The real interpreter, not a wrapper script that would attach first.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
failures = []


def report(name, good, detail=""):
    print(("ok   " if good else "FAIL ") + name + ("" if good else ": " + detail), flush=True)
    if not good:
        failures.append(name)


def run_prog(name, args, env, must_warn=None, pass_fds=()):
    """Runs exec_prog.py; OK printed, exit 0, and exactly the warning asked for."""
    try:
        p = subprocess.run([PYTHON, PROG] + args, env=env, capture_output=True, text=True, timeout=90,
                           pass_fds=pass_fds)
    except subprocess.TimeoutExpired:
        report(name, False, "timed out")
        return
    warned = [ln for ln in p.stderr.splitlines() if "warning:" in ln]
    if must_warn:
        warn_ok = len(warned) == 1 and must_warn in warned[0]
    else:
        warn_ok = not warned
    good = p.returncode == 0 and "OK" in p.stdout and warn_ok
    report(name, good, f"rc={p.returncode} out={p.stdout.strip()[-300:]!r} err={p.stderr.strip()[-800:]!r}")


def memfd_with(data):
    fd = os.memfd_create("eta-exec-state", 0)
    os.write(fd, data)
    return fd


def forged(env):
    run_prog("forged: not a number", ["plain"], dict(env, ETA_EXEC_STATE="12x"), must_warn="ignoring")
    run_prog("forged: a descriptor that is not a handover", ["plain"], dict(env, ETA_EXEC_STATE="2"),
             must_warn="ignoring")
    run_prog("forged: a descriptor that is not open", ["plain"], dict(env, ETA_EXEC_STATE="999"),
             must_warn="ignoring")
    fd = memfd_with(b"\x00garbage" * 20)
    run_prog("forged: garbage in a memfd of that name", ["plain"], dict(env, ETA_EXEC_STATE=str(fd)),
             must_warn="ignoring", pass_fds=(fd,))
    os.close(fd)
    # A well-formed handover of another process (pid 1): stale.
    head = struct.pack("<IHHiIiiiiII", 0x43584541, 1, 44, 1, 1, 100, 101, 102, 103, 0, 0)
    entry = struct.pack("<iIIiIiiiiIHH", 5, 0x00100001, 1, -1, 0, 0, 0, -1, -1, 0, 0, 0)
    fd = memfd_with(head + entry)
    run_prog("stale: another process's handover", ["plain"], dict(env, ETA_EXEC_STATE=str(fd)),
             must_warn="stale", pass_fds=(fd,))
    os.close(fd)


def socat(env, tmp, exec_opts, port):
    """EXEC:cat talks to cat over a socketpair (the connection stays in
    socat's fork child); EXEC:cat,nofork execs cat in that child with the
    connection itself as its stdin and stdout (inetd style)."""
    if not shutil.which("socat"):
        report("socat", False, "socat is not installed (tools/eta setup installs it)")
        return
    log = open(os.path.join(tmp, "socat.log"), "w+")
    # -t 30: after the client's EOF, socat waits for cat's echo at most that
    # long (its default, 0.5 s, cut the echo short on a busy machine: "echo 3
    # of 1 bytes: 0 came back" with a test beside it at load ~20).
    srv = subprocess.Popen(["socat", "-d", "-d", "-t", "30", f"TCP4-LISTEN:{port},bind=10.9.0.1,fork,reuseaddr",
                            "EXEC:cat" + exec_opts], env=env, stderr=subprocess.PIPE, text=True)
    try:
        # socat says when it listens (its -d -d log): no guessing with sleeps.
        listening = False
        for line in srv.stderr:
            log.write(line)
            if "listening on" in line:
                listening = True
                break
        if not listening:
            log.seek(0)
            report("socat", False, "socat did not listen: " + log.read()[-500:])
            return
        # Its log goes on being read, so socat never blocks on a full pipe.
        drain = threading.Thread(target=lambda: [log.write(ln) for ln in srv.stderr], daemon=True)
        drain.start()
        for size in (1, 1000, 100000, 4 << 20):
            run_prog(f"socat EXEC:cat{exec_opts} echoes {size} bytes", ["client", str(port), str(size), "4"],
                     env)
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--engines", type=int, default=1)
    ap.add_argument("scenarios", nargs="*",
                    default=["self_exec", "bare_env", "exec_fail", "spawn", "forged", "socat", "pass"])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="eta-exec-test-")
    sock = os.path.join(tmp, "ppe.sock")
    ppe = subprocess.Popen([a.fixture, sock, "--engines", str(a.engines)], stdout=subprocess.PIPE, text=True)
    try:
        line = ppe.stdout.readline()
        if line.strip() != "READY":
            print("FAIL fixture PPE did not start: " + line)
            return 1
        env = dict(os.environ, LD_PRELOAD=a.shim, ETA_SOCKET=sock, ETA_NET="port 10.9.0.1/24",
                   ETA_LOG="fallback", ETA_SPIN_US="20")
        for k in ("ETA_REQUIRE", "ETA_DISABLE", "ETA_EXEC_STATE"):
            env.pop(k, None)
        for name in a.scenarios:
            if name in ("self_exec", "bare_env", "exec_fail", "spawn", "pass"):
                run_prog(name, [name], env)
            elif name == "forged":
                forged(env)
            elif name == "socat":
                port = 20000 + os.getpid() % 20000
                socat(env, tmp, "", port)
                socat(env, tmp, ",nofork", port + 1)
            else:
                report(name, False, "unknown scenario")
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
