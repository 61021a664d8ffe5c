"""2. Kill/resume equivalence with negative controls.

train_mlp.py (MLP + dropout, AdamW, LambdaLR, a DataLoader over a resumable
shuffled sampler, Python random noise) runs N steps uninterrupted; a second
run saves at K and is SIGKILLed by the test right after the save (it prints
"parked K" and blocks); a fresh process restores and runs to N. Its losses
and digests must equal the reference bitwise. Negative controls restore
without one component each: the comparison must name that component.
"""
import signal
import subprocess
import sys

from tests import support

import anchor_pilot as ap

N, K = 16, 6
CONTROLS = ("optimizer", "scheduler", "rng", "data")


class KillResume(support.TempDirTest):
    def spec(self, name, **fields):
        return support.write_spec(self.path(name + ".spec.json"), events=self.path(name + ".jsonl"),
                                  stop_at=N, **fields)

    def test_resume_after_sigkill_matches_and_controls_name_the_component(self):
        # The reference runs beside the interrupted run (two processes, two cores).
        ref = self.spec("ref", checkpoint_dir=self.path("ref-ck"), save_at=[K])
        ref_proc = subprocess.Popen([sys.executable, support.TRAIN, ref], env=support.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, universal_newlines=True)
        self.addCleanup(_reap, ref_proc)

        # The interrupted run: killed by the test right after its save at K.
        cut = self.spec("cut", checkpoint_dir=self.path("ck"), save_at=[K])
        proc = subprocess.Popen([sys.executable, support.TRAIN, cut + ":park"], env=support.env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True)
        try:
            line = proc.stdout.readline()
            self.assertEqual(line.strip(), "parked %d" % K, proc.stderr.read() if not line else line)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stdin.close()
            proc.stdout.close()
            proc.stderr.close()
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        out, err = ref_proc.communicate(timeout=120)
        self.assertEqual(ref_proc.returncode, 0, "the reference run failed:\n" + err[-3000:])
        cut_events = support.read_lines(self.path("cut.jsonl"))
        self.assertEqual(max(e["step"] for e in cut_events if e["type"] == "step"), K)

        # One fresh process: the resume first, then the four controls.
        args = [self.spec("resume", role="resume", checkpoint_dir=self.path("ck"))]
        for c in CONTROLS:
            args.append(self.spec("no-" + c, role="resume", checkpoint_dir=self.path("ck")) + ":skip=" + c)
        self.assertOk(support.run_py([support.TRAIN] + args), "the resumed runs")

        ref_ev = ap.read_events(self.path("ref.jsonl"))
        res_ev = ap.read_events(self.path("resume.jsonl"))
        restores = [e for e in res_ev if e["type"] == "checkpoint" and e["op"] == "restore" and e["phase"] == "end"]
        self.assertEqual([e["step"] for e in restores], [K])
        self.assertIsNone(ap.compare_events(ref_ev, res_ev))
        ref_loss = {e["step"]: e["loss"] for e in ref_ev if e["type"] == "step"}
        res_loss = {e["step"]: e["loss"] for e in res_ev if e["type"] == "step"}
        self.assertEqual(sorted(res_loss), list(range(K + 1, N + 1)))
        for s in res_loss:
            self.assertEqual(res_loss[s], ref_loss[s], "step %d" % s)
        final = [e for e in ref_ev if e["type"] == "digests" and e["when"] == "final"][-1]["components"]
        final_res = [e for e in res_ev if e["type"] == "digests" and e["when"] == "final"][-1]["components"]
        self.assertEqual(final_res["model"], final["model"])
        self.assertEqual(final_res["optimizer"], final["optimizer"])
        self.assertEqual(final_res, final)
        # The interrupted run's first K steps equal the reference's too.
        for e in cut_events:
            if e["type"] == "step":
                self.assertEqual(e["loss"], ref_loss[e["step"]])

        for c in CONTROLS:
            with self.subTest(control=c):
                ev = ap.read_events(self.path("no-%s.jsonl" % c))
                m = ap.compare_events(ref_ev, ev)
                self.assertIsNotNone(m, "skipping %s went unnoticed" % c)
                self.assertEqual((m.kind, m.component, m.step), ("digest", c, K), str(m))
                self.assertIn("component '%s' differs" % c, str(m))
                # ...and the run itself diverges: some loss after K differs.
                losses = {e["step"]: e["loss"] for e in ev if e["type"] == "step"}
                self.assertTrue(any(losses[s] != ref_loss[s] for s in losses),
                                "skipping %s changed no loss" % c)
                # Without the digests, the loss comparison alone also catches it.
                m2 = ap.compare_events(ref_ev, _losses_only(ref_ev, ev))
                self.assertIsNotNone(m2, "skipping %s: the losses alone did not tell" % c)
                self.assertEqual(m2.kind, "loss", str(m2))

    def test_compare_cli(self):
        import json
        a, b = self.path("a.jsonl"), self.path("b.jsonl")
        dig = {"model": "1" * 64, "rng": "2" * 64}
        with open(a, "w") as f:
            for line in [{"type": "digests", "step": 2, "when": "save", "components": dig},
                         {"type": "step", "step": 3, "loss": 0.5}]:
                f.write(json.dumps(line) + "\n")
        with open(b, "w") as f:
            for line in [{"type": "digests", "step": 2, "when": "restore", "components": dict(dig, rng="3" * 64)},
                         {"type": "step", "step": 3, "loss": 0.5}]:
                f.write(json.dumps(line) + "\n")
        # The CLI and the torch-free modules do not import torch.
        p = support.run_py(["-c", "import sys, anchor_pilot.__main__; assert 'torch' not in sys.modules, 'torch'"])
        self.assertOk(p)
        p = support.run_py(["-m", "anchor_pilot", "compare", a])
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        p = support.run_py(["-m", "anchor_pilot", "compare", b, b])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("match", p.stdout)
        p = support.run_py(["-m", "anchor_pilot", "compare", a, b])
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("component 'rng' differs", p.stdout)


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def _losses_only(ref_events, events):
    """``events`` with its restore digests replaced by the reference's at that
    step and every later digests line dropped: only the losses can differ."""
    ref = {e["step"]: e["components"] for e in ref_events if e["type"] == "digests"}
    out = []
    for e in events:
        if e["type"] == "digests":
            if e["when"] != "restore":
                continue
            e = dict(e, components=ref[e["step"]])
        out.append(e)
    return out
