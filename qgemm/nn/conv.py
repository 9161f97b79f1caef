"""Quantized replacements of nn.Conv2d: QuantConv2d (requantized int8, int8 in and out) and
IntWeightConv2d (FP x INT filters). See qgemm/nn/_base.py for buffers, lazy plans and the
reference path."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks, reference
from ..conv import quant as conv_quant
from ..conv.fpaintb import ACTIVATIONS as CONV_ACTIVATIONS
from ..conv.fpaintb import BLOCK_SIZES as CONV_BLOCK_SIZES
from ..conv.fpaintb import CHANNEL_ALIGNMENT, FpAIntBConvPlan, IntConvWeight
from ..conv.int8 import LAYOUTS, ConvInt8Plan, _pair, fake_output
from ..conv.quant import ConvInt8Quant
from ..fpaintb import ACT_DTYPES
from ._base import QuantModule
from .linear import _set

_CONV_TORCH_ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "relu6": lambda y: y.clamp(0, 6), "silu": F.silu,
                           "gelu": F.gelu}


def check_conv(conv, need_cuda: bool = False):
    """What the quantized convolutions take from an nn.Conv2d: groups 1, zero padding given as sizes."""
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
    if need_cuda:
        _checks.cuda_device("conv.weight", conv.weight)


def _geometry(kernel_size, stride, padding, dilation):
    return (_pair("kernel_size", kernel_size, 1), _pair("stride", stride, 1), _pair("padding", padding, 0),
            _pair("dilation", dilation, 1))


class QuantConv2d(QuantModule):
    """A requantized int8 conv2d (qgemm.ConvInt8Plan) in place of an nn.Conv2d.

    forward(x, layout=None) takes int8 x [N, H, W, Ci], or [N, Ci, H, W] with layout="nchw" (free
    for a channels_last tensor, one transposing copy otherwise), and returns the int8 output in the
    same layout, quantized with the output scale and zero point; the next quantized layer takes it
    as is, and dequantize(y) gives its real values. A floating-point x is quantized first with the
    input scale and zero point (one extra pass over x). With float_output=True a floating-point x
    gets its output dequantized back into x's dtype: a drop-in nn.Conv2d (what quantize_ builds,
    with layout "nchw").

    Buffers: weight int8 [Co, Kh, Kw, Ci] (channels last), weight_scale float32 [Co] (w ~=
    weight_scale * weight per output channel), bias float32 [Co] or None, and the calibration:
    input_scale, output_scale (float64 scalars), input_zero, output_zero (int32 scalars).
    """

    _FLOAT_BUFFERS = ()  # the bias is folded into the requantization in float64: keep it float32

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 bias: bool = True, *, input_scale: float = 1.0, input_zero: int = 0, output_scale: float = 1.0,
                 output_zero: int = 0, activation: str = "none", layout: str = "nhwc", float_output: bool = False,
                 device=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = _geometry(kernel_size, stride, padding, dilation)
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        _checks.one_of("layout", layout, LAYOUTS)
        # Checks the calibration values and the activation (weight_scale is checked once loaded).
        ConvInt8Quant(input_scale, input_zero, torch.ones(1, device="cpu"), output_scale, output_zero, activation)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.activation, self.layout, self.float_output = activation, layout, float_output
        kh, kw = self.kernel_size
        self.register_buffer("weight", torch.zeros(out_channels, kh, kw, in_channels, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_channels, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_channels, dtype=torch.float32, device=device) if bias else None)
        self.register_buffer("input_scale", torch.tensor(float(input_scale), dtype=torch.float64, device=device))
        self.register_buffer("input_zero", torch.tensor(input_zero, dtype=torch.int32, device=device))
        self.register_buffer("output_scale", torch.tensor(float(output_scale), dtype=torch.float64, device=device))
        self.register_buffer("output_zero", torch.tensor(output_zero, dtype=torch.int32, device=device))

    @classmethod
    def from_quantized(cls, w_q: torch.Tensor, quant: ConvInt8Quant, bias: torch.Tensor | None = None, stride=1,
                       padding=0, dilation=1, layout: str = "nhwc", float_output: bool = False) -> "QuantConv2d":
        """From int8 weights [Co, Kh, Kw, Ci] and their ConvInt8Quant (on w_q's device)."""
        _checks.tensor("w_q", w_q, (torch.int8,), ndim=4)
        if not isinstance(quant, ConvInt8Quant):
            raise TypeError(f"quant must be a qgemm.ConvInt8Quant, got {type(quant).__name__}")
        conv_quant.check_weight(w_q, quant)
        co, kh, kw, ci = w_q.shape
        module = cls(ci, co, (kh, kw), stride, padding, dilation, bias is not None, input_scale=quant.input_scale,
                     input_zero=quant.input_zero, output_scale=quant.output_scale, output_zero=quant.output_zero,
                     activation=quant.activation, layout=layout, float_output=float_output)
        module.to(w_q.device)
        _set(module, "weight", w_q)
        _set(module, "weight_scale", quant.weight_scale.float().to(w_q.device))
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float64, torch.float16, torch.bfloat16), ndim=1)
            _checks.shape("bias", bias, (co,))
            _set(module, "bias", bias.float().to(w_q.device))
        return module

    @classmethod
    def from_float(cls, conv: nn.Conv2d, input_scale: float, input_zero: int, output_scale: float, output_zero: int,
                   activation: str = "none", layout: str = "nhwc", float_output: bool = False) -> "QuantConv2d":
        """Quantize conv's weight per output channel (symmetric int8, conv_quant.quantize_weight), on
        its device; the input and output scales and zero points come from calibration; `activation`
        (none, relu, relu6) is applied to the output before requantization."""
        check_conv(conv)
        w_q, weight_scale = conv_quant.quantize_weight(conv.weight)
        quant = ConvInt8Quant(input_scale, input_zero, weight_scale, output_scale, output_zero, activation)
        bias = None if conv.bias is None else conv.bias.detach()
        return cls.from_quantized(w_q, quant, bias, conv.stride, conv.padding, conv.dilation, layout, float_output)

    @property
    def quant(self) -> ConvInt8Quant:
        """The buffers' quantization (reads the scalars: one device sync on a GPU)."""
        self._check_materialized()
        return ConvInt8Quant(float(self.input_scale), int(self.input_zero), self.weight_scale,
                             float(self.output_scale), int(self.output_zero), self.activation)

    def set_calibration(self, input_scale: float, input_zero: int, output_scale: float, output_zero: int):
        """New input/output scales and zero points (checked as ConvInt8Quant checks them)."""
        ConvInt8Quant(input_scale, input_zero, torch.ones(1, device="cpu"), output_scale, output_zero, self.activation)
        self.input_scale.fill_(float(input_scale))
        self.input_zero.fill_(input_zero)
        self.output_scale.fill_(float(output_scale))
        self.output_zero.fill_(output_zero)
        self._plans.clear()

    _takes_layout = True

    def _fake_forward(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        float_out = x.is_floating_point() and self.float_output
        return fake_output(self, x, layout or self.layout, x.dtype if float_out else torch.int8)

    def _make_plan(self) -> ConvInt8Plan:
        return ConvInt8Plan(self.weight, self.quant, bias=self.bias, stride=self.stride, padding=self.padding,
                            dilation=self.dilation)

    def _forward_impl(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        layout = layout or self.layout
        plan = self.plan()
        quant = plan.quant
        float_dtype = x.dtype if isinstance(x, torch.Tensor) and x.is_floating_point() else None
        if float_dtype is not None:
            x = conv_quant.quantize_input(x, quant.input_scale, quant.input_zero)
        y = plan(x, layout=layout)
        if float_dtype is not None and self.float_output:
            return conv_quant.dequantize_output(y, quant.output_scale, quant.output_zero).to(float_dtype)
        return y

    def _reference_forward(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        """reference.conv2d_int8: the convolution by definition in float64, requantized."""
        layout = layout or self.layout
        _checks.one_of("layout", layout, LAYOUTS)
        quant = self.quant
        float_dtype = x.dtype if x.is_floating_point() else None
        if float_dtype is not None:
            x = conv_quant.quantize_input(x, quant.input_scale, quant.input_zero)
        _checks.tensor("x", x, (torch.int8,), ndim=4)
        x_nhwc = x.permute(0, 2, 3, 1) if layout == "nchw" else x
        if x_nhwc.shape[3] != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} channels ({layout}), got shape {tuple(x.shape)}")
        y = reference.conv2d_int8(x_nhwc, self.weight, self.bias, quant, self.stride, self.padding, self.dilation)
        if layout == "nchw":
            y = y.permute(0, 3, 1, 2)
        if float_dtype is not None and self.float_output:
            return conv_quant.dequantize_output(y, quant.output_scale, quant.output_zero).to(float_dtype)
        return y

    def dequantize(self, y: torch.Tensor) -> torch.Tensor:
        """float32 S_O * (y - Z_O) of an output of this layer."""
        return conv_quant.dequantize_output(y, float(self.output_scale), int(self.output_zero))

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, bias={self.bias is not None}, "
                f"activation={self.activation}, layout={self.layout}, float_output={self.float_output}")


def check_int_weight_conv(in_channels: int, out_channels: int, bits: int, block_size: int):
    """What the FpA x IntB conv kernels take (ValueError otherwise)."""
    if isinstance(bits, bool) or bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    _checks.multiple("in_channels (C)", in_channels, CHANNEL_ALIGNMENT, "16-byte gathers of FP16/BF16 input channels")
    _checks.multiple("out_channels (Co)", out_channels, 8, "one tensor-core tile of output channels")
    if block_size != -1 and (block_size not in CONV_BLOCK_SIZES or in_channels % block_size):
        raise ValueError(f"block_size must be one of {CONV_BLOCK_SIZES} dividing in_channels={in_channels}, or -1 "
                         f"(per output channel), got {block_size!r}")


class IntWeightConv2d(QuantModule):
    """A conv2d with an INT4/INT8 filter (qgemm.FpAIntBConvPlan) in place of an nn.Conv2d: float in,
    float out. forward(x, layout=None) takes x [N, C, H, W] as nn.Conv2d does (layout "nchw", the
    default: free for a channels_last tensor, one transposing copy otherwise) and returns
    [N, Co, Ho, Wo] as a channels_last view; layout="nhwc" takes and returns NHWC. float16 and
    bfloat16 run as they are; float32 runs on the kernels of act_dtype (the constructor's, else the
    dtype of the last .half()/.bfloat16(), else float16) and is converted back.

    Buffers: weight int8 [Co, R, S, C] (signed codes, channels last), weight_scale and weight_offset
    float32 [Co, C // block_size] ([Co, 1] for block_size -1): W = weight * scale + offset per block
    of input channels; bias [Co] or None.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 bias: bool = True, *, bits: int = 4, block_size: int = 32, activation: str = "none",
                 act_dtype: torch.dtype | None = None, layout: str = "nchw", device=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = _geometry(kernel_size, stride, padding, dilation)
        check_int_weight_conv(in_channels, out_channels, bits, block_size)
        _checks.one_of("activation", activation, tuple(CONV_ACTIVATIONS))
        _checks.one_of("layout", layout, LAYOUTS)
        if act_dtype is not None and act_dtype not in ACT_DTYPES:
            raise TypeError(f"act_dtype must be one of {tuple(ACT_DTYPES)} or None, got {act_dtype}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.bits, self.block_size, self.activation, self.layout = bits, block_size, activation, layout
        self.act_dtype = act_dtype
        r, s = self.kernel_size
        blocks = 1 if block_size == -1 else in_channels // block_size
        self.register_buffer("weight", torch.zeros(out_channels, r, s, in_channels, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_channels, blocks, dtype=torch.float32, device=device))
        self.register_buffer("weight_offset", torch.zeros(out_channels, blocks, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_channels, dtype=torch.float32, device=device) if bias else None)

    @classmethod
    def from_weight(cls, weight: IntConvWeight, bias: torch.Tensor | None = None, stride=1, padding=0, dilation=1,
                    activation: str = "none", act_dtype: torch.dtype | None = None,
                    layout: str = "nchw") -> "IntWeightConv2d":
        if not isinstance(weight, IntConvWeight):
            raise TypeError(f"weight must be a qgemm.IntConvWeight, got {type(weight).__name__}")
        module = cls(weight.in_channels, weight.out_channels, weight.kernel_size, stride, padding, dilation,
                     bias is not None, bits=weight.bits, block_size=weight.block_size, activation=activation,
                     act_dtype=act_dtype, layout=layout, device="meta")
        _set(module, "weight", weight.q)
        _set(module, "weight_scale", weight.scale.float())
        _set(module, "weight_offset", weight.offset.float())
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float16, torch.bfloat16, torch.float64), ndim=1)
            _checks.shape("bias", bias, (weight.out_channels,))
            _set(module, "bias", bias.to(weight.device, torch.float32 if bias.dtype == torch.float64 else bias.dtype))
        return module

    @classmethod
    def from_float(cls, conv: nn.Conv2d, bits: int = 4, block_size: int = 32, symmetric: bool = False,
                   activation: str = "none", act_dtype: torch.dtype | None = None,
                   layout: str = "nchw") -> "IntWeightConv2d":
        """Round-to-nearest quantization of conv's weight (IntConvWeight.from_float: blocks of
        block_size input channels, -1 for one per output channel); `activation` (one of
        FpAIntBConvPlan's: none, relu, relu6, silu, gelu) is fused after the bias."""
        check_conv(conv)
        _checks.one_of("activation", activation, tuple(CONV_ACTIVATIONS))
        weight = IntConvWeight.from_float(conv.weight, bits, block_size, symmetric)
        bias = None if conv.bias is None else conv.bias.detach()
        return cls.from_weight(weight, bias, conv.stride, conv.padding, conv.dilation, activation, act_dtype, layout)

    def int_weight(self) -> IntConvWeight:
        return IntConvWeight(self.weight, self.weight_scale, self.weight_offset, self.bits, self.block_size)

    def _act_dtype(self, x: torch.Tensor) -> torch.dtype:
        if x.dtype in ACT_DTYPES:
            return x.dtype
        return self.act_dtype if self.act_dtype in ACT_DTYPES else torch.float16

    _takes_layout = True

    def _fake_forward(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        return fake_output(self, x, layout or self.layout, x.dtype)

    def _make_plan(self, act_dtype: torch.dtype) -> FpAIntBConvPlan:
        return FpAIntBConvPlan(self.int_weight(), act_dtype=act_dtype, bias=self.bias, activation=self.activation,
                               stride=self.stride, padding=self.padding, dilation=self.dilation)

    def _forward_impl(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        _checks.tensor("x", x, (torch.float16, torch.bfloat16, torch.float32), ndim=4)
        return self.plan(self._act_dtype(x))(x, layout=layout or self.layout)

    def _reference_forward(self, x: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        """float64 convolution of x rounded to the kernel's activation dtype with the filter from
        scales and offsets in that dtype (IntConvWeight.dequantize), bias in it too."""
        layout = layout or self.layout
        _checks.one_of("layout", layout, LAYOUTS)
        _checks.tensor("x", x, (torch.float16, torch.bfloat16, torch.float32), ndim=4)
        act = self._act_dtype(x)
        x_nchw = x.permute(0, 3, 1, 2) if layout == "nhwc" else x
        if x_nchw.shape[1] != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} channels ({layout}), got shape {tuple(x.shape)}")
        w = self.int_weight().dequantize(act).permute(0, 3, 1, 2)
        bias = None if self.bias is None else self.bias.to(act).double()
        y = F.conv2d(x_nchw.to(act).double(), w, bias, self.stride, self.padding, self.dilation)
        y = _CONV_TORCH_ACTIVATIONS[self.activation](y).to(x.dtype)
        if layout == "nhwc":
            return y.permute(0, 2, 3, 1).contiguous()
        return y.contiguous(memory_format=torch.channels_last)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, bias={self.bias is not None}, int{self.bits}, "
                f"block_size={self.block_size}, activation={self.activation}")
