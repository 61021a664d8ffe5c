"""Two ranks on the CPU (gloo), started like torchrun starts them: rank 0 writes
the shared files, each rank its rng/data file; a resume in two fresh processes
matches the reference per rank, and each rank gets its own RNG stream back."""
import json
import os
import socket
import subprocess
import sys
import time

from tests import support

import anchor_pilot as ap

DDP = os.path.join(support.HERE, "programs", "train_ddp.py")
EXCHANGE = os.path.join(support.HERE, "programs", "exchange.py")
WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TwoRanks(support.TempDirTest):
    def run_ranks(self, program, **env):
        """[(returncode, stdout, stderr)] of every rank of program."""
        port = str(free_port())
        procs = []
        for r in range(WORLD):
            procs.append(subprocess.Popen(
                [sys.executable, program],
                env=support.env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo", **env),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True))
        outs = []
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            outs.append((p.returncode, out, err))
        return outs

    def launch(self, spec):
        for r, (rc, _, err) in enumerate(self.run_ranks(DDP, ANCHOR_PILOT_SPEC=spec)):
            self.assertEqual(rc, 0, "rank %d failed:\n%s" % (r, err[-3000:]))

    def test_the_store_outlives_every_read_of_a_message(self):
        """Rank 0 hosts the store (anchor starts ranks so); after its last message (a save's outcome) it may
        exit at once. It returns only once every rank has read it: a slow rank 1 still gets the message."""
        (rc0, _, err0), (rc1, out1, err1) = self.run_ranks(EXCHANGE, EXCHANGE_CASE="exit")
        self.assertEqual(rc0, 0, err0[-2000:])
        self.assertEqual(rc1, 0, err1[-2000:])
        self.assertIn("got /x", out1)

    def test_a_save_rank_0_cannot_begin_fails_on_every_rank(self):
        """Rank 0's failure is sent as a message, so rank 1 raises too instead of waiting for the store's timeout."""
        ckpt = self.path("not-a-dir")
        with open(ckpt, "w") as f:
            f.write("x")
        t0 = time.monotonic()
        outs = self.run_ranks(EXCHANGE, EXCHANGE_CASE="save_fails", EXCHANGE_CKPT=ckpt)
        self.assertLess(time.monotonic() - t0, 50)  # the store's timeout is 60 s
        for r, (rc, out, err) in enumerate(outs):
            self.assertEqual(rc, 3, "rank %d:\n%s" % (r, err[-2000:]))
            self.assertIn("rank 0:", out)

    def test_save_and_resume_two_ranks(self):
        ck = self.path("ck")
        ref = support.write_spec(self.path("ref.spec.json"), checkpoint_dir=ck, save_at=[3], stop_at=6,
                                 events=self.path("ref.jsonl"))
        self.launch(ref)
        step_dir = os.path.join(ck, "step-00000003")
        self.assertEqual(sorted(os.listdir(ck)), ["step-00000003"])
        self.assertEqual(sorted(os.listdir(step_dir)),
                         ["COMMITTED", "data-rank00000-of-00002.safetensors", "data-rank00001-of-00002.safetensors",
                          "manifest.json", "model.safetensors", "optimizer.safetensors",
                          "rng-rank00000-of-00002.safetensors", "rng-rank00001-of-00002.safetensors",
                          "scheduler.safetensors", "state.json"])
        with open(os.path.join(step_dir, "state.json")) as f:
            self.assertEqual(json.load(f)["world_size"], WORLD)
        v, problems = ap.verify_step(step_dir)
        self.assertEqual(problems, [])
        if os.environ.get("ANCHOR_BIN"):
            p = subprocess.run([os.environ["ANCHOR_BIN"], "checkpoint", "verify", step_dir], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

        res = support.write_spec(self.path("res.spec.json"), role="resume", checkpoint_dir=ck, stop_at=6,
                                 events=self.path("res.jsonl"))
        self.launch(res)
        restored = {}
        for r in range(WORLD):
            a = ap.read_events(self.path("ref.jsonl"), rank=r)
            b = ap.read_events(self.path("res.jsonl"), rank=r)
            self.assertEqual([e["step"] for e in b if e["type"] == "step"], [4, 5, 6], r)
            self.assertIsNone(ap.compare_events(a, b), "rank %d" % r)
            restored[r] = [e for e in b if e["type"] == "digests" and e["when"] == "restore"][0]["components"]
        # Shared components are the same on both ranks; each rank has its own RNG and data cursor.
        for c in ("model", "optimizer", "scheduler"):
            self.assertEqual(restored[0][c], restored[1][c], c)
        for c in ("rng", "data"):
            self.assertNotEqual(restored[0][c], restored[1][c], c)
