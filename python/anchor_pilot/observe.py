"""Observed mode: the program's own save and load code (docs/program.md,
"Your own checkpoint code").

What the helper needs around a save it does not write: the files the save
left under the checkpoint directory (a listing before and after), and, for the
save anchor kills, the moment its first file appears. That moment is found
with inotify, from a profile hook that reads the inotify queue each time a
function returns, so the program is held right after the call that created
(or first wrote, or renamed into place) a file under the checkpoint
directory, before it can go on: open() returns an empty file, torch.save's
writer has just opened its file, safetensors has written its whole file, and
anchor's SIGKILL then lands inside the save whatever the save's speed. A save
of one file is torn too. Linux only, as anchor is.
"""
import ctypes
import os
import struct
import sys
import threading

_IN_MODIFY = 0x00000002
_IN_OPEN = 0x00000020
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
_EVENT = struct.Struct("iIII")


def listing(root):
    """{relative path: (size, mtime_ns, inode)} of every regular file under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone while listed (the program's own retention)
            if not os.path.islink(path) and os.path.isfile(path):
                out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def changed(before, after):
    """The files of `after` that are new or rewritten since `before`, sorted."""
    return sorted(p for p, sig in after.items() if before.get(p) != sig)


class _Inotify:
    """An inotify instance (non-blocking, close-on-exec) and the directories it watches."""

    def __init__(self, root, mask):
        self.root, self._mask = root, mask
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, "inotify_init1: %s" % os.strerror(e))
        self._dirs = {}

    def _watch(self, path):
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), self._mask)
        if wd >= 0:
            self._dirs[wd] = path

    def _events(self):
        """(path, mask) of every event queued so far, in order; nothing when none is."""
        while self._fd >= 0:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
                name = buf[off + _EVENT.size:off + _EVENT.size + length].rstrip(b"\0")
                off += _EVENT.size + length
                if name and wd in self._dirs:
                    yield os.path.join(self._dirs[wd], os.fsdecode(name)), mask

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FirstFileWatch(_Inotify):
    """Calls on_file(relative path) once, from the saving thread, as soon as a
    file under root is created, written or renamed into place while armed.
    Directories made during the save are watched as they appear."""

    def __init__(self, root, on_file):
        super().__init__(root, _MASK)
        self.on_file = on_file
        self.fired = None
        self._watch_tree(root)
        self._old = None

    def _watch_tree(self, top):
        """Watches top and every directory below it; returns a file already
        there (made with its directory in one call the hook did not see between)."""
        found = None
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            self._watch(dirpath)
            for name in sorted(filenames):
                if found is None and os.path.isfile(os.path.join(dirpath, name)):
                    found = os.path.join(dirpath, name)
        return found

    def poll(self):
        """The first file the queue names, or None."""
        for path, mask in self._events():
            if not mask & _IN_ISDIR:
                return path
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                inside = self._watch_tree(path)
                if inside is not None:
                    return inside
        return None

    def _hook(self, frame, event, arg):
        if self.fired is not None or event not in ("return", "c_return", "c_exception"):
            return
        path = self.poll()
        if path is not None:
            self.fired = os.path.relpath(path, self.root)
            self.disarm()
            self.on_file(self.fired)

    def arm(self):
        self._old = sys.getprofile()
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)

    def disarm(self):
        sys.setprofile(self._old)
        threading.setprofile(None)


class OpenWatch(_Inotify):
    """The files under root that this process opens from now on (inotify
    IN_OPEN, queued by the kernel: nothing runs in the program meanwhile).
    Worker B's resume: which save the program's own load read."""

    def __init__(self, root):
        super().__init__(root, _IN_OPEN)
        for dirpath, _dirnames, _files in os.walk(root):
            self._watch(dirpath)
        self.seen = []

    def opened(self):
        """Every file opened so far, relative to root, in first-open order."""
        for path, mask in self._events():
            rel = os.path.relpath(path, self.root)
            if not mask & _IN_ISDIR and rel not in self.seen:
                self.seen.append(rel)
        return list(self.seen)
