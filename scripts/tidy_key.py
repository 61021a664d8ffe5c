#!/usr/bin/env python3
"""The cache key of one clang-tidy run (scripts/tidy.sh): SHA-256 over the
clang-tidy version, .clang-tidy, the file's compile command and the file as the
compiler sees it (preprocessed, line markers kept, so every header it includes
and every line number count). The repository's root is written as @ROOT@ in
the command and the output, so a clone elsewhere gets the same key.

  tidy_key.py ROOT DB_DIR FILE TIDY_BINARY   -> prints the key, or nothing
                                               (exit 0) when there is none:
                                               the file is not in the database
                                               or does not preprocess
"""
import hashlib
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_db  # noqa: E402  (scripts/compile_db.py)


def key(root, db_dir, path, tidy) -> str:
    """The key, or "" when there is none."""
    root = os.path.realpath(root)
    target = os.path.realpath(path)
    entries = compile_db.load(db_dir)  # one entry per source, unity units expanded
    entry = next((e for e in entries if os.path.realpath(os.path.join(e["directory"], e["file"])) == target), None)
    if entry is None:
        return ""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    pre, skip = [], False
    for a in args:  # the same command, preprocessing only, to stdout
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c":
            pre.append(a)
    run = subprocess.run(pre + ["-E"], cwd=entry["directory"], capture_output=True, check=False)
    if run.returncode != 0:
        return ""
    version = subprocess.run([tidy, "--version"], capture_output=True, check=False).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = f.read()
    h = hashlib.sha256()
    for part in (version, config, " ".join(args).encode(), entry["file"].encode(), run.stdout):
        part = part.replace(root.encode(), b"@ROOT@")
        h.update(str(len(part)).encode() + b":" + part)
    return h.hexdigest()


def main() -> int:
    k = key(*sys.argv[1:5])
    if k:
        print(k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
