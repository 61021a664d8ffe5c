"""anchor_pilot: checkpoint, restore and report a PyTorch training loop in
anchor's committed checkpoint layout (docs/program.md, "The Python helper")."""
from .errors import CheckpointError, PilotError, RestoreError, SpecError
from .pilot import (COMPONENTS, Pilot, __version__, rank_and_world, seed_all, set_deterministic, setup)
from .spec import PROTOCOL, Spec
from .compare import compare_events, read_events
from .store import inspect as verify_step, remove_stale_temps

__all__ = ["Pilot", "Spec", "setup", "seed_all", "set_deterministic", "rank_and_world", "compare_events",
           "read_events", "verify_step", "remove_stale_temps", "PilotError", "SpecError", "CheckpointError",
           "RestoreError", "PROTOCOL", "COMPONENTS", "__version__"]
