"""3. anchor's own reader accepts what the helper writes (ANCHOR_BIN).

`anchor checkpoint verify` exits 0 on a checkpoint the helper saved and 3
after one byte of a safetensors file is flipped; `--json` and `list` agree.
CorruptionMatrix: every damage in CORRUPTIONS (an empty COMMITTED, a file
cut short, a manifest of another step, ...) is judged the same by anchor and
by the helper's own reader, which restores only what verifies.
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


def _set(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def _edit_json(name, change):
    """A mutation that edits a JSON file of the step and re-makes the manifest and COMMITTED to match."""
    def mutate(d):
        path = os.path.join(d, name)
        with open(path) as f:
            doc = json.load(f)
        change(doc)
        with open(path, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        if name != "manifest.json":
            _rewrite_manifest(d)
        else:
            import hashlib
            with open(path, "rb") as f:
                _set(d, "COMMITTED", (hashlib.sha256(f.read()).hexdigest() + "\n").encode())
    return mutate


def _truncate(name, keep):
    def mutate(d):
        path = os.path.join(d, name)
        with open(path, "r+b") as f:
            f.truncate(keep if keep >= 0 else os.path.getsize(path) + keep)
    return mutate


# Every way a step directory can be damaged that the tests know, and whether it must still verify.
# Both readers (anchor checkpoint verify, the helper's verify_step) must give the same answer for each.
CORRUPTIONS = [
    ("untouched", lambda d: None, True),
    ("COMMITTED empty", lambda d: _set(d, "COMMITTED", b""), False),
    ("COMMITTED missing", lambda d: os.remove(os.path.join(d, "COMMITTED")), False),
    ("COMMITTED another hash", lambda d: _set(d, "COMMITTED", b"0" * 64 + b"\n"), False),
    ("COMMITTED without its newline", lambda d: _set(d, "COMMITTED", open(os.path.join(d, "COMMITTED"), "rb")
                                                     .read().strip()), False),
    ("COMMITTED in upper case", lambda d: _set(d, "COMMITTED", open(os.path.join(d, "COMMITTED"), "rb")
                                               .read().upper()), False),
    ("COMMITTED with more after it", lambda d: _set(d, "COMMITTED", open(os.path.join(d, "COMMITTED"), "rb")
                                                    .read() + b"x\n"), False),
    ("manifest.json missing", lambda d: os.remove(os.path.join(d, "manifest.json")), False),
    ("manifest.json not JSON", lambda d: _set(d, "manifest.json", b"{not json"), False),
    ("a listed file missing", lambda d: os.remove(os.path.join(d, "scheduler.safetensors")), False),
    ("a file nobody listed", lambda d: _set(d, "extra.bin", b"x"), False),
    ("a file cut short", _truncate("model.safetensors", -5), False),
    ("a file emptied", _truncate("optimizer.safetensors", 0), False),
    ("a data byte flipped", lambda d: flip(os.path.join(d, "model.safetensors"),
                                           os.path.getsize(os.path.join(d, "model.safetensors")) - 3), False),
    ("state.json of another step", _edit_json("state.json", lambda s: s.update(step=s["step"] + 1)), False),
    ("manifest of another format", _edit_json("manifest.json", lambda m: m.update(format="other/v1")), False),
    ("manifest of another step", _edit_json("manifest.json", lambda m: m.update(step=m["step"] + 1)), False),
    ("manifest without state.json", _edit_json("manifest.json", lambda m: m.update(
        files=[f for f in m["files"] if f["path"] != "state.json"])), False),
    ("manifest with a path in a subdirectory", _edit_json("manifest.json", lambda m: m["files"].append(
        {"path": "sub/x", "size": 0, "sha256": "0" * 64})), False),
    ("manifest listing a file twice", _edit_json("manifest.json", lambda m: m["files"].append(m["files"][0])),
     False),
    ("manifest with a negative size", _edit_json("manifest.json", lambda m: m["files"][0].update(size=-1)), False),
]


@unittest.skipUnless(BIN, "ANCHOR_BIN is unset: set it to the anchor binary (ctest sets $<TARGET_FILE:anchor>)")
class CorruptionMatrix(support.TempDirTest):
    def test_both_readers_agree_on_every_corruption(self):
        import shutil
        _, good = save_two_steps(self.path("ck"))
        for name, mutate, verifies in CORRUPTIONS:
            with self.subTest(corruption=name):
                d = self.path("m", "step-00000004")
                shutil.rmtree(self.path("m"), ignore_errors=True)
                shutil.copytree(good, d)
                mutate(d)
                p = anchor("checkpoint", "verify", d)
                self.assertEqual(p.returncode, 0 if verifies else 3, p.stdout + p.stderr)
                v, problems = ap.verify_step(d)
                self.assertEqual(v is not None, verifies, problems)
