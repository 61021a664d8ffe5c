"""examples/hf-gpt2/train.py (a transformers GPT2LMHeadModel in a plain loop)
runs standalone, resumes bitwise on a second run, and its negative control
(--forget optimizer) is caught naming the optimizer."""
import importlib.util
import os
import unittest

from tests import support

import anchor_pilot as ap

EXAMPLE = os.path.join(support.REPO, "examples", "hf-gpt2", "train.py")
HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
WHY_NOT = ("transformers is not importable by this Python: it is locked only in the torch 2.x "
           "environment (requirements/torch2.txt, scripts/torch2-python), not on the torch 1.13 line")
SAVE, STOP = 3, 6   # the example's standalone save_at and stop_at


@unittest.skipUnless(HAVE_TRANSFORMERS, WHY_NOT)
class HfExample(support.TempDirTest):
    def run_example(self, *args, what):
        proc = support.run_py([EXAMPLE] + list(args), timeout=180, HF_HUB_OFFLINE="1")
        self.assertOk(proc, what)
        return proc

    def test_resumes_bitwise_and_a_forgotten_optimizer_is_named(self):
        run = self.path("run")
        first, second, forgot = self.path("first.jsonl"), self.path("second.jsonl"), self.path("forgot.jsonl")
        self.run_example(run, first, what="the first run")
        self.assertEqual(os.listdir(os.path.join(run, "checkpoints")), ["step-%08d" % SAVE])
        a = ap.read_events(first)
        self.assertEqual([e["step"] for e in a if e["type"] == "step"], list(range(1, STOP + 1)))

        self.run_example(run, second, what="the second run")
        b = ap.read_events(second)
        restores = [e for e in b if e["type"] == "checkpoint" and e["op"] == "restore" and e["phase"] == "end"]
        self.assertEqual([e["step"] for e in restores], [SAVE])
        self.assertEqual([e["step"] for e in b if e["type"] == "step"], list(range(SAVE + 1, STOP + 1)))
        self.assertIsNone(ap.compare_events(a, b))
        cli = support.run_py(["-m", "anchor_pilot", "compare", first, second])
        self.assertEqual(cli.returncode, 0, cli.stdout + cli.stderr)
        self.assertIn("match", cli.stdout)

        # The negative control: same checkpoint, the optimizer left fresh.
        self.run_example("--forget", "optimizer", run, forgot, what="the --forget optimizer run")
        c = ap.read_events(forgot)
        m = ap.compare_events(a, c)
        self.assertIsNotNone(m, "forgetting the optimizer went unnoticed")
        self.assertEqual((m.kind, m.component, m.step), ("digest", "optimizer", SAVE), str(m))
        ref_loss = {e["step"]: e["loss"] for e in a if e["type"] == "step"}
        losses = {e["step"]: e["loss"] for e in c if e["type"] == "step"}
        self.assertTrue(any(losses[s] != ref_loss[s] for s in losses), "forgetting the optimizer changed no loss")
        cli = support.run_py(["-m", "anchor_pilot", "compare", first, forgot])
        self.assertEqual(cli.returncode, 3, cli.stdout + cli.stderr)
        self.assertIn("component 'optimizer' differs", cli.stdout + cli.stderr)


if __name__ == "__main__":
    unittest.main()
