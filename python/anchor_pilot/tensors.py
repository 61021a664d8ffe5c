"""torch tensors to and from safetensors entries (dtype name, shape, bytes)."""
import ctypes

import torch

from . import safetensors as st
from .errors import CheckpointError

DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
BY_NAME = {name: dt for dt, name in DTYPES.items()}


def tensor_bytes(t):
    """The bytes of ``t`` (any device, any strides) in C order, little-endian."""
    if t.dtype not in DTYPES:
        raise CheckpointError("serialize tensor", "dtype %s has no safetensors name anchor reads" % t.dtype,
                              "anchor reads %s; convert the tensor (e.g. .float())" % ", ".join(DTYPES.values()))
    if t.layout != torch.strided:
        raise CheckpointError("serialize tensor", "layout %s is not strided" % t.layout,
                              "store a dense tensor (.to_dense())")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    u8 = flat.view(torch.uint8)
    return ctypes.string_at(u8.data_ptr(), u8.numel())


def serialize(tensors, metadata=None):
    """st.serialize of a {name: torch.Tensor} map."""
    entries = {}
    for name, t in tensors.items():
        blob = tensor_bytes(t)  # refuses a dtype anchor does not read
        entries[name] = (DTYPES[t.dtype], list(t.shape), blob)
    return st.serialize(entries, metadata)


def to_tensor(dtype_name, shape, buf):
    """A new CPU tensor holding a copy of ``buf``."""
    dt = BY_NAME[dtype_name]
    if len(buf) == 0:
        return torch.empty(shape, dtype=dt)
    u8 = torch.frombuffer(bytearray(buf), dtype=torch.uint8)
    return u8.view(dt).reshape(shape)
