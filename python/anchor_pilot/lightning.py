"""PyTorch Lightning, piloted with its own checkpoints (docs/program.md,
"PyTorch Lightning").

    import anchor_pilot as ap
    from anchor_pilot.lightning import PilotCallback, checkpoint_dir

    ap.setup(seed=0, deterministic=True)
    ckpt = ModelCheckpoint(dirpath=checkpoint_dir("ckpt"), every_n_train_steps=3, save_last=True, save_top_k=-1)
    trainer = pl.Trainer(max_steps=6, callbacks=[ckpt, PilotCallback()])
    trainer.fit(module, loader, ckpt_path=...)        # your resume, as you do it

Lightning keeps saving `.ckpt` files through its ModelCheckpoint and resuming
from `fit(ckpt_path=...)`; the callback only watches (observed mode): it
fingerprints the module, optimizer, scheduler, every RNG stream and the fit
loop's progress when the ModelCheckpoint is about to save and once training
starts after a resume, reports every step's loss, and under anchor makes the
ModelCheckpoint save every gcd(K, R) steps (so at K and K+R) and stops at
pilot.stop_at.
"""
import math
import os

import pytorch_lightning as pl

from .errors import PilotError
from .pilot import Pilot
from .spec import Spec


def checkpoint_dir(default):
    """ModelCheckpoint's dirpath: the checkpoint directory anchor gives under anchor, else `default`."""
    spec = Spec.from_env()
    return spec.checkpoint_dir if spec is not None else default


def _not_restored(state):  # Lightning restores its own loops; observed mode never calls this
    raise AssertionError("observed mode does not restore")


def _loss(outputs):
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return float(loss.detach()) if loss is not None and hasattr(loss, "detach") else None


class PilotCallback(pl.Callback):
    """anchor_pilot for a Lightning Trainer. ``standalone`` takes the Pilot's
    keyword arguments for a run outside anchor (events=..., save_at=...)."""

    def __init__(self, **standalone):
        self.standalone = standalone
        self.pilot = None
        self._save = None
        self._trainer = None

    def _progress(self):
        t = self._trainer
        done = t.fit_loop.epoch_loop.batch_progress.current.completed
        return {"global_step": t.global_step, "epoch": t.current_epoch, "batches_done_in_epoch": done}

    def _checkpoint(self, trainer):
        cb = trainer.checkpoint_callback
        if cb is None or not cb.dirpath:
            raise PilotError("pilot a Lightning Trainer", "it has no ModelCheckpoint with a dirpath",
                             "add ModelCheckpoint(dirpath=anchor_pilot.lightning.checkpoint_dir(\"ckpt\"), "
                             "every_n_train_steps=N) to its callbacks")
        return cb

    def on_train_start(self, trainer, pl_module):
        self._trainer = trainer
        cb = self._checkpoint(trainer)
        spec = Spec.from_env()
        if spec is not None:
            if os.path.realpath(cb.dirpath) != os.path.realpath(spec.checkpoint_dir):
                raise PilotError("pilot a Lightning Trainer", "ModelCheckpoint's dirpath is %s, not the checkpoint "
                                 "directory anchor gives (%s)" % (cb.dirpath, spec.checkpoint_dir),
                                 "pass dirpath=anchor_pilot.lightning.checkpoint_dir(\"ckpt\")")
            k = min(spec.save_at) if spec.save_at else spec.stop_at
            cb._every_n_train_steps = math.gcd(k, spec.stop_at)  # saves at K and K+R (worker B: at K+R)
        settings = dict(self.standalone)
        settings.setdefault("checkpoint_dir", cb.dirpath)
        schedulers = [c.scheduler for c in trainer.lr_scheduler_configs]
        self.pilot = Pilot.from_env(model=pl_module, optimizer=trainer.optimizers[0] if trainer.optimizers else None,
                                    scheduler=schedulers[0] if schedulers else None,
                                    data=(self._progress, _not_restored), observe=True, **settings)
        self.pilot.restored(trainer.global_step)  # Lightning has restored everything by now (0: a fresh start)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._end_save()
        self.pilot.data_ready()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        p, step = self.pilot, trainer.global_step
        p.step(step, loss=_loss(outputs), batch=batch)
        cb = trainer.checkpoint_callback
        every = getattr(cb, "_every_n_train_steps", 0)
        if every and step % every == 0:  # the ModelCheckpoint saves after this hook (it runs last)
            self._save = p.saving(step)
            self._save.__enter__()
        if p.spec is not None and step >= p.stop_at:
            trainer.should_stop = True

    def _end_save(self):
        save, self._save = self._save, None
        if save is not None:
            save.__exit__(None, None, None)

    def on_train_end(self, trainer, pl_module):
        self._end_save()
        if self.pilot is not None:
            self.pilot.close()
