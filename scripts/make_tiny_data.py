#!/usr/bin/env python3
"""Builds data/tiny/{train,val}.txt: the embedded default's small text corpus.

Deterministic (fixed seed, Python's own Mersenne Twister, no third-party
packages), so anyone can rebuild it byte for byte and its SHA-256 in the
manifest stays meaningful. The text is synthetic English about training runs:
enough structure for a byte-level model's loss to fall within a few steps.
"""
import random
import sys
from pathlib import Path

SUBJECTS = ["the pilot", "the checkpoint", "a worker", "the optimizer", "the supervisor",
            "each rank", "the report", "the scheduler", "the data loader", "the model"]
VERBS = ["saves", "restores", "verifies", "measures", "records", "signs", "resumes",
         "compares", "pins", "loads"]
OBJECTS = ["the state", "every tensor", "the manifest", "the learning rate", "a digest",
           "the random seed", "the gradients", "the step count", "the shard", "the loss"]
TAILS = ["before the long run", "after a kill", "in a fresh process", "on one node",
         "with fsync", "bit for bit", "at every step", "without a hidden cursor",
         "under a signal", "for the audit"]


def sentence(rng: random.Random) -> str:
    s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}"
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"])


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))


def build(seed: int, size: int) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        p = paragraph(rng) + "\n\n"
        out.append(p)
        n += len(p)
    return "".join(out)[:size]


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "data" / "tiny"
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_text(build(20240520, 96 * 1024), encoding="ascii")
    (root / "val.txt").write_text(build(20240521, 12 * 1024), encoding="ascii")
    return 0


if __name__ == "__main__":
    sys.exit(main())
