"""A PyTorch Lightning run, piloted as it is (docs/program.md, "PyTorch
Lightning").

    python train.py [CKPT_DIR]

A small MLP (dropout on) learns a made-up regression from a fixed seed. Its
ModelCheckpoint saves every 3 steps and keeps last.ckpt; the resume is
fit(ckpt_path="last"). Lightning's checkpoint holds no RNG state, so the
module saves torch's and Python's in on_save_checkpoint and restores them in
on_load_checkpoint. The data is a DataLoader that resumes mid-epoch (it has
state_dict()/load_state_dict(), which Lightning saves and restores). anchor_pilot adds one callback and
checkpoint_dir().

EXAMPLE_FORGET makes the mistakes anchor must name: rng (no RNG in the
checkpoint, Lightning's default), cursor (a plain DataLoader: the resumed
epoch starts again at its first batch), generator (a DataLoader without
generator=: its iterator, made after the restore, draws from torch's RNG),
resume (fit() without ckpt_path).
"""
import os
import random
import sys

import torch
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

import anchor_pilot as ap
from anchor_pilot.lightning import PilotCallback, checkpoint_dir

FORGET = set(filter(None, os.environ.get("EXAMPLE_FORGET", "").split(",")))

ap.setup(seed=0, deterministic=True)
ckpt_dir = checkpoint_dir(sys.argv[1] if len(sys.argv) > 1 else "ckpt")


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint):
        if "rng" not in FORGET:
            checkpoint["rng"] = {"torch": torch.get_rng_state(), "python": random.getstate()}

    def on_load_checkpoint(self, checkpoint):
        if "rng" in checkpoint:
            torch.set_rng_state(checkpoint["rng"]["torch"])
            random.setstate(checkpoint["rng"]["python"])


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader that resumes mid-epoch: Lightning keeps its state_dict() in
    the checkpoint and hands it back to load_state_dict() on resume. Without
    it (EXAMPLE_FORGET=cursor) a resumed epoch starts again at its first batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.served, self._skip = 0, 0

    def __iter__(self):
        skip, self._skip = self._skip, 0
        self.served = skip
        for i, batch in enumerate(super().__iter__()):
            if i >= skip:
                self.served += 1
                yield batch

    def state_dict(self):
        return {"served": self.served}

    def load_state_dict(self, state):
        self._skip = state["served"]


g = torch.Generator().manual_seed(1234)
x = torch.randn(256, 8, generator=g)
data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
# generator=: making an iterator draws its base seed from this, not from torch's global RNG
# (Lightning makes the iterator after the restore)
Loader = torch.utils.data.DataLoader if "cursor" in FORGET else ResumableLoader
loader = Loader(data, batch_size=16, shuffle=False, generator=None if "generator" in FORGET else torch.Generator())

ckpt = ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=3, save_last=True, save_top_k=-1)
trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, callbacks=[ckpt, PilotCallback()], logger=False,
                     enable_progress_bar=False, enable_model_summary=False, deterministic=True)
trainer.fit(Net(), loader, ckpt_path=None if "resume" in FORGET else "last")
