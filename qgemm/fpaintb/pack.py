"""Weight preprocessing for the FpA x IntB kernels: unsigned codes [K, N] <-> packed bytes.

The byte order is defined once, in cutlass_gen/families/fpaintb_layout.py (read its docstring); this
module only applies it with torch ops, so it runs on the CPU or, for large checkpoints, on
the GPU where the weight already is.
"""
from __future__ import annotations

import torch

from cutlass_gen.families.fpaintb_layout import Sm90WeightLayout, WeightLayout, layout, sm90_layout


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


# --- Sm90 layout (cutlass_gen/families/fpaintb_layout.py Sm90WeightLayout) --------------------------------

def check_packable_sm90(name: str, k: int, n: int, lay: Sm90WeightLayout):
    if k <= 0 or k % lay.k_alignment:
        raise ValueError(f"{name}: K must be a positive multiple of {lay.k_alignment} for the Sm90 kernel "
                         f"(whole {lay.tile_k}-deep K tiles), got {k}")
    if n <= 0 or n % lay.n_alignment:
        raise ValueError(f"{name}: N must be a positive multiple of {lay.n_alignment} (16-byte rows of the "
                         f"output and scales), got {n}")


def _atom_order(lay: Sm90WeightLayout, device) -> torch.Tensor:
    """inverse[p] = r * atom_k + k: which element of a 16 x 16 atom sits at code p of the atom."""
    table = torch.tensor([lay.offset(r, k, lay.atom_rows) for r in range(lay.atom_rows) for k in range(lay.atom_k)],
                         device=device)
    return torch.argsort(table)


def pack_sm90(u: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes u (uint8 [K, N], values < 2**bits) -> the Sm90 kernel's weight: uint8
    [rows_padded(N) * K * bits / 8], signed codes in Sm90WeightLayout's order."""
    lay = sm90_layout(bits)
    if u.dtype != torch.uint8 or u.dim() != 2:
        raise TypeError(f"u must be a 2-D uint8 tensor of codes [K, N], got {u.dtype} with shape {tuple(u.shape)}")
    k, n = u.shape
    check_packable_sm90("u", k, n, lay)
    rows = lay.rows_padded(n)
    q = (u.t() ^ lay.code_bias).contiguous()                          # [N, K] signed codes, two's complement
    if rows != n:
        q = torch.cat([q, torch.zeros(rows - n, k, dtype=torch.uint8, device=u.device)])
    ar, ak = lay.atom_rows, lay.atom_k
    atoms = q.reshape(rows // ar, ar, k // ak, ak).permute(2, 0, 1, 3).reshape(-1, ar * ak)  # atom i + I j
    codes = atoms.index_select(1, _atom_order(lay, u.device)).reshape(-1)
    if bits == 4:
        pairs = codes.reshape(-1, 2) & 0xF
        return (pairs[:, 0] | (pairs[:, 1] << 4)).contiguous()       # code 2i in the low nibble
    return codes.contiguous()


def unpack_sm90(packed: torch.Tensor, bits: int, k: int, n: int) -> torch.Tensor:
    """The Sm90 packed weight -> codes u (uint8 [K, N]); the exact inverse of `pack_sm90`."""
    lay = sm90_layout(bits)
    check_packable_sm90("packed", k, n, lay)
    if packed.dtype != torch.uint8 or tuple(packed.shape) != lay.packed_shape(k, n):
        raise ValueError(f"packed must be uint8 with shape {lay.packed_shape(k, n)} for int{bits} K={k} N={n}, "
                         f"got {packed.dtype} with shape {tuple(packed.shape)}")
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(-1) if bits == 4 else packed
    rows = lay.rows_padded(n)
    ar, ak = lay.atom_rows, lay.atom_k
    atoms = torch.empty_like(codes.reshape(-1, ar * ak))
    atoms[:, _atom_order(lay, packed.device)] = codes.reshape(-1, ar * ak)
    q = atoms.reshape(k // ak, rows // ar, ar, ak).permute(1, 2, 0, 3).reshape(rows, k)[:n]
    return (q ^ lay.code_bias).t().contiguous()


def sm90_zero(scale: torch.Tensor, zero: torch.Tensor | None, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """zero' [K / g, N] in `dtype` for the kernel's w = q * scale + zero' with signed q = u - 2**(bits-1):
    zero' = scale * (2**(bits-1) - zero), from the scale as the kernel reads it (in `dtype`), computed in
    float64 and rounded once. Symmetric weights (zero None): zero' = 0 exactly."""
    scale = scale.to(dtype)
    if zero is None:
        return torch.zeros_like(scale)
    bias = 2 ** (bits - 1)
    return (scale.double() * (bias - zero.double())).to(dtype).contiguous()
