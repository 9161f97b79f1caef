"""Default kernel catalogs: what `qgemm build --sm N` compiles for a target SM.

The runtime picks among these by shape (qgemm/<family>/heuristics.py); a kernel outside
the catalog can still be built on first use. Each family's catalog is in cutlass_gen/families/.
"""
from __future__ import annotations

from .families import CATALOGS
from .spec import SUPPORTED_TARGETS, KernelSpec


def families() -> list[str]:
    return sorted(CATALOGS)


def catalog(target_sm: int, family: str | None = None) -> list[KernelSpec]:
    """The kernels built by default for `target_sm`, optionally one family's only."""
    if target_sm not in SUPPORTED_TARGETS:
        raise ValueError(f"sm must be one of {SUPPORTED_TARGETS}, got {target_sm!r}")
    if family is not None and family not in CATALOGS:
        raise ValueError(f"family must be one of {families()}, got {family!r}")
    names = [family] if family else families()
    return [spec for f in names for spec in CATALOGS[f](target_sm)]
