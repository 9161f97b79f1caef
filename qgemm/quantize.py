"""Quantize a model in place, torchao style: quantize_(model, config, filter_fn=None).

    report = qgemm.quantize_(model, qgemm.Int4WeightOnlyConfig(group_size=128))
    report.replaced   # names of the layers now qgemm modules
    report.skipped    # {name: why}: layers of the config's type whose shapes the kernels cannot take

Linear configs replace nn.Linear: Int4WeightOnlyConfig / Int8WeightOnlyConfig (QuantLinear, round to
nearest, W4A16 / W8A16), W8A8BlockConfig (W8A8Linear), Fp8BlockwiseConfig (Fp8Linear). Conv configs
replace nn.Conv2d: Int8ConvConfig (QuantConv2d with per-tensor activation scales from
calibrate_convs; float in, float out) and IntWeightConvConfig (IntWeightConv2d, FP x INT filters).

Weights are quantized where they are (CPU or GPU); the new modules keep the device. A layer the
config cannot take is left as it was, and the reason is recorded in the report and logged (logger
"qgemm.quantize"), never dropped silently. filter_fn(module, name) -> bool narrows the layers
considered (e.g. lambda m, name: "lm_head" not in name).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch import nn

from . import tp as _tp
from .fuse import refuse_packed
from .nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, QuantModule, W8A8Linear
from .nn.conv import check_conv, check_int_weight_conv
from .nn.linear import check_fp8_shape, check_fpaintb_shape, check_w8a8_shape

log = logging.getLogger("qgemm.quantize")


# --- configs -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Int4WeightOnlyConfig:
    """W4A16: int4 codes per group of `group_size` input features (32, 64, 128, 256, or -1 for one
    per output channel); symmetric (zero 8) or, with symmetric=False, a zero point per group.
    Scales in scale_dtype (default: the weight's dtype if 16-bit, else float16)."""

    group_size: int = 128
    symmetric: bool = True
    scale_dtype: torch.dtype | None = None
    bits = 4
    target = nn.Linear

    def check(self, linear: nn.Linear):
        check_fpaintb_shape(linear.in_features, linear.out_features, self.bits, self.group_size)

    def convert(self, linear: nn.Linear) -> nn.Module:
        return QuantLinear.from_float(linear, self.bits, self.group_size, self.symmetric, scale_dtype=self.scale_dtype)


@dataclass(frozen=True)
class Int8WeightOnlyConfig(Int4WeightOnlyConfig):
    """W8A16: int8 codes, by default one scale per output channel (group_size -1)."""

    group_size: int = -1
    bits = 8


@dataclass(frozen=True)
class W8A8BlockConfig:
    """W8A8 per K-block: scheme "symmetric" (block-INT8: weight scales per 128 x block_size,
    activations per (token, block); Sm90 kernels) or "asymmetric" (MNN's, per (column, block))."""

    block_size: int = 128
    scheme: str = "symmetric"
    out_dtype: torch.dtype | None = None
    target = nn.Linear

    def check(self, linear: nn.Linear):
        check_w8a8_shape(linear.in_features, linear.out_features, self.block_size, self.scheme)

    def convert(self, linear: nn.Linear) -> nn.Module:
        return W8A8Linear.from_float(linear, self.block_size, self.scheme, out_dtype=self.out_dtype)


@dataclass(frozen=True)
class Fp8BlockwiseConfig:
    """FP8 E4M3 weights in 128 x 128 blocks, activations per (token, 128) group (DeepSeek-V3; sm90)."""

    out_dtype: torch.dtype | None = None
    target = nn.Linear

    def check(self, linear: nn.Linear):
        check_fp8_shape(linear.in_features, linear.out_features)

    def convert(self, linear: nn.Linear) -> nn.Module:
        return Fp8Linear.from_float(linear, self.out_dtype)


@dataclass(frozen=True)
class ConvCalibration:
    """The ranges calibrate_convs saw at one convolution: of its input and of its output."""

    input_min: float
    input_max: float
    output_min: float
    output_max: float

    @staticmethod
    def int8_params(lo: float, hi: float) -> tuple[float, int]:
        """Per-tensor asymmetric int8 over [min(lo, 0), max(hi, 0)] (so that 0 is exact): scale
        (hi - lo) / 255 and the zero point that puts lo at -128."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = (hi - lo) / 255.0
        if not scale > 0:
            return 1.0, 0
        return scale, int(max(-128, min(127, round(-128 - lo / scale))))

    def quant_params(self) -> tuple[float, int, float, int]:
        """(input_scale, input_zero, output_scale, output_zero)."""
        return (*self.int8_params(self.input_min, self.input_max), *self.int8_params(self.output_min, self.output_max))


@dataclass(frozen=True)
class Int8ConvConfig:
    """Requantized int8 convolutions (QuantConv2d): weights symmetric per output channel, input and
    output per tensor from `calibration` ({layer name: ConvCalibration}, from calibrate_convs). The
    modules take and return floats in NCHW like the nn.Conv2d they replace (quantizing the input,
    dequantizing the int8 output)."""

    calibration: dict = field(default_factory=dict)
    target = nn.Conv2d

    def check(self, conv: nn.Conv2d, name: str = ""):
        check_conv(conv)
        if name not in self.calibration:
            raise ValueError(f"no calibration for {name!r}: run calibrate_convs(model, batches) over it first")

    def convert(self, conv: nn.Conv2d, name: str = "") -> nn.Module:
        input_scale, input_zero, output_scale, output_zero = self.calibration[name].quant_params()
        return QuantConv2d.from_float(conv, input_scale, input_zero, output_scale, output_zero, layout="nchw",
                                      float_output=True)


@dataclass(frozen=True)
class IntWeightConvConfig:
    """FP x INT convolutions (IntWeightConv2d): int4/int8 filters with a scale and offset per
    (output channel, block of block_size input channels; -1: per output channel)."""

    bits: int = 4
    block_size: int = 32
    symmetric: bool = False
    target = nn.Conv2d

    def check(self, conv: nn.Conv2d):
        check_conv(conv)
        check_int_weight_conv(conv.in_channels, conv.out_channels, self.bits, self.block_size)

    def convert(self, conv: nn.Conv2d) -> nn.Module:
        return IntWeightConv2d.from_float(conv, self.bits, self.block_size, self.symmetric)


CONFIGS = (Int4WeightOnlyConfig, Int8WeightOnlyConfig, W8A8BlockConfig, Fp8BlockwiseConfig, Int8ConvConfig,
           IntWeightConvConfig)


# --- quantize_ ---------------------------------------------------------------------------------------------

@dataclass
class QuantizeReport:
    replaced: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _needs_name(config) -> bool:
    return isinstance(config, Int8ConvConfig)


def quantize_(model: nn.Module, config, filter_fn=None, *, process_group=None, tp_plan=None) -> QuantizeReport:
    """Replace, in place, every layer of `model` of the config's type (nn.Linear or nn.Conv2d) that
    filter_fn(module, name) accepts (default: all) with its qgemm module (module docstring).

    process_group (tensor parallelism, qgemm/tp.py): each layer that tp_plan ({regex: "column" |
    "row"}, default qgemm.tp.DEFAULT_TP_PLAN: Llama's q/k/v/gate/up column, o/down row) matches is
    quantized whole, then cut into this rank's shard of its quantized tensors (so every rank computes
    with the TP=1 model's weights); matching layers left unquantized are sliced too. Pass a
    ProcessGroup (dist.group.WORLD for the default one), or (rank, world_size) to shard offline."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, CONFIGS):
        raise TypeError(f"config must be one of {[c.__name__ for c in CONFIGS]}, got {type(config).__name__}")
    if process_group is not None:
        refuse_packed(model, _tp.TP_REFUSES_PACKED)  # before any layer is quantized
    report = QuantizeReport()
    candidates = []
    for name, module in model.named_modules():
        if isinstance(module, QuantModule) or not isinstance(module, config.target):
            continue
        if filter_fn is not None and not filter_fn(module, name):
            continue
        candidates.append((name, module))
    for name, module in candidates:
        if name == "":
            _skip(report, name, "the root module cannot be replaced in place: wrap it in a container")
            continue
        if isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear):
            _skip(report, name, "nn.MultiheadAttention reads its out_proj.weight directly, not through forward")
            continue
        args = (module, name) if _needs_name(config) else (module,)
        try:
            config.check(*args)
        except (ValueError, TypeError) as e:
            _skip(report, name, str(e))
            continue
        with torch.no_grad():
            new = config.convert(*args)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
        report.replaced.append(name)
    if process_group is not None:
        with torch.no_grad():  # every layer whole first: an MLP's shards are planned together (qgemm/tp.py)
            _tp.parallelize(model, process_group, tp_plan)
    log.info("quantize_ %s: %d layers replaced, %d skipped", type(config).__name__, len(report.replaced),
             len(report.skipped))
    return report


def _skip(report: QuantizeReport, name: str, reason: str):
    report.skipped[name] = reason
    log.warning("quantize_: %s left unquantized: %s", name or "<root>", reason)


# --- calibration of the int8 convolutions --------------------------------------------------------------------

def calibrate_convs(model: nn.Module, batches, filter_fn=None) -> dict[str, ConvCalibration]:
    """Run the float model over `batches` (each a tensor, or a tuple of positional inputs) and record
    the range of every nn.Conv2d's input and output: {name: ConvCalibration} for Int8ConvConfig."""
    ranges: dict[str, list[float]] = {}
    hooks = []

    def observe(name):
        def hook(module, inputs, output):
            x = inputs[0].detach()
            y = output.detach()
            r = ranges.setdefault(name, [float("inf"), float("-inf"), float("inf"), float("-inf")])
            r[0], r[1] = min(r[0], float(x.min())), max(r[1], float(x.max()))
            r[2], r[3] = min(r[2], float(y.min())), max(r[3], float(y.max()))
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d) and (filter_fn is None or filter_fn(module, name)):
            hooks.append(module.register_forward_hook(observe(name)))
    try:
        with torch.no_grad():
            for batch in batches:
                model(*batch) if isinstance(batch, (tuple, list)) else model(batch)
    finally:
        for h in hooks:
            h.remove()
    return {name: ConvCalibration(*r) for name, r in ranges.items()}
