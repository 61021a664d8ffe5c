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


class ProgramPilotTest(TempDirTest):
    """`anchor pilot` (ANCHOR_BIN) on copies of the examples/ programs, with
    `python3` in PATH this test's interpreter (torch 1.13 or 2.x)."""

    BIN = os.environ.get("ANCHOR_BIN")
    EXAMPLES = os.path.join(REPO, "examples")

    def setUp(self):
        super().setUp()
        bindir = self.path("bin")
        os.mkdir(bindir)
        wrapper = os.path.join(bindir, "python3")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
        os.chmod(wrapper, 0o700)
        self.env = env(PATH=bindir + os.pathsep + os.environ.get("PATH", ""))

    def example(self, name):
        dst = self.path(name)
        shutil.copytree(os.path.join(self.EXAMPLES, name), dst)
        return dst

    def anchor(self, *args, timeout=300, **extra_env):
        return subprocess.run([self.BIN] + list(args), env=dict(self.env, **extra_env), cwd=self.tmp,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout)

    def pilot(self, name, *sets, run="run", **extra_env):
        d = self.example(name) if not os.path.isdir(self.path(name)) else self.path(name)
        run_dir = self.path(run)
        args = ["pilot", os.path.join(d, "pilot.yaml"), "--run-dir", run_dir, "--junit", run_dir + ".junit.xml"]
        for s in sets:
            args += ["--set", s]
        proc = self.anchor(*args, **extra_env)
        report = None
        if os.path.exists(os.path.join(run_dir, "report.json")):
            with open(os.path.join(run_dir, "report.json")) as f:
                report = json.load(f)
        return proc, report, run_dir

    def edit(self, path, old, new):
        """Replaces `old` (which must be there) with `new` in a copied example's file."""
        with open(path) as f:
            src = f.read()
        self.assertIn(old, src)
        with open(path, "w") as f:
            f.write(src.replace(old, new))
