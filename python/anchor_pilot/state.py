"""Training state as (JSON structure, named tensors), and back.

A component's state (a state_dict, the RNG states, the data cursor) is a tree
of dicts, lists, tuples, numbers, strings, None and tensors. ``encode`` turns
it into a JSON value in which each tensor is ``{"__tensor__": name}`` and puts
the tensor under that name; types JSON lacks are tagged so ``decode`` gives
back the same tree: ``{"__tuple__": [...]}``, ``{"__float__": "nan"|"inf"|"-inf"}``,
``{"__dict__": [[key, value], ...]}`` (keys that are not strings, sorted),
``{"__ndarray__": {"dtype", "shape", "data"}}`` (NumPy arrays, e.g. NumPy's RNG),
``{"__own__": {"name", "weak"}}`` (a value that belongs to the object itself:
``mark_own``/``fill_own``).
"""
import copy
import json
import math
import sys
import types
import weakref

import torch

from .errors import CheckpointError, RestoreError

TAGS = ("__tensor__", "__tuple__", "__float__", "__dict__", "__ndarray__", "__own__")


class Own:
    """A value of a state_dict that belongs to the object itself: a bound
    method (torch 1.13's OneCycleLR keeps ``anneal_func``) or a weak reference
    to one (1.13's CyclicLR keeps ``_scale_fn_ref``). Saved by its method's
    name; restored as the freshly constructed object's own (``fill_own``)."""

    def __init__(self, name, weak=False):
        self.name, self.weak = name, weak

    def __eq__(self, other):
        return isinstance(other, Own) and (self.name, self.weak) == (other.name, other.weak)

    def __repr__(self):
        return "Own(%r%s)" % (self.name, ", weak" if self.weak else "")


def _own(v):
    if isinstance(v, weakref.WeakMethod):
        m = v()
        return Own(m.__func__.__name__, weak=True) if m is not None else None
    if isinstance(v, types.MethodType):
        return Own(v.__func__.__name__)
    return None


def mark_own(state):
    """``state`` (dicts and lists walked) with every bound method, and weak
    reference to one, replaced by an ``Own`` naming it."""
    if isinstance(state, dict):
        out = copy.copy(state)  # its own type (a Counter stays a Counter: MultiStepLR's milestones)
        for k, v in state.items():
            out[k] = mark_own(v)
        return out
    if isinstance(state, list):
        return [mark_own(v) for v in state]
    own = _own(state)
    return own if own is not None else state


def fill_own(saved, current, where):
    """``saved`` with each ``Own`` replaced by the value at the same place in
    ``current`` (the constructed object's own state_dict), which must be the
    same method. Raises RestoreError naming the place when it is not."""
    def walk(s, c, path):
        if isinstance(s, Own):
            got = _own(c)
            if got != s:
                raise RestoreError("restore %s" % where,
                                   "%s was saved as the object's own method %s, but the one constructed here has %s"
                                   % (path, s.name, got.name if got is not None else repr(c)),
                                   "construct it with the same arguments as the run that saved it (e.g. OneCycleLR's "
                                   "anneal_strategy, CyclicLR's mode)")
            return c
        if isinstance(s, dict):
            out = copy.copy(s)
            for k, v in s.items():
                out[k] = walk(v, c.get(k) if isinstance(c, dict) else None, "%s.%s" % (path, k))
            return out
        if isinstance(s, list):
            return [walk(v, c[i] if isinstance(c, list) and i < len(c) else None, "%s[%d]" % (path, i))
                    for i, v in enumerate(s)]
        return s

    return walk(saved, current, where)


def _key_sort(k):
    return (type(k).__name__, k if isinstance(k, (int, str)) else repr(k))


def encode(obj, tensors, path="", what="state"):
    """JSON value of ``obj``; tensors are moved into ``tensors`` (name -> tensor)."""
    def sub(p, k):
        return "%s.%s" % (p, k) if p else str(k)

    if isinstance(obj, Own):
        return {"__own__": {"name": obj.name, "weak": obj.weak}}
    if isinstance(obj, torch.Tensor):
        name = path or "tensor"
        if name in tensors:
            raise CheckpointError("encode %s" % what, "two tensors map to the name %r" % name,
                                  "keys that differ only in type (0 and '0') cannot be saved side by side")
        tensors[name] = obj
        return {"__tensor__": name}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isnan(obj):
            return {"__float__": "nan"}
        if math.isinf(obj):
            return {"__float__": "inf" if obj > 0 else "-inf"}
        return float(obj)
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, tensors, sub(path, i), what) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, tensors, sub(path, i), what) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not any(k in TAGS for k in obj):
            return {k: encode(obj[k], tensors, sub(path, k), what) for k in sorted(obj)}
        for k in obj:
            if not isinstance(k, (str, int, float, bool, tuple)) or isinstance(k, torch.Tensor):
                raise CheckpointError("encode %s" % what, "key %r at %r is a %s" % (k, path or "<root>",
                                                                                  type(k).__name__),
                                      "dictionary keys must be strings, numbers or tuples of them")
        return {"__dict__": [[encode(k, {}, "", what), encode(obj[k], tensors, sub(path, k), what)]
                             for k in sorted(obj, key=_key_sort)]}
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.ndarray):
            return {"__ndarray__": {"dtype": str(obj.dtype), "shape": list(obj.shape),
                                    "data": encode(obj.reshape(-1).tolist(), {}, "", what)}}
        if isinstance(obj, np.generic):
            return encode(obj.item(), tensors, path, what)
    raise CheckpointError("encode %s" % what, "%r holds a %s, which the helper cannot store"
                          % (path or "<root>", type(obj).__name__),
                          "a state may hold dicts, lists, tuples, numbers, strings, None and tensors; "
                          "convert the value in your state_dict (e.g. a function to a name)")


def decode(value, tensors, where):
    """Inverse of ``encode``; ``tensors`` maps names to tensors."""
    if isinstance(value, list):
        return [decode(v, tensors, where) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag == "__tensor__":
                if inner not in tensors:
                    raise RestoreError("read %s" % where, "the structure names tensor %r, which the file lacks"
                                       % inner, "the checkpoint is inconsistent; restore an older one")
                return tensors[inner]
            if tag == "__tuple__":
                return tuple(decode(v, tensors, where) for v in inner)
            if tag == "__float__":
                return float(inner)
            if tag == "__dict__":
                return {_hashable(decode(k, tensors, where)): decode(v, tensors, where) for k, v in inner}
            if tag == "__own__":
                return Own(inner["name"], inner["weak"])
            if tag == "__ndarray__":
                import numpy as np
                return np.array(inner["data"], dtype=inner["dtype"]).reshape(inner["shape"])
        return {k: decode(v, tensors, where) for k, v in value.items()}
    return value


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def to_json(value):
    """Canonical JSON text (sorted keys, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
