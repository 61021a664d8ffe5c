"""Every scheduler torch ships, through save, kill and restore (issue 42, item 4).

For each class of torch.optim.lr_scheduler (this torch's: 1.13 on the release
line, 2.x on torch2), tests/programs/train_mlp.py trains with it: a reference
run N steps; a run that saves at K and is SIGKILLed right after the save; a
fresh process that restores it and runs to N. Losses, learning rates and
every component's digest must equal the reference's bitwise. Torch 1.13's
OneCycleLR keeps a bound method in its state (anneal_func) and CyclicLR a
weak reference to one (_scale_fn_ref): the helper saves them by name and
restores the constructed scheduler's own. The negative control restores
without the scheduler, for every class: the comparison names it.
"""
import inspect
import signal
import subprocess
import sys

import torch

from tests import support

import anchor_pilot as ap

N, K = 12, 5


def scheduler_classes():
    L = torch.optim.lr_scheduler
    base = tuple(c for c in (getattr(L, "LRScheduler", None), getattr(L, "_LRScheduler", None), L.ReduceLROnPlateau)
                 if c is not None)
    return sorted(n for n, c in vars(L).items()
                  if inspect.isclass(c) and c.__module__ == L.__name__ and not n.startswith("_")
                  and issubclass(c, base) and c not in base[:2])


class EveryScheduler(support.TempDirTest):
    def spec(self, name, **fields):
        return support.write_spec(self.path(name + ".spec.json"), events=self.path(name + ".jsonl"),
                                  stop_at=N, **fields)

    def test_every_scheduler_resumes_bitwise_after_a_kill(self):
        names = scheduler_classes()
        self.assertGreaterEqual(len(names), 14, names)  # LambdaLR ... ReduceLROnPlateau: the list is torch's
        # The references, one process.
        refs = [self.spec("ref-" + n, checkpoint_dir=self.path("ref-ck-" + n), save_at=[K]) + ":sched=" + n
                for n in names]
        self.assertOk(support.run_py([support.TRAIN] + refs), "the references")
        # The interrupted runs, all at once, each killed right after its save at K.
        procs = {}
        for n in names:
            cut = self.spec("cut-" + n, checkpoint_dir=self.path("ck-" + n), save_at=[K])
            procs[n] = subprocess.Popen([sys.executable, support.TRAIN, cut + ":park:sched=" + n],
                                        env=support.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, universal_newlines=True)
        try:
            for n, proc in procs.items():
                line = proc.stdout.readline()
                self.assertEqual(line.strip(), "parked %d" % K, "%s: %s" % (n, line or proc.stderr.read()[-2000:]))
                proc.send_signal(signal.SIGKILL)
        finally:
            for proc in procs.values():
                proc.kill()
                proc.communicate(timeout=60)
        self.assertEqual({n: p.returncode for n, p in procs.items()}, {n: -signal.SIGKILL for n in names})
        # The resumes and the controls (without the scheduler), one process.
        args = []
        for n in names:
            args.append(self.spec("res-" + n, role="resume", checkpoint_dir=self.path("ck-" + n)) + ":sched=" + n)
            args.append(self.spec("no-" + n, role="resume", checkpoint_dir=self.path("ck-" + n)) +
                        ":skip=scheduler:sched=" + n)
        self.assertOk(support.run_py([support.TRAIN] + args), "the resumed runs")
        for n in names:
            with self.subTest(scheduler=n):
                ref = ap.read_events(self.path("ref-%s.jsonl" % n))
                res = ap.read_events(self.path("res-%s.jsonl" % n))
                self.assertIsNone(ap.compare_events(ref, res))
                lrs = {e["step"]: e["lr"] for e in ref if e["type"] == "step"}
                self.assertEqual({e["step"]: e["lr"] for e in res if e["type"] == "step"},
                                 {s: lr for s, lr in lrs.items() if s > K})
                self.assertGreater(len(set(lrs.values())), 1, "%s never changed the lr: the test shows nothing" % n)
                m = ap.compare_events(ref, ap.read_events(self.path("no-%s.jsonl" % n)))
                self.assertIsNotNone(m, "restoring without the scheduler went unnoticed")
                self.assertEqual((m.kind, m.component), ("digest", "scheduler"), str(m))


class _Thing:
    def a(self):
        pass

    def b(self):
        pass


class OwnValues(support.TempDirTest):
    """state.mark_own / fill_own on their own: what 1.13's schedulers need, on any torch."""

    def test_an_own_method_goes_by_name_and_comes_back_as_the_new_objects(self):
        import json
        import weakref
        from anchor_pilot import state as stt
        old, new = _Thing(), _Thing()
        saved = {"f": old.a, "w": weakref.WeakMethod(old.a), "n": [old.b], "x": 1}
        tensors = {}
        enc = json.loads(stt.to_json(stt.encode(stt.mark_own(saved), tensors, what="scheduler")))
        self.assertEqual(enc["f"], {"__own__": {"name": "a", "weak": False}})
        self.assertEqual(enc["w"], {"__own__": {"name": "a", "weak": True}})
        back = stt.fill_own(stt.decode(enc, tensors, "x"), {"f": new.a, "w": weakref.WeakMethod(new.a),
                                                            "n": [new.b], "x": 1}, "scheduler")
        self.assertEqual(back["f"], new.a)
        self.assertEqual(back["w"](), new.a)
        self.assertEqual((back["n"][0], back["x"]), (new.b, 1))
        # The control: constructed otherwise (another method in that place), the restore names it.
        with self.assertRaises(ap.RestoreError) as cm:
            stt.fill_own(stt.decode(enc, tensors, "x"), {"f": new.b, "w": weakref.WeakMethod(new.a), "n": [new.b]},
                         "scheduler")
        self.assertIn("scheduler.f was saved as the object's own method a, but the one constructed here has b",
                      str(cm.exception))


if __name__ == "__main__":
    import unittest
    unittest.main()
