"""An accelerate training loop, piloted as it is (docs/program.md,
"accelerate").

    python train.py [RUN_DIR]

A small MLP (dropout on) learns a made-up regression. The loop checkpoints
with Accelerator.save_state into step_N/ every 3 steps, and the step count
with it (a registered object, saved last); its resume loads the newest step_N
that holds that object with Accelerator.load_state and skips the batches the
epoch already used with Accelerator.skip_first_batches. anchor_pilot adds
the observed Pilot: restored() after the load, saving() around the save.

EXAMPLE_FORGET makes the mistakes anchor must name: skip (no
skip_first_batches: the resumed epoch starts again at its first batch),
marker (the resume takes the newest step_N, finished or not).
"""
import os
import sys

import torch
from accelerate import Accelerator

import anchor_pilot as ap

FORGET = set(filter(None, os.environ.get("EXAMPLE_FORGET", "").split(",")))

spec = ap.setup(seed=0, deterministic=True)
run_dir = sys.argv[1] if len(sys.argv) > 1 else "run"
ckpt_root = spec.checkpoint_dir if spec else os.path.join(run_dir, "checkpoints")

accelerator = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
g = torch.Generator().manual_seed(1234)
x = torch.randn(256, 8, generator=g)
data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
# generator=: making an iterator draws its base seed from this, not from torch's global RNG
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=False, generator=torch.Generator())
model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)


class Progress:
    """The step count, checkpointed with the rest (register_for_checkpointing)."""

    def __init__(self):
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = state["step"]


progress = Progress()
accelerator.register_for_checkpointing(progress)


def finished_checkpoint():
    """The newest step_N/ that holds the registered object (save_state writes it last), or None."""
    if not os.path.isdir(ckpt_root):
        return None
    steps = sorted(int(n[5:]) for n in os.listdir(ckpt_root) if n.startswith("step_") and n[5:].isdigit())
    for s in reversed(steps):
        d = os.path.join(ckpt_root, "step_%d" % s)
        if "marker" in FORGET or os.path.exists(os.path.join(d, "custom_checkpoint_0.pkl")):
            return d
    return None


with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=progress, observe=True,
                       checkpoint_dir=ckpt_root, save_at=[3], stop_at=6,
                       events=os.path.join(run_dir, "events.jsonl")) as pilot:
    resume_from = finished_checkpoint()
    if resume_from:
        accelerator.load_state(resume_from)
    start = progress.step
    pilot.restored(start)
    batches = loader
    if start and "skip" not in FORGET:
        batches = accelerator.skip_first_batches(loader, start % len(loader))
    step = start
    while step < pilot.stop_at:
        for xb, yb in batches:
            step += 1
            pilot.data_ready()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            sched.step()
            progress.step = step
            pilot.step(step, loss=loss.item(), tokens=xb.shape[0], batch=(xb, yb))
            if pilot.should_save(step):
                with pilot.saving(step):
                    accelerator.save_state(os.path.join(ckpt_root, "step_%d" % step))
            if step >= pilot.stop_at:
                break
        batches = loader
