"""The torch.library custom op through which torch.compile / torch.export see a qgemm module.

A plan is Python state (ctypes slots, cached launches) that Dynamo cannot trace, so under
torch.compile a module's forward becomes one opaque op, qgemm::module_forward(x, handle, layout),
whose real implementation runs the module's eager forward (kernels on a GPU, the reference path on
the CPU) and whose fake implementation gives the output's shape, dtype and strides. `handle` names
the module in a registry of weak references (a module is not a value an op can take). Eager calls
never go through the op, so their host overhead is unchanged.
"""
from __future__ import annotations

import itertools
import weakref

import torch

_MODULES: dict[int, weakref.ReferenceType] = {}
_NEXT = itertools.count(1)


def handle_of(module) -> int:
    """The module's handle, registered on first use (a weak reference: the registry keeps no module alive)."""
    handle = module.__dict__.get("_qgemm_handle")
    if handle is None or _MODULES.get(handle, lambda: None)() is not module:
        handle = next(_NEXT)
        _MODULES[handle] = weakref.ref(module, lambda _ref, h=handle: _MODULES.pop(h, None))
        module.__dict__["_qgemm_handle"] = handle
    return handle


def _module(handle: int):
    module = _MODULES.get(handle, lambda: None)()
    if module is None:
        raise RuntimeError(f"qgemm::module_forward: no live module has handle {handle}")
    return module


@torch.library.custom_op("qgemm::module_forward", mutates_args=())
def module_forward(x: torch.Tensor, handle: int, layout: str) -> torch.Tensor:
    module = _module(handle)
    kwargs = {"layout": layout} if layout else {}
    y = module._eager_forward(x, **kwargs)
    # An op's output may not alias its input (a module never returns x itself, but be explicit).
    return y.clone() if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() else y


@module_forward.register_fake
def _(x: torch.Tensor, handle: int, layout: str) -> torch.Tensor:
    kwargs = {"layout": layout} if layout else {}
    return _module(handle)._fake_forward(x, **kwargs)
