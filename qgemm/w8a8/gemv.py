"""W8A8 decode (M <= 16): one kernel that quantizes x and streams the int8 weight (W8A8GemvSpec).

W8A8GemmPlan (launch_mode "auto", sm80+) hands calls with M <= heuristics.W8A8_GEMV_MAX_M to the
launcher here instead of running act_quant and then the GEMM. Each CTA of the kernel quantizes the x
rows of its own K slice with act_quant's arithmetic (bit-identical codes and vectors), so the result
is the two-kernel path's up to FP32 summation order.

Split-K: when the K is split over CTAs, the call allocates its own FP32 partial buffer
[splits, M, N] and zeroed column-tile counters (one allocation from torch's caching allocator), so
calls in flight on several streams or in several CUDA graphs share no state.
"""
from __future__ import annotations

import threading

import torch

from cutlass_gen.families.w8a8 import W8A8_GEMV_SLOTS as SLOTS

from .._abi import QgemmProblem
from .._runtime import CallBuffers, cached, current_stream, get_kernel
from . import heuristics

INPUT_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


class W8A8GemvLauncher:
    """The decode path of one W8A8GemmPlan (its weight, bias, epilogue and output dtype)."""

    def __init__(self, plan):
        w = plan.weight
        self._plan = plan
        self._n, self._k = w.n, w.k
        self._block_size = w.block_size
        self._scheme = w.scheme
        self._device = plan.device
        self._device_index = plan.device.index
        self._sm_count = plan._sm_count
        self._target_sm = plan.target_sm
        p = self._problem = QgemmProblem()
        p.n, p.k = w.n, w.k
        SLOTS.write(p, block_size=w.block_size, activation=1 if plan._epilogue == "silu" else 0,
                    w=w.qweight.data_ptr(), sw=w.scale.data_ptr(),
                    bias=plan.bias.data_ptr() if plan.bias is not None else None,
                    ld_x=w.k, ld_w=w.k, ld_out=w.n, clamp_lo=plan.clamp[0], clamp_hi=plan.clamp[1])
        if w.scheme == "asymmetric":
            SLOTS.write(p, ow=w.offset.data_ptr(), v=plan._weight_v.data_ptr())
        p.sm_count = self._sm_count
        self._call = CallBuffers()
        self._lock = threading.Lock()  # the problem and Params buffers are shared by callers
        self._per_key: dict = {}  # (M, x dtype) -> (kernel, launch, choice)

    @staticmethod
    def fits(plan) -> bool:
        """Whether the kernel can read this plan's weight: rows and (asymmetric) column vectors are
        read 16 bytes at a time, so their storage must be 16-byte aligned. A plan whose weight is not
        (a view at an odd offset) keeps today's decode path instead of failing."""
        w = plan.weight
        tensors = [w.qweight] + ([w.scale, w.offset, plan._weight_v] if w.scheme == "asymmetric" else [])
        return all(t is not None and t.data_ptr() % 16 == 0 for t in tensors)

    def choice(self, m: int, dtype: torch.dtype, **overrides) -> heuristics.W8A8GemvChoice:
        """The kernel and K slice for M rows of x in `dtype` (heuristics.w8a8_gemv_choice; `overrides`:
        its variant= and ctas_per_sm=)."""
        return heuristics.w8a8_gemv_choice(m, self._n, self._k, self._block_size, INPUT_NAMES[dtype], self._scheme,
                                           self._plan._output, self._sm_count, target_sm=self._target_sm, **overrides)

    def _prepare(self, m: int, dtype: torch.dtype, choice):
        choice = choice or self.choice(m, dtype)
        if not isinstance(choice, heuristics.W8A8GemvChoice):
            raise TypeError(f"choice must be a qgemm.w8a8.heuristics.W8A8GemvChoice, got {type(choice).__name__}")
        spec = choice.spec
        wanted = (INPUT_NAMES[dtype], self._scheme, self._plan._output)
        if (spec.input, spec.scheme, spec.output) != wanted:
            raise ValueError(f"choice.spec must have (input, scheme, output) = {wanted} for this call, got "
                             f"{(spec.input, spec.scheme, spec.output)}")
        kernel = get_kernel(spec, self._target_sm)
        with self._lock:
            p = self._problem
            p.m = m
            SLOTS.write(p, slice_blocks=choice.slice_blocks, l2_prefetch=choice.l2_prefetch)
            launch = kernel.plan(p)
        return kernel, launch, choice

    def __call__(self, x: torch.Tensor, out: torch.Tensor, m: int, *, choice=None,
                 dump: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """out = the plan's layer of x (checked by the plan). `dump` (tests): int8 [M, K] and float
        [3, K / bs, M] that receive the kernel's quantized x and its vectors."""
        if choice is None:
            kernel, launch, choice = cached(self._per_key, (m, x.dtype), lambda: self._prepare(m, x.dtype, None))
        else:
            kernel, launch, choice = self._prepare(m, x.dtype, choice)
        partial = counters = 0
        if launch.workspace_bytes:
            # One allocation of this call: the FP32 partials [splits, M, N], then the column-tile
            # counters (zeroed; the partials need no clearing: every (split, row, column) is written).
            partial_bytes = launch.grid[1] * m * self._n * 4
            split = torch.empty(partial_bytes + launch.workspace_bytes, dtype=torch.uint8, device=self._device)
            split[partial_bytes:].zero_()
            partial, counters = split.data_ptr(), split.data_ptr() + partial_bytes
        stream = current_stream(self._device_index)
        with self._lock:
            p = self._problem
            p.m = m
            SLOTS.write(p, slice_blocks=choice.slice_blocks, l2_prefetch=choice.l2_prefetch, x=x.data_ptr(), partial=partial or None, out=out.data_ptr(),
                        dump_q=dump[0].data_ptr() if dump is not None else None,
                        dump_vec=dump[1].data_ptr() if dump is not None else None)
            kernel.launch(p, launch, self._device_index, stream, counters, self._call)
        return out


def gemv_applies(plan, m: int) -> bool:
    """Whether a plan call of M rows runs the fused decode kernel."""
    return plan._gemv is not None and heuristics.w8a8_gemv_applies(m, plan.target_sm, plan._n, plan._k)
