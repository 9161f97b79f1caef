"""FpA x IntB conv2d: FP16/BF16 (or FP32) NHWC activations x INT4/INT8 filters with per-block
scale and offset (MNN's CONV_FpAInt4B weights), FP32 accumulation, groups = 1.

    out[n, p, q, o] = act(bias[o] + sum_{r, s, c} x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] W[o, r, s, c])
    W[o, r, s, c]   = q[o, r, s, c] * scale[o, c // block] + offset[o, c // block]

q are signed codes in [-2**(bits-1), 2**(bits-1) - 1]; the blocks run along the input channels and
are shared by every tap (r, s); block -1 means one scale and offset per output channel. Taps that
fall in the padding read the real value 0. act is none, relu, relu6, silu or gelu.

The kernel (templates/fpaintb_conv.cu.j2) is an implicit GEMM on the FpA x IntB mainloop: M = N*P*Q
output pixels, N = Co, K = R*S*C with c fastest, each 16-byte chunk of x gathered per tap. The plan
turns the filter into that GEMM's weight once (`IntConvWeight.gemm_operands`): codes
u = q + 2**(bits-1) as a [K, Co] matrix in cutlass_gen/families/fpaintb_layout.py's packed layout (K padded
with zero codes to a multiple of 64: those rows meet zero activations), and the scales and offsets
repeated for every tap into [K / block, Co] rows (one row for block -1).

Layouts:
  x        [N, H, W, C] NHWC contiguous, the plan's act_dtype (float16 or bfloat16) or float32. A
           float32 x is converted to act_dtype first (one extra read and write of x, and of the output
           when it is converted back to float32). layout="nchw" takes [N, C, H, W]: a channels_last
           tensor is used as is, any other x is first copied into NHWC (one more pass over x).
  q        int8 [Co, R, S, C]      (nn.Conv2d's [Co, C, R, S] with channels last)
  scale    float [Co, C // block]  (or [Co, 1] for block -1)
  offset   float, scale's shape
  out      [N, P, Q, Co] NHWC (a channels_last [N, Co, P, Q] view with layout="nchw"), x's dtype
Requirements: C a multiple of 8 (16-byte gathers) and of the block, Co a multiple of 8.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.compiler import is_compiling

from cutlass_gen.families.conv import FpAIntBConvSpec
from cutlass_gen.families.fpaintb_layout import layout as weight_layout

from .. import _checks, _plan_ops
from .._abi import QgemmProblem
from .._runtime import current_stream, get_kernel, plan_launch, sm_count
from ..fpaintb import pack as fpaintb_pack
from ..fpaintb.plan import ACT_DTYPES, StreamKBuffers, check_act_dtype
from ..plan import Plan, _Call
from . import heuristics
from . import quant as conv_quant
from .int8 import MAX_ELEMENTS, _pack, _pair, check_fake_out, conv_input, fake_output, output_extent

BLOCK_SIZES = (32, 64, 128, 256)
ACTIVATIONS = {"none": 0, "relu": 1, "silu": 2, "gelu": 3, "relu6": 4}  # the kernels' epilogue codes
CHANNEL_ALIGNMENT = 8  # input channels per 16-byte gather of FP16/BF16
_WHAT = "qgemm FpA x IntB conv2d"


@dataclass(frozen=True)
class IntConvWeight:
    """A quantized filter (module docstring): signed codes q int8 [Co, R, S, C], scale and offset
    float [Co, C // block_size] ([Co, 1] for block_size -1)."""

    q: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor
    bits: int
    block_size: int

    def __post_init__(self):
        if self.bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {self.bits!r}")
        _checks.tensor("q", self.q, (torch.int8,), ndim=4)
        co, r, s, c = self.q.shape
        if min(co, r, s, c) < 1:
            raise ValueError(f"q must be non-empty [Co, R, S, C], got shape {tuple(self.q.shape)}")
        _checks.multiple("C (q.shape[3])", c, CHANNEL_ALIGNMENT, "16-byte gathers of FP16/BF16 input channels")
        _checks.multiple("Co (q.shape[0])", co, weight_layout(self.bits).n_alignment,
                         "one tensor-core tile of output channels")
        if self.block_size != -1:
            if self.block_size not in BLOCK_SIZES:
                raise ValueError(f"block_size must be one of {BLOCK_SIZES} or -1 (per output channel), "
                                 f"got {self.block_size!r}")
            if c % self.block_size:
                raise ValueError(f"block_size {self.block_size} must divide the input channels C={c}")
        blocks = 1 if self.block_size == -1 else c // self.block_size
        for name in ("scale", "offset"):
            value = getattr(self, name)
            _checks.tensor(name, value, (torch.float32, torch.float16, torch.bfloat16, torch.float64), ndim=2)
            _checks.shape(name, value, (co, blocks))
            _checks.same_device(name, value, self.q.device)
        lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        if self.bits == 4 and (int(self.q.min()) < lo or int(self.q.max()) > hi):
            raise ValueError(f"q holds codes outside [{lo}, {hi}] for int4 weights")

    @classmethod
    def from_float(cls, weight: torch.Tensor, bits: int = 4, block_size: int = 32,
                   symmetric: bool = False) -> "IntConvWeight":
        """Round-to-nearest quantization of an nn.Conv2d weight [Co, C, R, S] per (output channel,
        block of block_size input channels over every tap): asymmetric by default, the block's
        minimum at code -2**(bits-1) and maximum at 2**(bits-1) - 1 (offset = min + 2**(bits-1)
        scale); symmetric: offset 0, scale = max|w| / (2**(bits-1) - 1)."""
        _checks.tensor("weight", weight, (torch.float16, torch.bfloat16, torch.float32, torch.float64), ndim=4)
        if bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {bits!r}")
        _checks.finite("weight", weight)  # a NaN/Inf would make its block's scale and offset non-finite
        co, c, r, s = weight.shape
        if block_size != -1 and (block_size not in BLOCK_SIZES or c % block_size):
            raise ValueError(f"block_size must be one of {BLOCK_SIZES} dividing C={c}, or -1, got {block_size!r}")
        block = c if block_size == -1 else block_size
        w = weight.detach().double().permute(0, 2, 3, 1)  # [Co, R, S, C]
        blocks = w.reshape(co, r * s, c // block, block).transpose(1, 2).reshape(co, c // block, -1)
        half = 1 << (bits - 1)
        if symmetric:
            scale = blocks.abs().amax(dim=2) / (half - 1)
            offset = torch.zeros_like(scale)
        else:
            lo, hi = blocks.amin(dim=2), blocks.amax(dim=2)
            scale = (hi - lo) / (2 * half - 1)
            offset = lo + half * scale
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant block: codes all at one value
        # Scales and offsets as the kernels will read them (FP16), so the codes round against those.
        scale, offset = scale.half().double(), offset.half().double()
        per_weight = lambda t: t.repeat_interleave(block, dim=1)[:, None, None, :]  # noqa: E731
        q = torch.round((w - per_weight(offset)) / per_weight(scale)).clamp(-half, half - 1).to(torch.int8)
        return cls(q.contiguous(), scale.float(), offset.float(), bits, block_size)

    @property
    def out_channels(self) -> int:
        return self.q.shape[0]

    @property
    def in_channels(self) -> int:
        return self.q.shape[3]

    @property
    def kernel_size(self) -> tuple[int, int]:
        return tuple(self.q.shape[1:3])

    @property
    def device(self) -> torch.device:
        return self.q.device

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """float64 W [Co, R, S, C]; with dtype, from scales and offsets rounded to it first (what a
        kernel of that activation type computes with)."""
        scale, offset = self.scale, self.offset
        if dtype is not None:
            scale, offset = scale.to(dtype), offset.to(dtype)
        block = self.in_channels if self.block_size == -1 else self.block_size
        per_weight = lambda t: t.double().repeat_interleave(block, dim=1)[:, None, None, :]  # noqa: E731
        return self.q.double() * per_weight(scale) + per_weight(offset)

    def gemm_operands(self, act_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
        """The implicit GEMM's weight (module docstring): (packed codes, scale rows, offset rows in
        act_dtype, padded K, group size along K)."""
        co, r, s, c = self.q.shape
        lay = weight_layout(self.bits)
        k = r * s * c
        k_pad = -(-k // lay.k_alignment) * lay.k_alignment
        half = 1 << (self.bits - 1)
        u = torch.full((k_pad, co), half, dtype=torch.uint8, device=self.device)  # padded rows: q = 0
        u[:k] = (self.q.reshape(co, k).t().to(torch.int16) + half).to(torch.uint8)
        packed = fpaintb_pack.pack(u, self.bits)
        if self.block_size == -1:
            group = k_pad
            scale, offset = self.scale.t(), self.offset.t()
        else:
            group = self.block_size
            pad_rows = (k_pad - k) // group
            rows = lambda t: torch.cat([t.t()] * (r * s) + [t.new_zeros(pad_rows, co)])  # noqa: E731
            scale, offset = rows(self.scale), rows(self.offset)
        return (packed, scale.to(act_dtype).contiguous(), offset.to(act_dtype).contiguous(), k_pad, group)


class FpAIntBConvPlan(Plan):
    """A callable conv2d with a quantized filter: plan(x) -> out, NHWC (module docstring).

    Everything is checked here and on each call before any launch. Plans keep per-shape state, so
    build one per layer and reuse it."""

    slots = FpAIntBConvSpec.SLOTS

    def __init__(self, weight: IntConvWeight, *, act_dtype: torch.dtype = torch.float16,
                 bias: torch.Tensor | None = None, activation: str = "none", stride=1, padding=0, dilation=1):
        if not isinstance(weight, IntConvWeight):
            raise TypeError(f"weight must be a qgemm.IntConvWeight, got {type(weight).__name__}")
        _checks.cuda_device("weight.q", weight.q)
        device = weight.device
        self.target_sm = check_act_dtype(act_dtype, device, _WHAT)
        _checks.one_of("activation", activation, tuple(ACTIVATIONS))
        if bias is not None:
            _checks.bias(bias, weight.out_channels, device, (torch.float32, torch.float16, torch.bfloat16, torch.float64))
            bias = bias.detach().to(act_dtype).contiguous()
        self.stride = _pair("stride", stride, 1)
        self.padding = _pair("padding", padding, 0)
        self.dilation = _pair("dilation", dilation, 1)
        self.weight = weight
        self.act_dtype = act_dtype
        self.bias = bias
        self.activation = activation
        self.in_channels, self.out_channels = weight.in_channels, weight.out_channels
        self.kernel_size = weight.kernel_size
        self._packed, self._scale, self._offset, self._k, self._group = weight.gemm_operands(act_dtype)
        self._act = ACT_DTYPES[act_dtype]
        self._arch = 75 if self.target_sm == 75 else 80
        super().__init__(device, sm_count(device))
        self._split = StreamKBuffers(device)
        self._problem = self._fixed_problem()

    def _fixed_problem(self) -> QgemmProblem:
        """The slots that do not change between calls (templates/fpaintb_conv.cu.j2 lists them)."""
        p = self._new_problem(self.out_channels, self._k)
        self._set(p, w=self._packed.data_ptr(), scale=self._scale.data_ptr(), offset=self._offset.data_ptr(),
                  bias=self.bias.data_ptr() if self.bias is not None else None, ld_x=self.in_channels,
                  ld_w=self._packed.shape[1], group_size=self._group, filter=_pack(self.kernel_size),
                  padding=_pack(self.padding), stride=_pack(self.stride), dilation=_pack(self.dilation))
        return p

    def output_hw(self, h: int, w: int) -> tuple[int, int]:
        """PyTorch's output extent (< 1 when the dilated filter does not fit the padded input)."""
        return conv_quant.output_hw((h, w), self.kernel_size, self.stride, self.padding, self.dilation)

    def choice(self, n: int, h: int, w: int) -> heuristics.FpAIntBChoice:
        """The kernel this plan runs for an input of N x H x W pixels."""
        ho, wo = self.output_hw(h, w)
        return heuristics.fpaintb_conv_choice(n * ho * wo, self.out_channels, self._k, self.weight.bits, self._act,
                                              self._arch, self._sm_count)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, *, layout: str = "nhwc",
                 choice: heuristics.FpAIntBChoice | None = None) -> torch.Tensor:
        """out for x (`layout` "nhwc" or "nchw"; module docstring); `choice` overrides the
        heuristic's kernel, for tuning. Under torch.compile / torch.export one custom op
        (qgemm/_plan_ops.py), which takes no choice."""
        if is_compiling() and _plan_ops.tracing():
            return _plan_ops.call(self, x, out, layout, choice)
        x, n, h, w = conv_input(x, layout, (self.act_dtype, torch.float32), self.in_channels, self.device)
        nchw = layout == "nchw"
        if choice is None:
            call = self._cached((n, h, w), lambda: self._prepare(n, h, w, None))
        else:
            call = self._prepare(n, h, w, choice)
        out_dtype = x.dtype
        if out is not None:
            expected = (call.out_shape[0], call.out_shape[3], *call.out_shape[1:3]) if nchw else call.out_shape
            _checks.tensor("out", out, (out_dtype,), ndim=4)
            _checks.shape("out", out, expected)
            _checks.cuda_device("out", out, self.device)
            out_nhwc = out.permute(0, 2, 3, 1) if nchw else out
            if not out_nhwc.is_contiguous():
                raise ValueError(f"out must be NHWC in memory (channels_last with layout 'nchw'); got strides "
                                 f"{out.stride()} for shape {tuple(out.shape)}")
            if out_dtype == self.act_dtype:
                _checks.aligned("out", out, 4, "paired stores")
        if x.dtype != self.act_dtype or not x.is_contiguous():
            x = x.to(self.act_dtype, memory_format=torch.contiguous_format).contiguous()  # module docstring
        _checks.aligned("x", x, 16, "16-byte gathers")
        y = out if out is not None and out_dtype == self.act_dtype else None
        if y is None:
            y = torch.empty(call.out_shape, dtype=self.act_dtype, device=self.device)
        elif nchw:
            y = y.permute(0, 2, 3, 1)
        stream = current_stream(self._device_index)
        partial, counters = self._split.get(call.launch, call.choice.spec.tile, stream)

        def fill(p: QgemmProblem):
            p.m = n * call.out_shape[1] * call.out_shape[2]
            self._set(p, x=x.data_ptr(), out=y.data_ptr(), partial=partial.data_ptr() if partial is not None else None,
                      activation_raster=_pack((ACTIVATIONS[self.activation], call.choice.raster_group)),
                      ctas=call.ctas, input_hw=_pack((h, w)))

        self._launch(call.kernel, call.launch, self._problem, fill, counters)
        if out is not None and out_dtype != self.act_dtype:
            (out.permute(0, 2, 3, 1) if nchw else out).copy_(y)
            return out
        if out is not None:
            return out
        if out_dtype != self.act_dtype:
            y = y.to(out_dtype)
        return y.permute(0, 3, 1, 2) if nchw else y

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        _, n, h, w = conv_input(x, layout, (self.act_dtype, torch.float32), self.in_channels, self.device)
        y = fake_output(self, x, layout, x.dtype)
        ho, wo = y.shape[2:] if layout == "nchw" else y.shape[1:3]
        self._check_extent(n, h, w, ho, wo)
        if out is not None:
            check_fake_out(out, y, layout, self.device)
        return y

    def _check_extent(self, n: int, h: int, w: int, ho: int, wo: int):
        # The implicit GEMM's gather and its row index are 32-bit (templates/include/qgemm/fpaintb/gemm.h,
        # valid_conv); the output's addresses are 64-bit.
        _checks.index_limit(f"x's element count (N*H*W*C for x of {(n, h, w, self.in_channels)})",
                            n * h * w * self.in_channels, MAX_ELEMENTS, "32-bit gather offsets: split the batch")
        _checks.index_limit(f"the output pixels (N*P*Q = {n}*{ho}*{wo})", n * ho * wo, MAX_ELEMENTS,
                            "32-bit GEMM rows: split the batch")

    def _prepare(self, n: int, h: int, w: int, choice) -> _Call:
        ho, wo = output_extent(self, h, w)
        self._check_extent(n, h, w, ho, wo)
        choice = choice or self.choice(n, h, w)
        spec = choice.spec
        if (spec.family, spec.act, spec.bits) != ("fpaintb_conv", self._act, self.weight.bits) or \
                not spec.supports_target(self.target_sm):
            raise ValueError(f"choice {spec.name} does not fit this plan (fpaintb_conv, act {self._act}, "
                             f"int{self.weight.bits}, sm{self.target_sm})")
        kernel = get_kernel(spec, self.target_sm)
        with self._lock:
            p = self._problem
            p.m = n * ho * wo
            self._set(p, activation_raster=_pack((ACTIVATIONS[self.activation], choice.raster_group)),
                      input_hw=_pack((h, w)))
            launch, ctas = plan_launch(kernel, p, choice, self._sm_count, self._device_index, self.slots)
        return _Call(choice, kernel, launch, ctas, (n, ho, wo, self.out_channels))


def conv2d_fpaintb(x: torch.Tensor, weight: IntConvWeight, bias: torch.Tensor | None = None, stride=1, padding=0,
                   dilation=1, activation: str = "none", layout: str = "nhwc") -> torch.Tensor:
    """One-shot form of FpAIntBConvPlan (FP16 kernels for float16/float32 x, BF16 for bfloat16; the
    plan is built on each call: keep a plan for repeated use)."""
    _checks.tensor("x", x, (torch.float16, torch.bfloat16, torch.float32))
    act_dtype = torch.bfloat16 if x.dtype == torch.bfloat16 else torch.float16
    plan = FpAIntBConvPlan(weight, act_dtype=act_dtype, bias=bias, activation=activation, stride=stride,
                           padding=padding, dilation=dilation)
    return plan(x, layout=layout)
