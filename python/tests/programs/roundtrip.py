"""Builds a model/optimizer/scheduler/scaler/data set whose state covers every
dtype anchor reads and every structure the encoder tags; restores it in a
fresh process when run as a script.

    python roundtrip.py CKPT_DIR [full|skip=a+b ...]
        -> one JSON line {"mode", "step", "digests", "draws", ...} per mode
"""
import json
import math
import random
import sys

import torch

import anchor_pilot as ap

try:  # when NumPy is imported, the helper saves its global RNG too
    import numpy as np
except ImportError:  # pragma: no cover - both lines here have NumPy
    np = None

torch.set_num_threads(1)


class Many(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.half = torch.nn.Linear(3, 2).to(torch.float16)
        self.bf = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.bfloat16))
        self.bn = torch.nn.BatchNorm1d(3)
        for name, dt in [("f64", torch.float64), ("i64", torch.int64), ("i32", torch.int32), ("i16", torch.int16),
                         ("i8", torch.int8), ("u8", torch.uint8)]:
            self.register_buffer(name, (torch.arange(-3, 9).reshape(3, 4) * 37).to(dt))
        self.register_buffer("flags", torch.tensor([True, False, True]))
        self.register_buffer("empty", torch.zeros(0, 5))
        self.register_buffer("scalar", torch.tensor(2.5))
        self.register_buffer("special", torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0]))


class Cursor:
    def __init__(self):
        self.s = {}

    def state_dict(self):
        return self.s

    def load_state_dict(self, s):
        self.s = s


def make_scaler():
    """A GradScaler that is enabled where this torch can: CUDA, or the CPU on torch 2.x
    (torch 1.13 on a CPU-only host only has a disabled one, whose state is {})."""
    if torch.cuda.is_available():
        return torch.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=7)
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        try:
            return torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
        except (TypeError, RuntimeError, ValueError):
            pass
    return torch.cuda.amp.GradScaler(enabled=False)


def build():
    torch.manual_seed(3)
    random.seed(3)
    if np is not None:
        np.random.seed(3)
    model = Many()
    opt = torch.optim.AdamW([{"params": [model.lin.weight, model.lin.bias, model.bf], "lr": 0.01},
                             {"params": [model.bn.weight, model.bn.bias], "lr": 0.1, "weight_decay": 0.0}],
                            betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 0.9 ** s, lambda s: 1.0 / (1 + s)])
    scaler = make_scaler()
    data = Cursor()
    return model, opt, sched, scaler, data


def train(model, opt, sched, scaler, data, steps=3):
    if scaler.is_enabled():  # a state a fresh scaler does not have
        scaler.load_state_dict(dict(scaler.state_dict(), scale=512.0, _growth_tracker=5))
    if np is not None:
        np.random.random(5)
    for s in range(steps):
        x = torch.randn(5, 4)
        h = model.bn(model.lin(x))
        loss = h.pow(2).mean() + model.bf.float().sum() * 0.1
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    data.s = {"epoch": 2, "pos": 17, "order": (3, 1, 2), "nan": float("nan"), "inf": -float("inf"),
              "by_rank": {0: [1, 2], 1: [3]}, "name": "shard-é", "none": None, "gen": torch.Generator().get_state()}


def draws():
    return [torch.rand(3).tolist(), random.random(), float(np.random.random()) if np is not None else None]


def main():
    ckpt = sys.argv[1]
    for mode in sys.argv[2:] or ["full"]:  # each: fresh objects (reseeded), one restore, one JSON line
        skip = tuple(mode[5:].split("+")) if mode.startswith("skip=") else ()
        model, opt, sched, scaler, data = build()
        pilot = ap.Pilot(ckpt, model=model, optimizer=opt, scheduler=sched, scaler=scaler, data=data)
        step = pilot.restore(skip=skip)
        digests = pilot.digests(step, emit=False)
        print(json.dumps({"mode": mode, "step": step, "digests": digests, "draws": draws(),
                          "betas_type": type(opt.param_groups[0]["betas"]).__name__,
                          "nan_restored": math.isnan(data.s["nan"]) if "nan" in data.s else None,
                          "scaler": scaler.state_dict()}))


if __name__ == "__main__":
    main()
