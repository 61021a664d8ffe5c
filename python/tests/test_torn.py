"""4. Torn saves and bad checkpoints.

A kill between the files of a save (the ANCHOR_PILOT_FAULT seam) leaves only
a .tmp- directory; restore ignores it and takes the older step. A committed
step with a corrupt byte is skipped with a reason naming the file.
"""
import os
import signal

import torch

from tests import support

import anchor_pilot as ap
from anchor_pilot import store



def tiny(root, **kw):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    return ap.Pilot(root, model=m, optimizer=opt, **kw), m, opt


def train_once(m, opt):
    loss = m(torch.randn(4, 3)).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


class Torn(support.TempDirTest):
    def test_kill_between_files_leaves_a_temp_dir_and_restore_takes_the_older_step(self):
        ck = self.path("ck")
        spec = support.write_spec(self.path("cut.spec.json"), checkpoint_dir=ck, save_at=[3, 6], stop_at=8,
                                  events=self.path("cut.jsonl"))
        p = support.run_py([support.TRAIN, spec], ANCHOR_PILOT_FAULT="after_file:optimizer.safetensors@6:sigkill")
        self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr)
        names = sorted(os.listdir(ck))
        self.assertEqual(names[0], "step-00000003")
        self.assertEqual(len(names), 2, names)
        self.assertTrue(names[1].startswith("step-00000006.tmp-"), names)
        self.assertEqual(sorted(os.listdir(os.path.join(ck, names[1]))), ["model.safetensors", "optimizer.safetensors"])
        v, skipped = store.newest(ck)
        self.assertEqual((v.step, skipped), (3, []))

        # A fresh process resumes from step 3 and repeats the cut run's steps 4-5 bitwise.
        res = support.write_spec(self.path("res.spec.json"), role="resume", checkpoint_dir=ck, stop_at=5,
                                 events=self.path("res.jsonl"))
        self.assertOk(support.run_py([support.TRAIN, res]))
        cut = {e["step"]: e["loss"] for e in support.read_lines(self.path("cut.jsonl")) if e["type"] == "step"}
        ev = support.read_lines(self.path("res.jsonl"))
        self.assertEqual([e["step"] for e in ev if e["type"] == "checkpoint" and e["phase"] == "end"], [3])
        got = {e["step"]: e["loss"] for e in ev if e["type"] == "step"}
        self.assertEqual(got, {4: cut[4], 5: cut[5]})
        self.assertEqual(ap.remove_stale_temps(ck), [names[1]])
        self.assertEqual(os.listdir(ck), ["step-00000003"])

    def test_kill_after_committed_before_rename_is_never_loaded(self):
        ck = self.path("ck")
        pid = os.fork()  # the child saves and dies at the fault point; no new interpreter to start
        if pid == 0:
            try:
                os.environ[store.FAULT_ENV] = "after_committed@2:sigkill"
                pilot, _, _ = tiny(ck)
                pilot.save(1)
                pilot.save(2)
            finally:
                os._exit(1)  # not reached when the fault fires
        _, status = os.waitpid(pid, 0)
        self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status)
        names = sorted(os.listdir(ck))
        self.assertEqual(names[0], "step-00000001")
        self.assertIn("COMMITTED", os.listdir(os.path.join(ck, names[1])))  # complete, but not placed
        self.assertTrue(names[1].startswith("step-00000002.tmp-"))
        pilot, _, _ = tiny(ck)
        self.assertEqual(pilot.restore(), 1)

    def test_fault_point_that_no_save_reaches_is_an_error(self):
        pilot, _, _ = tiny(self.path("ck"))
        os.environ[store.FAULT_ENV] = "after_manifst:exit"
        self.addCleanup(os.environ.pop, store.FAULT_ENV, None)
        with self.assertRaises(ap.CheckpointError) as cm:
            pilot.save(1)
        self.assertIn("point 'after_manifst' is never reached by this save", str(cm.exception))
        self.assertIn("after_manifest", str(cm.exception))
        self.assertFalse(os.path.exists(self.path("ck")))

    def test_corrupt_newest_step_is_skipped_with_the_file_named(self):
        ck = self.path("ck")
        pilot, m, opt = tiny(ck)
        train_once(m, opt)
        pilot.save(2)
        want = pilot.last_digests
        train_once(m, opt)
        d4 = pilot.save(4)
        rng = os.path.join(d4, "rng.safetensors")
        at = os.path.getsize(rng) - 5  # in the tensor data: only the digest can tell
        with open(rng, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x80]))
        events = self.path("ev.jsonl")
        fresh, _, _ = tiny(ck, events=events)
        self.assertEqual(fresh.restore(), 2)
        self.assertEqual(fresh.last_digests, want)
        [(path, problems)] = fresh.skipped
        self.assertEqual(path, d4)
        self.assertEqual(len(problems), 1, problems)
        self.assertRegex(problems[0], r"^rng\.safetensors: SHA-256 is [0-9a-f]{64}, manifest\.json says [0-9a-f]{64}$")
        skip = [e for e in support.read_lines(events) if e["type"] == "checkpoint" and e.get("phase") == "skip"]
        self.assertEqual([(e["dir"], e["problems"]) for e in skip], [(d4, problems)])

        # The torch-free CLI says the same.
        p = support.run_py(["-m", "anchor_pilot", "verify", d4])
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["%s: INVALID, 1 problems:" % d4, "  - " + problems[0]])
        p = support.run_py(["-m", "anchor_pilot", "verify", os.path.join(ck, "step-00000002")])
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "%s/step-00000002: ok (step 2)" % ck))

        # Asked for that step explicitly (the spec's "restore"), it is an error, not a fallback.
        explicit, _, _ = tiny(ck, restore=d4, role="resume")
        with self.assertRaises(ap.CheckpointError) as cm:
            explicit.restore()
        self.assertIn("restore %s: it does not verify: rng.safetensors: SHA-256 is" % d4, str(cm.exception))
        self.assertIn("hint: run `anchor checkpoint verify", str(cm.exception))

    def test_resave_of_a_step_replaces_it_atomically(self):
        ck = self.path("ck")
        pilot, m, opt = tiny(ck)
        pilot.save(2)
        first = pilot.last_digests
        train_once(m, opt)
        pilot.save(2)
        self.assertNotEqual(pilot.last_digests, first)
        self.assertEqual(os.listdir(ck), ["step-00000002"])
        v, _ = store.newest(ck)
        self.assertEqual(v.digests["model.safetensors"], pilot.last_digests["model"])
