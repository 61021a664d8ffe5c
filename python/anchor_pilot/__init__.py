"""anchor_pilot: checkpoint, restore and report a PyTorch training loop in
anchor's committed checkpoint layout (docs/program.md, "The Python helper").

The torch-free parts (errors, spec, store, compare, and ``python -m
anchor_pilot compare|verify``) import without torch; the Pilot and the rest
import torch on first use.
"""
from .errors import CheckpointError, PilotError, RestoreError, SpecError
from .spec import PROTOCOL, Spec
from .declare import shape
from .compare import Mismatch, compare_events, read_events
from .store import inspect as verify_step, remove_stale_temps

__version__ = "0.1.0"
_TORCH = ("Pilot", "setup", "seed_all", "set_deterministic", "rank_and_world", "COMPONENTS")

__all__ = ["Pilot", "Spec", "shape", "setup", "seed_all", "set_deterministic", "rank_and_world", "compare_events",
           "read_events", "Mismatch", "verify_step", "remove_stale_temps", "PilotError", "SpecError",
           "CheckpointError", "RestoreError", "PROTOCOL", "COMPONENTS", "__version__"]


def __getattr__(name):
    if name in _TORCH:
        from . import pilot
        return getattr(pilot, name)
    raise AttributeError("module 'anchor_pilot' has no attribute %r" % name)
