#!/usr/bin/env python3
"""Checks that libdti's layers call only downwards (dti/lib/base.h lists them).

usage: check_layers.py DTI_LIB_DIR

Every file in DTI_LIB_DIR says its layer in its first line ("libdti layer N").
A function of another file is reached only through a header (C11 with
-Werror: no implicit declarations), so the layering holds when
  - a file includes only libdti headers of its own layer or below, and a
    header only those below its own;
  - no .c file declares a function of another file itself (an extern
    prototype outside static ones);
  - every non-static dti__ function is declared in a header of the layer of
    the file that defines it (so no lower header hands a lower file an upper
    layer's function).
Fails (exit 1) naming each file and line that breaks one of these."""
import os
import re
import sys

LAYER = re.compile(r"libdti layer (\d)")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include\s+"([^"]+)"', re.M)
DEF = re.compile(r"^(?!static\b)(?:[\w\s\*]+?)\b(dti__\w+)\s*\([^;{]*\)\s*\{", re.M)
PROTO = re.compile(r"^(?!static\b)(?!typedef\b)(?:[\w\s\*]+?)\b(dti_\w*)\s*\(([^;{}]*)\)\s*;", re.M)


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def top_level(code):
    """code with everything between braces blanked (newlines kept): what is
    left are declarations, definitions' heads and their opening braces."""
    out, depth = [], 0
    for ch in code:
        if ch == "{":
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0 or ch == "\n":
            out.append(ch)
    return "".join(out)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: check_layers.py DTI_LIB_DIR (dti/lib)")
    top = sys.argv[1]
    files = sorted(f for f in os.listdir(top) if f.endswith((".c", ".h")))
    text, layer, errors = {}, {}, []
    for f in files:
        with open(os.path.join(top, f), encoding="utf-8") as fh:
            text[f] = fh.read()
        m = LAYER.search(text[f].splitlines()[0] if text[f] else "")
        if not m:
            errors.append(f"{f}:1: the first line does not say its layer ('libdti layer N')")
            continue
        layer[f] = int(m.group(1))
    declared = {}  # dti__ name -> headers declaring it
    for f in files:
        if f not in layer:
            continue
        code = strip_comments(text[f])
        for m in INCLUDE.finditer(code):
            inc = m.group(1)
            if inc not in layer:
                continue  # dti/dti.h, dti_abi.h: not a layer of libdti
            line = code.count("\n", 0, m.start()) + 1
            ok = layer[inc] < layer[f] if f.endswith(".h") else layer[inc] <= layer[f]
            if not ok:
                errors.append(f"{f}:{line}: layer {layer[f]} includes {inc} of layer {layer[inc]}")
        for m in PROTO.finditer(top_level(code)):
            name = m.group(1)
            if f.endswith(".h"):
                declared.setdefault(name, []).append(f)
            elif name.startswith("dti__"):
                line = code.count("\n", 0, m.start()) + 1
                errors.append(f"{f}:{line}: declares {name}() itself: declare it in its layer's header")
    for f in files:
        if f not in layer or not f.endswith(".c"):
            continue
        code = top_level(strip_comments(text[f]))
        for m in DEF.finditer(code):
            name = m.group(1)
            line = code.count("\n", 0, m.start()) + 1
            homes = declared.get(name, [])
            if not homes:
                errors.append(f"{f}:{line}: {name}() is not static and no header declares it")
            for h in homes:
                if layer[h] != layer[f]:
                    errors.append(f"{f}:{line}: {name}() (layer {layer[f]}) is declared in {h} (layer {layer[h]})")
    for e in errors:
        print(f"check_layers: {e}")
    if errors:
        sys.exit(1)
    print(f"check_layers: {len(layer)} files, every call goes to its own layer or below")


if __name__ == "__main__":
    main()
