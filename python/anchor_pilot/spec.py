"""The spec anchor hands a worker: ANCHOR_PILOT_SPEC names a JSON file.

    {"protocol": 1, "role": "reference" | "resume" | "probe", "run_dir": str,
     "checkpoint_dir": str, "save_at": [int], "stop_at": int,
     "restore": str | null, "seed": int, "deterministic": bool,
     "events": str, "digests_every": int (optional, default 0),
     "kill_in_save": int | null (optional: at the save of that step, rank 0
     stops after its first file is durable, says so with a "kill_window"
     line and waits to be SIGKILLed by anchor),
     "probe": {"micro_batch": int, "seq_len": int} (role "probe" only: the
     shape anchor_pilot.shape() returns, for anchor's memory probe),
     "start_from": "init" (optional; anchor's built-in worker is also told
     "latest", which this helper does not do),
     "profile_step": int (optional: the step to run under torch.profiler;
     rank 0 writes its trace to <run_dir>/profile.json),
     "precision_reference": true (optional, role "resume" only: run the
     program's Pilot.autocast() regions in fp32, the reference its
     declared precision is checked against),
     "probe_more": [{"micro_batch": int, "seq_len": int, "spec": str}]
     (optional, roles "resume" and "probe": the memory probe's points, each
     forked at shape() with the spec file named, in the spec file's
     directory)}

A path that is not UTF-8 comes as "<key>_hex", its bytes in hex, beside
"<key>" (printable text); the bytes are used. Relative paths are taken
relative to the spec file's directory. Every
problem (unknown or missing keys, wrong types) is reported at once.
"""
import json
import os

from .errors import SpecError

PROTOCOL = 1
ENV = "ANCHOR_PILOT_SPEC"
ROLES = ("reference", "resume", "probe")
_REQUIRED = ("protocol", "role", "run_dir", "checkpoint_dir", "save_at", "stop_at", "restore", "seed",
             "deterministic", "events")
_PATHS = ("run_dir", "checkpoint_dir", "events", "restore")
_OPTIONAL = ("digests_every", "kill_in_save", "probe", "start_from", "reshard", "profile_step",
             "probe_more", "precision_reference") + tuple(k + "_hex" for k in _PATHS)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Spec:
    """A validated spec (attributes named as the keys)."""

    def __init__(self, role, run_dir, checkpoint_dir, save_at, stop_at, restore, seed, deterministic, events,
                 digests_every=0, kill_in_save=None, path=None, probe=None, reshard=None, profile_step=None,
                 probe_more=(), precision_reference=False):
        self.protocol = PROTOCOL
        self.role, self.run_dir, self.checkpoint_dir = role, run_dir, checkpoint_dir
        self.save_at, self.stop_at, self.restore = sorted(set(save_at)), stop_at, restore
        self.seed, self.deterministic, self.events = seed, deterministic, events
        self.digests_every, self.kill_in_save, self.path = digests_every, kill_in_save, path
        self.probe = probe
        self.reshard = reshard  # {"from": A, "to": B}: the resume runs at another world size
        self.profile_step = profile_step
        self.probe_more = list(probe_more)  # [{"micro_batch", "seq_len", "spec": an absolute path}]
        self.precision_reference = precision_reference  # Pilot.autocast() runs in fp32

    @classmethod
    def from_file(cls, path):
        what = "read pilot spec %s" % path
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise SpecError(what, "the file does not exist",
                            "%s names the spec file anchor writes for the worker; run the program through anchor, "
                            "or unset %s to run it standalone" % (ENV, ENV))
        except OSError as e:
            raise SpecError(what, "cannot be read: %s" % (e.strerror or e), "check the path and its permissions")
        try:
            d = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise SpecError(what, "not valid JSON: %s" % e, "the spec is written by anchor; do not edit it by hand")
        if not isinstance(d, dict):
            raise SpecError(what, "not a JSON object", "the spec is a JSON object with a \"protocol\" key")
        if "protocol" in d and d["protocol"] != PROTOCOL:
            raise SpecError(what, "unknown protocol version %s (this anchor_pilot speaks protocol %d)"
                            % (json.dumps(d["protocol"]), PROTOCOL),
                            "install the anchor_pilot that ships with this anchor (pip install <anchor>/python)")
        problems = []
        unknown = sorted(set(d) - set(_REQUIRED) - set(_OPTIONAL))
        if unknown:
            problems.append("unknown key%s %s" % ("s" if len(unknown) > 1 else "", ", ".join(map(repr, unknown))))
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            problems.append("missing key%s %s" % ("s" if len(missing) > 1 else "", ", ".join(map(repr, missing))))

        def check(key, ok, expected):
            if key in d and not ok(d[key]):
                problems.append("%r is %s, expected %s" % (key, json.dumps(d[key]), expected))

        check("role", lambda v: v in ROLES, " or ".join('"%s"' % r for r in ROLES))
        check("start_from", lambda v: v == "init", '"init" (starting from a checkpoint is anchor\'s built-in worker\'s)')
        for k in _PATHS:
            check(k + "_hex", lambda v: isinstance(v, str) and v != "" and len(v) % 2 == 0 and
                  all(c in "0123456789abcdef" for c in v), "the path's bytes in lowercase hex")
        for k in ("run_dir", "checkpoint_dir", "events"):
            check(k, lambda v: isinstance(v, str) and v, "a non-empty string")
        check("save_at", lambda v: isinstance(v, list) and all(_is_int(s) and s >= 1 for s in v),
              "a list of integers >= 1")
        check("stop_at", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
        check("restore", lambda v: v is None or (isinstance(v, str) and v), "null or a step directory")
        check("seed", lambda v: _is_int(v) and v >= 0, "an integer >= 0")
        check("deterministic", lambda v: isinstance(v, bool), "true or false")
        check("digests_every", lambda v: _is_int(v) and v >= 0, "an integer >= 0")
        check("kill_in_save", lambda v: v is None or (_is_int(v) and v >= 1), "null or an integer >= 1")
        check("profile_step", lambda v: _is_int(v) and v >= 1, "an integer >= 1")
        check("precision_reference", lambda v: v is True, "true")
        if not problems and d.get("precision_reference") and d["role"] != "resume":
            problems.append("'precision_reference' is given but role is %s (only a resume runs the fp32 reference)"
                            % json.dumps(d["role"]))
        check("probe_more", lambda v: isinstance(v, list) and all(
            isinstance(p, dict) and sorted(p) == ["micro_batch", "seq_len", "spec"] and
            _is_int(p["micro_batch"]) and p["micro_batch"] >= 1 and _is_int(p["seq_len"]) and p["seq_len"] >= 1 and
            isinstance(p["spec"], str) and p["spec"] not in ("", ".", "..") and "/" not in p["spec"] and
            "\0" not in p["spec"] for p in v),
              'a list of {"micro_batch": int >= 1, "seq_len": int >= 1, "spec": a file name}')
        if not problems and d.get("probe_more") and d["role"] == "reference":
            problems.append("'probe_more' is given but role is \"reference\" (the memory probe's points are "
                            "forked by worker B or by a probe)")
        if not problems and d.get("kill_in_save") is not None and d["kill_in_save"] not in d["save_at"]:
            problems.append("'kill_in_save' is %d but save_at %s does not hold it" % (d["kill_in_save"],
                                                                                  json.dumps(d["save_at"])))
        check("probe", lambda v: isinstance(v, dict) and sorted(v) == ["micro_batch", "seq_len"] and
              all(_is_int(x) and x >= 1 for x in v.values()),
              'an object {"micro_batch": int >= 1, "seq_len": int >= 1}')
        check("reshard", lambda v: isinstance(v, dict) and sorted(v) == ["from", "to"] and
              all(_is_int(x) and x >= 1 for x in v.values()), 'an object {"from": int >= 1, "to": int >= 1}')
        if not problems and (d["role"] == "probe") != (d.get("probe") is not None):
            problems.append("'probe' is given exactly when role is \"probe\" (role %s, probe %s)"
                            % (json.dumps(d["role"]), json.dumps(d.get("probe"))))
        if not problems and "restore_hex" in d and d["restore"] is None:
            problems.append("'restore_hex' is given but 'restore' is null")
        if not problems and d["role"] != "resume" and d["restore"] is not None:
            problems.append("'restore' is %s but role is %s (only a resume restores)"
                            % (json.dumps(d["restore"]), json.dumps(d["role"])))
        if problems:
            raise SpecError(what, "%d problem%s: %s" % (len(problems), "s" if len(problems) > 1 else "",
                                                        "; ".join(problems)),
                            "the spec is written by anchor; this anchor_pilot speaks protocol %d" % PROTOCOL)
        base = os.path.dirname(os.path.abspath(path))
        for k in _PATHS:  # the exact bytes of a path that is not UTF-8, as the OS takes them
            if k + "_hex" in d:
                d[k] = os.fsdecode(bytes.fromhex(d[k + "_hex"]))

        def rel(p):
            return p if p is None or os.path.isabs(p) else os.path.join(base, p)

        return cls(role=d["role"], run_dir=rel(d["run_dir"]), checkpoint_dir=rel(d["checkpoint_dir"]),
                   save_at=d["save_at"], stop_at=d["stop_at"], restore=rel(d["restore"]), seed=d["seed"],
                   deterministic=d["deterministic"], events=rel(d["events"]),
                   digests_every=d.get("digests_every", 0), kill_in_save=d.get("kill_in_save"), path=path,
                   probe=d.get("probe"), reshard=d.get("reshard"), profile_step=d.get("profile_step"),
                   probe_more=[dict(p, spec=os.path.join(base, p["spec"])) for p in d.get("probe_more", [])],
                   precision_reference=bool(d.get("precision_reference")))

    @classmethod
    def from_env(cls, environ=None):
        """The spec ANCHOR_PILOT_SPEC names, or None when it is unset."""
        path = (os.environ if environ is None else environ).get(ENV)
        if not path:
            return None
        return cls.from_file(path)
