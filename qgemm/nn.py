"""torch.nn modules over qgemm's plans, for swapping into a model in place of nn.Linear."""
from __future__ import annotations

import torch
from torch import nn

from .fp8 import Fp8GemmPlan, Fp8Weight


class Fp8Linear(nn.Module):
    """y = x W^T + b with W an FP8 weight in 128 x 128 blocks (DeepSeek-V3) and x quantized per
    token and 128-K group on each call. Takes x [..., K] in float32/float16/bfloat16 and returns
    [..., N] in `out_dtype` (by default x's dtype when that is bfloat16/float16, else bfloat16).

    The plan (and with it the device) is fixed at construction: build the module on the GPU it
    will run on, e.g. Fp8Linear.from_float(linear.cuda()).
    """

    def __init__(self, weight: Fp8Weight, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None):
        super().__init__()
        self.in_features = weight.k
        self.out_features = weight.n
        self.out_dtype = out_dtype
        self.register_buffer("weight", weight.qweight)
        self.register_buffer("weight_scale_inv", weight.scale_inv)
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous())
        self._plans: dict[torch.dtype, Fp8GemmPlan] = {}
        # Built eagerly so that bad weights fail here, not on the first forward.
        self._plan(out_dtype or torch.bfloat16)

    def _plan(self, out_dtype: torch.dtype) -> Fp8GemmPlan:
        plan = self._plans.get(out_dtype)
        if plan is None:
            plan = Fp8GemmPlan(Fp8Weight(self.weight, self.weight_scale_inv), bias=self.bias, out_dtype=out_dtype)
            self._plans[out_dtype] = plan
        return plan

    @classmethod
    def from_float(cls, linear: nn.Linear, out_dtype: torch.dtype | None = None) -> "Fp8Linear":
        """Quantize an nn.Linear's weight per 128 x 128 block (on the linear's device)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        return cls(Fp8Weight.from_float(linear.weight.detach()), linear.bias, out_dtype)

    @classmethod
    def from_deepseek(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor, bias: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None) -> "Fp8Linear":
        """From a DeepSeek-V3 checkpoint's FP8 weight [N, K] and weight_scale_inv [ceil(N/128), K/128]."""
        return cls(Fp8Weight.from_deepseek(weight, weight_scale_inv), bias, out_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.in_features:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (..., {self.in_features}), got {shape}")
        out_dtype = self.out_dtype or (x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).contiguous()
        return self._plan(out_dtype)(x2).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight={str(self.weight.dtype).replace('torch.', '')} 128x128 blocks")
