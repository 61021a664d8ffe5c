"""A model sharded with FSDP2 and checkpointed with torch.distributed.checkpoint
(DCP), piloted as it is (docs/program.md, "FSDP with DCP").

    torchrun --nproc-per-node 2 train.py [RUN_DIR]

Every Linear and the root are fully_shard()ed over all ranks (gloo on the
CPU). The checkpoint is DCP's: one step_N/ directory, a shard file per rank
and .metadata, which DCP writes last, once every rank's shard is written. The
state is an AppState (DCP's Stateful): the sharded model and optimizer
through get_state_dict/set_state_dict, the scheduler, and per rank its data
cursor and RNG state. The resume loads the newest step_N/ that has
.metadata. anchor_pilot adds the observed Pilot: restored() after the load,
saving() around the save.

EXAMPLE_FORGET makes the mistakes anchor must name: rng (the RNG is not
in the checkpoint), marker (the resume takes the newest step_N, finished or
not), sched (the load does not restore the scheduler).

EXAMPLE_HELPER=1 keeps the same model and loop but checkpoints through the
helper (Pilot.maybe_save / Pilot.restore): the helper sees the sharded model
and saves the model and optimizer through DCP, the scheduler, data cursor
and RNG as its own files; EXAMPLE_FORGET=optimizer or rng then restores
without that component.

Resumed at fewer ranks (anchor's pilot.resume_world_size), DCP reshards
the model and optimizer on load, and each rank takes back its own data
cursor and RNG (keyed by rank). At more ranks, DCP's load would fail on the
keys no saving rank wrote (data_2, ...): such a program must make a new
rank's cursor and RNG itself.
"""
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import anchor_pilot as ap

FORGET = set(filter(None, os.environ.get("EXAMPLE_FORGET", "").split(",")))

spec = ap.setup(seed=0, deterministic=True)
run_dir = sys.argv[1] if len(sys.argv) > 1 else "run"
ckpt_root = spec.checkpoint_dir if spec else os.path.join(run_dir, "checkpoints")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))

model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(64, 1))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
torch.manual_seed(1000 + rank)  # each rank its own dropout stream


class Stream:
    """This rank's batches: batch i is a function of (rank, i) alone."""

    def __init__(self):
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]

    def next_batch(self):
        g = torch.Generator().manual_seed(self.pos * 1000 + rank)
        self.pos += 1
        x = torch.randn(16, 8, generator=g)
        return x, x.sum(dim=1, keepdim=True)


data = Stream()


class AppState(Stateful):
    """What one DCP checkpoint holds; per-rank entries are keyed by rank (DCP keeps one copy of a key)."""

    def state_dict(self):
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd, "sched": sched.state_dict(), "data_%d" % rank: data.state_dict()}
        if "rng" not in FORGET:
            sd["rng_%d" % rank] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        return sd

    def load_state_dict(self, sd):
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        if "sched" not in FORGET:
            sched.load_state_dict(sd["sched"])
        data.load_state_dict(sd["data_%d" % rank])
        if "rng_%d" % rank in sd:
            torch.set_rng_state(sd["rng_%d" % rank]["torch"])
            random.setstate(sd["rng_%d" % rank]["python"])


def finished_checkpoint():
    """The newest step_N/ that holds .metadata (DCP writes it last), or None."""
    if not os.path.isdir(ckpt_root):
        return None
    steps = sorted(int(n[5:]) for n in os.listdir(ckpt_root) if n.startswith("step_") and n[5:].isdigit())
    for s in reversed(steps):
        d = os.path.join(ckpt_root, "step_%d" % s)
        if "marker" in FORGET or os.path.exists(os.path.join(d, ".metadata")):
            return s
    return 0


def finish():
    """Every rank's collectives done, the group gone, and out without interpreter finalization (see above)."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("EXAMPLE_HELPER"):  # the helper's own checkpoints, which save the sharded state through DCP
    with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=data, checkpoint_dir=ckpt_root,
                           save_at=[3], stop_at=6, events=os.path.join(run_dir, "events.jsonl")) as pilot:
        start = pilot.restore(skip=[c for c in ("optimizer", "rng") if c in FORGET])
        for step in range(start + 1, pilot.stop_at + 1):
            x, y = data.next_batch()
            pilot.data_ready()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            pilot.step(step, loss=loss.item(), tokens=x.shape[0], batch=(x, y))
            pilot.maybe_save(step)
    finish()

with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=data, observe=True,
                       checkpoint_dir=ckpt_root, save_at=[3], stop_at=6,
                       events=os.path.join(run_dir, "events.jsonl")) as pilot:
    start = finished_checkpoint() or 0
    if start:
        dcp.load({"app": AppState()}, checkpoint_id=os.path.join(ckpt_root, "step_%d" % start))
    pilot.restored(start)
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
                dcp.save({"app": AppState()}, checkpoint_id=os.path.join(ckpt_root, "step_%d" % step))
finish()
