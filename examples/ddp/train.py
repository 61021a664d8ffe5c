"""A DDP training program, launched as torchrun launches it, piloted by anchor (docs/program.md).

    torchrun --nproc-per-node=2 train.py [--forget optimizer|scheduler|rng|data|rank-seed]

anchor starts it the same way: once per rank with torchrun's variables (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so
init_process_group() reads them as under torchrun. Gloo on the CPU: a
two-layer MLP with dropout (each rank its own dropout stream) wrapped in
DistributedDataParallel, AdamW, StepLR, and a per-rank data shard whose cursor
is the data state. Every rank saves its own RNG and cursor; rank 0 the model,
optimizer and scheduler (anchor_pilot's DDP save).

--forget COMPONENT restores everything but that component (the negative controls);
--forget rank-seed leaves every rank on the seed setup() gave them all, so
their dropout masks are the same (anchor names it: pilot.shared_rng).
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist

import anchor_pilot as ap

p = argparse.ArgumentParser()
p.add_argument("--forget", choices=["optimizer", "scheduler", "rng", "data", "rank-seed"], action="append",
               default=[])
args = p.parse_args()
torch.set_num_threads(1)


class Shard:
    """Rank r's stream of batches: batch i is a function of (r, i) alone."""

    def __init__(self, rank):
        self.rank, self.i = rank, 0

    def state_dict(self):
        return {"shard": self.rank, "i": self.i}

    def load_state_dict(self, s):
        if s["shard"] != self.rank:
            raise ValueError("the cursor of shard %d restored on rank %d" % (s["shard"], self.rank))
        self.i = s["i"]

    def next(self):
        g = torch.Generator().manual_seed(1000 * self.rank + self.i)
        self.i += 1
        x = torch.randn(16, 8, generator=g)
        return x, x[:, :1] * x[:, 1:2] - x[:, 2:3]


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
spec = ap.setup(seed=0, deterministic=True)
# The plan: 16 rows per step, no sequence; probe=False (its shapes are fixed): one measured point.
ap.shape(micro_batch=16, seq_len=1, probe=False)
model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 1))
ddp = torch.nn.parallel.DistributedDataParallel(model)
if "rank-seed" not in args.forget:
    torch.manual_seed((spec.seed if spec else 0) * 100 + rank)  # after DDP's broadcast: dropout differs per rank
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)
data = Shard(rank)
run = os.path.abspath("run")
with ap.Pilot.from_env(model=ddp, optimizer=opt, scheduler=sched, data=data,
                       checkpoint_dir=os.path.join(run, "checkpoints"), save_at=[5], stop_at=10,
                       events=os.path.join(run, "events.jsonl")) as pilot:
    start = pilot.restore(skip=[c for c in args.forget if c != "rank-seed"])
    for step in range(start + 1, pilot.stop_at + 1):
        x, y = data.next()
        pilot.data_ready()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        pilot.step(step, loss=loss.item(), tokens=x.shape[0])
        pilot.maybe_save(step)
    pilot.memory("end")
dist.destroy_process_group()
