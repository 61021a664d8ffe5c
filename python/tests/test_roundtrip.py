"""1. Round trip: save in this process, restore in a fresh one, every digest equal."""
import json
import os
import sys

import torch

from tests import support

sys.path.insert(0, os.path.join(support.HERE, "programs"))
import roundtrip  # noqa: E402

import anchor_pilot as ap  # noqa: E402

SCRIPT = os.path.join(support.HERE, "programs", "roundtrip.py")


class RoundTrip(support.TempDirTest):
    def save(self):
        model, opt, sched, scaler, data = roundtrip.build()
        roundtrip.train(model, opt, sched, scaler, data)
        self.scaler_state = scaler.state_dict()
        pilot = ap.Pilot(self.path("ck"), model=model, optimizer=opt, scheduler=sched, scaler=scaler, data=data,
                         events=self.path("events.jsonl"))
        d = pilot.save(3)
        saved = pilot.last_digests
        after = roundtrip.draws()
        pilot.close()
        return d, saved, after

    def test_fresh_process_restores_every_component_bitwise(self):
        d, saved, after = self.save()
        self.assertEqual(os.path.basename(d), "step-00000003")
        self.assertEqual(sorted(saved), ["data", "model", "optimizer", "rng", "scaler", "scheduler"])
        # One fresh process: first a control that leaves the model unrestored, then the real restore.
        p = support.run_py([SCRIPT, self.path("ck"), "skip=model", "full"])
        self.assertOk(p)
        control, out = [json.loads(l) for l in p.stdout.strip().splitlines()[-2:]]
        self.assertEqual((control["mode"], out["mode"]), ("skip=model", "full"))
        self.assertNotEqual(control["digests"]["model"], saved["model"])
        for c in ("optimizer", "scheduler", "scaler", "rng", "data"):
            self.assertEqual(control["digests"][c], saved[c], c)

        self.assertEqual(out["step"], 3)
        self.assertEqual(out["digests"], saved)
        # The RNG streams continue where the saver's did.
        self.assertEqual(out["draws"], after)
        self.assertEqual(out["betas_type"], "tuple")
        self.assertTrue(out["nan_restored"])
        self.assertEqual(out["scaler"], self.scaler_state)
        # NumPy (imported by roundtrip.py) is in the RNG file, and its stream continued too.
        self.assertIsNotNone(after[2])
        from anchor_pilot import safetensors as st
        with open(os.path.join(d, "rng.safetensors"), "rb") as f:
            meta, _ = st.parse(f.read(), "rng.safetensors")
        self.assertEqual(sorted(json.loads(meta["anchor_pilot.structure"])),
                         sorted(["torch", "python", "numpy"] + (["cuda"] if torch.cuda.is_available() else [])))
        # The digests are those of the files in the manifest.
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = json.load(f)
        files = {f["path"]: f["sha256"] for f in manifest["files"]}
        for c, h in saved.items():
            self.assertEqual(files[c + ".safetensors"], h, c)

    def test_every_dtype_round_trips_in_process(self):
        from anchor_pilot import safetensors as st
        from anchor_pilot import tensors as tt
        tensors = {}
        for dt in tt.DTYPES:
            t = (torch.arange(-4, 8) * 3).to(dt).reshape(3, 4)
            tensors[str(dt)] = t
        tensors["empty"] = torch.zeros(0, 3)
        tensors["scalar"] = torch.tensor(1.25, dtype=torch.float64)
        tensors["strided"] = torch.arange(12.0).reshape(3, 4).t()
        prefix, chunks = tt.serialize(tensors, {"k": "v"})
        data = prefix + b"".join(chunks)
        self.assertEqual(len(prefix) % 8, 0)
        meta, parsed = st.parse(data, "x.safetensors")
        self.assertEqual(meta, {"k": "v"})
        for name, t in tensors.items():
            dt, shape, buf = parsed[name]
            back = tt.to_tensor(dt, shape, buf)
            self.assertEqual(back.dtype, t.dtype, name)
            self.assertEqual(list(back.shape), list(t.shape), name)
            self.assertTrue(torch.equal(back, t), name)
        with self.assertRaises(ap.CheckpointError) as cm:
            tt.serialize({"c": torch.zeros(2, dtype=torch.complex64)})
        self.assertIn("dtype torch.complex64 has no safetensors name anchor reads", str(cm.exception))
