#!/usr/bin/env python3
"""The string-key JSON reads of the modules that read a run's documents
(issue 40, item 2: the views read run_report::RunReport and plan::doc::Plan
instead). Counts, in every .cpp of src/{protocol,worker,run_report,pilot,
reproduce,plan} but the parsers (worker_protocol.cpp, worker_result.cpp,
run_report/run_report.cpp, plan/plan_doc.cpp, and plan/catalog.cpp, which
parses the catalog's YAML, not a run's documents):

  .at("k") .value("k", ..) .contains("k") .find("k") .count("k")
  ["k"] that is not assigned to
  field(x, "k"), at(x, "/json/pointer"), and the helpers s/d/str/num/positive(x, "k")

Usage: json_key_reads.py SOURCE_DIR [--max N]. Prints the count per file and
the total; with --max, exits 1 when the total is above N, naming the files,
so that a view that goes back to reading by key fails the suite. Lower N when
the count drops.
"""
import argparse
import pathlib
import re
import sys

MODULES = ["protocol", "worker", "run_report", "pilot", "reproduce", "plan"]
PARSERS = {"protocol/worker_protocol.cpp", "protocol/worker_result.cpp", "run_report/run_report.cpp",
           "plan/plan_doc.cpp", "plan/catalog.cpp"}
PATTERNS = [
    re.compile(r'\.(?:at|value|contains|find|count)\(\s*"[A-Za-z_0-9]+"'),
    re.compile(r'\["[A-Za-z_0-9]+"\](?!\s*=[^=])'),
    re.compile(r'\bfield\([^;()]*?,\s*"[A-Za-z_0-9]+"\)'),
    re.compile(r'\bat\([^;()]*?,\s*"/[^"]*"\)'),
    re.compile(r'\b(?:s|d|str|num|positive|optional_num)\([^;()]*?,\s*"[/A-Za-z_0-9]+"\)'),
]


def count(text: str) -> int:
    text = re.sub(r"//[^\n]*", "", text)
    return sum(len(p.findall(text)) for p in PATTERNS)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("source_dir")
    ap.add_argument("--max", type=int)
    args = ap.parse_args()
    src = pathlib.Path(args.source_dir) / "src"
    rows = []
    for module in MODULES:
        for path in sorted((src / module).glob("*.cpp")):
            rel = f"{module}/{path.name}"
            if rel not in PARSERS:
                rows.append((count(path.read_text(encoding="utf-8")), rel))
    if not rows:
        print(f"json_key_reads: no sources under {src}", file=sys.stderr)
        return 2
    total = sum(n for n, _ in rows)
    for n, rel in sorted(rows, reverse=True):
        if n:
            print(f"{n:5d} src/{rel}")
    print(f"{total:5d} string-key JSON reads outside the parsers")
    if args.max is not None and total > args.max:
        print(f"json_key_reads: {total} is above the budget of {args.max}: read the typed documents "
              "(run_report::RunReport, plan::doc::Plan) instead of the JSON by key", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
