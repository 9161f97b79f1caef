"""Tensor-parallel qgemm layers under torch.distributed (issue 20), as vLLM / Megatron split a Llama:

    column-parallel (q/k/v_proj, gate/up_proj): each rank holds a slice of the output features N and
                    returns its slice of y; no communication.
    row-parallel    (o_proj, down_proj): each rank holds a slice of the input features K, takes its
                    slice of x (what the column-parallel layer before it returned) and computes a
                    partial y over all N; the partials are summed with torch.distributed.all_reduce
                    (NCCL on GPUs); rank 0's kernel adds the bias (once), the activation follows
                    the sum.

Shards are cut from the layer's own quantized tensors (codes, scales, zero points, block scales),
never by dequantizing and quantizing again, so a TP model computes with exactly the weights of the
TP=1 model (tests/test_tp_cpu.py checks the dequantized shards bit for bit):

  QuantLinear (GPTQ/AWQ/RTN/compressed-tensors, packed for the FpA x IntB kernels)
    column  N split; the packed rows are sliced directly where the split falls on the column
            interleave and the shard is a multiple of 8 columns, otherwise the codes are unpacked,
            sliced, padded with zero-weight columns to the kernel's 8 and packed again. g_idx
            (act-order) is kept whole: every rank reads all of K in the same order.
    row     K split; the packed columns and the scale rows are sliced directly where the split
            falls on group and 64-row tile boundaries and there is no act-order permutation.
            Otherwise (act-order, or a group cut by the split) the rank's rows keep their group in
            the FULL scales tensor, as vLLM does (its per-rank g_idx indexes the unsharded scales):
            qgemm's kernels read group = stored row // group_size, so the rank's rows are sorted by
            group and each group's run is padded with zero-weight rows to a multiple of a kernel
            group size g' (32..256, chosen for the fewest bytes), the scales of each kernel group
            gathered from the full tensor. The padded rows read an appended exact-zero column of x
            (the module gathers x through `src`), so they add exactly nothing, NaN/Inf in x included.
            A kernel group of 32 rows (what the padding usually picks) keeps large M off the Sm90
            kernel (its K tiles are 64 deep). An act-order down_proj whose gate/up follow it is
            instead dealt out in whole groups (plan_features): no padding at all.
  Fp8Linear (128 x 128 blocks), W8A8Linear symmetric (128 x block_size blocks)
    column  N split; a shard that does not start on a 128-row block or is not a multiple of 8 rows
            is padded with zero rows in front (so that its rows keep their block) and behind, and
            the output is narrowed back.
    row     K split on scale-block boundaries only: the activations are quantized per block on
            each rank, so a block cut in two would be quantized differently from TP=1; ValueError.
  W8A8Linear asymmetric (scale, offset per (K-block, column))
    column  N split, padded behind to the kernel's alignment; row as above.
  nn.Linear (layers a config skipped): sliced, so that the model stays consistent.

A shard that padding cannot fix raises ValueError naming the layer, the TP size and the constraint.
Everything the forward does is CUDA-graph safe: no host synchronisation, allocations of fixed size
per input shape, all_reduce in place on the stream (NCCL collectives are captured by CUDA graphs).

Model level: qgemm.quantize_(model, config, process_group=pg) and qgemm.load_quantized(model, path,
process_group=pg) shard as they build, by name pattern (DEFAULT_TP_PLAN, overridable with tp_plan=).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cutlass_gen.families.fpaintb_layout import layout as fpaintb_layout

from .fpaintb import wq_format
from .fuse import refuse_packed
from .fp8 import GROUP as FP8_BLOCK, N_ALIGNMENT as FP8_N_ALIGNMENT
from .fpaintb import GROUP_SIZES as FPAINTB_GROUP_SIZES, IntBWeight
from .nn import Fp8Linear, QuantLinear, W8A8Linear
from .w8a8 import N_ALIGNMENT as W8A8_N_ALIGNMENT, WEIGHT_BLOCK_N as W8A8_BLOCK_N

COLUMN, ROW = "column", "row"
TP_REFUSES_PACKED = "tensor parallelism takes the unpacked model; fuse only without a process_group"
STYLES = (COLUMN, ROW)

# Llama / Mistral / Qwen2 names (what transformers' base_model_tp_plan calls colwise / rowwise).
DEFAULT_TP_PLAN = {
    r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)$": COLUMN,
    r"(^|\.)(o_proj|down_proj)$": ROW,
}

_ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}


# --- the process group ------------------------------------------------------------------------------

@dataclass(frozen=True)
class TPGroup:
    """Where this rank sits: rank, world_size, and the torch.distributed group that reduces (None
    when sharding offline, e.g. to write pre-sharded checkpoints or to test the arithmetic)."""

    rank: int
    world_size: int
    group: object = None

    def __post_init__(self):
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {self.world_size!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be an int in [0, {self.world_size}), got {self.rank!r}")


def tp_group(process_group) -> TPGroup:
    """A TPGroup from a torch.distributed ProcessGroup (dist.group.WORLD for the default group), a
    TPGroup, or a (rank, world_size) pair (offline sharding: no reduction)."""
    if isinstance(process_group, TPGroup):
        return process_group
    if isinstance(process_group, tuple) and len(process_group) == 2:
        return TPGroup(*process_group)
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("process_group: torch.distributed is not initialized (call init_process_group first), "
                         "or pass (rank, world_size) to shard without a group")
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(f"process_group must be a torch.distributed.ProcessGroup, a qgemm.tp.TPGroup or a "
                        f"(rank, world_size) tuple, got {type(process_group).__name__}")
    return TPGroup(dist.get_rank(process_group), dist.get_world_size(process_group), process_group)


def style_for(name: str, plan: dict | None = None) -> str | None:
    """The TP style of the layer called `name` under `plan` ({regex: "column" | "row"}, searched in
    order; default DEFAULT_TP_PLAN), or None (replicated)."""
    for pattern, style in (DEFAULT_TP_PLAN if plan is None else plan).items():
        if re.search(pattern, name):
            if style not in STYLES:
                raise ValueError(f"tp_plan[{pattern!r}] must be one of {STYLES}, got {style!r}")
            return style
    return None


# --- split arithmetic --------------------------------------------------------------------------------

def _error(name: str, world: int, constraint: str) -> ValueError:
    return ValueError(f"layer {name or '<unnamed>'!r}, tensor-parallel size {world}: {constraint}")


def _even_split(size: int, tp: TPGroup, name: str, what: str) -> tuple[int, int]:
    if size % tp.world_size:
        raise _error(name, tp.world_size, f"{what}={size} must divide evenly among the {tp.world_size} ranks")
    part = size // tp.world_size
    return tp.rank * part, (tp.rank + 1) * part


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass
class Shard:
    """One rank's part of a layer: `local` computes it; `out_offset`/`out_features` narrow a padded
    column shard's output; `src` (row shards) gathers x's columns, index in_features meaning an
    exact zero; `activation` (row shards at TP > 1) is applied after the reduction."""

    local: nn.Module
    style: str
    in_features: int            # the full layer's
    out_features: int
    local_in: int               # of x this rank takes / y this rank returns (before padding)
    local_out: int
    out_offset: int | None = None
    src: torch.Tensor | None = None
    has_bias: bool = False      # row shards: the layer has a bias (in rank 0's local module)
    activation: str = "none"


# --- QuantLinear --------------------------------------------------------------------------------------

def _quant_linear(packed, scale, zero, bits, group_size, k, n, perm=None, bias=None, activation="none",
                  act_order=None) -> QuantLinear:
    return QuantLinear.from_weight(IntBWeight(packed.contiguous(), scale.contiguous(),
                                              None if zero is None else zero.contiguous(), bits, group_size, k, n,
                                              perm),
                                   bias, activation, act_order=act_order)


def _pack(u: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes [K, N] -> the FpA x IntB packed layout (through the public IntBWeight packer)."""
    k = u.shape[0]
    dummy = torch.zeros(1, u.shape[1], dtype=torch.float16, device=u.device)
    return IntBWeight.from_int_weight(wq_format.IntWeight(u.contiguous(), dummy, None, bits, k)).packed


def _row_epilogue(m, tp: TPGroup):
    """(bias, activation) of a row shard's own kernel: rank 0 adds the bias in its epilogue (once,
    as vLLM does: the sum then holds it once, and no separate add is launched); the activation is
    fused only at TP size 1 (it must follow the sum, so RowParallelLinear applies it after the
    all-reduce)."""
    bias = m.bias if tp.rank == 0 else None
    return bias, getattr(m, "activation", "none") if tp.world_size == 1 else "none"


def _row_shard(local, m, tp: TPGroup, k: int, n: int, ks: int, src=None) -> Shard:
    activation = getattr(m, "activation", "none") if tp.world_size > 1 else "none"
    return Shard(local, ROW, k, n, ks, n, src=src, has_bias=m.bias is not None, activation=activation)


def _shard_quant_linear(m: QuantLinear, style: str, tp: TPGroup, name: str, features=None) -> Shard:
    lay = fpaintb_layout(m.bits)
    k, n, g, bits = m.in_features, m.out_features, m.group_size, m.bits
    perm = m._perm()
    act_order = m.g_idx is not None
    if style == COLUMN:
        n0, n1 = _even_split(n, tp, name, "out_features (N)")
        ns = n1 - n0
        if features is None and n0 % lay.interleave == 0 and ns % lay.n_alignment == 0:
            # Packed row i holds columns [i * interleave, (i + 1) * interleave): slice the rows.
            il = lay.interleave
            local = _quant_linear(m.qweight[n0 // il:n1 // il], m.scales[:, n0:n1],
                                  None if m.qzeros is None else m.qzeros[:, n0:n1], bits, g, k, ns, perm,
                                  None if m.bias is None else m.bias[n0:n1], m.activation, act_order)
            return Shard(local, COLUMN, k, n, k, ns)
        # Columns not on the interleave, not 8 of them, or chosen (features): unpack, gather, pad
        # with zero-weight columns (codes at the zero point, scale 0), pack again; the output is
        # narrowed back to ns.
        cols = torch.arange(n0, n1, device=m.qweight.device) if features is None else features.to(m.qweight.device)
        pad = _round_up(ns, lay.n_alignment) - ns
        u = m.int_weight().codes().index_select(1, cols)
        zero_code = 2 ** (bits - 1) if m.qzeros is None else 0
        u = torch.cat([u, torch.full((k, pad), zero_code, dtype=torch.uint8, device=u.device)], dim=1)
        scales = F.pad(m.scales.index_select(1, cols), (0, pad))
        zeros = None if m.qzeros is None else F.pad(m.qzeros.index_select(1, cols), (0, pad))
        bias = None if m.bias is None else F.pad(m.bias.index_select(0, cols), (0, pad))
        local = _quant_linear(_pack(u, bits), scales, zeros, bits, g, k, ns + pad, perm, bias, m.activation, act_order)
        return Shard(local, COLUMN, k, n, k, ns, out_offset=0 if pad else None)

    k0, k1 = _even_split(k, tp, name, "in_features (K)")
    ks = k1 - k0
    per_channel = g == k
    per_k = lay.interleave * bits // 8  # K runs along each packed row in 64-row tiles of interleave*64*bits/8 bytes
    bias, act = _row_epilogue(m, tp)
    if features is None and perm is None and k0 % lay.tile_rows == 0 and ks % lay.k_alignment == 0 and \
            (per_channel or (k0 % g == 0 and ks % g == 0)):
        scales = m.scales if per_channel else m.scales[k0 // g:k1 // g]
        zeros = m.qzeros if per_channel or m.qzeros is None else m.qzeros[k0 // g:k1 // g]
        local = _quant_linear(m.qweight[:, k0 * per_k:k1 * per_k], scales, zeros, bits, ks if per_channel else g,
                              ks, n, bias=bias, activation=act)
        return _row_shard(local, m, tp, k, n, ks)
    if features is not None and perm is not None and _whole_groups(m, tp) and torch.equal(features.cpu(),
                                                                                      perm[k0:k1].cpu()):
        # Act-order with this rank's inputs chosen as stored rows [k0, k1) (plan_features): whole
        # groups in order, so a slice of the packed stored rows and of the scales; x_local arrives in
        # that order (the column layers before it produce those features), so no permutation is left.
        zeros = None if m.qzeros is None else m.qzeros[k0 // g:k1 // g]
        local = _quant_linear(m.qweight[:, k0 * per_k:k1 * per_k], m.scales[k0 // g:k1 // g], zeros, bits, g, ks, n,
                              bias=bias, activation=act)
        return _row_shard(local, m, tp, k, n, ks)
    # Act-order or a group cut by the split: the rank's rows, in the order x_local has them, with
    # their groups in the full scales.
    codes = m.int_weight().codes()
    u = codes if perm is None else torch.empty_like(codes).index_copy_(0, perm, codes)
    g_idx = m.g_idx.long() if m.g_idx is not None else torch.arange(k, device=codes.device) // g
    rows = torch.arange(k0, k1, device=codes.device) if features is None else features.to(codes.device)
    local, src = regroup_rows(u.index_select(0, rows), g_idx.index_select(0, rows), m.scales, m.qzeros, bits,
                              name=name, world_size=tp.world_size, bias=bias, activation=act)
    return _row_shard(local, m, tp, k, n, ks, src)


def _whole_groups(m: QuantLinear, tp: TPGroup) -> bool:
    """Whether K / tp rows are whole groups and whole 64-row tiles (so stored rows slice cleanly)."""
    lay = fpaintb_layout(m.bits)
    k, g = m.in_features, m.group_size
    if k % tp.world_size or g == k:
        return False
    ks = k // tp.world_size
    return ks % g == 0 and ks % lay.k_alignment == 0 and ks % lay.tile_rows == 0


def _kernel_group(counts: torch.Tensor, bits: int, zero: bool) -> tuple[int, int]:
    """The kernel group size g' for runs of `counts` rows per group, and the padded K: the fewest
    bytes read per output column (codes bits/8 per row, scale (and zero) per g' rows)."""
    best = None
    for gk in FPAINTB_GROUP_SIZES:
        rows = int((torch.div(counts + gk - 1, gk, rounding_mode="floor") * gk).sum())
        rows = _round_up(max(rows, 1), max(gk, 64))  # whole kernel groups and 64-row tiles
        cost = rows * (bits / 8 + (2 + zero) / gk)
        if best is None or cost < best[0]:
            best = (cost, gk, rows)
    return best[1], best[2]


def regroup_rows(u: torch.Tensor, g_idx: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int,
                 name: str = "", world_size: int = 1, bias: torch.Tensor | None = None,
                 activation: str = "none") -> tuple[QuantLinear, torch.Tensor]:
    """A row shard whose rows do not form whole groups in order (act-order, or a group cut by the
    split) as a QuantLinear the kernels take, plus the gather `src` of its input.

    u       uint8 [Ks, N]: the rank's codes in input order (its slice of x's columns)
    g_idx   int [Ks]: each row's group in the FULL scales tensor (vLLM's per-rank g_idx)
    scales  [G, N], zeros uint8 [G, N] or None: the full, unsharded tensors
    Returns (module over K' >= Ks rows, src int64 [K']): stored row r reads x column src[r], Ks
    meaning an appended zero column (padding rows, whose codes sit at the zero point: weight 0).
    """
    ks, n = u.shape
    groups = scales.shape[0]
    if g_idx.shape != (ks,):
        raise ValueError(f"g_idx must have shape ({ks},) (one group per row of u), got {tuple(g_idx.shape)}")
    g_idx = g_idx.long()
    if ks and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
        raise ValueError(f"g_idx values must lie in [0, {groups}) (the groups of the full scales), got "
                         f"[{int(g_idx.min())}, {int(g_idx.max())}]")
    if n % 8:
        raise _error(name, world_size, f"out_features={n} must be a multiple of 8 for the FpA x IntB kernels")
    counts = torch.bincount(g_idx, minlength=groups)
    gk, rows = _kernel_group(counts, bits, zeros is not None)
    padded = torch.div(counts + gk - 1, gk, rounding_mode="floor") * gk           # rows per group, padded
    order = torch.argsort(g_idx, stable=True)                                     # rows by group
    sorted_g = g_idx[order]
    first = torch.cumsum(counts, 0) - counts                                      # of each group, unpadded
    start = torch.cumsum(padded, 0) - padded                                      # of each group, padded
    dest = start[sorted_g] + torch.arange(ks, device=u.device) - first[sorted_g]
    # Kernel group q reads full group kgroup[q]; the tail groups (padding to 64-row tiles) read group 0.
    kgroup = torch.repeat_interleave(torch.arange(groups, device=u.device), torch.div(padded, gk, rounding_mode="floor"))
    kgroup = torch.cat([kgroup, kgroup.new_zeros(rows // gk - kgroup.numel())])
    scales_k = scales[kgroup]
    zeros_k = None if zeros is None else zeros[kgroup]
    zero_rows = (torch.full((rows // gk, n), 2 ** (bits - 1), dtype=torch.uint8, device=u.device)
                 if zeros_k is None else zeros_k).repeat_interleave(gk, dim=0)
    u_k = zero_rows.clone()
    u_k[dest] = u[order]
    src = torch.full((rows,), ks, dtype=torch.int64, device=u.device)
    src[dest] = order
    return _quant_linear(_pack(u_k, bits), scales_k, zeros_k, bits, gk, rows, n, bias=bias, activation=activation), src


def gptq_row_shard(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor,
                   bits: int = 4, zero_offset: int = 1, name: str = "") -> tuple[QuantLinear, torch.Tensor]:
    """A pre-sharded GPTQ row-parallel shard, vLLM's form: qweight int32 [Ks * bits / 32, N] (this
    rank's rows), g_idx [Ks] (this rank's, indexing the full scales), and the FULL qzeros
    [G, N * bits / 32] and scales [G, N]. Returns (local module, src) as regroup_rows."""
    per_word = 32 // bits
    if qweight.dtype != torch.int32 or qweight.dim() != 2:
        raise TypeError(f"qweight must be a 2-D int32 tensor, got {qweight.dtype} {tuple(qweight.shape)}")
    ks, n = qweight.shape[0] * per_word, qweight.shape[1]
    if qzeros.shape != (scales.shape[0], n // per_word) or scales.shape[1] != n:
        raise ValueError(f"qzeros [G, N * {bits} / 32] and scales [G, N] must be the full tensors with N={n}, got "
                         f"{tuple(qzeros.shape)} and {tuple(scales.shape)}")
    # GPTQ's word layouts (qgemm.wq_format.from_gptq): qweight packed along K, qzeros along N.
    u = wq_format._unpack_words(qweight.t(), bits).reshape(n, ks).t().to(torch.uint8)
    zero = (wq_format._unpack_words(qzeros, bits).reshape(scales.shape[0], n) + zero_offset).to(torch.uint8)
    return regroup_rows(u, g_idx, scales, zero, bits, name=name)


# --- Fp8Linear / W8A8Linear ----------------------------------------------------------------------------

def _pad_rows_blockwise(weight, scale_rows, n0, n1, block, align):
    """Rows [n0, n1) of a weight [N, K] with one scale row per `block` rows: (weight', scale', front),
    weight' zero-padded in front by n0 % block rows (so every row keeps its block) and behind to
    `align`; scale' the blocks it covers (block scales past the end: 1)."""
    front = n0 % block
    rows = _round_up(front + n1 - n0, align)
    w = torch.zeros(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
    w[front:front + n1 - n0] = weight[n0:n1]
    b0, nb = n0 // block, -(-rows // block)
    s = torch.ones(nb, scale_rows.shape[1], dtype=scale_rows.dtype, device=scale_rows.device)
    have = min(nb, scale_rows.shape[0] - b0)
    s[:have] = scale_rows[b0:b0 + have]
    return w, s, front


def _column_blockwise(weight, scale_rows, bias, n0, n1, block, align):
    """A column shard of a weight [N, K] with one scale row per `block` rows (FP8, symmetric
    block-INT8), and of its bias: rows [n0, n1) sliced where n0 starts a block and the shard is a
    multiple of `align`, else padded (_pad_rows_blockwise). (weight, scale, bias, out_offset), the
    offset None where nothing was padded."""
    ns = n1 - n0
    bias = None if bias is None else bias[n0:n1]
    if n0 % block == 0 and ns % align == 0:
        return weight[n0:n1], scale_rows[n0 // block:-(-n1 // block)], bias, None
    w, s, front = _pad_rows_blockwise(weight, scale_rows, n0, n1, block, align)
    bias = None if bias is None else F.pad(bias, (front, w.shape[0] - front - ns))
    return w, s, bias, front


def _shard_fp8(m: Fp8Linear, style: str, tp: TPGroup, name: str) -> Shard:
    k, n = m.in_features, m.out_features

    def build(weight, scale, bias):
        local = Fp8Linear(weight.shape[1], weight.shape[0], bias is not None, out_dtype=m.out_dtype,
                          weight_dtype=weight.dtype, device="meta")
        _assign(local, weight=weight, weight_scale_inv=scale, bias=bias)
        local.act_dtype = m.act_dtype
        return local

    if style == COLUMN:
        n0, n1 = _even_split(n, tp, name, "out_features (N)")
        w, s, bias, front = _column_blockwise(m.weight, m.weight_scale_inv, m.bias, n0, n1, FP8_BLOCK,
                                              FP8_N_ALIGNMENT)
        return Shard(build(w, s, bias), COLUMN, k, n, k, n1 - n0, out_offset=front)
    k0, k1 = _split_k_blocks(k, FP8_BLOCK, tp, name, "the FP8 scale block and activation group")
    local = build(m.weight[:, k0:k1], m.weight_scale_inv[:, k0 // FP8_BLOCK:k1 // FP8_BLOCK], _row_epilogue(m, tp)[0])
    return _row_shard(local, m, tp, k, n, k1 - k0)


def _split_k_blocks(k, block, tp, name, what):
    k0, k1 = _even_split(k, tp, name, "in_features (K)")
    if (k1 - k0) % block:
        raise _error(name, tp.world_size, f"the K shard in_features/{tp.world_size}={k1 - k0} must be a multiple "
                     f"of {block} ({what}): a block cut between ranks would quantize the activations differently "
                     f"from the unsharded layer; use a TP size that divides in_features/{block}="
                     f"{k // block}")
    return k0, k1


def _shard_w8a8(m: W8A8Linear, style: str, tp: TPGroup, name: str) -> Shard:
    k, n, bs = m.in_features, m.out_features, m.block_size
    sym = m.scheme == "symmetric"

    def build(weight, bias, activation=m.activation, **scales):
        local = W8A8Linear(weight.shape[1], weight.shape[0], bias is not None, block_size=bs, scheme=m.scheme,
                           activation=activation, out_dtype=m.out_dtype, device="meta")
        _assign(local, weight=weight, bias=bias, **scales)
        local.act_dtype = m.act_dtype
        return local

    if style == COLUMN:
        n0, n1 = _even_split(n, tp, name, "out_features (N)")
        ns = n1 - n0
        if sym:
            w, s, bias, front = _column_blockwise(m.weight, m.weight_scale_inv, m.bias, n0, n1, W8A8_BLOCK_N, 8)
            return Shard(build(w, bias, weight_scale_inv=s), COLUMN, k, n, k, ns, out_offset=front)
        bias = None if m.bias is None else m.bias[n0:n1]
        pad = _round_up(ns, W8A8_N_ALIGNMENT) - ns
        # Padded columns: weight 0, scale 0, offset 0, so w = 0 exactly.
        w = F.pad(m.weight[n0:n1], (0, 0, 0, pad))
        local = build(w, None if bias is None else F.pad(bias, (0, pad)),
                      weight_scale=F.pad(m.weight_scale[:, n0:n1], (0, pad)),
                      weight_offset=F.pad(m.weight_offset[:, n0:n1], (0, pad)))
        return Shard(local, COLUMN, k, n, k, ns, out_offset=0 if pad else None)
    k0, k1 = _split_k_blocks(k, bs, tp, name, "the W8A8 block_size, also the activation block")
    b0, b1 = k0 // bs, k1 // bs
    bias, act = _row_epilogue(m, tp)
    if sym:
        local = build(m.weight[:, k0:k1], bias, act, weight_scale_inv=m.weight_scale_inv[:, b0:b1])
    else:
        local = build(m.weight[:, k0:k1], bias, act, weight_scale=m.weight_scale[b0:b1],
                      weight_offset=m.weight_offset[b0:b1])
    return _row_shard(local, m, tp, k, n, k1 - k0)


def _shard_float(m: nn.Linear, style: str, tp: TPGroup, name: str, features=None) -> Shard:
    k, n = m.in_features, m.out_features
    w = m.weight.detach()
    if style == COLUMN:
        n0, n1 = _even_split(n, tp, name, "out_features (N)")
        cols = torch.arange(n0, n1, device=w.device) if features is None else features.to(w.device)
        local = nn.Linear(k, n1 - n0, m.bias is not None, device="meta")
        local.weight = nn.Parameter(w.index_select(0, cols), requires_grad=m.weight.requires_grad)
        if m.bias is not None:
            local.bias = nn.Parameter(m.bias.detach().index_select(0, cols), requires_grad=m.bias.requires_grad)
        return Shard(local, COLUMN, k, n, k, n1 - n0)
    k0, k1 = _even_split(k, tp, name, "in_features (K)")
    rows = torch.arange(k0, k1, device=w.device) if features is None else features.to(w.device)
    bias = _row_epilogue(m, tp)[0]
    local = nn.Linear(k1 - k0, n, bias is not None, device="meta")
    local.weight = nn.Parameter(w.index_select(1, rows), requires_grad=m.weight.requires_grad)
    if bias is not None:
        local.bias = nn.Parameter(bias.detach().clone(), requires_grad=m.bias.requires_grad)
    return _row_shard(local, m, tp, k, n, k1 - k0)


def _assign(module, **buffers):
    for key, value in buffers.items():
        module._buffers[key] = None if value is None else value.detach().contiguous()


def shard(module: nn.Module, style: str, process_group, name: str = "", features: torch.Tensor | None = None
          ) -> nn.Module:
    """This rank's ColumnParallelLinear / RowParallelLinear of a full layer (QuantLinear, Fp8Linear,
    W8A8Linear or nn.Linear), cut from its quantized tensors (module docstring).

    features (QuantLinear and nn.Linear only; plan_features makes them): the feature indices this
    rank takes instead of the contiguous range, output columns (column) or input features in the
    order x_local has them (row)."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    tp = tp_group(process_group)
    if features is not None:
        size = module.out_features if style == COLUMN else module.in_features
        if not isinstance(module, (QuantLinear, nn.Linear)):
            raise TypeError(f"layer {name!r}: features= takes QuantLinear or nn.Linear, got {type(module).__name__}")
        if size % tp.world_size or tuple(features.shape) != (size // tp.world_size,):
            raise ValueError(f"layer {name!r}: features must hold {size} / {tp.world_size} indices, got shape "
                             f"{tuple(features.shape)}")
    if isinstance(module, QuantLinear):
        part = _shard_quant_linear(module, style, tp, name, features)
    elif isinstance(module, Fp8Linear):
        part = _shard_fp8(module, style, tp, name)
    elif isinstance(module, W8A8Linear):
        part = _shard_w8a8(module, style, tp, name)
    elif isinstance(module, nn.Linear):
        part = _shard_float(module, style, tp, name, features)
    else:
        raise TypeError(f"layer {name!r}: only QuantLinear, Fp8Linear, W8A8Linear and nn.Linear shard, got "
                        f"{type(module).__name__}")
    cls = ColumnParallelLinear if style == COLUMN else RowParallelLinear
    module = cls(part, tp, name)
    module.features = features
    return module


# An MLP's intermediate features may be numbered in any order as long as gate, up and down agree. An
# act-order down_proj can then be dealt out whole groups per rank: rank r takes the features of its
# stored rows [r K/tp, (r+1) K/tp) (input features sorted by group), and gate/up produce exactly those
# columns, in that order. No padding, no gather of x, no permutation left (regroup_rows would pad
# each group's run: +25% weight bytes at TP=2, x2 at TP=8 for K=14336, g=128).
PERMUTABLE_INPUTS = {"down_proj": ("gate_proj", "up_proj")}


def plan_features(modules: dict, process_group, tp_plan: dict | None = None) -> dict:
    """{layer name: this rank's feature indices} for the act-order row layers (PERMUTABLE_INPUTS)
    whose feeding column layers are all in `modules` and can take chosen columns; {} otherwise."""
    tp = tp_group(process_group)
    out = {}
    if tp.world_size == 1:
        return out
    for name, module in modules.items():
        prefix, _, leaf = name.rpartition(".")
        if leaf not in PERMUTABLE_INPUTS or style_for(name, tp_plan) != ROW or not isinstance(module, QuantLinear):
            continue
        perm = module._perm()
        if perm is None or not _whole_groups(module, tp):
            continue
        feeders = [f"{prefix}.{s}" if prefix else s for s in PERMUTABLE_INPUTS[leaf]]
        if not all(f in modules and style_for(f, tp_plan) == COLUMN and isinstance(modules[f], (QuantLinear, nn.Linear))
                   and modules[f].out_features == module.in_features for f in feeders):
            continue
        ks = module.in_features // tp.world_size
        features = perm[tp.rank * ks:(tp.rank + 1) * ks].clone()
        for f in (name, *feeders):
            out[f] = features
    return out


def shard_layers(modules: dict, process_group, tp_plan: dict | None = None) -> dict:
    """{name: module} -> the same with each layer the plan names replaced by this rank's shard
    (feature orders from plan_features)."""
    features = plan_features(modules, process_group, tp_plan)
    out = {}
    for name, module in modules.items():
        style = style_for(name, tp_plan)
        out[name] = module if style is None else shard(module, style, process_group, name, features.get(name))
    return out


def from_shard(local: nn.Module, style: str, process_group, in_features: int, out_features: int, *,
               has_bias: bool | None = None, activation: str = "none", src: torch.Tensor | None = None,
               out_offset: int | None = None, local_out: int | None = None, name: str = "") -> nn.Module:
    """Wrap a module already built from pre-sharded tensors (this rank's slice). Row shards: only
    rank 0's module holds the bias (has_bias tells the other ranks the layer has one), the
    activation is given here (applied after the reduction; the local modules have none), and `src`
    where the shard came from regroup_rows / gptq_row_shard."""
    tp = tp_group(process_group)
    if style == COLUMN:
        n_local = local.out_features if local_out is None else local_out
        part = Shard(local, COLUMN, in_features, out_features, in_features, n_local, out_offset=out_offset)
        return ColumnParallelLinear(part, tp, name)
    if style != ROW:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    k_local = local.in_features if src is None else in_features // tp.world_size
    if has_bias is None:
        has_bias = local.bias is not None
    part = Shard(local, ROW, in_features, out_features, k_local, out_features, src=src, has_bias=has_bias,
                 activation=activation)
    return RowParallelLinear(part, tp, name)


# --- the modules -----------------------------------------------------------------------------------------

class _ParallelLinear(nn.Module):
    """What both parallel modules share: the local module, the full and local sizes, the rank, and
    `features` (None: the contiguous range of the rank; else the feature indices plan_features
    chose, the same for an MLP's gate, up and down)."""

    def __init__(self, part: Shard, tp: TPGroup, name: str):
        super().__init__()
        self.features = None
        self.local = part.local
        self.in_features, self.out_features = part.in_features, part.out_features
        self.local_in_features, self.local_out_features = part.local_in, part.local_out
        self.rank, self.world_size, self.layer_name = tp.rank, tp.world_size, name
        self.process_group = tp.group

    def effective_weight(self) -> torch.Tensor:
        """float64 [local_in_features, local_out_features]: x_local @ this is what this rank
        computes (before any reduction), padding undone. Concatenated over ranks (column: along N,
        row: along K) it is the unsharded layer's dequantized weight, bit for bit (in the order of
        the ranks' `features` where plan_features chose them)."""
        local = self.local
        if isinstance(local, QuantLinear):
            w = local.dequantize()                                       # [K', N']
        elif isinstance(local, (Fp8Linear, W8A8Linear)):
            w = local.dequantize().t()
        else:
            w = local.weight.detach().double().t()
        src = getattr(self, "src", None)
        if src is not None:
            full = torch.zeros(self.local_in_features + 1, w.shape[1], dtype=w.dtype, device=w.device)
            w = full.index_add_(0, src.to(w.device), w)[:-1]
        offset = getattr(self, "out_offset", None)
        if offset is not None:
            w = w[:, offset:offset + self.local_out_features]
        return w


class ColumnParallelLinear(_ParallelLinear):
    """This rank's output features [rank * N / tp, (rank + 1) * N / tp) of a linear layer: takes
    the full x [..., K], returns its slice of y [..., N / tp] (no communication)."""

    def __init__(self, part: Shard, tp: TPGroup, name: str = ""):
        super().__init__(part, tp, name)
        self.out_offset = part.out_offset  # a padded shard's output is narrowed to [offset, offset + N/tp)
        self.has_bias = self.local.bias is not None

    @property
    def bias(self):
        return self.local.bias

    def forward(self, x):
        y = self.local(x)
        if self.out_offset is not None:
            # Padded shard: a contiguous copy of the real columns (attention reshapes with .view).
            y = y.narrow(-1, self.out_offset, self.local_out_features).contiguous()
        return y

    def extra_repr(self) -> str:
        return (f"{self.layer_name!r}, N {self.out_features} -> {self.local_out_features} on rank "
                f"{self.rank}/{self.world_size}" + ("" if self.out_offset is None else
                                                    f", padded (output narrowed at {self.out_offset})"))


class RowParallelLinear(_ParallelLinear):
    """This rank's input features [rank * K / tp, (rank + 1) * K / tp) of a linear layer: takes
    its slice of x [..., K / tp], computes the partial product, all-reduces it over the process
    group (in place, on the current stream) and applies the layer's activation to the sum. The bias
    is added once, by rank 0's kernel epilogue (so the sum holds it once). The partials are summed
    in the output dtype, as vLLM and Megatron do."""

    def __init__(self, part: Shard, tp: TPGroup, name: str = ""):
        super().__init__(part, tp, name)
        self.register_buffer("src", part.src)
        self.has_bias = part.has_bias
        self.activation = part.activation

    @property
    def bias(self):
        """The bias, on rank 0 (its local module adds it); None on the other ranks."""
        return self.local.bias

    def local_forward(self, x):
        """The partial product of this rank (no reduction; rank 0's holds the bias)."""
        if self.src is not None:
            # Regrouped rows (act-order / cut groups): gather x, column local_in_features being 0.
            x = F.pad(x, (0, 1)).index_select(-1, self.src)
        return self.local(x)

    def forward(self, x):
        y = self.local_forward(x)
        if self.world_size > 1:
            if self.process_group is None:
                raise RuntimeError(f"RowParallelLinear {self.layer_name!r} was sharded without a process group "
                                   f"(offline): its partial products cannot be reduced")
            import torch.distributed as dist
            y = y.contiguous()
            dist.all_reduce(y, group=self.process_group)
        return _ACTIVATIONS[self.activation](y)

    def extra_repr(self) -> str:
        return (f"{self.layer_name!r}, K {self.in_features} -> {self.local_in_features} on rank "
                f"{self.rank}/{self.world_size}, all_reduce" +
                ("" if self.src is None else f", regrouped rows ({self.src.numel()} with padding)"))


PARALLEL_MODULES = (ColumnParallelLinear, RowParallelLinear)


# --- model level ---------------------------------------------------------------------------------------------

def parallelize(model: nn.Module, process_group, tp_plan: dict | None = None) -> list[str]:
    """Replace, in place, every nn.Linear / qgemm linear module of `model` whose name the plan
    matches with this rank's shard (shard_layers); returns the names replaced."""
    # Packed projections are not sharded: the plan names the members, and a packed q/k/v would need
    # its heads dealt out per member.
    refuse_packed(model, TP_REFUSES_PACKED)
    tp = tp_group(process_group)
    candidates = {name: module for name, module in model.named_modules()
                  if isinstance(module, (nn.Linear, QuantLinear, Fp8Linear, W8A8Linear))
                  and not _inside_parallel(model, name) and style_for(name, tp_plan) is not None}
    for name, module in shard_layers(candidates, tp, tp_plan).items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module)
    shard_head_counts(model, tp)
    return list(candidates)


# Attention modules of older transformers versions (and many hand-written ones) keep their head
# counts and width as attributes and reshape with them; newer ones reshape with -1 heads.
_HEAD_ATTRIBUTES = ("num_heads", "num_attention_heads", "num_key_value_heads", "hidden_size")


def shard_head_counts(model: nn.Module, process_group) -> list[str]:
    """Divide the head counts (and width) an attention module keeps as attributes by the TP size,
    for every module whose q_proj and o_proj are parallel (once per module). The ratio of query to
    key/value heads is unchanged. ValueError where a count does not divide (a head cut between
    ranks). Returns the names of the modules changed."""
    tp = tp_group(process_group)
    changed = []
    for name, module in model.named_modules():
        if module.__dict__.get("_qgemm_tp_heads") is not None or \
                not isinstance(getattr(module, "q_proj", None), ColumnParallelLinear) or \
                not isinstance(getattr(module, "o_proj", None), RowParallelLinear):
            continue
        for attr in _HEAD_ATTRIBUTES:
            value = getattr(module, attr, None)
            if isinstance(value, bool) or not isinstance(value, int):
                continue
            if value % tp.world_size:
                raise _error(name, tp.world_size, f"{attr}={value} must divide evenly among the ranks (whole heads "
                             f"per rank)")
            setattr(module, attr, value // tp.world_size)
        module.__dict__["_qgemm_tp_heads"] = tp.world_size
        changed.append(name)
    return changed


def _inside_parallel(model: nn.Module, name: str) -> bool:
    parts = name.split(".")
    for i in range(1, len(parts)):
        if isinstance(model.get_submodule(".".join(parts[:i])), PARALLEL_MODULES):
            return True
    return False
