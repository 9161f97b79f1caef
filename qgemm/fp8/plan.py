"""FP8 GEMM with DeepSeek-V3 blockwise scaling (sm90).

    out[M, N] = bias + sum over 128-K blocks i of  sx[i, m] * sw[n // 128, i] * (X_i W_i^T)[m, n]

X is FP8 [M, K] with one FP32 scale per (token, 128-K block): `Fp8Activations`, made on the GPU
by `quantize_activations_fp8` (one pass) or wrapped from another quantizer's [M, K / 128]
scales. W is an FP8 weight [N, K] with one FP32 scale per 128 x 128 block, DeepSeek-V3's
`weight_scale_inv` [ceil(N / 128), K / 128]: `Fp8Weight`. The kernels are CUTLASS 3.x TMA +
WGMMA warp-specialized kernels that promote the FP8 products into FP32 after every 128-K
block; `heuristics.fp8_choice` picks one per M from the sm90 catalog.

Scale layouts (explicit, as the kernels read them):
  activation scales  float32 [K / 128, pitch], M-major, pitch = M rounded up to 4 (16-byte rows
                     for TMA); columns M.. are padding and never affect the output
  weight scales      float32 [ceil(N / 128), K / 128], row-major
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.compiler import is_compiling

from cutlass_gen.families.fp8 import Fp8ActQuantSpec, Fp8BlockwiseGemmSpec

from .. import _checks, _plan_ops, reference
from .._abi import QgemmProblem
from .._runtime import get_kernel, sm_count, zeroed_workspace
from ..plan import Plan
from ..weight import NKWeight
from . import heuristics

GROUP = reference.FP8_GROUP
FP8_DTYPES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
INPUT_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
OUTPUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
# TMA moves 16-byte rows: the output's rows (N x 2 bytes) must be whole 16-byte units.
N_ALIGNMENT = 8
SUPPORTED_CAPABILITY = (9, 0)
_WHAT = "qgemm FP8 blockwise GEMM"


def _check_device(device: torch.device) -> int:
    """sm_90a machine code runs on sm90 alone (wgmma and TMA): anything else is refused here."""
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) != SUPPORTED_CAPABILITY:
        raise ValueError(f"{_WHAT} needs an sm90 GPU (H100/H200: its kernels are sm_90a, wgmma and TMA); "
                         f"device {device} is sm{cap[0]}{cap[1]}")
    return 90


def _check_aligned(name: str, t: torch.Tensor):
    _checks.aligned(name, t, 16, "TMA")


def _check_k(name: str, k: int):
    if k <= 0 or k % GROUP:
        raise ValueError(f"{name} (K) must be a positive multiple of {GROUP} (the scale block), got {k}")


def _check_rows(name: str, m: int, k: int):
    """M and the activation scales' element count (K / 128 x pitch) are 32-bit ints in the kernels
    (M in the problem, the scale layout's index in the mainloop); N * K and M * N are not: strides
    and TMA coordinates are 64-bit there."""
    _checks.index_limit(f"{name} (M)", m)
    _checks.index_limit(f"activation scales for M={m}, K={k} (K / 128 x M rounded up to 4)",
                        (k // GROUP) * reference.fp8_scale_pitch(m))


@dataclass(frozen=True)
class Fp8Activations:
    """FP8 activations q [M, K] and their M-major scales [K / 128, pitch] (module docstring)."""

    q: torch.Tensor
    scale: torch.Tensor

    @property
    def m(self) -> int:
        return self.q.shape[0]

    @classmethod
    def from_row_scales(cls, q: torch.Tensor, scale: torch.Tensor) -> "Fp8Activations":
        """Wrap another quantizer's output: q FP8 [M, K] and scale float [M, K / 128]
        (x ~= scale[m, k // 128] * q[m, k], vLLM/SGLang's per_token_group_quant_fp8 layout)."""
        _checks.tensor("q", q, tuple(FP8_DTYPES), ndim=2)
        m, k = q.shape
        _check_k("q.shape[1]", k)
        _checks.tensor("scale", scale, (torch.float32,), ndim=2)
        _checks.shape("scale", scale, (m, k // GROUP))
        _checks.same_device("scale", scale, q.device)
        sx = torch.zeros((k // GROUP, reference.fp8_scale_pitch(m)), dtype=torch.float32, device=q.device)
        sx[:, :m] = scale.t()
        return cls(q.contiguous(), sx)

    def dequantize(self) -> torch.Tensor:
        """float64 [M, K]."""
        return reference.dequantize_fp8_groups(self.q, self.scale)


@dataclass(frozen=True)
class Fp8Weight(NKWeight):
    """FP8 weight [N, K] (nn.Linear layout) and its 128 x 128 block scales
    float32 [ceil(N / 128), K / 128], w ~= scale_inv * q blockwise."""

    qweight: torch.Tensor
    scale_inv: torch.Tensor

    @classmethod
    def from_float(cls, weight: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> "Fp8Weight":
        """Quantize a float weight [N, K] per 128 x 128 block (on its device)."""
        _checks.tensor("weight", weight, tuple(INPUT_DTYPES), ndim=2)
        if dtype not in FP8_DTYPES:
            raise TypeError(f"dtype must be one of {tuple(FP8_DTYPES)}, got {dtype}")
        _check_weight_shape("weight", *weight.shape)
        _checks.finite("weight", weight)  # a NaN would hide in its block's scale (README: NaN and Inf)
        return cls(*reference.quantize_fp8_blocks(weight, dtype))

    @classmethod
    def from_deepseek(cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor) -> "Fp8Weight":
        """Wrap a DeepSeek-V3 checkpoint pair: weight FP8 [N, K] and weight_scale_inv [ceil(N/128), K/128]."""
        _checks.tensor("weight", weight, tuple(FP8_DTYPES), ndim=2)
        n, k = weight.shape
        _check_weight_shape("weight", n, k)
        _checks.tensor("weight_scale_inv", weight_scale_inv, (torch.float32, torch.bfloat16, torch.float16), ndim=2)
        _checks.shape("weight_scale_inv", weight_scale_inv, (-(-n // GROUP), k // GROUP))
        _checks.same_device("weight_scale_inv", weight_scale_inv, weight.device)
        _checks.finite("weight", weight)  # FP8 NaN codes (e4m3fn has no Inf; e5m2 has both)
        _checks.finite("weight_scale_inv", weight_scale_inv)
        return cls(weight.contiguous(), weight_scale_inv.float().contiguous())

    def to(self, device) -> "Fp8Weight":
        return Fp8Weight(self.qweight.to(device), self.scale_inv.to(device))

    def dequantize(self) -> torch.Tensor:
        """float64 [N, K]."""
        return reference.dequantize_fp8_blocks(self.qweight, self.scale_inv)


def _check_weight_shape(name: str, n: int, k: int):
    if n <= 0:
        raise ValueError(f"{name} must have at least one row, got shape ({n}, {k})")
    _checks.index_limit(f"{name}.shape[0] (N)", n)
    _checks.index_limit(f"{name}.shape[1] (K)", k)
    _checks.multiple(f"{name}.shape[0] (N)", n, N_ALIGNMENT, "16-byte TMA rows of the output")
    _check_k(f"{name}.shape[1]", k)


class _QuantLauncher(Plan):
    """The activation quantization kernel (one per input and output dtype, loaded on demand)."""

    slots = Fp8ActQuantSpec.SLOTS

    def __call__(self, x: torch.Tensor, dtype: torch.dtype) -> Fp8Activations:
        m, k = x.shape
        device = x.device
        target = _check_device(device)
        kernel = get_kernel(Fp8ActQuantSpec(INPUT_DTYPES[x.dtype], FP8_DTYPES[dtype]), target)
        pitch = reference.fp8_scale_pitch(m)
        q = torch.empty((m, k), dtype=dtype, device=device)
        sx = torch.empty((k // GROUP, pitch), dtype=torch.float32, device=device)
        if pitch > m:
            sx[:, m:].zero_()  # padding: never read for the output, but kept finite

        def fill(p: QgemmProblem):
            p.m, p.n, p.k = m, 0, k
            self._set(p, x=x.data_ptr(), q=q.data_ptr(), sx=sx.data_ptr(), ld_x=k, ld_q=k, ld_sx=pitch)

        launch = self._plan(kernel, self._problem, fill)
        self._launch(kernel, launch, self._problem, fill, device_index=device.index)
        return Fp8Activations(q, sx)


_quantize = _QuantLauncher()


def quantize_activations_fp8(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> Fp8Activations:
    """Quantize x [M, K] (float32/float16/bfloat16, CUDA, contiguous) per token and 128-K group to
    FP8 on the GPU, on the current stream: scale = max(|x|, 1e-10) / fp8_max, q = fp8(x / scale).
    Eager calls only (under torch.compile / torch.export, call the plan on x)."""
    if is_compiling() and _plan_ops.tracing():
        raise _plan_ops.eager_only("qgemm.quantize_activations_fp8")
    _checks.tensor("x", x, tuple(INPUT_DTYPES), ndim=2)
    _checks.cuda_device("x", x)
    _checks.contiguous("x", x)
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be one of {tuple(FP8_DTYPES)}, got {dtype}")
    m, k = x.shape
    if m == 0:
        raise ValueError("x must have at least one row, got shape (0, K)")
    _check_k("x.shape[1]", k)
    _check_rows("x.shape[0]", m, k)
    _check_aligned("x", x)
    return _quantize(x, dtype)


class Fp8GemmPlan(Plan):
    """A callable FP8 blockwise linear layer: plan(x) quantizes x [M, K] and returns x W^T + bias.

    Arguments are checked at construction and at each call before anything is launched. Stream-K
    kernels get a freshly zeroed workspace per call from torch's allocator, so calls may overlap
    on several streams and be captured in CUDA graphs.
    """

    slots = Fp8BlockwiseGemmSpec.SLOTS

    def __init__(self, weight: Fp8Weight, *, bias: torch.Tensor | None = None,
                 out_dtype: torch.dtype = torch.bfloat16, act_dtype: torch.dtype = torch.float8_e4m3fn):
        if not isinstance(weight, Fp8Weight):
            raise TypeError(f"weight must be a qgemm.Fp8Weight, got {type(weight).__name__}")
        _checks.tensor("weight.qweight", weight.qweight, tuple(FP8_DTYPES), ndim=2)
        _checks.cuda_device("weight.qweight", weight.qweight)
        n, k = weight.qweight.shape
        _check_weight_shape("weight.qweight", n, k)
        _checks.contiguous("weight.qweight", weight.qweight)
        _check_aligned("weight.qweight", weight.qweight)
        device = weight.device
        _checks.tensor("weight.scale_inv", weight.scale_inv, (torch.float32,), ndim=2)
        _checks.shape("weight.scale_inv", weight.scale_inv, (-(-n // GROUP), k // GROUP))
        _checks.same_device("weight.scale_inv", weight.scale_inv, device)
        _checks.contiguous("weight.scale_inv", weight.scale_inv)
        if bias is not None:
            _checks.bias(bias, n, device)
            bias = bias.float().contiguous()
        if out_dtype not in OUTPUT_DTYPES:
            raise TypeError(f"out_dtype must be one of {tuple(OUTPUT_DTYPES)}, got {out_dtype}")
        if act_dtype not in FP8_DTYPES:
            raise TypeError(f"act_dtype must be one of {tuple(FP8_DTYPES)}, got {act_dtype}")
        if act_dtype == torch.float8_e5m2 and weight.qweight.dtype == torch.float8_e5m2:
            raise TypeError("act_dtype and the weight cannot both be float8_e5m2: WGMMA takes e5m2 x e5m2 but "
                            "qgemm builds no such catalog kernel; quantize one of them to float8_e4m3fn")
        self.target_sm = _check_device(device)
        super().__init__(device, sm_count(device))

        self.weight = weight
        self.bias = bias
        self.out_dtype = out_dtype
        self.act_dtype = act_dtype
        self._n, self._k = n, k
        self._output = OUTPUT_DTYPES[out_dtype]
        self._act = FP8_DTYPES[act_dtype]
        self._weight = FP8_DTYPES[weight.qweight.dtype]
        self._problem = self._fixed_problem()

    def _fixed_problem(self) -> QgemmProblem:
        p = self._new_problem(self._n, self._k, with_sm_count=True)
        self._set(p, w=self.weight.qweight.data_ptr(), sw=self.weight.scale_inv.data_ptr(),
                  bias=self.bias.data_ptr() if self.bias is not None else None, ld_x=self._k, ld_w=self._k,
                  ld_out=self._n)
        return p

    def choice(self, m: int) -> heuristics.Fp8Choice:
        """The kernel and scheduling this plan uses for M rows."""
        choice = heuristics.fp8_choice(m, self._n, self._k, self._output, self._sm_count)
        if (choice.spec.act, choice.spec.weight) != (self._act, self._weight):
            spec = choice.spec
            choice = heuristics.Fp8Choice(
                type(spec)(spec.tile, spec.cluster, spec.schedule, spec.swap_ab, spec.output, spec.scheduler,
                           act=self._act, weight=self._weight), choice.raster, choice.swizzle, choice.splits)
        return choice

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x W^T + bias [M, N] in out_dtype (into `out` if given) for x [M, K]. Under torch.compile /
        torch.export one custom op (qgemm/_plan_ops.py)."""
        if is_compiling() and _plan_ops.tracing():
            return _plan_ops.call(self, x, out)
        m = self._check_x(x, tuple(INPUT_DTYPES), self._k)
        _check_rows("x.shape[0]", m, self._k)
        _check_aligned("x", x)
        return self.gemm(_quantize(x, self.act_dtype), out)

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        y = self._fake_gemm(x, out, tuple(INPUT_DTYPES), self._k, self._n, self.out_dtype)
        _check_rows("x.shape[0]", x.shape[0], self._k)
        return y

    def gemm(self, xa: Fp8Activations, out: torch.Tensor | None = None, *, choice=None) -> torch.Tensor:
        """The GEMM alone, from activations already quantized. `choice` (a heuristics.Fp8Choice)
        overrides the heuristic, for tuning. Eager calls only, as quantize_activations_fp8: under
        torch.compile / torch.export call the plan itself, plan(x)."""
        self._check_gemm_args(xa, out)
        m = xa.q.shape[0]
        if out is None:
            out = torch.empty((m, self._n), dtype=self.out_dtype, device=self.device)
        else:
            _check_aligned("out", out)
        if choice is None:
            kernel, launch, choice = self._cached(m, lambda: self._prepare(m, None))
        else:
            kernel, launch, choice = self._prepare(m, choice)
        workspace = zeroed_workspace(launch.workspace_bytes, self.device)
        self._launch(kernel, launch, self._problem, lambda p: self._fill(p, m, xa, out, choice),
                     workspace.data_ptr() if workspace is not None else 0)
        return out

    def _fill(self, p: QgemmProblem, m: int, xa: Fp8Activations | None, out, choice):
        p.m = m
        if xa is not None:
            self._set(p, x=xa.q.data_ptr(), sx=xa.scale.data_ptr(), out=out.data_ptr())
        self._set(p, ld_sx=reference.fp8_scale_pitch(m) if xa is None else xa.scale.shape[1],
                  raster=choice.raster, swizzle=choice.swizzle, splits=choice.splits)

    def _prepare(self, m: int, choice):
        choice = choice or self.choice(m)
        kernel = get_kernel(choice.spec, self.target_sm)
        launch = self._plan(kernel, self._problem, lambda p: self._fill(p, m, None, None, choice))
        return kernel, launch, choice

    def _check_gemm_args(self, xa, out):
        if type(xa) is not Fp8Activations:
            raise TypeError(f"xa must be a qgemm.Fp8Activations, got {type(xa).__name__}")
        _checks.tensor("xa.q", xa.q, (self.act_dtype,), ndim=2)
        _checks.cuda_device("xa.q", xa.q, self.device)
        m = xa.q.shape[0]
        if m == 0 or xa.q.shape[1] != self._k:
            raise ValueError(f"xa.q must have shape (M >= 1, {self._k}), got {tuple(xa.q.shape)}")
        _check_rows("xa.q.shape[0]", m, self._k)
        _checks.contiguous("xa.q", xa.q)
        _check_aligned("xa.q", xa.q)
        _checks.tensor("xa.scale", xa.scale, (torch.float32,), ndim=2)
        rows, pitch = xa.scale.shape
        if rows != self._k // GROUP or pitch < m or pitch % 4:
            raise ValueError(f"xa.scale must have shape ({self._k // GROUP}, P) with P >= M={m} and a multiple "
                             f"of 4 (M-major scales, see qgemm.fp8), got {tuple(xa.scale.shape)}")
        _checks.cuda_device("xa.scale", xa.scale, self.device)
        _checks.contiguous("xa.scale", xa.scale)
        _check_aligned("xa.scale", xa.scale)
        if out is not None:
            self._check_gemm_out(out, m, self._n, self.out_dtype)


def fp8_linear(x: torch.Tensor, weight: Fp8Weight, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """One-shot form of Fp8GemmPlan (the plan is built on each call; keep a plan for repeated use)."""
    return Fp8GemmPlan(weight, bias=bias, out_dtype=out_dtype)(x)
