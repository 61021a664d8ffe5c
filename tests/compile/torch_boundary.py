#!/usr/bin/env python3
"""ctest build.torch_boundary: no torch-free translation unit sees LibTorch's
include directories (docs/architecture.md, "Two binaries").

  torch_boundary.py BUILD_DIR

Reads BUILD_DIR/compile_commands.json and BUILD_DIR/torch_boundary.json, which
CMake writes (cmake/AnchorTargets.cmake, anchor_record_sources): the sources of
the torch-free module parts, the CLI and the torch-free tests, the torch ones,
and LibTorch's include directories (those not already the compiler's own).
Fails naming each torch-free source compiled with one of them: its module
links a torch target, and the boundary holds only at link time. The control:
every torch source is compiled with one of them, or the check would be blind.
"""
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import compile_db  # noqa: E402  (scripts/compile_db.py)


def include_dirs(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        for flag in ("-isystem", "-I", "-iquote", "-idirafter"):
            if a == flag and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
                break
            if a.startswith(flag) and len(a) > len(flag):
                out.append(a[len(flag):])
                break
        i += 1
    return [os.path.realpath(os.path.join(entry["directory"], d)) for d in out]


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build = sys.argv[1]
    db = compile_db.load(build)  # one entry per source: anchor_unity's units expanded
    with open(os.path.join(build, "torch_boundary.json"), encoding="utf-8") as f:
        lists = json.load(f)
    torch_dirs = {os.path.realpath(d) for d in lists["torch_include_dirs"]}
    if not torch_dirs:
        print("torch_boundary: LibTorch has no include directory of its own here (all implicit?)")
        return 1
    by_file = {}
    for e in db:
        by_file.setdefault(os.path.realpath(os.path.join(e["directory"], e["file"])), []).append(e)

    problems, checked = [], 0
    for src in sorted(set(lists["torch_free"])):
        for e in by_file.get(os.path.realpath(src), []):
            checked += 1
            seen = sorted(d for d in include_dirs(e) if d in torch_dirs)
            if seen:
                problems.append(f"{os.path.relpath(src, lists['source_dir'])}: compiled with {', '.join(seen)}")
    blind = []
    torch_checked = 0
    for src in sorted(set(lists["torch"])):
        for e in by_file.get(os.path.realpath(src), []):
            torch_checked += 1
            if not any(d in torch_dirs for d in include_dirs(e)):
                blind.append(os.path.relpath(src, lists["source_dir"]))
    if checked < 50 or torch_checked < 10:
        print(f"torch_boundary: only {checked} torch-free and {torch_checked} torch compile commands found: "
              "not this build's database?")
        return 1
    if blind:
        print("torch_boundary: the control failed: these torch sources have none of LibTorch's include "
              "directories, so the check cannot see them: " + ", ".join(blind))
        return 1
    if problems:
        print("torch_boundary: torch-free sources compiled with LibTorch's include directories (a torch-free "
              "module part links a torch target: list it under TORCH_LIBS, cmake/AnchorTargets.cmake):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"torch_boundary: {checked} torch-free compile commands see none of LibTorch's include directories "
          f"({', '.join(sorted(torch_dirs))}); all {torch_checked} torch ones do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
