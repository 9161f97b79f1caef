"""Reference math for the tests and for weight preparation.

`quantize_blocks` is the quantizer of the W8A8 scheme in plain torch float32
arithmetic: the activation kernel computes the same IEEE operations in the same
order, so its results match bit for bit. The GEMM references work in float64
from the quantized inputs.
"""
from __future__ import annotations

import torch

ACTIVATIONS = ("none", "relu", "relu6")
W8A8_ACTIVATIONS = ACTIVATIONS + ("silu",)  # the Sm90 W8A8 kernels add SiLU


def clamp_bounds(activation: str) -> tuple[float, float]:
    """Output clamp that realizes an activation (ReLU/ReLU6 folded into a clamp)."""
    if activation == "none":
        return float("-inf"), float("inf")
    if activation == "relu":
        return 0.0, float("inf")
    if activation == "relu6":
        return 0.0, 6.0
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def quantize_blocks(x: torch.Tensor, block_size: int):
    """Asymmetric int8 per (row, K-block): x ~= scale * q + offset. A block with NaN or Inf gets a
    NaN scale and offset and q = 0.

    Returns q int8 [R, K] and scale, offset, qsum float32 [K / block_size, R]
    (block-major: a block's vectors are contiguous, as the GEMM epilogue reads them).
    """
    rows, k = x.shape
    if k % block_size:
        raise ValueError(f"K={k} must be a multiple of block_size={block_size}")
    blocks = x.float().reshape(rows, k // block_size, block_size)
    finite = torch.isfinite(blocks).all(dim=2)
    blocks = torch.where(finite[..., None], blocks, 0.0)
    lo = blocks.amin(dim=2)
    hi = blocks.amax(dim=2)
    scale = (hi - lo) / 255.0
    flat = scale <= 0
    offset = torch.where(flat, lo, lo + 128.0 * scale)
    scale = torch.where(flat, torch.ones_like(scale), scale)
    q = torch.round((blocks - offset[..., None]) / scale[..., None]).clamp_(-128, 127)
    # A block holding NaN or Inf: NaN scale and offset, q = 0 (the activation kernel does the same),
    # so the non-finite value reaches every output of its row.
    q = torch.where(finite[..., None], q, 0.0)
    scale = torch.where(finite, scale, float("nan"))
    offset = torch.where(finite, offset, float("nan"))
    qsum = q.sum(dim=2)
    q = q.to(torch.int8).reshape(rows, k)
    return q, scale.t().contiguous(), offset.t().contiguous(), qsum.t().contiguous()


def dequantize_blocks(q: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, block_size: int) -> torch.Tensor:
    """float64 [R, K] from q [R, K] and block-major scale/offset [K / block_size, R]."""
    rows, k = q.shape
    blocks = q.double().reshape(rows, k // block_size, block_size)
    return (blocks * scale.t().double()[..., None] + offset.t().double()[..., None]).reshape(rows, k)


def w8a8_gemm(a_q, a_scale, a_offset, b_q, b_scale, b_offset, block_size, bias=None, activation="none"):
    """float64 reference of the W8A8 GEMM from the same quantized inputs: clamp(A B^T + bias)."""
    a = dequantize_blocks(a_q.cpu(), a_scale.cpu(), a_offset.cpu(), block_size)
    b = dequantize_blocks(b_q.cpu(), b_scale.cpu(), b_offset.cpu(), block_size)
    out = a @ b.t()
    if bias is not None:
        out = out + bias.cpu().double()
    return apply_activation(out, activation)


# --- W8A8, symmetric block-INT8 (the scheme SGLang and vLLM run for DeepSeek-V3/R1 INT8) --------
#
# Activations: one scale per (row, K-block), x ~= scale * q, q in [-127, 127]. Weights [N, K]: one
# scale per (128 rows, K-block): DeepSeek's weight_scale_inv [ceil(N / 128), K / block_size].

W8A8_WEIGHT_BLOCK_N = 128
INT8_EPS = 1e-10  # floor of a group's amax, so an all-zero group gets a finite scale


def _int8_scales(amax: torch.Tensor):
    """scale = amax / 127 and its multiplier inv = 127 / amax, each one IEEE division, tensor by
    tensor (torch turns division by a Python scalar into a multiplication by its reciprocal, which
    rounds differently from the kernel's division). amax keeps NaN: clamp_min propagates it."""
    amax = amax.clamp_min(INT8_EPS)
    fmax = torch.full_like(amax, 127.0)
    return amax / fmax, fmax / amax


def _round_int8_symmetric(values: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """rint(values * inv) clamped to [-127, 127]; a NaN product (non-finite input) becomes 0, as in
    the kernel: the group's scale (NaN or Inf) already carries the non-finite value to the output."""
    r = torch.round(values * inv).clamp(-127, 127)
    return torch.nan_to_num(r, nan=0.0)


def quantize_blocks_symmetric(x: torch.Tensor, block_size: int):
    """Symmetric int8 per (row, K-block), the activation kernel's float32 arithmetic:
    amax = max(max|x|, 1e-10), scale = amax / 127, q = rint(x * (127 / amax)).

    Returns q int8 [R, K] and scale float32 [K / block_size, R] (block-major)."""
    rows, k = x.shape
    if k % block_size:
        raise ValueError(f"K={k} must be a multiple of block_size={block_size}")
    blocks = x.float().reshape(rows, k // block_size, block_size)
    finite = torch.isfinite(blocks).all(dim=2)
    scale, inv = _int8_scales(blocks.abs().amax(dim=2))
    q = _round_int8_symmetric(blocks, inv[..., None])
    # A block holding NaN or Inf: NaN scale and q = 0, as the activation kernel writes them.
    q = torch.where(finite[..., None], q, 0.0).to(torch.int8).reshape(rows, k)
    scale = torch.where(finite, scale, float("nan"))
    return q, scale.t().contiguous()


def quantize_weight_blocks_symmetric(w: torch.Tensor, block_size: int):
    """Symmetric int8 per (128 rows, K-block) of a weight [N, K]: q int8 [N, K] and weight_scale_inv
    float32 [ceil(N / 128), K / block_size], w ~= scale_inv * q blockwise (DeepSeek's block-INT8).
    The last row block may be partial; its scale covers the rows present."""
    n, k = w.shape
    if k % block_size:
        raise ValueError(f"K={k} must be a multiple of block_size={block_size}")
    bn = W8A8_WEIGHT_BLOCK_N
    nb = -(-n // bn)
    padded = torch.zeros((nb * bn, k), dtype=torch.float32, device=w.device)
    padded[:n] = w.float()
    blocks = padded.reshape(nb, bn, k // block_size, block_size)
    scale, inv = _int8_scales(blocks.abs().amax(dim=(1, 3)))
    q = _round_int8_symmetric(blocks, inv[:, None, :, None]).to(torch.int8)
    return q.reshape(nb * bn, k)[:n].contiguous(), scale


def dequantize_blocks_symmetric(q: torch.Tensor, scale: torch.Tensor, block_size: int) -> torch.Tensor:
    """float64 [R, K] from activations q [R, K] and block-major scales [K / block_size, R]."""
    rows, k = q.shape
    return (q.double().reshape(rows, k // block_size, block_size) * scale.t().double()[..., None]).reshape(rows, k)


def dequantize_weight_blocks_symmetric(q: torch.Tensor, scale_inv: torch.Tensor, block_size: int) -> torch.Tensor:
    """float64 [N, K] from a block-INT8 weight q [N, K] and weight_scale_inv [ceil(N / 128), K / block_size]."""
    n, k = q.shape
    scale = scale_inv.double().repeat_interleave(W8A8_WEIGHT_BLOCK_N, 0).repeat_interleave(block_size, 1)
    return q.double() * scale[:n]


def w8a8_gemm_symmetric(a_q, a_scale, b_q, b_scale_inv, block_size, bias=None, activation="none"):
    """float64 reference of the symmetric block-INT8 GEMM from the same quantized inputs."""
    a = dequantize_blocks_symmetric(a_q.cpu(), a_scale.cpu(), block_size)
    b = dequantize_weight_blocks_symmetric(b_q.cpu(), b_scale_inv.cpu(), block_size)
    out = a @ b.t()
    if bias is not None:
        out = out + bias.cpu().double()
    return apply_activation(out, activation)


def apply_activation(out: torch.Tensor, activation: str) -> torch.Tensor:
    """The W8A8 epilogue's activation in float64: a clamp (none/ReLU/ReLU6) or SiLU."""
    if activation == "silu":
        return out * torch.sigmoid(out)
    lo, hi = clamp_bounds(activation)
    return out.clamp(lo, hi)


# --- FP8 blockwise (DeepSeek-V3) ---------------------------------------------------------------

FP8_GROUP = 128  # activations: 1 x 128 per token; weights: 128 x 128 blocks
FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
FP8_EPS = 1e-10  # floor of a group's amax, so an all-zero group gets a finite scale


def fp8_scale_pitch(m: int) -> int:
    """Row pitch of M-major activation scales: M rounded up to 4 floats (16 bytes, TMA's alignment)."""
    return -(-m // 4) * 4


def _fp8_scales(amax: torch.Tensor, dtype: torch.dtype):
    """scale = amax / fp8_max and its multiplier inv = fp8_max / amax, each one IEEE division.
    Tensor-by-tensor on purpose: torch turns division by a Python scalar into multiplication by
    its reciprocal, which rounds differently from the kernel's division."""
    fmax = torch.full_like(amax, FP8_MAX[dtype])
    return amax / fmax, fmax / amax


def quantize_fp8_groups(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """Per-token-group FP8 quantization, the activation kernel's exact arithmetic in float32:
    scale = max(|x|, eps) / fp8_max, q = fp8(clamp(x * (fp8_max / amax))).

    x [M, K] -> q [M, K] FP8 and sx float32 [K / 128, pitch] (M-major, pitch = fp8_scale_pitch(M);
    columns M.. are padding), with x ~= sx[k // 128, m] * q[m, k]. A group holding NaN or Inf gets a
    NaN scale and q = 0 (as the W8A8 quantizers), so the non-finite value reaches its row's outputs.
    """
    m, k = x.shape
    if k % FP8_GROUP:
        raise ValueError(f"K={k} must be a multiple of {FP8_GROUP}")
    groups = x.float().reshape(m, k // FP8_GROUP, FP8_GROUP)
    finite = torch.isfinite(groups).all(dim=2)
    groups = torch.where(finite[..., None], groups, 0.0)
    amax = groups.abs().amax(dim=2).clamp_min(FP8_EPS)
    scale, inv = _fp8_scales(amax, dtype)
    scale = torch.where(finite, scale, float("nan"))
    q = (groups * inv[..., None]).clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype).reshape(m, k)
    sx = torch.zeros((k // FP8_GROUP, fp8_scale_pitch(m)), dtype=torch.float32, device=x.device)
    sx[:, :m] = scale.t()
    return q, sx


def quantize_fp8_blocks(w: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """128 x 128 block FP8 quantization of a weight [N, K] (DeepSeek-V3 checkpoints' scheme).

    Returns q [N, K] FP8 and scale_inv float32 [ceil(N / 128), ceil(K / 128)], w ~= scale_inv * q
    blockwise. Edge blocks are partial; the scale covers the elements present.
    """
    n, k = w.shape
    fmax = FP8_MAX[dtype]
    nb, kb = -(-n // FP8_GROUP), -(-k // FP8_GROUP)
    padded = torch.zeros((nb * FP8_GROUP, kb * FP8_GROUP), dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float()
    blocks = padded.reshape(nb, FP8_GROUP, kb, FP8_GROUP)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(FP8_EPS)
    scale, inv = _fp8_scales(amax, dtype)
    q = (blocks * inv[:, None, :, None]).clamp(-fmax, fmax).to(dtype)
    q = q.reshape(nb * FP8_GROUP, kb * FP8_GROUP)[:n, :k].contiguous()
    return q, scale


def dequantize_fp8_groups(q: torch.Tensor, sx: torch.Tensor) -> torch.Tensor:
    """float64 [M, K] from FP8 q [M, K] and M-major scales sx [K / 128, >= M]."""
    m, k = q.shape
    scale = sx[:, :m].t().double().repeat_interleave(FP8_GROUP, dim=1)
    return q.double() * scale


def dequantize_fp8_blocks(q: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """float64 [N, K] from FP8 q [N, K] and block scales [ceil(N / 128), ceil(K / 128)]."""
    n, k = q.shape
    scale = scale_inv.double().repeat_interleave(FP8_GROUP, 0).repeat_interleave(FP8_GROUP, 1)
    return q.double() * scale[:n, :k]


def fp8_blockwise_gemm(xq, sx, wq, sw, bias=None) -> torch.Tensor:
    """float64 reference of the blockwise FP8 GEMM from the same quantized inputs:
    out = dequant(xq, sx) dequant(wq, sw)^T + bias (the FP32 promotion per 128-K block is exact
    algebra, so the float64 product of the dequantized operands is the target). Computed on the
    inputs' device: float64 on the GPU keeps the large benchmark shapes testable."""
    x = dequantize_fp8_groups(xq, sx)
    w = dequantize_fp8_blocks(wq, sw.to(wq.device))
    out = x @ w.t()
    if bias is not None:
        out = out + bias.to(out.device).double()
    return out


def conv2d_int8(x_q: torch.Tensor, w_q: torch.Tensor, bias, quant, stride=(1, 1), padding=(0, 0),
                dilation=(1, 1)) -> torch.Tensor:
    """The int8 convolution by definition, in float64: dequantize x_q (NHWC int8) and w_q
    ([Co, Kh, Kw, Ci] int8), convolve with real-valued zero padding, add the bias, apply the
    activation, requantize (round half to even, + Z_O, clamp to int8). `quant` is a
    qgemm.conv_quant.ConvInt8Quant. Returns int8 NHWC."""
    x = quant.input_scale * (x_q.double() - quant.input_zero)
    w = quant.weight_scale.double().view(-1, 1, 1, 1) * w_q.double()
    out = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), stride=stride,
                                     padding=padding, dilation=dilation)
    if bias is not None:
        out = out + bias.double().view(1, -1, 1, 1)
    if quant.activation in ("relu", "relu6"):
        out = out.clamp(min=0)
    if quant.activation == "relu6":
        out = out.clamp(max=6)
    q = torch.round(out / quant.output_scale) + quant.output_zero
    return q.clamp(-128, 127).to(torch.int8).permute(0, 2, 3, 1).contiguous()
