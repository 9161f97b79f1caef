"""FpA x IntB: FP16/BF16 activations x INT4/INT8 weights (W4A16, W8A16), FP32 accumulation.

    out[M, N] = act(x[M, K] @ W[K, N] + bias),  W[k, n] = (u[k, n] - zero[k // g, n]) * scale[k // g, n]

u are unsigned codes (signed weights carry the bias 2**(bits-1)); zero is per (group, column),
or the symmetric 2**(bits-1) when the weight has none; g is the group size along K (32, 64, 128,
256, or K for one scale per output channel). The weight is packed once into the layout of
cutlass_gen/families/fpaintb_layout.py (`IntBWeight`); `FpAIntBPlan` picks a kernel per M
(qgemm.fpaintb.heuristics.fpaintb_choice): the small-M tensor-core kernel reading codes straight from
global memory, the tiled GEMM (shared-memory pipeline, split-K), or, for large M, dequantization
into FP16/BF16 followed by cuBLAS. On sm90 (H100/H200), from heuristics.FPAINTB_SM90_MIN_M rows,
the plan runs the Sm90 kernel instead (FpAIntBSm90Spec: CUTLASS's mixed-input WGMMA collective) on a
second copy of the weight in the Sm90 layout (cutlass_gen/families/fpaintb_layout.py Sm90WeightLayout), made
once at construction; `sm90=False` opts out (no second copy).

Layouts (explicit, as the kernels read them):
  packed   uint8 [N / interleave, K * interleave * bits / 8]   (interleave 4 for int4, 2 for int8)
  scale    activation dtype [K / g, N], row-major
  zero     uint8 [K / g, N] or None
  perm     int64 [K] or None: GPTQ act-order; the plan computes x[:, perm] @ W
  Sm90     uint8 [ceil(N / 128) * 128 * K * bits / 8] signed codes in the Sm90 layout, and
           zero' = scale * (2**(bits-1) - zero) [K / g, N] in the activation dtype (fpaintb_pack)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.compiler import is_compiling

from cutlass_gen.families.fpaintb_layout import layout
from cutlass_gen.families.fpaintb import FPAINTB_SLOTS, FpAIntBDequantSpec, FpAIntBSm90Spec

from .. import _checks, _plan_ops
from .._abi import QgemmProblem
from .._runtime import current_stream, get_kernel, plan_launch, sm_count
from ..plan import Plan
from . import heuristics, wq_format
from . import pack as fpaintb_pack

ACT_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
GROUP_SIZES = (32, 64, 128, 256)
ACTIVATIONS = {"none": 0, "relu": 1, "silu": 2, "gelu": 3}  # the kernels' epilogue codes
_TORCH_ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}  # dequantize path
_WHAT = "qgemm FpA x IntB GEMM"


class StreamKBuffers:
    """What a launch whose tiles are split between CTAs (stream-K) needs besides its operands: an
    FP32 partial buffer of two tiles per CTA and the tile counters, which every launch leaves zero.

    Both come from one allocation per call, the counters zeroed on the call's stream (one small
    memset). Nothing is kept between calls:
    * a launch captured into a CUDA graph replays with the pointers it captured, and counters shared
      with another graph (or with eager calls) would be counted by both when the two replay at once
      on two streams; each CTA would then wait for tiles counted by the other launch, a hang
      (issue 18);
    * torch.compile's CUDA-graph trees run a first (warm-up) call of each new shape eagerly with its
      allocations in the graph's private pool, and refuse a call that leaves a tensor of that pool
      alive ("tensors in the cudagraph pool not tracked as outputs"): counters cached per stream,
      as this class kept them before, failed test_nn_gpu's reduce-overhead test on an H100.
    """

    def __init__(self, device: torch.device):
        self.device = device

    def get(self, launch, tile: tuple, stream: int) -> tuple[torch.Tensor | None, int]:
        """(partial buffer, counters pointer) for this launch, (None, 0) when no tile is split. Keep
        the buffer referenced until the launch is issued (the view also holds the counters)."""
        if launch.workspace_bytes == 0:
            return None, 0
        tile_m, tile_n = tile[:2]
        partial_floats = launch.grid[0] * 2 * tile_m * tile_n
        counter_floats = -(-int(launch.workspace_bytes) // 4)
        buffer = torch.empty(partial_floats + counter_floats, dtype=torch.float32, device=self.device)
        counters = buffer[partial_floats:]
        counters.zero_()
        return buffer[:partial_floats], counters.data_ptr()


def check_act_dtype(act_dtype: torch.dtype, device: torch.device, what: str) -> int:
    """The FpA x IntB kernels' activation type on `device`: float16, or bfloat16 from sm80 on.
    Returns the device's target SM."""
    if act_dtype not in ACT_DTYPES:
        raise TypeError(f"act_dtype must be one of {tuple(ACT_DTYPES)}, got {act_dtype}")
    target_sm = _checks.target_sm(device, 75, what)
    if act_dtype == torch.bfloat16 and target_sm < 80:
        raise ValueError(f"act_dtype bfloat16 needs sm80 or later (Turing has no BF16 tensor cores); "
                         f"device {device} is sm75: use float16")
    return target_sm


def _check_group_size(group_size: int, k: int):
    if group_size != k and group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES} or K={k} (per output channel), got {group_size}")
    if k % group_size:
        raise ValueError(f"group_size {group_size} must divide K={k}")


@dataclass(frozen=True)
class IntBWeight:
    """A weight packed for the FpA x IntB kernels (module docstring for the layouts)."""

    packed: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    bits: int
    group_size: int
    k: int
    n: int
    perm: torch.Tensor | None = None

    @classmethod
    def from_int_weight(cls, w: wq_format.IntWeight) -> "IntBWeight":
        """Pack a logical weight (qgemm.wq_format.IntWeight: codes [K, N], scales, zeros)."""
        if not isinstance(w, wq_format.IntWeight):
            raise TypeError(f"w must be a qgemm.wq_format.IntWeight, got {type(w).__name__}")
        k, n = w.u.shape
        _check_group_size(w.group_size, k)
        packed = fpaintb_pack.pack(w.u.contiguous(), w.bits)
        zero = w.zero.contiguous() if w.zero is not None else None
        return cls(packed, w.scale.contiguous(), zero, w.bits, w.group_size, k, n, w.perm)

    @classmethod
    def from_float(cls, weight: torch.Tensor, bits: int = 4, group_size: int = 128, symmetric: bool = True,
                   scale_dtype: torch.dtype | None = None) -> "IntBWeight":
        """Round-to-nearest quantization of an nn.Linear weight [N, K] (out x in features).
        group_size -1 means one scale per output channel."""
        _checks.tensor("weight", weight, (torch.float16, torch.bfloat16, torch.float32), ndim=2)
        n, k = weight.shape
        lay = layout(bits)
        fpaintb_pack.check_packable("weight", k, n, lay)
        if group_size != -1:
            _check_group_size(group_size, k)
        return cls.from_int_weight(wq_format.quantize_rtn(weight, bits, group_size, symmetric, scale_dtype))

    @classmethod
    def from_signed(cls, q: torch.Tensor, scale: torch.Tensor, bits: int = 8) -> "IntBWeight":
        """Signed symmetric codes q int8 [N, K] with w = q * scale (scale [K/g, N] or [N]), the
        usual W8A16 checkpoint form; the bias 2**(bits-1) that makes them unsigned is added."""
        return cls.from_int_weight(wq_format.from_signed(q, scale, bits))

    @classmethod
    def from_gptq(cls, qweight, qzeros, scales, g_idx=None, bits: int = 4, zero_offset: int = 1) -> "IntBWeight":
        """GPTQ checkpoint tensors (qweight int32 [K*bits/32, N], qzeros, scales [K/g, N], g_idx);
        act-order g_idx becomes `perm`. See qgemm.wq_format.from_gptq for the definition."""
        return cls.from_int_weight(wq_format.from_gptq(qweight, qzeros, scales, g_idx, bits, zero_offset))

    @classmethod
    def from_awq(cls, qweight, qzeros, scales) -> "IntBWeight":
        """AutoAWQ GEMM checkpoint tensors (qweight int32 [K, N/8] in AWQ's nibble order, qzeros, scales)."""
        return cls.from_int_weight(wq_format.from_awq(qweight, qzeros, scales))

    @property
    def device(self) -> torch.device:
        return self.packed.device

    def to(self, device) -> "IntBWeight":
        move = (lambda t: t.to(device) if t is not None else None)  # noqa: E731
        return IntBWeight(move(self.packed), move(self.scale), move(self.zero), self.bits, self.group_size,
                          self.k, self.n, move(self.perm))

    def codes(self) -> torch.Tensor:
        """The unsigned codes u [K, N] in stored row order (unpacked)."""
        return fpaintb_pack.unpack(self.packed, self.bits, self.k, self.n)

    def dequantize(self) -> torch.Tensor:
        """float64 [K, N] in the original row order (act-order undone): x @ this == the layer."""
        return wq_format.IntWeight(self.codes(), self.scale, self.zero, self.bits, self.group_size,
                                   self.perm).dequantize()


def _check_weight(weight: IntBWeight):
    if not isinstance(weight, IntBWeight):
        raise TypeError(f"weight must be a qgemm.IntBWeight, got {type(weight).__name__}")
    lay = layout(weight.bits)
    k, n = weight.k, weight.n
    fpaintb_pack.check_packable("weight", k, n, lay)
    _checks.index_limit("weight.k", k)  # the kernels take M, N, K as 32-bit ints (addresses are 64-bit)
    _checks.index_limit("weight.n", n)
    _check_group_size(weight.group_size, k)
    _checks.tensor("weight.packed", weight.packed, (torch.uint8,), ndim=2)
    _checks.cuda_device("weight.packed", weight.packed)
    _checks.shape("weight.packed", weight.packed, lay.packed_shape(k, n))
    _checks.contiguous("weight.packed", weight.packed)
    _checks.aligned("weight.packed", weight.packed, 16, "16-byte loads")
    device = weight.packed.device
    _checks.tensor("weight.scale", weight.scale, tuple(ACT_DTYPES), ndim=2)
    _checks.shape("weight.scale", weight.scale, (k // weight.group_size, n))
    _checks.same_device("weight.scale", weight.scale, device)
    if weight.zero is not None:
        _checks.tensor("weight.zero", weight.zero, (torch.uint8,), ndim=2)
        _checks.shape("weight.zero", weight.zero, (k // weight.group_size, n))
        _checks.same_device("weight.zero", weight.zero, device)
    if weight.perm is not None:
        _checks.tensor("weight.perm", weight.perm, (torch.int64, torch.int32), ndim=1)
        _checks.shape("weight.perm", weight.perm, (k,))
        _checks.same_device("weight.perm", weight.perm, device)


def sm90_streamk_flag_bytes(m: int, n: int, spec: FpAIntBSm90Spec) -> int:
    """An upper bound on the flag bytes at the end of a Sm90 stream-K workspace.

    CUTLASS's Sm90 stream-K workspace (cutlass/gemm/kernel/tile_scheduler_params.h) is [FP32 partial
    tiles | flags], each part rounded up to 128 bytes; the flags are one 32-bit word per consumer warp
    group per split output tile and must be zero at every launch, while the partials are written before
    they are read. The scheduler counts tiles on a grid rounded up to its swizzle (at most 8), and
    cooperative kernels have two consumer warp groups."""
    tile_m, tile_n = spec.tile
    tiles = -(-(-(-n // tile_m)) // 8) * 8 * (-(-(-(-m // tile_n)) // 8) * 8)
    return tiles * 2 * 4 + 128


def _sm90_workspace(nbytes: int, m: int, n: int, spec: FpAIntBSm90Spec, device) -> torch.Tensor | None:
    """The stream-K workspace of one launch with its flags zeroed (a few KB, not the partials' MBs)."""
    if nbytes == 0:
        return None
    workspace = torch.empty(int(nbytes), dtype=torch.uint8, device=device)
    workspace[-min(int(nbytes), sm90_streamk_flag_bytes(m, n, spec)):].zero_()
    return workspace


class FpAIntBPlan(Plan):
    """A callable weight-only quantized linear layer: plan(x) = act(x @ W + bias) for x [M, K]
    float16/bfloat16 on the weight's device, on torch's current stream.

    Everything is checked at construction and on each call before any launch.

    On an sm90 GPU, M >= heuristics.FPAINTB_SM90_MIN_M runs the Sm90 kernel (heuristics.fpaintb_sm90_applies:
    group size a multiple of 64 or K, of 128 or K below FPAINTB_SM90_NARROW_MAX_M + 1 rows); the plan then
    holds a second copy of the weight in the Sm90 layout. `sm90=False` keeps every M on the Sm80 kernels
    and makes no copy."""

    slots = FPAINTB_SLOTS  # the Sm80/Sm75 kernels'; the Sm90 kernel's problem has FpAIntBSm90Spec.SLOTS

    def __init__(self, weight: IntBWeight, *, act_dtype: torch.dtype = torch.float16,
                 bias: torch.Tensor | None = None, activation: str = "none", sm90: bool = True):
        if not isinstance(sm90, bool):
            raise TypeError(f"sm90 must be a bool, got {type(sm90).__name__}")
        _check_weight(weight)
        device = weight.device
        self.target_sm = check_act_dtype(act_dtype, device, _WHAT)
        _checks.one_of("activation", activation, tuple(ACTIVATIONS))
        if bias is not None:
            _checks.bias(bias, weight.n, device)
            bias = bias.to(act_dtype).contiguous()
        self.weight = weight
        self.act_dtype = act_dtype
        self.bias = bias
        self.activation = activation
        self._act = ACT_DTYPES[act_dtype]
        self._arch = 75 if self.target_sm == 75 else 80
        # The kernels read scales in the activation type.
        self._scale = weight.scale.to(act_dtype).contiguous()
        self._perm = weight.perm.long() if weight.perm is not None else None
        super().__init__(device, sm_count(device))
        self._split = StreamKBuffers(device)
        self._problem = self._fixed_problem()
        # The Sm90 path: on sm90 with a group size its 64-deep K tiles can read (else never used). Above
        # FPAINTB_SM90_NARROW_MAX_M rows every tile has that form; below, only weights in 128-deep K tiles.
        self.sm90 = (sm90 and self.target_sm == 90
                     and heuristics.fpaintb_sm90_applies(heuristics.FPAINTB_SM90_NARROW_MAX_M + 1, weight.n,
                                                         weight.k, weight.group_size, 90))
        self._sm90_problem = self._fixed_sm90_problem() if self.sm90 else None

    def _fixed_problem(self) -> QgemmProblem:
        w = self.weight
        p = self._new_problem(w.n, w.k)
        self._set(p, w=w.packed.data_ptr(), scale=self._scale.data_ptr(),
                  zero=w.zero.data_ptr() if w.zero is not None else None, ld_w=w.packed.shape[1],
                  group_size=w.group_size)
        return p

    def _fixed_sm90_problem(self) -> QgemmProblem:
        """The Sm90 kernel's slots (templates/fpaintb_gemm_sm90.cu.j2), and the operands it reads: the
        weight repacked into the Sm90 layout, zero' for CUTLASS's scale-with-zero mode, a 16-byte aligned
        bias."""
        w = self.weight
        self._sm90_packed = fpaintb_pack.pack_sm90(w.codes(), w.bits)
        # TMA and the bias broadcast read 16-byte vectors: fresh allocations, never a caller's view.
        self._sm90_scale = self._scale.clone()
        self._sm90_zero = fpaintb_pack.sm90_zero(self._scale, w.zero, w.bits, self.act_dtype)
        # zero' = 0 everywhere (symmetric weights, and GPTQ checkpoints whose zeros all sit at the code
        # bias): the scale-only kernels compute the same w = q * scale with less work per code.
        self._sm90_zeros = bool(self._sm90_zero.any())
        self._sm90_bias = self.bias.clone() if self.bias is not None else None
        p = self._new_problem(w.n, w.k, with_sm_count=True)
        self._set(p, FpAIntBSm90Spec.SLOTS, w=self._sm90_packed.data_ptr(), scale=self._sm90_scale.data_ptr(),
                  zero=self._sm90_zero.data_ptr(),
                  bias=self._sm90_bias.data_ptr() if self._sm90_bias is not None else None,
                  ld_x=w.k, ld_out=w.n, group_size=w.group_size, activation=ACTIVATIONS[self.activation])
        return p

    def choice(self, m: int) -> heuristics.FpAIntBChoice | heuristics.FpAIntBSm90Choice:
        """The kernel this plan uses for M rows."""
        w = self.weight
        if self.sm90 and heuristics.fpaintb_sm90_applies(m, w.n, w.k, w.group_size, self.target_sm):
            return heuristics.fpaintb_sm90_choice(m, w.n, w.k, w.bits, self._act, self._sm_count,
                                                  zeros=self._sm90_zeros, group_size=w.group_size)
        return self._sm80_choice(m)

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        """x [M, K] in act_dtype -> [M, N] in act_dtype (the eager call's checks but alignment): the
        compile ops' fake implementation."""
        w = self.weight
        return self._fake_gemm(x, out, (self.act_dtype,), w.k, w.n, self.act_dtype)

    def _sm80_choice(self, m: int) -> heuristics.FpAIntBChoice:
        w = self.weight
        return heuristics.fpaintb_choice(m, w.n, w.k, w.bits, self._act, self._arch, self._sm_count)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, *, choice=None) -> torch.Tensor:
        """act(x W + bias) [M, N] in act_dtype (into `out` if given) for x [M, K]. `choice` (a
        heuristics.FpAIntBChoice or FpAIntBSm90Choice) overrides the heuristic, for tuning, in eager calls
        only. Under torch.compile / torch.export one custom op (qgemm/_plan_ops.py)."""
        if is_compiling() and _plan_ops.tracing():
            return _plan_ops.call(self, x, out, choice=choice)
        w = self.weight
        m = self._check_x(x, (self.act_dtype,), w.k)
        _checks.index_limit("x.shape[0] (M)", m)
        _checks.aligned("x", x, 16, "16-byte loads")
        if out is not None:
            self._check_gemm_out(out, m, w.n, self.act_dtype)
            _checks.aligned("out", out, 4, "paired stores")
        if self._perm is not None:
            x = x.index_select(1, self._perm)
        if choice is None:
            choice, kernel, launch, ctas = self._cached(m, lambda: self._prepare(m, None))
            if isinstance(choice, heuristics.FpAIntBSm90Choice) and out is not None and out.data_ptr() % 16:
                # The Sm90 kernel stores through TMA, from 16-byte aligned rows; a caller's out aligned
                # only to 4 bytes gets the Sm80 kernels.
                choice, kernel, launch, ctas = self._prepare(m, self._sm80_choice(m))
        else:
            choice, kernel, launch, ctas = self._prepare(m, choice)
        if isinstance(choice, heuristics.FpAIntBSm90Choice):
            return self._run_sm90(x, out, m, kernel, launch, choice)
        if choice.dequantize:
            return self._dequantize_then_matmul(x, out, kernel, launch)
        if out is None:
            out = torch.empty((m, w.n), dtype=self.act_dtype, device=self.device)
        stream = current_stream(self._device_index)
        partial, counters = self._split.get(launch, getattr(choice.spec, "tile", (0, 0)), stream)

        def fill(p: QgemmProblem):
            p.m = m
            self._set(p, x=x.data_ptr(), bias=self._bias_ptr(), out=out.data_ptr(),
                      partial=partial.data_ptr() if partial is not None else None, ld_x=w.k, ld_out=w.n,
                      activation=ACTIVATIONS[self.activation], ctas=ctas, raster_group=choice.raster_group,
                      l2_prefetch=choice.l2_prefetch)

        self._launch(kernel, launch, self._problem, fill, counters)
        return out

    def _bias_ptr(self):
        return self.bias.data_ptr() if self.bias is not None else None

    def _run_sm90(self, x, out, m: int, kernel, launch, choice):
        if out is None:
            out = torch.empty((m, self.weight.n), dtype=self.act_dtype, device=self.device)
        elif out.data_ptr() % 16:
            raise ValueError(f"out must be 16-byte aligned for the Sm90 kernel {choice.spec.name} (TMA stores), "
                             f"got address {out.data_ptr():#x}; pass no choice to run the Sm80 kernels")
        workspace = _sm90_workspace(launch.workspace_bytes, m, self.weight.n, choice.spec, self.device)

        def fill(p: QgemmProblem):
            self._fill_sm90(p, m, choice)
            self._set(p, FpAIntBSm90Spec.SLOTS, x=x.data_ptr(), out=out.data_ptr())

        self._launch(kernel, launch, self._sm90_problem, fill, workspace.data_ptr() if workspace is not None else 0)
        return out

    def _fill_sm90(self, p: QgemmProblem, m: int, choice):
        p.m = m
        self._set(p, FpAIntBSm90Spec.SLOTS, raster=choice.raster, swizzle=choice.swizzle, splits=choice.splits,
                  decomposition=choice.decomposition)

    def _prepare_sm90(self, m: int, choice):
        spec = choice.spec
        if not self.sm90:
            raise ValueError(f"choice {spec.name} is a Sm90 kernel; this plan has no Sm90 path (sm{self.target_sm}, "
                             f"group size {self.weight.group_size}, or sm90=False)")
        if (spec.act, spec.bits) != (self._act, self.weight.bits):
            raise ValueError(f"choice {spec.name} does not fit this plan (act {self._act}, int{self.weight.bits})")
        if not spec.supports(self.weight.k, self.weight.group_size):
            raise ValueError(f"choice {spec.name} reads {spec.tile_k}-deep K tiles: K ({self.weight.k}) and the group "
                             f"size ({self.weight.group_size}) must be multiples of {spec.tile_k} (or the group K)")
        if not spec.zeros and self._sm90_zeros:
            raise ValueError(f"choice {spec.name} is a scale-only kernel (w = q * scale); this weight has zero "
                             f"points, which need a kernel with zeros=True")
        kernel = get_kernel(spec, self.target_sm)
        launch = self._plan(kernel, self._sm90_problem, lambda p: self._fill_sm90(p, m, choice))
        return choice, kernel, launch, 0

    def _prepare(self, m: int, choice):
        choice = choice or self.choice(m)
        if isinstance(choice, heuristics.FpAIntBSm90Choice):
            return self._prepare_sm90(m, choice)
        if not isinstance(choice, heuristics.FpAIntBChoice):
            raise TypeError(f"choice must be a qgemm.heuristics.FpAIntBChoice or FpAIntBSm90Choice, "
                            f"got {type(choice).__name__}")
        spec = choice.spec
        if (spec.act, spec.bits) != (self._act, self.weight.bits) or not spec.supports_target(self.target_sm):
            raise ValueError(f"choice {spec.name} does not fit this plan (act {self._act}, int{self.weight.bits}, "
                             f"sm{self.target_sm})")
        kernel = get_kernel(spec, self.target_sm)
        with self._lock:
            p = self._problem
            p.m = m
            self._set(p, ld_x=self.weight.k, ld_out=self.weight.k if choice.dequantize else self.weight.n,
                      activation=ACTIVATIONS[self.activation], raster_group=choice.raster_group)
            launch, ctas = plan_launch(kernel, p, choice, self._sm_count, self._device_index, self.slots)
        return choice, kernel, launch, ctas

    def dequantize(self) -> torch.Tensor:
        """W^T as the kernels see it: [N, K] in the activation dtype, stored row order."""
        spec = FpAIntBDequantSpec(self._act, self.weight.bits, self._arch)
        _, kernel, launch, _ = self._prepare(1, heuristics.FpAIntBChoice(spec))
        return self._run_dequant(kernel, launch)

    def _run_dequant(self, kernel, launch) -> torch.Tensor:
        w = self.weight
        dense = torch.empty((w.n, w.k), dtype=self.act_dtype, device=self.device)

        def fill(p: QgemmProblem):
            self._set(p, out=dense.data_ptr(), ld_out=w.k)  # W [N, K] rows

        self._launch(kernel, launch, self._problem, fill)
        return dense

    def _dequantize_then_matmul(self, x, out, kernel, launch) -> torch.Tensor:
        # Large M is compute bound: one dequantization (a weight-sized write) then cuBLAS.
        dense = self._run_dequant(kernel, launch)
        y = _TORCH_ACTIVATIONS[self.activation](F.linear(x, dense, self.bias))
        if out is not None:
            out.copy_(y)
            return out
        return y


def fpaintb_linear(x: torch.Tensor, weight: IntBWeight, bias: torch.Tensor | None = None,
                   activation: str = "none") -> torch.Tensor:
    """One-shot form of FpAIntBPlan for x float16/bfloat16 (the plan is built on each call; keep a
    plan for repeated use). A one-shot call does not repack the weight for the Sm90 kernel."""
    _checks.tensor("x", x, tuple(ACT_DTYPES))
    return FpAIntBPlan(weight, act_dtype=x.dtype, bias=bias, activation=activation, sm90=False)(x)
