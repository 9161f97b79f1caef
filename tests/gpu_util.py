"""Helpers of the GPU tests: relative error, poisoned outputs, fresh random inputs."""
from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; a NaN left in out (an unwritten element) fails."""
    out = out.double().cpu()
    ref = ref.double().cpu()
    assert not torch.isnan(out).any(), "NaN in output: an element was not written"
    return ((out - ref).norm() / ref.norm()).item()


def poison_allocator():
    """Fill a large freed block with NaN so fresh torch.empty outputs start poisoned."""
    junk = torch.full((64 << 20,), float("nan"), device="cuda")
    del junk


def randn(*shape, dtype=torch.float32, seed=None):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % (1 << 31))
    # A non-zero mean exercises the offset terms; never all zeros.
    return (torch.randn(*shape, generator=g, device="cuda") * 1.5 + 0.3).to(dtype)
