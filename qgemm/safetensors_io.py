"""A small reader and writer of the safetensors format (safetensors is not a dependency).

The format: an 8-byte little-endian unsigned header length L, then L bytes of UTF-8 JSON, then the
tensors' raw little-endian bytes. The header maps each tensor name to
{"dtype": "F16", "shape": [...], "data_offsets": [begin, end]} (offsets into the byte buffer that
follows the header, end exclusive), plus an optional "__metadata__" map of strings to strings.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys

import torch

DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64,
    "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
MAX_HEADER = 100 << 20  # the reference implementation's bound


class SafetensorsError(ValueError):
    pass


def read_header(path) -> tuple[dict, int]:
    """(header without __metadata__, offset of the byte buffer) of a .safetensors file."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {length} exceeds {MAX_HEADER} bytes")
        try:
            header = json.loads(f.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path}: the header is not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header must be a JSON object")
    header.pop("__metadata__", None)
    return header, 8 + length


def load_file(path, device="cpu", names=None) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file (all, or those in `names`), as independent tensors on `device`."""
    header, start = read_header(path)
    size = os.path.getsize(path)
    out = {}
    with open(path, "rb") as f:
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            for name, info in header.items():
                if names is not None and name not in names:
                    continue
                out[name] = _tensor(path, name, info, buffer, start, size).to(device)
        finally:
            if size:
                buffer.close()
    return out


def _tensor(path, name, info, buffer, start, size) -> torch.Tensor:
    try:
        dtype = DTYPES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(v) for v in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise SafetensorsError(f"{path}: tensor {name!r} has a bad entry {info!r} (dtype one of {sorted(DTYPES)}, "
                               f"shape, data_offsets)") from None
    count = 1
    for d in shape:
        count *= d
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    if end - begin != nbytes or begin < 0 or start + end > size:
        raise SafetensorsError(f"{path}: tensor {name!r} ({info['dtype']} {shape}) needs {nbytes} bytes, its "
                               f"data_offsets {[begin, end]} give {end - begin} within a {size - start}-byte buffer")
    raw = bytearray(buffer[start + begin:start + end])  # a copy: the tensor outlives the mapping
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    if sys.byteorder != "little" and dtype.itemsize > 1:
        raise SafetensorsError("big-endian hosts are not supported")
    return flat.view(dtype).reshape(shape)


def save_file(tensors: dict[str, torch.Tensor], path, metadata: dict[str, str] | None = None):
    """Write tensors (any device; contiguous copies are made) as a .safetensors file, in name order."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{name!r}] must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in NAMES:
            raise TypeError(f"tensors[{name!r}] has dtype {t.dtype}, which safetensors cannot store "
                            f"(accepted: {sorted(str(d) for d in NAMES)})")
        data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the reference writer pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for chunk in chunks:
            f.write(chunk)
