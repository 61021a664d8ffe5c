#!/usr/bin/env python3
"""ctest build.exit_codes: an exit code in src/ is an ExitCode, never a bare
number (include/anchor/error.hpp; docs/architecture.md). The drivers, `fail`
and every command return ExitCode; main() alone turns it into an int.

  exit_codes.py SOURCE_DIR          checks SOURCE_DIR/src
  exit_codes.py --file FILE...      checks these files (the negative control)

A finding is one of:
  - exit(N), _exit(N), std::exit(N), quick_exit(N) with a number: a process
    ends with a documented code or not at all. The child side of proc::spawn
    (src/common/process.cpp: exec failed, 127 as the shell's) is the exception;
  - a pilot stage failed with a number: fail(p, "stage", N, ...) or failed(N, ...);
  - static_cast<ExitCode>(...) outside src/cli/main.cpp: a number made an ExitCode;
  - a function named like a driver or a command runner (run_*, fail, passed,
    interrupted_exit, resume_mismatch) declared to return int.
Exits 1 naming each finding as file:line, 0 when there is none.
"""
import os
import re
import sys

CHILD_SIDE = {os.path.join("src", "common", "process.cpp")}
MAIN = os.path.join("src", "cli", "main.cpp")

PATTERNS = [
    (re.compile(r"\b(?:std::|::)?(?:_exit|_Exit|exit|quick_exit)\s*\(\s*\d"), "a process exit with a bare number"),
    (re.compile(r"\bfail\s*\(\s*[\w.]+\s*,\s*\"[^\"]*\"\s*,\s*\d"), "a stage failed with a bare exit code"),
    (re.compile(r"\bfailed\s*\(\s*\d"), "a stage failed with a bare exit code"),
    (re.compile(r"static_cast\s*<\s*(?:anchor::)?ExitCode\s*>"), "a number cast to ExitCode"),
    (re.compile(r"^\s*(?:static\s+)?int\s+(?:\w+::)*(?:run_\w+|fail|passed|interrupted_exit|resume_mismatch)\s*\("),
     "a driver or command runner that returns int, not ExitCode"),
]


def strip_comment(line):
    # Good enough for this tree: no "//" inside the string literals these patterns look at.
    in_str = False
    for i, c in enumerate(line):
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            in_str = not in_str
        elif not in_str and line.startswith("//", i):
            return line[:i]
    return line


def check(path, rel):
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            code = strip_comment(line)
            for rx, what in PATTERNS:
                if not rx.search(code):
                    continue
                if what.startswith("a process exit") and rel in CHILD_SIDE:
                    continue
                if what.startswith("a number cast") and rel == MAIN:
                    continue
                found.append(f"{rel}:{n}: {what}: {line.strip()}")
    return found


def main(argv):
    if len(argv) >= 2 and argv[0] == "--file":
        files = [(p, p) for p in argv[1:]]
    elif len(argv) == 1:
        root = argv[0]
        files = []
        for d, _, names in os.walk(os.path.join(root, "src")):
            for name in sorted(names):
                if name.endswith((".cpp", ".hpp")):
                    p = os.path.join(d, name)
                    files.append((p, os.path.relpath(p, root)))
        if len(files) < 50:
            print(f"exit_codes: only {len(files)} sources under {root}/src: not the tree?")
            return 1
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    found = [f for p, rel in files for f in check(p, rel)]
    for f in found:
        print(f)
    if found:
        print(f"exit_codes: {len(found)} bare exit code(s): use ExitCode (include/anchor/error.hpp)")
        return 1
    print(f"exit_codes: {len(files)} files, every exit code an ExitCode")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
