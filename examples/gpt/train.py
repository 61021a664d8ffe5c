"""A plain PyTorch GPT-style training program, piloted by anchor (docs/program.md).

    python train.py [--forget optimizer|scheduler|rng|data] [--leave-out scheduler|data] [--noise]
                    [--ignore-shape] [--steps N] [--unsaved-buffer]
                    [--n-embd E] [--n-layer L]
                    [--seq-len T] [--batch B] [--threads N] [--device cpu|cuda] [--precision fp32|bf16]
    python train.py --no-pilot [--deterministic] [--steps N] [--save-at S --save-to FILE] [--load-from FILE] [sizes]

Its own loop: a small causal transformer (token and position embeddings,
pre-norm blocks with causal self-attention and an MLP, dropout), AdamW, a
warm-up + cosine LambdaLR, and a DataLoader over a byte corpus made here from a
fixed seed, sampled by a resumable shuffled sampler whose cursor (epoch,
position) is the data state.

Under anchor (ANCHOR_PILOT_SPEC set) the spec decides the steps, saves and
restore. Standalone it saves at step 5 and stops at 10 under ./run.

--forget COMPONENT restores everything but that component: the negative
controls, which anchor must catch and name. --leave-out COMPONENT does not
give it to the Pilot at all (neither saved, restored nor fingerprinted): the
verdict must still name it from the step lines. --noise adds a little noise
to every gradient from a generator seeded by os.urandom, as nondeterministic
GPU kernels (atomic adds) do: no two runs repeat, and anchor's determinism
control must say so, with the pilot.tolerance that holds it. --ignore-shape runs at its own
shape under anchor's memory probe, which anchor must refuse. The Pilot is given
evaluate=: the helper runs it in every save and right after the restore, and
anchor compares the two losses. --unsaved-buffer scales the logits in eval mode
by a buffer training updates but registered persistent=False, so no checkpoint
holds it: the state digests agree and the evaluation after the restore does
not, which anchor must name. --no-pilot runs the same loop
without anchor_pilot, saving model, optimizer and scheduler with torch.save
after step S (--save-to) or starting from such a file (--load-from): the peer
of bench/program_overhead.py. Both modes print the seconds of steps 2..N.
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--forget", choices=["optimizer", "scheduler", "rng", "data"], action="append", default=[])
p.add_argument("--leave-out", choices=["scheduler", "data"], action="append", default=[])
p.add_argument("--noise", action="store_true", help="gradients with run-to-run noise (nondeterministic kernels)")
p.add_argument("--steps", type=int, default=10, help="standalone / --no-pilot: steps to run")
p.add_argument("--n-embd", type=int, default=64)
p.add_argument("--n-layer", type=int, default=2)
p.add_argument("--seq-len", type=int, default=32)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--device", default="cpu", help="where the model and its batches live (cpu, cuda)")
p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
               help="the forward's dtype: bf16 runs it under pilot.autocast(), which anchor checks against fp32")
p.add_argument("--unsaved-buffer", action="store_true",
               help="negative control: eval reads a buffer that training updates and no checkpoint holds")
p.add_argument("--ignore-shape", action="store_true",
               help="negative control: declare the shape (probe=True) but run at --batch/--seq-len regardless")
p.add_argument("--no-pilot", action="store_true")
p.add_argument("--deterministic", action="store_true", help="--no-pilot: the deterministic mode anchor_pilot.setup sets")
p.add_argument("--save-at", type=int, default=0)
p.add_argument("--save-to")
p.add_argument("--load-from")
args = p.parse_args()
torch.set_num_threads(args.threads)

if not args.no_pilot:
    import anchor_pilot as ap

    spec = ap.setup(seed=0, deterministic=True)  # first: seeds every RNG
    # The step's shape, for anchor's plan; under anchor's memory probe it returns the probe's.
    batch, seq_len = ap.shape(micro_batch=args.batch, seq_len=args.seq_len, n_layer=args.n_layer, n_embd=args.n_embd,
                              precision=args.precision)
    if args.ignore_shape:
        batch, seq_len = args.batch, args.seq_len
else:
    torch.manual_seed(0)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    batch, seq_len = args.batch, args.seq_len


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = (self.drop(att.softmax(dim=-1)) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, vocab=256, d=64, layers=2, heads=4, block=64, dropout=0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln, self.head, self.drop = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False), nn.Dropout(dropout)
        # --unsaved-buffer: an eval-time temperature that training steps move, outside the state_dict.
        self.register_buffer("temperature", torch.ones(()), persistent=False)

    def forward(self, idx, targets):
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        if args.unsaved_buffer:
            if self.training:
                self.temperature += 0.01
            else:
                logits = logits / self.temperature
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


class Windows(torch.utils.data.Dataset):
    """Windows of seq_len + 1 bytes of a corpus made from a fixed seed."""

    def __init__(self, seq_len, n_bytes=1 << 16, seed=1234):
        g = torch.Generator().manual_seed(seed)
        words = [bytes(torch.randint(97, 123, (int(n),), generator=g).tolist())
                 for n in torch.randint(2, 9, (512,), generator=g)]
        picks = torch.randint(0, len(words), (n_bytes // 4,), generator=g).tolist()
        self.data = torch.tensor(list(b" ".join(words[i] for i in picks)[:n_bytes]), dtype=torch.long)
        self.seq_len = seq_len

    def __len__(self):
        return (len(self.data) - 1) // self.seq_len

    def __getitem__(self, i):
        w = self.data[i * self.seq_len: (i + 1) * self.seq_len + 1]
        return w[:-1], w[1:]


class ResumableSampler(torch.utils.data.Sampler):
    """Shuffled per epoch from its own seed, resumable from (epoch, pos)."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0

    def __iter__(self):
        while True:
            perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
            while self.pos < self.n:
                self.pos += 1
                yield int(perm[self.pos - 1])
            self.epoch, self.pos = self.epoch + 1, 0

    def __len__(self):
        return 1 << 30

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s):
        self.epoch, self.pos = s["epoch"], s["pos"]


model = GPT(d=args.n_embd, layers=args.n_layer, heads=4, block=max(64, args.seq_len)).to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4) * (0.5 + 0.5 * math.cos(s / 50)))
sampler = ResumableSampler(len(Windows(seq_len)), seed=7)
# num_workers=0: the sampler's position is exactly the batches consumed (docs/program.md, "Limits").
loader = torch.utils.data.DataLoader(Windows(seq_len), batch_size=batch, sampler=sampler,
                                     generator=torch.Generator().manual_seed(0))
tokens = batch * seq_len
val = Windows(seq_len, n_bytes=1 << 12, seed=4321)  # held out: another corpus from the same words' rule


def evaluate():
    """The validation loss over the first 8 held-out windows (no dropout, no gradients)."""
    model.eval()
    with torch.no_grad():
        xs, ys = zip(*(val[i] for i in range(8)))
        return model(torch.stack(xs).to(args.device), torch.stack(ys).to(args.device)).item()


# --noise: its own generator, seeded from the OS, so that torch's global one is untouched.
noise = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1) if args.noise else None


def train_step(x, y, amp):
    with amp():  # the forward in the declared precision (pilot.autocast(): anchor checks it against fp32)
        loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if noise is not None:  # 1e-4 of each gradient's scale: a reduction summed in another order, amplified
        for q in model.parameters():
            if q.grad is not None:
                q.grad.add_(torch.randn(q.grad.shape, generator=noise).to(q.grad.device) *
                            (1e-4 * float(q.grad.abs().mean())))
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss, grad_norm


if args.no_pilot:
    if args.load_from:
        state = torch.load(args.load_from)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
    it = iter(loader)
    for step in range(1, args.steps + 1):
        x, y = (t.to(args.device) for t in next(it))
        loss, grad_norm = train_step(x, y, lambda: torch.autocast(args.device, dtype=torch.bfloat16,
                                                                  enabled=args.precision == "bf16"))
        loss.item()
        if step == 1:
            t1 = time.perf_counter()
        if step == args.save_at and args.save_to:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict()}, args.save_to)
            with open(args.save_to, "rb") as f:
                os.fsync(f.fileno())
    print("steps %d seconds %.6f" % (args.steps - 1, time.perf_counter() - t1))
    raise SystemExit(0)

run = os.path.abspath("run")
with ap.Pilot.from_env(model=model, optimizer=opt, scheduler=None if "scheduler" in args.leave_out else sched,
                       data=None if "data" in args.leave_out else sampler,
                       checkpoint_dir=os.path.join(run, "checkpoints"), save_at=[args.steps // 2], stop_at=args.steps,
                       events=os.path.join(run, "events.jsonl"), evaluate=evaluate) as pilot:
    start = pilot.restore(skip=args.forget)  # 0, or the step of the newest checkpoint that verifies
    it = iter(loader)  # after the restore: the sampler continues from its cursor
    pilot.memory("start")
    in_pilot = 0.0  # seconds inside the helper's per-step calls, steps 2..N (the benchmark's direct measure)
    for step in range(start + 1, pilot.stop_at + 1):
        x, y = (t.to(args.device) for t in next(it))
        c0 = time.perf_counter()
        pilot.data_ready()
        c1 = time.perf_counter()
        loss, grad_norm = train_step(x, y, pilot.autocast)
        loss, grad_norm = loss.item(), grad_norm.item()
        c2 = time.perf_counter()
        pilot.step(step, loss=loss, grad_norm=grad_norm, tokens=tokens, batch=x)
        c3 = time.perf_counter()
        saved = pilot.maybe_save(step)  # a save is timed by its own lines, not counted here
        c4 = time.perf_counter()
        if step == start + 1:
            t1 = c4
        else:
            in_pilot += (c1 - c0) + (c3 - c2) + (0.0 if saved else c4 - c3)
    pilot.memory("end")
    print("steps %d seconds %.6f in_pilot %.6f" % (pilot.stop_at - start - 1, time.perf_counter() - t1, in_pilot))
