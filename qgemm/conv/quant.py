"""Requantization math of the int8 convolution (ConvInt8 with FusedBias), computed at plan time.

Quantization: input x = S_I * (x_q - Z_I) (per tensor), weight w = S_W[n] * w_q (per output
channel, symmetric), float bias B[n], output o_q = round(o / S_O) + Z_O (per tensor). With the
int32 accumulator acc = sum over taps of x_q * w_q, the output folds into one multiply-add per
element (background: ../shared/seeds/000, ConvInt8CutlassExecution):

    o_q = clamp(round(M[n] * (acc + FusedBias[n])))
    M[n] = S_I * S_W[n] / S_O
    FusedBias[n] = -Z_I * sum(w_q[n]) + B[n] / (S_I * S_W[n]) + Z_O / M[n]

That FusedBias assumes every tap is present. A tap in the zero padding holds the real value 0,
which is Z_I in the quantized domain, but the implicit GEMM reads 0 there: at a border output the
term -Z_I * w_q of each padded tap is subtracted without its matching Z_I * w_q in acc. The
correction, added per output position and channel (the same for every image of the batch), is

    border[ho, wo, n] = Z_I * (sum of w_q[n, kh, kw, :] over the taps (kh, kw) that fall in the padding)

ReLU and ReLU6 fold into the clamp bounds: [Z_O, 127] and [Z_O, Z_O + round(6 / S_O)] (capped at
127), since rounding is monotonic and round(0) = 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import _checks
from ..reference import ACTIVATIONS  # none, relu, relu6: the ones a clamp can realize


@dataclass(frozen=True)
class ConvInt8Quant:
    """Per-tensor input and output quantization, per-output-channel weight scales."""

    input_scale: float
    input_zero: int
    weight_scale: torch.Tensor  # float [Co]
    output_scale: float
    output_zero: int
    activation: str = "none"

    def __post_init__(self):
        for name in ("input_scale", "output_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number (finite), got {value!r}")
        for name in ("input_zero", "output_zero"):
            value = getattr(self, name)
            if not isinstance(value, int) or not -128 <= value <= 127:
                raise ValueError(f"{name} must be an int in [-128, 127], got {value!r}")
        _checks.tensor("weight_scale", self.weight_scale, (torch.float32, torch.float64, torch.float16), ndim=1)
        _checks.finite("weight_scale", self.weight_scale)
        if not bool((self.weight_scale > 0).all()):
            raise ValueError("weight_scale must be positive")
        _checks.one_of("activation", self.activation, ACTIVATIONS)

    def clamp_bounds(self) -> tuple[int, int]:
        """int8 output bounds that realize the activation."""
        if self.activation == "none":
            return -128, 127
        if self.activation == "relu":
            return max(self.output_zero, -128), 127
        return max(self.output_zero, -128), min(127, self.output_zero + round(6.0 / self.output_scale))


def check_weight(w_q: torch.Tensor, quant: ConvInt8Quant):
    _checks.tensor("w_q", w_q, (torch.int8,), ndim=4)
    if quant.weight_scale.shape[0] != w_q.shape[0]:
        raise ValueError(f"weight_scale must have shape ({w_q.shape[0]},) (one per output channel of w_q "
                         f"[Co, Kh, Kw, Ci]), got {tuple(quant.weight_scale.shape)}")


def requant_params(w_q: torch.Tensor, bias: torch.Tensor | None, quant: ConvInt8Quant):
    """M and FusedBias per output channel (float32 [Co] each), for w_q int8 [Co, Kh, Kw, Ci]."""
    check_weight(w_q, quant)
    co = w_q.shape[0]
    s_w = quant.weight_scale.double()
    if bias is None:
        bias = torch.zeros(co, dtype=torch.float64, device=w_q.device)
    else:
        _checks.tensor("bias", bias, (torch.float32, torch.float64, torch.float16, torch.bfloat16), ndim=1)
        _checks.shape("bias", bias, (co,))
        _checks.finite("bias", bias)  # int8 outputs cannot carry a NaN/Inf bias (float32's NaN -> int8 is undefined)
    multiplier = quant.input_scale * s_w / quant.output_scale
    weight_sum = w_q.double().sum(dim=(1, 2, 3))
    fused_bias = (-quant.input_zero * weight_sum + bias.double() / (quant.input_scale * s_w)
                  + quant.output_zero / multiplier)
    return multiplier.float(), fused_bias.float()


def output_hw(in_hw, kernel_hw, stride, padding, dilation) -> tuple[int, int]:
    return tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                 for i, k, s, p, d in zip(in_hw, kernel_hw, stride, padding, dilation))


def border_correction(w_q: torch.Tensor, in_hw, stride, padding, dilation, input_zero: int) -> torch.Tensor:
    """int32 [Ho, Wo, Co]: Z_I times the weights of the taps each output reads from the padding."""
    co, kh, kw, _ = w_q.shape
    tap_sum = w_q.double().sum(dim=3).unsqueeze(1)                     # [Co, 1, Kh, Kw]
    ones = torch.ones(1, 1, *in_hw, dtype=torch.float64, device=w_q.device)
    present = F.conv2d(ones, tap_sum, stride=stride, padding=padding, dilation=dilation)[0]   # [Co, Ho, Wo]
    padded = tap_sum.sum(dim=(1, 2, 3)).view(co, 1, 1) - present
    return (input_zero * padded).permute(1, 2, 0).round().to(torch.int32).contiguous()


def _edges(extent: int, kernel: int, stride: int, pad: int, dilation: int, out: int) -> tuple[int, int]:
    """Along one dimension: how many outputs read padding before the image (a prefix: p * stride - pad
    < 0) and after it (a suffix: p * stride - pad + (kernel - 1) * dilation >= extent)."""
    before = min(out, -(-pad // stride))
    span = extent + pad - (kernel - 1) * dilation
    first_after = min(out, max(0, -(-span // stride)))
    return before, out - first_after


@dataclass(frozen=True)
class BorderClasses:
    """Outputs grouped by the padded taps they read (border_buffer records each pixel's class). Along each
    dimension class 0 is every output that reads no padding there, classes 1..before the prefix
    that reads padding before the image, then the suffix counted from the last output. The border
    table holds one row per (row class, column class) pair; index() is -1 where an output reads no
    padding at all."""

    out_h: int
    out_w: int
    top: int
    bottom: int
    left: int
    right: int

    @classmethod
    def of(cls, in_hw, kernel_hw, stride, padding, dilation) -> "BorderClasses":
        ho, wo = output_hw(in_hw, kernel_hw, stride, padding, dilation)
        top, bottom = _edges(in_hw[0], kernel_hw[0], stride[0], padding[0], dilation[0], ho)
        left, right = _edges(in_hw[1], kernel_hw[1], stride[1], padding[1], dilation[1], wo)
        return cls(ho, wo, top, bottom, left, right)

    @property
    def shape(self) -> tuple[int, int]:
        return 1 + self.top + self.bottom, 1 + self.left + self.right

    def row_class(self, p: torch.Tensor) -> torch.Tensor:
        return _class(p, self.top, self.bottom, self.out_h)

    def column_class(self, q: torch.Tensor) -> torch.Tensor:
        return _class(q, self.left, self.right, self.out_w)

    def index(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        row, column = self.row_class(p), self.column_class(q)
        return torch.where((row | column) != 0, row * self.shape[1] + column, -1)

    def representatives(self) -> tuple[list, list]:
        """One output row and column per class (None for class 0: any output inside)."""
        def one(before: int, after: int, out: int) -> list:
            return [None] + list(range(before)) + [out - 1 - j for j in range(after)]
        return one(self.top, self.bottom, self.out_h), one(self.left, self.right, self.out_w)


def _class(i: torch.Tensor, before: int, after: int, out: int) -> torch.Tensor:
    return torch.where(i < before, 1 + i, torch.where(i >= out - after, 1 + before + (out - 1 - i), 0))


def border_table(w_q: torch.Tensor, in_hw, stride, padding, dilation, input_zero: int) -> torch.Tensor:
    """int32 [row classes, column classes, Co] (BorderClasses), the table part of border_buffer: row
    (a, b) is border_correction of any output of classes (a, b), computed from its representative."""
    co, kh, kw, _ = w_q.shape
    classes = BorderClasses.of(in_hw, (kh, kw), stride, padding, dilation)
    tap_sum = w_q.to(torch.int64).sum(dim=3)  # [Co, Kh, Kw]: exact

    def missing(index, extent, kernel, s, pad, d) -> torch.Tensor:
        if index is None:  # class 0: no padded tap along this dimension
            return torch.zeros(kernel, dtype=torch.bool)
        taps = index * s - pad + torch.arange(kernel) * d
        return (taps < 0) | (taps >= extent)

    rows, columns = classes.representatives()
    table = torch.empty(*classes.shape, co, dtype=torch.int64)
    for a, p in enumerate(rows):
        row_missing = missing(p, in_hw[0], kh, stride[0], padding[0], dilation[0])
        for b, q in enumerate(columns):
            column_missing = missing(q, in_hw[1], kw, stride[1], padding[1], dilation[1])
            padded = (row_missing[:, None] | column_missing[None, :]).to(w_q.device)
            table[a, b] = input_zero * (tap_sum * padded).sum(dim=(1, 2)).cpu()
    return table.to(torch.int32).to(w_q.device).contiguous()


def expand_border_table(table: torch.Tensor, classes: BorderClasses) -> torch.Tensor:
    """The table as the kernels apply it, one row per output: int32 [Ho, Wo, Co] (zero where an
    output reads no padding). Equals border_correction."""
    p = torch.arange(classes.out_h).view(-1, 1)
    q = torch.arange(classes.out_w).view(1, -1)
    index = classes.index(p, q)
    flat = table.reshape(-1, table.shape[-1])
    full = flat[index.clamp(min=0).to(table.device)]
    return torch.where((index >= 0).unsqueeze(-1).to(table.device), full, torch.zeros_like(full))


# The offsets part of a border buffer is padded to this many entries, so the table behind it starts
# 64-byte aligned (the Sm80 epilogue loads up to 16 int32 at once).
BORDER_TABLE_ALIGN = 16


def border_buffer(w_q: torch.Tensor, in_hw, stride, padding, dilation, input_zero: int) -> torch.Tensor:
    """What the int8 conv kernels read for the border term (slot ptr[4]): one int32 buffer

        [0, P*Q)            per output pixel pq = p*Q + q: where its row of the table starts in this
                            buffer, or -1 where the pixel reads no padding
        [head, ...)         border_table flattened, [classes, Co]; head = P*Q rounded up to
                            BORDER_TABLE_ALIGN

    so the epilogue does per output element one divmod (GEMM row -> pq) and two L1-friendly loads,
    with no class arithmetic of its own."""
    co = w_q.shape[0]
    classes = BorderClasses.of(in_hw, w_q.shape[1:3], stride, padding, dilation)
    table = border_table(w_q, in_hw, stride, padding, dilation, input_zero)
    pixels = classes.out_h * classes.out_w
    head = -(-pixels // BORDER_TABLE_ALIGN) * BORDER_TABLE_ALIGN
    p = torch.arange(classes.out_h).view(-1, 1)
    q = torch.arange(classes.out_w).view(1, -1)
    index = classes.index(p, q).reshape(-1)
    offsets = torch.where(index >= 0, head + index * co, -1).to(torch.int32)
    buffer = torch.full((head + table.numel(),), -1, dtype=torch.int32)
    buffer[:pixels] = offsets
    buffer[head:] = table.reshape(-1).cpu()
    return buffer.to(w_q.device)


def expand_border_buffer(buffer: torch.Tensor, out_hw, out_channels: int) -> torch.Tensor:
    """The buffer as the kernels apply it: int32 [Ho, Wo, Co] (zero where a pixel reads no padding).
    Equals border_correction."""
    pixels = out_hw[0] * out_hw[1]
    offsets = buffer[:pixels].long()
    rows = offsets.clamp(min=0).view(-1, 1) + torch.arange(out_channels, device=buffer.device).view(1, -1)
    values = torch.where((offsets >= 0).view(-1, 1), buffer[rows], torch.zeros((), dtype=buffer.dtype,
                                                                                 device=buffer.device))
    return values.view(*out_hw, out_channels)


def requantize(acc: torch.Tensor, multiplier: torch.Tensor, fused_bias: torch.Tensor, border: torch.Tensor,
               quant: ConvInt8Quant) -> torch.Tensor:
    """What the kernel's epilogue computes, in float32: acc int [N, Ho, Wo, Co] -> int8."""
    lo, hi = quant.clamp_bounds()
    # The border term is an integer: it joins acc exactly before the one conversion to float.
    value = multiplier * ((acc + border).float() + fused_bias)
    return torch.round(value).clamp(lo, hi).to(torch.int8)  # round half to even, as cvt.rni


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output channel of a float conv weight [Co, Ci, Kh, Kw] (nn.Conv2d's
    layout): w_q int8 [Co, Kh, Kw, Ci] (the layout the kernels read) and S_W float32 [Co] with
    weight ~= S_W[n] * w_q[n]. Codes are in [-127, 127]; an all-zero channel gets scale 1."""
    _checks.tensor("weight", weight, (torch.float32, torch.float64, torch.float16, torch.bfloat16), ndim=4)
    _checks.finite("weight", weight)  # a NaN/Inf would make its channel's scale non-finite
    w = weight.detach().float()
    amax = w.abs().amax(dim=(1, 2, 3))
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / scale.view(-1, 1, 1, 1)).clamp(-127, 127).to(torch.int8)
    return q.permute(0, 2, 3, 1).contiguous(), scale


def quantize_input(x: torch.Tensor, scale: float, zero: int) -> torch.Tensor:
    """Per-tensor int8 of real-valued activations: clamp(round(x / S_I) + Z_I) (half to even).

    int8 holds no NaN or Inf, and neither does the int8 conv's output, so a non-finite x cannot
    reach the outputs as it would in a float convolution: it is refused with a ValueError instead of
    becoming some code (a NaN's int8 conversion is undefined). The test reads one flag back (a device
    sync); while a CUDA graph is being captured, where no sync is allowed, it is skipped (README:
    NaN and Inf)."""
    if x.is_floating_point() and not (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"x holds NaN or Inf ({int((~torch.isfinite(x)).sum())} of {x.numel()} values): "
                             f"int8 activations cannot carry them to the int8 conv's output; a float "
                             f"convolution would return NaN/Inf there")
    return (torch.round(x.float() / scale) + zero).clamp(-128, 127).to(torch.int8)


def dequantize_output(y_q: torch.Tensor, scale: float, zero: int) -> torch.Tensor:
    """The real values of int8 outputs: S_O * (y_q - Z_O), float32."""
    return scale * (y_q.float() - zero)
