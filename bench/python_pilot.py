#!/usr/bin/python3
"""A hand-written PyTorch pilot, the baseline `anchor pilot` is measured against
(issue 3, "Benchmark"; bench/bench_pilot.sh runs both side by side).

It does what `anchor pilot` does, the way a careful engineer would write it in
plain PyTorch (python3-torch 1.13 at /usr/bin/python3, or torch 2.x: scripts/torch2-python):

  parent (this script, no --role; never imports torch)
    -> worker A (fresh process, --role reference): load, train K steps, eval,
       torch.save a checkpoint (model, optimizer state_dict, RNG state, step)
       + fsync + rename, R more steps as the reference, then begin a second
       save and print KILL_WINDOW
    -> the parent SIGKILLs A on that line (no sleeps); the torn .tmp file stays
    -> worker B (fresh process, --role resume): torch.load the newest complete
       checkpoint, restore, eval (must equal A's eval), resume R steps
    -> the parent compares losses, grad norms, eval and a SHA-256 digest of
       every parameter, optimizer and RNG tensor (bitwise on CPU).

Same model as src/model/gpt.cpp (pre-LN GPT, tanh GELU, causal attention as
model.attention says: scaled_dot_product_attention on torch 2.x under auto, or
written out with a float -inf mask; tied head, same init), same byte-level data
and windowing as src/data/dataset.cpp, the same splitmix64 permutation sampler
and SHA-256 seed derivation (so the losses match anchor's), torch.optim.AdamW
(decay only on >= 2-D parameters), clip_grad_norm_, warmup + cosine LR from the
step, gradient accumulation, the config's thread count.

Usage:
  /usr/bin/python3 bench/python_pilot.py [configs/pilot.yaml] --run-dir DIR [--json]
  scripts/torch2-python bench/python_pilot.py ...    (torch 2.x, the wheel the torch2 build links)
Writes DIR/work/{reference,resume}.json and DIR/summary.json; exit 0 when the
resume matches, 3 when it does not, 1 on any other failure.
"""
import argparse
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time

T_PROCESS = time.perf_counter()  # as early as we can: the interpreter is already up

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(HERE, "..", "configs", "pilot.yaml")
MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- config ----

DEFAULTS = {
    "run": {"seed": 1234, "deterministic": True, "threads": 1},
    "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, "block_size": 64,
              "dropout": 0.1, "bias": True, "attention": "auto"},
    "data": {"format": "text", "train": [], "val": [], "seq_len": 64},
    "train": {"micro_batch": 4, "grad_accum": 1, "total_steps": 0,
              "optimizer": {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                            "weight_decay": 0.1, "grad_clip": 1.0},
              "schedule": {"kind": "cosine", "warmup_steps": 100, "min_lr_ratio": 0.1}},
    "pilot": {"steps_before_save": 2, "steps_after_resume": 2, "eval_batches": 2},
}


def merge(defaults, doc):
    out = dict(defaults)
    for k, v in (doc or {}).items():
        out[k] = merge(defaults[k], v) if isinstance(defaults.get(k), dict) and isinstance(v, dict) else v
    return out


def load_config(path):
    import yaml  # python3-yaml; present next to python3-torch on Debian

    with open(path) as f:
        cfg = merge(DEFAULTS, yaml.safe_load(f))
    base = os.path.dirname(os.path.abspath(path))
    for split in ("train", "val"):
        cfg["data"][split] = [os.path.normpath(os.path.join(base, p)) for p in cfg["data"][split]]
    if cfg["data"]["format"] != "text":
        raise SystemExit("python_pilot.py: only data.format text is implemented")
    if not cfg["data"]["val"]:
        raise SystemExit("python_pilot.py: give data.val files (val_fraction is not implemented)")
    if cfg["train"]["total_steps"] <= 0:
        raise SystemExit("python_pilot.py: give train.total_steps")
    return cfg


def derive_seed(root, purpose):
    """As anchor::config::derive_seed: the first 8 bytes (LE) of SHA-256(root LE64 || purpose)."""
    d = hashlib.sha256((root & MASK64).to_bytes(8, "little") + purpose.encode()).digest()
    return int.from_bytes(d[:8], "little")


def lr_at(cfg, step):
    t = cfg["train"]
    base, s = t["optimizer"]["lr"], t["schedule"]
    if s["warmup_steps"] > 0 and step < s["warmup_steps"]:
        return base * (step + 1) / s["warmup_steps"]
    if s["kind"] == "constant":
        return base
    min_lr = base * s["min_lr_ratio"]
    span = max(1, t["total_steps"] - s["warmup_steps"])
    progress = min(max((step - s["warmup_steps"]) / span, 0.0), 1.0)
    return min_lr + 0.5 * (base - min_lr) * (1.0 + math.cos(math.pi * progress))


# ------------------------------------------------------------------ data ----

class Sampler:
    """A seeded permutation per epoch (Fisher-Yates with splitmix64), batches a
    pure function of the step: the cursor is just the step."""

    def __init__(self, seed, n):
        self.seed, self.n, self.epoch, self.perm = seed, n, None, None

    def window(self, g):
        epoch = g // self.n
        if epoch != self.epoch:
            perm = list(range(self.n))
            state = (self.seed ^ ((0x5851F42D4C957F2D * (epoch + 1)) & MASK64)) & MASK64
            for i in range(self.n - 1, 0, -1):
                state = (state + 0x9E3779B97F4A7C15) & MASK64
                z = state
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
                z ^= z >> 31
                j = z % (i + 1)
                perm[i], perm[j] = perm[j], perm[i]
            self.epoch, self.perm = epoch, perm
        return self.perm[g % self.n]


class ByteData:
    def __init__(self, torch, files, seq_len):
        # One token per byte; windows start every seq_len tokens and never cross files.
        self.tokens, self.starts, self.seq_len = [], [], seq_len
        for f in files:
            with open(f, "rb") as fh:
                t = torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8).long()
            self.starts += [(len(self.tokens), o) for o in range(0, t.numel() - seq_len, seq_len)]
            self.tokens.append(t)

    def __len__(self):
        return len(self.starts)

    def batch(self, torch, windows):
        rows = []
        for w in windows:
            f, o = self.starts[w]
            rows.append(self.tokens[f][o:o + self.seq_len + 1])
        b = torch.stack(rows)
        return b[:, :-1], b[:, 1:]


# ----------------------------------------------------------------- model ----

def build_model(torch, m, ckpt_every=0):
    """The built-in GPT; ckpt_every N > 0 recomputes blocks N, 2N, ... in backward
    (torch.utils.checkpoint, non-reentrant), as train.activation_checkpointing does."""
    nn, F = torch.nn, torch.nn.functional
    if ckpt_every > 0:
        import torch.utils.checkpoint  # noqa: F401  (not imported by `import torch` on 1.13)
    # model.attention as anchor resolves it: auto is scaled_dot_product_attention where torch has it (2.x).
    sdpa = m["attention"] == "sdpa" or (m["attention"] == "auto" and hasattr(F, "scaled_dot_product_attention"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = m["n_embd"]
            self.n_head = m["n_head"]
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = nn.Module()
            self.attn.c_attn = nn.Linear(C, 3 * C, bias=m["bias"])
            self.attn.c_proj = nn.Linear(C, C, bias=m["bias"])
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp = nn.Module()
            self.mlp.c_fc = nn.Linear(C, 4 * C, bias=m["bias"])
            self.mlp.c_proj = nn.Linear(4 * C, C, bias=m["bias"])
            self.attn_drop = nn.Dropout(m["dropout"])
            self.resid_drop = nn.Dropout(m["dropout"])

        def attention(self, x):
            B, T, C = x.shape
            hd = C // self.n_head
            q, k, v = self.attn.c_attn(x).split(C, dim=2)
            q = q.view(B, T, self.n_head, hd).transpose(1, 2)
            k = k.view(B, T, self.n_head, hd).transpose(1, 2)
            v = v.view(B, T, self.n_head, hd).transpose(1, 2)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0,
                                                   is_causal=True)
            else:
                att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
                att = att.masked_fill(mask, float("-inf"))
                att = self.attn_drop(torch.softmax(att, -1))
                y = torch.matmul(att, v)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_drop(self.attn.c_proj(y))

        def forward(self, x):
            h = x + self.attention(self.ln_1(x))
            return h + self.resid_drop(self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(h)), approximate="tanh")))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(m["vocab_size"], m["n_embd"])
            self.wpe = nn.Embedding(m["block_size"], m["n_embd"])
            self.drop = nn.Dropout(m["dropout"])
            self.h = nn.ModuleList([Block() for _ in range(m["n_layer"])])
            self.ln_f = nn.LayerNorm(m["n_embd"], eps=1e-5)
            resid_std = 0.02 / math.sqrt(2.0 * m["n_layer"])
            with torch.no_grad():
                for n, p in self.named_parameters():
                    if "ln_" in n:
                        p.fill_(1.0) if n.endswith("weight") else p.zero_()
                    elif n.endswith("bias"):
                        p.zero_()
                    elif "c_proj.weight" in n:
                        p.normal_(0.0, resid_std)
                    else:
                        p.normal_(0.0, 0.02)

        def forward(self, idx, targets):
            T = idx.size(1)
            pos = torch.arange(T, dtype=torch.long, device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for i, b in enumerate(self.h):
                if ckpt_every > 0 and (i + 1) % ckpt_every == 0:
                    x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
                else:
                    x = b(x)
            logits = torch.matmul(self.ln_f(x), self.wte.weight.t())  # tied head
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return GPT()


# ---------------------------------------------------------------- worker ----

def bind_blas_threads(n):
    """OpenBLAS's own thread pool to n threads, as anchor's workers bind every
    pool to run.threads (src/common/threads.cpp, bind_blas). torch.set_num_threads
    sets OpenMP's pool (and MKL's), not OpenBLAS's pthreads pool, which Debian's
    LibTorch does its matrix products on; left at the machine's core count, it
    splits some products differently, and on some CPUs (an AMD EPYC with 2 cores)
    the sums differ in the last bits from the same product on one thread. With
    every pool at the same count, the same LibTorch runs the same operations the
    same way in both pilots, so on one CPU their losses are bitwise equal, and on
    any CPU within 1e-6 (ctest bench.pilot_tiny; docs/benchmarks.md, "Anchor and
    the peer train alike"). Returns what it bound: "openblas",
    or None where no OpenBLAS is loaded (PyPI's torch: MKL, bound by set_num_threads)."""
    import ctypes
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths = {line.split()[5] for line in maps if len(line.split()) >= 6}
    for path in sorted(paths):
        if os.path.basename(path).startswith("libopenblas"):
            lib = ctypes.CDLL(path)  # already loaded: the same library, not a second copy
            if hasattr(lib, "openblas_set_num_threads"):
                lib.openblas_set_num_threads(ctypes.c_int(n))
                return "openblas"
    return None


class Trainer:
    def __init__(self, torch, cfg):
        self.torch, self.cfg = torch, cfg
        torch.set_num_threads(cfg["run"]["threads"])
        self.blas_bound = bind_blas_threads(cfg["run"]["threads"])
        torch.use_deterministic_algorithms(bool(cfg["run"]["deterministic"]))
        d = cfg["data"]
        self.train_data = ByteData(torch, d["train"], d["seq_len"])
        self.val_data = ByteData(torch, d["val"], d["seq_len"])
        self.sampler = Sampler(derive_seed(cfg["run"]["seed"], "data"), len(self.train_data))
        torch.manual_seed(derive_seed(cfg["run"]["seed"], "init"))
        self.model = build_model(torch, cfg["model"])
        self.model.train()
        o = cfg["train"]["optimizer"]
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
        torch.manual_seed(derive_seed(cfg["run"]["seed"], "dropout"))
        self.step = 0

    def train_step(self):
        torch, t = self.torch, self.cfg["train"]
        mb, accum = t["micro_batch"], t["grad_accum"]
        rec = {"step": self.step, "data_wait_s": 0.0, "compute_s": 0.0, "tokens": 0}
        self.opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(accum):
            t0 = time.perf_counter()
            base = self.step * mb * accum + micro * mb
            x, y = self.train_data.batch(torch, [self.sampler.window(base + b) for b in range(mb)])
            rec["data_wait_s"] += time.perf_counter() - t0
            t1 = time.perf_counter()
            loss = self.model(x, y) / accum
            loss.backward()
            loss_sum += loss.item()
            rec["compute_s"] += time.perf_counter() - t1
            rec["tokens"] += x.numel()
        t2 = time.perf_counter()
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t["optimizer"]["grad_clip"])
        lr = lr_at(self.cfg, self.step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        rec["compute_s"] += time.perf_counter() - t2
        rec.update(loss=loss_sum, grad_norm=gn.item(), lr=lr)
        self.step += 1
        return rec

    def evaluate(self, batches):
        torch, mb = self.torch, self.cfg["train"]["micro_batch"]
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(batches):
                x, y = self.val_data.batch(torch, [(i * mb + b) % len(self.val_data) for b in range(mb)])
                total += self.model(x, y).item()
        self.model.train()
        return total / batches

    def checkpoint(self):
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                "rng": self.torch.get_rng_state(), "step": self.step}

    def restore(self, ck):
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        self.torch.set_rng_state(ck["rng"])
        self.step = ck["step"]

    def digest(self):
        """SHA-256 over every parameter, optimizer and RNG tensor, as anchor's state_digest."""
        hs = {"model": hashlib.sha256(), "optimizer": hashlib.sha256(), "rng": hashlib.sha256()}
        for n, p in self.model.named_parameters():
            hs["model"].update(n.encode() + p.detach().contiguous().numpy().tobytes())
        for i, st in sorted(self.opt.state_dict()["state"].items()):
            for k in sorted(st):
                v = st[k]
                b = v.detach().contiguous().numpy().tobytes() if self.torch.is_tensor(v) else repr(v).encode()
                hs["optimizer"].update(f"{i}.{k}".encode() + b)
        hs["rng"].update(self.torch.get_rng_state().numpy().tobytes())
        out = {k: h.hexdigest() for k, h in hs.items()}
        out["step"] = self.step
        return out


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Stages:
    def __init__(self):
        self.list = []

    def run(self, name, fn):
        t = time.perf_counter()
        r = fn()
        self.list.append({"stage": name, "seconds": time.perf_counter() - t})
        return r


def worker(args):
    st = Stages()
    t = time.perf_counter()
    # MKL's conditional numerical reproducibility, as anchor's workers ask for
    # it (threads::request_reproducible_blas): MKL reads MKL_CBWR at its first
    # call, and without it may sum a product in another order on another path.
    # A user's setting stands. No effect on OpenBLAS (Debian's LibTorch).
    os.environ.setdefault("MKL_CBWR", "AUTO")
    import torch  # the workers' real start-up cost; the parent never pays it
    st.list.append({"stage": "import_torch", "seconds": time.perf_counter() - t})
    cfg = load_config(args.config)
    p = cfg["pilot"]
    ckdir = os.path.join(args.run_dir, "checkpoints")
    os.makedirs(ckdir, exist_ok=True)
    out = {"role": args.role, "pid": os.getpid(), "stages": st.list}

    if args.role == "reference":
        tr = st.run("load", lambda: Trainer(torch, cfg))
        out["train_steps"] = st.run("train", lambda: [tr.train_step() for _ in range(p["steps_before_save"])])
        out["eval_loss"] = st.run("eval", lambda: tr.evaluate(p["eval_batches"]))
        out["saved_state"] = tr.digest()

        def save():
            final = os.path.join(ckdir, "step-%08d.pt" % tr.step)
            tmp = final + ".tmp-%d" % os.getpid()
            with open(tmp, "wb") as f:
                torch.save(tr.checkpoint(), f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, final)
            fsync_dir(ckdir)
            return final

        out["saved"] = st.run("checkpoint_save", save)
        out["reference_steps"] = st.run("reference", lambda: [tr.train_step() for _ in range(p["steps_after_resume"])])
        out["final_state"] = tr.digest()
        out["peak_rss_bytes"] = peak_rss_bytes()
        write_json(os.path.join(args.run_dir, "work", "reference.json"), out)
        # The second save: the parent SIGKILLs us once the temp file is written.
        tmp = os.path.join(ckdir, "step-%08d.pt.tmp-%d" % (tr.step, os.getpid()))
        with open(tmp, "wb") as f:
            torch.save(tr.checkpoint(), f)
            f.flush()
            print("KILL_WINDOW " + tmp, flush=True)
            while True:
                signal.pause()

    tr = None

    def restore():
        nonlocal tr
        tr = Trainer(torch, cfg)
        done = sorted(n for n in os.listdir(ckdir) if n.startswith("step-") and n.endswith(".pt"))
        if not done:
            raise SystemExit("python_pilot.py: no complete checkpoint in " + ckdir)
        path = os.path.join(ckdir, done[-1])
        tr.restore(torch.load(path))
        out["restored"] = path
        out["skipped"] = sorted(n for n in os.listdir(ckdir) if ".tmp-" in n)

    st.run("restore", restore)
    out["restored_state"] = tr.digest()
    out["eval_loss"] = st.run("eval_after_restore", lambda: tr.evaluate(p["eval_batches"]))
    out["resume_steps"] = st.run("resume", lambda: [tr.train_step() for _ in range(p["steps_after_resume"])])
    out["final_state"] = tr.digest()
    out["peak_rss_bytes"] = peak_rss_bytes()
    write_json(os.path.join(args.run_dir, "work", "resume.json"), out)
    return 0


# ---------------------------------------------------------------- parent ----

def run_worker_process(args, role):
    """Starts a fresh worker; for the reference, SIGKILLs it on its KILL_WINDOW line."""
    t = time.perf_counter()
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), args.config, "--run-dir", args.run_dir,
                              "--role", role], stdout=subprocess.PIPE, text=True)
    killed = False
    for line in child.stdout:
        if line.startswith("KILL_WINDOW") and role == "reference":
            os.kill(child.pid, signal.SIGKILL)
            killed = True
        else:
            sys.stderr.write(line)
    child.stdout.close()
    _, status, ru = os.wait4(child.pid, 0)
    child.returncode = status
    return {"wall_s": time.perf_counter() - t, "killed": killed,
            "signaled": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
            "exit": os.waitstatus_to_exitcode(status), "peak_rss_bytes": ru.ru_maxrss * 1024}


def parent(args):
    t0 = time.perf_counter()
    os.makedirs(os.path.join(args.run_dir, "work"), exist_ok=True)
    a = run_worker_process(args, "reference")
    if not (a["killed"] and a["signaled"]):
        print("python pilot: worker A was not killed in its kill window (exit %d)" % a["exit"], file=sys.stderr)
        return 1
    b = run_worker_process(args, "resume")
    if b["exit"] != 0:
        print("python pilot: worker B failed (exit %d)" % b["exit"], file=sys.stderr)
        return 1
    ref = json.load(open(os.path.join(args.run_dir, "work", "reference.json")))
    res = json.load(open(os.path.join(args.run_dir, "work", "resume.json")))
    strip = lambda steps: [(s["step"], s["loss"], s["grad_norm"], s["lr"]) for s in steps]
    checks = {
        "losses_and_grad_norms": strip(ref["reference_steps"]) == strip(res["resume_steps"]),
        "eval_after_restore": ref["eval_loss"] == res["eval_loss"],
        "restored_state": ref["saved_state"] == res["restored_state"],
        "final_state": ref["final_state"] == res["final_state"],
        "torn_checkpoint_skipped": len(res["skipped"]) == 1,
    }
    match = all(checks.values())
    wall = time.perf_counter() - t0
    k = ref["train_steps"][-1]
    summary = {
        "verdict": "match" if match else "mismatch", "checks": checks, "wall_s": wall,
        "parent_startup_s": t0 - T_PROCESS,
        "step": {"step": k["step"], "seconds": k["compute_s"] + k["data_wait_s"],
                 "compute_s": k["compute_s"], "data_wait_s": k["data_wait_s"]},
        "workers": {"reference": a, "resume": b},
        "stages": {"reference": ref["stages"], "resume": res["stages"]},
        "losses": {"train": [s["loss"] for s in ref["train_steps"]],
                   "reference": [s["loss"] for s in ref["reference_steps"]],
                   "resume": [s["loss"] for s in res["resume_steps"]]},
        "eval_loss": ref["eval_loss"],
    }
    write_json(os.path.join(args.run_dir, "summary.json"), summary)
    if args.json:
        print(json.dumps(summary))
    else:
        print("  %-22s %9s" % ("stage", "time"))
        for role, w in (("reference", a), ("resume", b)):
            print("  worker %-15s %8.3f s   (process, start to reap; peak RSS %.1f MiB)"
                  % (role, w["wall_s"], w["peak_rss_bytes"] / 2**20))
            for s in summary["stages"][role]:
                print("    %-20s %8.3f s" % (s["stage"], s["seconds"]))
        print("  train step %d: %.4f s;  losses: train %s, reference %s, resume %s"
              % (k["step"], summary["step"]["seconds"], summary["losses"]["train"],
                 summary["losses"]["reference"], summary["losses"]["resume"]))
        print("  whole pilot %.3f s; resume %s %s" % (wall, summary["verdict"], checks))
    return 0 if match else 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", default=DEFAULT_CONFIG)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--role", choices=["reference", "resume"])
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = ap.parse_args()
    args.run_dir = os.path.abspath(args.run_dir)
    return worker(args) if args.role else parent(args)


if __name__ == "__main__":
    sys.exit(main())
