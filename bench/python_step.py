#!/usr/bin/env python3
"""The Python peer of anchor's measured step: the same model, optimizer,
precision, activation checkpointing, micro-batch and sequence length, in eager
PyTorch, on the same device. scripts/gpu_check.py compares anchor's step (its
report's measurements) with this one: peak allocated and reserved memory
(torch.cuda.max_memory_allocated() / max_memory_reserved(), reset right before
the step, as anchor resets its own) and the step's time.

As anchor measures it: K = pilot.steps_before_save steps from a fresh model,
the last one measured (the first with full AdamW state): zero_grad, forward
and backward over grad_accum micro-batches, clip, optimizer step, synchronize.
The tokens are random (the content changes neither memory nor time).

  python bench/python_step.py --config-json CONFIG.json [--device cuda] [--meta]

CONFIG.json is `anchor config dump --json` of the config. --meta builds the
model on the meta device and reports its parameter count only (no memory,
no device: the GPU check's dry run). Prints one JSON object.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import python_pilot  # noqa: E402  (the same GPT as src/model/gpt.cpp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-json", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--meta", action="store_true")
    args = ap.parse_args()
    import torch

    with open(args.config_json) as f:
        doc = json.load(f)
    cfg = doc.get("config", doc)
    m, t = cfg["model"], cfg["train"]
    if args.meta:
        with torch.device("meta"):
            model = python_pilot.build_model(torch, m)
        print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()), "device": "meta",
                          "torch": torch.__version__}))
        return

    dev = torch.device(args.device)
    if cfg["run"]["deterministic"]:  # as anchor's trainer (src/compat/torch_compat.hpp): same kernels
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(cfg["run"]["seed"])
    torch.set_num_threads(cfg["run"]["threads"])
    model = python_pilot.build_model(torch, m, ckpt_every=t.get("activation_checkpointing", 0)).to(dev)
    model.train()
    o = t["optimizer"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    precision = t.get("precision", "fp32")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler_on = precision == "fp16" or t.get("loss_scale", {}).get("enabled") == "true"
    scaler = (torch.amp.GradScaler(dev.type, init_scale=t["loss_scale"]["init_scale"]) if scaler_on else None)
    mb, accum, T, V = t["micro_batch"], t["grad_accum"], cfg["data"]["seq_len"], m["vocab_size"]
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        for _ in range(accum):
            x = torch.randint(0, V, (mb, T), device=dev)
            y = torch.randint(0, V, (mb, T), device=dev)
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
                loss = model(x, y) / accum
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        sync()

    k = max(2, cfg["pilot"]["steps_before_save"])
    for _ in range(k - 1):
        step()
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    out = {"parameters": sum(p.numel() for p in model.parameters()), "device": str(dev),
           "torch": torch.__version__, "precision": precision, "step_seconds": seconds,
           "tokens_per_s": mb * accum * T / seconds, "measured_step": k - 1}
    if cuda:
        out.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(dev),
                   peak_reserved_bytes=torch.cuda.max_memory_reserved(dev),
                   device_name=torch.cuda.get_device_name(dev))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
