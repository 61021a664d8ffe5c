"""docs/worker-protocol.schema.json describes the spec and the lines the helper
and anchor's built-in worker really write (the helper's here, the built-in
worker's in a real pilot's events.jsonl), and docs/worker-result.schema.json the
results a built-in worker really writes (work/*.json of a real pilot, ANCHOR_BIN). A small validator for the keywords the schema uses (no
jsonschema package here); a keyword it does not know fails the test, so the
schema cannot silently rely on one it ignores."""
import json
import os
import re
import subprocess
import unittest

import torch

from tests import support

import anchor_pilot as ap

SCHEMA = os.path.join(support.REPO, "docs", "worker-protocol.schema.json")
ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}


def _type_ok(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}[t] is type(v)


def validate(v, s, root, path="$"):
    """[problems] of ``v`` against schema ``s``."""
    errs = []
    for k in s:
        if k not in ANNOTATIONS and k not in ("$ref", "type", "const", "enum", "properties", "required",
                                              "additionalProperties", "items", "minimum", "minItems",
                                              "minLength", "pattern", "oneOf", "allOf"):
            raise AssertionError("schema keyword %r at %s is not supported by this validator" % (k, path))
    if "$ref" in s:
        node = root
        for part in s["$ref"].lstrip("#/").split("/"):
            node = node[part]
        errs += validate(v, node, root, path)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_type_ok(v, t) for t in types):
            return errs + ["%s: %r is not %s" % (path, v, types)]
    if "const" in s and v != s["const"]:
        errs.append("%s: %r is not %r" % (path, v, s["const"]))
    if "enum" in s and v not in s["enum"]:
        errs.append("%s: %r is not one of %r" % (path, v, s["enum"]))
    if isinstance(v, (int, float)) and not isinstance(v, bool) and "minimum" in s and v < s["minimum"]:
        errs.append("%s: %r < %r" % (path, v, s["minimum"]))
    if isinstance(v, str):
        if "minLength" in s and len(v) < s["minLength"]:
            errs.append("%s: too short" % path)
        if "pattern" in s and not re.search(s["pattern"], v):
            errs.append("%s: %r does not match %s" % (path, v, s["pattern"]))
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            errs.append("%s: fewer than %d items" % (path, s["minItems"]))
        for i, x in enumerate(v):
            if "items" in s:
                errs += validate(x, s["items"], root, "%s[%d]" % (path, i))
    if isinstance(v, dict):
        for k in s.get("required", []):
            if k not in v:
                errs.append("%s: missing %r" % (path, k))
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props:
                errs += validate(x, props[k], root, "%s.%s" % (path, k))
            elif s.get("additionalProperties") is False:
                errs.append("%s: unexpected key %r" % (path, k))
    for sub in s.get("allOf", []):
        errs += validate(v, sub, root, path)
    if "oneOf" in s:
        matches = [o for o in s["oneOf"] if not validate(v, o, root, path)]
        if len(matches) != 1:
            errs.append("%s: matches %d of the oneOf alternatives, expected 1" % (path, len(matches)))
    return errs


class Schema(support.TempDirTest):
    @classmethod
    def setUpClass(cls):
        with open(SCHEMA) as f:
            cls.schema = json.load(f)

    def check(self, value, kind):
        return validate(value, self.schema["$defs"][kind], self.schema)

    def test_spec_files(self):
        path = support.write_spec(self.path("spec.json"), checkpoint_dir="ck", events="ev.jsonl", save_at=[2, 4],
                                  role="resume", restore="ck/step-00000002", digests_every=2)
        with open(path) as f:
            spec = json.load(f)
        self.assertEqual(self.check(spec, "spec"), [])
        ap.Spec.from_file(path)  # the helper accepts what the schema accepts
        self.assertNotEqual(self.check(dict(spec, protocol=2), "spec"), [])
        self.assertNotEqual(self.check(dict(spec, extra=1), "spec"), [])
        self.assertNotEqual(self.check({k: v for k, v in spec.items() if k != "seed"}, "spec"), [])

    def test_every_line_the_helper_writes(self):
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        events = self.path("ev.jsonl")
        pilot = ap.Pilot(self.path("ck"), model=m, optimizer=opt, events=events, digests_every=1,
                         data=(lambda: {"i": 1}, lambda s: None))
        pilot.data_ready()
        pilot.step(1, loss=torch.tensor(0.5), grad_norm=float("inf"), tokens=3)
        pilot.step(2, loss=float("nan"))
        pilot.eval(2, 0.25)
        pilot.save(2)
        pilot.save(3)
        with open(os.path.join(self.path("ck"), "step-00000003", "model.safetensors"), "r+b") as f:
            f.seek(-1, 2)
            last = f.read(1)
            f.seek(-1, 2)
            f.write(bytes([last[0] ^ 1]))
        pilot.memory("after")
        pilot.error("boom")
        pilot.close()
        fresh = ap.Pilot(self.path("ck"), model=m, optimizer=opt, events=events,
                         data=(lambda: {"i": 1}, lambda s: None))
        self.assertEqual(fresh.restore(), 2)
        fresh.close()
        lines = support.read_lines(events)
        seen = set()
        for line in lines:
            self.assertEqual(self.check(line, "event"), [], line)
            seen.add((line["type"], line.get("phase")))
        self.assertEqual(seen, {("hello", None), ("step", None), ("eval", None), ("digests", None),
                                ("checkpoint", "begin"), ("checkpoint", "end"), ("checkpoint", "skip"),
                                ("memory", None), ("step_memory", None), ("error", None), ("program", None)})
        sm = [l for l in lines if l["type"] == "step_memory"]
        self.assertEqual(len(sm), 1)  # once per process, at its second step
        self.assertEqual((sm[0]["step"], sm[0]["device"]), (2, "cpu"))
        self.assertEqual(sm[0]["state"], {"parameters": 8 * 4, "gradients": 8 * 4, "optimizer": 0})
        self.assertGreater(sm[0]["peak_bytes"], 0)
        step1 = [l for l in lines if l["type"] == "step"][0]
        self.assertEqual((step1["loss"], step1["grad_norm"], step1["lr"], step1["tokens"]), (0.5, "inf", 0.1, 3))
        self.assertIsNone([l for l in lines if l["type"] == "step"][1]["loss"])  # NaN: null, the line stays JSON
        # Negative controls: the schema rejects what the contract does not allow.
        self.assertNotEqual(self.check({k: v for k, v in step1.items() if k != "loss"}, "event"), [])
        self.assertNotEqual(self.check(dict(step1, type="stepp"), "event"), [])
        self.assertNotEqual(self.check(dict(lines[0], protocol=2), "event"), [])


WORKER_SCHEMA = os.path.join(support.REPO, "docs", "worker-result.schema.json")
BIN = os.environ.get("ANCHOR_BIN")


@unittest.skipUnless(BIN, "ANCHOR_BIN is unset: set it to the anchor binary (ctest sets $<TARGET_FILE:anchor>)")
class WorkerResultSchema(support.TempDirTest):
    """The built-in pilot's work/*.json, one rank and two, against the schema."""

    @classmethod
    def setUpClass(cls):
        with open(WORKER_SCHEMA) as f:
            cls.schema = json.load(f)

    def check(self, value):
        return validate(value, self.schema, self.schema)

    def worker_lines(self, run):
        """The built-in workers' lines in events.jsonl, each checked against the worker protocol's schema."""
        with open(SCHEMA) as f:
            protocol = json.load(f)
        lines = []
        for line in support.read_lines(self.path(run, "events.jsonl")):
            source = line.pop("source", "")
            if source.startswith("worker-"):
                self.assertEqual(validate(line, protocol["$defs"]["event"], protocol), [], line)
                lines.append(dict(line, source=source))
        # What they were told: the same spec a program is told, with their events on stdout.
        specs = sorted(n for n in os.listdir(self.path(run, "work")) if n.endswith(".spec.json"))
        self.assertEqual(specs, ["reference.spec.json", "resume.spec.json"])
        for name in specs:
            with open(self.path(run, "work", name)) as f:
                spec = json.load(f)
            self.assertEqual(validate(spec, protocol["$defs"]["spec"], protocol), [], name)
            self.assertEqual((spec["events"], spec["role"] + ".spec.json"), ("-", name))
        # Negative controls: a stage that neither begins nor ends, a hello of neither speaker.
        stage = next(l for l in lines if l["type"] == "stage")
        bad = {k: v for k, v in dict(stage, phase="middle").items() if k != "source"}
        self.assertNotEqual(validate(bad, protocol["$defs"]["event"], protocol), [])
        hello = {k: v for k, v in next(l for l in lines if l["type"] == "hello").items() if k not in ("source", "anchor")}
        self.assertNotEqual(validate(hello, protocol["$defs"]["event"], protocol), [])
        return lines

    def pilot(self, run, *extra):
        p = subprocess.run([BIN, "pilot", os.path.join(support.REPO, "configs", "pilot.yaml"), "--run-dir",
                            self.path(run)] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300, env=support.env())
        self.assertOk(p, "anchor pilot")
        out = {}
        for name in sorted(os.listdir(self.path(run, "work"))):
            if (name.endswith(".json") and name not in ("start.json", "precision.json") and
                    not name.endswith((".spec.json", ".stages.json"))):  # specs, and the stages kept so far
                with open(self.path(run, "work", name)) as f:
                    out[name] = json.load(f)
        return out

    def test_one_rank(self):
        results = self.pilot("run")
        self.assertEqual(sorted(results), ["probe.json", "reference.json", "resume.json"])
        for name, r in results.items():
            self.assertEqual(self.check(r), [], name)
        ref, res = results["reference.json"], results["resume.json"]
        # The built-in workers speak the program's protocol, and what their lines say is what their results say.
        lines = self.worker_lines("run")
        digests = {(l["source"], l["when"]): l for l in lines if l["type"] == "digests"}
        for (source, when), result, key in ((("worker-reference", "save"), ref, "saved_state"),
                                            (("worker-reference", "final"), ref, "final_state"),
                                            (("worker-resume", "restore"), res, "restored_state"),
                                            (("worker-resume", "final"), res, "final_state")):
            line = digests[(source, when)]
            self.assertEqual(line["step"], result[key]["step"])
            self.assertEqual({k: line["components"][k] for k in ("model", "optimizer", "rng")},
                             {k: result[key][k] for k in ("model", "optimizer", "rng")})
        steps = [l for l in lines if l["type"] == "step" and l["source"] == "worker-resume"]
        # One numbering: a step's line and its record give the same number, counted from 1.
        self.assertEqual([(l["step"], l["loss"]) for l in steps],
                         [(r["step"], r["loss"]) for r in res["resume_steps"]])
        # Negative controls: the schema rejects what the supervisor's reader refuses.
        self.assertNotEqual(self.check(dict(ref, format="anchor.worker-result/v2")), [])
        self.assertNotEqual(self.check({k: v for k, v in ref.items() if k != "saved_state"}), [])
        self.assertNotEqual(self.check(dict(ref, role="resume")), [])
        bad_step = dict(res["resume_steps"][0], loss="5.5")
        self.assertNotEqual(self.check(dict(res, resume_steps=[bad_step])), [])
        self.assertNotEqual(self.check(dict(res, restored_state=dict(res["restored_state"], model="x"))), [])

    def test_two_ranks(self):
        results = self.pilot("run2", "--nproc-per-node", "2")
        self.assertIn("reference-rank1.json", results)
        self.assertIn("resume-rank1.json", results)
        for name, r in results.items():
            self.assertEqual(self.check(r), [], name)
        hello = [l for l in self.worker_lines("run2") if l["type"] == "hello"]
        self.assertEqual([(l["role"], l["world_size"], l["rank"]) for l in hello], [("reference", 2, 0), ("resume", 2, 0)])
        self.assertEqual((results["reference-rank1.json"]["rank"], results["reference-rank1.json"]["world_size"]), (1, 2))
        # One rank takes worker A's measured step as the configured shape's memory point; two ranks
        # measure it in the probe (worker A's step held DDP's buffers). The same bytes: the same measurement.
        self.pilot("run1")
        points = {}
        for run in ("run1", "run2"):
            with open(self.path(run, "report.json")) as f:
                points[run] = json.load(f)["measurements"]["memory"]["points"]
        self.assertEqual([p["from"] for p in points["run1"]], ["reference", "probe", "probe"])
        self.assertEqual([p["from"] for p in points["run2"]], ["probe", "probe", "probe"])
        for a, b in zip(points["run1"], points["run2"]):
            self.assertEqual((a["micro_batch"], a["seq_len"], a["peak_allocated_bytes"]),
                             (b["micro_batch"], b["seq_len"], b["peak_allocated_bytes"]))
