"""The contenders qgemm's kernels are timed against: torch's own kernels (cuBLAS, cuBLASLt, cuDNN,
tinygemm) and the memory-bandwidth floor.

Each function returns a zero-argument callable doing one call of the peer on prepared operands, so
the benchmarks capture it into a CUDA graph the same way as qgemm's plans (timing.bench_graph*).
Preparing operands (padding, packing) happens here, outside the timed call. These are peers only:
no qgemm kernel uses them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .timing import copy_bandwidth  # noqa: F401  (the floor's bandwidth: measured, not the datasheet's)

# The half-precision dtypes a benchmark's activations and its cuBLAS/cuDNN peer take (`--dtype`).
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def cublas_matmul(x: torch.Tensor, w: torch.Tensor):
    """cuBLAS FP16/BF16 GEMM through torch.matmul: x [M, K] times w [N, K] transposed (the layout
    of an nn.Linear weight), in x's dtype."""
    wt = w.t()
    return lambda: torch.matmul(x, wt)


def int_mm(xq: torch.Tensor, wq: torch.Tensor):
    """torch._int_mm (cuBLASLt int8 x int8 -> int32), per-tensor: no block scales, so a lower bound
    on what a block-scaled INT8 GEMM could cost. wq is [N, K] row-major; _int_mm takes its transposed
    view. Raises RuntimeError for shapes cuBLASLt rejects (M <= 16)."""
    wt = wq.t()
    torch._int_mm(xq, wt)  # reject unsupported shapes now, not inside a graph capture
    return lambda: torch._int_mm(xq, wt)


def cublaslt_blockwise_fp8(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor,
                           out_dtype: torch.dtype = torch.bfloat16):
    """cuBLASLt's blockwise FP8 GEMM (DeepSeek-V3 scaling: 1x128 activation blocks, 128x128 weight
    blocks) through torch.nn.functional.scaled_mm. x_scale is qgemm's M-major [K/128, pitch] layout
    (pitch: M padded to 4), w_scale [ceil(N/128), K/128]; cuBLASLt wants token-major activation scales
    with M padded to 4 (the pitch) and the weight's K blocks padded to 4."""
    m = x_q.shape[0]
    pitch = x_scale.shape[1]
    a = x_q if pitch == m else torch.cat([x_q, x_q.new_zeros(pitch - m, x_q.shape[1])])
    kb = w_scale.shape[1]
    s = F.pad(w_scale, (0, -kb % 4)) if kb % 4 else w_scale
    scale_a = x_scale.t()  # [pitch, K/128], strides (1, pitch)
    # (AttributeError here, not inside a graph capture, on a torch without blockwise scaled_mm)
    scaled_mm, act_blocks, weight_blocks = F.scaled_mm, F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128
    wt, st = w_q.t(), s.t()
    return lambda: scaled_mm(a, wt, scale_a, act_blocks, st, weight_blocks, output_dtype=out_dtype)


def cublaslt_per_tensor_fp8(x_q: torch.Tensor, w_q: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16):
    """torch._scaled_mm with one scale per tensor (cuBLASLt, no block scaling): for scale."""
    one = torch.ones((), device=x_q.device)
    wt = w_q.t()
    return lambda: torch._scaled_mm(x_q, wt, scale_a=one, scale_b=one, out_dtype=out_dtype)


def tinygemm_int4(x_bf16: torch.Tensor, n: int, k: int, group: int = 128):
    """torch's int4 tinygemm (torch._weight_int4pack_mm), BF16 activations, group `group`, on random
    codes (its speed does not depend on the values)."""
    w_u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=x_bf16.device)
    packed = torch._convert_weight_to_int4pack(w_u8, 8)
    scale_zeros = torch.rand(k // group, n, 2, device=x_bf16.device, dtype=torch.bfloat16)
    return lambda: torch._weight_int4pack_mm(x_bf16, packed, group, scale_zeros)


def cudnn_conv2d(x_cl: torch.Tensor, w_cl: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
                 relu: bool = False):
    """cuDNN conv2d through F.conv2d on channels_last input and weight (set
    torch.backends.cudnn.benchmark = True first, as a tuned model would), optionally followed by
    ReLU (the fused epilogue qgemm's convolutions have)."""
    if relu:
        return lambda: F.relu(F.conv2d(x_cl, w_cl, bias, stride, padding))
    return lambda: F.conv2d(x_cl, w_cl, bias, stride, padding)


def floor_us(nbytes: int, bandwidth: float) -> float:
    """The memory-bandwidth floor in microseconds: the bytes a call must move (operands read once,
    output written once) over the measured copy bandwidth (timing.copy_bandwidth, bytes/s)."""
    return nbytes / bandwidth * 1e6
