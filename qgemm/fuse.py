"""Pack the linears that read the same input into one GEMM, in place, as vLLM's QKVParallelLinear and
MergedColumnParallelLinear do (and its `packed_modules_mapping` names them):

    report = qgemm.fuse_projections_(model)          # before or after quantize_, after load_quantized
    report.fused     # {"model.layers.0.self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"), ...}
    report.skipped   # {"model.layers.0.self_attn.qkv_proj": why}

Why: at decode a Llama layer's k/v projections (1024 x 4096) are launch- and tail-bound, and every
W8A8 / FP8 linear quantizes its input again, so q/k/v quantize the same activations three times.
One GEMM over the concatenated weights reads the input once, quantizes it once, and launches once.

What changes in the model. For each parent module that has all the members of a group (default
PACKED_MODULES: q/k/v_proj -> qkv_proj, gate/up_proj -> gate_up_proj, the names Llama, Mistral and
Qwen2 use):
  * parent.qkv_proj is the packed layer: an nn.Linear, QuantLinear, W8A8Linear or Fp8Linear whose
    output features are the members' in order. Its tensors are the members' concatenated along N
    (codes, scales, zero points, block scales, bias), never dequantized and quantized again, so the
    packed model computes with exactly the members' weights. state_dict() holds it under its own
    name (`...qkv_proj.qweight`), once.
  * parent.q_proj (k_proj, v_proj) becomes a PackedSlice with no tensors: calling it runs the packed
    layer on x the first time and returns its own columns (a view), and the other members called on
    the same x take their columns of that same result. The parent's forward is unchanged (HF calls
    q_proj(h), k_proj(h), v_proj(h) on one tensor h).
  * load_quantized reads checkpoints, which name the members, into the unpacked model only (it
    refuses a packed one): pack after loading.
  * quantize_ after fusing quantizes the packed nn.Linear as one layer. Every config's quantization is
    per output column or per block of 128 output features, so that equals quantizing the members one
    by one wherever each member's N is a multiple of 128 (Llama's are). Fusing quantized members
    checks this for the block-scaled formats and skips the group otherwise.

The shared result is kept only while a round is open: a member called on a different tensor, on
the same tensor changed in place (eager; not seen for inference tensors, which keep no version
counter, nor inside a compiled graph), or twice in one round recomputes the whole group; the last
member of a round drops it. Correctness never depends on the members being called together, only
the speed does. Threads calling one model at once each read the result of their own input.

Not packed (skipped, with the reason in the report and the log): members of different types or
formats, a member with an activation, bias on some members only, block-scaled members whose N is
not a multiple of 128, act-order members with different permutations, and tensor-parallel layers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch import nn

from .fpaintb import IntBWeight, wq_format
from .nn import Fp8Linear, QuantLinear, QuantModule, W8A8Linear
from .nn.linear import _set
from .w8a8 import WEIGHT_BLOCK_N as W8A8_BLOCK_N
from .fp8 import GROUP as FP8_BLOCK

log = logging.getLogger("qgemm.fuse")

# packed name -> member names, in output order (vLLM's packed_modules_mapping for Llama).
PACKED_MODULES = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


@dataclass
class FuseReport:
    fused: dict[str, tuple[str, ...]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


# --- the slices that stand where the members were ----------------------------------------------------

class _Round:
    """What the members of one packed layer share: the packed layer's owner (looked up by name on
    every call, so that quantize_ may replace the packed layer), its output split, and the open round."""

    def __init__(self, owner: nn.Module, name: str, sizes: tuple[int, ...]):
        self.owner, self.name, self.sizes = owner, name, sizes
        self.state = None  # (x, x._version or None, outputs, taken), replaced whole (threads read their own)

    def take(self, index: int, x: torch.Tensor) -> torch.Tensor:
        state = self.state
        # Inference tensors (torch.inference_mode) keep no version counter: there, as under
        # torch.compile, a round is keyed on the tensor alone.
        version = None if torch.compiler.is_compiling() or x.is_inference() else x._version
        if state is None or state[0] is not x or state[1] != version or state[3][index]:
            y = getattr(self.owner, self.name)(x)
            state = (x, version, y.split(self.sizes, dim=-1), [False] * len(self.sizes))
            self.state = state
        state[3][index] = True
        if all(state[3]):
            self.state = None
        return state[2][index]

    def __getstate__(self):
        return {**self.__dict__, "state": None}  # a copy starts with no open round


class PackedSlice(nn.Module):
    """One member of a packed layer (module docstring): y[..., start:start + out_features] of the
    packed layer's output on the same x, as a view."""

    def __init__(self, round_: _Round, index: int, in_features: int, out_features: int):
        super().__init__()
        self._round = round_  # a plain object: the packed layer stays the parent's child, saved once
        self.index, self.in_features, self.out_features = index, in_features, out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._round.take(self.index, x)

    def extra_repr(self) -> str:
        start = sum(self._round.sizes[:self.index])
        return f"{self._round.name}[..., {start}:{start + self.out_features}]"


# --- concatenating the members' tensors along N -------------------------------------------------------

def _same(members, what: str, get):
    values = [get(m) for m in members]
    if any(v != values[0] for v in values[1:]):
        raise ValueError(f"the members' {what} differ: {values}")
    return values[0]


def _cat_bias(members):
    biases = [m.bias for m in members]
    if all(b is None for b in biases):
        return None
    if any(b is None for b in biases):
        raise ValueError("bias on some members only")
    _same(members, "bias dtypes", lambda m: m.bias.dtype)
    return torch.cat([b.detach() for b in biases])


def _block_aligned(members, block: int):
    # Block scales cover 128 output rows: a member ending inside a block would share it with the next.
    sizes = [m.out_features for m in members[:-1]]
    if any(n % block for n in sizes):
        raise ValueError(f"block-scaled members must have out_features a multiple of {block} (but the last), got "
                         f"{[m.out_features for m in members]}")


def _pack_linear(members: list[nn.Linear]) -> nn.Linear:
    _same(members, "weight dtypes", lambda m: m.weight.dtype)
    bias = _cat_bias(members)
    w = members[0].weight
    packed = nn.Linear(members[0].in_features, sum(m.out_features for m in members), bias is not None,
                       device="meta", dtype=w.dtype)
    packed.weight = nn.Parameter(torch.cat([m.weight.detach() for m in members]), requires_grad=w.requires_grad)
    if bias is not None:
        packed.bias = nn.Parameter(bias, requires_grad=members[0].bias.requires_grad)
    return packed


def _pack_quant_linear(members: list[QuantLinear]) -> QuantLinear:
    bits = _same(members, "bits", lambda m: m.bits)
    group_size = _same(members, "group sizes", lambda m: m.group_size)
    _same(members, "scale dtypes", lambda m: m.scales.dtype)
    _same(members, "zero points", lambda m: m.qzeros is not None)
    _same(members, "act-order", lambda m: m.g_idx is not None)
    if members[0].g_idx is not None and not all(torch.equal(m.g_idx, members[0].g_idx) for m in members[1:]):
        raise ValueError("the members' act-order permutations (g_idx) differ")
    weights = [m.int_weight() for m in members]
    zero = None if weights[0].zero is None else torch.cat([w.zero for w in weights], dim=1)
    logical = wq_format.IntWeight(torch.cat([w.codes() for w in weights], dim=1),
                                  torch.cat([w.scale for w in weights], dim=1), zero, bits, group_size, weights[0].perm)
    return QuantLinear.from_weight(IntBWeight.from_int_weight(logical), _cat_bias(members),
                                   act_order=members[0].g_idx is not None)


def _pack_w8a8(members: list[W8A8Linear]) -> W8A8Linear:
    scheme = _same(members, "schemes", lambda m: m.scheme)
    block = _same(members, "block sizes", lambda m: m.block_size)
    out_dtype = _same(members, "out dtypes", lambda m: m.out_dtype)
    bias = _cat_bias(members)
    if scheme == "symmetric":
        _block_aligned(members, W8A8_BLOCK_N)
    packed = W8A8Linear(members[0].in_features, sum(m.out_features for m in members), bias is not None,
                        block_size=block, scheme=scheme, out_dtype=out_dtype, device="meta")
    _set(packed, "weight", torch.cat([m.weight for m in members]))
    if scheme == "symmetric":
        _set(packed, "weight_scale_inv", torch.cat([m.weight_scale_inv for m in members]))
    else:  # [K / block, N]
        _set(packed, "weight_scale", torch.cat([m.weight_scale for m in members], dim=1))
        _set(packed, "weight_offset", torch.cat([m.weight_offset for m in members], dim=1))
    _set(packed, "bias", None if bias is None else bias.float())
    return packed


def _pack_fp8(members: list[Fp8Linear]) -> Fp8Linear:
    weight_dtype = _same(members, "weight dtypes", lambda m: m.weight.dtype)
    out_dtype = _same(members, "out dtypes", lambda m: m.out_dtype)
    bias = _cat_bias(members)
    _block_aligned(members, FP8_BLOCK)
    packed = Fp8Linear(members[0].in_features, sum(m.out_features for m in members), bias is not None,
                       out_dtype=out_dtype, weight_dtype=weight_dtype, device="meta")
    _set(packed, "weight", torch.cat([m.weight for m in members]))
    _set(packed, "weight_scale_inv", torch.cat([m.weight_scale_inv for m in members]))
    _set(packed, "bias", None if bias is None else bias.float())
    return packed


_PACKERS = {nn.Linear: _pack_linear, QuantLinear: _pack_quant_linear, W8A8Linear: _pack_w8a8, Fp8Linear: _pack_fp8}


def pack_linears(members: list[nn.Module]) -> nn.Module:
    """One layer whose output is the members' outputs concatenated (ValueError where they cannot be)."""
    kinds = {type(m) for m in members}
    if len(kinds) != 1 or next(iter(kinds)) not in _PACKERS:
        raise ValueError(f"members must all be one of {[k.__name__ for k in _PACKERS]}, got "
                         f"{[type(m).__name__ for m in members]}")
    _same(members, "in_features", lambda m: m.in_features)
    _same(members, "devices", lambda m: m.weight.device if isinstance(m, nn.Linear) else m.device)
    if isinstance(members[0], QuantModule):
        if any(getattr(m, "activation", "none") != "none" for m in members):
            raise ValueError("a member has a fused activation")
        act_dtype = _same(members, "activation dtypes", lambda m: m.act_dtype)
    with torch.no_grad():
        packed = _PACKERS[type(members[0])](members)
    if isinstance(packed, QuantModule):
        packed.act_dtype = act_dtype
    return packed


# --- fuse_projections_ ------------------------------------------------------------------------------

def fuse_projections_(model: nn.Module, packed_modules: dict | None = None) -> FuseReport:
    """Pack, in place, every group of sibling linears named in packed_modules (default PACKED_MODULES)
    into one layer (module docstring). Returns what was packed and what was skipped, and why."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    groups = PACKED_MODULES if packed_modules is None else packed_modules
    if not isinstance(groups, dict) or not all(isinstance(k, str) and isinstance(v, (tuple, list)) and len(v) >= 2
                                               and all(isinstance(n, str) for n in v) for k, v in groups.items()):
        raise TypeError(f"packed_modules must map a packed name to two or more member names, got {groups!r}")
    report = FuseReport()
    for parent_name, parent in list(model.named_modules()):
        for packed_name, member_names in groups.items():
            children = parent._modules
            if not all(children.get(n) is not None for n in member_names):
                continue
            full = f"{parent_name}.{packed_name}" if parent_name else packed_name
            members = [children[n] for n in member_names]
            try:
                if hasattr(parent, packed_name):
                    raise ValueError(f"{type(parent).__name__} already has an attribute {packed_name!r}")
                if any(isinstance(m, PackedSlice) for m in members):
                    raise ValueError("already packed")
                packed = pack_linears(members)
            except ValueError as e:
                report.skipped[full] = str(e)
                log.warning("fuse_projections_: %s not packed: %s", full, e)
                continue
            round_ = _Round(parent, packed_name, tuple(m.out_features for m in members))
            setattr(parent, packed_name, packed)
            for i, (name, m) in enumerate(zip(member_names, members)):
                setattr(parent, name, PackedSlice(round_, i, m.in_features, m.out_features))
            report.fused[full] = tuple(member_names)
    log.info("fuse_projections_: %d layers packed, %d skipped", len(report.fused), len(report.skipped))
    return report


def refuse_packed(model: nn.Module, why: str):
    """ValueError, saying `why`, where `model` has packed projections: for the entry points that
    take unpacked models only (tensor parallelism, load_quantized)."""
    packed = [name for name, m in model.named_modules() if isinstance(m, PackedSlice)]
    if packed:
        raise ValueError(f"model has packed projections ({packed[0]}, ...; qgemm.fuse_projections_): {why}")
