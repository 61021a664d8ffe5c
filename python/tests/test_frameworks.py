"""The framework integrations of anchor_pilot (docs/program.md), each piloted
with the framework's own checkpoints and resume: examples/hf-trainer (a
transformers Trainer, anchor_pilot.hf.PilotCallback), examples/lightning (a
PyTorch Lightning Trainer, anchor_pilot.lightning.PilotCallback),
examples/accelerate (Accelerator.save_state/load_state/skip_first_batches,
the observed Pilot), examples/fsdp-dcp (FSDP2 over 2 ranks, DCP checkpoints,
the observed Pilot). Each example matches
bitwise on the CPU; each negative control, the thing users forget with that
framework, fails with exit 3 and the verdict naming it.

The frameworks are locked only in the torch 2.x environment
(requirements/torch2.txt): on the torch 1.13 line these tests skip, saying so.
"""
import importlib
import json
import os
import importlib.util
import unittest

from tests import support

BIN = support.ProgramPilotTest.BIN


def _missing(*modules):
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    return ("%s not importable by this Python: the frameworks are locked only in the torch 2.x environment "
            "(requirements/torch2.txt, scripts/torch2-python), not on the torch 1.13 line" % ", ".join(gone)
            if gone else None)


HF_MISSING = _missing("transformers", "accelerate")


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
@unittest.skipIf(HF_MISSING, HF_MISSING)
class HfTrainer(support.ProgramPilotTest):
    EXAMPLE = "hf-trainer"

    def test_the_trainers_own_checkpoints_resume_bitwise(self):
        proc, report, run_dir = self.pilot(self.EXAMPLE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "bitwise"))
        checks = {c["name"]: c for c in report["resume"]["checks"]}
        self.assertEqual(checks["restored step"]["detail"], "step 3")
        # model, optimizer, scheduler, the Trainer's step and epoch, and the RNG streams the Trainer saves
        self.assertEqual(checks["restored state"]["detail"], "7 components equal")
        self.assertEqual([c for c in checks if c.startswith("loss at step")], ["loss at step %d" % i for i in (4, 5, 6)])
        ck = report["program_checkpoints"]
        self.assertEqual(ck["torn"]["files"], ["checkpoint-6/config.json"])  # held as its first file appeared
        self.assertIn("checkpoint-6/trainer_state.json", ck["torn"]["missing"])
        (save,) = ck["saves"]
        self.assertIn("checkpoint-3/model.safetensors", [f["path"] for f in save["files"]])

    def test_a_train_without_resume_from_checkpoint_is_named(self):
        proc, report, _ = self.pilot(self.EXAMPLE, EXAMPLE_FORGET="resume")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"], ["checkpoint"])
        self.assertIn("the resumed run started from scratch: it reports no restore, although the reference's save of "
                      "step 3 finished", proc.stderr)
        self.assertIn("Trainer.train(resume_from_checkpoint=...)", proc.stderr)

    def test_resume_from_checkpoint_true_takes_the_torn_save(self):
        """The Trainer's own pick (the highest checkpoint-N) is the save anchor killed."""
        proc, report, _ = self.pilot(self.EXAMPLE, EXAMPLE_FORGET="marker")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("worker B: ValueError: Can't find a valid checkpoint at", proc.stderr)
        self.assertIn("anchor killed your save of step 6 inside: it holds checkpoint-6/config.json (0 bytes) and "
                      "lacks checkpoint-6/generation_config.json, checkpoint-6/model.safetensors", proc.stderr)
        self.assertIn("Your resume", proc.stderr)

    def test_a_save_strategy_that_skips_the_save_anchor_asked_for_is_named(self):
        proc, _, _ = self.pilot(self.EXAMPLE, EXAMPLE_FORGET="steps")
        self.assertNotEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("the Trainer skipped the save of step 6 that anchor asked for "
                      "(TrainingArguments.save_strategy='best' decides on its own)", proc.stderr)
        self.assertIn('pilot with save_strategy="steps"', proc.stderr)


PL_MISSING = _missing("pytorch_lightning")


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
@unittest.skipIf(PL_MISSING, PL_MISSING)
class Lightning(support.ProgramPilotTest):
    EXAMPLE = "lightning"

    def test_lightnings_own_checkpoints_resume_bitwise_mid_epoch(self):
        proc, report, _ = self.pilot(self.EXAMPLE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "bitwise"))
        checks = {c["name"]: c for c in report["resume"]["checks"]}
        self.assertEqual(checks["restored step"]["detail"], "step 3")
        ck = report["program_checkpoints"]
        (save,) = ck["saves"]
        self.assertEqual(save["step"], 3)
        self.assertIn("epoch=0-step=3.ckpt", [f["path"] for f in save["files"]])
        # Lightning writes each .ckpt elsewhere and renames it into place: the kill, at that rename, left the
        # step 6 file whole and last.ckpt still the save of step 3, which fit(ckpt_path="last") resumed.
        self.assertEqual(ck["torn"]["files"], ["epoch=0-step=6.ckpt"])
        self.assertEqual(ck["torn"]["missing"], [])
        self.assertGreater(ck["torn"]["bytes"][0], 0)

    def test_what_lightning_users_forget_is_named(self):
        for forget, cause, words in (
                ("rng", "rng.torch", "torch's CPU random generator: after your load its state differs from your "
                                     "save of step 3"),
                ("cursor", "data", "batch at step 4: the resumed run trains on other data than the reference"),
                ("generator", "rng", "rng at step 4: the state came back equal, but the random generators differ "
                                     "at the start of step 4"),
                ("resume", "checkpoint", "Trainer.fit(ckpt_path=...)")):
            with self.subTest(forget=forget):
                proc, report, _ = self.pilot(self.EXAMPLE, run="run-" + forget, EXAMPLE_FORGET=forget)
                self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
                self.assertEqual(report["resume"]["cause"][0], cause, report["resume"])
                self.assertIn(words, proc.stderr)


ACC_MISSING = _missing("accelerate")


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
@unittest.skipIf(ACC_MISSING, ACC_MISSING)
class Accelerate(support.ProgramPilotTest):
    EXAMPLE = "accelerate"

    def test_save_state_and_load_state_resume_bitwise(self):
        proc, report, _ = self.pilot(self.EXAMPLE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "bitwise"))
        ck = report["program_checkpoints"]
        self.assertEqual(ck["torn"]["files"], ["step_6/model.safetensors"])  # the first file save_state writes
        self.assertIn("step_6/custom_checkpoint_0.pkl", ck["torn"]["missing"])
        (save,) = ck["saves"]
        self.assertEqual(sorted(f["path"] for f in save["files"]),
                         ["step_3/%s" % f for f in ("custom_checkpoint_0.pkl", "model.safetensors", "optimizer.bin",
                                                    "random_states_0.pkl", "scheduler.bin")])

    def test_what_accelerate_users_forget_is_named(self):
        proc, report, _ = self.pilot(self.EXAMPLE, run="run-skip", EXAMPLE_FORGET="skip")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"][0], "data", report["resume"])
        self.assertIn("batch at step 4: the resumed run trains on other data than the reference", proc.stderr)
        proc, report, _ = self.pilot(self.EXAMPLE, run="run-marker", EXAMPLE_FORGET="marker")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("anchor killed your save of step 6 inside: it holds step_6/model.safetensors", proc.stderr)
        self.assertIn("Your resume read step_6/model.safetensors from that save", proc.stderr)


def _no_fsdp2():
    try:
        if not hasattr(importlib.import_module("torch.distributed.fsdp"), "fully_shard"):  # PyTorch 2.x's
            raise ImportError("torch.distributed.fsdp has no fully_shard")
        importlib.import_module("torch.distributed.checkpoint.state_dict")
    except Exception as e:  # noqa: BLE001 - torch 1.13 on Python 3.11 fails importing DCP with a ValueError
        return ("FSDP2 (torch.distributed.fsdp.fully_shard) and DCP's state_dict API do not import from this torch "
                "(%s: %s): they are PyTorch 2.x's" % (type(e).__name__, str(e)[:120]))
    return None


FSDP_MISSING = _no_fsdp2()


@unittest.skipUnless(BIN, "ANCHOR_BIN (the anchor binary to test) is not set; ctest sets it")
@unittest.skipIf(FSDP_MISSING, FSDP_MISSING)
class FsdpDcp(support.ProgramPilotTest):
    """examples/fsdp-dcp: FSDP2 over 2 ranks on the CPU (gloo), checkpointed with DCP by its own code."""
    EXAMPLE = "fsdp-dcp"

    def test_a_sharded_dcp_checkpoint_resumes_bitwise_on_two_ranks(self):
        proc, report, run_dir = self.pilot(self.EXAMPLE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "bitwise"))
        self.assertEqual([r["verdict"] for r in report["resume"]["per_rank"]], ["match", "match"])
        (save,) = report["program_checkpoints"]["saves"]  # DCP's files, each pinned by digest
        self.assertEqual([f["path"] for f in save["files"]], ["step_3/.metadata", "step_3/__0_0.distcp",
                                                              "step_3/__1_0.distcp"])
        torn = report["program_checkpoints"]["torn"]
        self.assertIn("step_6/.metadata", torn["missing"])  # DCP writes it last: the kill came before
        (dcp,) = save["dcp"]  # .metadata read as data (never unpickled): every item inside its shard
        self.assertEqual((dcp["dir"], dcp["ok"], [f["name"] for f in dcp["files"]]),
                         ("step_3", True, ["__0_0.distcp", "__1_0.distcp"]))
        self._check_verify(run_dir)

    def test_a_resume_at_another_world_size_is_resharded(self):
        """Saved by 2 ranks, resumed by 1: DCP reshards; the full state (DTensors gathered) is compared."""
        proc, report, _ = self.pilot(self.EXAMPLE, "pilot.resume_world_size=1")
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertIn("the program's resume at 1 rank restored the state its 2 ranks saved (resharded, bitwise in "
                      "full)", proc.stdout + proc.stderr)
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "resharded"))
        checks = {c["name"]: c for c in report["resume"]["checks"]}
        self.assertEqual(checks["restored state"]["detail"],
                         "3 components equal in full (each sharded tensor gathered), resharded from 2 to 1 ranks; "
                         "not compared: data, rng.numpy, rng.python, rng.torch (each rank's own, and the ranks are "
                         "not the same ranks)")
        self.assertTrue(checks["resumed steps"]["ok"])
        self.assertIn("not compared, the data is split over another number of ranks", checks["resumed steps"]["detail"])
        self.assertEqual([s["figures"]["ranks"] for s in report["stages"] if s["stage"] == "resume"], [1])
        # The negative control: a load that leaves the scheduler out is named at the reshard too.
        proc, report, _ = self.pilot(self.EXAMPLE, "pilot.resume_world_size=1", run="run-sched",
                                     EXAMPLE_FORGET="sched")
        self.assertEqual(proc.returncode, 3, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual(report["resume"]["cause"], ["scheduler"], report["resume"])
        self.assertIn("the scheduler: after your load its state differs from your save of step 3",
                      proc.stdout + proc.stderr)

    def test_the_helpers_own_checkpoints_save_the_sharded_state_through_dcp(self):
        """EXAMPLE_HELPER=1: the same model checkpointed by the helper (Pilot.maybe_save / restore), which sees
        the sharded model and saves the model and optimizer through DCP beside its own files. Bitwise on 2
        ranks, the step directory verified by anchor; a restore without the optimizer is named on both ranks;
        a resume at another world size is refused (each rank's RNG and data cursor are its own files)."""
        proc, report, run_dir = self.pilot(self.EXAMPLE, EXAMPLE_HELPER="1")
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual((report["resume"]["verdict"], report["resume"]["mode"]), ("match", "bitwise"))
        self.assertEqual([r["verdict"] for r in report["resume"]["per_rank"]], ["match", "match"])
        step = os.path.join(run_dir, "checkpoints", "step-00000003")
        self.assertTrue({".metadata", "__0_0.distcp", "__1_0.distcp", "scheduler.safetensors",
                         "rng-rank00001-of-00002.safetensors"} <= set(os.listdir(step)), os.listdir(step))
        with open(os.path.join(step, "state.json")) as f:
            state = json.load(f)
        self.assertEqual(state["dcp"], ["model", "optimizer"])
        self.assertEqual(state["components"]["model"], [".metadata"])
        v = self.anchor("checkpoint", "verify", step)  # DCP's files pinned in the helper's manifest
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        with open(os.path.join(step, "__1_0.distcp"), "r+b") as f:  # a flipped byte in rank 1's shard
            f.seek(64)
            b = f.read(1)
            f.seek(64)
            f.write(bytes([b[0] ^ 1]))
        v = self.anchor("checkpoint", "verify", step)
        self.assertEqual(v.returncode, 3, v.stdout + v.stderr)
        self.assertIn("__1_0.distcp", v.stdout + v.stderr)

        proc, report, _ = self.pilot(self.EXAMPLE, run="run-opt", EXAMPLE_HELPER="1", EXAMPLE_FORGET="optimizer")
        self.assertEqual(proc.returncode, 3, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertEqual(report["resume"]["cause"][0], "optimizer", report["resume"])
        self.assertIn("rank 1: optimizer", report["resume"]["cause"])

        proc, report, _ = self.pilot(self.EXAMPLE, "pilot.resume_world_size=1", run="run-reshard",
                                     EXAMPLE_HELPER="1")
        self.assertEqual(proc.returncode, 2, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertIn("each rank's RNG and data cursor", proc.stderr)

    def _check_verify(self, run_dir):
        """`anchor checkpoint verify` on the DCP directories the pilot left, against its report's digests."""
        step3, step6 = (os.path.join(run_dir, "checkpoints", s) for s in ("step_3", "step_6"))
        v = self.anchor("checkpoint", "verify", step3, "--against", run_dir)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        self.assertIn("ok (DCP checkpoint, 2 shard files", v.stdout)
        self.assertIn("every file's size and SHA-256 match the save of step 3 the report pins", v.stdout)
        v = self.anchor("checkpoint", "verify", step6)  # the resumed run's own save of step 6, whole
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        os.remove(os.path.join(step6, ".metadata"))  # as the kill left the reference's
        v = self.anchor("checkpoint", "verify", step6)
        self.assertEqual(v.returncode, 3, v.stdout + v.stderr)
        self.assertIn(".metadata is missing: DCP writes it last, so the save did not finish", v.stdout)
        shard = os.path.join(step3, "__1_0.distcp")
        with open(shard, "r+b") as f:  # one byte changed: the structure holds, the digest does not
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 1]))
        v = self.anchor("checkpoint", "verify", step3)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        v = self.anchor("checkpoint", "verify", step3, "--against", os.path.join(run_dir, "report.intoto.json"))
        self.assertEqual(v.returncode, 3, v.stdout + v.stderr)
        self.assertIn("__1_0.distcp: SHA-256 ", v.stdout)
        os.truncate(shard, 1000)  # cut short: the structure fails too
        v = self.anchor("checkpoint", "verify", step3, "--json")
        self.assertEqual(v.returncode, 3, v.stdout + v.stderr)
        (problem,) = json.loads(v.stdout)["problems"]
        self.assertRegex(problem, r"^__1_0\.distcp holds 1000 bytes, but '.*' ends at byte \d+ of it")

    def test_what_a_dcp_program_forgets_is_named(self):
        proc, report, _ = self.pilot(self.EXAMPLE, run="run-rng", EXAMPLE_FORGET="rng")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertEqual(report["resume"]["cause"][0], "rng.torch", report["resume"])
        self.assertIn("rank 1: rng.torch", report["resume"]["cause"])  # each rank's own stream, each named
        proc, report, _ = self.pilot(self.EXAMPLE, run="run-marker", EXAMPLE_FORGET="marker")
        self.assertEqual(proc.returncode, 3, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("No such file or directory: '%s'" % self.path("run-marker", "checkpoints", "step_6",
                                                                    ".metadata"), proc.stderr)
        self.assertIn("anchor killed your save of step 6 inside", proc.stderr)
        self.assertIn("lacks step_6/.metadata", proc.stderr)


if __name__ == "__main__":
    unittest.main()
