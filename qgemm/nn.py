"""torch.nn modules over qgemm's plans, for swapping into a model in place of nn.Linear or nn.Conv2d."""
from __future__ import annotations

import torch
from torch import nn

from . import _checks, conv_quant
from .conv import ConvInt8Plan
from .conv_fpaintb import ACTIVATIONS as CONV_ACTIVATIONS, FpAIntBConvPlan, IntConvWeight
from .conv_quant import ConvInt8Quant
from .fp8 import Fp8GemmPlan, Fp8Weight
from .fpaintb import ACT_DTYPES, FpAIntBPlan, IntBWeight


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


class QuantLinear(nn.Module):
    """y = act(x W^T + b) with W an INT4/INT8 weight-only quantized weight (W4A16 / W8A16) and x
    float16/bfloat16 [..., K]; returns [..., N] in x's dtype.

    Build it on the GPU it will run on: QuantLinear.from_float(linear.cuda(), bits=4, group_size=128),
    QuantLinear.from_gptq(...), QuantLinear.from_awq(...).
    """

    def __init__(self, weight: IntBWeight, bias: torch.Tensor | None = None, activation: str = "none"):
        super().__init__()
        if not isinstance(weight, IntBWeight):
            raise TypeError(f"weight must be a qgemm.IntBWeight, got {type(weight).__name__}")
        self.in_features = weight.k
        self.out_features = weight.n
        self.bits = weight.bits
        self.group_size = weight.group_size
        self.activation = activation
        self.qweight = weight
        self.register_buffer("bias", None if bias is None else bias.detach().contiguous())
        self._plans: dict[torch.dtype, FpAIntBPlan] = {}
        self._plan(weight.scale.dtype)  # built eagerly so that bad weights fail here

    def _plan(self, dtype: torch.dtype) -> FpAIntBPlan:
        plan = self._plans.get(dtype)
        if plan is None:
            plan = FpAIntBPlan(self.qweight, act_dtype=dtype, bias=self.bias, activation=self.activation)
            self._plans[dtype] = plan
        return plan

    @classmethod
    def from_float(cls, linear: nn.Linear, bits: int = 4, group_size: int = 128, symmetric: bool = True,
                   activation: str = "none") -> "QuantLinear":
        """Round-to-nearest quantization of an nn.Linear (group_size -1: per output channel)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        scale_dtype = w.dtype if w.dtype in ACT_DTYPES else torch.float16
        weight = IntBWeight.from_float(w, bits, group_size, symmetric, scale_dtype)
        return cls(weight, linear.bias, activation)

    @classmethod
    def from_gptq(cls, qweight, qzeros, scales, g_idx=None, bias=None, bits: int = 4,
                  zero_offset: int = 1) -> "QuantLinear":
        return cls(IntBWeight.from_gptq(qweight, qzeros, scales, g_idx, bits, zero_offset), bias)

    @classmethod
    def from_awq(cls, qweight, qzeros, scales, bias=None) -> "QuantLinear":
        return cls(IntBWeight.from_awq(qweight, qzeros, scales), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.in_features:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (..., {self.in_features}), got {shape}")
        if x.dtype not in ACT_DTYPES:
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).contiguous()
        return self._plan(x.dtype)(x2).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"int{self.bits}, group_size={self.group_size}")


def _check_conv(conv):
    """What the quantized convolutions take from an nn.Conv2d: groups 1, zero padding given as sizes,
    weights on the GPU."""
    if not isinstance(conv, nn.Conv2d):
        raise TypeError(f"conv must be a torch.nn.Conv2d, got {type(conv).__name__}")
    if conv.groups != 1:
        raise ValueError(f"conv.groups must be 1 (grouped and depthwise convolutions are not supported), "
                         f"got {conv.groups}")
    if conv.padding_mode != "zeros":
        raise ValueError(f"conv.padding_mode must be 'zeros', got {conv.padding_mode!r}")
    if isinstance(conv.padding, str):
        raise ValueError(f"conv.padding must be sizes, got {conv.padding!r}: build the nn.Conv2d with "
                         f"explicit padding")
    _checks.cuda_device("conv.weight", conv.weight)


class QuantConv2d(nn.Module):
    """A requantized int8 conv2d (qgemm.ConvInt8Plan) in place of an nn.Conv2d: int8 in, int8 out.

    forward(x, layout="nhwc") takes int8 x [N, H, W, Ci], or [N, Ci, H, W] with layout="nchw" (free
    for a channels_last tensor, one transposing copy otherwise), and returns the int8 output in the
    same layout, quantized with the output scale and zero point; the next quantized layer takes it
    as is, and dequantize(y) gives its real values. A floating-point x is quantized first with the
    input scale and zero point (torch ops: one extra pass over x).

    Build it on the GPU it will run on, from a float conv and calibration scales:
    QuantConv2d.from_float(conv.cuda(), input_scale, input_zero, output_scale, output_zero, "relu").
    """

    def __init__(self, w_q: torch.Tensor, quant: ConvInt8Quant, bias: torch.Tensor | None = None, stride=1,
                 padding=0, dilation=1):
        super().__init__()
        self.plan = ConvInt8Plan(w_q, quant, bias=bias, stride=stride, padding=padding, dilation=dilation)
        self.quant = self.plan.quant
        self.in_channels = self.plan.in_channels
        self.out_channels = self.plan.out_channels
        self.register_buffer("weight", w_q)
        self.register_buffer("weight_scale", self.quant.weight_scale)
        self.register_buffer("bias", None if bias is None else bias.detach())

    @classmethod
    def from_float(cls, conv: nn.Conv2d, input_scale: float, input_zero: int, output_scale: float, output_zero: int,
                   activation: str = "none") -> "QuantConv2d":
        """Quantize conv's weight per output channel (symmetric int8, conv_quant.quantize_weight); the
        input and output scales and zero points come from calibration; `activation` (none, relu,
        relu6) is applied to the output before requantization."""
        _check_conv(conv)
        w_q, weight_scale = conv_quant.quantize_weight(conv.weight)
        quant = ConvInt8Quant(input_scale, input_zero, weight_scale, output_scale, output_zero, activation)
        bias = None if conv.bias is None else conv.bias.detach()
        return cls(w_q, quant, bias, conv.stride, conv.padding, conv.dilation)

    def forward(self, x: torch.Tensor, layout: str = "nhwc") -> torch.Tensor:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = conv_quant.quantize_input(x, self.quant.input_scale, self.quant.input_zero)
        return self.plan(x, layout=layout)

    def dequantize(self, y: torch.Tensor) -> torch.Tensor:
        """float32 S_O * (y - Z_O) of an output of this layer."""
        return conv_quant.dequantize_output(y, self.quant.output_scale, self.quant.output_zero)

    def extra_repr(self) -> str:
        p = self.plan
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={p.kernel_size}, stride={p.stride}, "
                f"padding={p.padding}, dilation={p.dilation}, bias={self.bias is not None}, "
                f"activation={self.quant.activation}")


class IntWeightConv2d(nn.Module):
    """A conv2d with an INT4/INT8 filter (qgemm.FpAIntBConvPlan) in place of an nn.Conv2d: float in,
    float out. forward(x, layout="nchw") takes x [N, C, H, W] as nn.Conv2d does (free for a
    channels_last tensor, one transposing copy otherwise) and returns [N, Co, Ho, Wo] as a
    channels_last view; layout="nhwc" takes and returns NHWC. float16 runs as is (bfloat16 with
    act_dtype=torch.bfloat16), float32 is converted for the kernel and back.

    Build it on the GPU it will run on: IntWeightConv2d.from_float(conv.cuda(), bits=4, block_size=32).
    """

    def __init__(self, weight: IntConvWeight, bias: torch.Tensor | None = None, stride=1, padding=0, dilation=1,
                 activation: str = "none", act_dtype: torch.dtype = torch.float16):
        super().__init__()
        self.plan = FpAIntBConvPlan(weight, act_dtype=act_dtype, bias=bias, activation=activation, stride=stride,
                                    padding=padding, dilation=dilation)
        self.in_channels, self.out_channels = weight.in_channels, weight.out_channels
        self.bits, self.block_size = weight.bits, weight.block_size
        self.register_buffer("weight", weight.q)
        self.register_buffer("weight_scale", weight.scale)
        self.register_buffer("weight_offset", weight.offset)
        self.register_buffer("bias", self.plan.bias)

    @classmethod
    def from_float(cls, conv: nn.Conv2d, bits: int = 4, block_size: int = 32, symmetric: bool = False,
                   activation: str = "none", act_dtype: torch.dtype = torch.float16) -> "IntWeightConv2d":
        """Round-to-nearest quantization of conv's weight (IntConvWeight.from_float: blocks of
        block_size input channels, -1 for one per output channel); `activation` (one of
        FpAIntBConvPlan's: none, relu, relu6, silu, gelu) is fused after the bias."""
        _check_conv(conv)
        _checks.one_of("activation", activation, tuple(CONV_ACTIVATIONS))
        weight = IntConvWeight.from_float(conv.weight, bits, block_size, symmetric)
        bias = None if conv.bias is None else conv.bias.detach()
        return cls(weight, bias, conv.stride, conv.padding, conv.dilation, activation, act_dtype)

    def forward(self, x: torch.Tensor, layout: str = "nchw") -> torch.Tensor:
        return self.plan(x, layout=layout)

    def extra_repr(self) -> str:
        p = self.plan
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={p.kernel_size}, stride={p.stride}, "
                f"padding={p.padding}, dilation={p.dilation}, bias={self.bias is not None}, int{self.bits}, "
                f"block_size={self.block_size}, activation={p.activation}")
