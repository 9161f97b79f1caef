"""Quantized replacements of nn.Linear: QuantLinear (W4A16/W8A16), Fp8Linear (FP8 blockwise),
W8A8Linear (int8 per K-block). See qgemm/nn/_base.py for what they share (buffers, lazy plans,
the reference path on the CPU).

Each module has an nn.Linear-like constructor that only allocates its buffers, zero-filled, at
their final shapes and dtypes (on any device, `meta` included: load_state_dict(..., assign=True)
or to_empty() + load_state_dict() then fills them), and classmethods that build it from a float
nn.Linear or from quantized tensors.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cutlass_gen.families.fpaintb_layout import layout as fpaintb_layout

from .. import _checks, reference
from ..fpaintb import pack as fpaintb_pack
from ..fpaintb import wq_format
from ..fp8 import FP8_DTYPES, GROUP as FP8_GROUP, N_ALIGNMENT as FP8_N_ALIGNMENT, Fp8GemmPlan, Fp8Weight
from ..fpaintb import ACT_DTYPES, ACTIVATIONS, GROUP_SIZES, FpAIntBPlan, IntBWeight
from ..w8a8 import BLOCK_SIZES as W8A8_BLOCK_SIZES
from ..w8a8 import N_ALIGNMENT as W8A8_N_ALIGNMENT
from ..w8a8 import SCHEMES as W8A8_SCHEMES
from ..w8a8 import WEIGHT_BLOCK_N, W8A8GemmPlan, W8A8Weight
from ._base import QuantModule, check_input

_TORCH_ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}


def _check_linear(linear):
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")


def _bias_of(linear: nn.Linear):
    return None if linear.bias is None else linear.bias.detach()


def _set(module: nn.Module, name: str, value: torch.Tensor | None):
    """Replace a buffer, keeping it registered (and persistent)."""
    module._buffers[name] = None if value is None else value.detach().contiguous()


def _lead(x: torch.Tensor, in_features: int):
    return x.shape[:-1], x.reshape(-1, in_features).contiguous()


# --- W4A16 / W8A16 -------------------------------------------------------------------------------

def check_fpaintb_shape(in_features: int, out_features: int, bits: int, group_size: int) -> int:
    """What the FpA x IntB kernels take (ValueError otherwise); returns the group size (-1 -> K)."""
    if isinstance(bits, bool) or bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    lay = fpaintb_layout(bits)
    fpaintb_pack.check_packable("weight", in_features, out_features, lay)
    if group_size == -1:
        group_size = in_features
    if isinstance(group_size, bool) or not isinstance(group_size, int) or \
            (group_size != in_features and group_size not in GROUP_SIZES) or in_features % group_size:
        raise ValueError(f"group_size must be one of {GROUP_SIZES} dividing in_features={in_features}, or -1 "
                         f"(per output channel), got {group_size!r}")
    return group_size


class QuantLinear(QuantModule):
    """y = act(x W^T + b) with W an INT4/INT8 weight-only quantized weight (W4A16 / W8A16, the FpA x
    IntB kernels) and x float16/bfloat16 [..., K]; returns [..., N] in x's dtype.

    Buffers (the names GPTQ checkpoints use, in the layouts qgemm's kernels read):
      qweight  uint8 [N / interleave, K * interleave * bits / 8]: the codes in the packed layout of
               cutlass_gen/families/fpaintb_layout.py (rows in act-order when g_idx is set)
      scales   float16/bfloat16 [K / group_size, N]
      qzeros   uint8 [K / group_size, N], the zero points themselves (unpacked, no GPTQ v1 offset);
               absent (None) for symmetric weights, whose zero is 2**(bits - 1)
      g_idx    int32 [K] (act_order=True only): the group of each input feature, GPTQ's meaning;
               the stored rows are input features argsort(g_idx, stable)
      bias     [N] or None
    w[k, n] = (u[k, n] - zero[g_idx[k], n]) * scales[g_idx[k], n] for input feature k.

    Build: QuantLinear.from_float(linear, bits=4, group_size=128), .from_gptq(...), .from_awq(...),
    .from_compressed_tensors(...), .from_weight(IntBWeight), or QuantLinear(in, out, ...) then
    load_state_dict. Kernels (and the plan per activation dtype) come on the first CUDA forward.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, bits: int = 4,
                 group_size: int = 128, zero_point: bool = False, act_order: bool = False, activation: str = "none",
                 scale_dtype: torch.dtype = torch.float16, bias_dtype: torch.dtype | None = None, device=None):
        super().__init__()
        group_size = check_fpaintb_shape(in_features, out_features, bits, group_size)
        _checks.one_of("activation", activation, tuple(ACTIVATIONS))
        if scale_dtype not in ACT_DTYPES:
            raise TypeError(f"scale_dtype must be one of {tuple(ACT_DTYPES)}, got {scale_dtype}")
        self.in_features, self.out_features = in_features, out_features
        self.bits, self.group_size, self.activation = bits, group_size, activation
        k, n, groups = in_features, out_features, in_features // group_size
        lay = fpaintb_layout(bits)
        self.register_buffer("qweight", torch.zeros(lay.packed_shape(k, n), dtype=torch.uint8, device=device))
        self.register_buffer("scales", torch.zeros(groups, n, dtype=scale_dtype, device=device))
        self.register_buffer("qzeros", torch.zeros(groups, n, dtype=torch.uint8, device=device) if zero_point else None)
        g_idx = torch.arange(k, dtype=torch.int32, device=device) // group_size if act_order else None
        self.register_buffer("g_idx", g_idx)
        self.register_buffer("bias", torch.zeros(n, dtype=bias_dtype or scale_dtype, device=device) if bias else None)

    # --- construction from quantized tensors ----------------------------------------------------

    @classmethod
    def from_weight(cls, weight: IntBWeight, bias: torch.Tensor | None = None, activation: str = "none",
                    act_order: bool | None = None) -> "QuantLinear":
        """From a packed qgemm.IntBWeight (on its device). act_order: keep a g_idx buffer even when
        the weight has no permutation (None: where it has one)."""
        if not isinstance(weight, IntBWeight):
            raise TypeError(f"weight must be a qgemm.IntBWeight, got {type(weight).__name__}")
        if act_order is None:
            act_order = weight.perm is not None
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float16, torch.bfloat16), ndim=1)
            _checks.shape("bias", bias, (weight.n,))
        module = cls(weight.k, weight.n, bias is not None, bits=weight.bits, group_size=weight.group_size,
                     zero_point=weight.zero is not None, act_order=act_order, activation=activation,
                     scale_dtype=weight.scale.dtype, bias_dtype=None if bias is None else bias.dtype, device="meta")
        _set(module, "qweight", weight.packed)
        _set(module, "scales", weight.scale)
        _set(module, "qzeros", weight.zero)
        if act_order:
            g = weight.group_size
            rows = torch.arange(weight.k, device=weight.device) // g
            if weight.perm is None:
                g_idx = rows
            else:  # stored row r is input feature perm[r], in group r // g
                g_idx = torch.empty_like(rows).index_copy_(0, weight.perm.long(), rows)
            _set(module, "g_idx", g_idx.to(torch.int32))
        _set(module, "bias", None if bias is None else bias.to(weight.device))
        return module

    @classmethod
    def from_int_weight(cls, weight: wq_format.IntWeight, bias=None, activation: str = "none") -> "QuantLinear":
        """From the logical form (qgemm.wq_format.IntWeight), packed here."""
        return cls.from_weight(IntBWeight.from_int_weight(weight), bias, activation)

    @classmethod
    def from_float(cls, linear: nn.Linear, bits: int = 4, group_size: int = 128, symmetric: bool = True,
                   activation: str = "none", scale_dtype: torch.dtype | None = None) -> "QuantLinear":
        """Round-to-nearest quantization of an nn.Linear (group_size -1: per output channel), on the
        linear's device; scales in scale_dtype (default: the weight's dtype if 16-bit, else float16)."""
        _check_linear(linear)
        w = linear.weight.detach()
        check_fpaintb_shape(linear.in_features, linear.out_features, bits, group_size)
        if scale_dtype is None:
            scale_dtype = w.dtype if w.dtype in ACT_DTYPES else torch.float16
        weight = IntBWeight.from_float(w, bits, group_size, symmetric, scale_dtype)
        return cls.from_weight(weight, _bias_of(linear), activation)

    @classmethod
    def from_gptq(cls, qweight, qzeros, scales, g_idx=None, bias=None, bits: int = 4,
                  zero_offset: int = 1, activation: str = "none") -> "QuantLinear":
        """GPTQ checkpoint tensors (v1: zero_offset=1, v2: 0); qgemm.wq_format.from_gptq defines them."""
        weight = wq_format.from_gptq(qweight, qzeros, scales, g_idx, bits, zero_offset)
        return cls.from_weight(IntBWeight.from_int_weight(weight), bias, activation,
                               act_order=weight.perm is not None)

    @classmethod
    def from_awq(cls, qweight, qzeros, scales, bias=None, activation: str = "none") -> "QuantLinear":
        """AutoAWQ GEMM checkpoint tensors; qgemm.wq_format.from_awq defines them."""
        return cls.from_weight(IntBWeight.from_awq(qweight, qzeros, scales), bias, activation)

    @classmethod
    def from_compressed_tensors(cls, weight_packed, weight_scale, weight_zero_point=None, weight_g_idx=None,
                                num_bits: int = 4, weight_shape=None, bias=None,
                                activation: str = "none") -> "QuantLinear":
        """compressed-tensors pack-quantized tensors; qgemm.wq_format.from_compressed_tensors defines them."""
        weight = wq_format.from_compressed_tensors(weight_packed, weight_scale, weight_zero_point, weight_g_idx,
                                                   num_bits, weight_shape)
        return cls.from_weight(IntBWeight.from_int_weight(weight), bias, activation)

    # --- the weight ---------------------------------------------------------------------------------

    def _perm(self) -> torch.Tensor | None:
        """The act-order permutation of the stored rows, or None where g_idx keeps the input order."""
        if self.g_idx is None:
            return None
        perm = torch.argsort(self.g_idx.long(), stable=True)
        if bool(torch.equal(perm, torch.arange(self.in_features, device=perm.device))):
            return None
        return perm

    def int_weight(self) -> IntBWeight:
        """The buffers as a qgemm.IntBWeight (no copy of the codes)."""
        return IntBWeight(self.qweight, self.scales, self.qzeros, self.bits, self.group_size, self.in_features,
                          self.out_features, self._perm())

    def dequantize(self) -> torch.Tensor:
        """float64 W^T [K, N] in input-feature order: x @ this + bias == the layer."""
        return self.int_weight().dequantize()

    # --- forward -------------------------------------------------------------------------------------

    def _check_x(self, x):
        check_input(x, self.in_features)
        if x.dtype not in ACT_DTYPES:
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")

    def _make_plan(self, act_dtype: torch.dtype) -> FpAIntBPlan:
        return FpAIntBPlan(self.int_weight(), act_dtype=act_dtype, bias=self.bias, activation=self.activation)

    def _fake_forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_x(x)
        return x.new_empty(*x.shape[:-1], self.out_features)

    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        self._check_x(x)
        lead, x2 = _lead(x, self.in_features)
        return self.plan(x.dtype)(x2).reshape(*lead, self.out_features)

    def _reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        """float64 from the buffers as the kernels read them: scales and bias in x's dtype."""
        self._check_x(x)
        lead, x2 = _lead(x, self.in_features)
        w = self.int_weight()
        logical = wq_format.IntWeight(w.codes(), w.scale.to(x.dtype), w.zero, w.bits, w.group_size, w.perm)
        y = x2.double() @ logical.dequantize()
        if self.bias is not None:
            y = y + self.bias.to(x.dtype).double()
        y = _TORCH_ACTIVATIONS[self.activation](y)
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"int{self.bits}, group_size={self.group_size}, zero_point={self.qzeros is not None}, "
                f"act_order={self.g_idx is not None}, activation={self.activation}")


# --- FP8 blockwise ---------------------------------------------------------------------------------

def check_fp8_shape(in_features: int, out_features: int):
    """What the FP8 blockwise kernels take (ValueError otherwise)."""
    if in_features <= 0 or in_features % FP8_GROUP:
        raise ValueError(f"in_features (K) must be a positive multiple of {FP8_GROUP} (the scale block), "
                         f"got {in_features}")
    if out_features <= 0 or out_features % FP8_N_ALIGNMENT:
        raise ValueError(f"out_features (N) must be a positive multiple of {FP8_N_ALIGNMENT} (16-byte TMA rows "
                         f"of the output), got {out_features}")


class Fp8Linear(QuantModule):
    """y = x W^T + b with W an FP8 weight in 128 x 128 blocks (DeepSeek-V3) and x quantized per
    token and 128-K group on each call. Takes x [..., K] in float32/float16/bfloat16 and returns
    [..., N] in `out_dtype` (by default x's dtype when that is bfloat16/float16, else the dtype the
    module was converted to with .half()/.bfloat16(), else bfloat16). The kernels are sm90 only.

    Buffers (DeepSeek-V3 / HF FineGrainedFP8 names and layouts):
      weight            float8_e4m3fn (or e5m2) [N, K]
      weight_scale_inv  float32 [ceil(N / 128), K / 128]: w ~= weight_scale_inv * weight blockwise
      bias              [N] or None
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, out_dtype: torch.dtype | None = None,
                 weight_dtype: torch.dtype = torch.float8_e4m3fn, bias_dtype: torch.dtype = torch.float32,
                 device=None):
        super().__init__()
        check_fp8_shape(in_features, out_features)
        if weight_dtype not in FP8_DTYPES:
            raise TypeError(f"weight_dtype must be one of {tuple(FP8_DTYPES)}, got {weight_dtype}")
        if out_dtype is not None and out_dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"out_dtype must be torch.bfloat16, torch.float16 or None, got {out_dtype}")
        self.in_features, self.out_features, self.out_dtype = in_features, out_features, out_dtype
        n, k = out_features, in_features
        self.register_buffer("weight", torch.zeros(n, k, dtype=weight_dtype, device=device))
        self.register_buffer("weight_scale_inv", torch.ones(-(-n // FP8_GROUP), k // FP8_GROUP, dtype=torch.float32,
                                                            device=device))
        self.register_buffer("bias", torch.zeros(n, dtype=bias_dtype, device=device) if bias else None)

    @classmethod
    def from_weight(cls, weight: Fp8Weight, bias: torch.Tensor | None = None,
                    out_dtype: torch.dtype | None = None) -> "Fp8Linear":
        if not isinstance(weight, Fp8Weight):
            raise TypeError(f"weight must be a qgemm.Fp8Weight, got {type(weight).__name__}")
        _checks.tensor("weight.qweight", weight.qweight, tuple(FP8_DTYPES), ndim=2)
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float16, torch.bfloat16), ndim=1)
            _checks.shape("bias", bias, (weight.n,))
        module = cls(weight.k, weight.n, bias is not None, out_dtype=out_dtype, weight_dtype=weight.qweight.dtype,
                     device="meta")
        _checks.tensor("weight.scale_inv", weight.scale_inv, (torch.float32,), ndim=2)
        _checks.shape("weight.scale_inv", weight.scale_inv, tuple(module.weight_scale_inv.shape))
        _set(module, "weight", weight.qweight)
        _set(module, "weight_scale_inv", weight.scale_inv)
        _set(module, "bias", None if bias is None else bias.float().to(weight.device))
        return module

    @classmethod
    def from_float(cls, linear: nn.Linear, out_dtype: torch.dtype | None = None) -> "Fp8Linear":
        """Quantize an nn.Linear's weight per 128 x 128 block (on the linear's device)."""
        _check_linear(linear)
        check_fp8_shape(linear.in_features, linear.out_features)
        return cls.from_weight(Fp8Weight.from_float(linear.weight.detach()), _bias_of(linear), out_dtype)

    @classmethod
    def from_deepseek(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor, bias: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None) -> "Fp8Linear":
        """From a DeepSeek-V3 checkpoint's FP8 weight [N, K] and weight_scale_inv [ceil(N/128), K/128]."""
        return cls.from_weight(Fp8Weight.from_deepseek(weight, weight_scale_inv), bias, out_dtype)

    def dequantize(self) -> torch.Tensor:
        """float64 W [N, K]."""
        return reference.dequantize_fp8_blocks(self.weight, self.weight_scale_inv)

    def _out_dtype(self, x: torch.Tensor) -> torch.dtype:
        if self.out_dtype is not None:
            return self.out_dtype
        if x.dtype in (torch.bfloat16, torch.float16):
            return x.dtype
        return self.act_dtype if self.act_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16

    def _fake_forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.in_features)
        return x.new_empty(*x.shape[:-1], self.out_features, dtype=self._out_dtype(x))

    def _make_plan(self, out_dtype: torch.dtype) -> Fp8GemmPlan:
        return Fp8GemmPlan(Fp8Weight(self.weight, self.weight_scale_inv), bias=self.bias, out_dtype=out_dtype)

    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.in_features)
        lead, x2 = _lead(x, self.in_features)
        return self.plan(self._out_dtype(x))(x2).reshape(*lead, self.out_features)

    def _reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The activation quantizer's float32 arithmetic (reference.quantize_fp8_groups), then the
        float64 GEMM from the same FP8 operands."""
        check_input(x, self.in_features)
        _checks.tensor("x", x, (torch.float32, torch.float16, torch.bfloat16))
        lead, x2 = _lead(x, self.in_features)
        q, sx = reference.quantize_fp8_groups(x2)
        bias = None if self.bias is None else self.bias.float()
        y = reference.fp8_blockwise_gemm(q, sx, self.weight, self.weight_scale_inv, bias)
        return y.to(self._out_dtype(x)).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight={str(self.weight.dtype).replace('torch.', '')} 128x128 blocks")


# --- W8A8 ------------------------------------------------------------------------------------------

def check_w8a8_shape(in_features: int, out_features: int, block_size: int, scheme: str):
    """What the W8A8 kernels take for 16-bit outputs (ValueError otherwise)."""
    if isinstance(block_size, bool) or block_size not in W8A8_BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {W8A8_BLOCK_SIZES}, got {block_size!r}")
    _checks.one_of("scheme", scheme, W8A8_SCHEMES)
    if in_features <= 0 or in_features % block_size:
        raise ValueError(f"in_features (K) must be a positive multiple of block_size={block_size}, got {in_features}")
    # The symmetric scheme runs on the Sm90 kernels alone, which store 16-byte rows of 16-bit output.
    align = 8 if scheme == "symmetric" else W8A8_N_ALIGNMENT
    if out_features <= 0 or out_features % align:
        raise ValueError(f"out_features (N) must be a positive multiple of {align} for the {scheme} scheme, "
                         f"got {out_features}")


class W8A8Linear(QuantModule):
    """y = act(x W^T + b) with W int8 per K-block and x quantized per (row, K-block) on each call
    (qgemm.W8A8GemmPlan). Takes x [..., K] float32/float16/bfloat16, returns [..., N] in out_dtype
    (default x's dtype).

    Buffers:
      weight            int8 [N, K]
      symmetric (block-INT8, DeepSeek-V3/R1 INT8 names):
        weight_scale_inv  float32 [ceil(N / 128), K / block_size]: w ~= weight_scale_inv * weight
      asymmetric (MNN's scheme), block-major as the kernels read them:
        weight_scale, weight_offset  float32 [K / block_size, N]: w ~= scale * weight + offset
      bias              [N] or None
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, block_size: int = 128,
                 scheme: str = "symmetric", activation: str = "none", out_dtype: torch.dtype | None = None,
                 bias_dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        check_w8a8_shape(in_features, out_features, block_size, scheme)
        _checks.one_of("activation", activation, reference.W8A8_ACTIVATIONS)
        if out_dtype is not None and out_dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"out_dtype must be torch.float32, torch.float16, torch.bfloat16 or None, got {out_dtype}")
        self.in_features, self.out_features = in_features, out_features
        self.block_size, self.scheme, self.activation, self.out_dtype = block_size, scheme, activation, out_dtype
        n, k = out_features, in_features
        blocks = k // block_size
        self.register_buffer("weight", torch.zeros(n, k, dtype=torch.int8, device=device))
        if scheme == "symmetric":
            self.register_buffer("weight_scale_inv", torch.ones(-(-n // WEIGHT_BLOCK_N), blocks, dtype=torch.float32,
                                                                device=device))
        else:
            self.register_buffer("weight_scale", torch.ones(blocks, n, dtype=torch.float32, device=device))
            self.register_buffer("weight_offset", torch.zeros(blocks, n, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(n, dtype=bias_dtype, device=device) if bias else None)

    @classmethod
    def from_weight(cls, weight: W8A8Weight, bias: torch.Tensor | None = None, activation: str = "none",
                    out_dtype: torch.dtype | None = None) -> "W8A8Linear":
        if not isinstance(weight, W8A8Weight):
            raise TypeError(f"weight must be a qgemm.W8A8Weight, got {type(weight).__name__}")
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float16, torch.bfloat16), ndim=1)
            _checks.shape("bias", bias, (weight.n,))
        module = cls(weight.k, weight.n, bias is not None, block_size=weight.block_size, scheme=weight.scheme,
                     activation=activation, out_dtype=out_dtype, device="meta")
        _set(module, "weight", weight.qweight)
        if weight.scheme == "symmetric":
            _checks.shape("weight.scale", weight.scale, tuple(module.weight_scale_inv.shape))
            _set(module, "weight_scale_inv", weight.scale.float())
        else:
            _checks.shape("weight.scale", weight.scale, tuple(module.weight_scale.shape))
            _set(module, "weight_scale", weight.scale.float())
            _set(module, "weight_offset", weight.offset.float())
        _set(module, "bias", None if bias is None else bias.float().to(weight.device))
        return module

    @classmethod
    def from_float(cls, linear: nn.Linear, block_size: int = 128, scheme: str = "symmetric",
                   activation: str = "none", out_dtype: torch.dtype | None = None) -> "W8A8Linear":
        """Quantize an nn.Linear's weight per K-block (W8A8Weight.from_float), on its device."""
        _check_linear(linear)
        check_w8a8_shape(linear.in_features, linear.out_features, block_size, scheme)
        weight = W8A8Weight.from_float(linear.weight.detach(), block_size, scheme=scheme)
        return cls.from_weight(weight, _bias_of(linear), activation, out_dtype)

    @classmethod
    def from_block_int8(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor, bias: torch.Tensor | None = None,
                        block_size: int = 128, activation: str = "none",
                        out_dtype: torch.dtype | None = None) -> "W8A8Linear":
        """From a block-INT8 checkpoint pair (int8 weight [N, K], weight_scale_inv [ceil(N/128), K/block_size])."""
        return cls.from_weight(W8A8Weight.from_block_int8(weight, weight_scale_inv, block_size), bias, activation,
                               out_dtype)

    def weight_tensors(self) -> W8A8Weight:
        """The buffers as a qgemm.W8A8Weight (the asymmetric scheme's column sums computed here)."""
        if self.scheme == "symmetric":
            return W8A8Weight(self.weight, self.weight_scale_inv, None, None, self.block_size, "symmetric")
        n, k, bs = self.out_features, self.in_features, self.block_size
        qsum = self.weight.reshape(n, k // bs, bs).sum(dim=2, dtype=torch.int32).float().t().contiguous()
        return W8A8Weight(self.weight, self.weight_scale, self.weight_offset, qsum, bs, "asymmetric")

    def dequantize(self) -> torch.Tensor:
        """float64 W [N, K]."""
        return self.weight_tensors().dequantize()

    def _out_dtype(self, x: torch.Tensor) -> torch.dtype:
        return self.out_dtype or x.dtype

    def _fake_forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.in_features)
        return x.new_empty(*x.shape[:-1], self.out_features, dtype=self._out_dtype(x))

    def _make_plan(self, out_dtype: torch.dtype) -> W8A8GemmPlan:
        return W8A8GemmPlan(self.weight_tensors(), bias=self.bias, activation=self.activation, out_dtype=out_dtype)

    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.in_features)
        lead, x2 = _lead(x, self.in_features)
        return self.plan(self._out_dtype(x))(x2).reshape(*lead, self.out_features)

    def _reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The activation quantizer's float32 arithmetic (reference.quantize_blocks[_symmetric]),
        then the float64 GEMM from the same int8 operands."""
        check_input(x, self.in_features)
        _checks.tensor("x", x, (torch.float32, torch.float16, torch.bfloat16))
        lead, x2 = _lead(x, self.in_features)
        bs = self.block_size
        bias = None if self.bias is None else self.bias.float()
        if self.scheme == "symmetric":
            q, s = reference.quantize_blocks_symmetric(x2, bs)
            y = reference.w8a8_gemm_symmetric(q, s, self.weight, self.weight_scale_inv, bs, bias, self.activation)
        else:
            q, s, o, _ = reference.quantize_blocks(x2, bs)
            y = reference.w8a8_gemm(q, s, o, self.weight, self.weight_scale, self.weight_offset, bs, bias,
                                    self.activation)
        return y.to(self._out_dtype(x)).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"{self.scheme}, block_size={self.block_size}, activation={self.activation}")
