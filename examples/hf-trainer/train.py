"""A Hugging Face Trainer run, piloted as it is (docs/program.md, "Hugging
Face Trainer").

    python train.py [OUTPUT_DIR]

transformers' GPT2LMHeadModel from a small GPT2Config (random init, dropout
on, no hub access), trained by the Trainer on token sequences this script
makes from a fixed seed. The Trainer saves checkpoint-N/ every 3 steps; the
resume takes the newest checkpoint-N that holds trainer_state.json, the
file the Trainer writes last. anchor_pilot adds one callback and output_dir().

EXAMPLE_FORGET makes the mistakes anchor must name: resume (train() is not
given resume_from_checkpoint), marker (resume_from_checkpoint=True: the
Trainer's own pick, the highest checkpoint-N, finished or not), steps
(save_strategy="best": the Trainer saves only when the eval loss gets worse,
as greater_is_better=True says, and skips the save anchor kills).
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # build from a config; never reach the hub

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import anchor_pilot as ap
from anchor_pilot.hf import PilotCallback, output_dir

FORGET = set(filter(None, os.environ.get("EXAMPLE_FORGET", "").split(",")))

ap.setup(seed=0, deterministic=True)
out = output_dir(sys.argv[1] if len(sys.argv) > 1 else "out")  # anchor's checkpoint directory under anchor

model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4))
g = torch.Generator().manual_seed(1234)
tokens = torch.randint(0, 256, (64, 32), generator=g)
train = [{"input_ids": t, "labels": t} for t in tokens]

saving = dict(save_strategy="steps", save_steps=3)
if "steps" in FORGET:
    saving = dict(save_strategy="best", eval_strategy="steps", eval_steps=3, metric_for_best_model="loss",
                  greater_is_better=True)
args = TrainingArguments(output_dir=out, max_steps=6, per_device_train_batch_size=4, learning_rate=1e-3,
                         warmup_steps=2, lr_scheduler_type="linear", logging_steps=1, report_to=[], use_cpu=True,
                         seed=0, dataloader_num_workers=0, disable_tqdm=True, **saving)
trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=train[:8] if "steps" in FORGET else None,
                  callbacks=[PilotCallback()])


def finished_checkpoint(folder):
    """The newest checkpoint-N/ that holds trainer_state.json (the Trainer writes it last), or None."""
    if not os.path.isdir(folder):
        return None
    steps = sorted(int(n.split("-")[1]) for n in os.listdir(folder)
                   if n.startswith("checkpoint-") and n.split("-")[1].isdigit())
    for s in reversed(steps):
        if os.path.exists(os.path.join(folder, "checkpoint-%d" % s, "trainer_state.json")):
            return os.path.join(folder, "checkpoint-%d" % s)
    return None


if "resume" in FORGET:
    trainer.train()
elif "marker" in FORGET:
    trainer.train(resume_from_checkpoint=finished_checkpoint(out) and True)
else:
    trainer.train(resume_from_checkpoint=finished_checkpoint(out))
