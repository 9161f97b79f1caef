"""What every qgemm module shares: quantized tensors as buffers that keep their dtypes, plans made
lazily per device, and the split between the kernel path and the CPU reference path.

* Buffers. Every quantized tensor (codes, scales, zero points, permutations) and the bias is a
  registered buffer, so state_dict() holds the whole layer and load_state_dict() restores it. The
  codes and scales keep their dtype through .half(), .bfloat16(), .float() and .to(dtype): torch's
  Module._apply would convert every floating-point buffer (FP8 codes and float32 scales included),
  so `_apply` here moves those buffers to the new device only. Buffers named in `_FLOAT_BUFFERS`
  (the bias) follow the conversion as an nn.Linear's would; the activation dtype the module was
  converted to is kept in `act_dtype` (None until a conversion), for modules whose kernels need
  one chosen ahead of the input.
* Plans. A plan (qgemm.FpAIntBPlan, ...) holds raw pointers into the buffers and copies of some of
  them in the kernel's dtype, so it is made on the first forward on a GPU and dropped whenever the
  buffers may have changed: on every _apply (.to(), .cuda(), .half(), to_empty()) and every
  load_state_dict(). A module built on the CPU or on the meta device therefore never touches a GPU
  until it runs on one.
* Paths. forward() runs the kernels for CUDA inputs (`_forward_impl`, the seam a torch.compile
  custom op will call) and, for CPU inputs, the reference path: the same quantized math in float64
  from the buffers (what the tests compare the kernels with, and what lets a quantized model run
  without a GPU, slowly). Under torch.compile / torch.export, forward is instead one custom op,
  qgemm::module_forward (qgemm/nn/_ops.py), with `_fake_forward` as its fake implementation.
"""
from __future__ import annotations

import torch
from torch import nn

from .._runtime import outside_graph_pools
from ._ops import handle_of

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_input(x, in_features: int):
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != in_features:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (..., {in_features}), got {shape}")


class QuantModule(nn.Module):
    """Base of the qgemm modules (module docstring). Subclasses register their tensors as buffers,
    implement `_make_plan(key)` (a plan for the buffers' device) and `_reference_forward`."""

    # Floating-point buffers that follow .half()/.bfloat16()/.float() (everything else keeps its dtype).
    _FLOAT_BUFFERS: tuple[str, ...] = ("bias",)

    def __init__(self):
        super().__init__()
        self.act_dtype: torch.dtype | None = None
        self._plans: dict = {}
        handle_of(self)  # the name torch.compile's op knows this module by (qgemm/nn/_ops.py)

    # --- buffers ----------------------------------------------------------------------------

    def _apply(self, fn, recurse: bool = True):
        if recurse:
            for module in self.children():
                module._apply(fn)
        # What this conversion does to floating-point tensors: a dtype conversion (.half(), .float(),
        # .double(), .to(dtype)) changes the dtype of one of two probes, a move changes neither.
        p64 = fn(torch.empty(0, dtype=torch.float64))
        p32 = fn(torch.empty(0, dtype=torch.float32))
        target = p32.dtype if p32.dtype != torch.float32 else p64.dtype if p64.dtype != torch.float64 else None
        if target in FLOAT_DTYPES:
            self.act_dtype = target if target in (torch.float16, torch.bfloat16) else None
        for name, buf in self._buffers.items():
            if buf is None:
                continue
            follows = name in self._FLOAT_BUFFERS and target != torch.float64  # the kernels take no float64 bias
            if target is not None and buf.is_floating_point() and not follows:
                # A dtype conversion of a quantized tensor: take the device only (learned from an
                # empty tensor, so that no converted copy of a large weight is made and thrown away).
                device = fn(torch.empty(0, dtype=buf.dtype, device=buf.device)).device
                self._buffers[name] = buf.to(device)
            else:
                self._buffers[name] = fn(buf)
        for name, param in self._parameters.items():
            if param is not None:
                raise TypeError(f"{type(self).__name__} holds no parameters, found {name!r}")
        self._plans.clear()
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Loading copies into the buffers (or replaces them with assign=True): plans that copied or
        # pointed at the old values are stale.
        self._plans.clear()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        self._plans.clear()

    def __getstate__(self):
        # Plans hold locks, ctypes buffers and raw pointers: a copy (deepcopy, pickle) makes its own.
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state["_plans"] = {}
        state.pop("_qgemm_handle", None)  # a copy is another module: it registers itself
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        handle_of(self)

    @property
    def device(self) -> torch.device:
        for buf in self._buffers.values():
            if buf is not None:
                return buf.device
        return torch.device("cpu")

    def _check_materialized(self):
        if self.device.type == "meta":
            raise RuntimeError(f"{type(self).__name__} is on the meta device: give it real tensors first "
                               f"(module.to_empty(device=...) then load_state_dict, or load_state_dict(..., "
                               f"assign=True))")

    # --- plans ------------------------------------------------------------------------------

    def plan(self, *key):
        """The kernel plan for `key` (the subclass's: e.g. the activation dtype), made on first use
        on the buffers' device and kept until the buffers move or are reloaded."""
        self._check_materialized()
        full_key = (self.device, *key)
        plan = self._plans.get(full_key)
        if plan is None:
            # Outside any CUDA graph's memory pool: torch.compile(mode="reduce-overhead") may make the
            # plan while its cudagraph trees warm the graph up (_runtime.outside_graph_pools).
            plan = self._plans[full_key] = outside_graph_pools(lambda: self._make_plan(*key), self.device)
        return plan

    def _make_plan(self, *key):
        raise NotImplementedError

    # --- forward ----------------------------------------------------------------------------

    def _uses_kernels(self, x: torch.Tensor) -> bool:
        """The kernel path for CUDA inputs, the reference path for everything else."""
        return x.device.type == "cuda"

    def forward(self, x, *args, **kwargs):
        if torch.compiler.is_compiling():
            # torch.compile / torch.export: one opaque op (qgemm/nn/_ops.py) whose fake
            # implementation is _fake_forward.
            layout = kwargs.get("layout", args[0] if args else None) or getattr(self, "layout", "")
            return torch.ops.qgemm.module_forward(x, self._qgemm_handle, layout if self._takes_layout else "")
        return self._eager_forward(x, *args, **kwargs)

    _takes_layout = False  # the convolutions' forward takes layout=

    def _fake_forward(self, x, *args, **kwargs):
        """The output's shape, dtype and strides for x (an empty tensor on x's device)."""
        raise NotImplementedError

    def _eager_forward(self, x, *args, **kwargs):
        self._check_materialized()
        if isinstance(x, torch.Tensor) and not self._uses_kernels(x):
            if x.device != self.device:
                raise ValueError(f"x must be on {self.device} (where {type(self).__name__}'s buffers are), "
                                 f"got {x.device}")
            return self._reference_forward(x, *args, **kwargs)
        return self._forward_impl(x, *args, **kwargs)

    def _forward_impl(self, x, *args, **kwargs):
        raise NotImplementedError

    def _reference_forward(self, x, *args, **kwargs):
        raise NotImplementedError
