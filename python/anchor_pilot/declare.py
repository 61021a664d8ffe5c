"""The shape of the program's step, for anchor's plan (docs/program.md, "The plan").

    micro_batch, seq_len = anchor_pilot.shape(micro_batch=args.batch, seq_len=args.seq_len,
                                              n_layer=args.n_layer, n_embd=args.n_embd)

Call it before building the model and the data loader, and build them with
the values it returns: under anchor's memory probe (a worker with role
"probe") those are the probe's (micro_batch, seq_len), otherwise the ones
given. ``probe=False`` says the program cannot run at other shapes; the plan
then rests on the one measured point. Torch-free.
"""
from .errors import PilotError
from .spec import Spec

PRECISIONS = ("fp32", "bf16", "fp16")
_declared = None
_pilot_made = False


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
        return spec.probe["micro_batch"], spec.probe["seq_len"]
    return micro_batch, seq_len


def declared():
    """What shape() was told, or None; marks that a Pilot now exists."""
    global _pilot_made
    _pilot_made = True
    return _declared
