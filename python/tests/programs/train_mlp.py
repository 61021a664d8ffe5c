"""A tiny training program driven by anchor_pilot, used by the tests.

    python train_mlp.py SPEC[:skip=a+b][:park] [SPEC...]

Each argument is one run in this process (fresh model, optimizer, scheduler
and data, reseeded by setup()), configured by that spec file exactly as
anchor would (ANCHOR_PILOT_SPEC). ``skip=`` restores without those
components (the negative controls); ``park`` prints "parked <step>" after
each save and blocks on stdin, so a test can SIGKILL the process right there.
``sched=NAME`` trains with that class of torch.optim.lr_scheduler instead
(test_schedulers.py: every one torch ships).

MLP with dropout, AdamW, LambdaLR (warm-up then cosine), a DataLoader over a
resumable shuffled sampler whose cursor (epoch, position) is the data state,
and Python's random for input noise: every component matters.
"""
import math
import os
import random
import sys

import torch

import anchor_pilot as ap

torch.set_num_threads(1)
N_EXAMPLES, BATCH = 96, 8


class ResumableSampler(torch.utils.data.Sampler):
    """Shuffled per epoch (seeded), resumable from (epoch, pos)."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0

    def __iter__(self):
        while self.pos < self.n:
            g = torch.Generator()
            g.manual_seed(self.seed * 1000 + self.epoch)
            perm = torch.randperm(self.n, generator=g)
            i = int(perm[self.pos])
            self.pos += 1
            yield i
        self.epoch, self.pos = self.epoch + 1, 0

    def __len__(self):
        return self.n - self.pos

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s):
        self.epoch, self.pos = s["epoch"], s["pos"]


def batches(loader):
    while True:
        for b in loader:
            yield b


def scheduler(name, opt, total, lr_at):
    """One of torch's schedulers, each with arguments under which it changes the lr within `total` steps."""
    L = torch.optim.lr_scheduler
    if name == "LambdaLR":
        return L.LambdaLR(opt, lr_at)
    if name == "SequentialLR":
        return L.SequentialLR(opt, [L.LinearLR(opt, start_factor=0.5, total_iters=3),
                                    L.ExponentialLR(opt, gamma=0.9)], milestones=[3])
    if name == "ChainedScheduler":
        return L.ChainedScheduler([L.ConstantLR(opt, factor=0.5, total_iters=4), L.ExponentialLR(opt, gamma=0.9)])
    args = {"MultiplicativeLR": dict(lr_lambda=lambda e: 0.95), "StepLR": dict(step_size=3, gamma=0.5),
            "MultiStepLR": dict(milestones=[3, 8], gamma=0.5), "ConstantLR": dict(factor=0.5, total_iters=8),
            "LinearLR": dict(start_factor=0.3, total_iters=10), "ExponentialLR": dict(gamma=0.9),
            "PolynomialLR": dict(total_iters=total, power=2.0), "CosineAnnealingLR": dict(T_max=total),
            "CosineAnnealingWarmRestarts": dict(T_0=5, T_mult=2),
            # 1.13's CyclicLR keeps a weak reference to its own method in its state; OneCycleLR a bound method.
            "CyclicLR": dict(base_lr=1e-3, max_lr=3e-2, step_size_up=4, mode="triangular2", cycle_momentum=False),
            "OneCycleLR": dict(max_lr=3e-2, total_steps=total),
            "ReduceLROnPlateau": dict(factor=0.5, patience=1, threshold=0.5)}
    return getattr(L, name)(opt, **args[name])


def run(arg):
    parts = arg.split(":")
    os.environ[ap.spec.ENV] = parts[0]
    skip, park, sched_name = (), False, "LambdaLR"
    for p in parts[1:]:
        if p.startswith("skip="):
            skip = tuple(p[5:].split("+"))
        elif p.startswith("sched="):
            sched_name = p[6:]
        elif p == "park":
            park = True
    spec = ap.setup()
    g = torch.Generator()
    g.manual_seed(1234)
    xs = torch.randn(N_EXAMPLES, 6, generator=g)
    ys = (xs[:, :1] * 2 - xs[:, 1:2]).tanh()
    dataset = torch.utils.data.TensorDataset(xs, ys)
    sampler = ResumableSampler(N_EXAMPLES, spec.seed)
    # generator=: the loader's per-iterator seed must not draw from the global RNG
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler,
                                         generator=torch.Generator().manual_seed(0))
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    total = spec.stop_at

    def lr_at(s):
        return (s + 1) / 3 if s < 3 else 0.5 * (1 + math.cos(math.pi * s / total))

    sched = scheduler(sched_name, opt, total, lr_at)
    with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=sampler) as pilot:
        start = pilot.restore(skip=skip)
        it = batches(loader)
        for step in range(start + 1, pilot.stop_at + 1):
            x, y = next(it)
            pilot.data_ready()
            x = x + 0.01 * random.gauss(0, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step(loss.item()) if sched_name == "ReduceLROnPlateau" else sched.step()
            pilot.step(step, loss=loss.item(), grad_norm=float(gn), tokens=BATCH)
            if pilot.maybe_save(step) and park:
                print("parked %d" % step, flush=True)
                sys.stdin.read()
        pilot.memory("end")
        pilot.digests(pilot.stop_at, when="final")


if __name__ == "__main__":
    for a in sys.argv[1:]:
        run(a)
