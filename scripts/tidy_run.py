#!/usr/bin/env python3
"""Runs clang-tidy over C++ sources for scripts/tidy.sh, several sources to one
parse. Exit 0 when they are clean, 1 on a finding, 2 when clang-tidy fails
without one.

  tidy_run.py --root DIR --db DIR --tidy-db DIR --tidy BIN [--cache DIR]
              [--jobs N] [--group-size N] [--verbose] FILE...

Why groups: clang-tidy 14 runs every check over every declaration the
translation unit holds, the headers' included, and throws away what it finds
outside the header filter. A source that includes LibTorch costs about 100 s
of CPU, of which about 80 s is checks walking LibTorch's headers; the 16 such
sources under src/ cost about 28 minutes of CPU one at a time, and about two
minutes as one translation unit that includes them all (a "unity" file).

So sources that compile with the same flags are checked together: a generated
file in a temporary directory #includes each of them, and clang-tidy runs on
it with their flags, the repository's .clang-tidy and a header filter that
also names the sources themselves (so a finding in a source is reported, at
its own path and line). A source checked this way sees the file-scope names
of the sources before it in its group; when that makes one of them not compile
(two files with the same name in an anonymous namespace: "redefinition"), the
sources the errors point at are checked alone and the rest together again.
A file not in the compile database (a fixture) is read as C++17 with include/
and src/ on the include path, as before.

A file found clean is remembered by the key scripts/tidy_key.py gives, in
--cache, and not parsed again; a group's files are remembered only when the
whole group is clean.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import tidy_key

FINDING = re.compile(r"^([^ ].*?):[0-9]+:[0-9]+: (warning|error): .*$", re.M)
COMPILE_ERROR = "[clang-diagnostic-error]"


def flags_of(entry):
    """The compile command's flags: no compiler, output, -c or source."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c" and os.path.realpath(os.path.join(entry["directory"], a)) != entry["real"]:
            out.append(a)
    return out


def header_filter(root):
    """.clang-tidy's HeaderFilterRegex (the run on a group widens it)."""
    with open(os.path.join(root, ".clang-tidy"), encoding="utf-8") as f:
        m = re.search(r"^HeaderFilterRegex:\s*'([^']*)'", f.read(), re.M)
    return m.group(1) if m else ""


class Runner:
    def __init__(self, opts):
        self.o = opts
        self.root = os.path.realpath(opts.root)
        self.filter = header_filter(self.root)
        self.tmp = tempfile.mkdtemp(prefix="anchor-tidy-unity.")

    def tidy(self, files, directory, flags):
        """One clang-tidy run over FILES (one source, or a unity file of several)."""
        if len(files) == 1:
            cmd = [self.o.tidy, "--quiet", files[0]]
            cmd += ["-p", self.o.tidy_db] if flags is None else ["--"] + flags
        else:
            unity = tempfile.NamedTemporaryFile("w", suffix=".cpp", dir=self.tmp, delete=False)
            with unity:
                for f in files:
                    unity.write(f'#include "{f}"  // NOLINT(bugprone-suspicious-include)\n')
            members = "|".join(re.escape(f) for f in files)
            cmd = [self.o.tidy, "--quiet", f"--config-file={self.root}/.clang-tidy",
                   f"--header-filter=({self.filter})|^({members})$", unity.name, "--"] + flags
        run = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, check=False)
        return run.returncode, run.stdout + run.stderr

    def check(self, files, directory, flags):
        """Findings for FILES (a list of lines), splitting the group on a clash.
        Raises RuntimeError when clang-tidy fails without a finding."""
        if self.o.verbose:
            print(f"tidy: one run over {len(files)}: {' '.join(os.path.relpath(f, self.root) for f in files)}",
                  file=sys.stderr)
        rc, out = self.tidy(files, directory, flags)
        found = [m.group(0) for m in FINDING.finditer(out)]
        if len(files) > 1:
            clashed = {m.group(1) for m in FINDING.finditer(out) if COMPILE_ERROR in m.group(0)}
            if clashed:
                alone = [f for f in files if f in clashed]
                if len(alone) != len(clashed):  # an error outside the group's sources: one at a time
                    alone = files
                rest = [f for f in files if f not in alone]
                found = self.check(rest, directory, flags) if rest else []
                for f in alone:
                    found += self.check([f], directory, flags)
                return found
        if not found and rc != 0:
            raise RuntimeError(f"clang-tidy failed on {' '.join(files)} (exit {rc}) without a finding:\n"
                               + "\n".join(out.splitlines()[-5:]))
        return found


def groups_of(opts, files):
    """[(files, directory, flags or None)]: sources with the same flags together."""
    with open(os.path.join(opts.tidy_db, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    by_file = {}
    for e in entries:
        e["real"] = os.path.realpath(os.path.join(e["directory"], e["file"]))
        by_file.setdefault(e["real"], e)  # the first entry, as clang-tidy -p takes it
    groups = {}
    for f in files:
        e = by_file.get(f)
        if e is None:
            key, directory, flags = ("fixture",), opts.root, ["-std=c++17", "-Iinclude", "-Isrc"]
        else:
            flags = flags_of(e)
            key, directory = (e["directory"], *flags), e["directory"]
        groups.setdefault(key, (directory, flags, []))[2].append(f)
    out = []
    # The runs over LibTorch's headers first: the longest, so two jobs end together.
    for directory, flags, members in sorted(groups.values(), key=lambda g: not any("torch" in a for a in g[1])):
        for i in range(0, len(members), opts.group_size):
            chunk = members[i:i + opts.group_size]
            # One source alone runs as tidy.sh always ran it: -p with the database.
            alone = len(chunk) == 1 and chunk[0] in by_file
            out.append((chunk, directory, None if alone else flags))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--db", required=True, help="the build's compile database (for the cache key)")
    p.add_argument("--tidy-db", required=True, help="the database clang-tidy reads")
    p.add_argument("--tidy", required=True)
    p.add_argument("--cache", default="")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--group-size", type=int, default=40)
    p.add_argument("--verbose", action="store_true", help="say which sources each run checks")
    p.add_argument("files", nargs="+")
    opts = p.parse_args()

    named = list(dict.fromkeys(os.path.realpath(f) for f in opts.files))
    keys = dict.fromkeys(named, "")
    if opts.cache:  # each key preprocesses its file: a few seconds with LibTorch's headers
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
            keys = dict(zip(named, pool.map(lambda f: tidy_key.key(opts.root, opts.db, f, opts.tidy), named)))
    files = [f for f in named if not (keys[f] and os.path.exists(os.path.join(opts.cache, keys[f])))]
    remembered = len(named) - len(files)  # clean with these inputs

    runner = Runner(opts)
    findings, status = [], 0
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
            work = {pool.submit(runner.check, *g): g[0] for g in groups_of(opts, files)}
            for done in concurrent.futures.as_completed(work):
                try:
                    found = done.result()
                except RuntimeError as e:
                    print(f"tidy: {e}", file=sys.stderr)
                    status = 2
                    continue
                findings += found
                if not found and opts.cache:
                    for f in work[done]:
                        if keys.get(f):
                            os.makedirs(opts.cache, exist_ok=True)
                            open(os.path.join(opts.cache, keys[f]), "w").close()
    finally:
        shutil.rmtree(runner.tmp, ignore_errors=True)  # the generated unity files
    if status:
        return status
    if findings:
        print("\n".join(dict.fromkeys(findings)))  # a header's finding once, not once per group
        return 1
    print(f"tidy: {len(opts.files)} file(s) clean ({remembered} remembered clean from an earlier run with the same inputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
