"""Weight preprocessing for the FpA x IntB kernels: unsigned codes [K, N] <-> packed bytes.

The byte order is defined once, in cutlass_gen/fpaintb_layout.py (read its docstring); this
module only applies it with torch ops, so it runs on the CPU or, for large checkpoints, on
the GPU where the weight already is.
"""
from __future__ import annotations

import torch

from cutlass_gen.fpaintb_layout import WeightLayout, layout


def check_packable(name: str, k: int, n: int, lay: WeightLayout):
    if k <= 0 or k % lay.k_alignment:
        raise ValueError(f"{name}: K must be a positive multiple of {lay.k_alignment} for int{lay.bits} "
                         f"weights (whole {lay.tile_rows}-row tiles), got {k}")
    if n <= 0 or n % lay.n_alignment:
        raise ValueError(f"{name}: N must be a positive multiple of {lay.n_alignment} (one tensor-core tile "
                         f"of columns), got {n}")


def pack(u: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes u (uint8 [K, N], values < 2**bits) -> packed uint8 [N / interleave, K * interleave * bits / 8]."""
    lay = layout(bits)
    if u.dtype != torch.uint8 or u.dim() != 2:
        raise TypeError(f"u must be a 2-D uint8 tensor of codes [K, N], got {u.dtype} with shape {tuple(u.shape)}")
    k, n = u.shape
    check_packable("u", k, n, lay)
    perm = torch.tensor(lay.row_permutation, device=u.device)
    stored = u.view(k // lay.permute_rows, lay.permute_rows, n).index_select(1, perm).reshape(k, n)
    cols = stored.t()                                                  # [N, K]: column-major B
    order = torch.tensor(lay.word_order, device=u.device)
    cols = cols.reshape(n, k // lay.codes_per_word, lay.codes_per_word).index_select(2, order)
    if bits == 4:
        pairs = cols.reshape(n, k // 2, 2)
        col_bytes = pairs[..., 0] | (pairs[..., 1] << 4)              # even position in the low nibble
    else:
        col_bytes = cols.reshape(n, k)
    tile_bytes = lay.tile_rows * bits // 8
    lines = col_bytes.reshape(n // lay.interleave, lay.interleave, k // lay.tile_rows, tile_bytes)
    return lines.permute(0, 2, 1, 3).reshape(lay.packed_shape(k, n)).contiguous()


def unpack(packed: torch.Tensor, bits: int, k: int, n: int) -> torch.Tensor:
    """Packed bytes -> codes u (uint8 [K, N]); the exact inverse of `pack`."""
    lay = layout(bits)
    check_packable("packed", k, n, lay)
    if packed.dtype != torch.uint8 or tuple(packed.shape) != lay.packed_shape(k, n):
        raise ValueError(f"packed must be uint8 with shape {lay.packed_shape(k, n)} for int{bits} K={k} N={n}, "
                         f"got {packed.dtype} with shape {tuple(packed.shape)}")
    tile_bytes = lay.tile_rows * bits // 8
    lines = packed.reshape(n // lay.interleave, k // lay.tile_rows, lay.interleave, tile_bytes)
    col_bytes = lines.permute(0, 2, 1, 3).reshape(n, k * bits // 8)
    if bits == 4:
        cols = torch.stack((col_bytes & 0xF, col_bytes >> 4), dim=-1).reshape(n, k)
    else:
        cols = col_bytes
    inverse_order = torch.argsort(torch.tensor(lay.word_order, device=packed.device))
    cols = cols.reshape(n, k // lay.codes_per_word, lay.codes_per_word).index_select(2, inverse_order)
    stored = cols.reshape(n, k).t()
    inverse_perm = torch.argsort(torch.tensor(lay.row_permutation, device=packed.device))
    return stored.reshape(k // lay.permute_rows, lay.permute_rows, n).index_select(1, inverse_perm).reshape(k, n)
