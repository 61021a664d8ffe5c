"""The safetensors format, written and read without the safetensors package.

Byte layout (the one anchor's C++ writer produces, src/checkpoint/safetensors.cpp):
8-byte little-endian header length N; a compact JSON object with sorted keys
(``__metadata__``, a map of strings, only when non-empty; then each tensor as
``{"data_offsets": [begin, end], "dtype": ..., "shape": [...]}``), padded with
spaces to a multiple of 8; then the tensors' bytes, contiguous, in name order.
Torch-free (tensors.py converts torch tensors). The reader applies the rules of anchor's strict reader (docs/checkpoints.md,
"safetensors, strictly") and raises CheckpointError naming the rule.
"""
import hashlib
import json
import struct
import sys

from .errors import CheckpointError

if sys.byteorder != "little":  # pragma: no cover - every platform torch ships for
    raise ImportError("anchor_pilot writes little-endian safetensors and needs a little-endian host")

MAX_HEADER_BYTES = 100 * 1024 * 1024
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def serialize(entries, metadata=None):
    """(prefix, [chunks]) of a safetensors file. ``entries`` maps each tensor
    name to (dtype name, shape, bytes); ``prefix`` is the length and the padded
    header, the chunks the tensors' bytes in name order."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise CheckpointError("serialize safetensors", "metadata %r: %r is not a string to string entry"
                                      % (k, v))
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name in sorted(entries):
        if not name or name == "__metadata__":
            raise CheckpointError("serialize safetensors", "invalid tensor name %r" % name)
        dtype, shape, blob = entries[name]
        count = 1
        for d in shape:
            count *= d
        if dtype not in SIZES or count * SIZES[dtype] != len(blob):
            raise CheckpointError("serialize safetensors", "tensor %r %s %s has %d bytes" % (name, dtype, list(shape),
                                                                                           len(blob)))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        chunks.append(blob)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text, chunks


def digest(prefix, chunks):
    h = hashlib.sha256(prefix)
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _no_duplicates(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError("duplicate key %r" % k)
        seen.add(k)
    return dict(pairs)


def parse(data, path):
    """Parses and strictly checks a safetensors file's bytes.

    Returns (metadata, {name: (dtype_name, shape, memoryview of its bytes)}).
    Raises CheckpointError ``"<path>: <rule>: <details>"``.
    """
    def bad(rule, details):
        return CheckpointError(path, "%s: %s" % (rule, details),
                               "the file is corrupt, truncated or was not written by a safetensors writer")

    if len(data) < 8:
        raise bad("truncated header length", "%d bytes" % len(data))
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER_BYTES:
        raise bad("header too large", "%d bytes" % n)
    if 8 + n > len(data):
        raise bad("header length past end of file", "header of %d bytes, file of %d" % (n, len(data)))
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except ValueError as e:
        if "duplicate key" in str(e):
            raise bad("duplicate key", str(e))
        raise bad("header is not valid JSON", str(e))
    if not isinstance(header, dict):
        raise bad("header is not a JSON object", type(header).__name__)
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise bad("__metadata__ is not an object of strings", repr(meta)[:200])
    entries = []
    for name in sorted(header):
        t = header[name]
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            raise bad("bad tensor entry", "%r" % name)
        if t["dtype"] not in SIZES:
            raise bad("unknown dtype", "tensor %r: %r" % (name, t["dtype"]))
        shape = t["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise bad("bad shape", "tensor %r: %s" % (name, json.dumps(shape)[:200]))
        offs = t["data_offsets"]
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs) or
                offs[0] > offs[1]):
            raise bad("bad data_offsets", "tensor %r: %s" % (name, json.dumps(offs)[:200]))
        count = 1
        for d in shape:
            count *= d
        need = count * SIZES[t["dtype"]]
        if offs[1] - offs[0] != need:
            raise bad("shape/byte-length mismatch", "tensor %r %s %s needs %d bytes, data_offsets %s hold %d"
                      % (name, t["dtype"], shape, need, offs, offs[1] - offs[0]))
        entries.append((offs[0], offs[1], name, t["dtype"], shape))
    pos = 0
    for begin, end, name, _, _ in sorted(entries):
        if begin < pos:
            raise bad("overlapping data_offsets", "tensor %r begins at %d, before %d" % (name, begin, pos))
        if begin > pos:
            raise bad("gap in data_offsets", "tensor %r begins at %d, expected %d" % (name, begin, pos))
        pos = end
    if 8 + n + pos != len(data):
        raise bad("file length mismatch", "file is %d bytes, header and data make %d" % (len(data), 8 + n + pos))
    body = memoryview(data)[8 + n:]
    return meta, {name: (dt, shape, body[b:e]) for b, e, name, dt, shape in entries}
