#!/usr/bin/env python3
"""Runs preload_shimprog scenarios under libeta-preload.so and checks what
the shim says on stderr.

  --mode kernel   no PPE: every socket goes to the kernel, with one warning
                  and every fallback counted; ETA_REQUIRE=1 fails at start.
  --mode accel    attached to dti's loopback TEST FIXTURE engine: accelerated
                  sockets end to end (ETA_NET names 10.9.0.1/24 as its port).
Each program runs under `timeout`, so nothing can hang the suite."""
import argparse
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

failures = []
# The shim's line for a socket that reached the PPE (preload/src/config.c, eta_count); the
# bare word "accelerated" also appears in its warnings.
ACCEL_LINE = re.compile(r"^eta\[\d+\]: fd \d+: accelerated \(", re.M)


def run(prog, scenario, env, timeout=60):
    try:
        p = subprocess.run([prog, scenario], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    return p.returncode, p.stdout, p.stderr


def expect(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else ": " + detail))
    if not cond:
        failures.append(name)


def scenario(prog, name, env, must_log=None, must_not_log=None, label=None):
    """Runs one scenario; it passes when it exits 0 with "OK" as its last line
    and its stderr has every must_log (a string, or a compiled regex) and no
    must_not_log. Returns (stdout, stderr)."""
    rc, out, err = run(prog, name, env)
    good = rc == 0 and out.strip().splitlines()[-1:] == ["OK"]
    detail = f"rc={rc} out={out.strip()!r} err={err.strip()[-800:]!r}"
    for pat in must_log or []:
        if not (pat.search(err) if isinstance(pat, re.Pattern) else pat in err):
            good = False
            detail += f" (stderr lacks {getattr(pat, 'pattern', pat)!r})"
    for pat in must_not_log or []:
        if pat in err:
            good = False
            detail += f" (stderr has {pat!r})"
    expect(label or name, good, detail)
    return out, err


def kernel_mode(a, base_env):
    env = dict(base_env, ETA_SOCKET="/nonexistent/eta-test/ppe.sock", ETA_LOG="fallback")
    scenario(a.prog, "loaded", env)
    _, err = scenario(a.prog, "tcp_echo", env, must_log=["kernel socket, reason no-ppe"])
    expect("one warning", err.count("warning:") == 1, err)
    scenario(a.prog, "epoll", env)
    scenario(a.prog, "poll_select", env)
    scenario(a.prog, "dup", env)
    # ETA_REQUIRE: fails at start with a clear message; the program never runs.
    rc, out, err = run(a.prog, "loaded", dict(env, ETA_REQUIRE="1"))
    expect("require fails at start", rc == 1 and "OK" not in out and "ETA_REQUIRE" in err,
           f"rc={rc} out={out!r} err={err!r}")
    # ETA_DISABLE: every socket goes to the kernel, counted as disabled.
    scenario(a.prog, "tcp_echo", dict(env, ETA_DISABLE="1"), must_log=["kernel socket, reason disabled"],
             must_not_log=["reason no-ppe"], label="disabled: kernel sockets, counted")


def read_stats(path):
    """Decodes <socket>.preload/<pid> (eta/preload_stats.h)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, pid = struct.unpack_from("<QIi", data, 0)
    fallbacks = struct.unpack_from("<16Q", data, 8 + 4 + 4 + 16 + 4 + 4)
    return magic, version, pid, fallbacks


def accel_mode(a, base_env):
    tmp = tempfile.mkdtemp(prefix="eta-preload-test-")
    sock = os.path.join(tmp, "ppe.sock")
    ppe = subprocess.Popen([a.fixture, sock], stdout=subprocess.PIPE, text=True)
    try:
        line = ppe.stdout.readline()
        if line.strip() != "READY":
            expect("fixture PPE starts", False, line)
            return
        env = dict(base_env, ETA_SOCKET=sock, ETA_NET="port 10.9.0.1/24", ETA_LOG="fallback,accel",
                   ETA_SPIN_US="20")
        _, err = scenario(a.prog, "accel_echo", env, must_log=[ACCEL_LINE], must_not_log=["warning:"])
        expect("listener on PPE and kernel", "on the PPE and the kernel" in err, err[-400:])
        for name in ["accel_basics", "accel_nonblock", "accel_connect_taken", "accel_connect_again", "accel_epoll", "accel_poll_select",
                     "accel_dup"]:
            scenario(a.prog, name, env, must_not_log=["warning:"])
        for name in ["accel_fork", "accel_fork_accept"]:
            scenario(a.prog, name, env, must_not_log=["warning:", "fork-child"])
        # With a PPE whose network does not include 127.0.0.1, a connection
        # to it goes to the kernel and is counted as a loopback fallback.
        scenario(a.prog, "accel_loopback_counted", env, must_log=["kernel socket, reason loopback"],
                 must_not_log=["warning:"])
        # Published counters: the program checks its own file while it runs
        # and names it; once it has exited, the file is gone.
        out, _ = scenario(a.prog, "accel_counters", dict(env, ETA_LOG=""))
        named = re.findall(r"^counters (.*)$", out, re.M)
        expect("counters file existed while running", len(named) == 1 and named[0].startswith(sock + ".preload/"),
               out)
        if named:
            expect("counters file removed at exit", not os.path.exists(named[0]), named[0])
        # Slow consumer keeps the process alive: use python as an unmodified program.
        code = ("import socket,os,sys\n"
                "l=socket.socket(); l.bind(('0.0.0.0',0)); l.listen()\n"
                "c=socket.create_connection(('10.9.0.1', l.getsockname()[1])); s,_=l.accept()\n"
                "c.sendall(b'q'*100000); d=b''\n"
                "while len(d)<100000: d+=s.recv(65536)\n"
                "if d!=b'q'*100000: sys.exit('python: the bytes through the PPE differ')\n"
                "st=open(os.environ['ETA_SOCKET']+'.preload/'+str(os.getpid()),'rb').read()\n"
                "sys.stdout.buffer.write(st)\n")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
        ok = p.returncode == 0 and len(p.stdout) >= 40 + 16 * 8 + 16
        detail = p.stderr.decode()[-600:]
        if ok:
            magic, version, pid = struct.unpack_from("<QIi", p.stdout, 0)
            attached, = struct.unpack_from("<I", p.stdout, 32)
            fb = struct.unpack_from("<16Q", p.stdout, 40)
            accel_open, accepted = struct.unpack_from("<QQ", p.stdout, 40 + 128)
            ok = magic == 0x31444c5250415445 and version == 1 and attached == 1 and fb[0] == 2 and accepted == 1
            detail = f"magic={magic:x} version={version} attached={attached} accelerated={fb[0]} accepted={accepted}"
        expect("python through the PPE, counters published", ok, detail)
        # Last: the PPE crashes under a blocked read.
        _, err = scenario(a.prog, "accel_engine_gone", dict(env, ETA_TEST_FIXTURE_PID=str(ppe.pid)),
                          must_log=["warning: the PPE has gone"])
        after = err.split("warning: the PPE has gone", 1)[-1]
        expect("after the PPE went, new sockets are kernel sockets (no-ppe)",
               "kernel socket, reason no-ppe" in after and not ACCEL_LINE.search(after), err[-800:])
    finally:
        ppe.send_signal(signal.SIGTERM)
        try:
            ppe.wait(timeout=10)
        except subprocess.TimeoutExpired:
            ppe.kill()
            ppe.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--mode", choices=["kernel", "accel"], required=True)
    ap.add_argument("--fixture")
    a = ap.parse_args()
    base_env = dict(os.environ, LD_PRELOAD=a.shim)
    base_env.pop("ETA_REQUIRE", None)
    base_env.pop("ETA_DISABLE", None)
    if a.mode == "kernel":
        kernel_mode(a, base_env)
    else:
        accel_mode(a, base_env)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
