#!/usr/bin/python3
"""Reads an anchor checkpoint with the Python standard library only.

usage: read_checkpoint.py STEP_DIR EXPECT_JSON

Checks COMMITTED == SHA-256(manifest.json), every listed file's size and
SHA-256, parses every .safetensors header (8-byte little-endian length, JSON,
offsets tiling the data section, exact file length), and compares the tensor
values given in EXPECT_JSON:
  {"file": "model.safetensors", "tensor": "w", "dtype": "F32", "shape": [n],
   "values": {"0": 1.5, "17": 2.0}}
Prints "ok ..." and exits 0, or prints the problem and exits 1.
"""
import hashlib
import json
import os
import struct
import sys

FORMATS = {"F64": ("d", 8), "F32": ("f", 4), "I64": ("q", 8), "I32": ("i", 4),
           "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("?", 1)}
SIZES = {"F16": 2, "BF16": 2}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_safetensors(path):
    data = open(path, "rb").read()
    if len(data) < 8:
        fail(path + ": shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(path + ": header length past end of file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in meta.values()):
        fail(path + ": non-string metadata")
    pos = 0
    for name, t in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = t["data_offsets"]
        if begin != pos:
            fail("%s: tensor %s begins at %d, expected %d" % (path, name, begin, pos))
        count = 1
        for d in t["shape"]:
            count *= d
        size = FORMATS[t["dtype"]][1] if t["dtype"] in FORMATS else SIZES[t["dtype"]]
        if end - begin != count * size:
            fail("%s: tensor %s byte length mismatch" % (path, name))
        pos = end
    if 8 + n + pos != len(data):
        fail("%s: file is %d bytes, expected %d" % (path, len(data), 8 + n + pos))
    return header, meta, data[8 + n:]


def main():
    step_dir, expect_path = sys.argv[1], sys.argv[2]
    expect = json.load(open(expect_path))
    manifest_bytes = open(os.path.join(step_dir, "manifest.json"), "rb").read()
    committed = open(os.path.join(step_dir, "COMMITTED")).read()
    if committed != hashlib.sha256(manifest_bytes).hexdigest() + "\n":
        fail("COMMITTED does not match sha256(manifest.json)")
    manifest = json.loads(manifest_bytes)
    if manifest["format"] not in ("anchor.checkpoint-manifest/v1", "anchor.checkpoint-manifest/v2"):
        fail("manifest format " + manifest["format"])
    headers = {}
    per_tensor = 0
    for f in manifest["files"]:
        p = os.path.join(step_dir, f["path"])
        blob = open(p, "rb").read()
        if len(blob) != f["size"]:
            fail("%s: size %d, manifest says %d" % (f["path"], len(blob), f["size"]))
        if "sha256" in f:
            if hashlib.sha256(blob).hexdigest() != f["sha256"]:
                fail("%s: sha256 differs from the manifest" % f["path"])
        else:
            # v2: the header (length and JSON) and each tensor's bytes, pinned apart.
            if manifest["format"] != "anchor.checkpoint-manifest/v2":
                fail("%s: pinned per tensor in a v1 manifest" % f["path"])
            (n,) = struct.unpack_from("<Q", blob, 0)
            if hashlib.sha256(blob[:8 + n]).hexdigest() != f["header_sha256"]:
                fail("%s: header sha256 differs from the manifest" % f["path"])
            header = json.loads(blob[8:8 + n])
            names = sorted(k for k in header if k != "__metadata__")
            if names != sorted(f["tensors"]):
                fail("%s: the manifest pins tensors %s, the file holds %s" % (f["path"], sorted(f["tensors"]), names))
            for name in names:
                b, e = header[name]["data_offsets"]
                if hashlib.sha256(blob[8 + n + b:8 + n + e]).hexdigest() != f["tensors"][name]:
                    fail("%s: tensor %s sha256 differs from the manifest" % (f["path"], name))
            per_tensor += 1
        if f["path"].endswith(".safetensors"):
            headers[f["path"]] = read_safetensors(p)
    state = json.load(open(os.path.join(step_dir, "state.json")))
    if state["step"] != manifest["step"]:
        fail("state.json step differs from the manifest")
    header, meta, body = headers[expect["file"]]
    t = header[expect["tensor"]]
    if t["dtype"] != expect["dtype"] or t["shape"] != expect["shape"]:
        fail("tensor %s is %s %s, expected %s %s" % (expect["tensor"], t["dtype"], t["shape"],
                                                     expect["dtype"], expect["shape"]))
    fmt, size = FORMATS[t["dtype"]]
    begin = t["data_offsets"][0]
    for idx, want in expect["values"].items():
        (got,) = struct.unpack_from("<" + fmt, body, begin + int(idx) * size)
        if got != want:
            fail("%s[%s] = %r, expected %r" % (expect["tensor"], idx, got, want))
    print("ok step=%d files=%d per_tensor=%d tensors_checked=%d" % (manifest["step"], len(manifest["files"]),
                                                                   per_tensor, len(expect["values"])))


if __name__ == "__main__":
    main()
