#!/usr/bin/python3
"""torch.save (+ fsync) and torch.load throughput for the same tensors as
bench_checkpoint: N float32 tensors totalling M MiB. Prints JSON."""
import argparse
import json
import os
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--mib", type=float, default=256)
ap.add_argument("--tensors", type=int, default=16)
ap.add_argument("--reps", type=int, default=3)
a = ap.parse_args()
per = int(a.mib * (1 << 20) / a.tensors / 4)
g = torch.Generator().manual_seed(1)
state = {"t%d" % i: torch.rand(per, generator=g) for i in range(a.tensors)}
nbytes = a.tensors * per * 4
path = os.path.join(a.dir, "torch_state.pt")
saves, loads, save_cpu, load_cpu = [], [], [], []
for _ in range(a.reps):
    if os.path.exists(path):
        os.remove(path)
    c = time.process_time()
    t = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    saves.append(nbytes / (time.perf_counter() - t) / 1e6)
    save_cpu.append(time.process_time() - c)
    c = time.process_time()
    t = time.perf_counter()
    back = torch.load(path)
    loads.append(nbytes / (time.perf_counter() - t) / 1e6)
    load_cpu.append(time.process_time() - c)
    assert torch.equal(back["t0"], state["t0"])
os.remove(path)
gib = nbytes / float(1 << 30)
med = lambda v: sorted(v)[len(v) // 2]
print(json.dumps({"save_mb_s": med(saves), "load_mb_s": med(loads),
                  "save_cpu_s_per_gib": med(save_cpu) / gib, "load_cpu_s_per_gib": med(load_cpu) / gib}))
