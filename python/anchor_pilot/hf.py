"""Hugging Face transformers' Trainer, piloted with its own checkpoints
(docs/program.md, "Hugging Face Trainer").

    import anchor_pilot as ap
    from anchor_pilot.hf import PilotCallback, output_dir

    spec = ap.setup(seed=0, deterministic=True)
    args = TrainingArguments(output_dir=output_dir("out"), ...)
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PilotCallback()])
    trainer.train(resume_from_checkpoint=...)      # your resume, as you do it

The Trainer keeps saving `checkpoint-N/` and resuming from
`resume_from_checkpoint`; the callback only watches (observed mode,
anchor_pilot.Pilot(observe=True)): it fingerprints model, optimizer,
scheduler, every RNG stream and the Trainer's step and epoch when the
Trainer is about to save and on the first step after it resumed, reports
every step's loss, and under anchor makes the Trainer save at the steps
anchor asks and stop at pilot.stop_at.
"""
import os

from transformers import TrainerCallback

from .errors import PilotError
from .pilot import Pilot
from .spec import Spec


def output_dir(default):
    """The Trainer's output_dir: the checkpoint directory anchor gives under anchor, else `default`."""
    spec = Spec.from_env()
    return spec.checkpoint_dir if spec is not None else default


class _TrainerProgress:
    """The Trainer's own cursor, as the "data" component: the step and epoch it resumes at."""

    def __init__(self):
        self.state = None

    def get(self):
        s = self.state
        return {"global_step": s.global_step, "epoch": s.epoch}

    def put(self, value):  # the Trainer restores its own state; never called in observed mode
        raise AssertionError("observed mode does not restore")


class _SaveSkipped(Exception):
    """Thrown into a Pilot.saving wrapper the Trainer never saved under."""


class PilotCallback(TrainerCallback):
    """anchor_pilot for a transformers Trainer. ``standalone`` takes the
    Pilot's keyword arguments for a run outside anchor (events=..., save_at=...)."""

    def __init__(self, **standalone):
        self.standalone = standalone
        self.pilot = None
        self._progress = _TrainerProgress()
        self._resumed_at = None  # the step the Trainer resumed from, fingerprinted at the next step's start
        self._save = None  # (step, the open Pilot.saving wrapper) from the save announced to its on_save

    # ----- the Trainer's events ----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        self._progress.state = state
        self._strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
        spec = Spec.from_env()
        if spec is not None and os.path.realpath(args.output_dir) != os.path.realpath(spec.checkpoint_dir):
            raise PilotError("pilot a Trainer", "TrainingArguments.output_dir is %s, not the checkpoint directory "
                             "anchor gives (%s)" % (args.output_dir, spec.checkpoint_dir),
                             "pass output_dir=anchor_pilot.hf.output_dir(\"out\"): anchor watches and kills the "
                             "Trainer's saves there")
        settings = dict(self.standalone)
        settings.setdefault("checkpoint_dir", args.output_dir)
        self.pilot = Pilot.from_env(model=model, optimizer=optimizer, scheduler=lr_scheduler,
                                    data=(self._progress.get, self._progress.put), observe=True, **settings)
        if state.global_step > 0:
            self._resumed_at = state.global_step  # its RNG is loaded as the first batches are fetched
        else:
            self.pilot.restored(0)

    def on_step_begin(self, args, state, control, **kwargs):
        if self._save is not None:  # announced, then skipped (save_strategy="best" decides after on_step_end)
            self._skipped(*self._save)
        if self._resumed_at is not None:
            self.pilot.restored(self._resumed_at)
            self._resumed_at = None

    def on_step_end(self, args, state, control, **kwargs):
        p = self.pilot
        if p.spec is not None:
            control.should_log = True  # every step's loss, for anchor's comparison
            if state.global_step >= p.stop_at:
                control.should_training_stop = True
        if p.should_save(state.global_step):
            control.should_save = True
        if control.should_save:  # the Trainer saves once this step's logging (and evaluation) is done
            self._save = (state.global_step, p.saving(state.global_step))
            self._save[1].__enter__()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs and self.pilot is not None:
            self.pilot.step(state.global_step, loss=logs["loss"], grad_norm=logs.get("grad_norm"),
                            lr=logs.get("learning_rate"))

    def on_save(self, args, state, control, **kwargs):
        save, self._save = self._save, None
        if save is not None:
            save[1].__exit__(None, None, None)

    def _skipped(self, step, save):
        self._save = None
        save.__exit__(_SaveSkipped, _SaveSkipped(), None)  # closes the watch; reports no save
        if self.pilot.should_save(step):
            raise PilotError("pilot a Trainer", "the Trainer skipped the save of step %d that anchor asked for "
                             "(TrainingArguments.save_strategy=%r decides on its own)" % (step, self._strategy),
                             "pilot with save_strategy=\"steps\": anchor makes the Trainer save at the steps "
                             "it checks")

    def on_train_end(self, args, state, control, **kwargs):
        if self._save is not None:
            self._skipped(*self._save)
        if self.pilot is not None:
            self.pilot.close()
