"""Argument checks shared by the public entries; each error names the argument,
what it got and what is accepted, and is raised before anything is launched."""
from __future__ import annotations

import torch

from ._runtime import target_sm_for


def tensor(name: str, value, dtypes: tuple, ndim: int | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in dtypes:
        accepted = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype {accepted}; got {str(value.dtype).replace('torch.', '')}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(value.shape)}")
    return value


def shape(name: str, value: torch.Tensor, expected: tuple):
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(value.shape)}")


def contiguous(name: str, value: torch.Tensor):
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major); got strides {value.stride()} "
                         f"for shape {tuple(value.shape)}: call .contiguous()")


def cuda_device(name: str, value: torch.Tensor, device: torch.device | None = None):
    if value.device.type != "cuda":
        raise ValueError(f"{name} must be on a CUDA device, got {value.device}")
    if device is not None and value.device != device:
        raise ValueError(f"{name} must be on {device} (where the weights are), got {value.device}")


def same_device(name: str, value: torch.Tensor, device: torch.device):
    if value.device != device:
        raise ValueError(f"{name} must be on {device}, got {value.device}")


def aligned(name: str, value: torch.Tensor, nbytes: int, why: str):
    """The kernels' vector accesses need the tensor's start address aligned."""
    offset = value.data_ptr() % nbytes
    if offset:
        raise ValueError(f"{name} must start at a {nbytes}-byte aligned address ({why}), got offset {offset} "
                         f"bytes: pass a fresh or .clone()d tensor")


def one_of(name: str, value, accepted: tuple):
    if value not in accepted:
        raise ValueError(f"{name} must be one of {accepted}, got {value!r}")


def multiple(name: str, value: int, of: int, why: str):
    if value % of:
        raise ValueError(f"{name} must be a multiple of {of} ({why}), got {value}")


def target_sm(device: torch.device, needs: int, what: str) -> int:
    """The build target for `device`, or ValueError if it is older than sm`needs`."""
    cap = torch.cuda.get_device_capability(device)
    target = target_sm_for(cap)
    if target is None or target < needs:
        raise ValueError(f"{what} needs sm{needs} or later; device {device} is sm{cap[0]}{cap[1]}")
    return target


# Largest element count or extent a 32-bit signed index reaches.
INT32_LIMIT = (1 << 31) - 1


def finite(name: str, value: torch.Tensor):
    """ValueError if a weight-side tensor holds NaN or Inf. Meant for quantize and plan time (it
    reads the whole tensor back once, a device sync): a non-finite weight would silently give NaN
    scales, or finite codes that hide it, for every output column it touches."""
    t = value if value.is_floating_point() else None
    if t is None:
        return
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.float()  # isfinite has no FP8 kernels
    bad = ~torch.isfinite(t)
    count = int(bad.sum())
    if count:
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} holds {count} NaN/Inf value(s) (first at index {where}); qgemm quantizes "
                         f"finite weights only: a NaN/Inf weight would reach every output it touches")


def index_limit(name: str, value: int, limit: int = INT32_LIMIT, why: str = "32-bit index arithmetic"):
    """ValueError before any launch when an extent or element count passes what the kernel's index
    arithmetic holds (by default a signed 32-bit index, 2**31 - 1)."""
    if value > limit:
        raise ValueError(f"{name} is {value}, beyond the {limit} the kernel addresses ({why}): "
                         f"split the call (fewer rows, or smaller batches)")


def bias(t, length: int, device, dtypes: tuple = (torch.float32, torch.float16, torch.bfloat16)):
    """A plan's bias: 1-D, `length` elements of one of `dtypes`, on the weight's `device`."""
    tensor("bias", t, dtypes, ndim=1)
    shape("bias", t, (length,))
    same_device("bias", t, device)
