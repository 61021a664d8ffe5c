"""The shape of the program's step, for anchor's plan (docs/program.md, "The plan").

    micro_batch, seq_len = anchor_pilot.shape(micro_batch=args.batch, seq_len=args.seq_len,
                                              n_layer=args.n_layer, n_embd=args.n_embd)

Call it before building the model and the data loader, and build them with
the values it returns: under anchor's memory probe (a worker with role
"probe") those are the probe's (micro_batch, seq_len), otherwise the ones
given. ``probe=False`` says the program cannot run at other shapes; the plan
then rests on the one measured point. Torch-free.
"""
import json
import os
import sys
import time

from .errors import PilotError
from .spec import ENV, Spec

PRECISIONS = ("fp32", "bf16", "fp16")
_declared = None
_pilot_made = False
forked_point = False  # this process is a memory probe's point, forked at shape(): it ends at Pilot.close()


_MAX = 1 << 31  # sizes anchor plans with; larger ones are not a training step's


def _int(name, v, allow_none=False):
    if v is None and allow_none:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v < _MAX:
        raise PilotError("declare the shape", "%s is %r, expected an integer >= 1 and < 2**31" % (name, v),
                         "pass the values the training step runs with")
    return v


def shape(micro_batch, seq_len, *, grad_accum=1, precision="fp32", n_layer=None, n_embd=None,
          flops_per_token=None, probe=True):
    """Declares the step's shape (for the hello line) and returns the
    (micro_batch, seq_len) to run with."""
    global _declared
    if _pilot_made:
        raise PilotError("declare the shape", "anchor_pilot.shape() was called after the Pilot was made",
                         "call it first: the Pilot reports the shape when it starts")
    d = {"micro_batch": _int("micro_batch", micro_batch), "seq_len": _int("seq_len", seq_len),
         "grad_accum": _int("grad_accum", grad_accum), "n_layer": _int("n_layer", n_layer, True),
         "n_embd": _int("n_embd", n_embd, True), "probe": bool(probe)}
    if precision not in PRECISIONS:
        raise PilotError("declare the shape", "precision is %r" % (precision,),
                         "use one of " + ", ".join(PRECISIONS) + " (the dtype autocast runs the step in)")
    d["precision"] = precision
    if flops_per_token is not None and (isinstance(flops_per_token, bool) or
                                        not isinstance(flops_per_token, (int, float)) or
                                        not 0 < flops_per_token < 1e30):
        raise PilotError("declare the shape", "flops_per_token is %r, expected a finite number > 0" % (flops_per_token,),
                         "training FLOPs per token (forward + backward), or leave it out")
    d["flops_per_token"] = flops_per_token
    spec = Spec.from_env()
    _declared = d
    if spec is not None and spec.role == "probe":
        if not probe:
            raise PilotError("run anchor's memory probe", "the program declared probe=False",
                             "anchor probes only programs that say they can run at other shapes")
        return _fork_points(spec) or (spec.probe["micro_batch"], spec.probe["seq_len"])
    if spec is not None and spec.probe_more and probe:  # worker B: the memory probe's points first
        forked = _fork_points(spec)
        if forked is not None:
            return forked
    return micro_batch, seq_len


def _can_fork():
    """Whether this process can fork a probe point: one rank, no process group, CUDA not initialized (a
    forked child cannot use it)."""
    if not hasattr(os, "fork") or os.environ.get("WORLD_SIZE", "1") != "1":
        return False
    if os.environ.get("ANCHOR_PILOT_NO_FORK"):  # a test seam: the path of a helper that cannot fork
        return False
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return False
        d = getattr(torch, "distributed", None)
        if d is not None and d.is_available() and d.is_initialized():
            return False
    return True


def _fork_points(spec):
    """The memory probe's points of spec.probe_more, each run in a child
    forked here, one after another: the child returns its point's shape from
    shape() and runs the program on under its own spec (its own events file),
    so that the program's imports are paid once for every point (worker B
    forks them all; a probe process, those after its own). Returns the
    child's (micro_batch, seq_len) in a child, None in the process that
    forked them, and None where it cannot fork (several ranks, CUDA
    initialized): anchor then starts those points as processes of their own.
    After each child the parent appends a "forked" line to its events file:
    its status and its seconds from the fork to its exit."""
    if not spec.probe_more or not _can_fork():
        return None
    for point in spec.probe_more:
        sys.stdout.flush()
        sys.stderr.flush()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            global forked_point
            forked_point = True
            os.environ[ENV] = point["spec"]
            forked_as = getattr(sys.modules.get("anchor_pilot.pilot"), "_forked_as", None)
            if forked_as is not None:  # the child's uncaught errors go to its own events file
                forked_as(Spec.from_file(point["spec"]))
            return point["micro_batch"], point["seq_len"]
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        _say_forked(point, code, time.monotonic() - t0)
    return None


def _say_forked(point, code, seconds):
    """The parent's account of a forked point, appended to its events file: an "error" line when it
    failed (`code` a signal when negative), then a "forked" line with its status and seconds."""
    try:
        events = Spec.from_file(point["spec"]).events
        now = round(time.time(), 6)
        lines = []
        if code != 0:
            how = "was killed by signal %d" % -code if code < 0 else "exited with status %d" % code
            lines.append({"type": "error", "rank": 0, "time": now,
                          "message": "the memory probe's process at (micro_batch %d, seq_len %d), forked at "
                                     "anchor_pilot.shape(), %s" % (point["micro_batch"], point["seq_len"], how)})
        lines.append({"type": "forked", "rank": 0, "time": now, "status": code, "seconds": seconds})
        fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, "".join(json.dumps(l) + "\n" for l in lines).encode())
        finally:
            os.close(fd)
    except (OSError, PilotError):
        pass  # anchor then finds no step_memory line there, and says so


def declared():
    """What shape() was told, or None; marks that a Pilot now exists."""
    global _pilot_made
    _pilot_made = True
    return _declared
