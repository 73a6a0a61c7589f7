"""dtype mapping between safetensors, numpy and torch, and turning user tensors into bytes."""

import numpy as np

from ._weightcast import InvalidArgumentError

try:  # torch is optional: without it everything is numpy (bf16 as raw uint16 bits).
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is a listed dependency
    torch = None

# safetensors dtype -> numpy dtype holding the same bytes. Types numpy lacks are raw bits:
# BF16 as uint16, the float8 types as uint8 (same shape); sub-byte types (F6, F4) have no
# element numpy can index, so their views are flat uint8 byte arrays.
NUMPY_OF = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("<u1"),
    "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("<u1"),
    "F8_E5M2": np.dtype("<u1"),
    "F8_E8M0": np.dtype("<u1"),
}
SUB_BYTE = {"F6_E2M3", "F6_E3M2", "F4"}
# dtypes whose numpy view is not their value (raw bits).
RAW_IN_NUMPY = {"BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"} | SUB_BYTE

_NAME_OF_NUMPY = {
    np.dtype(np.bool_): "BOOL",
    np.dtype("u1"): "U8",
    np.dtype("i1"): "I8",
    np.dtype("u2"): "U16",
    np.dtype("i2"): "I16",
    np.dtype("u4"): "U32",
    np.dtype("i4"): "I32",
    np.dtype("u8"): "U64",
    np.dtype("i8"): "I64",
    np.dtype("f2"): "F16",
    np.dtype("f4"): "F32",
    np.dtype("f8"): "F64",
}

if torch is not None:
    TORCH_OF = {
        "BOOL": torch.bool,
        "U8": torch.uint8,
        "I8": torch.int8,
        "I16": torch.int16,
        "I32": torch.int32,
        "I64": torch.int64,
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "F32": torch.float32,
        "F64": torch.float64,
    }
    for _name, _attr in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
        if hasattr(torch, _attr):  # torch >= 2.1
            TORCH_OF[_name] = getattr(torch, _attr)
    _NAME_OF_TORCH = {v: k for k, v in TORCH_OF.items()}
else:
    TORCH_OF = {}
    _NAME_OF_TORCH = {}


def is_torch_tensor(value):
    return torch is not None and isinstance(value, torch.Tensor)


def to_publishable(name, value):
    """(name, safetensors dtype, shape, C-contiguous little-endian numpy array of the bytes)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"tensor names must be non-empty strings, not {name!r}")
    if is_torch_tensor(value):
        # A copy only when the tensor is not already a contiguous CPU tensor.
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        dtype = _NAME_OF_TORCH.get(t.dtype)
        if dtype is None:
            raise InvalidArgumentError(f"tensor {name}: torch dtype {t.dtype} has no safetensors type")
        shape = list(t.shape)
        if t.dtype == torch.bfloat16:
            array = t.view(torch.int16).numpy()
        elif dtype in ("F8_E4M3", "F8_E5M2"):
            array = t.view(torch.uint8).numpy()
        else:
            array = t.numpy()
        return name, dtype, shape, array.reshape(-1)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        dtype = _NAME_OF_NUMPY.get(array.dtype.newbyteorder("="))
        if dtype is None:
            raise InvalidArgumentError(
                f"tensor {name}: numpy dtype {array.dtype} has no safetensors type "
                "(bf16 comes as a torch.bfloat16 tensor)")
        shape = list(array.shape)  # before ascontiguousarray, which makes 0-d arrays 1-d
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        return name, dtype, shape, array.reshape(-1)
    raise InvalidArgumentError(
        f"tensor {name}: expected a torch tensor or a numpy array, not {type(value).__name__}")
