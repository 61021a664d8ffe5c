"""A minimal training program piloted by anchor_pilot (docs/program.md).

    python train.py [RUN_DIR [EVENTS]]

Standalone it saves at step 10 and stops at 20 under RUN_DIR (default ./run);
run it again and it restores step 10 and repeats steps 11-20 bitwise. Under
anchor, ANCHOR_PILOT_SPEC decides instead (the keyword arguments of from_env
are then ignored).
"""
import os
import sys

import torch

import anchor_pilot as ap

spec = ap.setup(seed=0, deterministic=True)  # first: seeds every RNG, deterministic mode
run_dir = sys.argv[1] if len(sys.argv) > 1 else "run"
events = sys.argv[2] if len(sys.argv) > 2 else os.path.join(run_dir, "events.jsonl")

model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)


class Stream:
    """The data: batch i is a function of i alone, so the cursor is one integer."""

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
with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=data,
                       checkpoint_dir=os.path.join(run_dir, "checkpoints"), save_at=[10], stop_at=20,
                       events=events) as pilot:
    start = pilot.restore()  # 0, or the step of the newest checkpoint that verifies
    for step in range(start + 1, pilot.stop_at + 1):
        x, y = data.next_batch()
        pilot.data_ready()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        pilot.step(step, loss=loss.item(), grad_norm=grad_norm.item(), tokens=x.shape[0])
        pilot.maybe_save(step)
    pilot.memory("end")
    pilot.digests(pilot.stop_at, when="final")
