"""JSON lines the helper reports (docs/worker-protocol.schema.json)."""
import json
import math
import os
import platform
import sys
import time

import torch

from .errors import PilotError


def printable(s):
    """s as UTF-8 text: a byte that is not UTF-8 (a surrogate-escaped path
    byte) becomes the four characters \\xNN, as anchor prints them. JSON
    holds no lone surrogate, so a raw one would make anchor refuse the line."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no path decoding made
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, dict):
        return {printable(k) if isinstance(k, str) else k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class EventLog:
    """Appends one JSON object per line to ``path`` (O_APPEND, one write per
    line, so ranks appending to one file do not interleave within a line).
    Without a path, events are only kept in ``self.lines``."""

    def __init__(self, path, rank):
        self.path, self.rank, self.lines, self.fd = path, rank, [], None
        if path:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def emit(self, type_, **fields):
        event = {"type": type_, "rank": self.rank, "time": round(time.time(), 6)}
        event.update(_clean(fields))
        self.lines.append(event)
        if self.fd is not None:
            line = (json.dumps(event, sort_keys=False, allow_nan=False) + "\n").encode()
            os.write(self.fd, line)
        return event

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def versions():
    cuda = torch.version.cuda
    cudnn = nccl = None
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - a library probe, reported as unknown
        cudnn = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001
            nccl = None
    return {"torch": torch.__version__, "cuda": cuda, "cudnn": cudnn, "nccl": nccl,
            "python": platform.python_version()}


def memory():
    """CUDA allocated/reserved/total of the current device, else the RSS."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        dev = torch.cuda.current_device()
        return {"device": "cuda:%d" % dev, "allocated_bytes": torch.cuda.memory_allocated(dev),
                "reserved_bytes": torch.cuda.memory_reserved(dev),
                "max_allocated_bytes": torch.cuda.max_memory_allocated(dev),
                "total_bytes": torch.cuda.get_device_properties(dev).total_memory}
    return {"device": "cpu", "rss_bytes": _rss()}


def _status(*keys):
    """{key: bytes} of /proc/self/status's lines `keys` (kB there), None where unreadable."""
    out = dict.fromkeys(keys)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in out:
                    out[k] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _anon_rss():
    """The process's anonymous resident memory now (RssAnon): what it allocated (heap, tensors), not
    the libraries' and files' pages it has mapped (RssFile, RssShmem)."""
    return _status("RssAnon")["RssAnon"]


def _anon_peak():
    """The peak of the anonymous resident memory since VmHWM was last reset: VmHWM less the file-backed
    and shared pages resident now (a step frees none of them). A process forked from another (a probe
    point) maps its parent's libraries without their pages, and faults them in as it runs: counted in
    VmHWM, they are not the step's memory."""
    s = _status("VmHWM", "RssFile", "RssShmem")
    if s["VmHWM"] is None or s["RssFile"] is None:
        return None
    return max(0, s["VmHWM"] - s["RssFile"] - (s["RssShmem"] or 0))


def _vm_hwm():
    """Peak resident set size (VmHWM) of this process in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rss():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def model_device(model):
    """The torch.device the model's parameters are on (the first one's), CPU when it has none."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def held_bytes(device):
    """What the step's memory is counted in, now, on `device` (a torch.device):
    CUDA allocated there, else the process's anonymous RSS. (name, bytes)."""
    if device.type == "cuda":
        return "cuda:%d" % _index(device), torch.cuda.memory_allocated(device)
    return "cpu", _anon_rss()


def reset_peak(device):
    """Starts a new peak window: the process's VmHWM (writing 5 to
    /proc/self/clear_refs) and, on CUDA, the allocator's peaks on `device`.
    True when the peak the step's memory is counted in was reset."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss = True
    except OSError:
        rss = False
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    return rss


def peak(device):
    """(name, peak bytes since the last reset_peak(device), what it is)."""
    if device.type == "cuda":
        return "cuda:%d" % _index(device), torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    return "cpu", _anon_peak(), ("peak anonymous RSS (VmHWM less the file-backed pages resident: the "
                                 "interpreter's, the libraries' and the data's allocations included)")


def _index(device):
    return device.index if device.index is not None else torch.cuda.current_device()


def window_memory(device):
    """A stage's memory: the peaks since the last reset_peak(device) and the
    figures now. Always the process's peak RSS (VmHWM) and RSS; on CUDA also
    the allocator's peak allocated and reserved (max_memory_allocated,
    max_memory_reserved), allocated and reserved now, and the device's free
    and total bytes (mem_get_info)."""
    out = {"device": "cpu", "peak_rss_bytes": _vm_hwm(), "rss_bytes": _rss()}
    if device.type == "cuda":
        i = _index(device)
        free, total = torch.cuda.mem_get_info(i)
        out.update(device="cuda:%d" % i, peak_allocated_bytes=torch.cuda.max_memory_allocated(i),
                   peak_reserved_bytes=torch.cuda.max_memory_reserved(i),
                   allocated_bytes=torch.cuda.memory_allocated(i), reserved_bytes=torch.cuda.memory_reserved(i),
                   free_bytes=free, total_bytes=total)
    return out


def _program_dir():
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else None)
    return os.path.dirname(os.path.realpath(f)) if f else os.path.realpath(os.getcwd())


def check_program_paths():
    """Under anchor: the program's directory, its interpreter and every sys.path
    entry must be UTF-8, since they reach anchor as JSON text (UTF-8 only) and
    anchor pins what they name (it refuses a run, checkpoint or working
    directory that is not, before the program starts)."""
    named = [("the program's directory", _program_dir()), ("its interpreter", os.path.realpath(sys.executable))]
    named += [("sys.path entry", os.path.realpath(p) if p else os.path.realpath(os.getcwd())) for p in sys.path]
    for what, path in named:
        if printable(path) != path:
            raise PilotError("start the pilot", "%s %s is not UTF-8: anchor pins the program by the paths it reports, "
                             "which reach anchor as JSON text (UTF-8 only)" % (what, printable(path)),
                             "move it to (or run from) a path that is UTF-8")


def program_info():
    """The program's own source files (every module imported from under the
    main script's directory, outside site-packages), the interpreter,
    sys.path and the installed distributions (name, version, RECORD path)."""
    root = _program_dir()
    sources = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if not isinstance(f, str) or not f:
            continue
        f = os.path.realpath(f)
        if f.endswith(".pyc"):
            continue
        parts = f.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            continue
        if f.startswith(root + os.sep) and os.path.isfile(f):
            if printable(f) != f:
                raise PilotError("list the program's sources", "%s is not UTF-8: anchor pins sources by the paths the "
                                 "helper reports, as JSON text (UTF-8 only)" % printable(f),
                                 "rename it (or the directory that holds it) to a UTF-8 name")
            sources.add(f)
    dists = []
    try:
        from importlib import metadata
        seen = set()
        for d in metadata.distributions():
            name = d.metadata.get("Name") if d.metadata is not None else None
            path = getattr(d, "_path", None)
            if not name or path is None or str(path) in seen:
                continue
            seen.add(str(path))
            dists.append({"name": name, "version": d.version, "dist_info": os.path.realpath(str(path))})
    except Exception as e:  # noqa: BLE001 - reported, not swallowed: anchor shows it in the manifest
        dists = {"error": "%s: %s" % (type(e).__name__, e)}
    if isinstance(dists, list):
        dists.sort(key=lambda d: (d["name"].lower(), d["dist_info"]))
    return {"root": root, "sources": sorted(sources), "executable": os.path.realpath(sys.executable),
            "sys_path": [os.path.realpath(p) if p else os.path.realpath(os.getcwd()) for p in sys.path],
            "distributions": dists}


def matmul_flops(device):
    """FLOP/s of a 512x512 fp32 matmul on `device`, best of 5 after a warm-up,
    as anchor's built-in worker measures it (the MFU estimate's reference).
    Its inputs are fixed, not drawn from any generator."""
    n = 512
    with torch.no_grad():
        a = torch.linspace(-1.0, 1.0, n * n, device=device).reshape(n, n)
        b = torch.linspace(1.0, -1.0, n * n, device=device).reshape(n, n)
        c = a @ b
        best = 0.0
        for _ in range(5):
            t0 = time.perf_counter()
            c = a @ b
            float(c.sum())  # synchronises on a GPU
            s = time.perf_counter() - t0
            if s > 0:
                best = max(best, 2.0 * n ** 3 / s)
    return best
