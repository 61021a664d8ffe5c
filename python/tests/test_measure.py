"""What the helper measures without a line in the program (docs/program.md, "What anchor
measures"): each stage's peak memory over its window, the program's evaluate() run around a save
and a restore without disturbing the run, one step under torch.profiler, and the memory probe's
further points forked from one process. Every line is checked against the protocol's schema."""
import json
import os
import random
import subprocess
import sys
import textwrap
import unittest

import torch

import anchor_pilot as ap
from anchor_pilot import events as ev
from tests import support
from tests.test_schema import SCHEMA, validate


def _cpu_scaler():
    try:
        torch.amp.GradScaler("cpu")
        return True
    except (AttributeError, TypeError, RuntimeError):
        return False


_CPU_SCALER = _cpu_scaler()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Dropout(0.5), torch.nn.Linear(256, 8))


class Measure(support.TempDirTest):
    def setUp(self):
        super().setUp()
        with open(SCHEMA) as f:
            self.schema = json.load(f)

    def lines(self, path):
        out = support.read_lines(path)
        for line in out:
            self.assertEqual(validate(line, self.schema["$defs"]["event"], self.schema), [], line)
        return out

    def train(self, pilot, model, opt, steps, first=1, big_at=None):
        for step in range(first, first + steps):
            pilot.data_ready()
            x = torch.randn(32 if step != big_at else 4096, 64)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            pilot.step(step, loss=loss)
            pilot.maybe_save(step)

    def test_each_stage_has_its_own_window(self):
        model = _model()
        opt = torch.optim.AdamW(model.parameters())
        events = self.path("ev.jsonl")
        with ap.Pilot(self.path("ck"), model=model, optimizer=opt, events=events, save_at=[3]) as pilot:
            self.train(pilot, model, opt, 2)
            held = torch.ones(16 << 20, dtype=torch.uint8)  # 16 MiB between the step line and the eval
            held.add_(1)
            del held
            pilot.eval(2, 0.5)
            self.train(pilot, model, opt, 1, first=3)
        mem = {l["stage"]: l for l in self.lines(events) if l["type"] == "memory"}
        self.assertEqual(list(mem), ["load", "train", "eval", "checkpoint_save"])
        for line in mem.values():
            self.assertEqual(line["device"], "cpu")
            self.assertGreaterEqual(line["peak_rss_bytes"], line["rss_bytes"])
        # The eval's window holds the 16 MiB tensor; the next step's and the save's do not (reset after it).
        self.assertGreater(mem["eval"]["peak_rss_bytes"] - mem["eval"]["rss_bytes"], 12 << 20, mem["eval"])
        self.assertLess(mem["checkpoint_save"]["peak_rss_bytes"], mem["eval"]["peak_rss_bytes"] - (8 << 20))

    def test_evaluate_runs_around_save_and_restore_and_leaves_the_run_as_it_was(self):
        val = torch.randn(64, 64)
        model = _model()

        def evaluate():
            model.eval()  # the helper puts the train mode back
            torch.rand(3)  # and every RNG stream: a draw here does not shift the run's
            random.random()
            return model(val).square().mean()

        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        events = self.path("ev.jsonl")
        with ap.Pilot(self.path("ck"), model=model, optimizer=opt, events=events, save_at=[2],
                      evaluate=evaluate) as pilot:
            self.train(pilot, model, opt, 2)
            self.assertTrue(all(m.training for m in model.modules()))
            after_save = (torch.get_rng_state(), random.getstate())
        # The control: the same run without evaluate draws the same numbers after its save.
        model2 = _model()
        opt2 = torch.optim.SGD(model2.parameters(), lr=0.1)
        with ap.Pilot(self.path("ck2"), model=model2, optimizer=opt2, events=self.path("ev2.jsonl"),
                      save_at=[2]) as pilot2:
            self.train(pilot2, model2, opt2, 2)
            self.assertTrue(torch.equal(torch.get_rng_state(), after_save[0]))
            self.assertEqual(random.getstate(), after_save[1])
        fresh = _model()
        events_b = self.path("ev-b.jsonl")
        with ap.Pilot(self.path("ck"), model=fresh, optimizer=torch.optim.SGD(fresh.parameters(), lr=0.1),
                      events=events_b, evaluate=lambda: fresh.eval()(val).square().mean()) as b:
            self.assertEqual(b.restore(), 2)
        before = [l for l in self.lines(events) if l["type"] == "eval"]
        after = [l for l in self.lines(events_b) if l["type"] == "eval"]
        self.assertEqual([(l["step"], l["when"]) for l in before], [(2, "before_save")])
        self.assertEqual([(l["step"], l["when"]) for l in after], [(2, "after_restore")])
        self.assertEqual(before[0]["loss"], after[0]["loss"], "the same state evaluates bitwise the same")
        stages = [l["stage"] for l in self.lines(events_b) if l["type"] == "memory"]
        self.assertEqual(stages, ["restore", "eval_after_restore"])
        with self.assertRaises(ap.PilotError):
            ap.Pilot(self.path("ck3"), model=fresh, evaluate=0.5)

    def test_the_spec_profile_step_is_profiled_into_run_dir(self):
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        spec = ap.Spec.from_file(support.write_spec(self.path("spec.json"), checkpoint_dir="ck",
                                                    events="ev.jsonl", stop_at=3, profile_step=3))
        with ap.Pilot(model=model, optimizer=opt, spec=spec) as pilot:
            self.train(pilot, model, opt, 3)
        prof = [l for l in self.lines(self.path("ev.jsonl")) if l["type"] == "profile"]
        self.assertEqual(len(prof), 1)
        self.assertEqual((prof[0]["step"], prof[0]["file"], prof[0]["comm_s"]), (3, "profile.json", 0.0))
        self.assertNotIn("error", prof[0])
        with open(self.path("profile.json")) as f:
            trace = json.load(f)
        names = {e.get("name") for e in (trace if isinstance(trace, list) else trace["traceEvents"])}
        self.assertIn("aten::addmm", names, "the step's own operators")
        self.assertEqual([f for f in os.listdir(self.tmp) if ".tmp-" in f], [], "published whole")

    def test_the_probe_forks_its_further_points_from_one_process(self):
        """One process starts; shape() forks a child per further point, each with its own spec and events
        file, and returns the first point in the parent. A child that fails gets its error line."""
        prog = self.path("prog.py")
        with open(prog, "w") as f:
            f.write(textwrap.dedent("""
                import os, sys, torch
                import anchor_pilot as ap
                ap.setup()
                mb, T = ap.shape(micro_batch=8, seq_len=16)
                if mb == 3:
                    raise SystemExit(5)  # the failing point
                m = torch.nn.Linear(T, 4)
                opt = torch.optim.SGD(m.parameters(), lr=0.1)
                with ap.Pilot.from_env(model=m, optimizer=opt) as p:
                    for step in (1, 2):
                        loss = m(torch.randn(mb, T)).sum()
                        loss.backward()
                        opt.step()
                        p.step(step, loss=loss, tokens=mb * T)
                    print("ran", os.getpid(), mb, T)
                print("after", os.getpid())  # a forked point ends at Pilot.close(): never here
            """))
        base = dict(role="probe", checkpoint_dir="ck", stop_at=2)
        for i, (mb, T) in enumerate([(2, 16), (3, 8)], start=2):
            support.write_spec(self.path("probe-%d.spec.json" % i), events="probe-%d.events.jsonl" % i,
                               probe={"micro_batch": mb, "seq_len": T}, **base)
        spec = support.write_spec(self.path("probe-1.spec.json"), events="probe-1.events.jsonl",
                                  probe={"micro_batch": 1, "seq_len": 16},
                                  probe_more=[{"micro_batch": 2, "seq_len": 16, "spec": "probe-2.spec.json"},
                                              {"micro_batch": 3, "seq_len": 8, "spec": "probe-3.spec.json"}],
                                  **base)
        env = dict(os.environ, ANCHOR_PILOT_SPEC=spec, PYTHONPATH=os.path.join(support.REPO, "python"))
        proc = subprocess.run([sys.executable, prog], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        ran = [l.split() for l in proc.stdout.splitlines() if l.startswith("ran")]
        self.assertEqual([(r[2], r[3]) for r in ran], [("2", "16"), ("1", "16")], "the child first, then itself")
        self.assertNotEqual(ran[0][1], ran[1][1], "two processes")
        self.assertEqual([l.split()[1] for l in proc.stdout.splitlines() if l.startswith("after")], [ran[1][1]],
                         "the forked point ended at Pilot.close(); the first ran its program to the end")
        for i, tokens in ((1, 16), (2, 32)):
            lines = self.lines(self.path("probe-%d.events.jsonl" % i))
            self.assertEqual([l["tokens"] for l in lines if l["type"] == "step"], [tokens, tokens])
            self.assertEqual(len([l for l in lines if l["type"] == "step_memory"]), 1)
            self.assertEqual([l for l in lines if l["type"] == "program"], [], "anchor pins worker A's")
            forked = [l for l in lines if l["type"] == "forked"]
            self.assertEqual(len(forked), 1 if i == 2 else 0, "the parent's account of each child")
            if forked:
                self.assertEqual(forked[0]["status"], 0)
                self.assertGreater(forked[0]["seconds"], 0)
        failed = self.lines(self.path("probe-3.events.jsonl"))
        self.assertEqual([l["type"] for l in failed], ["error", "forked"])
        self.assertIn("(micro_batch 3, seq_len 8), forked at anchor_pilot.shape(), exited with status 5",
                      failed[0]["message"])
        self.assertEqual(failed[1]["status"], 5)
        # The seam of a helper that cannot fork (CUDA initialized): one point, its own; the others not run.
        for i in (2, 3):
            os.unlink(self.path("probe-%d.events.jsonl" % i))
        proc = subprocess.run([sys.executable, prog], env=dict(env, ANCHOR_PILOT_NO_FORK="1"), capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual([l.split()[2:] for l in proc.stdout.splitlines() if l.startswith("ran")], [["1", "16"]])
        self.assertFalse(os.path.exists(self.path("probe-2.events.jsonl")))

    def test_cpu_peaks_leave_out_file_backed_pages(self):
        name, peak, source = ev.peak(torch.device("cpu"))
        self.assertEqual(name, "cpu")
        self.assertLess(peak, ev._vm_hwm())
        self.assertIn("anonymous", source)

    @unittest.skipUnless(_CPU_SCALER, "torch %s has no GradScaler on the CPU (torch.amp.GradScaler(\"cpu\"), 2.3 on)"
                         % torch.__version__)
    def test_a_grad_scaler_s_scale_and_skipped_steps_are_in_the_step_lines(self):
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=1)
        events = self.path("ev.jsonl")
        with ap.Pilot(self.path("ck"), model=model, optimizer=opt, scaler=scaler, events=events) as pilot:
            for step in (1, 2, 3):
                with pilot.autocast():
                    loss = model(torch.randn(8, 64)).square().mean()
                opt.zero_grad()
                scaler.scale(loss).backward()
                if step == 2:  # an overflow: the scaler skips this step and halves its scale
                    next(model.parameters()).grad.view(-1)[0] = float("inf")
                scaler.step(opt)
                scaler.update()
                pilot.step(step, loss=loss)
        steps = [l for l in self.lines(events) if l["type"] == "step"]
        self.assertEqual([l["loss_scale"] for l in steps], [2.0 ** 17, 2.0 ** 16, 2.0 ** 17])
        self.assertEqual([l.get("scaler_skipped", False) for l in steps], [False, True, False])
        self.assertEqual([l["autocast"] for l in steps], ["fp32"] * 3, "no precision declared: fp32")
