"""anchor pilot with program.command: the examples of examples/ piloted end to end.

`anchor pilot` (ANCHOR_BIN) starts each example's own train.py as worker A and
worker B (once per rank), kills A inside its save, resumes in fresh processes
and compares. Each example must match bitwise; each negative control (a
variant that forgets to restore one component) must fail with exit 3 and the
verdict must name that component. A program manifest is checked with
`anchor pin --check`: unchanged, then a changed source, an added module and an
added Python distribution are each drift (exit 3). Copies of the examples run
in a temporary directory; `python3` in PATH is this test's interpreter.
"""
import json
import os
import shutil
import socket
import subprocess
import unittest
from xml.etree import ElementTree

from tests import support

from tests.test_hf_example import HAVE_TRANSFORMERS, WHY_NOT

BIN = os.environ.get("ANCHOR_BIN")


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
class ProgramPilot(support.ProgramPilotTest):
    def assertMatch(self, proc, report, ranks=1):
        self.assertEqual(proc.returncode, 0, "pilot failed:\n" + proc.stdout[-3000:] + (proc.stderr or "")[-3000:])
        self.assertEqual(report["status"], "passed")
        self.assertEqual(report["resume"]["verdict"], "match")
        self.assertEqual(report["resume"]["mode"], "bitwise")
        self.assertEqual(len(report["resume"]["per_rank"]), ranks)
        kill = [s for s in report["stages"] if s["stage"] == "kill"][0]
        self.assertEqual(kill["figures"]["signal"], "SIGKILL")
        self.assertEqual(len(kill["figures"]["torn_checkpoints"]), 1)  # killed inside its save

    def assertCaught(self, proc, report, component, run_dir):
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["verdict"], "mismatch")
        self.assertEqual(report["resume"]["cause"][0], component, report["resume"])
        self.assertIn("component '%s' differs" % component, proc.stderr)
        compare = [s for s in report["stages"] if s["stage"] == "compare"][0]  # it ran, and its answer is no
        self.assertEqual(compare["status"], "failed", compare)
        self.assertIn(component, compare["error"])
        # JUnit: compare failed, and the probe and the plan, which a mismatch stops before, skipped.
        junit = ElementTree.parse(run_dir + ".junit.xml").getroot()
        cases = {c.get("name"): c for c in junit.iter("testcase") if c.get("classname") == "anchor.pilot.stage"}
        self.assertEqual(cases["compare"].find("failure").get("type"), "stage")
        for stage in ("memory_probe", "plan"):
            self.assertEqual(cases[stage].find("skipped").get("message"),
                             "not run: the pilot stopped in stage compare")

    def assertMeasuredLikeTheBuiltIn(self, report, run):
        """The figures the built-in trainer reports, from the helper's own calls: each stage's peak memory,
        the MFU estimate, the evaluation across the restore, the profiled step and its top operators."""
        mem = report["measurements"]["memory"]
        self.assertEqual(list(mem["stages"]), ["checkpoint_save", "eval", "eval_after_restore", "load", "restore",
                                               "train"])
        for name, st in mem["stages"].items():
            self.assertGreater(st["peak_rss_bytes"], 50 << 20, name)
            self.assertEqual((st["peak_allocated_bytes"], st["device"]), (-1, "cpu"), name)  # no CPU allocator
        stages = {s["stage"]: s for s in report["stages"]}
        self.assertNotIn("precision", stages, "fp32 declared: nothing to check against fp32")
        self.assertNotIn("precision", report)
        self.assertEqual(stages["checkpoint_save"]["figures"]["memory"], mem["stages"]["checkpoint_save"])
        self.assertEqual(stages["restore"]["figures"]["memory"], mem["stages"]["restore"])
        self.assertEqual(mem["step"]["peak_rss_bytes"], mem["stages"]["train"]["peak_rss_bytes"])
        step = report["measurements"]["step"]
        self.assertGreater(step["reference_matmul_flops"], 1e8)
        self.assertAlmostEqual(step["mfu_estimate"], step["achieved_flops"] / step["reference_matmul_flops"])
        self.assertAlmostEqual(step["achieved_flops"], report["measurements"]["model"]["flops_per_token"] *
                               step["tokens_per_s"], delta=1)
        self.assertEqual(step["comm_s"], 0.0)  # one rank: nothing to all-reduce
        # evaluate(): in A's save of step 4 and right after B restored it, bitwise equal.
        self.assertEqual(report["eval"]["before_save"], report["eval"]["after_restore"])
        self.assertEqual(stages["eval_after_restore"]["figures"]["loss"], report["eval"]["after_restore"])
        check = [c for c in report["resume"]["checks"] if c["name"] == "eval after restore"]
        self.assertEqual([c["ok"] for c in check], [True], report["resume"]["checks"])
        # Worker B's last step under torch.profiler: profile.json beside the report, its top operators.
        prof = stages["resume"]["figures"]["profile"]
        self.assertEqual((prof["file"], prof["step"]), ("profile.json", 8))
        with open(os.path.join(run, "profile.json")) as f:
            trace = json.load(f)
        self.assertGreater(len(trace if isinstance(trace, list) else trace["traceEvents"]), 100)
        names = [op["name"] for op in prof["top"]]
        self.assertEqual(len(names), 15)
        self.assertTrue(any(n.startswith("aten::") and "mm" in n for n in names), names)
        self.assertLessEqual(sum(op["self_s"] for op in prof["top"]), prof["self_s"] + 1e-9)
        with open(os.path.join(run, "report.md")) as f:
            md = f.read()
        self.assertIn("Top operators of the profiled step (step 8, by self time; profile.json)", md)
        self.assertRegex(md, r"\| eval_after_restore \| n/a \| n/a \| [0-9.]+ MB \|")
        self.assertRegex(md, r"MFU estimate 0\.[0-9]{3}")
        with open(os.path.join(run, "report.html")) as f:
            html = f.read()
        self.assertIn("Top operators of the profiled step", html)
        self.assertIn('<a href="profile.json">profile.json</a>', html)

    def test_gpt_memory_model_predicts_shapes_the_probe_did_not_run(self):
        """Issue 45, item 7: the memory model fitted to a program's three points (the reference's and the
        two the probe forked) predicts the step's peak at two shapes none of them ran within 10% on the CPU.
        Each held-out shape runs as the probe does (role probe, two steps) and is measured as a point is:
        the second step's peak anonymous RSS less what the process held before its first step beyond its
        parameters. At 3.3M parameters (n_embd 256, 4 layers): small enough to run here, large enough that
        tensors are the RSS (at 137k parameters the allocator's reuse dominates it)."""
        self.example("gpt")
        sizes = ["--n-embd", "256", "--n-layer", "4", "--seq-len", "128", "--batch", "8", "--threads", "1"]
        proc, report, run = self.pilot("gpt", "program.command=[python3, train.py, %s]" % ", ".join(sizes),
                                       "pilot.steps_before_save=2", "pilot.steps_after_resume=2")
        self.assertMatch(proc, report)
        mm = report["plan"]["memory_model"]
        self.assertEqual(sorted((p["micro_batch"], p["seq_len"]) for p in mm["points"]), [(2, 128), (8, 64), (8, 128)])
        for mb, T in ((4, 64), (8, 96)):
            with self.subTest(micro_batch=mb, seq_len=T):
                events = self.path("held-out-%dx%d.jsonl" % (mb, T))
                spec = support.write_spec(self.path("held-out.spec.json"), role="probe", checkpoint_dir="ck-held-out",
                                          events=events, stop_at=2, probe={"micro_batch": mb, "seq_len": T})
                held = subprocess.run(["python3", "train.py"] + sizes, cwd=self.path("gpt"), capture_output=True,
                                      text=True, env=dict(self.env, ANCHOR_PILOT_SPEC=spec), timeout=300)
                self.assertEqual(held.returncode, 0, held.stderr[-2000:])
                sm = [l for l in support.read_lines(events) if l["type"] == "step_memory"][0]
                measured = sm["peak_bytes"] - max(0, sm["baseline_bytes"] - sm["state"]["parameters"])
                predicted = (mm["fixed_bytes"] + mm["a_bytes_per_token"] * mb * T +
                             mm["b_bytes_per_token_per_seq"] * mb * T * T)
                self.assertLess(abs(predicted / measured - 1), 0.10,
                                "(%d, %d): predicted %.1f MB, measured %.1f MB" % (mb, T, predicted / 1e6,
                                                                                  measured / 1e6))

    def test_gpt_bf16_step_is_checked_against_fp32(self):
        """Issue 45, item 4: a program that declares bf16 and runs its forward in pilot.autocast() gets a
        process that restores the save of K and runs step K+1 in fp32; worker B's bf16 step K+1 is compared
        with it. The negative control: a tolerance no bf16 step meets flags it (a warning, as the built-in's)."""
        self.example("gpt")
        proc, report, run = self.pilot("gpt", "program.command=[python3, train.py, --precision, bf16]")
        self.assertMatch(proc, report)
        prec = report["precision"]
        self.assertEqual((prec["precision"], prec["reference"], prec["step"], prec["verdict"]), ("bf16", "fp32", 5, "ok"))
        for k in ("loss", "grad_norm"):
            self.assertGreater(prec[k]["rel_diff"], 0, "bf16 is not fp32")  # the two sides really differ
            self.assertLess(prec[k]["rel_diff"], 0.05)
        stages = [s["stage"] for s in report["stages"]]
        self.assertEqual(stages[stages.index("compare"):], ["compare", "cross_check", "precision", "memory_probe", "plan"])
        with open(os.path.join(run, "program", "precision.events.jsonl")) as f:
            steps = [json.loads(l) for l in f if '"step"' in l and '"type": "step"' in l]
        self.assertEqual([(l["step"], l["autocast"]) for l in steps], [(5, "fp32")])
        with open(os.path.join(run, "report.md")) as f:
            self.assertIn("bf16 vs fp32: ok", f.read())
        proc, report, run = self.pilot("gpt", "program.command=[python3, train.py, --precision, bf16]",
                                       "pilot.precision_tolerance=1e-9", run="run-flagged")
        self.assertMatch(proc, report)
        self.assertEqual(report["precision"]["verdict"], "flagged")
        self.assertIn("differs from fp32 beyond pilot.precision_tolerance", proc.stderr)

    def test_gpt_probe_points_a_helper_cannot_fork_run_on_their_own(self):
        """Where the helper cannot fork (CUDA initialized at shape(); here its test seam), each point runs
        as a process of its own, and the plan has the same three points."""
        self.example("gpt")
        proc, report, run = self.pilot("gpt", ANCHOR_PILOT_NO_FORK="1")
        self.assertMatch(proc, report)
        probe = [s for s in report["stages"] if s["stage"] == "memory_probe"][0]
        self.assertEqual([p["process"] for p in probe["figures"]["points"]], ["its own", "its own"])
        self.assertNotIn("inside_resume_s", probe["figures"])
        self.assertEqual(report["plan"]["memory_model"]["points_measured"], 3)

    def test_gpt_an_evaluation_that_reads_unsaved_state_is_named(self):
        """Negative control of the eval check: the eval reads a buffer that training moves and no state_dict
        holds. Every component's digest agrees; only the evaluation after the restore differs."""
        self.example("gpt")
        proc, report, run = self.pilot("gpt", "program.command=[python3, train.py, --unsaved-buffer]")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"], ["eval"], report["resume"])
        checks = {c["name"]: c for c in report["resume"]["checks"]}
        self.assertTrue(checks["restored state"]["ok"])
        self.assertFalse(checks["eval after restore"]["ok"])
        self.assertIn("the evaluation reads something the restore did not bring back",
                      checks["eval after restore"]["detail"])
        self.assertNotEqual(report["eval"]["before_save"], report["eval"]["after_restore"])

    def test_gpt_matches_is_pinned_and_measured(self):
        self.example("gpt")
        with open(self.path("gpt", "unused.py"), "w") as f:  # beside train.py, never imported: pinned too
            f.write("Y = 2\n")
        proc, report, run = self.pilot("gpt")
        self.assertMatch(proc, report)
        self.assertEqual([c["step"] for c in report["checkpoints"]], [4, 8])  # A's step 4, B's step 8
        step = report["measurements"]["step"]
        self.assertEqual(step["tokens"], 4 * 32)
        self.assertGreater(step["tokens_per_s"], 0)
        self.assertGreater(report["measurements"]["model"]["parameters"], 100000)
        peaks = report["measurements"]["memory"]["peak_rss"]
        self.assertTrue(all(p["peak_rss_bytes"] > 50 << 20 for p in peaks), peaks)
        self.assertEqual(len(report["steps"]["resumed"]), 4)
        self.assertMeasuredLikeTheBuiltIn(report, run)
        # The console: each worker announced, and its steps as the built-in worker's lines say them.
        for line in ("[stage] A: reference\n", "[stage] B: resume\n", "[train_step] A step 1/8 loss=",
                     "[train_step] A step 8/8 loss=", "[train_step] B step 5/8 loss=", "[train_step] B step 8/8 loss="):
            self.assertIn(line, proc.stderr)
        self.assertRegex(proc.stderr, r"\[train_step\] A step 2/8 loss=[0-9.]+ grad_norm=[0-9.]+ lr=[0-9.e+-]+ "
                                      r"[0-9]+ tok/s \([0-9.]+s, eta [0-9.]+s\)")
        self.assertNotIn("B step 4/8", proc.stderr)  # B starts from A's step 4
        # The plan, from the program's measurements: its declared shape, the reference's step and two
        # memory probes (fresh processes at micro-batch 1 and seq_len 16) fitted like the built-in model's.
        model = report["measurements"]["model"]
        self.assertEqual((model["micro_batch"], model["seq_len"], model["n_layer"], model["n_embd"]), (4, 32, 2, 64))
        self.assertEqual(model["flops_per_token"], 6 * model["parameters"] + 12 * 2 * 64 * 32)
        points = report["measurements"]["memory"]["points"]
        self.assertEqual([(p["micro_batch"], p["seq_len"], p["from"]) for p in points],
                         [(4, 32, "reference"), (1, 32, "probe-1"), (4, 16, "probe-2")])
        self.assertTrue(all(0 < p["peak_allocated_bytes"] < p["raw_peak_bytes"] for p in points), points)
        state = report["measurements"]["memory"]["state_bytes"]
        self.assertEqual(state["parameters"], 4 * model["parameters"])
        self.assertEqual(state["optimizer"] // 4 // model["parameters"], 2)  # AdamW: exp_avg, exp_avg_sq (+ steps)
        plan = report["plan"]
        self.assertEqual(plan["memory_model"]["points_measured"], 3)
        self.assertTrue(plan["memory_model"]["quadratic"])
        self.assertEqual((plan["target"]["micro_batch"], plan["target"]["seq_len"]), (4, 32))
        self.assertIsNotNone(plan["recommendation"]["device"])
        self.assertIn("memory_probe", [s["stage"] for s in report["stages"]])
        # The probe's points were forked by worker B at anchor_pilot.shape(): no process start of their own.
        probe = [s for s in report["stages"] if s["stage"] == "memory_probe"][0]
        self.assertEqual({p["process"] for p in probe["figures"]["points"]},
                         {"forked from worker B's at anchor_pilot.shape()"})
        self.assertAlmostEqual(probe["figures"]["inside_resume_s"], sum(p["seconds"] for p in probe["figures"]["points"]))
        replan = self.anchor("plan", run)  # `anchor plan` re-plans a program's report too
        self.assertEqual(replan.returncode, 0, replan.stderr)
        self.assertIn("H100", replan.stdout)
        with open(os.path.join(run, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual([s["path"] for s in m["program"]["sources"]], ["train.py", "unused.py"])
        self.assertIn("torch", [d["name"] for d in m["program"]["python"]["distributions"]] +
                      [d["name"].lower() for d in m["program"]["python"]["distributions"]])
        self.assertTrue(any("libtorch" in l["path"] for l in m["dependencies"]["shared_libraries"]))
        self.assertEqual(m["dependencies"]["libtorch"].split("+")[0], __import__("torch").__version__.split("+")[0])

        # pin --check: unchanged, then each kind of drift.
        check = self.anchor("pin", "--check", os.path.join(run, "manifest.json"))
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("no drift", check.stdout)
        with open(self.path("gpt", "train.py"), "a") as f:
            f.write("# changed\n")
        check = self.anchor("pin", "--check", os.path.join(run, "manifest.json"))
        self.assertEqual(check.returncode, 3, check.stdout + check.stderr)
        self.assertIn("program source train.py", check.stdout)
        with open(self.path("gpt", "helpers.py"), "w") as f:
            f.write("X = 1\n")
        os.makedirs(self.path("gpt", "fake_pkg-1.0.dist-info"))
        with open(self.path("gpt", "fake_pkg-1.0.dist-info", "METADATA"), "w") as f:
            f.write("Name: fake_pkg\nVersion: 1.0\n")
        check = self.anchor("pin", "--check", os.path.join(run, "manifest.json"))
        self.assertEqual(check.returncode, 3)
        self.assertRegex(check.stdout, r"program source helpers.py +\(added\)")
        self.assertRegex(check.stdout, r"python package fake_pkg \(.*\) +\(added\)")

    def test_gpt_negative_controls_are_named(self):
        self.example("gpt")
        for component in ("optimizer", "scheduler", "rng", "data"):
            with self.subTest(component=component):
                proc, report, run = self.pilot("gpt", "program.command=[python3, train.py, --forget, %s]" % component,
                                               run="run-" + component)
                self.assertCaught(proc, report, component, run)
                self.assertEqual(report["plan"]["status"], "not planned")  # a run that does not resume
                self.assertIn("step", report["measurements"])

    def test_gpt_a_component_left_out_of_the_pilot_is_named_from_its_steps(self):
        """Not given to the Pilot, a component is neither restored nor fingerprinted: the restored state is
        "equal", and the step lines say what differs first: the learning rate (the scheduler), the batch (the
        data cursor)."""
        self.example("gpt")
        for component, check, words in (("scheduler", "lr at step 5", "the learning rate differs"),
                                         ("data", "batch at step 5", "trains on other data than the reference")):
            with self.subTest(component=component):
                proc, report, _ = self.pilot("gpt", "program.command=[python3, train.py, --leave-out, %s]" % component,
                                             run="run-out-" + component)
                self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
                self.assertEqual(report["resume"]["cause"][0], {"scheduler": "scheduler", "data": "data"}[component],
                                 report["resume"])
                checks = {c["name"]: c for c in report["resume"]["checks"]}
                self.assertTrue(checks["restored state"]["ok"], checks["restored state"])
                self.assertFalse(checks[check]["ok"])
                self.assertIn(words, checks[check]["detail"])
                # The determinism control ran (pilot.determinism: auto, on a mismatch): the program repeats
                # itself, so the mismatch is the resume's.
                self.assertEqual(report["determinism"]["finding"], "repeatable", report["determinism"])
                self.assertIn("comes from the resume, not from nondeterministic kernels", proc.stderr)

    def test_gpt_nondeterminism_is_told_from_a_resume_bug(self):
        """The determinism control: on a mismatch worker B's steps run again from the same save. A program that
        does not repeat itself (--noise: gradients with run-to-run noise, as atomic adds give) is named
        nondeterministic with the pilot.tolerance that holds its run-to-run difference, and passes with it; the
        program without the noise repeats itself bitwise (pilot.determinism: check runs the control on a match).
        A resume bug in a program that repeats itself: the test above."""
        self.example("gpt")
        proc, report, _ = self.pilot("gpt", "program.command=[python3, train.py, --noise]", run="run-noise")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        det = report["determinism"]
        self.assertTrue(det["ran"], det)
        self.assertEqual(det["finding"], "nondeterministic", det)
        self.assertFalse(det["control"]["same"])
        self.assertGreater(det["control"]["max_relative"], 0)
        self.assertIn("Your program does not repeat itself from the same state", proc.stderr)
        tol = det["suggested_tolerance"]
        self.assertIn("Set pilot.tolerance: %g" % tol, proc.stderr)
        self.assertIn("Set pilot.tolerance", report["message"])
        stages = {s["stage"]: s for s in report["stages"]}
        self.assertEqual(stages["determinism"]["figures"]["finding"], "nondeterministic")

        proc, report, _ = self.pilot("gpt", "program.command=[python3, train.py, --noise]",
                                     "pilot.tolerance=%r" % tol, "pilot.determinism=check", run="run-noise-tol")
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["mode"], "tolerance")
        self.assertEqual(report["determinism"]["finding"], "nondeterministic", report["determinism"])

        proc, report, _ = self.pilot("gpt", "pilot.determinism=check", run="run-repeat")
        self.assertMatch(proc, report)
        self.assertEqual(report["determinism"]["finding"], "repeatable", report["determinism"])
        self.assertTrue(report["determinism"]["control"]["same"])
        self.assertIn("determinism", {s["stage"] for s in report["stages"]})

    def test_gpt_memory_probe_refuses_a_program_that_ignores_its_shape(self):
        proc, report, _ = self.pilot("gpt", "program.command=[python3, train.py, --ignore-shape]")
        self.assertEqual(proc.returncode, 1, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["verdict"], "match")  # the resume is proven; the probe is what failed
        self.assertIn("the memory probe at (micro_batch 1, seq_len 32) reported 128 tokens at step 1, not 32",
                      proc.stderr)
        self.assertIn("or pass probe=False", proc.stderr)
        # The report keeps what was measured, and says why there is no plan.
        self.assertEqual(report["measurements"]["model"]["micro_batch"], 4)
        self.assertEqual(report["plan"]["status"], "not planned")
        self.assertIn("the memory probe failed", report["plan"]["why"])

    def test_ddp_two_ranks_as_torchrun_starts_them(self):
        proc, report, run = self.pilot("ddp")
        self.assertMatch(proc, report, ranks=2)
        self.assertEqual(report["program"]["world_size"], 2)
        # The seeds each rank used (torch.initial_seed() at its first step): the example's seed * 100 + rank,
        # not seeds anchor derives for its own trainer.
        with open(os.path.join(run, "manifest.json")) as f:
            seeds = json.load(f)["seeds"]
        self.assertEqual(seeds["ranks"], [{"rank": 0, "torch": seeds["root"] * 100},
                                          {"rank": 1, "torch": seeds["root"] * 100 + 1}], seeds)
        self.assertNotIn("dropout_per_rank", seeds)
        # probe=False: the plan rests on the one measured point and says so.
        mm = report["plan"]["memory_model"]
        self.assertEqual(mm["points_measured"], 1)
        self.assertIn("one measured point (micro_batch 16, seq_len 1)", mm["note"])
        self.assertNotIn("memory_probe", [s["stage"] for s in report["stages"]])
        # The communication: the all-reduces' spans in worker B's profiled step, every rank's in its line.
        step = report["measurements"]["step"]
        self.assertGreater(step["comm_s"], 0)
        self.assertIn("(worker B's step 6, rank 0)", step["comm_source"])
        prof = [s for s in report["stages"] if s["stage"] == "resume"][0]["figures"]["profile"]
        self.assertLess(prof["comm_s"], prof["seconds"])
        with open(os.path.join(run, "program", "resume.events.jsonl")) as f:
            lines = [json.loads(l) for l in f]
        self.assertEqual(sorted(l["rank"] for l in lines if l["type"] == "profile"), [0, 1])
        self.assertTrue(all(l["comm_s"] > 0 for l in lines if l["type"] == "profile"))
        # The point is the rank whose step peaked highest (less what each held outside its step), not rank 0's.
        with open(os.path.join(run, "program", "reference.events.jsonl")) as f:
            sm = {e["rank"]: e for e in map(json.loads, f) if e["type"] == "step_memory"}
        self.assertEqual(sorted(sm), [0, 1])
        step_peak = {r: e["peak_bytes"] - max(0, e["baseline_bytes"] - e["state"]["parameters"]) for r, e in sm.items()}
        top = max(sorted(step_peak), key=lambda r: step_peak[r])
        point = report["measurements"]["memory"]["points"][0]
        self.assertEqual((point["rank"], point["raw_peak_bytes"]), (top, sm[top]["peak_bytes"]))
        proc, report, run = self.pilot("ddp", "program.command=[python3, train.py, --forget, data]", run="run-data")
        self.assertCaught(proc, report, "data", run)
        self.assertIn("rank 1: data", report["resume"]["cause"])  # every rank's own cursor
        # Ranks that share a random stream they draw from (every rank on setup()'s one seed: the same dropout
        # masks): the pilot fails naming the stream and the ranks (exit 3), before worker B; or warns when asked.
        self.assertEqual(report["ranks_rng"]["streams"]["torch"], {"drawn": True, "shared_by": []})
        proc, report, run = self.pilot("ddp", "program.command=[python3, train.py, --forget, rank-seed]",
                                       run="run-seed")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("your ranks start their first step with the same random stream and draw from it: torch's CPU "
                      "random generator (ranks 0, 1)", proc.stderr)
        self.assertIn("torch.manual_seed(seed + rank)", proc.stderr)
        self.assertEqual(report["ranks_rng"]["streams"]["torch"], {"drawn": True, "shared_by": [[0, 1]]})
        self.assertNotIn("resume", [s["stage"] for s in report["stages"]])
        proc, report, run = self.pilot("ddp", "program.command=[python3, train.py, --forget, rank-seed]",
                                       "pilot.shared_rng=warn", run="run-seed-warn")
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("your ranks start their first step with the same random stream", proc.stderr)
        self.assertTrue(report["ranks_rng"]["shared"])
        with open(os.path.join(run, "manifest.json")) as f:  # both on setup()'s seed: said as they used it
            seeds = json.load(f)["seeds"]
        self.assertEqual([r["torch"] for r in seeds["ranks"]], [seeds["root"], seeds["root"]], seeds)
        # The helper's own checkpoints keep a file per rank: a resume at another world size is refused, saying
        # what does reshard (a resharded DCP resume: test_frameworks.FsdpDcp).
        proc, report, run = self.pilot("ddp", "pilot.resume_world_size=1", run="run-reshard")
        self.assertEqual(proc.returncode, 2, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("pilot.resume_world_size is 1, but the program saves through anchor_pilot's own checkpoints",
                      proc.stderr)

    def test_ddp_pilot_launched_by_torchrun(self):
        """`torchrun --nproc_per_node 2 anchor pilot` on the DDP example: the launched anchors are not the
        program; rank 0 supervises and starts the program's 2 ranks itself, rank 1 waits for its verdict.
        The launch also carries srun's task variables (as `srun torchrun` would): the program's ranks see
        anchor's torchrun variables only, neither srun's nor the outer torchrun's own."""
        d = self.example("ddp")
        train = os.path.join(d, "train.py")
        with open(train) as f:
            src = f.read()
        seen = self.path("seen")
        os.mkdir(seen)
        # Each process of the program records what it was given, before anything else.
        probe = ("import json as _j, os as _o\n"
                 "_j.dump(dict(_o.environ), open(_o.path.join(%r, 'env-%%d.json' %% _o.getpid()), 'w'))\n" % seen)
        with open(train, "w") as f:
            f.write(src.replace("import argparse\n", probe + "import argparse\n", 1))
        env = dict(self.env, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="2")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        run_dir = self.path("run")
        proc = subprocess.run([support.sys.executable, "-m", "torch.distributed.run", "--no_python",
                               "--nproc_per_node", "2", "--redirects", "1", "--tee", "1", "--master_addr",
                               "127.0.0.1", "--master_port", str(port), BIN, "pilot", os.path.join(d, "pilot.yaml"),
                               "--run-dir", run_dir], env=env, cwd=self.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        with open(os.path.join(run_dir, "report.json")) as f:
            report = json.load(f)
        self.assertMatch(proc, report, ranks=2)
        self.assertIn("this process supervises the pilot", proc.stdout)
        self.assertIn("rank 0's pilot exited with 0", proc.stdout)
        self.assertEqual(report["program"]["world_size"], 2)
        envs = []
        for name in os.listdir(seen):
            with open(os.path.join(seen, name)) as f:
                envs.append(json.load(f))
        self.assertGreaterEqual(len(envs), 4)  # worker A's and B's two ranks each
        self.assertEqual(sorted({e["RANK"] for e in envs}), ["0", "1"])
        for e in envs:
            self.assertEqual((e["WORLD_SIZE"], e["MASTER_ADDR"], e["TORCHELASTIC_USE_AGENT_STORE"]),
                             ("2", "127.0.0.1", "False"))
            self.assertNotEqual(e["MASTER_PORT"], str(port))  # anchor's own, not the outer launch's
            for leaked in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "GROUP_RANK",
                           "ROLE_RANK", "TORCHELASTIC_ERROR_FILE"):
                self.assertFalse(leaked in e, "%s reached the program: %s" % (leaked, e.get(leaked)))

    @unittest.skipUnless(HAVE_TRANSFORMERS, WHY_NOT)
    def test_hf_gpt2(self):
        proc, report, _ = self.pilot("hf-gpt2")
        self.assertMatch(proc, report)
        self.assertIn("transformers", [d["name"] for d in report["manifest"]["program"]["python"]["distributions"]])
        proc, report, run = self.pilot("hf-gpt2", "program.command=[python3, train.py, --forget, optimizer]", run="r2")
        self.assertCaught(proc, report, "optimizer", run)

    def test_minimal_example_signed_and_verified(self):
        keys = self.path("keys")
        self.assertEqual(self.anchor("keygen", "-o", keys).returncode, 0)
        proc, report, run = self.pilot("minimal", "report.signing_key=" + os.path.join(keys, "anchor.key"))
        self.assertMatch(proc, report)
        self.assertTrue(report["signed"])
        # It does not declare its shape: the report says why there is no plan.
        self.assertEqual(report["plan"]["status"], "not planned")
        self.assertIn("call anchor_pilot.shape(", report["plan"]["why"])
        v = self.anchor("verify", run, "--key", os.path.join(keys, "anchor.pub"))
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # `anchor reproduce` re-runs the program from its pinned sources and compares stage by stage: bitwise.
        envelope, pub = os.path.join(run, "report.intoto.json"), os.path.join(keys, "anchor.pub")
        rep = self.anchor("reproduce", envelope, "--key", pub, "--run-dir", self.path("rep"))
        self.assertEqual(rep.returncode, 0, rep.stdout + rep.stderr)
        self.assertIn("reproduce: no drift", rep.stderr)
        with open(self.path("rep", "report.json")) as f:
            again = json.load(f)
        self.assertEqual((again["reproduction"]["verdict"], again["reproduction"]["mode"]), ("reproduced", "bitwise"))
        names = [c["name"] for c in again["reproduction"]["checks"]]
        self.assertIn("resumed step 11: loss", names)  # worker B's steps too, not only worker A's
        self.assertEqual(again["reproduces"]["run_id"], report["run_id"])
        # A changed source is drift: refused with the table naming it, before anything runs (exit 3).
        train = self.path("minimal", "train.py")
        with open(train) as f:
            src = f.read()
        with open(train, "w") as f:
            f.write(src.replace("lr=1e-2", "lr=2e-2"))
        rep = self.anchor("reproduce", envelope, "--key", pub, "--run-dir", self.path("rep2"))
        self.assertEqual(rep.returncode, 3, rep.stdout + rep.stderr)
        self.assertIn("program source train.py", rep.stderr)
        self.assertIn("pins drifted", rep.stderr)
        self.assertFalse(os.path.exists(self.path("rep2")))
        # Negative control of the comparison: re-run anyway (--allow-drift), and the changed learning rate differs.
        rep = self.anchor("reproduce", envelope, "--key", pub, "--allow-drift", "--run-dir", self.path("rep3"))
        self.assertEqual(rep.returncode, 3, rep.stdout + rep.stderr)
        self.assertIn("differs: train step 1: learning rate", rep.stderr)
        with open(self.path("rep3", "report.json")) as f:
            self.assertEqual(json.load(f)["reproduction"]["verdict"], "differs")
        # Another interpreter first in PATH than the one the run started (and the re-pin checked): refused.
        with open(train, "w") as f:
            f.write(src)
        other = self.path("other-bin")
        os.mkdir(other)
        shutil.copy(os.path.join(self.path("bin"), "python3"), os.path.join(other, "python3"))
        env = dict(self.env, PATH=other + os.pathsep + self.env["PATH"])
        rep = subprocess.run([BIN, "reproduce", envelope, "--key", pub, "--run-dir", self.path("rep4")], env=env,
                             cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                             timeout=300)
        self.assertEqual(rep.returncode, 3, rep.stdout + rep.stderr)
        self.assertIn("program.command[0] 'python3' is %s here; the run this reproduces started %s"
                      % (os.path.join(other, "python3"), os.path.join(self.path("bin"), "python3")), rep.stderr)
        # Its bundle carries no sources: reproducing one is refused (exit 2), nothing run.
        self.assertEqual(self.anchor("bundle", run, "-o", self.path("b")).returncode, 0)
        rep = self.anchor("reproduce", self.path("b"), "--key", pub, "--run-dir", self.path("rep5"))
        self.assertEqual(rep.returncode, 2, rep.stdout + rep.stderr)
        self.assertIn("re-runs a program from its files where they are now, not from a bundle", rep.stderr)
        self.assertFalse(os.path.exists(self.path("rep5")))
        # Moved: the program's directory and the interpreter's. Without --root the sources are not where the run
        # had them (drift, exit 3); --root and --map say where they are now, what is there is hashed again and
        # matches, and the re-run reproduces bitwise.
        moved, bin2 = self.path("moved"), self.path("bin2")
        shutil.move(self.path("minimal"), moved)
        shutil.copytree(self.path("bin"), bin2)
        env = dict(self.env, PATH=bin2 + os.pathsep + self.env["PATH"])

        def reproduce(*args):
            return subprocess.run([BIN, "reproduce", envelope, "--key", pub] + list(args), env=env, cwd=self.tmp,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=300)
        rep = reproduce("--run-dir", self.path("rep6"))
        self.assertEqual(rep.returncode, 3, rep.stdout + rep.stderr)
        self.assertRegex(rep.stderr, r"program source train.py +[0-9a-f]{16}\.\.\. [0-9]+ B +\(removed\)")
        self.assertFalse(os.path.exists(self.path("rep6")))
        # --root alone: the sources are found, but PATH now finds the moved interpreter, which --map must name.
        rep = reproduce("--root", moved, "--run-dir", self.path("rep8"))
        self.assertEqual(rep.returncode, 3, rep.stdout + rep.stderr)
        self.assertIn("the config's directory %s is read at %s" % (self.path("minimal"), moved), rep.stderr)
        self.assertIn("program.command[0] 'python3' is %s here; the run this reproduces started %s"
                      % (os.path.join(bin2, "python3"), os.path.join(self.path("bin"), "python3")), rep.stderr)
        rep = reproduce("--root", moved, "--map", "%s=%s" % (self.path("bin"), bin2), "--run-dir", self.path("rep7"))
        self.assertEqual(rep.returncode, 0, rep.stdout + rep.stderr)
        self.assertIn("reproduce: no drift", rep.stderr)
        with open(self.path("rep7", "report.json")) as f:
            again = json.load(f)
        self.assertEqual((again["reproduction"]["verdict"], again["reproduction"]["mode"]), ("reproduced", "bitwise"))
        self.assertEqual(again["manifest"]["program"]["root"], os.path.realpath(moved))

    FORGER = """\
import json, os, runpy, sys
import anchor_pilot as ap
from anchor_pilot import events as ev

spec = json.load(open(os.environ["ANCHOR_PILOT_SPEC"]))
if spec["role"] == "resume" and os.environ.get("FORGE") == "1":
    # Restore all but the optimizer, and print the reference's digests and step lines instead of its own.
    with open(os.path.join(os.path.dirname(spec["events"]), "reference.events.jsonl")) as f:
        ref = [json.loads(line) for line in f]
    saves = {e["step"]: e["components"] for e in ref if e["type"] == "digests" and e["when"] == "save"}
    steps = {e["step"]: e for e in ref if e["type"] == "step"}
    restore, emit = ap.Pilot.restore, ev.EventLog.emit

    def restore_without_optimizer(self, skip=()):
        self.check_restore = False
        return restore(self, skip=["optimizer"])

    def forged(self, type_, **fields):
        if type_ == "digests" and fields.get("when") in ("restore", "save"):
            fields["components"] = saves[min(saves) if fields["when"] == "restore" else fields["step"]]
        elif type_ == "step" and fields["step"] in steps:
            fields = {k: v for k, v in steps[fields["step"]].items() if k not in ("type", "rank", "time")}
        return emit(self, type_, **fields)

    ap.Pilot.restore, ev.EventLog.emit = restore_without_optimizer, forged
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""

    def test_printed_lines_that_contradict_the_committed_checkpoint_fail(self):
        """Issue 43.1: a worker B that restores all but the optimizer and prints the reference's digests and
        step lines would match on its lines alone; its save of K+R pins other files. The cross-check names
        the components (exit 3). Its negative control: the same wrapper printing its own lines passes."""
        d = self.example("minimal")
        with open(os.path.join(d, "forge.py"), "w") as f:
            f.write(self.FORGER)
        cmd = "program.command=[python3, forge.py]"
        proc, report, _ = self.pilot("minimal", cmd, run="honest", FORGE="0")
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        cross = report["cross_check"]
        self.assertEqual([(s["worker"], s["step"], s["compared"], s["contradictions"]) for s in cross["saves"]],
                         [("worker A", 10, 5, []), ("worker B", 20, 5, [])])
        self.assertEqual([s["status"] for s in report["stages"] if s["stage"] == "cross_check"], ["passed"])
        proc, report, run = self.pilot("minimal", cmd, run="forged", FORGE="1")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["verdict"], "match")  # on the printed lines alone, it would pass
        self.assertIn("what your program printed contradicts the checkpoint it committed: worker B printed the "
                      "model at its save of step 20 as ", proc.stderr)
        (b,) = [s for s in report["cross_check"]["saves"] if s["worker"] == "worker B"]
        self.assertEqual(sorted(c["component"] for c in b["contradictions"]), ["model", "optimizer"])
        self.assertEqual([c["file"] for c in b["contradictions"] if c["component"] == "optimizer"],
                         ["optimizer.safetensors"])
        self.assertEqual([s["status"] for s in report["stages"] if s["stage"] == "cross_check"], ["failed"])
        self.assertEqual((report["status"], report["exit_code"]), ("failed", 3))  # signed as what it is

    def test_a_component_the_helper_finds_not_restored_is_named(self):
        """A load_state_dict that restores nothing: the helper raises after loading (check_restore), having
        reported what it restored; the verdict names the component (exit 3), not a runtime failure."""
        d = self.example("minimal")
        with open(os.path.join(d, "train.py")) as f:
            src = f.read()
        self.assertIn('self.pos = state["pos"]', src)
        with open(os.path.join(d, "train.py"), "w") as f:
            f.write(src.replace('self.pos = state["pos"]', "pass  # forgets the cursor"))
        proc, report, _ = self.pilot("minimal")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"][0], "data", report["resume"])
        self.assertIn("after loading, the state of data differs from the checkpoint", proc.stderr)
        self.assertEqual([s["status"] for s in report["stages"] if s["stage"] == "resume"], ["failed"])

    def test_interrupted_and_timed_out(self):
        """SIGINT to anchor: the program gets SIGTERM (SIGKILL 10 s later if it ignores it), exit 130,
        the report says interrupted. A program past program.timeout_s is killed: exit 1."""
        self.example("minimal")
        with open(self.path("minimal", "stubborn.py"), "w") as f:
            f.write("import os, signal, time\n"
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "open('pid', 'w').write(str(os.getpid()))\n"
                    "time.sleep(120)\n")
        run = self.path("r-int")
        p = subprocess.Popen([BIN, "pilot", self.path("minimal", "pilot.yaml"), "--run-dir", run, "--set",
                              "program.command=[python3, stubborn.py]"], env=self.env, cwd=self.tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        pid_file = self.path("minimal", "pid")
        t0 = __import__("time").monotonic()
        while not os.path.exists(pid_file) and __import__("time").monotonic() - t0 < 60:
            __import__("time").sleep(0.05)
        __import__("time").sleep(0.2)
        p.send_signal(__import__("signal").SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        with open(os.path.join(run, "report.json")) as f:
            self.assertEqual(json.load(f)["status"], "interrupted")
        with open(pid_file) as f:
            self.assertFalse(os.path.exists("/proc/%s" % f.read()), "the program outlived the pilot")
        os.remove(pid_file)
        proc, report, _ = self.pilot("minimal", "program.command=[python3, -c, 'import time; time.sleep(60)']",
                                     "program.timeout_s=1", run="r-timeout")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("ran past program.timeout_s (1.0 s) and was killed", proc.stderr)

    def minimal_that_leaves_a_child_and_a_daemon(self):
        """A copy of examples/minimal whose every process first starts a `sleep 600` child in its own
        process group and a daemon that leaves it (fork, setsid, fork again); each leaves a file
        `child-PID` or `daemon-PID` beside train.py."""
        self.example("minimal")
        with open(self.path("minimal", "train.py")) as f:
            src = f.read()
        with open(self.path("minimal", "train.py"), "w") as f:
            f.write("import os as _os, subprocess as _sp\n"
                    "_here = _os.path.dirname(_os.path.abspath(__file__))\n"
                    "_child = _sp.Popen(['sleep', '600'])\n"
                    "open(_os.path.join(_here, 'child-%d' % _child.pid), 'w').close()\n"
                    "if _os.fork() == 0:\n"
                    "    _os.setsid()\n"
                    "    if _os.fork() == 0:\n"
                    "        open(_os.path.join(_here, 'daemon-%d' % _os.getpid()), 'w').close()\n"
                    "        _os.execvp('sleep', ['sleep', '600'])\n"
                    "    _os._exit(0)\n"
                    "_os.wait()\n" + src)

    def test_nothing_the_program_starts_outlives_the_pilot(self):
        """Each process of the program starts a child that stays in its process group and a daemon that
        leaves it (fork, setsid, fork again): once the pilot has passed, none is left running (the rank's
        process group is killed when it ends; the daemon, reparented to anchor, its subreaper, is ended
        too). Each would otherwise sleep for 10 minutes."""
        self.minimal_that_leaves_a_child_and_a_daemon()
        proc, report, _ = self.pilot("minimal")
        self.assertMatch(proc, report)
        pids = [int(n.split("-")[1]) for n in os.listdir(self.path("minimal")) if n.startswith(("child-", "daemon-"))]
        self.assertGreaterEqual(len(pids), 4, "worker A and worker B each started two")
        left = []
        for pid in pids:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if f.read().startswith(b"sleep"):
                        left.append(pid)
            except FileNotFoundError:
                pass
        self.assertEqual(left, [], "still running after the pilot")
        with open(os.path.join(self.path("run"), "events.jsonl")) as f:
            ended = [json.loads(l) for l in f if '"orphans_ended"' in l]
        self.assertTrue(ended and all(e["count"] >= 1 for e in ended), ended)
        self.assertIn("process(es) the program left running after its ranks ended", proc.stderr)

    def test_nothing_the_program_starts_outlives_a_killed_pilot(self):
        """anchor itself SIGKILLed while the program runs: its ranks die with it (PR_SET_PDEATHSIG) and
        the sentinel, which outlives the pilot, ends what they started, a setsid'd daemon included
        (common/sentinel.hpp). A process started beside the pilot, not by it, is left alone."""
        import signal
        import time
        self.minimal_that_leaves_a_child_and_a_daemon()
        beside = subprocess.Popen(["sleep", "600"], env=self.env)
        self.addCleanup(beside.wait)
        self.addCleanup(beside.kill)
        p = subprocess.Popen([self.BIN, "pilot", self.path("minimal", "pilot.yaml"), "--run-dir", self.path("run")],
                             env=self.env, cwd=self.tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        started = lambda: [n for n in os.listdir(self.path("minimal")) if n.startswith(("child-", "daemon-"))]
        while len(started()) < 2 and time.monotonic() - t0 < 120 and p.poll() is None:
            time.sleep(0.02)
        self.assertEqual(len(started()), 2, "worker A started its child and its daemon before anchor ended")
        p.kill()
        p.wait(timeout=30)

        def sleeping(pid):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    return f.read().startswith(b"sleep")
            except (FileNotFoundError, ProcessLookupError):
                return False
        pids = [int(n.split("-")[1]) for n in started()]
        t0 = time.monotonic()
        while any(sleeping(pid) for pid in pids) and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        self.assertEqual([pid for pid in pids if sleeping(pid)], [], "still running after anchor was SIGKILLed")
        self.assertIsNone(beside.poll(), "a process the pilot did not start was ended")

    def test_a_program_that_does_not_speak_the_protocol(self):
        self.example("minimal")
        proc, report, _ = self.pilot("minimal", "program.command=[no-such-interpreter-xyz, train.py]", run="r1")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("program.command[0] 'no-such-interpreter-xyz' is not an executable in PATH", proc.stderr)
        # With program.env's PATH, that PATH is where the program's interpreter is looked up.
        proc, report, _ = self.pilot("minimal", "program.env=[PATH=%s]" % self.path("nowhere"), run="r1b")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("program.command[0] 'python3' is not an executable in program.env's PATH", proc.stderr)
        proc, report, _ = self.pilot("minimal", "program.command=[python3, -c, 'print(1)']", run="r2")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("before its kill window", proc.stderr)
        self.assertEqual(report["status"], "failed")
        proc, report, _ = self.pilot("minimal", "program.command=[python3, -c, 'import sys; sys.exit(5)']", run="r3")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("worker A exited with status 5", proc.stderr)
        # A worker B that exits 0 at once: a program that stopped early (exit 1), not a resume that diverged.
        with open(self.path("minimal", "early.py"), "w") as f:
            f.write("import json, os, runpy, sys\n"
                    "if json.load(open(os.environ['ANCHOR_PILOT_SPEC']))['role'] == 'resume':\n"
                    "    sys.exit(0)\n"
                    "runpy.run_path('train.py', run_name='__main__')\n")
        proc, report, _ = self.pilot("minimal", "program.command=[python3, early.py]", run="r3b")
        self.assertEqual(proc.returncode, 1, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("worker B ended (status 0) before it restored a checkpoint or ran a step", proc.stderr)
        # A line that is not the protocol ends the pilot at once, and no rank is left running.
        with open(self.path("minimal", "garbage.py"), "w") as f:
            f.write("import json, os, time\n"
                    "open('pid', 'w').write(str(os.getpid()))\n"
                    "spec = json.load(open(os.environ['ANCHOR_PILOT_SPEC']))\n"
                    "open(spec['events'], 'w').write('{oops\\n')\n"
                    "time.sleep(120)\n")
        t0 = __import__("time").monotonic()
        proc, report, _ = self.pilot("minimal", "program.command=[python3, garbage.py]", run="r4")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("reference.events.jsonl:1: not a JSON line", proc.stderr)
        self.assertLess(__import__("time").monotonic() - t0, 60)
        with open(self.path("minimal", "pid")) as f:
            pid = int(f.read())
        self.assertFalse(os.path.exists("/proc/%d" % pid) and "zombie" not in open("/proc/%d/status" % pid).read(),
                         "the program is still running")
        # A program that runs past stop_at, or floods the events file, is stopped naming why.
        step = '{"type": "step", "rank": 0, "time": 0, "step": %d, "loss": 1.0, "grad_norm": 1.0, "lr": 0.1}\n'
        # Or valid lines few enough but too large (issue 43.7: 360 MB of them took the supervisor to 2 GB):
        # 20 steps of 1 MiB each past the 16 MiB + 64 KiB a step a pilot of 20 steps may write.
        big = "[S.replace('}', ', \"pad\": \"' + 'x' * (1 << 20) + '\"}') % i for i in range(1, 21)]"
        for name, lines, says in (("past.py", "[S % (spec['stop_at'] + 1)]", "reported step 21, past step 20"),
                                  ("flood.py", "[S % 1] * 100001", "more than 100000 lines"),
                                  ("large.py", big, "more than the 17 MiB a pilot of this length writes")):
            with open(self.path("minimal", name), "w") as f:
                f.write("import json, os, time\n"
                        "S = %r\n"
                        "spec = json.load(open(os.environ['ANCHOR_PILOT_SPEC']))\n"
                        "open(spec['events'], 'w').write(''.join(%s))\n"
                        "time.sleep(120)\n" % (step, lines))
            t0 = __import__("time").monotonic()
            proc, report, _ = self.pilot("minimal", "program.command=[python3, %s]" % name, run="r-" + name)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertIn(says, proc.stderr)
            self.assertLess(__import__("time").monotonic() - t0, 60)

    def test_paths_that_are_not_utf8(self):
        """The protocol carries paths as JSON text. A run directory that is not UTF-8 is refused before the
        program starts (exit 2; it used to be told a changed path and wait until program.timeout_s); a
        program whose own directory is not UTF-8 is refused by the helper, naming it, not by a line anchor
        cannot parse (tests.test_errors: the helper's lines stay UTF-8 whatever bytes a message holds)."""
        self.example("minimal")
        tmp = os.path.realpath(self.tmp).encode()  # as anchor and the helper name it
        bad = os.path.join(tmp, b"r\xe9")
        t0 = __import__("time").monotonic()
        proc = subprocess.run([BIN.encode(), b"pilot", self.path("minimal", "pilot.yaml").encode(), b"--run-dir", bad],
                              env=self.env, cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
        self.assertIn(b"the run directory " + tmp + b"/r\\xe9 is not UTF-8", proc.stderr)
        self.assertIn(b"pass --run-dir whose path is UTF-8", proc.stderr)
        self.assertLess(__import__("time").monotonic() - t0, 60)
        # The program in a directory that is not UTF-8, reached through a link from a program.cwd that is.
        src = os.path.join(tmp, b"caf\xe9")
        shutil.copytree(self.path("minimal").encode(), src)
        os.symlink(src, self.path("minimal", "link").encode())
        proc, _, _ = self.pilot("minimal", "program.command=[python3, link/train.py]", run="r-src")
        proc.stderr = proc.stderr.encode("utf-8")
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn(b"the program's directory " + tmp + b"/caf\\xe9 is not UTF-8", proc.stderr)
        self.assertNotIn(b"not a JSON line", proc.stderr)


if __name__ == "__main__":
    unittest.main()
