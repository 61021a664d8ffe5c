#!/usr/bin/python3
"""Writes a safetensors file with the Python standard library only.

usage: write_safetensors.py OUT

Tensors (values the C++ test checks):
  a  F32  [2, 3]  a[i] = 0.5 * i - 1
  b  I64  [4]     [-3, 0, 7, 2**40]
  c  U8   [5]     [0, 1, 2, 254, 255]
  e  F64  [0]     (empty)
metadata {"writer": "python-stdlib", "format": "pt"}; header padded with
spaces to a multiple of 8 like the reference implementation.
"""
import json
import struct
import sys

tensors = [
    ("a", "F32", [2, 3], struct.pack("<6f", *[0.5 * i - 1 for i in range(6)])),
    ("b", "I64", [4], struct.pack("<4q", -3, 0, 7, 2 ** 40)),
    ("c", "U8", [5], bytes([0, 1, 2, 254, 255])),
    ("e", "F64", [0], b""),
]
header = {"__metadata__": {"writer": "python-stdlib", "format": "pt"}}
offset = 0
for name, dtype, shape, blob in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
    offset += len(blob)
text = json.dumps(header, separators=(",", ":")).encode("utf-8")
text += b" " * ((8 - len(text) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for _, _, _, blob in tensors:
        f.write(blob)
