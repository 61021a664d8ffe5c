"""Observed mode: a program that keeps its own save and load code
(examples/own-checkpoints, docs/program.md, "Your own checkpoint code").

anchor_pilot fingerprints the live state at the program's save of K, right
after its own load, and at K+R; anchor kills worker A once the first file of
its save of K+R is whole, and worker B resumes through the program's own
load. The example matches bitwise; each mistake the example can be told to
make (a component it does not save, a resume that takes the torn save) fails
with the verdict naming it in the program's terms. The watch that holds the
program inside its save is tested on its own as well.
"""
import hashlib
import json
import os
import tempfile
import unittest

import torch

from anchor_pilot import observe as obs
from tests import support
from tests.test_schema import SCHEMA, validate

BIN = support.ProgramPilotTest.BIN
EXAMPLE = "own-checkpoints"


class FirstFileWatch(unittest.TestCase):
    """The watch fires in the saving thread once the first file appears, before the program goes on."""

    def test_holds_the_program_once_its_first_file_appears(self):
        root = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, root, True)
        seen = []

        class Held(Exception):
            pass

        def on_file(path):
            seen.append(path)
            raise Held()

        w = obs.FirstFileWatch(root, on_file)
        try:
            w.arm()
            os.makedirs(os.path.join(root, "step_7", "nested"))  # watched as it appears
            torch.save({"w": torch.zeros(4)}, os.path.join(root, "step_7", "nested", "model.pt"))
            seen.append("the second save ran")
            torch.save({"w": torch.ones(4)}, os.path.join(root, "step_7", "optimizer.pt"))
        except Held:
            seen.append("held")
        finally:
            w.disarm()
            w.close()
        self.assertEqual(seen, [os.path.join("step_7", "nested", "model.pt"), "held"])
        self.assertEqual(os.listdir(os.path.join(root, "step_7")), ["nested"])
        # open() returned an empty file: a save of one file is torn too.
        with open(os.path.join(root, "one.json"), "w") as f:
            f.write("{}")
        w = obs.FirstFileWatch(root, on_file)
        try:
            w.arm()
            with open(os.path.join(root, "one.json"), "w") as f:  # rewritten in place
                f.write('{"step": 7}')
        except Held:
            seen.append("held")
        finally:
            w.disarm()
            w.close()
        self.assertEqual(seen[2:], ["one.json", "held"])
        self.assertEqual(os.path.getsize(os.path.join(root, "one.json")), 0)

    def test_quiet_when_nothing_is_written(self):  # the negative control: no file, no call
        root = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, root, True)
        w = obs.FirstFileWatch(root, lambda p: self.fail("fired on %s" % p))
        w.arm()
        try:
            torch.save({"w": torch.zeros(4)}, os.path.join(tempfile.gettempdir(), "elsewhere-%d.pt" % os.getpid()))
        finally:
            w.disarm()
            w.close()
            os.unlink(os.path.join(tempfile.gettempdir(), "elsewhere-%d.pt" % os.getpid()))
        self.assertIsNone(w.fired)


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
class OwnCheckpoints(support.ProgramPilotTest):
    def failed_checks(self, report):
        return {c["name"]: c["detail"] for c in report["resume"]["checks"] if not c["ok"]}

    def test_matches_pins_the_save_and_says_what_the_kill_left(self):
        proc, report, run_dir = self.pilot(EXAMPLE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual(report["resume"]["verdict"], "match")
        self.assertEqual(report["resume"]["mode"], "bitwise")
        kill = [s for s in report["stages"] if s["stage"] == "kill"][0]["figures"]
        self.assertEqual(kill["point"], "step_000008/model.pt")  # held once its first file appeared
        self.assertEqual(kill["torn_checkpoints"], ["step 8: 1 file written, 5 missing"])
        ck = report["program_checkpoints"]
        self.assertEqual(ck["torn"]["files"], ["step_000008/model.pt"])
        self.assertEqual(ck["torn"]["missing"], ["step_000008/%s" % f for f in
                                                 ("COMPLETE", "data.json", "optimizer.pt", "rng.pt", "scheduler.pt")])
        (save,) = ck["saves"]
        self.assertEqual(save["step"], 4)
        names = [f["path"] for f in save["files"]]
        self.assertEqual(names, ["step_000004/%s" % f for f in
                                 ("COMPLETE", "data.json", "model.pt", "optimizer.pt", "rng.pt", "scheduler.pt")])
        for f in save["files"]:  # pinned by digest: the files as they are on disk
            with open(os.path.join(run_dir, "checkpoints", f["path"]), "rb") as fh:
                data = fh.read()
            self.assertEqual((f["bytes"], f["sha256"]), (len(data), hashlib.sha256(data).hexdigest()))
        # Every line both workers wrote is one the protocol's schema describes (docs/worker-protocol.schema.json).
        with open(SCHEMA) as f:
            schema = json.load(f)
        phases = set()
        for worker in ("reference", "resume"):
            for line in support.read_lines(os.path.join(run_dir, "program", worker + ".events.jsonl")):
                self.assertEqual(validate(line, schema["$defs"]["event"], schema), [], line)
                phases.add((worker, line["type"], line.get("phase")))
        self.assertIn(("reference", "checkpoint", "kill_window"), phases)
        self.assertIn(("resume", "checkpoint", "read"), phases)
        # The restored state was fingerprinted per RNG stream, and equal.
        with open(os.path.join(run_dir, "program", "resume.events.jsonl")) as f:
            lines = [json.loads(x) for x in f]
        self.assertEqual([x["files"] for x in lines if x["type"] == "checkpoint" and x["phase"] == "read"],
                         [["step_000004/%s" % f for f in ("model.pt", "optimizer.pt", "scheduler.pt", "rng.pt",
                                                          "data.json")]])  # what the resume's own load opened
        restored = [x for x in lines if x["type"] == "digests" and x["when"] == "restore"]
        self.assertEqual(len(restored), 1)
        self.assertIn("rng.torch", restored[0]["components"])
        self.assertNotIn("rng", restored[0]["components"])
        self.assertEqual(self.anchor("verify", run_dir).returncode, 0)

    def test_a_component_the_program_does_not_save_is_named(self):
        for forget, component, words in (
                ("scheduler", "scheduler", "the scheduler: after your load its state differs from your save of step 4"),
                ("rng", "rng.torch", "torch's CPU random generator: after your load its state differs from your "
                                     "save of step 4")):
            with self.subTest(forget=forget):
                proc, report, _ = self.pilot(EXAMPLE, run="run-" + forget, EXAMPLE_FORGET=forget)
                self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
                self.assertEqual(report["resume"]["cause"][0], component, report["resume"])
                self.assertIn(words, self.failed_checks(report)["restored state"])
                self.assertIn(words, proc.stderr)

    def test_a_resume_that_takes_the_torn_save_fails_naming_what_it_lacks(self):
        # As written, the load crashes on the file the torn save lacks: exit 3, the file named.
        proc, report, _ = self.pilot(EXAMPLE, run="run-crash", EXAMPLE_FORGET="marker")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("anchor killed your save of step 8 inside: it holds step_000008/model.pt (0 bytes) and lacks "
                      "step_000008/COMPLETE, step_000008/data.json, step_000008/optimizer.pt", proc.stderr)
        self.assertIn("Your resume read step_000008/model.pt from that save", proc.stderr)  # it opened it
        self.assertEqual([s["status"] for s in report["stages"] if s["stage"] == "resume"], ["failed"])
        # A load that returns early when a file is missing or empty takes the torn save without a crash:
        # the verdict says so.
        train = os.path.join(self.path(EXAMPLE), "train.py")
        self.edit(train, "def load(step):\n    d = step_dir(step)\n",
                  "def load(step):\n    d = step_dir(step)\n"
                  "    ok = lambda name: os.path.exists(os.path.join(d, name)) and os.path.getsize(os.path.join(d, name))\n"
                  "    if not ok(\"data.json\"):\n        return\n")
        proc, report, _ = self.pilot(EXAMPLE, run="run-quiet", EXAMPLE_FORGET="marker")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"][0], "checkpoint", report["resume"])
        self.assertIn("your load restored step 8 from the save anchor killed inside: it holds step_000008/model.pt "
                      "(0 bytes) and lacks step_000008/COMPLETE", self.failed_checks(report)["restored step"])

    def test_a_save_outside_the_checkpoint_dir_is_refused(self):
        train = os.path.join(self.example(EXAMPLE), "train.py")
        self.edit(train, 'ckpt_root = spec.checkpoint_dir if spec else', 'ckpt_root = "elsewhere" if spec else')
        proc, report, _ = self.pilot(EXAMPLE)
        self.assertEqual(proc.returncode, 1, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("the save wrote no file under", proc.stderr)
        self.assertIn("save into pilot.checkpoint_dir", proc.stderr)

    def test_standalone_it_resumes_its_own_checkpoint(self):
        """Without anchor the example is an ordinary program: a second run resumes from step 4 and matches."""
        d = self.example(EXAMPLE)
        first = support.run_py([os.path.join(d, "train.py"), self.path("solo")])
        self.assertEqual(first.returncode, 0, first.stderr)
        os.remove(os.path.join(self.path("solo"), "events.jsonl"))
        second = support.run_py([os.path.join(d, "train.py"), self.path("solo")])
        self.assertEqual(second.returncode, 0, second.stderr)
        lines = support.read_lines(os.path.join(self.path("solo"), "events.jsonl"))
        self.assertEqual([x["step"] for x in lines if x["type"] == "step"], [5, 6, 7, 8])
        self.assertEqual([x["step"] for x in lines if x["type"] == "checkpoint" and x["op"] == "restore"], [4])


if __name__ == "__main__":
    unittest.main()
