"""Requantized int8 conv2d: int8 activations x int8 weights -> int8, groups = 1.

    out_q[n, p, q, k] = clamp(round(M[k] * (acc + border[p, q, k] + FusedBias[k])))

(border is stored per class of outputs reading the same padded taps, with each output pixel's
class: conv_quant.border_buffer.)

acc is the int32 implicit-GEMM accumulator over the filter taps (zero padding in the quantized
domain), M and FusedBias fold the per-tensor input and output quantization, the per-channel weight
scales and the float bias (computed once per plan), and border makes padded taps count as the real
value 0 when the input zero point is not 0 (computed once per input height and width). The math
and its derivation are in qgemm/conv/quant.py; the kernel's epilogue computes exactly
conv_quant.requantize.

Layouts the kernels read and write:

    x_q   int8 [N, H, W, Ci]      NHWC, contiguous
    w_q   int8 [Co, Kh, Kw, Ci]   nn.Conv2d's [Co, Ci, Kh, Kw] with channels last
                                  (conv_quant.quantize_weight quantizes and permutes a float weight)
    out   int8 [N, Ho, Wo, Co]    NHWC

NCHW: with layout="nchw", x is [N, Ci, H, W] and the result [N, Co, Ho, Wo]. A channels_last
tensor is NHWC in memory and is used as is; any other x is first copied into NHWC (one extra read
and write of N*H*W*Ci bytes and one more kernel launch: for a 64 x 56 x 56 x 64 input about 13 MB
of traffic, a few microseconds on an H100). The result is a channels_last view of the NHWC output,
which costs nothing.

Kernels: CUTLASS 2.x implicit GEMM (Sm75, Sm80; templates/conv2d_int8.cu.j2) chosen by
heuristics.conv_int8_choice, and on sm90 the CUTLASS 3.x ones (TMA im2col + WGMMA;
templates/conv2d_int8_sm90.cu.j2), which read the same problem slots and compute the same bits, where
heuristics.conv_int8_sm90_choice measured them faster (deep GEMMs). A caller's `out` that is 4-byte but
not 16-byte aligned (TMA stores) gets the Sm80 kernel instead.

Few input channels: the aligned kernels read channels 4 or 16 at a time, so an input channel count
that is not a multiple of 4 (the 3 of an RGB input) is zero-padded (heuristics.conv_int8_padded_channels,
to a multiple of heuristics.CONV_PAD_CHANNELS_TO): the weights once per plan with zero channels,
the input on each call with channels holding Z_I (their value does not matter against zero weights;
Z_I is the real 0). sum(w_q) and the border correction are computed from the padded weights and come
out unchanged. The input's pad is one more kernel writing N*H*W*Ci_padded bytes after reading
N*H*W*Ci (for the 64 x 224 x 224 x 3 of ResNet-50's first layer, 10 MB in and 13 MB out); with
layout="nchw" it is also the transposing copy. Only out_channels not a multiple of 4 keeps the
few-channels kernel, which reads any channel count.

Strided convolutions over few channels (heuristics.conv_int8_folds: ResNet-50's first layer, 3
channels, 7x7 stride 2) instead fold the stride into the channels (conv_fold.StrideFold): the plan's
weight is the folded filter (4x4 over 16 channels), and each call copies the input into the folded
layout with its padding materialized as Z_I, so the kernel runs a stride-1 convolution without
padding and without border correction. plan.fold says whether (and how) a plan folds.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.compiler import is_compiling

from cutlass_gen.families.conv import CONV_INT8_SLOTS, ConvInt8Sm90Spec, ConvInt8Spec

from .. import _checks, _plan_ops
from .._abi import QgemmProblem
from .._runtime import cached, current_stream, get_kernel, sm_count
from ..plan import Plan, _Call
from . import heuristics
from . import quant as conv_quant
from .fold import StrideFold
from .quant import ConvInt8Quant

LAYOUTS = ("nhwc", "nchw")
MIN_SM = 75
# The iterators address tensors with 32-bit offsets (CUTLASS's can_implement).
MAX_ELEMENTS = (1 << 31) - 1
_WHAT = "qgemm int8 conv2d"


def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least `minimum`."""
    pair = (value, value) if isinstance(value, int) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)):
        raise TypeError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return tuple(pair)


def nhwc_extent(x: torch.Tensor, in_channels: int) -> tuple[int, int, int]:
    """(N, H, W) of a non-empty NHWC input with in_channels channels."""
    n, h, w, c = x.shape
    if c != in_channels or min(n, h, w) < 1:
        raise ValueError(f"x must have shape (N >= 1, H >= 1, W >= 1, {in_channels}) (NHWC), got {tuple(x.shape)}")
    return n, h, w


def conv_input(x: torch.Tensor, layout: str, dtypes: tuple, in_channels: int, device) -> tuple:
    """(x as an NHWC view, N, H, W) for a convolution's input in `layout`, after the checks its call
    makes first: the layout, x's dtype (one of `dtypes`), rank and device, its channels, and for NHWC
    contiguity (an NCHW input may be any channels-first tensor)."""
    _checks.one_of("layout", layout, LAYOUTS)
    _checks.tensor("x", x, dtypes, ndim=4)
    _checks.cuda_device("x", x, device)
    if layout == "nchw":
        if x.shape[1] != in_channels:
            raise ValueError(f"x must have shape (N, {in_channels}, H, W) with layout 'nchw', got {tuple(x.shape)}")
        x = x.permute(0, 2, 3, 1)
    else:
        _checks.contiguous("x", x)
    return (x, *nhwc_extent(x, in_channels))


def output_extent(conv, h: int, w: int) -> tuple[int, int]:
    """(Ho, Wo) of `conv` (a plan or a qgemm.nn convolution: kernel_size, stride, padding, dilation)
    for an input of (h, w); ValueError where the dilated filter does not fit the padded input."""
    ho, wo = conv_quant.output_hw((h, w), conv.kernel_size, conv.stride, conv.padding, conv.dilation)
    if ho < 1 or wo < 1:
        raise ValueError(f"x's spatial size ({h}, {w}) is smaller than the filter {conv.kernel_size} with "
                         f"dilation {conv.dilation} and padding {conv.padding} allow")
    return ho, wo


def fake_output(conv, x: torch.Tensor, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """An empty output of `conv` (as output_extent's) for x as the kernels return it: NHWC memory, an
    [N, Co, Ho, Wo] channels_last view for layout "nchw": what a fake implementation returns under
    torch.compile / torch.export."""
    _checks.one_of("layout", layout, LAYOUTS)
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D, got shape {tuple(x.shape)}")
    n, h, w = (x.shape[0], x.shape[2], x.shape[3]) if layout == "nchw" else x.shape[:3]
    ho, wo = output_extent(conv, h, w)
    out = x.new_empty((n, ho, wo, conv.out_channels), dtype=dtype)
    return out.permute(0, 3, 1, 2) if layout == "nchw" else out


def check_fake_out(out: torch.Tensor, expected: torch.Tensor, layout: str, device):
    """A convolution's fake implementation: `out` as the eager call checks it against the output it
    would return (`expected`, fake_output's): its dtype and shape, NHWC in memory."""
    _checks.tensor("out", out, (expected.dtype,), ndim=4)
    _checks.shape("out", out, tuple(expected.shape))
    _checks.cuda_device("out", out, device)
    if not (out.permute(0, 2, 3, 1) if layout == "nchw" else out).is_contiguous():
        raise ValueError(f"out must be NHWC in memory (channels_last with layout 'nchw'); got strides "
                         f"{out.stride()} for shape {tuple(out.shape)}")


def _pack(pair: tuple[int, int]) -> int:
    """A (height, width) pair in one QgemmProblem.ext slot, as the template unpacks it."""
    return (pair[0] << 32) | pair[1]


class ConvInt8Plan(Plan):
    """A callable int8 convolution: plan(x_q) -> out_q, both int8 NHWC (module docstring).

    w_q is int8 [Co, Kh, Kw, Ci] on the GPU; quant holds the input and output scales and zero points,
    the per-output-channel weight scales and the activation (none, relu or relu6); bias is float [Co]
    on w_q's device. Everything is checked here and on each call before anything is launched. Plans
    keep per-shape state (kernel, border correction) cached, so build one per layer and reuse it.

    in_channels is w_q's Ci, the channels x has; padded_channels the count the kernel runs with. When
    they differ (Ci not a multiple of 4, module docstring) the plan's weight is w_q with zero channels
    appended, or, where `fold` is set, the stride-folded filter; each call then costs one extra copy
    of the input (padded with Z_I, or folded) before the kernel.
    """

    slots = CONV_INT8_SLOTS

    def __init__(self, w_q: torch.Tensor, quant: ConvInt8Quant, *, bias: torch.Tensor | None = None,
                 stride=1, padding=0, dilation=1):
        _checks.tensor("w_q", w_q, (torch.int8,), ndim=4)
        _checks.cuda_device("w_q", w_q)
        _checks.contiguous("w_q", w_q)
        if min(w_q.shape) < 1:
            raise ValueError(f"w_q must be non-empty [Co, Kh, Kw, Ci], got shape {tuple(w_q.shape)}")
        _checks.index_limit("w_q's element count", w_q.numel(), MAX_ELEMENTS, "CUTLASS's 32-bit tensor offsets")
        _checks.aligned("w_q", w_q, 16, "16-byte filter loads")
        if not isinstance(quant, ConvInt8Quant):
            raise TypeError(f"quant must be a qgemm.ConvInt8Quant, got {type(quant).__name__}")
        conv_quant.check_weight(w_q, quant)
        device = w_q.device
        if bias is not None:
            _checks.bias(bias, w_q.shape[0], device, (torch.float32, torch.float64, torch.float16, torch.bfloat16))
            bias = bias.detach()  # an nn.Conv2d's parameter: the plan keeps values, not autograd
        self.stride = _pair("stride", stride, 1)
        self.padding = _pair("padding", padding, 0)
        self.dilation = _pair("dilation", dilation, 1)
        self.target_sm = _checks.target_sm(device, MIN_SM, _WHAT)

        # Calibration scales may live on the CPU; the requantization vectors live with the weights.
        self.quant = dataclasses.replace(quant, weight_scale=quant.weight_scale.to(device))
        self.bias = bias
        self.out_channels, kh, kw, self.in_channels = w_q.shape
        self.kernel_size = (kh, kw)
        self.fold: StrideFold | None = None
        if heuristics.conv_int8_folds(self.in_channels, self.out_channels, self.stride, self.dilation):
            self.fold = StrideFold.of(self.in_channels, self.kernel_size, self.stride, self.padding,
                                      heuristics.CONV_FOLD_CHANNELS_TO)
            self.padded_channels = self.fold.channels
            self.weight = self.fold.weight(w_q)
        else:
            self.padded_channels = heuristics.conv_int8_padded_channels(self.in_channels, self.out_channels)
            # Zero channels appended (module docstring): a fresh contiguous tensor, 16-byte aligned.
            self.weight = F.pad(w_q, (0, self.padded_channels - self.in_channels)) if self._pads else w_q
        # From the padded (or folded) weights: zero channels and taps add nothing to sum(w_q) (and
        # to the border correction).
        self.multiplier, self.fused_bias = conv_quant.requant_params(self.weight, bias, self.quant)
        self.clamp = self.quant.clamp_bounds()
        super().__init__(device, sm_count(device))
        self._borders: dict[tuple, torch.Tensor] = {}  # per (H, W); self._calls: per (N, H, W)
        self._problem = self._fixed_problem()

    @property
    def kernel_geometry(self) -> tuple[tuple[int, int], ...]:
        """(kernel_size, stride, padding, dilation) of the convolution the kernel runs: the plan's
        own, or the folded one (stride 1, no padding)."""
        if self.fold is not None:
            return self.fold.kernel, (1, 1), (0, 0), (1, 1)
        return self.kernel_size, self.stride, self.padding, self.dilation

    def _kernel_input_hw(self, h: int, w: int) -> tuple[int, int]:
        """The (H, W) of the input the kernel reads for an x of (h, w)."""
        return self.fold.input_hw(self.output_hw(h, w)) if self.fold is not None else (h, w)

    def _fixed_problem(self) -> QgemmProblem:
        """The slots that do not change between calls (templates/conv2d_int8.cu.j2 lists them)."""
        kernel, stride, padding, dilation = self.kernel_geometry
        p = self._new_problem(self.out_channels, kernel[0] * kernel[1] * self.padded_channels, with_sm_count=True)
        self._set(p, channels=self.padded_channels, filter=_pack(kernel), padding=_pack(padding),
                  stride=_pack(stride), dilation=_pack(dilation), w=self.weight.data_ptr(),
                  multiplier=self.multiplier.data_ptr(), fused_bias=self.fused_bias.data_ptr(),
                  clamp_lo=self.clamp[0], clamp_hi=self.clamp[1])
        return p

    @property
    def _pads(self) -> bool:
        """Whether each call copies the input first (channels padded, or the stride folded)."""
        return self.padded_channels != self.in_channels

    def output_hw(self, h: int, w: int) -> tuple[int, int]:
        return conv_quant.output_hw((h, w), self.kernel_size, self.stride, self.padding, self.dilation)

    @property
    def sm90_fits(self) -> bool:
        """Whether the Sm90 kernels (TMA im2col) can run this convolution: an sm90 target and a
        geometry within TMA's bounds (the channel counts are the heuristic's to check)."""
        return self.target_sm >= 90 and ConvInt8Sm90Spec.supports_geometry(*self.kernel_geometry)

    @property
    def pointwise(self) -> bool:
        """Whether the kernel's convolution is a plain GEMM over NHWC rows (1x1, stride 1, no
        padding), which the Sm90 ping-pong GEMM kernels run."""
        return ConvInt8Sm90Spec.is_pointwise(*self.kernel_geometry[:3])

    def choice(self, n: int, h: int, w: int, sm90: bool = True) -> ConvInt8Spec | ConvInt8Sm90Spec:
        """The kernel this plan runs for an input of N x H x W pixels (sm90=False: among the CUTLASS
        2.x kernels only)."""
        ho, wo = self.output_hw(h, w)
        return heuristics.conv_int8_choice(n * ho * wo, self.padded_channels, self.out_channels, self.target_sm,
                                           self._sm_count, sm90_fits=sm90 and self.sm90_fits,
                                           taps=self.kernel_geometry[0][0] * self.kernel_geometry[0][1],
                                           pointwise=self.pointwise)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, *, layout: str = "nhwc",
                 choice: ConvInt8Spec | ConvInt8Sm90Spec | None = None) -> torch.Tensor:
        """out_q for x_q (int8, `layout` "nhwc" or "nchw"); `choice` overrides the heuristic's
        kernel, for tuning. Under torch.compile / torch.export one custom op (qgemm/_plan_ops.py),
        which takes no choice."""
        if is_compiling() and _plan_ops.tracing():
            return _plan_ops.call(self, x, out, layout, choice)
        if layout != "nhwc":
            _checks.one_of("layout", layout, LAYOUTS)
            return self._call_nchw(x, out, choice)
        _checks.tensor("x", x, (torch.int8,), ndim=4)
        _checks.cuda_device("x", x, self.device)
        _checks.contiguous("x", x)
        return self._call_nhwc(x, out, choice)

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        conv_input(x, layout, (torch.int8,), self.in_channels, self.device)
        y = fake_output(self, x, layout, torch.int8)
        if out is not None:
            check_fake_out(out, y, layout, self.device)
        return y

    def _call_nhwc(self, x, out, choice) -> torch.Tensor:
        """x int8 [N, H, W, Ci] on the plan's device; contiguous, or any strides when the channels are
        padded (the pad's copy reads them)."""
        n, h, w = nhwc_extent(x, self.in_channels)
        if choice is None:
            call = self._cached((n, h, w), lambda: self._prepare(n, h, w, None))
            if isinstance(call.spec, ConvInt8Sm90Spec) and out is not None and out.data_ptr() % call.spec.output_alignment:
                # TMA stores need 16 bytes; the Sm80 epilogue 4 (checked below like any other).
                call = self._cached((n, h, w, "sm80"),
                              lambda: self._prepare(n, h, w, self.choice(n, h, w, sm90=False)))
        else:
            call = self._prepare(n, h, w, choice)
        if x.data_ptr() % call.spec.alignment and not self._pads:  # the pad's copy is a fresh, aligned tensor
            _checks.aligned("x", x, call.spec.alignment, f"{call.spec.alignment}-byte loads")
        if out is None:
            out = torch.empty(call.out_shape, dtype=torch.int8, device=self.device)
        else:
            _checks.tensor("out", out, (torch.int8,), ndim=4)
            _checks.shape("out", out, call.out_shape)
            _checks.cuda_device("out", out, self.device)
            _checks.contiguous("out", out)
            _checks.aligned("out", out, call.spec.output_alignment, f"{call.spec.output_alignment}-byte stores")
        if self.fold is not None:
            # Folded with its padding materialized as Z_I (module docstring), after every check.
            x = self.fold.input(x, call.out_shape[1:3], self.quant.input_zero)
        elif self._pads:
            # The input's channels padded with Z_I, the real 0 (module docstring): one copy per call,
            # after every check.
            x = F.pad(x, (0, self.padded_channels - self.in_channels), value=self.quant.input_zero).contiguous()

        def fill(p: QgemmProblem):
            self._set_shape(p, n, h, w)
            self._set(p, x=x.data_ptr(), out=out.data_ptr(),
                      border=call.border.data_ptr() if call.border is not None else None)

        # The stream from this module's current_stream, which CPU tests stand in for.
        self._launch(call.kernel, call.launch, self._problem, fill, stream=current_stream(self._device_index))
        return out

    def _call_nchw(self, x, out, choice) -> torch.Tensor:
        _checks.tensor("x", x, (torch.int8,), ndim=4)
        _checks.cuda_device("x", x, self.device)
        if x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (N, {self.in_channels}, H, W) with layout 'nchw', "
                             f"got {tuple(x.shape)}")
        x_nhwc = x.permute(0, 2, 3, 1)
        if not x_nhwc.is_contiguous() and not self._pads:
            x_nhwc = x_nhwc.contiguous()  # the transposing copy (module docstring); padding copies anyway
        out_nhwc = None
        if out is not None:
            _checks.tensor("out", out, (torch.int8,), ndim=4)
            _checks.shape("out", out, (x.shape[0], self.out_channels, *self.output_hw(*x.shape[2:])))
            out_nhwc = out.permute(0, 2, 3, 1)
            if not out_nhwc.is_contiguous():
                raise ValueError(f"out must be channels_last (NHWC in memory) with layout 'nchw'; got strides "
                                 f"{out.stride()} for shape {tuple(out.shape)}: allocate it with "
                                 f"memory_format=torch.channels_last")
        return self._call_nhwc(x_nhwc, out_nhwc, choice).permute(0, 3, 1, 2)

    def _set_shape(self, p: QgemmProblem, n: int, h: int, w: int):
        ho, wo = self.output_hw(h, w)
        p.m = n * ho * wo
        height, width = self._kernel_input_hw(h, w)
        self._set(p, batch=n, height=height, width=width)

    def _prepare(self, n: int, h: int, w: int, choice) -> _Call:
        ho, wo = output_extent(self, h, w)
        kh, kw = self._kernel_input_hw(h, w)
        for name, elements in (("x", n * kh * kw * self.padded_channels),
                               ("the output", n * ho * wo * self.out_channels)):
            if elements > MAX_ELEMENTS:
                raise ValueError(f"{name} has {elements} elements; the kernels address at most {MAX_ELEMENTS} "
                                 f"(32-bit offsets): split the batch")
        spec = self.choice(n, h, w) if choice is None else self._check_choice(choice)
        kernel = get_kernel(spec, self.target_sm)
        launch = self._plan(kernel, self._problem, lambda p: self._set_shape(p, n, h, w))
        return _Call(spec, kernel, launch, 0, (n, ho, wo, self.out_channels), self._border(h, w))

    def _check_choice(self, spec) -> ConvInt8Spec | ConvInt8Sm90Spec:
        if not isinstance(spec, (ConvInt8Spec, ConvInt8Sm90Spec)):
            raise TypeError(f"choice must be a ConvInt8Spec or ConvInt8Sm90Spec, got {type(spec).__name__}")
        if not spec.supports_target(self.target_sm):
            raise ValueError(f"choice {spec.name} needs sm{spec.arch} or later; this plan runs on sm{self.target_sm}")
        if isinstance(spec, ConvInt8Sm90Spec) and spec.mainloop == "pingpong" and not self.pointwise:
            raise ValueError(f"choice {spec.name} (a GEMM) runs pointwise convolutions only (kernel (1, 1), stride "
                             f"(1, 1), padding (0, 0)); this plan's kernel runs kernel {self.kernel_geometry[0]}, "
                             f"stride {self.kernel_geometry[1]}, padding {self.kernel_geometry[2]}")
        if isinstance(spec, ConvInt8Sm90Spec) and not self.sm90_fits:
            raise ValueError(f"choice {spec.name} (TMA im2col) cannot run kernel {self.kernel_size}, stride "
                             f"{self.stride}, padding {self.padding}, dilation {self.dilation}: it needs stride <= "
                             f"{spec.MAX_STRIDE}, (kernel - 1) * dilation <= {spec.MAX_FILTER_SPAN}, and padding and "
                             f"padding - (kernel - 1) * dilation within {list(spec.CORNER_RANGE)}")
        if not spec.supports_channels(self.padded_channels, self.out_channels):
            padded = f" (padded to {self.padded_channels})" if self._pads else ""
            raise ValueError(f"choice {spec.name} needs in_channels a multiple of {spec.alignment} and out_channels "
                             f"a multiple of {spec.output_alignment}; this plan has Ci={self.in_channels}{padded}, "
                             f"Co={self.out_channels}")
        return spec

    def _border(self, h: int, w: int) -> torch.Tensor | None:
        """The correction for padded taps as the kernels read it (conv_quant.border_buffer), or None
        where there is nothing to correct (a folded plan materializes its padding)."""
        _, stride, padding, dilation = self.kernel_geometry
        if self.quant.input_zero == 0 or padding == (0, 0):
            return None
        return cached(self._borders, (h, w), lambda: conv_quant.border_buffer(
            self.weight, (h, w), stride, padding, dilation, self.quant.input_zero))


def conv2d_int8(x_q: torch.Tensor, w_q: torch.Tensor, quant: ConvInt8Quant, bias: torch.Tensor | None = None,
                stride=1, padding=0, dilation=1, layout: str = "nhwc") -> torch.Tensor:
    """One-shot form of ConvInt8Plan (the plan is built on each call; keep a plan for repeated use)."""
    plan = ConvInt8Plan(w_q, quant, bias=bias, stride=stride, padding=padding, dilation=dilation)
    return plan(x_q, layout=layout)
