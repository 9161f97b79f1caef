"""The skeleton every plan shares.

A plan is made once per layer and called many times, from several threads and streams and inside
CUDA graphs. What its calls share: one QgemmProblem (the slots its kernels read) and one Params
buffer (CallBuffers), so a lock covers filling the problem and launching; the kernel and launch
shape chosen per problem size (M, or a convolution's (N, H, W)), cached; and the device with its
multiprocessor count. Everything a launch writes besides its output is allocated per call by the
family's plan.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch

from . import _checks, _plan_ops
from ._abi import QgemmProblem
from ._runtime import CallBuffers, cached, current_stream, outside_graph_pools


@dataclass(frozen=True)
class _Call:
    """What a plan keeps per problem size: the choice (a heuristics choice, or a spec), its kernel
    and launch shape, the stream-K CTA count, the output's shape, and for the int8 convolution the
    border correction."""

    choice: object
    kernel: object
    launch: object
    ctas: int
    out_shape: tuple
    border: torch.Tensor | None = None

    @property
    def spec(self):
        return getattr(self.choice, "spec", self.choice)


class Plan:
    """Base of the plans (and of the activation quantizers): the shared problem slots, Params buffer
    and lock, the device and its multiprocessor count, the per-size cache, the launch.

    `device` is None for the quantizers, which serve every device; `sm_count` is passed in by the
    family's module (its own `sm_count`, which CPU tests replace).

    Under torch.compile / torch.export a plan's call is a custom op (qgemm/_plan_ops.py): each
    public __call__ begins with `if is_compiling() and _plan_ops.tracing(): return
    _plan_ops.call(...)`, and the family implements `_fake_call(x, out, layout)`, the op's fake
    implementation. `_qgemm_handle` names the plan to the ops."""

    # The slot layout of the plan's problem (cutlass_gen.spec.Slots: its kernels' spec.SLOTS).
    slots = None

    def __init__(self, device: torch.device | None = None, sm_count: int = 0):
        self.device = device
        self._device_index = device.index if device is not None else None
        self._sm_count = sm_count
        self._call = CallBuffers()
        self._lock = threading.Lock()  # the problem and Params buffers are shared by callers
        self._calls: dict = {}  # per problem size: what _prepare made
        self._problem = QgemmProblem()
        self._qgemm_handle = _plan_ops.register(self)  # the plan's name in the compile ops

    def _set(self, problem: QgemmProblem, slots=None, /, **values):
        """Write the named slots of `problem` (slots: a kernel spec's SLOTS; default self.slots)."""
        (slots or self.slots).write(problem, **values)

    def _new_problem(self, n: int, k: int, *, with_sm_count: bool = False) -> QgemmProblem:
        """A problem with the weight's extent; with_sm_count for the persistent kernels, which size
        their grid from it."""
        p = QgemmProblem()
        p.n, p.k = n, k
        if with_sm_count:
            p.sm_count = self._sm_count
        return p

    def _cached(self, key, make: Callable):
        """self._calls[key], made on first use (emptied at _runtime.CACHE_LIMIT entries), outside any
        CUDA graph's memory pool (_runtime.outside_graph_pools): what it makes outlives the call."""
        return cached(self._calls, key, lambda: outside_graph_pools(make, self.device))

    def _plan(self, kernel, problem: QgemmProblem, fill: Callable[[QgemmProblem], None]):
        """kernel.plan of `problem` after fill(problem), under the lock."""
        with self._lock:
            fill(problem)
            return kernel.plan(problem)

    def _launch(self, kernel, launch, problem: QgemmProblem, fill: Callable[[QgemmProblem], None],
                workspace: int = 0, device_index: int | None = None, stream: int | None = None):
        """fill(problem), then launch on `stream` (default: torch's current stream), under the lock."""
        device_index = self._device_index if device_index is None else device_index
        if stream is None:
            stream = current_stream(device_index)
        with self._lock:
            fill(problem)
            kernel.launch(problem, launch, device_index, stream, workspace, self._call)

    def _check_x(self, x: torch.Tensor, dtypes: tuple, k: int) -> int:
        """x [M >= 1, k] of one of `dtypes`, contiguous on the plan's device; returns M."""
        _checks.tensor("x", x, dtypes, ndim=2)
        _checks.cuda_device("x", x, self.device)
        _checks.contiguous("x", x)
        m = x.shape[0]
        if m == 0 or x.shape[1] != k:
            raise ValueError(f"x must have shape (M >= 1, {k}), got {tuple(x.shape)}")
        return m

    def _fake_call(self, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
        """The compile ops' fake implementation (qgemm/_plan_ops.py): the eager call's checks that
        need no data, and an empty output as the eager call returns it."""
        raise NotImplementedError(f"{type(self).__name__} has no fake implementation")

    def _fake_gemm(self, x: torch.Tensor, out: torch.Tensor | None, dtypes: tuple, k: int, n: int,
                   out_dtype: torch.dtype) -> torch.Tensor:
        """_fake_call of a GEMM plan: x [M, k] of `dtypes` in, [M, n] of out_dtype out."""
        m = self._check_x(x, dtypes, k)
        _checks.index_limit("x.shape[0] (M)", m)
        if out is not None:
            self._check_gemm_out(out, m, n, out_dtype)
        return x.new_empty((m, n), dtype=out_dtype)

    def _check_gemm_out(self, out: torch.Tensor, m: int, n: int, dtype: torch.dtype) -> None:
        """A caller's out for a GEMM plan: [M, n] of dtype, contiguous on the plan's device. The eager call and
        the fake implementation both check this; each eager call adds the alignment its kernels need (fake
        tensors have no addresses)."""
        _checks.tensor("out", out, (dtype,), ndim=2)
        _checks.shape("out", out, (m, n))
        _checks.cuda_device("out", out, self.device)
        _checks.contiguous("out", out)
