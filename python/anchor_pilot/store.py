"""anchor's committed checkpoint layout (docs/checkpoints.md), in Python.

A save writes every file into ``step-NNNNNNNN.tmp-<random>`` (each file
O_EXCL, fsynced), then ``state.json``, ``manifest.json`` and ``COMMITTED``
(SHA-256 of manifest.json + newline), fsyncs the directory, renames it to
``step-NNNNNNNN`` (exchanging it with an existing one) and fsyncs the parent.
``verify`` applies the checks of anchor's ``Store::verify`` and returns every
problem; ``newest`` walks steps newest first and returns the first that
verifies, with the reasons the others were skipped.
"""
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import time

from . import safetensors as st
from .errors import CheckpointError

MANIFEST_FORMAT = "anchor.checkpoint-manifest/v1"
STATE, MANIFEST, COMMITTED = "state.json", "manifest.json", "COMMITTED"
FAULT_ENV = "ANCHOR_PILOT_FAULT"
FAULT_EXIT_CODE = 86
_DIR_RE = re.compile(r"^step-([0-9]{1,18})(\.tmp-.*|\.trash-.*)?$", re.S)


def step_dir_name(step):
    return "step-%08d" % step


def parse_dir_name(name):
    """(kind, step): kind is 'step', 'temp', 'trash' or None."""
    m = _DIR_RE.match(name)
    if not m:
        return None, -1
    rest = m.group(2) or ""
    return ("step" if not rest else "temp" if rest.startswith(".tmp-") else "trash"), int(m.group(1))


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path, parts):
    """Writes ``parts`` to a new file (O_EXCL), fsyncs it; returns (size, sha256)."""
    h = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        for p in parts:
            view = memoryview(p)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            h.update(p)
            size += len(p)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return size, h.hexdigest()


def _exchange(a, b):
    """renameat2(RENAME_EXCHANGE); False when the system lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), a)


class Fault:
    """The test seam ANCHOR_PILOT_FAULT=<point>[@<step>]:exit|sigkill (anchor's ANCHOR_FAULT syntax)."""

    def __init__(self, text):
        point, sep, action = text.rpartition(":")
        if not sep or action not in ("exit", "sigkill") or not point:
            raise CheckpointError(FAULT_ENV, "malformed value %r" % text,
                                  "use <point>[@<step>]:exit or <point>[@<step>]:sigkill")
        self.step = None
        if "@" in point:
            point, _, s = point.rpartition("@")
            if not s.isdigit():
                raise CheckpointError(FAULT_ENV, "malformed step in %r" % text, "use <point>@<step>:<action>")
            self.step = int(s)
        self.point, self.action = point, action

    def check(self, points):
        if self.point not in points:
            raise CheckpointError(FAULT_ENV, "point %r is never reached by this save" % self.point,
                                  "this save's points: " + ", ".join(points))

    def fire(self, point, step):
        if point == self.point and (self.step is None or self.step == step):
            sys.stdout.flush()
            sys.stderr.flush()
            if self.action == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(FAULT_EXIT_CODE)


def fault_from_env():
    text = os.environ.get(FAULT_ENV)
    return Fault(text) if text else None


def save_points(files):
    return (["begin", "after_mkdir"] + ["after_file:" + f for f in files] +
            ["after_remote_files", "after_file:" + STATE, "after_manifest", "after_committed",
             "after_dir_fsync", "after_rename", "after_parent_fsync", "done"])


class Save:
    """One save in progress: ``begin`` makes the temp directory, ``write``
    adds files, ``commit`` writes state.json, manifest and COMMITTED and
    places the directory. Other ranks write into ``tmp`` with ``write_into``."""

    def __init__(self, root, step, remote=False):
        if step < 0:
            raise CheckpointError("save checkpoint step %d" % step, "step must be >= 0")
        self.root, self.step, self.remote = root, step, remote
        self.final = os.path.join(root, step_dir_name(step))
        self.tmp = None
        self.files = []  # (name, size, sha256)
        self.bytes = 0
        self.fault = fault_from_env()
        self.window = None  # called once, after the first file is durable (anchor's kill window)
        self._writing = None  # the file write() is writing, for an error that names none
        self.t0 = time.monotonic()

    def point(self, name):
        if self.fault:
            self.fault.fire(name, self.step)
        if self.window is not None and name.startswith("after_file:"):
            window, self.window = self.window, None
            window(name)

    def begin(self, planned_files):
        if self.fault:
            points = save_points(planned_files)
            if not self.remote:
                points.remove("after_remote_files")
            self.fault.check(points)
        self.point("begin")
        self._ensure_root()
        self.tmp = "%s.tmp-%s" % (self.final, secrets.token_hex(4))
        os.mkdir(self.tmp, 0o755)
        self.point("after_mkdir")
        return self.tmp

    def _ensure_root(self):
        missing = []
        p = os.path.abspath(self.root)
        while not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            os.mkdir(d, 0o755)
            _fsync_dir(os.path.dirname(d))

    def writing(self):
        """The file this save was writing last (an OSError from write() may name none: ENOSPC)."""
        return os.path.join(self.tmp or self.final, self._writing or "")

    def write(self, name, parts):
        self._writing = name
        size, sha = _write_file(os.path.join(self.tmp, name), parts)
        self.record(name, size, sha)
        self.point("after_file:" + name)

    def record(self, name, size, sha):
        if any(f[0] == name for f in self.files):
            raise CheckpointError("save checkpoint step %d" % self.step, "file %r given twice" % name)
        self.files.append((name, size, sha))
        self.bytes += size

    def add_remote(self, reports):
        for name, size, sha in reports:
            real = os.path.getsize(os.path.join(self.tmp, name))
            if real != size:
                raise CheckpointError("save checkpoint step %d" % self.step,
                                      "%s has %d bytes, its writer reported %d" % (name, real, size))
            self.record(name, size, sha)
        self.point("after_remote_files")

    def commit(self, state):
        state = dict(state)
        state["step"] = self.step
        self.write(STATE, [(json.dumps(state, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()])
        manifest = {"format": MANIFEST_FORMAT, "step": self.step,
                    "files": [{"path": n, "size": s, "sha256": h} for n, s, h in self.files]}
        mbytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        size, msha = _write_file(os.path.join(self.tmp, MANIFEST), [mbytes])
        self.bytes += size
        self.point("after_manifest")
        size, _ = _write_file(os.path.join(self.tmp, COMMITTED), [(msha + "\n").encode()])
        self.bytes += size
        self.point("after_committed")
        _fsync_dir(self.tmp)
        self.point("after_dir_fsync")
        old = None
        if os.path.lexists(self.final):
            if _exchange(self.tmp, self.final):
                old = self.tmp
            else:  # no renameat2: move the old one aside first (a kill in between keeps older steps)
                old = "%s.trash-%s" % (self.final, secrets.token_hex(4))
                os.rename(self.final, old)
                os.rename(self.tmp, self.final)
        else:
            os.rename(self.tmp, self.final)
        self.tmp = None
        self.point("after_rename")
        _fsync_dir(self.root)
        self.point("after_parent_fsync")
        if old:
            shutil.rmtree(old, ignore_errors=True)
        self.point("done")
        return self.final

    def abort(self):
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def hash_file(tmp, name):
    """A file another writer (torch.distributed.checkpoint) put into a save in progress: (name, size, sha256),
    read in 4 MiB blocks."""
    h, size = hashlib.sha256(), 0
    with open(os.path.join(tmp, name), "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            size += len(block)
    return name, size, h.hexdigest()


def write_into(tmp, name, parts):
    """A file another rank adds to a save in progress; returns (name, size, sha256)."""
    size, sha = _write_file(os.path.join(tmp, name), parts)
    return name, size, sha


class Verified:
    """A step directory that verified: its state.json, manifest and parsed safetensors files."""

    def __init__(self, path, step, state, manifest, files, digests):
        self.path, self.step, self.state, self.manifest = path, step, state, manifest
        self.files = files        # name -> (metadata, {tensor: (dtype, shape, bytes)})
        self.digests = digests    # name -> sha256 from the manifest


def _read_regular(path):
    """Bytes of a regular file; refuses FIFOs and devices without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        while True:
            b = os.read(fd, 1 << 22)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def inspect(path):
    """(Verified or None, [problems]) for one step directory."""
    problems = []
    base = os.path.basename(os.path.normpath(path))
    kind, step = parse_dir_name(base)
    if not os.path.isdir(path):
        return None, ["%s is not a directory" % path]
    if kind == "temp":
        return None, ["temporary directory of an unfinished save (never loaded)"]
    if kind == "trash":
        return None, ["being deleted by retention (never loaded)"]
    if kind is None:
        problems.append("directory name %r is not step-<N>" % base)

    def read(name):
        try:
            return _read_regular(os.path.join(path, name))
        except FileNotFoundError:
            return None
        except OSError as e:
            problems.append("%s: cannot be read: %s" % (name, e.strerror or e))
            return False

    commit = read(COMMITTED)
    mbytes = read(MANIFEST)
    if commit is None:
        problems.append("no COMMITTED marker: the save did not finish")
    if mbytes is None:
        problems.append("manifest.json is missing")
    if commit is not None and commit is not False and mbytes is not None and mbytes is not False:
        c = commit.decode("utf-8", "replace")
        msha = hashlib.sha256(mbytes).hexdigest()
        if not re.fullmatch(r"[0-9a-f]{64}\n", c):
            problems.append("COMMITTED does not hold a SHA-256 (64 lowercase hex digits and a newline)")
        elif c[:64] != msha:
            problems.append("COMMITTED holds %s but manifest.json hashes to %s" % (c[:64], msha))
    manifest, state, files, digests, listed = None, None, {}, {}, None
    if mbytes:
        try:
            manifest = json.loads(mbytes.decode("utf-8"))
        except ValueError as e:
            problems.append("manifest.json is not valid JSON: %s" % e)
        if manifest is not None and not isinstance(manifest, dict):
            problems.append("manifest.json is not a JSON object")
            manifest = None
    if manifest is not None:
        if manifest.get("format") != MANIFEST_FORMAT:
            problems.append("manifest.json format is %s, expected %r" % (json.dumps(manifest.get("format")),
                                                                        MANIFEST_FORMAT))
        mstep = manifest.get("step")
        if not isinstance(mstep, int) or isinstance(mstep, bool):
            problems.append("manifest.json has no integer step")
        elif step >= 0 and mstep != step:
            problems.append("manifest.json step is %d but the directory is step %d" % (mstep, step))
        if not isinstance(manifest.get("files"), list):
            problems.append("manifest.json has no files list")
        else:
            listed = set()
            for f in manifest["files"]:
                ok = (isinstance(f, dict) and isinstance(f.get("path"), str) and
                      isinstance(f.get("size"), int) and not isinstance(f.get("size"), bool) and
                      f["size"] >= 0 and isinstance(f.get("sha256"), str) and
                      re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) is not None)
                if not ok:
                    problems.append("manifest.json has a malformed file entry %s" % json.dumps(f))
                    continue
                name = f["path"]
                if not name or "/" in name or name in (MANIFEST, COMMITTED):
                    problems.append("manifest.json lists an invalid path %r" % name)
                    continue
                if name in listed:
                    problems.append("manifest.json lists %r twice" % name)
                    continue
                listed.add(name)
                data = read(name)
                if data is None:
                    problems.append("%s is missing (listed in manifest.json)" % name)
                    continue
                if data is False:
                    continue
                sha = hashlib.sha256(data).hexdigest()
                if len(data) != f["size"]:
                    problems.append("%s: size is %d bytes, manifest.json says %d" % (name, len(data), f["size"]))
                elif sha != f["sha256"]:
                    problems.append("%s: SHA-256 is %s, manifest.json says %s" % (name, sha, f["sha256"]))
                digests[name] = sha
                if name == STATE:
                    try:
                        s = json.loads(data.decode("utf-8"))
                        if not isinstance(s, dict):
                            problems.append("state.json is not a JSON object")
                        elif not isinstance(s.get("step"), int) or isinstance(s.get("step"), bool):
                            problems.append("state.json has no integer step")
                        elif step >= 0 and s["step"] != step:
                            problems.append("state.json step is %d but the directory is step %d"
                                            % (s["step"], step))
                        else:
                            state = s
                    except ValueError as e:
                        problems.append("state.json is not valid JSON: %s" % e)
                elif name.endswith(".safetensors"):
                    try:
                        files[name] = st.parse(data, name)
                    except CheckpointError as e:
                        problems.append("%s: %s" % (e.what, e.why))
            if STATE not in listed:
                problems.append("manifest.json does not list state.json")
    if listed is not None:
        for n in sorted(os.listdir(path)):
            if n not in (MANIFEST, COMMITTED) and n not in listed:
                problems.append("%s is not listed in manifest.json" % n)
    if problems:
        return None, problems
    return Verified(path, step, state, manifest, files, digests), []


def candidates(root):
    """Step directories under ``root``, newest first: [(step, path)]."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        kind, step = parse_dir_name(n)
        if kind == "step":
            out.append((step, os.path.join(root, n)))
    return sorted(out, reverse=True)


def newest(root, max_step=None):
    """(Verified or None, [(path, problems)] of the newer steps it skipped)."""
    skipped = []
    for step, path in candidates(root):
        if max_step is not None and step > max_step:
            continue
        v, problems = inspect(path)
        if v is not None:
            return v, skipped
        skipped.append((path, problems))
    return None, skipped


def remove_stale_temps(root):
    """Removes every ``.tmp-`` and ``.trash-`` directory under ``root`` (only
    when no other process saves into it)."""
    removed = []
    for n in os.listdir(root) if os.path.isdir(root) else []:
        kind, _ = parse_dir_name(n)
        if kind in ("temp", "trash"):
            shutil.rmtree(os.path.join(root, n), ignore_errors=True)
            removed.append(n)
    if removed:
        _fsync_dir(root)
    return removed
