"""The logical form of a weight-only quantized weight, and converters into it.

`IntWeight` is what the rest of qgemm packs for its kernels (qgemm.fpaintb.IntBWeight):

    w[k, n] = (u[k, n] - zero[k // g, n]) * scale[k // g, n]      (rows k in stored order)

with unsigned codes u, one scale (and optionally one zero point) per group of g rows of K and
per output column n, and an optional act-order permutation of the rows.

Into it:
  quantize_rtn   round-to-nearest quantization of a float nn.Linear weight [N, K]
  from_gptq      GPTQ checkpoints (qweight packed along K, qzeros packed along N, g_idx)
  from_awq       AutoAWQ GEMM checkpoints (qweight [K, N / 8] in AWQ's nibble order)
and back out, for tests: pack_gptq, pack_awq (written straight from the format definitions,
independently of the unpackers, so round trips check one against the other).

Everything is torch ops on whole tensors: it runs on the CPU or on the GPU where a checkpoint
already is. Packed checkpoint words are int32, so a word whose top bit is set is negative;
the unpackers shift arithmetically and then mask, which gives the right bits either way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _checks

BITS = (4, 8)
SCALE_DTYPES = (torch.float16, torch.bfloat16)
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
G_IDX_DTYPES = (torch.int32, torch.int64)
# AutoAWQ GEMM: nibble i (bits [4i, 4i+4)) of a packed word holds column 8c + AWQ_ORDER[i].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


# --- argument checks -------------------------------------------------------------------------

def _check_bits(name: str, bits):
    if isinstance(bits, bool) or bits not in BITS:
        raise ValueError(f"{name} must be one of {BITS}, got {bits!r}")


def _check_shape(name: str, value: torch.Tensor, expected: tuple, why: str):
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} ({why}), got {tuple(value.shape)}")


def _check_device(name: str, value: torch.Tensor, device: torch.device, other: str):
    if value.device != device:
        raise ValueError(f"{name} must be on the same device as {other} ({device}), got {value.device}")


def _check_group_size(name: str, group_size, k: int):
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(f"{name} must be a positive int dividing K={k}, got {group_size!r}")
    if k % group_size:
        raise ValueError(f"{name} must divide K={k}, got {group_size}")


def _group_count(scales: torch.Tensor, k: int) -> int:
    """The group size g of a checkpoint: K // scales.shape[0], which must divide exactly."""
    groups = scales.shape[0]
    if groups <= 0 or k % groups:
        raise ValueError(f"scales.shape[0] (the number of groups) must divide K={k}, got shape "
                         f"{tuple(scales.shape)}")
    return k // groups


# --- the logical weight ----------------------------------------------------------------------

# eq=False: dataclass equality would compare tensors with ==, which has no single truth value.
@dataclass(frozen=True, eq=False)
class IntWeight:
    """w[k, n] = (u[k, n] - zero[k // group_size, n]) * scale[k // group_size, n]  (rows k in stored order)

    u: torch.uint8 [K, N], values in [0, 2**bits)
    scale: float16 or bfloat16 [K // group_size, N]
    zero: torch.uint8 [K // group_size, N] with values in [0, 2**bits), or None meaning the symmetric
          zero 2**(bits - 1) (8 for int4, 128 for int8)
    bits: 4 or 8
    group_size: divides K; group_size == K means per-output-channel
    perm: None, or int64 [K]: the stored rows are the original rows perm[0], perm[1], ...
          (GPTQ act-order). A layer then computes x[:, perm] @ W_stored == x @ W_original.

    Construction checks types, shapes, devices, bits and group_size; it does not scan values
    (that would be a device sync per weight), so code ranges are the producer's promise.
    """

    u: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    bits: int
    group_size: int
    perm: torch.Tensor | None = None

    def __post_init__(self):
        _check_bits("IntWeight.bits", self.bits)
        u = _checks.tensor("IntWeight.u", self.u, (torch.uint8,), ndim=2)
        k, n = u.shape
        if k == 0 or n == 0:
            raise ValueError(f"IntWeight.u must be non-empty [K, N], got shape {tuple(u.shape)}")
        _check_group_size("IntWeight.group_size", self.group_size, k)
        groups = (k // self.group_size, n)
        _checks.tensor("IntWeight.scale", self.scale, SCALE_DTYPES, ndim=2)
        _check_shape("IntWeight.scale", self.scale, groups, "[K // group_size, N]")
        _check_device("IntWeight.scale", self.scale, u.device, "u")
        if self.zero is not None:
            _checks.tensor("IntWeight.zero", self.zero, (torch.uint8,), ndim=2)
            _check_shape("IntWeight.zero", self.zero, groups, "[K // group_size, N]")
            _check_device("IntWeight.zero", self.zero, u.device, "u")
        if self.perm is not None:
            _checks.tensor("IntWeight.perm", self.perm, (torch.int64,), ndim=1)
            _check_shape("IntWeight.perm", self.perm, (k,), "one source row per stored row")
            _check_device("IntWeight.perm", self.perm, u.device, "u")

    @property
    def k(self) -> int:
        return self.u.shape[0]

    @property
    def n(self) -> int:
        return self.u.shape[1]

    def zero_or_default(self) -> torch.Tensor:
        """The zero points, uint8 [K // group_size, N]; the symmetric 2**(bits - 1) where zero is None."""
        if self.zero is not None:
            return self.zero
        return torch.full(self.scale.shape, 2 ** (self.bits - 1), dtype=torch.uint8, device=self.u.device)

    def dequantize(self) -> torch.Tensor:
        """float64 [K, N] in the ORIGINAL row order (act-order undone), so x @ this == the layer."""
        g = self.group_size
        z = self.zero_or_default().double().repeat_interleave(g, dim=0)
        s = self.scale.double().repeat_interleave(g, dim=0)
        w = (self.u.double() - z) * s
        if self.perm is None:
            return w
        # Stored row r is original row perm[r].
        return torch.empty_like(w).index_copy_(0, self.perm, w)


# --- round-to-nearest quantization -------------------------------------------------------------

def _round_scale(scale: torch.Tensor, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """float32 scales -> `dtype`, kept in [smallest normal, largest finite] so w / scale never
    divides by zero or overflows; with up=True rounded towards +inf instead of to nearest."""
    info = torch.finfo(dtype)
    exact = scale.clamp(min=info.tiny, max=info.max)
    rounded = exact.to(dtype)
    if up:
        # A positive finite float's successor is its bit pattern + 1.
        bumped = (rounded.view(torch.int16) + 1).view(dtype)
        rounded = torch.where((rounded.float() < exact) & (rounded < info.max), bumped, rounded)
    return rounded


def quantize_rtn(weight: torch.Tensor, bits: int = 4, group_size: int = 128, symmetric: bool = True,
                 scale_dtype: torch.dtype | None = None) -> IntWeight:
    """Round-to-nearest quantization of an nn.Linear weight [N, K] (out_features x in_features).

    group_size: rows of K per scale; -1 or K means one scale per output channel.
    scale_dtype: float16 or bfloat16; by default weight.dtype if that is one of them, else float16.

    Per (group, column), computed in float32, scales rounded to scale_dtype before the codes:
      symmetric:  scale = max|w| / (2**(bits-1) - 1),  u = clamp(round(w / scale) + 2**(bits-1)),  zero None
      asymmetric: the range [min(w, 0), max(w, 0)] (it holds 0 so that 0 is exact and the zero
                  point fits the code range), scale = (max - min) / (2**bits - 1) rounded UP
                  (rounding it down could push max past the top code, by up to half a step for
                  int8 with bfloat16 scales), zero = round(-min / scale), u = clamp(round(w / scale) + zero)
    clamp is to [0, 2**bits - 1] and round is half to even; so |dequantized - w| <= scale / 2.
    """
    _checks.tensor("weight", weight, WEIGHT_DTYPES, ndim=2)
    _check_bits("bits", bits)
    n, k = weight.shape
    if k == 0 or n == 0:
        raise ValueError(f"weight must be non-empty [N, K], got shape {tuple(weight.shape)}")
    _checks.finite("weight", weight)  # a NaN/Inf would turn its group's scale non-finite (README: NaN and Inf)
    if group_size == -1:
        group_size = k
    _check_group_size("group_size", group_size, k)
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    if scale_dtype is None:
        scale_dtype = weight.dtype if weight.dtype in SCALE_DTYPES else torch.float16
    if scale_dtype not in SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be torch.float16 or torch.bfloat16 (or None), got {scale_dtype}")

    top = 2 ** bits - 1
    w = weight.t().float().reshape(k // group_size, group_size, n)          # [G, g, N]
    if symmetric:
        scale = _round_scale(w.abs().amax(dim=1) / (2 ** (bits - 1) - 1), scale_dtype, up=False)
        zero = None
        offset = torch.full_like(scale, 2 ** (bits - 1), dtype=torch.float32)
    else:
        lo = w.amin(dim=1).clamp(max=0)
        hi = w.amax(dim=1).clamp(min=0)
        scale = _round_scale((hi - lo) / top, scale_dtype, up=True)
        offset = torch.round(-lo / scale.float()).clamp(0, top)
        zero = offset.to(torch.uint8)
    u = torch.round(w / scale.float().unsqueeze(1)) + offset.unsqueeze(1)
    u = u.clamp(0, top).to(torch.uint8).reshape(k, n)
    return IntWeight(u, scale, zero, bits, group_size)


def from_signed(q: torch.Tensor, scale: torch.Tensor, bits: int = 8) -> IntWeight:
    """Signed symmetric codes, as TensorRT-LLM's and most W8A16 checkpoints store them:
    q int8 [N, K] (nn.Linear layout) in [-2**(bits-1), 2**(bits-1) - 1], w = q * scale, scale
    float16/bfloat16 [K // g, N] (or [N] for one scale per output channel). The bias that makes
    the codes unsigned is added here: u = q + 2**(bits-1), zero 2**(bits-1) (the symmetric default)."""
    _checks.tensor("q", q, (torch.int8,), ndim=2)
    _check_bits("bits", bits)
    n, k = q.shape
    half = 2 ** (bits - 1)
    if bits == 4 and bool(((q < -half) | (q >= half)).any()):
        raise ValueError(f"q holds values outside [{-half}, {half - 1}], the int4 range")
    _checks.tensor("scale", scale, SCALE_DTYPES)
    if scale.dim() == 1:
        scale = scale.unsqueeze(0)
    if scale.dim() != 2 or scale.shape[1] != n or scale.shape[0] == 0 or k % scale.shape[0]:
        raise ValueError(f"scale must have shape [K // g, N] = [G, {n}] with G dividing K={k}, or [{n}]; "
                         f"got {tuple(scale.shape)}")
    u = (q.t().to(torch.int16) + half).to(torch.uint8).contiguous()
    return IntWeight(u, scale.contiguous(), None, bits, k // scale.shape[0])


# --- GPTQ --------------------------------------------------------------------------------------

def _unpack_words(words: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [..., W] -> int32 [..., W, 32 // bits]: field j holds bits [bits*j, bits*j + bits)."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=words.device)
    # Arithmetic shift copies the sign bit into the top, and the mask drops it again.
    return (words.unsqueeze(-1) >> shifts) & (2 ** bits - 1)


def _default_g_idx(k: int, g: int, device) -> torch.Tensor:
    return torch.arange(k, device=device) // g


def _act_order_perm(g_idx: torch.Tensor, k: int, g: int, groups: int, device) -> torch.Tensor | None:
    """None where g_idx is the plain arange(K) // g, else the stable argsort that puts each group's
    rows together in group order (every group must then hold exactly g rows)."""
    _checks.tensor("g_idx", g_idx, G_IDX_DTYPES, ndim=1)
    _check_shape("g_idx", g_idx, (k,), "one group index per row of K")
    _check_device("g_idx", g_idx, device, "qweight")
    g_idx = g_idx.long()
    if bool(torch.equal(g_idx, _default_g_idx(k, g, g_idx.device))):
        return None
    if bool((g_idx < 0).any()) or bool((g_idx >= groups).any()):
        raise ValueError(f"g_idx values must lie in [0, {groups}) (the groups of scales), got "
                         f"[{int(g_idx.min())}, {int(g_idx.max())}]")
    counts = torch.bincount(g_idx, minlength=groups)
    if bool((counts != g).any()):
        bad = int(torch.nonzero(counts != g)[0, 0])
        raise ValueError(f"g_idx must assign exactly group_size={g} rows to every group (act-order "
                         f"only permutes rows); group {bad} has {int(counts[bad])}")
    return torch.argsort(g_idx, stable=True)


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor | None = None,
              bits: int = 4, zero_offset: int = 1) -> IntWeight:
    """GPTQ checkpoint tensors -> IntWeight.

    GPTQ's definition, with p = 32 // bits codes per int32 word and g = K // scales.shape[0]:
      qweight int32 [K / p, N], packed along K: bits [bits*j, bits*j + bits) of qweight[i, n] hold u[i*p + j, n]
      qzeros  int32 [K / g, N / p], packed along N: bits [bits*j, ...) of qzeros[G, i] hold zstored[G, i*p + j]
      zero = zstored + zero_offset: GPTQ v1 checkpoints store zero - 1 (zero_offset=1), the v2 /
             gptq_v2 format stores the zero itself (zero_offset=0)
      scales float16/bfloat16 [K / g, N]
      g_idx  int32/int64 [K] or None: the group of each (original) row k
      w[k, n] = (u[k, n] - zero[g_idx[k], n]) * scales[g_idx[k], n]

    A g_idx other than arange(K) // g (act-order) becomes perm = argsort(g_idx, stable) with the
    rows of u stored in that order, so stored row r belongs to group r // g.
    """
    _check_bits("bits", bits)
    if zero_offset not in (0, 1) or isinstance(zero_offset, bool):
        raise ValueError(f"zero_offset must be 1 (GPTQ v1) or 0 (GPTQ v2), got {zero_offset!r}")
    per_word = 32 // bits
    _checks.tensor("qweight", qweight, (torch.int32,), ndim=2)
    k, n = qweight.shape[0] * per_word, qweight.shape[1]
    if k == 0 or n == 0:
        raise ValueError(f"qweight must be non-empty [K * {bits} / 32, N], got shape {tuple(qweight.shape)}")
    _checks.tensor("scales", scales, SCALE_DTYPES, ndim=2)
    if scales.shape[1] != n:
        raise ValueError(f"scales must be [K / group_size, N] with N={n} (qweight.shape[1]), got shape "
                         f"{tuple(scales.shape)}")
    _check_device("scales", scales, qweight.device, "qweight")
    g = _group_count(scales, k)
    groups = k // g
    _checks.tensor("qzeros", qzeros, (torch.int32,), ndim=2)
    if n % per_word:
        raise ValueError(f"qweight.shape[1] (N) must be a multiple of {per_word} so that qzeros packs "
                         f"{per_word} int{bits} zeros per int32 along N, got N={n}")
    _check_shape("qzeros", qzeros, (groups, n // per_word), f"[K / group_size, N * {bits} / 32]")
    _check_device("qzeros", qzeros, qweight.device, "qweight")

    u = _unpack_words(qweight.t(), bits).reshape(n, k).t()                    # [K, N]
    zero = _unpack_words(qzeros, bits).reshape(groups, n) + zero_offset
    if zero_offset and bool((zero > 2 ** bits - 1).any()):
        raise ValueError(f"qzeros holds a stored zero of {2 ** bits - 1}, which with zero_offset=1 (GPTQ v1) "
                         f"means zero {2 ** bits}, outside the int{bits} codes [0, {2 ** bits}); "
                         f"is this a GPTQ v2 checkpoint (zero_offset=0)?")
    perm = None
    if g_idx is not None:
        perm = _act_order_perm(g_idx, k, g, groups, qweight.device)
        if perm is not None:
            u = u.index_select(0, perm)
    return IntWeight(u.to(torch.uint8).contiguous(), scales, zero.to(torch.uint8), bits, g, perm)


# --- AWQ ---------------------------------------------------------------------------------------

def _awq_unpack(words: torch.Tensor) -> torch.Tensor:
    """int32 [R, N / 8] in AWQ order -> uint8 [R, N]."""
    fields = _unpack_words(words, 4)                                          # [R, N/8, 8] by nibble
    # Column 8c + AWQ_ORDER[i] is nibble i, so column 8c + j is nibble inverse[j].
    inverse = torch.argsort(torch.tensor(AWQ_ORDER, device=words.device))
    return fields.index_select(2, inverse).reshape(words.shape[0], -1).to(torch.uint8)


def from_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor) -> IntWeight:
    """AutoAWQ GEMM checkpoint tensors (int4 only) -> IntWeight.

    AWQ's definition, with g = K // scales.shape[0]:
      qweight int32 [K, N / 8], packed along N: nibble i (bits [4i, 4i + 4)) of qweight[k, c] holds
              u[k, 8c + AWQ_ORDER[i]], AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
      qzeros  int32 [K / g, N / 8], packed the same way; the stored value is the zero (no offset)
      scales  float16/bfloat16 [K / g, N]
      w[k, n] = (u[k, n] - zero[k // g, n]) * scales[k // g, n]
    """
    _checks.tensor("qweight", qweight, (torch.int32,), ndim=2)
    k, n = qweight.shape[0], qweight.shape[1] * 8
    if k == 0 or n == 0:
        raise ValueError(f"qweight must be non-empty [K, N / 8], got shape {tuple(qweight.shape)}")
    _checks.tensor("scales", scales, SCALE_DTYPES, ndim=2)
    if scales.shape[1] != n:
        raise ValueError(f"scales must be [K / group_size, N] with N={n} (8 * qweight.shape[1]), got shape "
                         f"{tuple(scales.shape)}")
    _check_device("scales", scales, qweight.device, "qweight")
    g = _group_count(scales, k)
    _checks.tensor("qzeros", qzeros, (torch.int32,), ndim=2)
    _check_shape("qzeros", qzeros, (k // g, n // 8), "[K / group_size, N / 8]")
    _check_device("qzeros", qzeros, qweight.device, "qweight")
    return IntWeight(_awq_unpack(qweight), scales, _awq_unpack(qzeros), 4, g)


# --- packers (for tests): straight from the definitions above ----------------------------------

def _to_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 words in [0, 2**32) -> int32 with two's-complement wrap."""
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def pack_gptq(w: IntWeight, zero_offset: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """IntWeight -> GPTQ (qweight, qzeros, scales, g_idx) as from_gptq defines them.

    g_idx is in original row order (act-order perm undone), arange(K) // g without perm. With
    zero_offset=1 (v1) a zero of 0 cannot be stored (zstored would be -1): ValueError.
    """
    if not isinstance(w, IntWeight):
        raise TypeError(f"w must be a qgemm.wq_format.IntWeight, got {type(w).__name__}")
    if zero_offset not in (0, 1) or isinstance(zero_offset, bool):
        raise ValueError(f"zero_offset must be 1 (GPTQ v1) or 0 (GPTQ v2), got {zero_offset!r}")
    bits, per_word, k, n, g = w.bits, 32 // w.bits, w.k, w.n, w.group_size
    if k % per_word or n % per_word:
        raise ValueError(f"w: K and N must be multiples of {per_word} to pack int{bits} GPTQ words, got K={k}, N={n}")
    g_idx = _default_g_idx(k, g, w.u.device)
    u = w.u.long()
    if w.perm is not None:
        # Stored row r is original row perm[r], in group r // g.
        u = torch.empty_like(u).index_copy_(0, w.perm, u)
        g_idx = torch.empty_like(g_idx).index_copy_(0, w.perm, g_idx)
    zstored = w.zero_or_default().long() - zero_offset
    if bool((zstored < 0).any()):
        raise ValueError("w.zero holds 0, which GPTQ v1 (zero_offset=1) cannot store")
    qweight = torch.zeros(k // per_word, n, dtype=torch.int64, device=u.device)
    qzeros = torch.zeros(k // g, n // per_word, dtype=torch.int64, device=u.device)
    for j in range(per_word):
        qweight |= u[j::per_word, :] << (bits * j)              # row i * per_word + j
        qzeros |= zstored[:, j::per_word] << (bits * j)         # column i * per_word + j
    return _to_int32(qweight), _to_int32(qzeros), w.scale, g_idx.to(torch.int32)


def pack_awq(w: IntWeight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """IntWeight (int4, no perm, N a multiple of 8) -> AutoAWQ GEMM (qweight, qzeros, scales)."""
    if not isinstance(w, IntWeight):
        raise TypeError(f"w must be a qgemm.wq_format.IntWeight, got {type(w).__name__}")
    if w.bits != 4:
        raise ValueError(f"w.bits must be 4 for AWQ, got {w.bits}")
    if w.perm is not None:
        raise ValueError("w.perm must be None for AWQ (the format has no act-order)")
    if w.n % 8:
        raise ValueError(f"w: N must be a multiple of 8 to pack AWQ words, got N={w.n}")
    u, zero = w.u.long(), w.zero_or_default().long()
    qweight = torch.zeros(w.k, w.n // 8, dtype=torch.int64, device=u.device)
    qzeros = torch.zeros(zero.shape[0], w.n // 8, dtype=torch.int64, device=u.device)
    for i, col in enumerate(AWQ_ORDER):
        qweight |= u[:, col::8] << (4 * i)                      # column 8c + AWQ_ORDER[i]
        qzeros |= zero[:, col::8] << (4 * i)
    return _to_int32(qweight), _to_int32(qzeros), w.scale


# --- compressed-tensors pack-quantized ----------------------------------------------------------

def _unpack_ct(words: torch.Tensor, bits: int, length: int, dim: int) -> torch.Tensor:
    """compressed-tensors' pack_to_int32 undone: int32 words packed along `dim` (field i of word c
    holds element c * (32 // bits) + i), the padding past `length` dropped. Returns the stored
    unsigned values (signed value + 2**(bits - 1)) as int64."""
    fields = _unpack_words(words.transpose(0, 1) if dim == 0 else words, bits)      # [R, W, p]
    flat = fields.reshape(fields.shape[0], -1)
    if flat.shape[1] < length:
        raise ValueError(f"packed words hold {flat.shape[1]} values along dim {dim}, fewer than the {length} "
                         f"of the weight")
    flat = flat[:, :length].long()
    return flat.transpose(0, 1) if dim == 0 else flat


def from_compressed_tensors(weight_packed: torch.Tensor, weight_scale: torch.Tensor,
                            weight_zero_point: torch.Tensor | None = None, weight_g_idx: torch.Tensor | None = None,
                            num_bits: int = 4, weight_shape=None) -> IntWeight:
    """compressed-tensors `pack-quantized` tensors (int4/int8, group or channel strategy) -> IntWeight.

    The format's definition (compressed_tensors pack_to_int32), with p = 32 // num_bits:
      weight_packed     int32 [N, ceil(K / p)], packed along K: bits [num_bits*i, ...) of word c of row n
                        hold q[n, c*p + i] + 2**(num_bits - 1) (the signed code made unsigned), zero padded
      weight_scale      float16/bfloat16 [N, K / g] (channel strategy: [N, 1])
      weight_zero_point None/absent for symmetric weights (zero point 0); asymmetric: int32
                        [ceil(N / p), K / g] packed the same way along N (dim 0), or an unpacked int8
                        [N, K / g] (older writers); the zero point is signed like q
      weight_g_idx      int32/int64 [K] or None: the group of each input column (act-order)
      weight_shape      [N, K] (the tensor the format stores), needed when K is not a multiple of p
      w[n, k] = (q[n, k] - zero_point[n, g_idx[k]]) * weight_scale[n, g_idx[k]]
    With u = q + 2**(bits-1) and zero = zero_point + 2**(bits-1) that is IntWeight's form.
    """
    _check_bits("num_bits", num_bits)
    per_word = 32 // num_bits
    _checks.tensor("weight_packed", weight_packed, (torch.int32,), ndim=2)
    n = weight_packed.shape[0]
    if weight_shape is not None:
        shape = [int(v) for v in (weight_shape.tolist() if isinstance(weight_shape, torch.Tensor) else weight_shape)]
        if len(shape) != 2 or shape[0] != n or not 0 < shape[1] <= weight_packed.shape[1] * per_word:
            raise ValueError(f"weight_shape must be [N={n}, K] with K <= {weight_packed.shape[1] * per_word} "
                             f"(weight_packed {tuple(weight_packed.shape)}), got {shape}")
        k = shape[1]
    else:
        k = weight_packed.shape[1] * per_word
    if k == 0 or n == 0:
        raise ValueError(f"weight_packed must be non-empty [N, K / {per_word}], got shape {tuple(weight_packed.shape)}")
    _checks.tensor("weight_scale", weight_scale, SCALE_DTYPES, ndim=2)
    if weight_scale.shape[0] != n:
        raise ValueError(f"weight_scale must be [N, K / group_size] with N={n} (weight_packed.shape[0]), got "
                         f"shape {tuple(weight_scale.shape)}")
    _check_device("weight_scale", weight_scale, weight_packed.device, "weight_packed")
    scales = weight_scale.t().contiguous()                                    # [G, N]
    g = _group_count(scales, k)
    groups = k // g
    half = 2 ** (num_bits - 1)
    u = _unpack_ct(weight_packed, num_bits, k, 1).t()                         # [K, N] unsigned
    zero = None
    if weight_zero_point is not None:
        _check_device("weight_zero_point", weight_zero_point, weight_packed.device, "weight_packed")
        if weight_zero_point.dtype == torch.int32:
            _check_shape("weight_zero_point", weight_zero_point, (-(-n // per_word), groups),
                         f"[ceil(N / {per_word}), K / group_size], packed along N")
            zero = _unpack_ct(weight_zero_point, num_bits, n, 0).t()          # [G, N] unsigned
        else:
            _checks.tensor("weight_zero_point", weight_zero_point, (torch.int32, torch.int8), ndim=2)
            _check_shape("weight_zero_point", weight_zero_point, (n, groups), "[N, K / group_size], unpacked")
            zero = weight_zero_point.t().long() + half
            if bool(((zero < 0) | (zero >= 2 * half)).any()):
                raise ValueError(f"weight_zero_point holds values outside the int{num_bits} range "
                                 f"[{-half}, {half - 1}]")
        zero = zero.to(torch.uint8).contiguous()
    perm = None
    if weight_g_idx is not None:
        perm = _act_order_perm(weight_g_idx, k, g, groups, weight_packed.device)
        if perm is not None:
            u = u.index_select(0, perm)
    return IntWeight(u.to(torch.uint8).contiguous(), scales, zero, num_bits, g, perm)


def pack_compressed_tensors(w: IntWeight) -> dict[str, torch.Tensor]:
    """IntWeight -> compressed-tensors pack-quantized tensors as from_compressed_tensors defines
    them (weight_packed, weight_scale, weight_shape; weight_zero_point packed along N where w has
    zeros; weight_g_idx where w has an act-order perm). For tests."""
    if not isinstance(w, IntWeight):
        raise TypeError(f"w must be a qgemm.wq_format.IntWeight, got {type(w).__name__}")
    bits, per_word, k, n, g = w.bits, 32 // w.bits, w.k, w.n, w.group_size
    u = w.u.long()
    g_idx = _default_g_idx(k, g, u.device)
    if w.perm is not None:
        u = torch.empty_like(u).index_copy_(0, w.perm, u)
        g_idx = torch.empty_like(g_idx).index_copy_(0, w.perm, g_idx)
    rows = u.t()                                                              # [N, K], unsigned
    pad = -k % per_word
    rows = torch.cat([rows, rows.new_zeros(n, pad)], dim=1)
    packed = torch.zeros(n, rows.shape[1] // per_word, dtype=torch.int64, device=u.device)
    for i in range(per_word):
        packed |= rows[:, i::per_word] << (bits * i)
    out = {"weight_packed": _to_int32(packed), "weight_scale": w.scale.t().contiguous(),
           "weight_shape": torch.tensor([n, k], dtype=torch.int32)}
    if w.zero is not None:
        zero = w.zero.long().t()                                              # [N, G] unsigned
        zero = torch.cat([zero, zero.new_zeros(-n % per_word, zero.shape[1])], dim=0)
        packed_zero = torch.zeros(zero.shape[0] // per_word, zero.shape[1], dtype=torch.int64, device=u.device)
        for i in range(per_word):
            packed_zero |= zero[i::per_word, :] << (bits * i)
        out["weight_zero_point"] = _to_int32(packed_zero)
    if w.perm is not None:
        out["weight_g_idx"] = g_idx.to(torch.int32)
    return out
