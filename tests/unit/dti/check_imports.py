#!/usr/bin/env python3
"""Checks libdti's dynamic imports against dti/lib/allowed_imports.txt.

usage: check_imports.py LIBDTI.so ALLOWED.txt [SHIM.so]

Fails (exit 1) naming every undefined dynamic symbol of LIBDTI.so that the
list does not allow, and every allowed one that SHIM.so (libeta-preload.so)
defines: a call libdti makes to a function the shim interposes would land in
the shim. Reads the symbols with `nm -D` (binutils)."""
import subprocess
import sys


def dynamic_symbols(path, which):
    """Names (version suffix dropped) of PATH's dynamic symbols, undefined or defined."""
    flag = "--undefined-only" if which == "undefined" else "--defined-only"
    try:
        out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("check_imports: nm (binutils) is not installed")
    except subprocess.CalledProcessError as e:
        sys.exit(f"check_imports: nm -D {path} failed: {e.stderr.strip()}")
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if fields:
            names.add(fields[-1].split("@")[0])
    return names


def allowed_names(path):
    with open(path) as f:
        return {l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")}


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.splitlines()[2])
    lib, allowed_path = sys.argv[1], sys.argv[2]
    imports = dynamic_symbols(lib, "undefined")
    allowed = allowed_names(allowed_path)
    if not imports:
        sys.exit(f"check_imports: {lib} has no dynamic imports at all: not a shared library of libc's?")
    failed = False
    for name in sorted(imports - allowed):
        print(f"{lib} imports '{name}', which {allowed_path} does not allow")
        failed = True
    if len(sys.argv) == 4:
        shim = sys.argv[3]
        for name in sorted(imports & dynamic_symbols(shim, "defined")):
            print(f"{lib} imports '{name}', which {shim} interposes: make it a system call in dti/lib/sys.h")
            failed = True
    if failed:
        return 1
    print(f"{lib}: {len(imports)} imports, all allowed, none interposed by the shim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
