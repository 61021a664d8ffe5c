"""5. Errors say what, why and what to do; the spec is checked strictly."""
import json
import os

import torch

from tests import support

import anchor_pilot as ap
from anchor_pilot import store


def parts(d_in=3, d_out=2):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(d_in, d_out))
    return m, torch.optim.AdamW(m.parameters(), lr=0.1)


def step(m, opt):
    loss = m(torch.randn(2, m[0].in_features)).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


class Restore(support.TempDirTest):
    def test_missing_component(self):
        m, _ = parts()
        ap.Pilot(self.path("ck"), model=m).save(1)
        m, opt = parts()
        with self.assertRaises(ap.RestoreError) as cm:
            ap.Pilot(self.path("ck"), model=m, optimizer=opt).restore()
        self.assertEqual(str(cm.exception),
                         "restore %s: it has no optimizer state (optimizer.safetensors), which this Pilot was given"
                         "\nhint: create the Pilot with the same components as the run that saved it "
                         "(model, optimizer, scheduler, scaler, data)" % self.path("ck", "step-00000001"))

    def test_component_the_pilot_was_not_given(self):
        m, opt = parts()
        sched = torch.optim.lr_scheduler.StepLR(opt, 1)
        ap.Pilot(self.path("ck"), model=m, optimizer=opt, scheduler=sched).save(1)
        m, opt = parts()
        with self.assertRaises(ap.RestoreError) as cm:
            ap.Pilot(self.path("ck"), model=m, optimizer=opt).restore()
        self.assertIn("it holds scheduler state, which this Pilot was not given", str(cm.exception))

    def test_shape_mismatch(self):
        m, opt = parts()
        step(m, opt)
        ap.Pilot(self.path("ck"), model=m, optimizer=opt).save(1)
        m, opt = parts(d_out=5)
        with self.assertRaises(ap.RestoreError) as cm:
            ap.Pilot(self.path("ck"), model=m, optimizer=opt).restore()
        msg = str(cm.exception)
        self.assertIn("restore model from %s/model.safetensors: the checkpoint does not fit the model: 0.weight has shape [2, 3] in the "
                      "checkpoint, [5, 3] in the model; 0.bias has shape [2] in the checkpoint, [5] in the model"
                      % self.path("ck", "step-00000001"), msg)
        self.assertIn("hint: build the same model (architecture, sizes, dtype)", msg)

    def test_optimizer_state_shape_mismatch(self):
        m, opt = parts()
        step(m, opt)
        ap.Pilot(self.path("ck"), model=m, optimizer=opt).save(1)
        # Same model, an optimizer over the parameters in the other order.
        m, _ = parts()
        opt = torch.optim.AdamW([m[0].bias, m[0].weight], lr=0.1)
        with self.assertRaises(ap.RestoreError) as cm:
            ap.Pilot(self.path("ck"), model=m, optimizer=opt).restore()
        self.assertIn("restore optimizer from", str(cm.exception))
        self.assertIn("state 0.exp_avg has shape [2, 3], the parameter [2]", str(cm.exception))

    def test_resume_without_any_checkpoint(self):
        m, _ = parts()
        with self.assertRaises(ap.CheckpointError) as cm:
            ap.Pilot(self.path("none"), model=m, role="resume").restore()
        self.assertEqual(str(cm.exception), "resume from %s: no step directory verifies (there are none)\n"
                         "hint: a resume run needs a committed checkpoint; check the reference run's save"
                         % self.path("none"))
        # Standalone, nothing to restore is a start from step 0.
        self.assertEqual(ap.Pilot(self.path("none"), model=m).restore(), 0)

    def test_checkpoint_not_written_by_the_helper(self):
        sv = store.Save(self.path("ck"), 3)
        sv.begin([])
        sv.commit({"format_version": 1})
        m, _ = parts()
        with self.assertRaises(ap.RestoreError) as cm:
            ap.Pilot(self.path("ck"), model=m).restore()
        self.assertIn("state.json is not anchor_pilot's (format null)", str(cm.exception))

    def test_unstorable_state_names_the_path(self):
        m, _ = parts()
        p = ap.Pilot(self.path("ck"), model=m, data=(lambda: {"sampler": {"fn": print}}, lambda s: None))
        with self.assertRaises(ap.CheckpointError) as cm:
            p.save(1)
        self.assertIn("encode data: 'sampler.fn' holds a builtin_function_or_method", str(cm.exception))
        self.assertFalse(os.path.exists(self.path("ck")))

    def test_a_full_disk_names_the_file_it_was_writing(self):
        """ENOSPC from a write carries no file name: the error names the file the save was writing, and the
        save leaves no step (nor its temporary directory) behind."""
        import errno
        m, _ = parts()
        p = ap.Pilot(self.path("ck"), model=m)
        real = store._write_file

        def full(path, parts_):
            raise OSError(errno.ENOSPC, "No space left on device")
        store._write_file = full
        try:
            with self.assertRaises(ap.CheckpointError) as cm:
                p.save(1)
        finally:
            store._write_file = real
        self.assertRegex(str(cm.exception), r"step-00000001\.tmp-[0-9a-f]+/model\.safetensors: No space left on device")
        self.assertEqual(os.listdir(self.path("ck")), [])

    def test_error_line_when_the_loop_raises(self):
        m, _ = parts()
        with self.assertRaises(ZeroDivisionError):
            with ap.Pilot(self.path("ck"), model=m, events=self.path("ev.jsonl")):
                1 / 0
        last = support.read_lines(self.path("ev.jsonl"))[-1]
        self.assertEqual((last["type"], last["message"]), ("error", "ZeroDivisionError: division by zero"))

    def test_unknown_skip_component(self):
        m, _ = parts()
        with self.assertRaises(ap.PilotError) as cm:
            ap.Pilot(self.path("ck"), model=m).restore(skip=("optimiser",))
        self.assertIn("unknown component 'optimiser' in skip", str(cm.exception))


class Deterministic(support.TempDirTest):
    def setUp(self):
        super().setUp()
        saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
                 torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))

        def restore():
            torch.use_deterministic_algorithms(saved[0])
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
            if saved[3] is None:
                os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
            else:
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[3]
        self.addCleanup(restore)

    def test_sets_every_flag(self):
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = True
        ap.set_deterministic()
        self.assertTrue(torch.are_deterministic_algorithms_enabled())
        self.assertEqual(os.environ["CUBLAS_WORKSPACE_CONFIG"], ":4096:8")
        self.assertEqual((torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark), (True, False))

    def test_refuses_another_cublas_workspace(self):
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"
        with self.assertRaises(ap.PilotError) as cm:
            ap.set_deterministic()
        self.assertEqual(str(cm.exception), "deterministic mode: CUBLAS_WORKSPACE_CONFIG is ':0:0'\nhint: unset it or "
                         "set :4096:8 (or :16:8); other values make cuBLAS nondeterministic")


class Spec(support.TempDirTest):
    def spec(self, **fields):
        return support.write_spec(self.path("spec.json"), checkpoint_dir="ck", events="ev.jsonl", **fields)

    def test_valid_spec_resolves_relative_paths(self):
        s = ap.Spec.from_file(self.spec(save_at=[4, 2, 4], role="resume", restore="ck/step-00000002",
                                        deterministic=True))
        self.assertEqual((s.role, s.save_at, s.stop_at, s.seed, s.deterministic), ("resume", [2, 4], 10, 7, True))
        self.assertEqual(s.checkpoint_dir, self.path("ck"))
        self.assertEqual(s.restore, self.path("ck", "step-00000002"))

    def test_a_path_that_is_not_utf8_is_taken_by_its_bytes(self):
        raw = os.fsencode(self.path("ck")) + b"-\xff"
        s = ap.Spec.from_file(self.spec(checkpoint_dir_hex=raw.hex(), start_from="init"))
        self.assertEqual(os.fsencode(s.checkpoint_dir), raw)  # the exact bytes, as the OS takes them
        for bad, said in ((dict(checkpoint_dir_hex="zz"), "'checkpoint_dir_hex' is \"zz\", expected the path's bytes"),
                          (dict(checkpoint_dir_hex=""), "'checkpoint_dir_hex' is \"\", expected the path's bytes"),
                          (dict(restore_hex="2f"), "'restore_hex' is given but 'restore' is null"),
                          (dict(start_from="latest"), "'start_from' is \"latest\", expected \"init\"")):
            with self.assertRaises(ap.SpecError) as cm:
                ap.Spec.from_file(self.spec(**bad))
            self.assertIn(said, str(cm.exception))

    def test_unknown_protocol_version(self):
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(protocol=2))
        self.assertEqual(str(cm.exception),
                         "read pilot spec %s: unknown protocol version 2 (this anchor_pilot speaks protocol 1)\n"
                         "hint: install the anchor_pilot that ships with this anchor (pip install <anchor>/python)"
                         % self.path("spec.json"))

    def test_spec_file_missing(self):
        missing = self.path("nope.json")
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_env({"ANCHOR_PILOT_SPEC": missing})
        self.assertEqual(str(cm.exception),
                         "read pilot spec %s: the file does not exist\nhint: ANCHOR_PILOT_SPEC names the spec file "
                         "anchor writes for the worker; run the program through anchor, or unset ANCHOR_PILOT_SPEC "
                         "to run it standalone" % missing)
        self.assertIsNone(ap.Spec.from_env({}))

    def test_every_problem_is_reported_at_once(self):
        path = self.spec(role="resumed", stop_at=0, save_at=[1, "2"], seeds=3, deterministic="yes")
        with open(path) as f:
            d = json.load(f)
        del d["events"]
        with open(path, "w") as f:
            json.dump(d, f)
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(path)
        msg = str(cm.exception)
        self.assertIn(": 6 problems: unknown key 'seeds'; missing key 'events'; 'role' is \"resumed\", expected "
                      "\"reference\" or \"resume\" or \"probe\"; 'save_at' is [1, \"2\"], expected a list of integers >= 1; "
                      "'stop_at' is 0, expected an integer >= 1; 'deterministic' is \"yes\", expected true or false",
                      msg)

    def test_not_json(self):
        with open(self.path("spec.json"), "w") as f:
            f.write("{protocol: 1}")
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.path("spec.json"))
        self.assertIn("not valid JSON", str(cm.exception))

    def test_reference_with_restore_is_refused(self):
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(restore="ck/step-00000001"))
        self.assertIn("'restore' is \"ck/step-00000001\" but role is \"reference\"", str(cm.exception))

    def test_reshard_is_two_world_sizes(self):
        s = ap.Spec.from_file(self.spec(reshard={"from": 2, "to": 1}))
        self.assertEqual(s.reshard, {"from": 2, "to": 1})
        self.assertIsNone(ap.Spec.from_file(self.spec()).reshard)
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(reshard={"from": 2}))
        self.assertIn("'reshard' is {\"from\": 2}, expected an object {\"from\": int >= 1, \"to\": int >= 1}",
                      str(cm.exception))

    def test_probe_needs_its_shape_and_only_a_probe_has_one(self):
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(role="probe"))
        self.assertIn("'probe' is given exactly when role is \"probe\" (role \"probe\", probe null)", str(cm.exception))
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(probe={"micro_batch": 2, "seq_len": 8}))
        self.assertIn("(role \"reference\", probe {", str(cm.exception))
        with self.assertRaises(ap.SpecError) as cm:
            ap.Spec.from_file(self.spec(role="probe", probe={"micro_batch": 0, "seq_len": 8}))
        self.assertIn("'probe' is {\"micro_batch\": 0, \"seq_len\": 8}, expected an object", str(cm.exception))
        s = ap.Spec.from_file(self.spec(role="probe", probe={"micro_batch": 2, "seq_len": 8}))
        self.assertEqual((s.role, s.probe), ("probe", {"micro_batch": 2, "seq_len": 8}))

    def test_shape_returns_the_probe_shape_under_a_probe_and_checks_its_arguments(self):
        from anchor_pilot import declare as sh
        sh._declared, sh._pilot_made = None, False
        self.addCleanup(setattr, sh, "_pilot_made", False)
        self.addCleanup(setattr, sh, "_declared", None)
        self.assertEqual(ap.shape(4, 64, n_layer=2, n_embd=32), (4, 64))  # standalone: the given shape
        self.assertEqual(sh._declared["probe"], True)
        os.environ["ANCHOR_PILOT_SPEC"] = self.spec(role="probe", probe={"micro_batch": 2, "seq_len": 16})
        try:
            self.assertEqual(ap.shape(4, 64), (2, 16))
            with self.assertRaises(ap.PilotError) as cm:
                ap.shape(4, 64, probe=False)
            self.assertIn("the program declared probe=False", str(cm.exception))
        finally:
            del os.environ["ANCHOR_PILOT_SPEC"]
        for bad, what in (({"micro_batch": 0}, "micro_batch is 0"), ({"seq_len": True}, "seq_len is True"),
                          ({"precision": "fp8"}, "precision is 'fp8'"),
                          ({"flops_per_token": -1}, "flops_per_token is -1"),
                          ({"flops_per_token": float("inf")}, "flops_per_token is inf"),
                          ({"seq_len": 1 << 40}, "seq_len is 1099511627776")):
            args = dict({"micro_batch": 4, "seq_len": 64}, **bad)
            with self.assertRaises(ap.PilotError) as cm:
                ap.shape(**args)
            self.assertIn(what, str(cm.exception))
        m, opt = parts()
        ap.Pilot(self.path("ck"), model=m, optimizer=opt).close()
        with self.assertRaises(ap.PilotError) as cm:
            ap.shape(4, 64)
        self.assertIn("called after the Pilot was made", str(cm.exception))

    def test_from_env_uses_the_spec_over_the_standalone_arguments(self):
        path = self.spec(save_at=[3], stop_at=5)
        m, opt = parts()
        os.environ["ANCHOR_PILOT_SPEC"] = path
        self.addCleanup(os.environ.pop, "ANCHOR_PILOT_SPEC", None)
        p = ap.Pilot.from_env(model=m, optimizer=opt, checkpoint_dir=self.path("other"), stop_at=99)
        self.assertEqual((p.checkpoint_dir, p.stop_at, p.save_at), (self.path("ck"), 5, [3]))
        p.close()
        hello = support.read_lines(self.path("ev.jsonl"))[0]
        self.assertEqual((hello["type"], hello["protocol"], hello["rank"], hello["role"]), ("hello", 1, 0, "reference"))
        self.assertEqual(sorted(hello["versions"]), ["cuda", "cudnn", "nccl", "python", "torch"])
        self.assertEqual(hello["versions"]["torch"], torch.__version__)


class Lines(support.TempDirTest):
    def test_a_line_is_utf8_whatever_bytes_a_string_holds(self):
        """A message naming a file whose name is not UTF-8 (a surrogate-escaped str) is written with the byte
        as \\xNN: JSON holds no lone surrogate, and anchor would refuse the whole line."""
        from anchor_pilot import events
        log = events.EventLog(self.path("e.jsonl"), 0)
        log.emit("error", message=os.fsdecode(b"cannot open /x/caf\xe9"), kind="OSError", **{os.fsdecode(b"k\xff"): 1})
        log.close()
        with open(self.path("e.jsonl"), "rb") as f:
            line = f.read().decode("utf-8")  # strict: raises on a byte that is not UTF-8
        self.assertNotIn("\\ud", line)
        e = json.loads(line)
        self.assertEqual(e["message"], "cannot open /x/caf\\xe9")
        self.assertEqual(e["k\\xff"], 1)
