"""Kernel choice by shape, in Python where tests reach it.

W8A8 (one K-block per threadblock): each output tile is a chain of K/block_size
folds, so the time is set by how many chains run side by side and how much work
each link does. Small M wants many narrow tiles (more chains in flight, less
padding in M); large M wants the big tile (fewer re-reads of A and B).
"""
from __future__ import annotations

import functools

from cutlass_gen.catalog import catalog
from cutlass_gen.specs import W8A8GemmSpec


def w8a8_tile_for(m: int, n: int, sm_count: int) -> tuple[int, int]:
    """(tile M, tile N) for an M x N output on a GPU with sm_count multiprocessors."""
    if m <= 32:
        return (32, 128)
    big_tiles = -(-m // 128) * -(-n // 128)
    if big_tiles >= 2 * sm_count:
        return (128, 128)
    return (64, 64)


@functools.lru_cache(maxsize=4096)
def w8a8_spec(m: int, n: int, block_size: int, output: str, target_sm: int, sm_count: int) -> W8A8GemmSpec:
    """The catalog's W8A8 kernel for this shape: the newest arch whose tile K divides
    block_size (Sm80's K=64 tiles can't serve block size 32), then the tile by shape."""
    tile_mn = w8a8_tile_for(m, n, sm_count)
    candidates = [
        s for s in catalog(target_sm, W8A8GemmSpec.family)
        if s.output == output and s.supports_block_size(block_size) and s.supports_target(target_sm)
    ]
    if not candidates:
        raise ValueError(f"no W8A8 kernel in the sm{target_sm} catalog for block_size={block_size}, output={output}")
    best_arch = max(s.arch for s in candidates)
    candidates = [s for s in candidates if s.arch == best_arch]
    for spec in candidates:
        if spec.tile[:2] == tile_mn:
            return spec
    return candidates[0]
