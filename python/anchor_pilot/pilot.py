"""The Pilot: checkpoints, restores and reports one training loop."""
import array
import collections
import contextlib
import ctypes
import hashlib
import json
import os
import random
import re
import sys
import time

import torch

from . import events as ev
from . import safetensors as st
from . import tensors as tt
from . import state as stt
from . import store
from . import observe as obs
from .profile import StepProfile
from .errors import CheckpointError, PilotError, RestoreError
from . import declare as _declare
from .declare import declared as _declared_shape
from .spec import Spec

from . import __version__
STATE_FORMAT = "anchor-pilot.state/v1"
COMPONENT_FORMAT = "anchor-pilot.component/v1"
COMPONENTS = ("model", "optimizer", "scheduler", "scaler", "rng", "data")
PER_RANK = ("rng", "data")
DCP_METADATA = ".metadata"  # a sharded model's checkpoint: DCP's files (.metadata, __<rank>_0.distcp) in the step
# Optimizer states that have their parameter's shape (checked on restore).
_PARAM_SHAPED = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "acc_delta",
                 "sum", "ax", "prev"}


def _dist():
    d = torch.distributed
    return d if d.is_available() and d.is_initialized() else None


class _Exchange:
    """The helper's own messages between ranks (a save's temporary directory, each
    rank's file digests, the step to restore), as JSON through the process
    group's store: a set or get runs in the calling thread and holds nothing
    afterwards.

    Not broadcast_object_list/gather_object: those queue work that holds
    Python-owned tensors on Gloo's worker threads; when the last such work was
    a save's just before the program ended, a worker could still be releasing
    it while the interpreter finalized, take the GIL, and abort the process
    ("terminate called without an active exception", torch 2.x). Every rank
    makes the same exchanges in the same order, as with collectives (rank 0
    sends an error message rather than nothing when it fails); keys are
    numbered per process and deleted once read."""

    _seq = 0  # per process: every rank counts the same exchanges

    def __init__(self, d, rank, world):
        self.store = d.distributed_c10d._get_default_store()
        if self.store is None:
            raise PilotError("exchange checkpoint messages between ranks",
                             "the default process group (backend %s) has no store" % d.get_backend(),
                             "initialize the process group with the gloo or nccl backend")
        self.rank, self.world = rank, world

    def _key(self, what):
        _Exchange._seq += 1
        return "anchor_pilot/%d/%s" % (_Exchange._seq, what)

    @staticmethod
    def _dumps(obj):
        return json.dumps(obj, default=os.fspath)  # a pathlib.Path as its string

    def broadcast(self, obj):
        """Rank 0's obj on every rank. Rank 0 returns once every rank has read it
        (it may host the store: had it gone on and exited, a rank still reading
        would have lost the store), and then deletes the keys."""
        key = self._key("from0")
        if self.rank == 0:
            self.store.set(key, self._dumps(obj))
            if self.world > 1:
                self.store.wait([key + "/read"])
            for k in (key, key + "/count", key + "/read"):
                self.store.delete_key(k)
            return obj
        value = json.loads(self.store.get(key).decode("utf-8"))
        if self.store.add(key + "/count", 1) == self.world - 1:
            self.store.set(key + "/read", "1")
        return value

    def gather(self, obj):
        """Every rank's obj, in rank order, on rank 0 (None elsewhere)."""
        key = self._key("to0")
        if self.rank != 0:
            self.store.set("%s/%d" % (key, self.rank), self._dumps(obj))
            return None
        out = [obj]
        for r in range(1, self.world):
            k = "%s/%d" % (key, r)
            out.append(json.loads(self.store.get(k).decode("utf-8")))
            self.store.delete_key(k)
        return out


def rank_and_world():
    d = _dist()
    if d is not None:
        return d.get_rank(), d.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def seed_all(seed):
    """Seeds torch (CPU and every CUDA device), Python's random and, when
    NumPy is already imported, NumPy's global RNG."""
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2 ** 32)


def set_deterministic():
    """torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=:4096:8,
    cuDNN deterministic and not benchmarking. Call it before the first CUDA
    matmul: cuBLAS reads its workspace setting once."""
    want = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if want not in (None, ":4096:8", ":16:8"):
        raise PilotError("deterministic mode", "CUBLAS_WORKSPACE_CONFIG is %r" % want,
                         "unset it or set :4096:8 (or :16:8); other values make cuBLAS nondeterministic")
    if want is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            raise PilotError("deterministic mode", "CUDA is already initialized and CUBLAS_WORKSPACE_CONFIG "
                             "is unset, so cuBLAS may already run nondeterministically",
                             "call anchor_pilot.setup() before the model is built, or export "
                             "CUBLAS_WORKSPACE_CONFIG=:4096:8")
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def setup(seed=0, deterministic=False):
    """Call first, before building the model: reads ANCHOR_PILOT_SPEC when it
    is set (its seed and deterministic flag win over the arguments), seeds
    every RNG and turns deterministic mode on when asked. Returns the Spec or
    None when running standalone."""
    spec = Spec.from_env()
    if spec is not None:
        seed, deterministic = spec.seed, spec.deterministic
        _report_uncaught(spec)
        _watch_reads(spec)
    if deterministic:
        set_deterministic()
    seed_all(seed)
    return spec


_reads = None  # worker B: the files under checkpoint_dir its own load opens (observed mode)
_hook_spec = None  # the spec whose events file an uncaught exception is reported to


def _forked_as(spec):
    """In a memory probe's point forked at shape() (declare.py): its own spec's events file for an
    uncaught error, and none of its parent's watch of the checkpoint directory."""
    global _reads
    _reads = None
    _report_uncaught(spec)


def _watch_reads(spec):
    global _reads
    if spec.role == "resume" and _reads is None and os.path.isdir(spec.checkpoint_dir):
        try:
            _reads = obs.OpenWatch(spec.checkpoint_dir)
        except OSError:
            _reads = None  # no inotify: anchor then cannot say which save the resume read


def _say_reads(log):
    """A "checkpoint" line with phase "read": the files under checkpoint_dir this
    process has opened since setup(), once (worker B, under anchor)."""
    global _reads
    if _reads is None:
        return
    watch, _reads = _reads, None
    log.emit("checkpoint", op="restore", phase="read", dir=watch.root, files=watch.opened())


def _report_uncaught(spec):
    """Under anchor: an exception nothing catches, also before any Pilot exists
    (a framework's resume that fails inside train()), becomes an "error" line,
    so anchor's verdict can say what the program died of."""
    global _hook_spec
    _hook_spec = spec  # a forked probe point rebinds it to its own spec
    previous = sys.excepthook

    def hook(kind, exc, tb):
        if exc is not None and not getattr(exc, "_anchor_pilot_reported", False):
            try:
                log = ev.EventLog(_hook_spec.events, rank_and_world()[0])
                _say_reads(log)
                log.emit("error", message="%s: %s" % (kind.__name__, exc), kind=kind.__name__)
                log.close()
            except Exception:  # noqa: BLE001 - the program's own traceback follows regardless
                pass
        previous(kind, exc, tb)

    if getattr(previous, "_anchor_pilot", False):
        return
    hook._anchor_pilot = True
    sys.excepthook = hook


def _rng_parts():
    """(stream, raw bytes) of every RNG stream: torch's CPU generator, each CUDA
    device's once CUDA is initialized (never initializing it), Python's random,
    NumPy's global. Raw bytes, not reprs: this runs at every step."""
    yield "torch", torch.get_rng_state().numpy().tobytes()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        yield "cuda", b"".join(state.numpy().tobytes() for state in torch.cuda.get_rng_state_all())
    version, words, gauss = random.getstate()
    yield "python", array.array("Q", words).tobytes() + repr((version, gauss)).encode()
    np = sys.modules.get("numpy")
    if np is not None:
        yield "numpy", _numpy_mt_bytes(np)


def rng_digest():
    """SHA-256 of every RNG stream (_rng_parts): 55-75 us on this 2-core VM,
    where hashing reprs took 259 us. NumPy's part is its MT19937 key and
    position read in place; the legacy gaussian cache is left to the
    fingerprint of a save, which holds it."""
    h = hashlib.sha256()
    for _, raw in _rng_parts():
        h.update(raw)
    return h.hexdigest()


def rng_stream_digests():
    """{stream: SHA-256} of each RNG stream on its own (the first two step
    lines carry them, so anchor can tell ranks that share a random state)."""
    return {name: hashlib.sha256(raw).hexdigest() for name, raw in _rng_parts()}


def _numpy_mt_bytes(np):
    """NumPy's global MT19937 state (624 key words and the position), read from
    the generator's C struct; its get_state() copies into Python objects (85 us)."""
    try:
        bits = np.random.mtrand._rand._bit_generator
        return ctypes.string_at(bits.ctypes.state_address, 624 * 4 + 4)
    except (AttributeError, TypeError, ValueError):
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        return keys.tobytes() + repr((kind, pos, has_gauss, cached)).encode()


def batch_digest(batch):
    """SHA-256 of a batch's tensors (nested in lists, tuples and dicts, dict keys
    sorted), each as its dtype, shape and bytes; other leaves by their repr."""
    h = hashlib.sha256()

    def walk(v):
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(("T%s%s;" % (t.dtype, tuple(t.shape))).encode())
            h.update(tt.tensor_bytes(t))
        elif isinstance(v, dict) or hasattr(v, "keys") and hasattr(v, "__getitem__"):
            for k in sorted(v.keys(), key=str):
                h.update(("K%s;" % k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(b"L%d;" % len(v))
            for x in v:
                walk(x)
        else:
            h.update(("V%r;" % (v,)).encode())

    walk(batch)
    return h.hexdigest()


def _unwrap(model):
    return model.module if isinstance(getattr(model, "module", None), torch.nn.Module) else model


class _Component:
    """How to read and write one component's state."""

    def __init__(self, name, get, put):
        self.name, self.get, self.put = name, get, put


class Pilot:
    """Checkpoints, restores and reports one training loop.

    Standalone: ``Pilot(checkpoint_dir, model=..., optimizer=..., save_at=[...], stop_at=N)``.
    Under anchor: ``Pilot.from_env(model=..., ...)`` reads ANCHOR_PILOT_SPEC.
    ``data`` is an object with state_dict()/load_state_dict(), or a pair
    (get, set) of callables; its state must be JSON-able (tensors allowed).
    """

    def __init__(self, checkpoint_dir=None, *, model, optimizer=None, scheduler=None, scaler=None, data=None,
                 save_at=(), stop_at=None, seed=None, deterministic=False, events=None, digests_every=0,
                 restore=None, role="standalone", spec=None, check_restore=True, observe=False, evaluate=None):
        if spec is not None:
            ev.check_program_paths()
            checkpoint_dir, save_at, stop_at, seed = spec.checkpoint_dir, spec.save_at, spec.stop_at, spec.seed
            deterministic, events, digests_every = spec.deterministic, spec.events, spec.digests_every
            restore, role = spec.restore, spec.role
        if not checkpoint_dir:
            raise PilotError("create Pilot", "no checkpoint_dir", "pass checkpoint_dir=... or run under anchor "
                             "(ANCHOR_PILOT_SPEC)")
        if model is None:
            raise PilotError("create Pilot", "no model", "pass model=<your torch.nn.Module>")
        self.spec, self.role, self.checkpoint_dir = spec, role, checkpoint_dir
        self._dcp = None  # the components saved through DCP (_dcp_components), decided at the first use
        self.observe = bool(observe)  # the program's own save and load code (saving(), restored())
        self.save_at = sorted(set(save_at or ()))
        self.stop_at, self.seed, self.restore_dir = stop_at, seed, restore
        self.digests_every, self.check_restore = digests_every, check_restore
        if evaluate is not None and not callable(evaluate):
            raise PilotError("create Pilot", "evaluate is a %s, not a callable" % type(evaluate).__name__,
                             "pass evaluate=<a function of no arguments that returns the validation loss>")
        self.evaluate = evaluate
        self.rank, self.world_size = rank_and_world()
        self.model, self.optimizer, self.scheduler, self.scaler, self.data = model, optimizer, scheduler, scaler, data
        if deterministic and not (torch.are_deterministic_algorithms_enabled() and
                                  os.environ.get("CUBLAS_WORKSPACE_CONFIG")):
            set_deterministic()  # setup() did it already, usually (torch 2.x: importing dynamo costs ~2 s)
        self.events = ev.EventLog(events, self.rank)
        self.last_digests = None
        self.restored_from = None
        self.skipped = []
        self._last = time.monotonic()
        self._data_ready = None
        self._closed = False
        self._failed = False  # closed by an exception (__exit__)
        self._restoring = None
        self._observed_step = 0
        self._rng_at_start = None
        self._streams_at_start = None
        self.components = collections.OrderedDict()
        self.components["model"] = _Component("model", self._model_get, self._model_put)
        if optimizer is not None:
            self.components["optimizer"] = _Component("optimizer", optimizer.state_dict, optimizer.load_state_dict)
        if scheduler is not None:
            # A value that is the scheduler's own method (torch 1.13's OneCycleLR, CyclicLR) goes by its name.
            self.components["scheduler"] = _Component(
                "scheduler", lambda: stt.mark_own(scheduler.state_dict()),
                lambda sd: scheduler.load_state_dict(stt.fill_own(sd, scheduler.state_dict(), "scheduler")))
        if scaler is not None:
            self.components["scaler"] = _Component("scaler", scaler.state_dict, scaler.load_state_dict)
        self.components["rng"] = _Component("rng", _rng_get, _rng_put)
        if data is not None:
            if isinstance(data, tuple) and len(data) == 2 and all(callable(f) for f in data):
                self.components["data"] = _Component("data", data[0], data[1])
            elif hasattr(data, "state_dict") and hasattr(data, "load_state_dict"):
                self.components["data"] = _Component("data", data.state_dict, data.load_state_dict)
            else:
                raise PilotError("create Pilot", "data is a %s without state_dict()/load_state_dict()"
                                 % type(data).__name__,
                                 "pass an object with both methods, or a pair (get_state, set_state)")
        self.kill_in_save = spec.kill_in_save if spec is not None else None
        self._program_said = False
        params = sum(p.numel() for p in _unwrap(model).parameters())
        shape = _declared_shape()
        if role == "probe" and shape is None:
            raise PilotError("run anchor's memory probe", "the program did not call anchor_pilot.shape()",
                             "anchor probes only programs that declare their shape; this is a bug in anchor")
        # The step's memory: what is held before the first step (parameters
        # included), and the peak of the second step (full optimizer state).
        self._device = ev.model_device(_unwrap(model))  # where the step's memory is counted
        self._baseline_device, self._baseline = ev.held_bytes(self._device)
        self._steps_seen = 0
        self._peak_reset = False
        self._load_said = role == "resume"  # a resume's start is its restore's stage
        self._last_step = None
        self._profile_step = spec.profile_step if spec is not None else None
        self._profile = None  # the StepProfile running over _profile_step
        self._autocast = None  # the dtype name Pilot.autocast() ran the last step's regions in
        self._last_scale = None  # the GradScaler's scale at the last step line
        self.events.emit("hello", protocol=1, role=role, world_size=self.world_size, versions=ev.versions(),
                         anchor_pilot=__version__, parameters=params, executable=sys.executable, pid=os.getpid(),
                         shape=shape, checkpoints="program" if self.observe else "helper")

    @classmethod
    def from_env(cls, *, model, optimizer=None, scheduler=None, scaler=None, data=None, observe=False,
                 evaluate=None, **standalone):
        """A Pilot configured by ANCHOR_PILOT_SPEC when it is set, else by
        the keyword arguments in ``standalone`` (checkpoint_dir, save_at, ...).
        ``observe=True``: the program saves and loads with its own code
        (saving(), restored()); the helper only fingerprints the state."""
        spec = Spec.from_env()
        if spec is not None:
            return cls(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, data=data, spec=spec,
                       observe=observe, evaluate=evaluate)
        return cls(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, data=data, observe=observe,
                   evaluate=evaluate, **standalone)

    # ----- components ---------------------------------------------------------------------------------------
    def _model_get(self):
        return _unwrap(self.model).state_dict()

    def _model_put(self, sd):
        current = _unwrap(self.model).state_dict()
        problems = []
        missing = [k for k in current if k not in sd]
        unexpected = [k for k in sd if k not in current]
        if missing:
            problems.append("missing %s" % ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
        if unexpected:
            problems.append("unexpected %s" % ", ".join(unexpected[:10]) + (" ..." if len(unexpected) > 10 else ""))
        for k, c in current.items():
            v = sd.get(k)
            if isinstance(c, torch.Tensor) and isinstance(v, torch.Tensor):
                if tuple(c.shape) != tuple(v.shape):
                    problems.append("%s has shape %s in the checkpoint, %s in the model"
                                    % (k, list(v.shape), list(c.shape)))
                elif c.dtype != v.dtype:
                    problems.append("%s is %s in the checkpoint, %s in the model" % (k, v.dtype, c.dtype))
        if problems:
            raise RestoreError("restore model from %s" % self._restoring,
                               "the checkpoint does not fit the model: " + "; ".join(problems),
                               "build the same model (architecture, sizes, dtype) as the run that saved it")
        _unwrap(self.model).load_state_dict(sd, strict=True)

    def _dcp_components(self):
        """The components saved through torch.distributed.checkpoint: the model and its optimizer when the
        model is sharded (FSDP2's fully_shard: its state_dict holds DTensors). Decided once."""
        if self._dcp is None:
            self._dcp = ()
            if not self.observe and "model" in self.components and _holds_dtensor(_unwrap(self.model).state_dict()):
                self._dcp = tuple(n for n in ("model", "optimizer") if n in self.components)
        return self._dcp

    def _dcp_state(self, names=None):
        """DCP's view of the sharded components (all, or ``names``): {"model": ..., "optim": ...}."""
        from torch.distributed.checkpoint.state_dict import get_state_dict
        names = self._dcp if names is None else names
        msd, osd = get_state_dict(_unwrap(self.model), [self.optimizer] if "optimizer" in names else [])
        return {"model": msd, "optim": osd} if "optimizer" in names else {"model": msd}

    def _file(self, name):
        if name in self._dcp_components():
            return DCP_METADATA
        if name in PER_RANK and self.world_size > 1:
            return "%s-rank%05d-of-%05d.safetensors" % (name, self.rank, self.world_size)
        return name + ".safetensors"

    def _writes(self, name):
        return name in PER_RANK or self.rank == 0

    def _serialize(self, name, value=None):
        if value is None:
            value = self.components[name].get()
        if self.observe or name in self._dcp_components():  # FSDP2's DTensors: this rank's shard, fingerprinted
            # without a collective ...
            # ... unless the resume runs at another world size: then the full tensor, gathered (every rank
            # fingerprints at the same points, so the collectives match), which both world sizes share.
            value = _local_shards(value, full=self.spec is not None and self.spec.reshard is not None)
        tensors = {}
        meta = {"anchor_pilot.format": COMPONENT_FORMAT, "anchor_pilot.component": name}
        if name == "model":
            versions = getattr(value, "_metadata", None)
            if versions:
                meta["anchor_pilot.module_metadata"] = stt.to_json(stt.encode(dict(versions), {}, what="model"))
            value = dict(value)
        structure = stt.encode(value, tensors, what=name)
        meta["anchor_pilot.structure"] = stt.to_json(structure)
        prefix, chunks = tt.serialize(tensors, meta)
        return prefix, chunks

    def digests(self, step=None, emit=True, when="step"):
        """SHA-256 per component: the digest of the file its state would be
        saved as (so a digest after restore equals the manifest's)."""
        out = collections.OrderedDict()
        for name in self.components:
            if name == "rng" and self.observe:  # each stream on its own: the verdict names the one not restored
                for stream, value in _rng_streams():
                    out["rng." + stream] = st.digest(*self._serialize("rng", {stream: value}))
                continue
            prefix, chunks = self._serialize(name)
            out[name] = st.digest(prefix, chunks)
        self.last_digests = dict(out)
        if emit:
            self.events.emit("digests", step=step, when=when, components=out)
        return dict(out)

    # ----- the loop -------------------------------------------------------------------------------------------
    def data_ready(self):
        """Marks that the batch of this step is ready (splits data_wait_s from compute_s),
        and notes the digest of the RNG streams there, before the step draws from them."""
        if not self._load_said:
            self._stage_memory("load", "from the process's start to the first step's data_ready()")
        self._data_ready = time.monotonic()
        self._rng_at_start = rng_digest()
        if self._steps_seen < 2:
            self._streams_at_start = rng_stream_digests()

    def step(self, step, loss=None, grad_norm=None, lr=None, tokens=None, data_wait_s=None, compute_s=None,
             batch=None):
        """Reports one step (a "step" line); digests too every digests_every steps.
        ``batch``: the step's input (tensors, or lists/tuples/dicts of them):
        its SHA-256 goes in the line, so anchor can say when a resumed step
        trains on other data than the reference's (the data cursor). The line
        also carries the RNG streams' digest at the step's start (data_ready),
        so anchor can say when something drew from them after a restore."""
        now = time.monotonic()
        profiled = self._stop_profile(step)  # after `now`: the profiler's export is not the step's time
        if self._data_ready is not None:
            if data_wait_s is None:
                data_wait_s = self._data_ready - self._last
            if compute_s is None:
                compute_s = now - self._data_ready
        elif compute_s is None:
            compute_s = now - self._last
        self._last, self._data_ready = now, None
        if lr is None and self.optimizer is not None:
            lr = self.optimizer.param_groups[0].get("lr")
            lr = float(lr) if lr is not None else None
        if isinstance(loss, torch.Tensor):
            loss = loss.item()
        if isinstance(grad_norm, torch.Tensor):
            grad_norm = grad_norm.item()
        fields = {"batch": batch_digest(batch)} if batch is not None else {}
        # The RNG streams at the step's start (data_ready), else at its end: the same point in both workers.
        fields["rng"], self._rng_at_start = self._rng_at_start or rng_digest(), None
        if self._steps_seen < 2:  # each stream at the first two steps: which ranks share one, and draw from it
            fields["rng_streams"], self._streams_at_start = self._streams_at_start or rng_stream_digests(), None
        if self._steps_seen == 0:  # the seed this rank's torch generator was last given: the manifest's
            fields["torch_seed"] = torch.initial_seed()
        if self._autocast is not None:  # what Pilot.autocast() ran this step's forward in
            fields["autocast"], self._autocast = self._autocast, None
        fields.update(self._scaler_fields())
        self.events.emit("step", step=step, loss=loss, grad_norm=grad_norm, lr=lr, tokens=tokens,
                         data_wait_s=data_wait_s, compute_s=compute_s, **fields)
        if self.digests_every and step % self.digests_every == 0:
            self.digests(step)
        if profiled is not None:
            self.events.emit("profile", step=step, **profiled)
        # The second step's peak: reset after the first (and after anything of the helper's in it).
        self._steps_seen += 1
        self._last_step = step
        if self._steps_seen == 1:
            if not self._load_said:  # the program does not call data_ready(): its first step is in the window
                self._stage_memory("load", "from the process's start to the end of the first step (the program "
                                   "does not call pilot.data_ready(), which marks where a step begins)")
            self._peak_reset = ev.reset_peak(self._device)
        elif self._steps_seen == 2:
            self._step_memory(step)
            self._stage_memory("train", "the second step (optimizer state allocated)")
        else:
            ev.reset_peak(self._device)  # the next eval's or save's window starts here
        self._start_profile(step + 1)
        self._last = time.monotonic()

    def autocast(self):
        """The context the program runs its forward in, at the precision it declared in
        anchor_pilot.shape(precision=...): torch.autocast to bf16 or fp16 on the model's device, nothing
        for fp32. Under anchor's precision check (a resume told precision_reference) it runs in fp32: the
        same step from the same state, for the verdict to compare its loss and gradient norm with."""
        declared = (_declared_shape() or {}).get("precision", "fp32")
        if declared == "fp32" or (self.spec is not None and self.spec.precision_reference):
            self._autocast = "fp32"
            return contextlib.nullcontext()
        self._autocast = declared
        dtype = torch.bfloat16 if declared == "bf16" else torch.float16
        return torch.autocast(device_type=self._device.type, dtype=dtype)

    def _scaler_fields(self):
        """A GradScaler's scale after this step's update() and whether the step was skipped (the scale
        went down: the scaler found an inf or NaN gradient and left the optimizer alone)."""
        if self.scaler is None or not getattr(self.scaler, "is_enabled", lambda: False)():
            return {}
        scale = float(self.scaler.get_scale())
        out = {"loss_scale": scale}
        if self._last_scale is not None and scale < self._last_scale:
            out["scaler_skipped"] = True
        self._last_scale = scale
        return out

    def _state_bytes(self):
        model = _unwrap(self.model)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        opt = 0
        if self.optimizer is not None:
            for st_ in self.optimizer.state.values():
                for v in st_.values():
                    if isinstance(v, torch.Tensor):
                        opt += v.numel() * v.element_size()
        return {"parameters": params, "gradients": grads, "optimizer": opt}

    def _step_memory(self, step):
        """The "step_memory" line: the peak of this process's second step
        (after the first, the optimizer state exists), the state's bytes and
        what was held before the first step."""
        device, peak_bytes, source = ev.peak(self._device)
        if not self._peak_reset:
            source += "; could not be reset after the first step: the peak of the whole process so far"
        # Held before the first step, where the peak is counted (none when the model moved to CUDA after the Pilot).
        baseline = self._baseline if self._baseline_device == device else None
        self.events.emit("step_memory", step=step, device=device, peak_bytes=peak_bytes, peak_source=source,
                         baseline_bytes=baseline, state=self._state_bytes())

    def eval(self, step, loss):
        """Reports the program's own validation loss at ``step`` (an "eval"
        line), with the peak memory since the last step line: the eval's."""
        self.events.emit("eval", step=step, loss=float(loss))
        self._stage_memory("eval", "from the last step line to this eval line")
        self._last = time.monotonic()

    def _stage_memory(self, stage, window):
        """A "memory" line with the peaks of `stage` (since the last reset), then a new window."""
        if stage in ("load", "restore"):  # a restore is this process's load
            self._load_said = True
        self.events.emit("memory", stage=stage, window=window, **ev.window_memory(self._device))
        ev.reset_peak(self._device)

    def _evaluate(self, step, when):
        """Runs the program's evaluate() (Pilot(evaluate=...)) at ``step``:
        "before_save" in every save, "after_restore" right after a restore.
        Every RNG stream and each module's train/eval mode are put back as
        they were, so the run goes on as if it had not run; its loss goes in
        an "eval" line, its peak memory in a "memory" line."""
        if self.evaluate is None:
            return
        modules = [(m, m.training) for m in _unwrap(self.model).modules()]
        rng = _rng_get()
        ev.reset_peak(self._device)
        t0 = time.monotonic()
        try:
            loss = self.evaluate()
        finally:
            for m, training in modules:
                m.training = training
            _rng_put(rng)
        if isinstance(loss, torch.Tensor):
            loss = loss.item()
        self.events.emit("eval", step=step, loss=float(loss), when=when, seconds=time.monotonic() - t0)
        self._stage_memory("eval" if when == "before_save" else "eval_after_restore", "the program's evaluate()")
        self._last = time.monotonic()

    def _start_profile(self, next_step):
        """Under anchor, worker B profiles its last step (the spec's profile_step): from here, the end of
        the step (or restore) before it."""
        if self._profile is None and self._profile_step is not None and next_step == self._profile_step:
            self._profile = StepProfile(self._device)
            self._profile.start()

    def _stop_profile(self, step):
        if self._profile is None or step != self._profile_step:
            return None
        prof, self._profile = self._profile, None
        path = os.path.join(self.spec.run_dir, "profile.json") if self.rank == 0 else None
        out = prof.stop(path)
        # The MFU estimate's reference, as the built-in worker measures it: here, where worker B's step
        # times are not the measured ones (worker A's are), rather than inside worker A's loop.
        out["matmul_flops"] = ev.matmul_flops(self._device)
        return out

    def memory(self, stage):
        return self.events.emit("memory", stage=stage, **ev.memory())

    # ----- save ---------------------------------------------------------------------------------------------
    def maybe_save(self, step):
        """Saves when ``step`` is one of save_at; returns the step directory or None."""
        return self.save(step) if step in self.save_at else None

    def should_save(self, step):
        """Whether ``step`` is one anchor asks the program to save (save_at)."""
        return step in self.save_at

    # ----- observed mode: the program's own save and load code ---------------------------------------------
    def _need_observe(self, what, instead):
        if not self.observe:
            raise PilotError(what, "this Pilot saves and restores with the helper's own checkpoints",
                             "create it with observe=True to keep your own save and load code, or call %s" % instead)

    @contextlib.contextmanager
    def saving(self, step):
        """Wraps the program's own save of ``step`` (observe=True): fingerprints
        the live state before the save, then reports the files the save wrote
        under checkpoint_dir. Under anchor, in the save anchor kills, the
        program is held once its first file there appears, and killed."""
        self._need_observe("Pilot.saving()", "Pilot.maybe_save(step)")
        self._say_program()
        self._evaluate(step, "before_save")
        ev.reset_peak(self._device)
        t0 = time.monotonic()
        root = self.checkpoint_dir
        self.events.emit("checkpoint", op="save", phase="begin", step=step, dir=root)
        self.digests(step, when="save")  # before any file: a save anchor kills still says what it held
        before = obs.listing(root)
        window = self._kill_window(step)
        watch = obs.FirstFileWatch(root, window) if window is not None else None
        try:
            if watch is not None:
                watch.arm()
            yield
        finally:
            if watch is not None:
                watch.disarm()
                watch.close()
        after = obs.listing(root)
        files = obs.changed(before, after)
        if watch is not None:  # the save anchor kills, and it ended without being held inside
            raise CheckpointError(
                "save checkpoint step %d" % step,
                "anchor_pilot saw no file written under %s while the save ran%s" %
                (root, " (%d appeared: written by another thread or process?)" % len(files) if files else ""),
                "save into pilot.checkpoint_dir from the thread that calls pilot.saving(step) "
                "(docs/program.md, \"Your own checkpoint code\")")
        if self.spec is not None and not files and self.rank == 0:  # under DDP often rank 0 alone writes
            raise CheckpointError("save checkpoint step %d" % step, "the save wrote no file under %s" % root,
                                  "under anchor, save into pilot.checkpoint_dir: anchor pins and kills what it "
                                  "finds there")
        self.events.emit("checkpoint", op="save", phase="end", step=step, dir=root, files=files,
                         bytes=sum(after[f][0] for f in files), seconds=time.monotonic() - t0)
        self._stage_memory("checkpoint_save", "the program's save (inside pilot.saving())")
        self._peak_reset = self._peak_reset or self._steps_seen == 1
        self._last = time.monotonic()  # the save is not the next step's data wait

    def restored(self, step, seconds=None):
        """Call right after the program's own load (observe=True) with the step
        it resumes from (0 or None: it found nothing to resume). Fingerprints
        the state it loaded, for anchor to compare with the save of that step.
        ``seconds``: how long the load took, when the program timed it."""
        self._need_observe("Pilot.restored()", "Pilot.restore()")
        _say_reads(self.events)
        if not step:
            return 0
        timed = {"seconds": float(seconds)} if seconds is not None else {}
        self.events.emit("checkpoint", op="restore", phase="end", step=step, dir=self.checkpoint_dir, **timed)
        self._stage_memory("restore", "from the process's start to pilot.restored() (the program builds its "
                           "model and loads its checkpoint with its own code)")
        self.digests(step, when="restore")
        self._observed_step = step
        self._evaluate(step, "after_restore")
        self._start_profile(step + 1)
        self._last = time.monotonic()
        return step

    def save(self, step):
        """Saves every component as checkpoint ``step`` (atomic; see docs/checkpoints.md).
        Under DDP every rank must call it. Returns the step directory."""
        if self.observe:
            raise PilotError("Pilot.save()", "this Pilot observes the program's own save (observe=True)",
                             "wrap your save in `with pilot.saving(step):`")
        self._say_program()
        self._evaluate(step, "before_save")
        ev.reset_peak(self._device)
        t0 = time.monotonic()
        self.events.emit("checkpoint", op="save", phase="begin", step=step,
                         dir=os.path.join(self.checkpoint_dir, store.step_dir_name(step)))
        dcp_names = self._dcp_components()
        own = [(n, self._file(n)) for n in self.components if self._writes(n) and n not in dcp_names]
        blobs = {f: self._serialize(n) for n, f in own}
        # Every rank reports the digest of every component (also those rank 0 writes), so
        # each rank's lines compare with its own lines after a restore.
        owned = dict(own)
        digests = collections.OrderedDict(
            (n, st.digest(*(blobs[owned[n]] if n in owned else self._serialize(n)))) for n in self.components)
        self.last_digests = dict(digests)
        # Before any file: a save the supervisor kills still reports what it was saving.
        self.events.emit("digests", step=step, when="save", components=digests)
        files_by_component = {n: ([self._file(n)] if n not in PER_RANK or self.world_size == 1 else
                                  ["%s-rank%05d-of-%05d.safetensors" % (n, r, self.world_size)
                                   for r in range(self.world_size)]) for n in self.components}
        state = {"format": STATE_FORMAT, "world_size": self.world_size, "seed": self.seed,
                 "components": files_by_component,
                 "saved_by": {"anchor_pilot": __version__, "torch": torch.__version__}}
        if dcp_names:
            state["dcp"] = list(dcp_names)
        if self.world_size == 1 and not dcp_names:
            sv = store.Save(self.checkpoint_dir, step)
            sv.window = self._kill_window(step)
            try:
                sv.begin([f for _, f in own])
                for _, f in own:
                    prefix, chunks = blobs[f]
                    sv.write(f, [prefix] + chunks)
                final = sv.commit(state)
            except PilotError:
                sv.abort()
                raise
            except OSError as e:
                where = e.filename or sv.writing()  # before abort() removes the temporary directory
                sv.abort()
                raise CheckpointError("save checkpoint step %d in %s" % (step, self.checkpoint_dir),
                                      "%s: %s" % (where, e.strerror or e),
                                      "check free space and permissions of the checkpoint directory") from e
            nbytes = sv.bytes
        else:
            final, nbytes = self._save_distributed(step, own, blobs, state)
        self.events.emit("checkpoint", op="save", phase="end", step=step, dir=final, bytes=nbytes,
                         seconds=time.monotonic() - t0)
        # Its window ends here: a save inside the measured step's window is not the step's peak.
        self._stage_memory("checkpoint_save", "Pilot.save()")
        self._peak_reset = self._peak_reset or self._steps_seen == 1
        self._last = time.monotonic()
        return final

    def _save_distributed(self, step, own, blobs, state):
        d = _dist()
        if d is None:
            raise CheckpointError("save checkpoint step %d" % step,
                                  "WORLD_SIZE is %d but torch.distributed is not initialized" % self.world_size,
                                  "call torch.distributed.init_process_group() before creating the Pilot")
        x = _Exchange(d, self.rank, self.world_size)
        sv = None
        box = None
        failure = None  # rank 0's exception: said to every rank first, so none waits for a message that never comes
        if self.rank == 0:
            try:
                sv = store.Save(self.checkpoint_dir, step, remote=True)
                sv.window = self._kill_window(step)
                sv.begin([f for _, f in own])
                box = {"tmp": sv.tmp}
            except Exception as e:  # noqa: BLE001 - re-raised below once the other ranks know
                box, failure = {"error": "rank 0: %s" % e}, e
        box = x.broadcast(box)
        if failure is not None and not isinstance(failure, (PilotError, OSError)):
            raise failure
        if "error" in box:
            raise CheckpointError("save checkpoint step %d" % step, box["error"])
        report = {"files": []}
        try:
            for _, f in own:
                prefix, chunks = blobs[f]
                if self.rank == 0:
                    sv.write(f, [prefix] + chunks)
                else:
                    report["files"].append(store.write_into(box["tmp"], f, [prefix] + chunks))
            if self._dcp_components():  # every rank, collectively: its shard, and rank 0 the metadata last
                import torch.distributed.checkpoint as dcp
                dcp.save(self._dcp_state(), storage_writer=dcp.FileSystemWriter(box["tmp"]))
                for f in _dcp_files(box["tmp"], self.rank):
                    if self.rank == 0:
                        sv.record(*store.hash_file(box["tmp"], f))
                    else:
                        report["files"].append(store.hash_file(box["tmp"], f))
        except Exception as e:  # noqa: BLE001 - re-raised below once rank 0 has said the save failed
            report = {"error": "rank %d: %s" % (self.rank, e)}
            if not isinstance(e, (PilotError, OSError)):
                failure = e
        reports = x.gather(report)
        outcome = None
        if self.rank == 0:
            errors = [r["error"] for r in reports if "error" in r]
            try:
                if errors:
                    raise CheckpointError("save checkpoint step %d" % step, "; ".join(errors))
                sv.add_remote([tuple(f) for r in reports[1:] for f in r["files"]])
                outcome = {"dir": sv.commit(state), "bytes": sv.bytes}
            except Exception as e:  # noqa: BLE001 - re-raised below once the other ranks know
                sv.abort()
                outcome = {"error": str(e)}
                if failure is None and not isinstance(e, (PilotError, OSError)):
                    failure = e
        outcome = x.broadcast(outcome)
        if failure is not None:
            raise failure
        if "error" in outcome:
            raise CheckpointError("save checkpoint step %d in %s" % (step, self.checkpoint_dir), outcome["error"],
                                  "the save left no committed step; earlier checkpoints are untouched")
        return outcome["dir"], outcome["bytes"]

    # ----- restore ------------------------------------------------------------------------------------------
    def _choose(self):
        """The Verified step directory to restore, or None to start from 0."""
        if self.restore_dir:
            v, problems = store.inspect(self.restore_dir)
            if v is None:
                raise CheckpointError("restore %s" % self.restore_dir,
                                      "it does not verify: " + "; ".join(problems),
                                      "run `anchor checkpoint verify %s` for details; restore another step"
                                      % self.restore_dir)
            return v
        v, skipped = store.newest(self.checkpoint_dir)
        self.skipped = skipped
        for path, problems in skipped:
            sys.stderr.write("anchor_pilot: skipped checkpoint %s: %s\n" % (path, "; ".join(problems)))
            self.events.emit("checkpoint", op="restore", phase="skip", dir=path, problems=problems)
        if v is None and self.role == "resume":
            why = "no step directory verifies" + ("" if skipped else " (there are none)")
            raise CheckpointError("resume from %s" % self.checkpoint_dir, why,
                                  "a resume run needs a committed checkpoint; check the reference run's save")
        return v

    def restore(self, skip=()):
        """Restores every component from the checkpoint to resume from and
        returns its step (0 when there is none: start from scratch).

        The checkpoint is the spec's ``restore`` directory, else the newest
        step that verifies (others are skipped with their reasons, in
        ``self.skipped`` and as "checkpoint" lines with phase "skip"). A
        reference run never restores. ``skip`` names components deliberately
        left as they are (experiments only: the resume then is not exact)."""
        if self.observe:
            raise PilotError("Pilot.restore()", "this Pilot observes the program's own load (observe=True)",
                             "load with your own code, then call pilot.restored(step)")
        if self.role in ("reference", "probe"):
            return 0
        for name in skip:
            if name not in COMPONENTS:
                raise PilotError("restore", "unknown component %r in skip" % name, "use one of " + ", ".join(COMPONENTS))
        ev.reset_peak(self._device)
        t0 = time.monotonic()
        d = _dist() if self.world_size > 1 else None
        if d is not None:
            box = None
            failure = None
            if self.rank == 0:
                try:
                    v = self._choose()
                    box = {"dir": v.path if v else None}
                except Exception as e:  # noqa: BLE001 - re-raised below once the other ranks know
                    box = {"error": str(e)}
                    if not isinstance(e, PilotError):
                        failure = e
            box = _Exchange(d, self.rank, self.world_size).broadcast(box)
            if failure is not None:
                raise failure
            if "error" in box:
                raise CheckpointError("restore", box["error"])
            if box["dir"] is None:
                return 0
            v, problems = store.inspect(box["dir"])
            if v is None:
                raise CheckpointError("restore %s on rank %d" % (box["dir"], self.rank),
                                      "it does not verify here: " + "; ".join(problems))
        else:
            v = self._choose()
            if v is None:
                return 0
        self.events.emit("checkpoint", op="restore", phase="begin", step=v.step, dir=v.path)
        where = v.path
        saved = v.state.get("components")
        if v.state.get("format") != STATE_FORMAT or not isinstance(saved, dict):
            raise RestoreError("restore %s" % where, "state.json is not anchor_pilot's (format %s)"
                               % json.dumps(v.state.get("format")),
                               "this checkpoint was written by another program (e.g. anchor's own trainer); "
                               "anchor_pilot restores only checkpoints it saved")
        if v.state.get("world_size") != self.world_size:
            raise RestoreError("restore %s" % where, "saved by %s ranks, restoring on %d"
                               % (v.state.get("world_size"), self.world_size),
                               "resume with the same number of ranks (the helper does not reshard)")
        unknown = [n for n in saved if n not in COMPONENTS]
        missing = [n for n in self.components if n not in saved and n not in skip]
        extra = [n for n in saved if n in COMPONENTS and n not in self.components and n not in skip]
        if unknown or missing or extra:
            why = []
            if missing:
                why.append("it has no %s state (%s), which this Pilot was given"
                           % (" / ".join(missing), ", ".join(self._file(n) for n in missing)))
            if extra:
                why.append("it holds %s state, which this Pilot was not given" % " / ".join(extra))
            if unknown:
                why.append("unknown components %s" % ", ".join(unknown))
            raise RestoreError("restore %s" % where, "; ".join(why),
                               "create the Pilot with the same components as the run that saved it "
                               "(model, optimizer, scheduler, scaler, data)")
        nbytes = 0
        expected = {}
        dcp_names = [n for n in (v.state.get("dcp") or []) if n in self.components and n not in skip]
        if dcp_names:
            nbytes += self._load_dcp(v, dcp_names, where)
        order = [n for n in self.components if n != "rng"] + ["rng"]  # RNG last: nothing after it draws
        for name in order:
            if name in skip or name in dcp_names:
                continue
            fname = self._file(name)
            if fname not in v.files:
                raise RestoreError("restore %s" % where, "%s is missing for the %s state" % (fname, name),
                                   "restore with the same number of ranks it was saved with")
            meta, tensors = v.files[fname]
            nbytes += sum(len(b) for _, _, b in tensors.values())
            try:
                structure = json.loads(meta["anchor_pilot.structure"])
            except (KeyError, ValueError) as e:
                raise RestoreError("restore %s/%s" % (where, fname), "no valid anchor_pilot.structure metadata (%s)" % e,
                                   "the file was not written by anchor_pilot")
            objs = {k: tt.to_tensor(dt, shape, buf) for k, (dt, shape, buf) in tensors.items()}
            value = stt.decode(structure, objs, "%s/%s" % (where, fname))
            if name == "model":
                value = collections.OrderedDict(value)
                if "anchor_pilot.module_metadata" in meta:
                    value._metadata = collections.OrderedDict(
                        stt.decode(json.loads(meta["anchor_pilot.module_metadata"]), {}, fname))
            if name == "optimizer":
                self._check_optimizer(value, where + "/" + fname)
            self._restoring = "%s/%s" % (where, fname)
            try:
                self.components[name].put(value)
            except PilotError:
                raise
            except (ValueError, RuntimeError, KeyError, TypeError) as e:
                raise RestoreError("restore %s from %s/%s" % (name, where, fname), "%s: %s" % (type(e).__name__, e),
                                   "the %s does not accept the saved state: build it as the run that saved it did"
                                   % name) from e
            expected[name] = v.digests[fname]
        digests = self.digests(v.step, emit=False)
        # What was loaded and what it hashes to, before the check below: when it fails, anchor's
        # verdict names the component from these (exit 3), and the error follows.
        self.events.emit("checkpoint", op="restore", phase="end", step=v.step, dir=where, bytes=nbytes,
                         seconds=time.monotonic() - t0)
        self._stage_memory("restore", "Pilot.restore(): reading, verifying and loading every component")
        self.events.emit("digests", step=v.step, when="restore", components=digests)
        if self.check_restore:
            bad = [n for n in expected if digests[n] != expected[n]]
            if bad:
                raise RestoreError("restore %s" % where, "after loading, the state of %s differs from the checkpoint "
                                   "(%s)" % (", ".join(bad), "; ".join("%s: file %s, restored %s"
                                                                        % (n, expected[n][:12], digests[n][:12])
                                                                        for n in bad)),
                                   "its load_state_dict does not restore what its state_dict returned; "
                                   "make them inverse (or pass check_restore=False to accept it)")
        self.restored_from = v
        self._evaluate(v.step, "after_restore")
        self._start_profile(v.step + 1)
        self._last = time.monotonic()
        return v.step

    def _load_dcp(self, v, names, where):
        """Loads the sharded components of step directory ``v`` through DCP (every rank, collectively) and
        returns the bytes of its files. The digests after it are compared with the save's by anchor."""
        if not set(names) <= set(self._dcp_components()):
            raise RestoreError("restore %s" % where, "its %s state was saved through torch.distributed.checkpoint "
                               "from a sharded model, and this Pilot's model is not sharded" % " and ".join(names),
                               "build the model sharded as the run that saved it (fully_shard)")
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict
        sd = self._dcp_state(names)
        self._restoring = "%s/%s" % (where, DCP_METADATA)
        try:
            dcp.load(sd, storage_reader=dcp.FileSystemReader(v.path))
            set_state_dict(_unwrap(self.model), [self.optimizer] if "optimizer" in names else [],
                           model_state_dict=sd["model"], optim_state_dict=sd.get("optim", {}))
        except (ValueError, RuntimeError, KeyError, TypeError) as e:
            raise RestoreError("restore %s from %s" % (" and ".join(names), where), "%s: %s" % (type(e).__name__, e),
                               "build the model and optimizer as the run that saved it did") from e
        return sum(os.path.getsize(os.path.join(v.path, f)) for f in _dcp_files(v.path, None))

    def _check_optimizer(self, sd, where):
        opt = self.optimizer
        groups = sd.get("param_groups") if isinstance(sd, dict) else None
        if not isinstance(groups, list):
            raise RestoreError("restore optimizer from %s" % where, "no param_groups", "the file is not an optimizer state")
        if len(groups) != len(opt.param_groups):
            raise RestoreError("restore optimizer from %s" % where, "the checkpoint has %d parameter groups, the "
                               "optimizer %d" % (len(groups), len(opt.param_groups)),
                               "build the optimizer with the same parameter groups as the run that saved it")
        saved_sizes = [len(g["params"]) for g in groups]
        sizes = [len(g["params"]) for g in opt.param_groups]
        if saved_sizes != sizes:
            raise RestoreError("restore optimizer from %s" % where, "parameter groups hold %s parameters in the "
                               "checkpoint, %s in the optimizer" % (saved_sizes, sizes),
                               "build the optimizer over the same parameters, in the same order")
        index = {}
        for g_saved, g in zip(groups, opt.param_groups):
            for i, p in zip(g_saved["params"], g["params"]):
                index[i] = p
        problems = []
        for i, entry in sd.get("state", {}).items():
            p = index.get(i)
            if p is None or not isinstance(entry, dict):
                continue
            for k, t in entry.items():
                if k in _PARAM_SHAPED and isinstance(t, torch.Tensor) and tuple(t.shape) != tuple(p.shape):
                    problems.append("state %s.%s has shape %s, the parameter %s" % (i, k, list(t.shape), list(p.shape)))
        if problems:
            raise RestoreError("restore optimizer from %s" % where, "; ".join(problems[:10]),
                               "build the same model and optimizer as the run that saved it")

    # ----- end ----------------------------------------------------------------------------------------------
    def error(self, message, kind=None):
        """An "error" line; `kind` names the exception (RestoreError: anchor's verdict then names the
        component the restore left different, from the digests it reported)."""
        self.events.emit("error", message=str(message), kind=kind)

    def close(self):
        if not self._closed:
            self._closed = True
            self._say_program()
            self.events.close()
            if self.role == "probe" and _declare.forked_point and self._steps_seen >= 2 and not self._failed:
                # A memory probe's point forked at shape() has reported its step: it ends here rather than
                # finalize an interpreter its parent still holds (0.45 s a point for examples/gpt).
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)

    def _kill_window(self, step):
        """Under anchor, the save the supervisor kills: once rank 0's first file is
        durable, a "kill_window" line, then this process waits for its SIGKILL."""
        if self.kill_in_save != step or self.rank != 0:
            return None

        def window(point):
            self.events.emit("checkpoint", op="save", phase="kill_window", step=step, dir=self.checkpoint_dir,
                             point=point)
            sys.stdout.flush()
            sys.stderr.flush()
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:  # anchor kills us; never return into the save
                time.sleep(1)
            raise CheckpointError("save checkpoint step %d" % step, "anchor did not kill this worker within 600 s "
                                  "of its kill window", "is the supervisor (anchor pilot) still running?")
        return window

    def _say_program(self):
        """Once per process, a "program" line: what the program runs on (its
        sources, the interpreter, the Python distributions), for anchor's manifest.
        Not in the memory probe: anchor pins worker A's (listing the distributions
        took 0.19 s a process here)."""
        if self._program_said or self.role == "probe":
            return
        self._program_said = True
        self.events.emit("program", **ev.program_info())

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._failed = exc is not None
        if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._say_program()
            if self.observe:
                _say_reads(self.events)
            self.error("%s: %s" % (type(exc).__name__, exc), kind=type(exc).__name__)
            try:
                exc._anchor_pilot_reported = True  # said once: not again by setup()'s excepthook
            except AttributeError:
                pass
        self.close()
        return False

    @property
    def start_step(self):
        if self.observe:
            return self._observed_step
        return self.restored_from.step if self.restored_from else 0


def _rng_get():
    s = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        s["numpy"] = np.random.get_state()
    return s


def _holds_dtensor(value):
    """Whether a state dict holds a DTensor (a model sharded with FSDP2); False where torch has none."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch 1.13
        return False
    return any(isinstance(t, DTensor) for t in value.values())


def _dcp_files(path, rank):
    """DCP's files in a step directory: ``rank``'s shards (``__<rank>_<i>.distcp``) and, for rank 0, the
    metadata; every one with ``rank`` None."""
    out = []
    for n in sorted(os.listdir(path)):
        m = re.fullmatch(r"__(\d+)_\d+\.distcp", n)
        if (m and (rank is None or int(m.group(1)) == rank)) or (n == DCP_METADATA and rank in (None, 0)):
            out.append(n)
    return out


def _local_shards(value, full=False):
    """`value` with every DTensor replaced by this rank's local tensor, or with
    ``full`` by the whole tensor (DTensor.full_tensor(): a collective every
    rank must call); dicts, lists and tuples walked, an OrderedDict's
    _metadata kept."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch 1.13: no DTensor
        return value

    def walk(v):
        if isinstance(v, DTensor):
            return v.full_tensor() if full else v.to_local()
        if isinstance(v, dict):
            out = type(v)((k, walk(x)) for k, x in v.items()) if isinstance(v, collections.OrderedDict) else \
                {k: walk(x) for k, x in v.items()}
            if hasattr(v, "_metadata"):
                out._metadata = v._metadata
            return out
        if isinstance(v, tuple) and hasattr(v, "_fields"):  # a namedtuple takes its fields one by one
            return type(v)(*[walk(x) for x in v])
        if isinstance(v, (list, tuple)):
            return type(v)(walk(x) for x in v)
        return v

    return walk(value)


def _rng_streams():
    """(name, state) of every RNG stream, each fingerprinted on its own in observed mode."""
    s = _rng_get()
    return [(k, s[k]) for k in ("torch", "cuda", "python", "numpy") if k in s]


def _rng_put(s):
    torch.set_rng_state(s["torch"])
    v = s["python"]
    random.setstate((v[0], tuple(v[1]), v[2]))
    if "cuda" in s:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(s["cuda"]):
            raise RestoreError("restore rng", "saved %d CUDA generator states, %d CUDA devices here"
                               % (len(s["cuda"]), torch.cuda.device_count() if torch.cuda.is_available() else 0),
                               "resume on as many visible GPUs as the run that saved it")
        torch.cuda.set_rng_state_all(s["cuda"])
    if "numpy" in s:
        import numpy as np
        np.random.set_state(s["numpy"])
