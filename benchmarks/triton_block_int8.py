"""A Triton W8A8 block-INT8 GEMM of the design SGLang and vLLM ship for DeepSeek-V3/R1 INT8
checkpoints, written here as the benchmark's peer: one `tl.dot` (int8 x int8 -> int32) per 128-K
block, promoted into an FP32 accumulator with the block's activation scale (per row) times the
weight scale (per 128 rows): acc += dot.to(float32) * a_s[:, None] * b_s[None, :].

Inputs as qgemm's symmetric scheme holds them: xq int8 [M, K], x_scale float32 [K / 128, M]
(block-major), wq int8 [N, K], w_scale float32 [ceil(N / 128), K / 128]. Output FP16/BF16 [M, N].
Benchmark code only: not part of the qgemm package.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _block_int8_gemm(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                     k_blocks, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped raster: GROUP_M rows of tiles share their weight columns in L2.
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_m
    pid_n = (pid % (GROUP_M * tiles_n)) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :] * stride_bn + offs_k[:, None]
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, k_blocks):
        a = tl.load(a_ptrs, mask=mask_m[:, None], other=0)
        b = tl.load(b_ptrs, mask=mask_n[None, :], other=0)
        a_s = tl.load(as_ptr + kb * M + offs_m, mask=mask_m, other=0.0)
        b_s = tl.load(bs_ptr + (offs_n // 128) * k_blocks + kb, mask=mask_n, other=0.0)
        acc += tl.dot(a, b).to(tl.float32) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], c, mask=mask_m[:, None] & mask_n[None, :])


def config_for(m: int) -> dict:
    """Tile configuration by M (SGLang's defaults for block-INT8 are of this kind)."""
    if m <= 16:
        return dict(BLOCK_M=16, BLOCK_N=128, GROUP_M=1, num_warps=4, num_stages=4)
    if m <= 128:
        return dict(BLOCK_M=64, BLOCK_N=128, GROUP_M=8, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, GROUP_M=8, num_warps=8, num_stages=3)


def block_int8_gemm(xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                    out_dtype=torch.float16, out: torch.Tensor | None = None) -> torch.Tensor:
    m, k = xq.shape
    n = wq.shape[0]
    assert k % 128 == 0
    if out is None:
        out = torch.empty((m, n), dtype=out_dtype, device=xq.device)
    cfg = config_for(m)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _block_int8_gemm[grid](xq, wq, out, x_scale, w_scale, m, n, k, xq.stride(0), wq.stride(0), out.stride(0),
                           k // 128, BLOCK_K=128, **cfg)
    return out
