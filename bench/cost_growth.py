#!/usr/bin/env python3
"""How anchor's cost grows with the model (issue 16, "How cost grows").

    bench/cost_growth.py [--anchor BIN] [--config FILE] [--sizes 2x64,5x128,6x256,8x512,16x512]
                         [--reps N] [--workdir EMPTY_DIR] [--keep]

Runs `anchor pilot CONFIG` (default bench/configs/gpt-25m.yaml: seq 256, micro-batch 4,
K = R = 2, 2 threads) at each size LAYERSxWIDTH (--set model.n_layer / n_embd / n_head),
--reps times each (default 1), and prints one table: parameters, wall time, the training
compute the run does anyway (the K + R steps of the uninterrupted run: worker A's steps),
anchor's overhead beyond it (wall - that), and the share of the wall each stage takes (from
report.json's stages; "other" is what no stage covers: process start-ups, the supervisor).
Medians over the repetitions. Standard library only; any python3.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The stages as the table shows them, in pipeline order; anything else is summed into "other stages".
STAGES = ["pin", "load", "train", "eval", "checkpoint_save", "reference", "kill", "restore",
          "eval_after_restore", "resume", "compare", "memory_probe", "plan"]


def parse_sizes(text):
    sizes = []
    for item in text.split(","):
        try:
            layers, width = (int(x) for x in item.lower().split("x"))
        except ValueError:
            sys.exit(f"cost_growth.py: --sizes wants LAYERSxWIDTH,... (got {item!r})")
        if layers < 1 or width < 8 or width % 8:
            sys.exit(f"cost_growth.py: {item}: layers >= 1 and a width that is a multiple of 8")
        sizes.append((layers, width))
    return sizes


def run_one(anchor, config, layers, width, run_dir):
    heads = 4 if width < 512 else 8
    cmd = [anchor, "pilot", config, "--run-dir", run_dir,
           "--set", f"model.n_layer={layers}", "--set", f"model.n_embd={width}", "--set", f"model.n_head={heads}"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"cost_growth.py: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    with open(os.path.join(run_dir, "report.json")) as f:
        rep = json.load(f)
    stages = {}
    for s in rep["stages"]:
        stages[s["stage"]] = stages.get(s["stage"], 0.0) + float(s.get("seconds") or 0.0)
    steps = rep["steps"]
    compute = sum(float(s.get("compute_s") or 0.0) + float(s.get("data_wait_s") or 0.0)
                  for part in ("train", "reference") for s in steps.get(part, []))
    return {"parameters": rep["measurements"]["model"]["parameters"], "wall": wall, "compute": compute,
            "stages": stages}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchor", default=os.path.join(REPO, "build/release/bin/anchor"))
    ap.add_argument("--config", default=os.path.join(HERE, "configs/gpt-25m.yaml"))
    ap.add_argument("--sizes", default="2x64,5x128,6x256,8x512,16x512")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if a.reps < 1:
        sys.exit("cost_growth.py: --reps wants a positive integer")
    sizes = parse_sizes(a.sizes)
    anchor = os.path.abspath(a.anchor)
    if not os.access(anchor, os.X_OK):
        sys.exit(f"cost_growth.py: no anchor binary at {anchor} (build it, or pass --anchor)")
    config = os.path.abspath(a.config)
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        if os.listdir(a.workdir):
            sys.exit(f"cost_growth.py: --workdir {a.workdir} is not empty")
        work, keep = os.path.abspath(a.workdir), True
    else:
        work, keep = tempfile.mkdtemp(prefix="anchor-cost-growth."), a.keep
    # A private copy of both binaries: a rebuild while this runs changes nothing here.
    os.makedirs(os.path.join(work, "bin"))
    for b in ("anchor", "anchor-torch"):
        shutil.copy2(os.path.join(os.path.dirname(anchor), b), os.path.join(work, "bin", b))
    anchor = os.path.join(work, "bin", "anchor")
    print(f"cost_growth.py: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, config {config}, "
          f"{a.reps} rep(s)", flush=True)
    rows = []
    try:
        for layers, width in sizes:
            runs = [run_one(anchor, config, layers, width, os.path.join(work, f"run-{layers}x{width}-{r}"))
                    for r in range(a.reps)]
            med = lambda f: statistics.median(f(r) for r in runs)
            wall = med(lambda r: r["wall"])
            row = {"size": f"{layers}x{width}", "parameters": runs[0]["parameters"], "wall": wall,
                   "compute": med(lambda r: r["compute"]),
                   "stages": {s: med(lambda r, s=s: r["stages"].get(s, 0.0)) for s in STAGES}}
            row["other"] = wall - sum(row["stages"].values())
            rows.append(row)
            print(f"  {row['size']}: {row['parameters'] / 1e6:.2f}M parameters, {wall:.1f} s", flush=True)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")

    print()
    head = ["size", "params", "wall s", "K+R compute s", "overhead s", "overhead x"]
    print(" ".join(f"{h:>13}" for h in head))
    for r in rows:
        over = r["wall"] - r["compute"]
        print(" ".join(f"{v:>13}" for v in (r["size"], f"{r['parameters'] / 1e6:.2f}M", f"{r['wall']:.2f}",
                                             f"{r['compute']:.2f}", f"{over:.2f}",
                                             f"{over / r['compute']:.2f}" if r["compute"] > 0 else "-")))
    print("\nshare of the wall time per stage (%):")
    cols = [s for s in STAGES if any(r["stages"][s] / r["wall"] >= 0.005 for r in rows)] + ["other"]
    print(f"{'size':>8} " + " ".join(f"{c[:12]:>12}" for c in cols))
    for r in rows:
        vals = [r["stages"].get(c, r["other"]) if c != "other" else r["other"] for c in cols]
        print(f"{r['size']:>8} " + " ".join(f"{100 * v / r['wall']:>12.1f}" for v in vals))
    print(f"\nload at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
