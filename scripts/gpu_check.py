#!/usr/bin/env python3
"""The GPU check's checks (scripts/gpu-check.sh builds, then runs this with the
node's Python: the torch whose LibTorch anchor was just built against).

Writes one JSON summary (OUT/gpu-check.json, also printed) with:
  1. default_pilot       configs/pilot.yaml with device: cuda; its profile.json holds the GPU's kernels
  2. gpt2_small_pilot    GPT-2-small sized (124M, seq 1024, bf16, loss scaler
                         and activation checkpointing on; configs/examples/
                         gpt2-small-gpu-check.yaml on synthetic llm.c tokens)
  3. memory_vs_python    peak allocated / reserved of 2's measured step against
                         torch.cuda.max_memory_allocated() / max_memory_reserved()
                         of the same step in eager PyTorch (bench/python_step.py)
  4. step_vs_python      the step's time against the same, and MFU against the
                         catalog's dense bf16 peak for this device
  5. memory_model        the memory model's prediction for two held-out
                         (micro-batch, seq) points against measurement
                         (tests/gpu: Gpu.MemoryModelPredictsHeldOutPoints)
  6. nccl_and_pins       a one-rank NCCL group (tests/gpu) and the report's
                         device, driver, CUDA, cuDNN and NCCL pins
  and gpu_tests: every test of tests/gpu/ (ctest label gpu), by name.

--dry-run (no device; CI runs it): every check runs up to its first CUDA call
and must stop exactly there (the pilots exit 2 saying no device is usable, the
GPU tests skip with that reason); what needs no device (configs, data, the
Python peer's model on the meta device, the pins of the CUDA libraries, the
binaries' NEEDED lists) runs in full. Exit 0 when every check passed (or, dry,
reached its first CUDA call), 1 otherwise.
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2_CONFIG = os.path.join(ROOT, "configs", "examples", "gpt2-small-gpu-check.yaml")
MARKER = "ANCHOR_GPU_CHECK "  # tests/gpu prints its figures on lines that start so


def run(cmd, timeout, cwd=ROOT):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout)
        return p.returncode, p.stdout, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + "\n(timed out after %d s)" % timeout, time.monotonic() - t0


def tail(text, n=25):
    return "\n".join(text.strip().splitlines()[-n:])


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_llmc(path, n_tokens, vocab, seed):
    """An llm.c shard: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n_tokens, *([0] * 253)))
        f.write(struct.pack("<%dH" % n_tokens, *(rng.randrange(vocab) for _ in range(n_tokens))))


def gpt2_params(m):
    """Parameters of the built-in GPT (tied head, biases): the architecture both sides must build."""
    C, L, V, P = m["n_embd"], m["n_layer"], m["vocab_size"], m["block_size"]
    return V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C


def catalog_peak_tflops(device_name):
    """Dense bf16 TFLOP/s of the catalog device whose model (H200, A100, ...) the name contains."""
    text = open(os.path.join(ROOT, "configs", "catalog.yaml")).read()
    for name, tflops in re.findall(r"- name: (\S+)[^-]*?bf16_tflops: ([0-9.]+)", text, re.S):
        if name.split("-")[0] in (device_name or ""):
            return name, float(tflops)
    return None, None


def no_device_stop(rc, out):
    """The state a dry run must reach: the pilot refused device cuda before training (exit 2)."""
    return rc == 2 and "can use no device" in out


class Check:
    def __init__(self, summary, name):
        self.summary, self.name = summary, name
        self.d = summary["checks"].setdefault(name, {})

    def __enter__(self):
        self.t0 = time.monotonic()
        return self.d

    def __exit__(self, kind, value, tb):
        self.d["seconds"] = round(time.monotonic() - self.t0, 2)
        if kind is not None:
            self.d["status"] = "error"
            self.d["error"] = "%s: %s" % (kind.__name__, value)
        self.d.setdefault("status", "error")
        return True  # one check's error is recorded; the others still run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="the build directory (bin/anchor, tests/test_gpu)")
    ap.add_argument("--out", required=True, help="directory for runs, data and gpu-check.json")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--build-seconds", type=float, default=None)
    args = ap.parse_args()
    dry = args.dry_run
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    # Its pilots sign with a per-user key (docs/report.md, "Which key signs"):
    # one of their own under OUT, never the node user's ~/.config/anchor.
    os.environ["XDG_CONFIG_HOME"] = os.path.join(out, "xdg-config")
    anchor = os.path.join(args.build, "bin", "anchor")
    anchor_torch = os.path.join(args.build, "bin", "anchor-torch")
    test_gpu = os.path.join(args.build, "tests", "test_gpu")
    t_start = time.monotonic()
    summary = {"format": "anchor.gpu-check/v1", "dry_run": dry,
               "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "build": {"dir": args.build, "seconds": args.build_seconds}, "checks": {}}

    # ---- the machine and the build ---------------------------------------
    import torch

    mach = {"python": sys.executable, "python_version": sys.version.split()[0], "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "cpu_count": os.cpu_count()}
    if torch.cuda.is_available():
        mach["device_name"] = torch.cuda.get_device_name(0)
        mach["device_count"] = torch.cuda.device_count()
    if shutil.which("nvidia-smi"):
        rc, smi, _ = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 30)
        mach["nvidia_smi"] = smi.strip() if rc == 0 else "exit %d: %s" % (rc, tail(smi, 3))
    summary["machine"] = mach
    rc, ver, _ = run([anchor, "--version"], 30)
    summary["build"]["anchor"] = ver.strip()
    rc, needed, _ = run(["readelf", "-d", anchor_torch], 30)
    summary["build"]["anchor_torch_needed"] = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", needed)
    rc, ldd, _ = run(["ldd", anchor_torch], 30)
    summary["build"]["nccl"] = (re.findall(r"(libnccl\.so\S*) => (\S+)", ldd) or [["not found", ""]])[0]
    summary["build"]["links_cuda_and_nccl"] = (
        any(n.startswith("libtorch_cuda") for n in summary["build"]["anchor_torch_needed"])
        and summary["build"]["nccl"][0] != "not found")

    # ---- data for the GPT-2-small pilot ------------------------------------
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    train_bin, val_bin = os.path.join(data, "train_000.bin"), os.path.join(data, "val_000.bin")
    if not os.path.exists(train_bin):
        write_llmc(train_bin, 1 << 20, 50257, seed=1)
        write_llmc(val_bin, 1 << 17, 50257, seed=2)
    gpt2_set = ["--set", "data.train=[%s]" % train_bin, "--set", "data.val=[%s]" % val_bin]
    gpt2_json = os.path.join(out, "gpt2-small-config.json")
    rc, dump, _ = run([anchor, "config", "dump", GPT2_CONFIG, "--json"] + gpt2_set, 60)
    if rc == 0:
        with open(gpt2_json, "w") as f:
            f.write(dump[dump.index("{"):])

    # ---- 1. the default pilot with device: cuda ----------------------------
    with Check(summary, "default_pilot") as d:
        run_dir = os.path.join(out, "default")
        shutil.rmtree(run_dir, ignore_errors=True)
        rc, log, secs = run([anchor, "pilot", "configs/pilot.yaml", "--set", "device=cuda", "--run-dir", run_dir], 600)
        d.update(exit=rc, wall_s=round(secs, 2))
        if dry:
            d["status"] = "dry_run_ok" if no_device_stop(rc, log) else "failed"
            d["stopped_at"] = tail(log, 3)
        else:
            rep = read_json(os.path.join(run_dir, "report.json"))
            d.update(report=os.path.join(run_dir, "report.json"), verdict=rep["resume"]["verdict"],
                     mode=rep["resume"]["mode"], memory_source=rep["measurements"]["memory"]["source"],
                     stages={s["stage"]: round(s.get("seconds", 0), 3) for s in rep["stages"]})
            # Worker B's profile of its last step (docs/report.md, "profile.json"): Kineto's, with the GPU's kernels.
            prof = next((s["figures"].get("profile", {}) for s in rep["stages"] if s["stage"] == "resume"), {})
            kernels = 0
            if os.path.exists(os.path.join(run_dir, "profile.json")):
                trace = read_json(os.path.join(run_dir, "profile.json"))
                events = trace.get("traceEvents", []) if isinstance(trace, dict) else []
                kernels = sum(1 for e in events if isinstance(e, dict) and e.get("cat") == "kernel")
            d.update(profiler=prof.get("profiler", prof.get("error", prof.get("skipped"))), profile_kernels=kernels)
            d["status"] = "passed" if rc == 0 and rep["status"] == "passed" and kernels > 0 else "failed"
            if d["status"] != "passed":
                d["log"] = tail(log)

    # ---- 1b. the preflight: NVML health, and the all-reduce over the GPUs ---
    with Check(summary, "preflight") as d:
        gpus = mach.get("device_count", 0)
        cmd = [anchor, "preflight", "configs/pilot.yaml", "--set", "device=" + ("cpu" if dry else "cuda"),
               "--set", "checkpoint.dir=" + os.path.join(out, "preflight"), "--mib", "64", "--json"]
        if gpus >= 2:
            cmd += ["--ranks", str(gpus)]  # NCCL over every GPU; one GPU: nothing to all-reduce
        rc, log, secs = run(cmd, 300)
        d.update(exit=rc, wall_s=round(secs, 2))
        try:
            pf = json.loads(log[log.index("{"):])
        except ValueError:
            pf = {}
        health = pf.get("gpu_health", {})
        d.update(gpu_health=health, all_reduce=pf.get("all_reduce"),
                 disk_mb_per_s=pf.get("checkpoint_dir", {}).get("mb_per_s"))
        if dry:
            # No driver here: NVML is not opened, and says so.
            d["status"] = "dry_run_ok" if rc == 0 and "libnvidia-ml" in health.get("skipped", "") else "failed"
        else:
            # NVML's devices are the GPUs torch sees, by name (nvidia-smi reads the same library).
            names = [g.get("name") for g in health.get("devices", [])]
            d["nvml_names"] = names
            d["status"] = ("passed" if rc in (0, 3) and "skipped" not in health and len(names) >= gpus
                           and mach.get("device_name") in names else "failed")
            if rc == 3:
                d["node_failed_health"] = health.get("failures")
        if d["status"] == "failed":
            d["log"] = tail(log)

    # ---- 1c. a program's pilot: memory per stage, the profiled step, held-out shapes (issue 45) ----
    with Check(summary, "program_pilot") as d:
        device = "cpu" if dry else "cuda"
        ex = os.path.join(out, "program-gpt")
        shutil.rmtree(ex, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "examples", "gpt"), ex)
        run_dir = os.path.join(out, "program")
        shutil.rmtree(run_dir, ignore_errors=True)
        sizes = ["--n-embd", "256", "--n-layer", "4", "--seq-len", "128", "--batch", "8", "--device", device]
        os.environ["PYTHONPATH"] = os.path.join(ROOT, "python")
        rc, log, secs = run([anchor, "pilot", os.path.join(ex, "pilot.yaml"), "--run-dir", run_dir,
                             "--set", "program.command=[%s, train.py, %s]" % (sys.executable, ", ".join(sizes))], 600)
        d.update(exit=rc, wall_s=round(secs, 2))
        rep = read_json(os.path.join(run_dir, "report.json")) if os.path.exists(
            os.path.join(run_dir, "report.json")) else {}
        mem = rep.get("measurements", {}).get("memory", {})
        stages = {k: {f: v.get(f) for f in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes")}
                  for k, v in mem.get("stages", {}).items()}
        prof = next((s["figures"].get("profile", {}) for s in rep.get("stages", []) if s["stage"] == "resume"), {})
        d.update(stages=stages, device_total_bytes=mem.get("device_total_bytes"),
                 mfu_estimate=rep.get("measurements", {}).get("step", {}).get("mfu_estimate"),
                 profile_top=[(o["name"], o["device"], o["self_s"]) for o in prof.get("top", [])[:5]])
        # The memory model against shapes its probe did not run, each run as a probe point runs:
        # torch.cuda.max_memory_allocated of the second step (the step_memory line) on CUDA.
        mm, held = rep.get("plan", {}).get("memory_model", {}), {}
        for mb, T in ((4, 64), (8, 96)) if mm else ():
            spec = os.path.join(out, "held-out.spec.json")
            events = os.path.join(out, "held-out-%dx%d.jsonl" % (mb, T))
            with open(spec, "w") as f:
                json.dump({"protocol": 1, "role": "probe", "run_dir": out, "checkpoint_dir": os.path.join(out, "ho"),
                           "save_at": [], "stop_at": 2, "restore": None, "seed": 0, "deterministic": True,
                           "events": events, "probe": {"micro_batch": mb, "seq_len": T}}, f)
            if os.path.exists(events):
                os.unlink(events)
            os.environ["ANCHOR_PILOT_SPEC"] = spec
            hrc, hlog, _ = run([sys.executable, "train.py"] + sizes, 300, cwd=ex)
            del os.environ["ANCHOR_PILOT_SPEC"]
            lines = [json.loads(l) for l in open(events)] if hrc == 0 and os.path.exists(events) else []
            sm = next((l for l in lines if l["type"] == "step_memory"), None)
            if sm is None:
                held["%dx%d" % (mb, T)] = {"failed": tail(hlog, 5)}
                continue
            measured = sm["peak_bytes"] - (max(0, sm["baseline_bytes"] - sm["state"]["parameters"])
                                           if sm["device"] == "cpu" else 0)
            predicted = (mm["fixed_bytes"] + mm["a_bytes_per_token"] * mb * T +
                         mm["b_bytes_per_token_per_seq"] * mb * T * T)
            held["%dx%d" % (mb, T)] = {"measured": measured, "predicted": predicted,
                                       "error": round(predicted / measured - 1, 4)}
        d["held_out"] = held
        on_device = all((v["peak_allocated_bytes"] or 0) > 0 and (v["peak_reserved_bytes"] or 0) >= (
            v["peak_allocated_bytes"] or 0) for v in stages.values()) and bool(mem.get("device_total_bytes"))
        held_ok = len(held) == 2 and all("error" in h and abs(h["error"]) <= 0.10 for h in held.values())
        if dry:  # on the CPU: the same program, stages and held-out shapes measured by peak RSS
            d["status"] = "dry_run_ok" if rc == 0 and len(stages) == 6 and held_ok else "failed"
        else:
            d["status"] = "passed" if rc == 0 and len(stages) == 6 and on_device and held_ok and prof.get(
                "top") else "failed"
        if d["status"] == "failed":
            d["log"] = tail(log)

    # ---- 2. GPT-2-small, bf16, loss scaler, activation checkpointing --------
    gpt2_rep = None
    with Check(summary, "gpt2_small_pilot") as d:
        rc, chk, _ = run([anchor, "config", "check", GPT2_CONFIG] + gpt2_set, 60)
        d["config_check"] = "ok" if rc == 0 else tail(chk)
        run_dir = os.path.join(out, "gpt2-small")
        shutil.rmtree(run_dir, ignore_errors=True)
        rc, log, secs = run([anchor, "pilot", GPT2_CONFIG, "--run-dir", run_dir] + gpt2_set, 900)
        d.update(exit=rc, wall_s=round(secs, 2))
        if dry:
            d["status"] = "dry_run_ok" if rc == 2 and d["config_check"] == "ok" and no_device_stop(rc, log) else "failed"
            d["stopped_at"] = tail(log, 3)
        else:
            gpt2_rep = read_json(os.path.join(run_dir, "report.json"))
            m = gpt2_rep["measurements"]
            d.update(parameters=m["model"]["parameters"], attention=m["model"].get("attention"),
                     precision=m["memory"]["precision"], verdict=gpt2_rep["resume"]["verdict"],
                     mode=gpt2_rep["resume"]["mode"], step_s=m["step"]["seconds"],
                     tokens_per_s=m["step"]["tokens_per_s"],
                     peak_allocated_bytes=m["memory"]["step"]["peak_allocated_bytes"],
                     peak_reserved_bytes=m["memory"]["step"].get("peak_reserved_bytes"),
                     loss_scaler=gpt2_rep.get("loss_scaler"),
                     activation_checkpointing=m.get("activation_checkpointing"),
                     stages={s["stage"]: round(s.get("seconds", 0), 3) for s in gpt2_rep["stages"]})
            d["status"] = "passed" if rc == 0 and gpt2_rep["status"] == "passed" else "failed"
            if d["status"] != "passed":
                d["log"] = tail(log)

    # ---- 3 and 4. the same step in eager PyTorch -----------------------------
    peer_cmd = [sys.executable, os.path.join(ROOT, "bench", "python_step.py"), "--config-json", gpt2_json]
    with Check(summary, "memory_vs_python") as d, Check(summary, "step_vs_python") as s:
        cfg = read_json(gpt2_json)
        cfg = cfg.get("config", cfg)
        expected = gpt2_params(cfg["model"])
        if dry:
            rc, peer, _ = run(peer_cmd + ["--meta"], 300)
            p = json.loads(peer.strip().splitlines()[-1])
            ok = rc == 0 and p["parameters"] == expected
            d.update(python_parameters=p["parameters"], expected_parameters=expected)
            d["status"] = s["status"] = "dry_run_ok" if ok else "failed"
        else:
            rc, peer, _ = run(peer_cmd + ["--device", "cuda"], 600)
            p = json.loads(peer.strip().splitlines()[-1])
            a = gpt2_rep["measurements"]
            aa, ar = a["memory"]["step"]["peak_allocated_bytes"], a["memory"]["step"].get("peak_reserved_bytes")
            d.update(python=p, anchor_peak_allocated_bytes=aa, anchor_peak_reserved_bytes=ar,
                     allocated_ratio=aa / p["peak_allocated_bytes"], reserved_ratio=ar / p["peak_reserved_bytes"],
                     same_parameters=a["model"]["parameters"] == p["parameters"] == expected)
            d["status"] = ("passed" if d["same_parameters"] and abs(d["allocated_ratio"] - 1) <= 0.05
                           and abs(d["reserved_ratio"] - 1) <= 0.05 else "failed")
            catalog_name, tflops = catalog_peak_tflops(mach.get("device_name"))
            s.update(anchor_step_s=a["step"]["seconds"], python_step_s=p["step_seconds"],
                     ratio=a["step"]["seconds"] / p["step_seconds"],
                     achieved_tflops=a["step"]["achieved_flops"] / 1e12, catalog_device=catalog_name,
                     peak_bf16_tflops=tflops,
                     mfu=(a["step"]["achieved_flops"] / 1e12 / tflops) if tflops else None)
            s["status"] = "passed" if s["ratio"] <= 1.0 else "failed"

    # ---- 5, 6 and every GPU test: tests/gpu ------------------------------------
    gtest_json = os.path.join(out, "test_gpu.json")
    rc, log, _ = run([test_gpu, "--gtest_output=json:" + gtest_json], 900)
    marks = {}
    for line in log.splitlines():
        if line.startswith(MARKER):
            rec = json.loads(line[len(MARKER):])
            marks[rec["check"]] = rec
    tests = {}
    if os.path.exists(gtest_json):
        for suite in read_json(gtest_json).get("testsuites", []):
            for t in suite.get("testsuite", []):
                name = suite["name"] + "." + t["name"]
                if t.get("failures"):
                    tests[name] = "failed: " + t["failures"][0]["failure"].splitlines()[0]
                elif t.get("result") == "SKIPPED":
                    tests[name] = "skipped"
                else:
                    tests[name] = "passed"
    skip_reason = re.findall(r"Skipped\n(.*?)\n", log)
    summary["gpu_tests"] = {"exit": rc, "tests": tests, "skip_reason": skip_reason[0] if skip_reason else None}
    if not tests:
        summary["gpu_tests"]["log"] = tail(log)

    def test_state(name):
        return tests.get(name, "missing")

    with Check(summary, "memory_model") as d:
        state = test_state("Gpu.MemoryModelPredictsHeldOutPointsWithinTenPercent")
        d["test"] = state
        if dry:
            d["status"] = "dry_run_ok" if state == "skipped" else "failed"
        else:
            d.update(marks.get("memory_model", {}))
            d["status"] = "passed" if state == "passed" else "failed"

    with Check(summary, "nccl_and_pins") as d:
        state = test_state("Gpu.OneRankNcclGroupAllReduces")
        d["nccl_one_rank"] = state
        if dry:
            manifest = os.path.join(out, "manifest.json")
            rc, log, _ = run([anchor, "pin", "configs/pilot.yaml", "-o", manifest], 300)
        else:
            manifest = os.path.join(out, "default", "manifest.json")
        m = read_json(manifest)
        deps = m["dependencies"]
        d["pins"] = {k: deps.get(k) for k in ("libtorch", "cuda_runtime", "cuda_driver", "cudnn", "nccl")}
        d["device"] = {k: m["device"].get(k) for k in ("accelerator", "count", "devices")}
        libs_pinned = all(deps.get(k, "none") != "none" for k in ("cuda_runtime", "cudnn", "nccl"))
        if dry:
            d["status"] = "dry_run_ok" if state == "skipped" and libs_pinned else "failed"
        else:
            d["status"] = ("passed" if state == "passed" and libs_pinned and deps.get("cuda_driver", "none") != "none"
                           and m["device"].get("accelerator") == "cuda" else "failed")

    want = "dry_run_ok" if dry else "passed"
    failed = sorted(n for n, c in summary["checks"].items() if c.get("status") != want)
    if not dry:
        failed += sorted("test " + n for n, s in tests.items() if s != "passed")
    if not summary["build"]["links_cuda_and_nccl"]:
        failed.append("build: anchor-torch does not link libtorch_cuda and NCCL")
    summary["failed"] = failed
    summary["ok"] = not failed
    summary["seconds"] = round(time.monotonic() - t_start, 1)
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
