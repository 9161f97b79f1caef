"""W8A8 GEMM with per-K-block asymmetric quantization of both operands.

    out[M, N] = clamp( sum over K-blocks i of
                  s_A[m,i] s_B[n,i] (A_q B_q^T)_i + s_A[m,i] o_B[n,i] sumA[m,i]
                + o_A[m,i] (s_B[n,i] sumB[n,i] + block_size o_B[n,i])  + bias[n] )

Weights are quantized once (W8A8Weight), activations online per call
(quantize_activations, a kernel). The GEMM runs one threadblock per (tile, K-block)
and folds the blocks of a tile in order through CUTLASS's serial split-K semaphore:
one launch whatever the number of blocks (`chained`), or, for comparison, one
launch per block (`per_block`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from cutlass_gen.specs import ActQuantSpec

from . import _checks, heuristics, reference
from ._abi import QgemmProblem
from ._runtime import CallBuffers, cached, current_stream, get_kernel, sm_count, zeroed_workspace

BLOCK_SIZES = (32, 64, 128, 256)
INPUT_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
OUTPUT_DTYPES = {torch.float32: "f32", torch.float16: "f16"}
LAUNCH_MODES = ("chained", "per_block")
# CUTLASS's smallest legal alignments: 16 int8 per access along K, 4 floats per
# epilogue access along N. M is free.
N_ALIGNMENT = 4
K_ALIGNMENT = 16
MIN_SM = 75

def _check_block_size(block_size) -> int:
    if not isinstance(block_size, int) or block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
    return block_size


SCHEMES = ("asymmetric", "symmetric")
WEIGHT_BLOCK_N = reference.W8A8_WEIGHT_BLOCK_N  # symmetric weights: one scale per 128 rows x K-block


@dataclass(frozen=True)
class QuantizedActivations:
    """Activations quantized per (row, K-block): q [M, K] int8 and block-major float32 vectors
    [K / block_size, M]: scale, and for the asymmetric scheme offset and the sum of q
    (x ~= scale * q + offset). Symmetric activations (x ~= scale * q) have offset = qsum = None."""

    q: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    qsum: torch.Tensor | None
    block_size: int

    @property
    def scheme(self) -> str:
        return "symmetric" if self.offset is None else "asymmetric"


@dataclass(frozen=True)
class W8A8Weight:
    """Weights [N, K] (nn.Linear layout) quantized to int8 per K-block, in one of two schemes:

    * "asymmetric" (MNN's): per (column n, K-block) w ~= scale * q + offset; scale, offset and the
      sum of q are block-major float32 [K / block_size, N]. Activations are quantized the same way.
    * "symmetric" (block-INT8, as SGLang and vLLM run DeepSeek-V3/R1 INT8 checkpoints): w ~= scale * q
      per (128 rows, K-block); scale is DeepSeek's weight_scale_inv, float32 [ceil(N / 128),
      K / block_size] row-major; offset = qsum = None. Activations are quantized symmetrically per
      (row, K-block).
    """

    qweight: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    qsum: torch.Tensor | None
    block_size: int
    scheme: str = "asymmetric"

    @property
    def n(self) -> int:
        return self.qweight.shape[0]

    @property
    def k(self) -> int:
        return self.qweight.shape[1]

    @property
    def device(self) -> torch.device:
        return self.qweight.device

    @classmethod
    def from_float(cls, weight: torch.Tensor, block_size: int, scheme: str = "asymmetric") -> "W8A8Weight":
        """Quantize a float weight [N, K] (nn.Linear layout), on its device: per column and K-block
        (asymmetric) or per 128 rows and K-block (symmetric)."""
        _check_block_size(block_size)
        _checks.one_of("scheme", scheme, SCHEMES)
        _checks.tensor("weight", weight, (torch.float32, torch.float16, torch.bfloat16), ndim=2)
        _check_shape_nk("weight", *weight.shape, block_size)
        if scheme == "symmetric":
            q, scale_inv = reference.quantize_weight_blocks_symmetric(weight, block_size)
            return cls(q, scale_inv, None, None, block_size, "symmetric")
        q, scale, offset, qsum = reference.quantize_blocks(weight, block_size)
        return cls(q, scale, offset, qsum, block_size)

    @classmethod
    def from_quantized(cls, qweight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                       block_size: int) -> "W8A8Weight":
        """Wrap pre-quantized asymmetric weights: w[n, k] = scale[n, i] * qweight[n, k] + offset[n, i]
        with i = k // block_size; scale and offset are [N, K / block_size]. Column sums are computed here."""
        _check_block_size(block_size)
        _checks.tensor("qweight", qweight, (torch.int8,), ndim=2)
        n, k = qweight.shape
        _check_shape_nk("qweight", n, k, block_size)
        for name, t in (("scale", scale), ("offset", offset)):
            _checks.tensor(name, t, (torch.float32, torch.float16, torch.bfloat16), ndim=2)
            _checks.shape(name, t, (n, k // block_size))
            _checks.same_device(name, t, qweight.device)
        qsum = qweight.reshape(n, k // block_size, block_size).sum(dim=2, dtype=torch.int32)
        return cls(qweight.contiguous(), scale.float().t().contiguous(), offset.float().t().contiguous(),
                   qsum.float().t().contiguous(), block_size)

    @classmethod
    def from_block_int8(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
                        block_size: int = 128) -> "W8A8Weight":
        """Wrap a block-INT8 checkpoint pair (DeepSeek-V3/R1 INT8, SGLang/vLLM's
        `weight_block_size: [128, 128]`): weight int8 [N, K] and weight_scale_inv float
        [ceil(N / 128), K / block_size], w ~= weight_scale_inv * weight blockwise."""
        _check_block_size(block_size)
        _checks.tensor("weight", weight, (torch.int8,), ndim=2)
        n, k = weight.shape
        _check_shape_nk("weight", n, k, block_size)
        _checks.tensor("weight_scale_inv", weight_scale_inv, (torch.float32, torch.bfloat16, torch.float16), ndim=2)
        _checks.shape("weight_scale_inv", weight_scale_inv, (-(-n // WEIGHT_BLOCK_N), k // block_size))
        _checks.same_device("weight_scale_inv", weight_scale_inv, weight.device)
        return cls(weight.contiguous(), weight_scale_inv.float().contiguous(), None, None, block_size, "symmetric")

    def to(self, device) -> "W8A8Weight":
        move = (lambda t: None if t is None else t.to(device))
        return W8A8Weight(self.qweight.to(device), self.scale.to(device), move(self.offset), move(self.qsum),
                          self.block_size, self.scheme)

    def dequantize(self) -> torch.Tensor:
        """float64 [N, K]."""
        if self.scheme == "symmetric":
            return reference.dequantize_weight_blocks_symmetric(self.qweight, self.scale, self.block_size)
        return reference.dequantize_blocks(self.qweight, self.scale, self.offset, self.block_size)


def _check_shape_nk(name: str, n: int, k: int, block_size: int):
    if n <= 0 or k <= 0:
        raise ValueError(f"{name} must be non-empty, got shape ({n}, {k})")
    _checks.multiple(f"{name}.shape[0] (N)", n, N_ALIGNMENT, "CUTLASS epilogue alignment")
    _checks.multiple(f"{name}.shape[1] (K)", k, block_size, f"block_size={block_size}")


class _ActQuantLauncher:
    """The activation-quantization kernels (one per input dtype and scheme, loaded on demand)."""

    def __init__(self):
        self._call = CallBuffers()
        self._problem = QgemmProblem()
        self._lock = threading.Lock()  # the problem and Params buffers are shared by callers

    def __call__(self, x: torch.Tensor, block_size: int, symmetric: bool = False) -> QuantizedActivations:
        m, k = x.shape
        device = x.device
        target = _checks.target_sm(device, MIN_SM, "qgemm W8A8")
        kernel = get_kernel(ActQuantSpec(INPUT_DTYPES[x.dtype], symmetric=symmetric), target)
        blocks = k // block_size
        q = torch.empty((m, k), dtype=torch.int8, device=device)
        vecs = torch.empty((1 if symmetric else 3, blocks, m), dtype=torch.float32, device=device)
        stream = current_stream(device.index)
        with self._lock:
            p = self._problem
            p.m, p.n, p.k = m, 0, k
            p.ext[0] = block_size
            p.ptr[0], p.ptr[1], p.ptr[2] = x.data_ptr(), q.data_ptr(), vecs[0].data_ptr()
            p.ptr[3], p.ptr[4] = (None, None) if symmetric else (vecs[1].data_ptr(), vecs[2].data_ptr())
            p.ld[0], p.ld[1] = k, k
            launch = kernel.plan(p)
            kernel.launch(p, launch, device.index, stream, 0, self._call)
        if symmetric:
            return QuantizedActivations(q, vecs[0], None, None, block_size)
        return QuantizedActivations(q, vecs[0], vecs[1], vecs[2], block_size)


_act_quant = _ActQuantLauncher()


def quantize_activations(x: torch.Tensor, block_size: int, symmetric: bool = False) -> QuantizedActivations:
    """Quantize activations x [M, K] (float32/float16/bfloat16, CUDA, contiguous) per row
    and K-block on the GPU, on the current stream: asymmetric (x ~= scale * q + offset) or, with
    `symmetric`, x ~= scale * q (the block-INT8 scheme). A block with NaN or Inf gets a NaN scale,
    so the GEMM's outputs of that row are NaN."""
    _check_block_size(block_size)
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    _checks.tensor("x", x, tuple(INPUT_DTYPES), ndim=2)
    _checks.cuda_device("x", x)
    _checks.contiguous("x", x)
    m, k = x.shape
    if m == 0:
        raise ValueError("x must have at least one row, got shape (0, K)")
    _checks.multiple("x.shape[1] (K)", k, block_size, f"block_size={block_size}")
    return _act_quant(x, block_size, symmetric)


class W8A8GemmPlan:
    """A callable W8A8 linear layer: plan(x) quantizes x and returns clamp(x W^T + bias).

    Arguments are checked here and at each call before anything is launched. A plan
    owns the per-tile locks that order the K-block folds (every call leaves them at
    zero for the next), so one plan's calls must not run concurrently on two streams.
    """

    def __init__(self, weight: W8A8Weight, *, bias: torch.Tensor | None = None, activation: str = "none",
                 out_dtype: torch.dtype = torch.float16, launch_mode: str = "chained"):
        if not isinstance(weight, W8A8Weight):
            raise TypeError(f"weight must be a qgemm.W8A8Weight, got {type(weight).__name__}")
        _checks.tensor("weight.qweight", weight.qweight, (torch.int8,), ndim=2)
        _checks.cuda_device("weight.qweight", weight.qweight)
        _check_block_size(weight.block_size)
        n, k = weight.qweight.shape
        _check_shape_nk("weight.qweight", n, k, weight.block_size)
        device = weight.device
        for name in ("scale", "offset", "qsum"):
            t = getattr(weight, name)
            _checks.tensor(f"weight.{name}", t, (torch.float32,), ndim=2)
            _checks.shape(f"weight.{name}", t, (k // weight.block_size, n))
            _checks.same_device(f"weight.{name}", t, device)
            _checks.contiguous(f"weight.{name}", t)
        _checks.contiguous("weight.qweight", weight.qweight)
        if bias is not None:
            _checks.tensor("bias", bias, (torch.float32, torch.float16, torch.bfloat16), ndim=1)
            _checks.shape("bias", bias, (n,))
            _checks.same_device("bias", bias, device)
            bias = bias.float().contiguous()
        _checks.one_of("activation", activation, reference.ACTIVATIONS)
        if out_dtype not in OUTPUT_DTYPES:
            raise TypeError(f"out_dtype must be one of {tuple(OUTPUT_DTYPES)}, got {out_dtype}")
        _checks.one_of("launch_mode", launch_mode, LAUNCH_MODES)
        self.target_sm = _checks.target_sm(device, MIN_SM, "qgemm W8A8")

        self.weight = weight
        self.bias = bias
        self.activation = activation
        self.out_dtype = out_dtype
        self.launch_mode = launch_mode
        self.device = device
        self.clamp = reference.clamp_bounds(activation)
        self._output = OUTPUT_DTYPES[out_dtype]
        self._sm_count = sm_count(device)
        self._call = CallBuffers()
        self._problem = self._fixed_problem()
        self._locks: torch.Tensor | None = None
        self._partial: torch.Tensor | None = None
        self._partial_views: dict[int, torch.Tensor] = {}
        self._launches: dict[tuple, object] = {}  # QgemmLaunch by (kernel, M, block_begin, slices)
        self._kernels: dict[int, object] = {}  # loaded kernel by M
        self._n, self._k = weight.n, weight.k
        self._blocks = weight.k // weight.block_size
        self._device_index = device.index
        self._lock = threading.Lock()  # the problem and Params buffers are shared by callers

    def _fixed_problem(self) -> QgemmProblem:
        """The slots that do not change between calls."""
        w = self.weight
        p = QgemmProblem()
        p.n, p.k = w.n, w.k
        p.ext[0] = w.block_size
        p.ptr[1] = w.qweight.data_ptr()
        p.ptr[5], p.ptr[6], p.ptr[7] = w.scale.data_ptr(), w.offset.data_ptr(), w.qsum.data_ptr()
        p.ptr[8] = self.bias.data_ptr() if self.bias is not None else None
        p.ld[0] = p.ld[1] = w.k
        p.ld[2] = p.ld[3] = w.n
        p.scalar[0], p.scalar[1] = self.clamp
        p.sm_count = self._sm_count
        return p

    def kernel_spec(self, m: int):
        return heuristics.w8a8_spec(m, self.weight.n, self.weight.block_size, self._output, self.target_sm,
                                    self._sm_count)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        _checks.tensor("x", x, tuple(INPUT_DTYPES), ndim=2)
        _checks.cuda_device("x", x, self.device)
        _checks.contiguous("x", x)
        if x.shape[0] == 0 or x.shape[1] != self.weight.k:
            raise ValueError(f"x must have shape (M >= 1, {self.weight.k}), got {tuple(x.shape)}")
        return self.gemm(_act_quant(x, self.weight.block_size), out)

    def gemm(self, xq: QuantizedActivations, out: torch.Tensor | None = None) -> torch.Tensor:
        """The GEMM alone, from activations already quantized by quantize_activations."""
        if not self._valid_fast(xq, out):
            self._check_gemm_args(xq, out)  # raises, naming the argument
        m = xq.q.shape[0]
        if out is None:
            out = torch.empty((m, self._n), dtype=self.out_dtype, device=self.device)
        partial = out if self.out_dtype == torch.float32 else self._partial_buffer(m)

        kernel = cached(self._kernels, m, lambda: get_kernel(self.kernel_spec(m), self.target_sm))
        stream = current_stream(self._device_index)
        with self._lock:
            p = self._problem
            p.m = m
            p.ptr[0] = xq.q.data_ptr()
            p.ptr[2], p.ptr[3], p.ptr[4] = xq.scale.data_ptr(), xq.offset.data_ptr(), xq.qsum.data_ptr()
            p.ptr[9], p.ptr[10] = partial.data_ptr(), out.data_ptr()
            if self.launch_mode == "chained":
                self._launch(kernel, p, m, 0, self._blocks, stream)
            else:
                for block in range(self._blocks):
                    self._launch(kernel, p, m, block, 1, stream)
        return out

    def _valid_fast(self, xq, out) -> bool:
        """One cheap test of everything _check_gemm_args checks, for the per-call hot path."""
        if type(xq) is not QuantizedActivations or xq.block_size != self.weight.block_size:
            return False
        q = xq.q
        if q.dtype != torch.int8 or q.dim() != 2 or q.device != self.device or not q.is_contiguous():
            return False
        m = q.shape[0]
        if m == 0 or q.shape[1] != self._k:
            return False
        vec_shape = (self._blocks, m)
        for t in (xq.scale, xq.offset, xq.qsum):
            if (t.dtype != torch.float32 or t.shape != vec_shape or t.device != self.device
                    or not t.is_contiguous()):
                return False
        if out is not None and (out.dtype != self.out_dtype or out.shape != (m, self._n)
                                or out.device != self.device or not out.is_contiguous()):
            return False
        return True

    def _check_gemm_args(self, xq, out):
        if not isinstance(xq, QuantizedActivations):
            raise TypeError(f"xq must be a qgemm.QuantizedActivations, got {type(xq).__name__}")
        w = self.weight
        if xq.block_size != w.block_size:
            raise ValueError(f"xq.block_size must equal the weight's block_size={w.block_size}, got {xq.block_size}")
        _checks.tensor("xq.q", xq.q, (torch.int8,), ndim=2)
        _checks.cuda_device("xq.q", xq.q, self.device)
        m = xq.q.shape[0]
        if m == 0 or xq.q.shape[1] != w.k:
            raise ValueError(f"xq.q must have shape (M >= 1, {w.k}), got {tuple(xq.q.shape)}")
        _checks.contiguous("xq.q", xq.q)
        for name in ("scale", "offset", "qsum"):
            t = getattr(xq, name)
            _checks.tensor(f"xq.{name}", t, (torch.float32,), ndim=2)
            _checks.shape(f"xq.{name}", t, (self._blocks, m))
            _checks.cuda_device(f"xq.{name}", t, self.device)
            _checks.contiguous(f"xq.{name}", t)
        if out is not None:
            _checks.tensor("out", out, (self.out_dtype,), ndim=2)
            _checks.shape("out", out, (m, w.n))
            _checks.cuda_device("out", out, self.device)
            _checks.contiguous("out", out)
        raise AssertionError("_valid_fast rejected arguments that _check_gemm_args accepts")

    def _partial_buffer(self, m: int) -> torch.Tensor:
        """FP32 running sum for FP16 output; plan-owned (calls are stream-ordered, see class doc).
        Views are cached per M: making one costs several microseconds of the per-call budget."""
        need = m * self._n
        if self._partial is None or self._partial.numel() < need:
            self._partial = torch.empty(need, dtype=torch.float32, device=self.device)
            self._partial_views.clear()
        return cached(self._partial_views, m, lambda: self._partial[:need].view(m, self._n))

    def _launch(self, kernel, p: QgemmProblem, m: int, block_begin: int, slices: int, stream: int):
        p.ext[1], p.ext[2] = block_begin, slices
        launch = cached(self._launches, (kernel.name, m, block_begin, slices), lambda: kernel.plan(p))
        if launch.workspace_bytes and (self._locks is None or self._locks.numel() < launch.workspace_bytes):
            self._locks = zeroed_workspace(launch.workspace_bytes, self.device)
        kernel.launch(p, launch, self._device_index, stream,
                      self._locks.data_ptr() if launch.workspace_bytes else 0, self._call)


def w8a8_linear(x: torch.Tensor, weight: W8A8Weight, bias: torch.Tensor | None = None, activation: str = "none",
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """One-shot form of W8A8GemmPlan (the plan is built on each call; keep a plan for repeated use)."""
    out_dtype = out_dtype or (torch.float32 if isinstance(x, torch.Tensor) and x.dtype == torch.float32
                              else torch.float16)
    return W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype)(x)
