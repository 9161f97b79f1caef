"""The torch.library custom ops through which torch.compile / torch.export see a plan's call.

A plan's call fills ctypes slots and launches through the driver, which Dynamo cannot trace, so
under compilation plan(x) is one opaque op, as a module's forward is (qgemm/nn/_ops.py):

    qgemm::plan_forward(x, handle, layout) -> Tensor           plan(x), a new output
    qgemm::plan_forward_out(x, out, handle, layout) -> ()      plan(x, out), writes out

The real implementations run the plan's eager call (kernels on the plan's GPU); the fake ones run
the plan's `_fake_call(x, out, layout)`: the eager call's argument checks that need no data (dtype,
shape, device, contiguity; not alignment, which a fake tensor has no address for) and the output's
shape, dtype and strides. `handle` names the plan in a registry of weak references, filled when the
plan is made (Plan.__init__); `layout` is the convolutions' "nhwc"/"nchw", "" for the GEMMs.

The handle is a str ("W8A8GemmPlan:3"), not an int as a module's: Dynamo specializes the ints of
nn.Module attributes, but an int read from any other object reached through a local (a plan passed
as an argument, or in a closure) becomes a SymInt under dynamic=True, and under automatic dynamic as
soon as a second plan passes through the same code; an op cannot look a SymInt up. A str is always
a constant, guarded by value.

Each plan's __call__ begins with `if is_compiling() and _plan_ops.tracing(): return
_plan_ops.call(...)`, so eager calls never go through the ops and pay one
torch.compiler.is_compiling() check (~50 ns). `tracing()` keeps real calls made while compiling on
the eager path: inductor runs an op's real implementation when it folds constants (freezing=True and
a plan applied to a parameter), and that plan call, or a module's forward calling its plan, would
otherwise route back into the op without end. Tuning arguments (choice=) select a kernel in eager
calls only: under compilation `call` refuses them. The GEMM-alone entries that take quantized
activations (W8A8GemmPlan.gemm, Fp8GemmPlan.gemm) have no op: their quantizers refuse to be traced
(`eager_only`).
"""
from __future__ import annotations

import itertools
import weakref

import torch
from torch.compiler import is_dynamo_compiling, is_exporting

_PLANS: dict[str, weakref.ReferenceType] = {}
_NEXT = itertools.count(1)


def register(plan) -> str:
    """A new handle for `plan` (a weak reference: the registry keeps no plan alive)."""
    handle = f"{type(plan).__name__}:{next(_NEXT)}"
    _PLANS[handle] = weakref.ref(plan, lambda _ref, h=handle: _PLANS.pop(h, None))
    return handle


def plan_of(handle: str):
    plan = _PLANS.get(handle, lambda: None)()
    if plan is None:
        raise RuntimeError(f"qgemm plan op: no live plan has handle {handle!r} (the plan was freed; a compiled "
                           f"or exported graph calls the plan it was traced with: keep that plan alive)")
    return plan


def tracing() -> bool:
    """Whether this call is being traced (Dynamo: torch.compile, strict torch.export; or non-strict
    torch.export), as opposed to run with real tensors while a compilation is in progress. Called
    only once is_compiling() is true, so eager calls never pay for it."""
    return is_dynamo_compiling() or is_exporting()


def call(plan, x, out=None, layout: str = "", choice=None):
    """plan(x, out, layout=layout) under torch.compile / torch.export: one of the two ops. A choice
    (the tuning override) is refused: it is no op argument."""
    if choice is not None:
        raise ValueError(f"{type(plan).__name__}: choice= selects a kernel in eager calls only; under "
                         f"torch.compile / torch.export the plan runs its heuristic's kernel (call it without "
                         f"choice=)")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if out is None:
        return torch.ops.qgemm.plan_forward(x, plan._qgemm_handle, layout)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    torch.ops.qgemm.plan_forward_out(x, out, plan._qgemm_handle, layout)
    return out


def eager_only(what: str) -> RuntimeError:
    """The error an entry no op covers raises while traced (the activation quantizers, whose
    structures the GEMM-alone entries take): `if is_compiling() and tracing(): raise eager_only(...)`."""
    return RuntimeError(f"{what} runs in eager calls only: under torch.compile / torch.export call the plan on "
                        f"the unquantized activations, plan(x), which quantizes inside its op")


def _eager(plan, x, out, layout: str):
    return plan(x, out, layout=layout) if layout else plan(x, out)


@torch.library.custom_op("qgemm::plan_forward", mutates_args=())
def plan_forward(x: torch.Tensor, handle: str, layout: str) -> torch.Tensor:
    # A plan's output is always a new tensor (never x, nor a view of it).
    return _eager(plan_of(handle), x, None, layout)


@plan_forward.register_fake
def _(x: torch.Tensor, handle: str, layout: str) -> torch.Tensor:
    return plan_of(handle)._fake_call(x, None, layout)


@torch.library.custom_op("qgemm::plan_forward_out", mutates_args=("out",))
def plan_forward_out(x: torch.Tensor, out: torch.Tensor, handle: str, layout: str) -> None:
    _eager(plan_of(handle), x, out, layout)


@plan_forward_out.register_fake
def _(x: torch.Tensor, out: torch.Tensor, handle: str, layout: str) -> None:
    plan_of(handle)._fake_call(x, out, layout)
