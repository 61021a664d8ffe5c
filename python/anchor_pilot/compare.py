"""Compares a reference run's events with a resumed run's: the first difference, named."""
import json

COMPONENT_ORDER = ("model", "optimizer", "scheduler", "scaler", "rng", "data")


class Mismatch:
    """The first difference: ``kind`` is "digest", "loss" or "missing";
    ``component`` names the component for a digest, ``step`` the step."""

    def __init__(self, kind, step, message, component=None):
        self.kind, self.step, self.message, self.component = kind, step, message, component

    def __repr__(self):
        return "Mismatch(%s)" % self.message

    def __str__(self):
        return self.message


def read_events(path, rank=0):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as err:
                raise ValueError("%s:%d: not a JSON line: %s" % (path, n, err))
            if e.get("rank", 0) == rank:
                out.append(e)
    return out


def _digest_diff(step, ref, res, when):
    names = [c for c in COMPONENT_ORDER if c in ref or c in res] + sorted(set(ref) | set(res) - set(COMPONENT_ORDER))
    for c in names:
        if ref.get(c) != res.get(c):
            return Mismatch("digest", step, "step %d (%s): component '%s' differs: reference %s, resumed %s"
                            % (step, when, c, (ref.get(c) or "absent")[:16], (res.get(c) or "absent")[:16]), c)
    return None


def compare_events(ref_events, res_events):
    """None when the resumed run matches the reference, else the first Mismatch:
    1. the digests right after restore (step K) against the reference's at step K;
    2. the loss of every step the resumed run reports against the reference's;
    3. the digests at the resumed run's last digests line against the reference's at that step."""
    ref_digests = {}
    for e in ref_events:
        if e.get("type") == "digests" and e.get("step") is not None:
            ref_digests[e["step"]] = e["components"]
    ref_loss = {e["step"]: e.get("loss") for e in ref_events if e.get("type") == "step"}
    restored = [e for e in res_events if e.get("type") == "digests" and e.get("when") == "restore"]
    if not restored:
        return Mismatch("missing", None, "the resumed run reports no digests after a restore")
    k = restored[-1]["step"]
    if k not in ref_digests:
        return Mismatch("missing", k, "the reference reports no digests at step %d (the restored step)" % k)
    m = _digest_diff(k, ref_digests[k], restored[-1]["components"], "after restore")
    if m:
        return m
    steps = [e for e in res_events if e.get("type") == "step" and e["step"] > k]
    if not steps:
        return Mismatch("missing", k, "the resumed run reports no step after step %d" % k)
    for e in steps:
        s = e["step"]
        if s not in ref_loss:
            return Mismatch("missing", s, "the reference reports no step %d" % s)
        if ref_loss[s] != e.get("loss"):
            return Mismatch("loss", s, "step %d: loss differs: reference %r, resumed %r" % (s, ref_loss[s], e.get("loss")))
    later = [e for e in res_events if e.get("type") == "digests" and e.get("step") is not None and e["step"] > k]
    if later:
        last = later[-1]
        if last["step"] not in ref_digests:
            return Mismatch("missing", last["step"], "the reference reports no digests at step %d" % last["step"])
        return _digest_diff(last["step"], ref_digests[last["step"]], last["components"], last.get("when", "step"))
    return None
