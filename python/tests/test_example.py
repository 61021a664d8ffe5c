"""The example of docs/program.md (examples/minimal/train.py) runs standalone,
resumes bitwise on a second run, and is the code the document shows."""
import os
import re

from tests import support

import anchor_pilot as ap

EXAMPLE = os.path.join(support.REPO, "examples", "minimal", "train.py")
DOC = os.path.join(support.REPO, "docs", "program.md")


class Example(support.TempDirTest):
    def test_runs_standalone_and_resumes_bitwise(self):
        run = self.path("run")
        first, second = self.path("first.jsonl"), self.path("second.jsonl")
        self.assertOk(support.run_py([EXAMPLE, run, first], timeout=180), "the first run")
        self.assertEqual(os.listdir(os.path.join(run, "checkpoints")), ["step-00000010"])
        a = ap.read_events(first)
        self.assertEqual([e["step"] for e in a if e["type"] == "step"], list(range(1, 21)))
        self.assertOk(support.run_py([EXAMPLE, run, second], timeout=180), "the second run")
        b = ap.read_events(second)
        self.assertEqual([e["step"] for e in b if e["type"] == "step"], list(range(11, 21)))
        self.assertIsNone(ap.compare_events(a, b))
        mem = [e for e in b if e["type"] == "memory" and "window" not in e][0]  # the program's own line
        self.assertEqual((mem["stage"], mem["device"]), ("end", "cpu"))
        self.assertGreater(mem["rss_bytes"], 10 * 1024 * 1024)
        # The helper's own stage lines, without a line in the program: each stage's peak RSS over its window.
        stages = lambda events: [e["stage"] for e in events if e["type"] == "memory" and "window" in e]
        self.assertEqual(stages(a), ["load", "train", "checkpoint_save"])
        self.assertEqual(stages(b), ["restore", "train"], "a restore is the second run's load")
        for e in a + b:
            if e["type"] == "memory" and "window" in e:
                self.assertGreater(e["peak_rss_bytes"], 10 * 1024 * 1024, e)
                self.assertGreaterEqual(e["peak_rss_bytes"], e["rss_bytes"], e)

    def test_docs_show_the_example_verbatim(self):
        with open(DOC) as f:
            doc = f.read()
        with open(EXAMPLE) as f:
            code = f.read()
        blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
        self.assertIn(code, blocks, "docs/program.md must show examples/minimal/train.py verbatim")
