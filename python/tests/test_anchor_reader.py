"""3. anchor's own reader accepts what the helper writes (ANCHOR_BIN).

`anchor checkpoint verify` exits 0 on a checkpoint the helper saved and 3
after one byte of a safetensors file is flipped; `--json` and `list` agree.
"""
import json
import os
import subprocess
import unittest

import torch

from tests import support

import anchor_pilot as ap

BIN = os.environ.get("ANCHOR_BIN")


def anchor(*args):
    return subprocess.run([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)


def save_two_steps(root):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    model[2].to(torch.bfloat16)
    opt = torch.optim.AdamW(model[:2].parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    pilot = ap.Pilot(root, model=model, optimizer=opt, scheduler=sched,
                     data=(lambda: {"pos": 3}, lambda s: None))
    dirs = []
    for step in (2, 4):
        loss = model[:2](torch.randn(4, 5)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        dirs.append(pilot.save(step))
    pilot.close()
    return dirs


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


@unittest.skipUnless(BIN, "ANCHOR_BIN is unset: set it to the anchor binary (ctest sets $<TARGET_FILE:anchor>)")
class AnchorReader(support.TempDirTest):
    def test_verify_accepts_and_rejects_a_flipped_byte(self):
        self.assertTrue(os.access(BIN, os.X_OK), "ANCHOR_BIN=%s is not an executable" % BIN)
        d2, d4 = save_two_steps(self.path("ck"))
        for d in (d2, d4):
            p = anchor("checkpoint", "verify", d)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn(": ok (step ", p.stdout)
        p = anchor("checkpoint", "verify", "--json", d4)
        self.assertEqual(p.returncode, 0, p.stderr)
        v = json.loads(p.stdout)
        self.assertEqual((v["ok"], v["state"], v["step"], v["problems"]), (True, "committed", 4, []))
        p = anchor("checkpoint", "list", "--json", self.path("ck"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([(e["step"], e["state"]) for e in json.loads(p.stdout)], [(4, "committed"), (2, "committed")])
        p = anchor("checkpoint", "list", self.path("ck"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\n4 +committed\* ")

        # One flipped byte in the tensor data of model.safetensors: exit 3 naming the file.
        model = os.path.join(d4, "model.safetensors")
        flip(model, os.path.getsize(model) - 3)
        p = anchor("checkpoint", "verify", d4)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("model.safetensors: SHA-256 is", p.stdout)
        p = anchor("checkpoint", "verify", "--json", d4)
        self.assertEqual(p.returncode, 3)
        v = json.loads(p.stdout)
        self.assertEqual((v["ok"], v["state"]), (False, "invalid"))
        p = anchor("checkpoint", "list", "--json", self.path("ck"))
        self.assertEqual([(e["step"], e["state"]) for e in json.loads(p.stdout)], [(4, "invalid"), (2, "committed")])
        # The helper agrees: its restore falls back to step 2, naming the file.
        v, skipped = ap.store.newest(self.path("ck"))
        self.assertEqual(v.step, 2)
        self.assertEqual(skipped[0][0], d4)
        self.assertTrue(any(p.startswith("model.safetensors: SHA-256 is") for p in skipped[0][1]), skipped)

    def test_header_flip_is_rejected_by_both_readers(self):
        """A flipped header byte with the manifest re-made to match: only the strict
        safetensors rules can catch it, in anchor and in the helper alike."""
        _, d4 = save_two_steps(self.path("ck"))
        opt = os.path.join(d4, "optimizer.safetensors")
        with open(opt, "rb") as f:
            data = bytearray(f.read())
        i = data.index(b'"shape":[') + len(b'"shape":[')
        data[i:i + 1] = b"9"  # the first dimension of the first tensor becomes 9...
        with open(opt, "wb") as f:
            f.write(bytes(data))
        _rewrite_manifest(d4)
        p = anchor("checkpoint", "verify", d4)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("optimizer.safetensors", p.stdout)
        v, problems = ap.verify_step(d4)
        self.assertIsNone(v)
        self.assertTrue(any("optimizer.safetensors" in x and "shape/byte-length mismatch" in x for x in problems),
                        problems)


def _rewrite_manifest(d):
    import hashlib
    path = os.path.join(d, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    for e in m["files"]:
        with open(os.path.join(d, e["path"]), "rb") as f:
            blob = f.read()
        e["size"], e["sha256"] = len(blob), hashlib.sha256(blob).hexdigest()
    text = (json.dumps(m, indent=2, sort_keys=True) + "\n").encode()
    with open(path, "wb") as f:
        f.write(text)
    with open(os.path.join(d, "COMMITTED"), "w") as f:
        f.write(hashlib.sha256(text).hexdigest() + "\n")
