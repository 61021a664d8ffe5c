"""A tiny DDP program (gloo, CPU) driven by anchor_pilot, started once per rank
with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and ANCHOR_PILOT_SPEC, as anchor would start it."""
import datetime

import torch
import torch.distributed as dist

import anchor_pilot as ap

torch.set_num_threads(1)


def _refused(*args, **kwargs):
    raise AssertionError("anchor_pilot used an object collective: its Gloo work can abort the process at exit")


# The helper exchanges its own messages through the store, never through these (see pilot._Exchange):
# a rank whose last collective was one of them could abort at exit under torch 2.x.
dist.broadcast_object_list = dist.gather_object = _refused


class Cursor:
    def __init__(self, rank):
        self.rank, self.i = rank, 0

    def state_dict(self):
        return {"shard": self.rank, "i": self.i}

    def load_state_dict(self, s):
        if s["shard"] != self.rank:
            raise ValueError("cursor of shard %d restored on rank %d" % (s["shard"], self.rank))
        self.i = s["i"]

    def next(self):
        g = torch.Generator().manual_seed(1000 * self.rank + self.i)
        self.i += 1
        x = torch.randn(8, 4, generator=g)
        return x, x[:, :1] - x[:, 1:2]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    spec = ap.setup()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    torch.manual_seed(spec.seed * 100 + rank)  # dropout differs per rank
    opt = torch.optim.AdamW(ddp.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    data = Cursor(rank)
    with ap.Pilot.from_env(model=ddp, optimizer=opt, scheduler=sched, data=data) as pilot:
        start = pilot.restore()
        for step in range(start + 1, pilot.stop_at + 1):
            x, y = data.next()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            pilot.step(step, loss=loss.item(), tokens=8)
            pilot.maybe_save(step)
        pilot.digests(pilot.stop_at, when="final")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
