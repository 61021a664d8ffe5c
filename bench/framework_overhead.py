#!/usr/bin/env python3
"""What each framework integration of anchor_pilot costs per step (issue 41),
side by side with the same program without it.

    bench/framework_overhead.py [--python PY] [--frameworks hf,lightning,accelerate]
                                [--reps 3] [--steps 12] [--n-embd 512 --n-layer 6 --vocab 8192
                                --seq-len 128 --batch 4] [--threads 2]

For each framework, one child process per arm and rep, interleaved: the same
GPT-2 (transformers' GPT2LMHeadModel from a config, 25M parameters at the
defaults) trained for --steps steps on made-up tokens, once with the
integration (anchor_pilot.hf.PilotCallback / anchor_pilot.lightning.
PilotCallback / the observed Pilot around an accelerate loop, each writing
its events file, every step's line with its input batch digest where the
integration gives it) and once without. A step's time is from one step's
start to the next's (steps 3..N, medians over the reps). Goal: <= 1.02x.
Also printed: what the integration does at a save, fingerprinting the state
(once per save, not per step), against the step.

Needs the torch2 environment (scripts/torch2-python): the frameworks are
locked only there. Run by hand on a quiet machine; CTest runs it once at a
tiny size (bench.framework_overhead_tiny) so it keeps working.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def child(a):
    """One arm: trains, prints {"steps": [seconds...], "fingerprint_s": float|null}."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    torch.set_num_threads(a.threads)
    from transformers import GPT2Config, GPT2LMHeadModel
    import anchor_pilot as ap

    ap.seed_all(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=a.vocab, n_positions=a.seq_len, n_embd=a.n_embd,
                                       n_layer=a.n_layer, n_head=8))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, a.vocab, (a.steps * a.batch, a.seq_len), generator=g)
    events = os.path.join(a.work, "events-%s-%d.jsonl" % (a.child, os.getpid()))
    starts = []
    pilot_box = []

    if a.child == "hf":
        from transformers import Trainer, TrainerCallback, TrainingArguments
        from anchor_pilot.hf import PilotCallback

        class Timer(TrainerCallback):
            def on_step_begin(self, *args, **kwargs):
                starts.append(time.perf_counter())

        cbs = [Timer()]
        if a.pilot:
            cbs.append(PilotCallback(events=events))
        targs = TrainingArguments(output_dir=os.path.join(a.work, "hf-%d" % os.getpid()), max_steps=a.steps,
                                  per_device_train_batch_size=a.batch, save_strategy="no", logging_steps=1,
                                  report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
        trainer = Trainer(model=model, args=targs, train_dataset=[{"input_ids": t, "labels": t} for t in tokens],
                          callbacks=cbs)
        trainer.train()
        starts.append(time.perf_counter())
        if a.pilot:
            pilot_box.append(cbs[1].pilot)
    elif a.child == "lightning":
        import pytorch_lightning as pl
        from pytorch_lightning.callbacks import ModelCheckpoint
        from anchor_pilot.lightning import PilotCallback

        class Module(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.gpt = model

            def training_step(self, batch, i):
                return self.gpt(input_ids=batch[0], labels=batch[0]).loss

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-4)

        class Timer(pl.Callback):
            def on_train_batch_start(self, *args):
                starts.append(time.perf_counter())

        cbs = [Timer(), ModelCheckpoint(dirpath=os.path.join(a.work, "pl-%d" % os.getpid()), every_n_train_steps=0,
                                        save_top_k=0)]
        if a.pilot:
            cbs.append(PilotCallback(events=events))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=a.batch)
        trainer = pl.Trainer(max_steps=a.steps, accelerator="cpu", devices=1, callbacks=cbs, logger=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Module(), loader)
        starts.append(time.perf_counter())
        if a.pilot:
            pilot_box.append(cbs[2].pilot)
    else:  # accelerate
        from accelerate import Accelerator
        acc = Accelerator(cpu=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=a.batch)
        model, opt, loader = acc.prepare(model, opt, loader)
        pilot = ap.Pilot(os.path.join(a.work, "acc-%d" % os.getpid()), model=model, optimizer=opt, observe=True,
                         events=events) if a.pilot else None
        if pilot:
            pilot.restored(0)
        for step, (batch,) in enumerate(loader, 1):
            starts.append(time.perf_counter())
            if pilot:
                pilot.data_ready()
            loss = model(input_ids=batch, labels=batch).loss
            opt.zero_grad()
            acc.backward(loss)
            opt.step()
            if pilot:
                pilot.step(step, loss=loss.item(), batch=batch)
        starts.append(time.perf_counter())
        if pilot:
            pilot_box.append(pilot)
    fingerprint = None
    if pilot_box:
        t0 = time.perf_counter()
        pilot_box[0].digests(a.steps, when="save")  # what each save adds: the state fingerprinted once
        fingerprint = time.perf_counter() - t0
    steps = [b - s for s, b in zip(starts, starts[1:])]
    print("RESULT " + json.dumps({"steps": steps[2:], "fingerprint_s": fingerprint,
                                  "parameters": sum(p.numel() for p in model.parameters())}))


def run_arm(a, framework, pilot):
    cmd = [a.python, os.path.abspath(__file__), "--child", framework, "--pilot", str(int(pilot)), "--work", a.work,
           "--steps", str(a.steps), "--n-embd", str(a.n_embd), "--n-layer", str(a.n_layer), "--vocab", str(a.vocab),
           "--seq-len", str(a.seq_len), "--batch", str(a.batch), "--threads", str(a.threads)]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS=str(a.threads))
    env.pop("ANCHOR_PILOT_SPEC", None)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=3600)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        sys.exit("framework_overhead: %s (pilot=%s) failed (rc %d):\n%s" % (framework, pilot, p.returncode,
                                                                              p.stderr[-3000:]))
    return json.loads(lines[-1][len("RESULT "):])


def main():
    ap_ = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap_.add_argument("--python", default=sys.executable)
    ap_.add_argument("--frameworks", default="hf,lightning,accelerate")
    ap_.add_argument("--reps", type=int, default=3)
    ap_.add_argument("--steps", type=int, default=12)
    ap_.add_argument("--n-embd", type=int, default=512)
    ap_.add_argument("--n-layer", type=int, default=6)
    ap_.add_argument("--vocab", type=int, default=8192)
    ap_.add_argument("--seq-len", type=int, default=128)
    ap_.add_argument("--batch", type=int, default=4)
    ap_.add_argument("--threads", type=int, default=2)
    ap_.add_argument("--child")
    ap_.add_argument("--pilot", type=int, default=0)
    ap_.add_argument("--work")
    a = ap_.parse_args()
    if a.steps < 4:
        sys.exit("framework_overhead: --steps must be >= 4 (steps 3..N are timed)")
    if a.child:
        return child(a)
    a.work = tempfile.mkdtemp(prefix="anchor-framework-bench-")
    print("framework_overhead: n_embd %d, %d layers, vocab %d, seq %d, micro-batch %d, %d steps x %d reps, "
          "%d threads" % (a.n_embd, a.n_layer, a.vocab, a.seq_len, a.batch, a.steps, a.reps, a.threads))
    worst = 0.0
    for fw in a.frameworks.split(","):
        with_, without, fp, params = [], [], [], 0
        for _ in range(a.reps):
            for pilot in (False, True):
                r = run_arm(a, fw, pilot)
                (with_ if pilot else without).extend(r["steps"])
                params = r["parameters"]
                if r["fingerprint_s"] is not None:
                    fp.append(r["fingerprint_s"])
        m_with, m_without = statistics.median(with_), statistics.median(without)
        ratio = m_with / m_without
        worst = max(worst, ratio)
        print("  %-10s %.1fM params: step %.4f s without, %.4f s with the integration: %.3fx; "
              "fingerprint at a save %.3f s (%.2f steps)" % (fw, params / 1e6, m_without, m_with, ratio,
                                                              statistics.median(fp), statistics.median(fp) / m_without))
    print("framework_overhead: worst per-step ratio %.3fx (goal <= 1.02x)" % worst)


if __name__ == "__main__":
    main()
