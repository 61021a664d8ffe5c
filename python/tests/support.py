"""Shared helpers of the anchor_pilot tests (stdlib unittest only)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
TRAIN = os.path.join(HERE, "programs", "train_mlp.py")


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.pop("ANCHOR_PILOT_SPEC", None)
    e.pop("ANCHOR_PILOT_FAULT", None)
    e["OMP_NUM_THREADS"] = "1"
    e.update({k: v for k, v in extra.items() if v is not None})
    return e


def run_py(args, timeout=120, **extra):
    """Runs this interpreter with args; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable] + list(args), env=env(**extra), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def write_spec(path, **fields):
    spec = {"protocol": 1, "role": "reference", "run_dir": os.path.dirname(path), "checkpoint_dir": None,
            "save_at": [], "stop_at": 10, "restore": None, "seed": 7, "deterministic": False, "events": None}
    spec.update(fields)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def read_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="anchor-pilot-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def assertOk(self, proc, what="the child"):
        self.assertEqual(proc.returncode, 0, "%s failed (rc %s):\nstdout:\n%s\nstderr:\n%s"
                         % (what, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
