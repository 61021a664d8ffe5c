"""A training loop with its own checkpoint code, piloted as it is
(docs/program.md, "Your own checkpoint code").

    python train.py [RUN_DIR]

It saves every component with torch.save into checkpoints/step_NNNNNN/ and
writes a COMPLETE marker last; its resume loads the newest step directory
that has the marker. anchor_pilot only watches: `pilot.saving(step)` around
the save and `pilot.restored(step)` after the load are the two lines it adds.

EXAMPLE_FORGET (comma-separated) makes the mistakes anchor must name:
scheduler (not saved), rng (torch's RNG not saved), marker (the resume takes
the newest directory whether it finished or not).
"""
import json
import os
import random
import sys

import torch

import anchor_pilot as ap

FORGET = set(filter(None, os.environ.get("EXAMPLE_FORGET", "").split(",")))

spec = ap.setup(seed=0, deterministic=True)
run_dir = sys.argv[1] if len(sys.argv) > 1 else "run"
ckpt_root = spec.checkpoint_dir if spec else os.path.join(run_dir, "checkpoints")  # anchor gives the directory

model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


class Stream:
    """Batch i is a function of i alone: the cursor is one integer."""

    def __init__(self):
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]

    def next_batch(self):
        g = torch.Generator().manual_seed(self.pos)
        self.pos += 1
        x = torch.randn(16, 8, generator=g)
        return x, x.sum(dim=1, keepdim=True)


data = Stream()


# ----- the program's own checkpoint code ------------------------------------------------------------------
def step_dir(step):
    return os.path.join(ckpt_root, "step_%06d" % step)


def save(step):
    d = step_dir(step)
    os.makedirs(d, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(d, "model.pt"))
    torch.save(opt.state_dict(), os.path.join(d, "optimizer.pt"))
    if "scheduler" not in FORGET:
        torch.save(sched.state_dict(), os.path.join(d, "scheduler.pt"))
    if "rng" not in FORGET:
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, os.path.join(d, "rng.pt"))
    with open(os.path.join(d, "data.json"), "w") as f:
        json.dump(data.state_dict(), f)
    with open(os.path.join(d, "COMPLETE"), "w") as f:  # last: a directory without it did not finish
        f.write("%d\n" % step)


def latest():
    """The newest step directory that finished (or just the newest, with EXAMPLE_FORGET=marker)."""
    if not os.path.isdir(ckpt_root):
        return 0
    steps = sorted(int(n[5:]) for n in os.listdir(ckpt_root) if n.startswith("step_") and n[5:].isdigit())
    for s in reversed(steps):
        if "marker" in FORGET or os.path.exists(os.path.join(step_dir(s), "COMPLETE")):
            return s
    return 0


def load(step):
    d = step_dir(step)
    model.load_state_dict(torch.load(os.path.join(d, "model.pt")))
    opt.load_state_dict(torch.load(os.path.join(d, "optimizer.pt")))
    if "scheduler" not in FORGET:
        sched.load_state_dict(torch.load(os.path.join(d, "scheduler.pt")))
    if "rng" not in FORGET:
        rng = torch.load(os.path.join(d, "rng.pt"))
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
    with open(os.path.join(d, "data.json")) as f:
        data.load_state_dict(json.load(f))


# ----- the loop -------------------------------------------------------------------------------------------
with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=data, observe=True,
                       checkpoint_dir=ckpt_root, save_at=[4], stop_at=8, events=os.path.join(run_dir, "events.jsonl")
                       ) as pilot:
    start = latest()
    if start:
        load(start)
    pilot.restored(start)  # fingerprints what the load brought back
    for step in range(start + 1, pilot.stop_at + 1):
        x, y = data.next_batch()
        pilot.data_ready()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        pilot.step(step, loss=loss.item(), tokens=x.shape[0], batch=(x, y))
        if pilot.should_save(step):
            with pilot.saving(step):
                save(step)
