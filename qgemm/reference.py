"""Reference math for the tests and for weight preparation.

`quantize_blocks` is the quantizer of the W8A8 scheme in plain torch float32
arithmetic: the activation kernel computes the same IEEE operations in the same
order, so its results match bit for bit. The GEMM references work in float64
from the quantized inputs.
"""
from __future__ import annotations

import torch

ACTIVATIONS = ("none", "relu", "relu6")


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
    """Asymmetric int8 per (row, K-block): x ~= scale * q + offset.

    Returns q int8 [R, K] and scale, offset, qsum float32 [K / block_size, R]
    (block-major: a block's vectors are contiguous, as the GEMM epilogue reads them).
    """
    rows, k = x.shape
    if k % block_size:
        raise ValueError(f"K={k} must be a multiple of block_size={block_size}")
    blocks = x.float().reshape(rows, k // block_size, block_size)
    lo = blocks.amin(dim=2)
    hi = blocks.amax(dim=2)
    scale = (hi - lo) / 255.0
    flat = scale <= 0
    offset = torch.where(flat, lo, lo + 128.0 * scale)
    scale = torch.where(flat, torch.ones_like(scale), scale)
    q = torch.round((blocks - offset[..., None]) / scale[..., None]).clamp_(-128, 127)
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
    lo, hi = clamp_bounds(activation)
    return out.clamp(lo, hi)
