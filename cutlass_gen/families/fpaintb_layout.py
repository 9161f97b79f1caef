"""The one definition of the FpA x IntB packed weight layout.

Both sides read it: the weight preprocessor (qgemm/fpaintb/pack.py) writes bytes in this
order, and the templates (templates/fpaintb_*.cu.j2, through the spec's `layout`) read
them back. It follows TensorRT-LLM's Turing/Ampere mixed-GEMM layout, so the same packed
weight can feed an LDSM-based CUTLASS mainloop and qgemm's small-M kernel:

1. Row permutation (rows = K). Within every group of `PERMUTE_ROWS` rows, stored row p holds
   logical row ROW_PERMUTATION[p]. After it, one 32-bit word of a column holds exactly the
   K indices one thread needs for an m16n8k16 B fragment ({2j, 2j+1, 2j+8, 2j+9}, and for
   int4 the same 16 further on), so a single 32-bit load feeds the tensor core.
2. Column-major: each output channel n becomes a run of K codes, packed little-end first
   (int4: the even stored row in the low nibble).
3. Column interleave: K is cut into tiles of `TILE_ROWS` rows; `INTERLEAVE` consecutive
   columns' tiles sit next to each other, so one 128-byte line holds TILE_ROWS rows of
   INTERLEAVE columns. Packed tensor: uint8 [N / INTERLEAVE, K * INTERLEAVE * bits / 8].
4. Converter order inside each 32-bit word: the codes are reordered so the fast converters
   need the fewest instructions. int4: nibbles hold (e0, e2, e4, e6, e1, e3, e5, e7) from
   the low end, so masking 0x000f000f gives the pair (e0, e1) in the two halves of a
   half2 and a shift by 4 or 8 the next pairs; int8: bytes hold (e0, e2, e1, e3), so one
   prmt gives (e0, e1) and another (e2, e3).

Codes are unsigned: u = q + 2**(bits - 1) for signed weights, and the kernels compute
w = (u - zero) * scale with zero = 2**(bits - 1) when the weight has no zero points.
"""
from __future__ import annotations

from dataclasses import dataclass

BITS = (4, 8)


@dataclass(frozen=True)
class WeightLayout:
    bits: int
    interleave: int            # columns sharing one 128-byte line
    tile_rows: int             # K rows of one column in that line
    permute_rows: int          # rows per row-permutation group
    row_permutation: tuple     # stored row p <- logical row row_permutation[p]
    word_order: tuple          # position i of a 32-bit word holds element word_order[i]

    @property
    def codes_per_word(self) -> int:
        return 32 // self.bits

    @property
    def line_bytes(self) -> int:
        return self.interleave * self.tile_rows * self.bits // 8

    @property
    def k_alignment(self) -> int:
        """K must be a multiple of this: whole tiles per column."""
        return self.tile_rows

    @property
    def n_alignment(self) -> int:
        """N must be a multiple of this: one tensor-core tile of 8 columns (a multiple of the interleave)."""
        return 8

    def packed_shape(self, k: int, n: int) -> tuple[int, int]:
        return n // self.interleave, k * self.interleave * self.bits // 8


# For a 16-row MMA step (k16) the thread with lane % 4 == j needs rows 2j, 2j+1, 2j+8, 2j+9.
# int8: one word (4 codes) is one step. int4: one word (8 codes) is two steps, 16 rows apart.
_INT8_PERMUTATION = (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
_INT4_PERMUTATION = (0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27,
                     4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15, 22, 23, 30, 31)

LAYOUTS = {
    4: WeightLayout(4, interleave=4, tile_rows=64, permute_rows=32, row_permutation=_INT4_PERMUTATION,
                    word_order=(0, 2, 4, 6, 1, 3, 5, 7)),
    8: WeightLayout(8, interleave=2, tile_rows=64, permute_rows=16, row_permutation=_INT8_PERMUTATION,
                    word_order=(0, 2, 1, 3)),
}


def layout(bits: int) -> WeightLayout:
    if bits not in LAYOUTS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    return LAYOUTS[bits]


# --- Sm90 (WGMMA mixed-input) layout -------------------------------------------------------------
#
# The Sm90 kernel (FpAIntBSm90Spec, CUTLASS 3.x's mixed-input collective) reads the weight as its A
# operand, [rows = N, K] K-major, converts it in registers and feeds it to a register-sourced WGMMA.
# Its byte order is CUTLASS's memory reordering atom (cutlass/util/mixed_dtype_utils.hpp
# compute_memory_reordering_atom, in templates/include/qgemm/fpaintb/sm90_layout.hpp) with the value
# shuffle of CUTLASS's fast converters:
#
# 1. Atoms of 16 rows x 16 K, 256 codes each: one warp's A fragment of one 64 x 16 x 16 WGMMA. The
#    warp's lane t = (row % 8) * 4 + (k % 8) // 2 owns 8 values, v = k % 2 + 2 * (row // 8 % 2) +
#    4 * (k // 8 % 2), stored next to each other at 8 t + position(v), so one 32-bit (int4) or 64-bit
#    (int8) shared-memory load gives a thread its whole fragment.
# 2. Inside those 8 values the converter order: int4 (0, 2, 4, 6, 1, 3, 5, 7) and int8 per 32-bit word
#    (0, 2, 1, 3), as in the Ampere layout (`word_order`): position p holds value word_order[p].
# 3. Atoms numbered along rows first: atom (row // 16, k // 16) starts at code
#    256 * (row // 16 + rows_padded / 16 * (k // 16)). Rows are padded with zero codes to a multiple
#    of 128, the largest tile M (the kernel never stores the padded rows' outputs): CuTe tiles the
#    hierarchical row mode ((8, 2), rows / 16) by the tile M only when the tile divides it.
# 4. Codes are two's complement signed, q = u - 2**(bits - 1) (int4: u ^ 8, int8: u ^ 0x80), little end
#    first within a byte for int4 (code 2i in the low nibble of byte i).
#
# The collective computes w = q * scale + zero' in the activation type; the packer turns qgemm's zero
# points into zero' = scale * (2**(bits-1) - zero) (zero' = 0 for symmetric weights), so
# w = (u - zero) * scale as everywhere else. Scales and zero' are [K / g, N] row-major in the
# activation type.

@dataclass(frozen=True)
class Sm90WeightLayout:
    bits: int
    word_order: tuple            # position p of a 32-bit word holds value word_order[p] of that word
    atom_rows: int = 16
    atom_k: int = 16
    values_per_thread: int = 8
    tile_k: int = 64             # the kernel's K tile (128 bytes of 16-bit activations): K a multiple
    row_padding: int = 128       # rows are padded to a multiple of the largest tile M

    @property
    def atom_codes(self) -> int:
        return self.atom_rows * self.atom_k

    @property
    def k_alignment(self) -> int:
        return self.tile_k

    @property
    def n_alignment(self) -> int:
        """N must be a multiple of this: 16-byte rows of the output, the scales and zero'."""
        return 8

    def rows_padded(self, n: int) -> int:
        return -(-n // self.row_padding) * self.row_padding

    def packed_shape(self, k: int, n: int) -> tuple[int]:
        return (self.rows_padded(n) * k * self.bits // 8,)

    @property
    def code_bias(self) -> int:
        """u - code_bias is the signed code the kernel reads."""
        return 2 ** (self.bits - 1)

    def value_position(self, v: int) -> int:
        """Where value v (0..7) of a thread's fragment is stored among its 8 slots."""
        per_word = 32 // self.bits
        word, i = divmod(v, per_word)
        return word * per_word + self.word_order.index(i)

    def offset(self, row: int, k: int, n: int) -> int:
        """The code index (in codes, not bytes) of weight element (row, k) for N = n."""
        r, kk = row % self.atom_rows, k % self.atom_k
        thread = (r % 8) * 4 + (kk % 8) // 2
        value = kk % 2 + 2 * (r // 8) + 4 * (kk // 8)
        atom = row // self.atom_rows + self.rows_padded(n) // self.atom_rows * (k // self.atom_k)
        return atom * self.atom_codes + thread * self.values_per_thread + self.value_position(value)


SM90_LAYOUTS = {
    4: Sm90WeightLayout(4, word_order=(0, 2, 4, 6, 1, 3, 5, 7)),
    8: Sm90WeightLayout(8, word_order=(0, 2, 1, 3)),
}


def sm90_layout(bits: int) -> Sm90WeightLayout:
    if bits not in SM90_LAYOUTS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    return SM90_LAYOUTS[bits]
