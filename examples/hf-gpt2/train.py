"""A Hugging Face GPT-2 trained by a plain loop, piloted by anchor_pilot
(docs/program.md, issue 15 example 2).

    python train.py [--forget COMPONENT] [RUN_DIR [EVENTS]]

The model is transformers' GPT2LMHeadModel built from a small GPT2Config
(random init: nothing is loaded from the hub), with its dropout on so the RNG
matters. It learns bytes of a corpus this script makes from a fixed seed; the
data cursor draws each batch's windows from its own torch.Generator, whose
state is the cursor's state. AdamW, a linear warm-up/decay LambdaLR
(transformers' get_linear_schedule_with_warmup) and clip_grad_norm_.

Standalone it saves at step 3 and stops at 6 under RUN_DIR (default ./run);
run it again and it restores step 3 and repeats steps 4-6 bitwise
(`python -m anchor_pilot compare FIRST.jsonl SECOND.jsonl` says match). Under
anchor, ANCHOR_PILOT_SPEC decides instead (the keyword arguments of from_env
are then ignored).

--forget COMPONENT (optimizer, scheduler, rng or data; repeatable) is a
negative control: the restore leaves that component as this process built it
(`pilot.restore(skip=[COMPONENT])`), as a program that forgot to save or load
it would. The resumed run then differs, and `python -m anchor_pilot compare`
(or `anchor pilot`) exits 3 naming COMPONENT. Never use it for a real resume.
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # build from a config; never reach the hub

import torch
import transformers

import anchor_pilot as ap

SAVE_AT, STOP_AT = 3, 6     # standalone only
BATCH, BLOCK = 8, 64        # sequences per batch, bytes per sequence (n_positions)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("run_dir", nargs="?", default="run", help="checkpoints go under RUN_DIR/checkpoints "
                    "(default: run)")
parser.add_argument("events", nargs="?", default=None, help="the events file (default: RUN_DIR/events.jsonl)")
parser.add_argument("--forget", choices=["optimizer", "scheduler", "rng", "data"], action="append", default=[],
                    help="negative control: do not restore this component (repeatable; default: restore all)")
args = parser.parse_args()
events = args.events or os.path.join(args.run_dir, "events.jsonl")

spec = ap.setup(seed=0, deterministic=True)  # first: seeds every RNG, deterministic mode
# The step's shape, for anchor's plan. probe=False: BATCH and BLOCK are fixed here, so the
# plan rests on the one measured point (docs/program.md, "The plan").
ap.shape(micro_batch=BATCH, seq_len=BLOCK, n_layer=2, n_embd=64, probe=False)
stop_at = spec.stop_at if spec is not None else STOP_AT


def make_corpus(n_bytes=16384, seed=1234):
    """Byte text of made-up words, a function of the seed alone: the same
    corpus in every process, without files or downloads."""
    g = torch.Generator().manual_seed(seed)
    syllables = [b"an", b"chor", b"pi", b"lot", b"re", b"sume", b"step", b"ten", b"sor", b"grad",
                 b"bit", b"wise", b"save", b"load", b"seed", b"byte"]
    out = bytearray()
    while len(out) < n_bytes:
        n = int(torch.randint(1, 4, (1,), generator=g))
        out += b"".join(syllables[int(i)] for i in torch.randint(len(syllables), (n,), generator=g))
        out += b"." if int(torch.randint(8, (1,), generator=g)) == 0 else b" "
    return torch.tensor(list(out[:n_bytes]), dtype=torch.long)


class Windows:
    """The data: random windows of the corpus, drawn by its own generator.
    Its state (the generator's state and the batch count) is the cursor, so a
    restored cursor draws exactly the batches the uninterrupted run drew."""

    def __init__(self, corpus, seed=0):
        self.corpus = corpus
        self.gen = torch.Generator().manual_seed(seed)
        self.batches = 0

    def state_dict(self):
        return {"generator": self.gen.get_state(), "batches": self.batches}

    def load_state_dict(self, state):
        self.gen.set_state(state["generator"])
        self.batches = state["batches"]

    def next_batch(self):
        starts = torch.randint(len(self.corpus) - BLOCK + 1, (BATCH,), generator=self.gen)
        self.batches += 1
        return torch.stack([self.corpus[s:s + BLOCK] for s in starts.tolist()])


config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=BLOCK,
                                 bos_token_id=0, eos_token_id=0)  # dropout: the defaults (0.1)
model = transformers.GPT2LMHeadModel(config)
model.config.use_cache = False
model.loss_type = "ForCausalLM"  # what it uses anyway; its class name does not say so, and it warns
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=stop_at)
data = Windows(make_corpus())

with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=sched, data=data,
                       checkpoint_dir=os.path.join(args.run_dir, "checkpoints"), save_at=[SAVE_AT],
                       stop_at=STOP_AT, events=events) as pilot:
    start = pilot.restore(skip=args.forget)  # 0, or the step of the newest checkpoint that verifies
    for step in range(start + 1, pilot.stop_at + 1):
        input_ids = data.next_batch()
        pilot.data_ready()
        loss = model(input_ids, labels=input_ids).loss
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        pilot.step(step, loss=loss.item(), grad_norm=grad_norm.item(), tokens=input_ids.numel())
        pilot.maybe_save(step)
    pilot.memory("end")
    pilot.digests(pilot.stop_at, when="final")
