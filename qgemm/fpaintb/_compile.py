"""FpAIntBPlan under torch.compile / torch.export (qgemm/_plan_ops.py): its fake implementation,
and the routing to the compile ops in front of its __call__ (_plan_ops.routed).

The other plans write both in their own class: `if is_compiling() and _plan_ops.tracing(): return
_plan_ops.call(...)` first in __call__, and a `_fake_call` method. FpAIntBPlan's are added to the
class here (`install`, at import of qgemm.fpaintb), because plan.py was being changed elsewhere when
the compile ops were added. Moving them into plan.py (and deleting this module) saves the wrapper's
extra Python call, ~0.1 us per eager call; until then a class that defines its own _fake_call is
left alone.
"""
from __future__ import annotations

import torch

from .. import _plan_ops
from .plan import FpAIntBPlan


def _fake_call(self: FpAIntBPlan, x: torch.Tensor, out: torch.Tensor | None, layout: str) -> torch.Tensor:
    """x [M, K] in act_dtype -> [M, N] in act_dtype (the eager call's checks but alignment)."""
    w = self.weight
    return self._fake_gemm(x, out, (self.act_dtype,), w.k, w.n, self.act_dtype)


def install():
    """Give FpAIntBPlan its _fake_call and its routing (once; qgemm/fpaintb/__init__.py calls this)."""
    if "_fake_call" not in FpAIntBPlan.__dict__:
        FpAIntBPlan._fake_call = _fake_call
        FpAIntBPlan.__call__ = _plan_ops.routed(FpAIntBPlan.__call__)
