"""W8A8 GEMM quantized per K-block, in two schemes.

Asymmetric (MNN's), both operands x = s q + o per (row/column, K-block):

    out[M, N] = act( sum over K-blocks i of
                  s_A[m,i] s_B[n,i] (A_q B_q^T)_i + s_A[m,i] o_B[n,i] sumA[m,i]
                + o_A[m,i] (s_B[n,i] sumB[n,i] + block_size o_B[n,i])  + bias[n] )

Symmetric (block-INT8, DeepSeek-V3/R1 INT8 checkpoints as SGLang and vLLM run them): activations
x = s q per (row, K-block), weights w = s q per (128 rows, K-block):

    out[M, N] = act( sum over K-blocks i of  s_A[m,i] s_B[n // 128, i] (A_q B_q^T)_i  + bias[n] )

Weights are quantized once (W8A8Weight), activations online per call (quantize_activations, a
kernel). On sm90 the GEMM is one persistent kernel that promotes each K-block's exact int32
product into FP32 registers (W8A8Sm90Spec); the one-threadblock-per-(tile, K-block) kernels that
fold the blocks through a global partial sum (`chained`, `per_block`) are the reference path. On
sm80/sm75 (and on sm90 where the Sm90 kernels cannot store the output's rows) the `promote` kernels
(W8A8PromoteSpec) do the same promotion with mma.sync in qgemm's own 2.x-style threadblock MMA.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.compiler import is_compiling

from cutlass_gen.families.w8a8 import ActQuantSpec, W8A8GemmSpec, W8A8PromoteSpec, W8A8Sm90Spec

from .. import _checks, _plan_ops, reference
from .._abi import QgemmProblem
from .._runtime import cached, current_stream, get_kernel, plan_launch, sm_count, zeroed_workspace
from ..plan import Plan
from ..weight import NKWeight
from . import heuristics
from .gemv import W8A8GemvLauncher

BLOCK_SIZES = (32, 64, 128, 256)
INPUT_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
OUTPUT_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# "auto": the Sm90 kernels on sm90 where they take the output alignment, else "promote" (the Sm80/Sm75
# kernels); "chained" and "per_block" are the reference path.
LAUNCH_MODES = ("auto", "sm90", "promote", "chained", "per_block")
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
class W8A8Weight(NKWeight):
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

    @classmethod
    def from_float(cls, weight: torch.Tensor, block_size: int, scheme: str = "asymmetric") -> "W8A8Weight":
        """Quantize a float weight [N, K] (nn.Linear layout), on its device: per column and K-block
        (asymmetric) or per 128 rows and K-block (symmetric)."""
        _check_block_size(block_size)
        _checks.one_of("scheme", scheme, SCHEMES)
        _checks.tensor("weight", weight, (torch.float32, torch.float16, torch.bfloat16), ndim=2)
        _check_shape_nk("weight", *weight.shape, block_size)
        _checks.finite("weight", weight)
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
            _checks.finite(name, t)
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
        _checks.finite("weight_scale_inv", weight_scale_inv)
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
    _checks.index_limit(f"{name}.shape[0] (N)", n)
    _checks.index_limit(f"{name}.shape[1] (K)", k)


class _ActQuantLauncher(Plan):
    """The activation-quantization kernels (one per input dtype and scheme, loaded on demand)."""

    slots = ActQuantSpec.SLOTS

    def __init__(self):
        super().__init__()
        self._kernels: dict = {}  # (device index, dtype, symmetric) -> kernel
        self._launches: dict = {}  # (id(kernel), m, k, block_size) -> QgemmLaunch

    def _kernel(self, device: torch.device, dtype: torch.dtype, symmetric: bool):
        key = (device.index, dtype, symmetric)
        kernel = self._kernels.get(key)
        if kernel is None:
            target = _checks.target_sm(device, MIN_SM, "qgemm W8A8")
            kernel = self._kernels[key] = get_kernel(ActQuantSpec(INPUT_DTYPES[dtype], symmetric=symmetric), target)
        return kernel

    def quantize(self, x: torch.Tensor, block_size: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Launch on x (checked by the caller): q int8 [M, K] and the vectors [1 or 3, K/bs, M]
        (scale; offset, qsum). The hot path of plan(x): no views, no per-call kernel lookup."""
        m, k = x.shape
        device = x.device
        kernel = self._kernel(device, x.dtype, symmetric)
        blocks = k // block_size
        q = torch.empty((m, k), dtype=torch.int8, device=device)
        vecs = torch.empty((1 if symmetric else 3, blocks, m), dtype=torch.float32, device=device)
        base, step = vecs.data_ptr(), blocks * m * 4

        def fill(p: QgemmProblem):
            p.m, p.n, p.k = m, 0, k
            self._set(p, block_size=block_size, x=x.data_ptr(), q=q.data_ptr(), scale=base,
                      offset=None if symmetric else base + step, sum=None if symmetric else base + 2 * step,
                      ld_x=k, ld_q=k)

        launch = cached(self._launches, (id(kernel), m, k, block_size), lambda: self._plan(kernel, self._problem, fill))
        self._launch(kernel, launch, self._problem, fill, device_index=device.index)
        return q, vecs

    def __call__(self, x: torch.Tensor, block_size: int, symmetric: bool = False) -> QuantizedActivations:
        q, vecs = self.quantize(x, block_size, symmetric)
        if symmetric:
            return QuantizedActivations(q, vecs[0], None, None, block_size)
        return QuantizedActivations(q, vecs[0], vecs[1], vecs[2], block_size)


_act_quant = _ActQuantLauncher()


def quantize_activations(x: torch.Tensor, block_size: int, symmetric: bool = False) -> QuantizedActivations:
    """Quantize activations x [M, K] (float32/float16/bfloat16, CUDA, contiguous) per row
    and K-block on the GPU, on the current stream: asymmetric (x ~= scale * q + offset) or, with
    `symmetric`, x ~= scale * q (the block-INT8 scheme). A block with NaN or Inf gets a NaN scale,
    so the GEMM's outputs of that row are NaN. Eager calls only (under torch.compile / torch.export,
    call the plan on x)."""
    if is_compiling() and _plan_ops.tracing():
        raise _plan_ops.eager_only("qgemm.quantize_activations")
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
    _checks.index_limit("x.shape[0] (M)", m)
    return _act_quant(x, block_size, symmetric)


class W8A8GemmPlan(Plan):
    """A callable W8A8 linear layer: plan(x) quantizes x and returns act(x W^T + bias).

    On sm90 the GEMM runs qgemm's Sm90 kernels (W8A8Sm90Spec: each K-block's int32 product promoted
    into FP32 registers; the kernel per M from heuristics.w8a8_sm90_choice). `launch_mode` "chained"
    (one threadblock per (tile, K-block), the blocks of a tile folded in order through a global FP32
    partial sum) and "per_block" (one launch per K-block) are the literal form of the scheme, kept as
    a reference path and a benchmark column; they take the asymmetric scheme, FP32/FP16 output and
    the clamp activations. `launch_mode` "promote" (what "auto" picks on sm80/sm75, and on sm90 when
    N is not a multiple of 16 bytes of output) runs the Sm80/Sm75 kernels (W8A8PromoteSpec: mma.sync
    per K-block, promoted into FP32 registers; the kernel per M from heuristics.w8a8_promote_choice).

    Arguments are checked here and at each call before anything is launched. Calls may overlap on
    several streams and in several CUDA graphs: everything a launch writes besides its output
    (stream-K workspace, the chained path's tile locks and partial sum) is allocated per call from
    torch's caching allocator.
    """

    def __init__(self, weight: W8A8Weight, *, bias: torch.Tensor | None = None, activation: str = "none",
                 out_dtype: torch.dtype = torch.float16, launch_mode: str = "auto"):
        if not isinstance(weight, W8A8Weight):
            raise TypeError(f"weight must be a qgemm.W8A8Weight, got {type(weight).__name__}")
        _checks.one_of("weight.scheme", weight.scheme, SCHEMES)
        _checks.tensor("weight.qweight", weight.qweight, (torch.int8,), ndim=2)
        _checks.cuda_device("weight.qweight", weight.qweight)
        _check_block_size(weight.block_size)
        n, k = weight.qweight.shape
        _check_shape_nk("weight.qweight", n, k, weight.block_size)
        device = weight.device
        blocks = k // weight.block_size
        if weight.scheme == "symmetric":
            _check_vector("weight.scale", weight.scale, (-(-n // WEIGHT_BLOCK_N), blocks), device)
        else:
            for name in ("scale", "offset", "qsum"):
                _check_vector(f"weight.{name}", getattr(weight, name), (blocks, n), device)
        _checks.contiguous("weight.qweight", weight.qweight)
        if bias is not None:
            _checks.bias(bias, n, device)
            bias = bias.float().contiguous()
        _checks.one_of("activation", activation, reference.W8A8_ACTIVATIONS)
        if out_dtype not in OUTPUT_DTYPES:
            raise TypeError(f"out_dtype must be one of {tuple(OUTPUT_DTYPES)}, got {out_dtype}")
        _checks.one_of("launch_mode", launch_mode, LAUNCH_MODES)
        self.target_sm = _checks.target_sm(device, MIN_SM, "qgemm W8A8")
        decode_fused = launch_mode == "auto" and self.target_sm >= 80  # M <= 16: the fused decode kernel
        if launch_mode == "auto":
            sm90_fits = self.target_sm >= 90 and n % _sm90_row_elements(out_dtype) == 0
            launch_mode = "sm90" if sm90_fits else "promote"
        if launch_mode == "sm90":
            _check_sm90(self.target_sm, n, out_dtype)
        elif launch_mode != "promote":  # the promote kernels take every scheme, output and activation
            _check_chained(launch_mode, weight.scheme, out_dtype, activation, self.target_sm)

        self.weight = weight
        self.bias = bias
        self.activation = activation
        self.out_dtype = out_dtype
        self.launch_mode = launch_mode
        self.clamp = (0.0, 0.0) if activation == "silu" else reference.clamp_bounds(activation)
        self._epilogue = "silu" if activation == "silu" else "clamp"
        self._output = OUTPUT_DTYPES[out_dtype]
        super().__init__(device, sm_count(device))
        self._n, self._k = weight.n, weight.k
        self._blocks = blocks
        # v = sw sum(qw) + block_size ow per (block, column): the weight side of the asymmetric
        # promotion's second offset term, made once here instead of in every tile.
        self._weight_v = None
        if weight.scheme == "asymmetric" and launch_mode in ("sm90", "promote"):
            self._weight_v = (weight.scale * weight.qsum + weight.block_size * weight.offset).contiguous()
        self.slots = {"sm90": W8A8Sm90Spec, "promote": W8A8PromoteSpec}.get(launch_mode, W8A8GemmSpec).SLOTS
        self._problem = self._fixed_problem()
        self._gemv = W8A8GemvLauncher(self) if decode_fused and W8A8GemvLauncher.fits(self) else None
        self._launches: dict[tuple, object] = {}  # QgemmLaunch by (kernel, M, block_begin, slices) (chained)
        self._kernels: dict[int, object] = {}  # loaded kernel by M (chained)

    @property
    def scheme(self) -> str:
        return self.weight.scheme

    def _fixed_problem(self) -> QgemmProblem:
        """The slots that do not change between calls."""
        w = self.weight
        p = self._new_problem(w.n, w.k, with_sm_count=True)
        self._set(p, block_size=w.block_size, w=w.qweight.data_ptr(), sw=w.scale.data_ptr(),
                  bias=self.bias.data_ptr() if self.bias is not None else None,
                  ld_x=w.k, ld_w=w.k, ld_partial=w.n, ld_out=w.n, clamp_lo=self.clamp[0], clamp_hi=self.clamp[1])
        if w.scheme == "asymmetric":
            self._set(p, ow=w.offset.data_ptr(), sum_w=w.qsum.data_ptr())
        if self._weight_v is not None:
            self._set(p, v=self._weight_v.data_ptr())
        return p

    def kernel_spec(self, m: int):
        """The kernel this plan runs for M rows."""
        if self.launch_mode == "sm90":
            return self.choice(m).spec
        if self.launch_mode == "promote":
            return self.promote_choice(m).spec
        return heuristics.w8a8_spec(m, self.weight.n, self.weight.block_size, self._output, self.target_sm,
                                    self._sm_count)

    def kernel_specs(self, m_values) -> list:
        """Every kernel plan(x) launches for these M, with x in the output's dtype (qgemm.prebuild):
        the fused decode kernel where it takes the call, else act_quant and the GEMM."""
        x_dtype = {name: dtype for dtype, name in INPUT_DTYPES.items()}[self._output]
        specs = []
        for m in m_values:
            if self._gemv is not None and heuristics.w8a8_gemv_applies(m, self.target_sm, self._n, self._k):
                specs.append(self._gemv.choice(m, x_dtype).spec)
            else:
                specs += [ActQuantSpec(self._output, symmetric=self.scheme == "symmetric"), self.kernel_spec(m)]
        return specs

    def choice(self, m: int) -> heuristics.W8A8Sm90Choice:
        """The Sm90 kernel and scheduling for M rows (heuristics.w8a8_sm90_choice)."""
        return heuristics.w8a8_sm90_choice(m, self._n, self._k, self.weight.block_size, self.scheme, self._output,
                                           self._epilogue, self._sm_count)

    def promote_choice(self, m: int) -> heuristics.W8A8PromoteChoice:
        """The Sm80/Sm75 promote kernel and scheduling for M rows (heuristics.w8a8_promote_choice)."""
        return heuristics.w8a8_promote_choice(m, self._n, self._k, self.weight.block_size, self.scheme, self._output,
                                              heuristics.w8a8_promote_arch(self.target_sm), self._sm_count)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """act(x W^T + bias) [M, N] in out_dtype (into `out` if given) for x [M, K]. Under torch.compile
        / torch.export one custom op (qgemm/_plan_ops.py)."""
        if is_compiling() and _plan_ops.tracing():
            return _plan_ops.call(self, x, out)
        m = self._check_x(x, tuple(INPUT_DTYPES), self._k)
        _checks.index_limit("x.shape[0] (M)", m)
        if self._gemv is not None and heuristics.w8a8_gemv_applies(m, self.target_sm, self._n, self._k):
            return self._call_gemv(x, out, m)
        if self.launch_mode != "sm90":
            return self.gemm(_act_quant(x, self.weight.block_size, self.scheme == "symmetric"), out)
        if out is not None and not self._valid_out(out, m):
            self._check_out(out, m)
        q, vecs = _act_quant.quantize(x, self.weight.block_size, self.scheme == "symmetric")
        if out is None:
            out = torch.empty((m, self._n), dtype=self.out_dtype, device=self.device)
        step = vecs.shape[1] * m * 4
        base = vecs.data_ptr()
        offsets = (None, None) if self.scheme == "symmetric" else (base + step, base + 2 * step)
        self._launch_sm90(q.data_ptr(), base, *offsets, out, m, None)
        return out

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        return self._fake_gemm(x, out, tuple(INPUT_DTYPES), self._k, self._n, self.out_dtype)

    def _call_gemv(self, x: torch.Tensor, out: torch.Tensor | None, m: int, **kwargs) -> torch.Tensor:
        """The fused quantize + decode kernel (qgemm/w8a8_gemv.py); kwargs: its choice= and dump=."""
        if out is None:
            out = torch.empty((m, self._n), dtype=self.out_dtype, device=self.device)
        elif not self._valid_out(out, m):
            self._check_out(out, m)
        return self._gemv(x, out, m, **kwargs)

    def gemm(self, xq: QuantizedActivations, out: torch.Tensor | None = None, *, choice=None) -> torch.Tensor:
        """The GEMM alone, from activations already quantized by quantize_activations (with the
        weight's scheme). `choice` overrides the heuristic: a heuristics.W8A8Sm90Choice with
        launch_mode "sm90", a heuristics.W8A8PromoteChoice with "promote". Eager calls only, as
        quantize_activations: under torch.compile / torch.export call the plan itself, plan(x)."""
        if not self._valid_fast(xq, out):
            self._check_gemm_args(xq, out)  # raises, naming the argument
        m = xq.q.shape[0]
        if out is None:
            out = torch.empty((m, self._n), dtype=self.out_dtype, device=self.device)
        if self.launch_mode == "sm90":
            self._gemm_sm90(xq, out, m, choice)
        elif self.launch_mode == "promote":
            self._gemm_promote(xq, out, m, choice)
        else:
            if choice is not None:
                raise ValueError(f"choice selects a Sm90 or promote kernel; this plan's launch_mode is "
                                 f"{self.launch_mode!r}")
            self._gemm_chained(xq, out, m)
        return out

    def _gemm_sm90(self, xq, out, m: int, choice):
        offsets = (None, None) if xq.offset is None else (xq.offset.data_ptr(), xq.qsum.data_ptr())
        self._launch_sm90(xq.q.data_ptr(), xq.scale.data_ptr(), *offsets, out, m, choice)

    # The operand type of this plan's Sm90 kernels (W8A8Sm90Spec.operand): int8. A choice with FP8 operands
    # would read the int8 codes as FP8; benchmarks/diag_fp8_promote.py's subclass runs FP8 data that way.
    _operand = "s8"

    def _launch_sm90(self, q: int, scale: int, offset, qsum, out: torch.Tensor, m: int, choice):
        if choice is None:
            kernel, launch, choice = self._cached(m, lambda: self._prepare_sm90(m, None))
        else:
            kernel, launch, choice = self._prepare_sm90(m, choice)
        workspace = zeroed_workspace(launch.workspace_bytes, self.device)

        def fill(p: QgemmProblem):
            self._fill_sm90(p, m, choice)
            self._set(p, x=q, sx=scale, out=out.data_ptr())
            if offset is not None:
                self._set(p, ox=offset, sum_x=qsum)

        self._launch(kernel, launch, self._problem, fill, workspace.data_ptr() if workspace is not None else 0)

    def _fill_sm90(self, p: QgemmProblem, m: int, choice):
        p.m = m
        self._set(p, raster=choice.raster, swizzle=choice.swizzle, splits=choice.splits)

    def _prepare_sm90(self, m: int, choice):
        choice = choice or self.choice(m)
        if not isinstance(choice, heuristics.W8A8Sm90Choice):
            raise TypeError(f"choice must be a qgemm.heuristics.W8A8Sm90Choice, got {type(choice).__name__}")
        spec = choice.spec
        wanted = (self.weight.block_size, self.scheme, self._output, self._epilogue, self._operand)
        got = (spec.block_size, spec.scheme, spec.output, spec.epilogue, spec.operand)
        if got != wanted:
            raise ValueError(f"choice.spec must have (block_size, scheme, output, epilogue, operand) = {wanted} for "
                             f"this plan, got {got}")
        kernel = get_kernel(spec, self.target_sm)
        launch = self._plan(kernel, self._problem, lambda p: self._fill_sm90(p, m, choice))
        return kernel, launch, choice

    def _gemm_promote(self, xq, out, m: int, choice):
        """The Sm80/Sm75 promote kernel (W8A8PromoteSpec). A stream-K launch gets its FP32 partial
        buffer and zeroed tile counters from this call alone: calls in flight share nothing."""
        if xq.q.data_ptr() % 16:
            _checks.aligned("xq.q", xq.q, 16, "16-byte cp.async copies of its rows")
        if choice is None:
            kernel, launch, choice, ctas = self._cached(m, lambda: self._prepare_promote(m, None))
        else:
            kernel, launch, choice, ctas = self._prepare_promote(m, choice)
        partial = counters = 0
        if launch.workspace_bytes:
            # One allocation of this call: the FP32 partials of two tiles per CTA, then the tile
            # counters (zeroed; the partials need no clearing).
            tile_m, tile_n = choice.spec.tile[:2]
            partial_bytes = launch.grid[0] * 2 * tile_m * tile_n * 4
            split = torch.empty(partial_bytes + launch.workspace_bytes, dtype=torch.uint8, device=self.device)
            split[partial_bytes:].zero_()
            partial, counters = split.data_ptr(), split.data_ptr() + partial_bytes

        def fill(p: QgemmProblem):
            self._fill_promote(p, m, choice, ctas)
            self._set(p, x=xq.q.data_ptr(), sx=xq.scale.data_ptr(), partial=partial or None, out=out.data_ptr())
            if xq.offset is not None:
                self._set(p, ox=xq.offset.data_ptr(), sum_x=xq.qsum.data_ptr())

        self._launch(kernel, launch, self._problem, fill, counters)

    def _fill_promote(self, p: QgemmProblem, m: int, choice, ctas: int):
        p.m = m
        # the kernel's activation: clamp or SiLU
        self._set(p, activation=1 if self._epilogue == "silu" else 0, ctas=ctas, raster_group=choice.raster_group)

    def _prepare_promote(self, m: int, choice):
        choice = choice or self.promote_choice(m)
        if not isinstance(choice, heuristics.W8A8PromoteChoice):
            raise TypeError(f"choice must be a qgemm.heuristics.W8A8PromoteChoice with launch_mode 'promote', "
                            f"got {type(choice).__name__}")
        spec = choice.spec
        if (spec.scheme, spec.output) != (self.scheme, self._output) or not spec.supports_target(self.target_sm):
            raise ValueError(f"choice.spec must have (scheme, output) = {(self.scheme, self._output)} and an arch of "
                             f"at most {self.target_sm} for this plan, got {(spec.scheme, spec.output)} on "
                             f"sm{spec.arch}")
        # cp.async copies 16 bytes of the operands' rows and of the weight's vectors per column block.
        w = self.weight
        for name, t in (("weight.qweight", w.qweight), ("weight.scale", w.scale if w.scheme == "asymmetric" else None),
                        ("weight.offset", w.offset), ("weight.v", self._weight_v)):
            if t is not None:
                _checks.aligned(name, t, 16, "16-byte cp.async copies")
        kernel = get_kernel(spec, self.target_sm)
        with self._lock:
            p = self._problem
            self._fill_promote(p, m, choice, 0)
            launch, ctas = plan_launch(kernel, p, choice, self._sm_count, self._device_index, self.slots)
        return kernel, launch, choice, ctas

    def _gemm_chained(self, xq, out, m: int):
        # The FP32 running sum of the blocks: the output itself for FP32, else a buffer of this call.
        partial = out if self.out_dtype == torch.float32 else torch.empty((m, self._n), dtype=torch.float32,
                                                                          device=self.device)
        kernel = cached(self._kernels, m, lambda: get_kernel(self.kernel_spec(m), self.target_sm))
        stream = current_stream(self._device_index)
        with self._lock:
            p = self._problem
            p.m = m
            self._set(p, x=xq.q.data_ptr(), sx=xq.scale.data_ptr(), ox=xq.offset.data_ptr(), sum_x=xq.qsum.data_ptr(),
                      partial=partial.data_ptr(), out=out.data_ptr())
            if self.launch_mode == "chained":
                self._launch_chained(kernel, p, m, 0, self._blocks, stream)
            else:
                for block in range(self._blocks):
                    self._launch_chained(kernel, p, m, block, 1, stream)

    def _launch_chained(self, kernel, p: QgemmProblem, m: int, block_begin: int, slices: int, stream: int):
        self._set(p, block_begin=block_begin, slices=slices)
        launch = cached(self._launches, (kernel.name, m, block_begin, slices), lambda: kernel.plan(p))
        # The tile locks, zeroed for this launch alone: two calls in flight (two streams, two graphs)
        # never share them, so neither can wait on the other's counters.
        locks = zeroed_workspace(launch.workspace_bytes, self.device)
        kernel.launch(p, launch, self._device_index, stream, locks.data_ptr() if locks is not None else 0,
                      self._call)

    def _valid_fast(self, xq, out) -> bool:
        """One cheap test of everything _check_gemm_args checks, for the per-call hot path."""
        if type(xq) is not QuantizedActivations or xq.block_size != self.weight.block_size:
            return False
        if (xq.offset is None) != (self.scheme == "symmetric"):
            return False
        q = xq.q
        if q.dtype != torch.int8 or q.dim() != 2 or q.device != self.device or not q.is_contiguous():
            return False
        m = q.shape[0]
        if m == 0 or q.shape[1] != self._k or m > _checks.INT32_LIMIT:
            return False
        vec_shape = (self._blocks, m)
        vectors = (xq.scale,) if xq.offset is None else (xq.scale, xq.offset, xq.qsum)
        for t in vectors:
            if (t.dtype != torch.float32 or t.shape != vec_shape or t.device != self.device
                    or not t.is_contiguous()):
                return False
        return out is None or self._valid_out(out, m)

    def _valid_out(self, out, m: int) -> bool:
        return (type(out) is torch.Tensor and out.dtype == self.out_dtype and out.shape == (m, self._n)
                and out.device == self.device and out.is_contiguous() and out.data_ptr() % 16 == 0)

    def _check_out(self, out, m: int):
        self._check_gemm_out(out, m, self._n, self.out_dtype)
        _checks.aligned("out", out, 16, "16-byte output rows")
        raise AssertionError("_valid_out rejected an out that _check_out accepts")

    def _check_gemm_args(self, xq, out):
        if not isinstance(xq, QuantizedActivations):
            raise TypeError(f"xq must be a qgemm.QuantizedActivations, got {type(xq).__name__}")
        w = self.weight
        if xq.block_size != w.block_size:
            raise ValueError(f"xq.block_size must equal the weight's block_size={w.block_size}, got {xq.block_size}")
        if xq.scheme != self.scheme:
            raise ValueError(f"xq.scheme must be the weight's scheme {self.scheme!r}, got {xq.scheme!r}: quantize "
                             f"with quantize_activations(x, {w.block_size}, symmetric={self.scheme == 'symmetric'})")
        _checks.tensor("xq.q", xq.q, (torch.int8,), ndim=2)
        _checks.cuda_device("xq.q", xq.q, self.device)
        m = xq.q.shape[0]
        if m == 0 or xq.q.shape[1] != w.k:
            raise ValueError(f"xq.q must have shape (M >= 1, {w.k}), got {tuple(xq.q.shape)}")
        _checks.contiguous("xq.q", xq.q)
        names = ("scale",) if xq.offset is None else ("scale", "offset", "qsum")
        for name in names:
            t = getattr(xq, name)
            _checks.tensor(f"xq.{name}", t, (torch.float32,), ndim=2)
            _checks.shape(f"xq.{name}", t, (self._blocks, m))
            _checks.cuda_device(f"xq.{name}", t, self.device)
            _checks.contiguous(f"xq.{name}", t)
        _checks.index_limit("xq.q.shape[0] (M)", m)
        if out is not None:
            self._check_out(out, m)
        raise AssertionError("_valid_fast rejected arguments that _check_gemm_args accepts")


def _check_vector(name: str, t, shape: tuple, device):
    _checks.tensor(name, t, (torch.float32,), ndim=2)
    _checks.shape(name, t, shape)
    _checks.same_device(name, t, device)
    _checks.contiguous(name, t)


def _sm90_row_elements(out_dtype: torch.dtype) -> int:
    """Output elements per 16 bytes: the Sm90 kernels' TMA stores whole 16-byte rows, so N must be
    a multiple of this."""
    return 16 // torch.empty((), dtype=out_dtype).element_size()


def _check_sm90(target_sm: int, n: int, out_dtype: torch.dtype):
    if target_sm < 90:
        raise ValueError(f"launch_mode 'sm90' needs an sm90 GPU (H100/H200: wgmma and TMA), this device is a "
                         f"sm{target_sm} target")
    _checks.multiple("weight.shape[0] (N)", n, _sm90_row_elements(out_dtype),
                     f"the Sm90 kernels store 16-byte output rows of {out_dtype}; N a multiple of 4 runs with "
                     f"launch_mode='promote'")


def _check_chained(launch_mode: str, scheme: str, out_dtype, activation: str, target_sm: int):
    where = f"launch_mode={launch_mode!r}" + (f" (sm{target_sm} GPUs run no Sm90 kernel)" if target_sm < 90 else "")
    if scheme != "asymmetric":
        raise ValueError(f"weight.scheme must be 'asymmetric' with {where}, got {scheme!r}: the symmetric "
                         f"(block-INT8) scheme runs with launch_mode 'promote' (any GPU) or 'sm90'")
    if out_dtype not in (torch.float32, torch.float16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.float16 with {where}, got {out_dtype}")
    if activation not in reference.ACTIVATIONS:
        raise ValueError(f"activation must be one of {reference.ACTIVATIONS} with {where}, got {activation!r}")


def w8a8_linear(x: torch.Tensor, weight: W8A8Weight, bias: torch.Tensor | None = None, activation: str = "none",
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """One-shot form of W8A8GemmPlan (the plan is built on each call; keep a plan for repeated use)."""
    out_dtype = out_dtype or (torch.float32 if isinstance(x, torch.Tensor) and x.dtype == torch.float32
                              else torch.float16)
    return W8A8GemmPlan(weight, bias=bias, activation=activation, out_dtype=out_dtype)(x)
