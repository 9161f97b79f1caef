"""Build kernels ahead of time, so that no first call stalls on nvcc.

    import qgemm
    qgemm.prebuild([plan_q, plan_k, model], m_values=(1, 16, 128, 2048))   # the current GPU's target
    qgemm.prebuild(["w8a8_gemm", "act_quant"], target_sm=90)              # whole families, for sm90

Kernels already in the cache are found, checked against their digests and not rebuilt;
the rest compile in parallel (as `qgemm build` does), with one progress line each.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Iterable

from cutlass_gen.build import Artifact, build_many
from cutlass_gen.catalog import catalog, families
from cutlass_gen.spec import SUPPORTED_TARGETS, KernelSpec

logger = logging.getLogger("qgemm")

# M values a plan's heuristic is asked about by default: decode, small and large prefill batches.
DEFAULT_M_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _specs_in(value) -> list[KernelSpec]:
    """The KernelSpecs a heuristic's answer names: a spec, or a choice dataclass holding specs."""
    if isinstance(value, KernelSpec):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [v for f in dataclasses.fields(value) for v in _specs_in(getattr(value, f.name))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _specs_in(v)]
    return []


def _plan_specs(plan, m_values) -> list[KernelSpec] | None:
    """A plan's kernels over m_values, or None if the object is no plan this knows how to ask.

    A plan may say exactly what it needs with kernel_specs(m_values); otherwise its per-M
    heuristic is asked (kernel_spec(m), or choice(m) for the GEMM plans)."""
    if callable(getattr(plan, "kernel_specs", None)):
        return _specs_in(list(plan.kernel_specs(tuple(m_values))))
    for method in ("kernel_spec", "choice"):
        fn = getattr(plan, method, None)
        if callable(fn):
            try:
                return [s for m in m_values for s in _specs_in(fn(m))]
            except TypeError:  # a choice() of another signature (convolutions take n, h, w)
                return None
    return None


def _collect(item, m_values, target_sm: int) -> list[KernelSpec]:
    if isinstance(item, KernelSpec):
        return [item]
    if isinstance(item, str):
        if item not in families():
            raise ValueError(f"kernels: unknown family {item!r}; families are {families()}")
        return catalog(target_sm, item)
    specs = _plan_specs(item, m_values)
    if specs is not None:
        return specs
    import torch

    if isinstance(item, torch.nn.Module):
        out = []
        for module in item.modules():
            for value in vars(module).values():
                candidates = value.values() if isinstance(value, dict) else [value]
                for candidate in candidates:
                    if not isinstance(candidate, (torch.Tensor, torch.nn.Module)):
                        out += _plan_specs(candidate, m_values) or []
        return out
    raise TypeError(
        f"kernels: each item must be a KernelSpec, a family name, a plan (with kernel_specs(m_values), "
        f"kernel_spec(m) or choice(m)) or a torch.nn.Module holding plans; got {type(item).__name__}")


def prebuild(kernels: Iterable, target_sm: int | str = "auto", *, m_values: Iterable[int] = DEFAULT_M_VALUES,
             jobs: int | None = None, progress: Callable[[str], None] | None = None) -> list[Artifact]:
    """Build (or find in the cache) every kernel that `kernels` will need; returns their artifacts.

    kernels: KernelSpecs, family names (that family's catalog for the target), plans, or
    torch.nn.Modules whose plans are collected; for plans, the kernels their heuristics pick at
    each of `m_values`. target_sm: "auto" (the current GPU, as `qgemm build --sm auto`) or one of
    75, 80, 90. progress: called with one line per kernel (default: the "qgemm" logger at INFO;
    pass `print` to see them without configuring logging). Raises the first BuildError once the
    rest are built; ToolchainError where there is no nvcc and something is not yet built.
    """
    if target_sm == "auto":
        from cutlass_gen.toolchain import detect_target_sm

        target_sm = detect_target_sm()
    if target_sm not in SUPPORTED_TARGETS:
        raise ValueError(f"target_sm must be 'auto' or one of {SUPPORTED_TARGETS}, got {target_sm!r}")
    m_values = tuple(m_values)
    if not m_values or any(not isinstance(m, int) or m < 1 for m in m_values):
        raise ValueError(f"m_values must be positive ints, got {m_values!r}")
    if isinstance(kernels, (str, KernelSpec)) or not isinstance(kernels, Iterable):
        kernels = [kernels]
    unique: dict[str, KernelSpec] = {}
    for item in kernels:
        for spec in _collect(item, m_values, target_sm):
            unique.setdefault(spec.name, spec)
    if not unique:
        logger.info("qgemm.prebuild: nothing to build")
        return []
    return build_many(sorted(unique.values(), key=lambda s: s.name), target_sm, jobs=jobs, progress=progress)
