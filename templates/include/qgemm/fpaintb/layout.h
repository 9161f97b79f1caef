// Where a code lives in the FpA x IntB packed weight: the device side of
// cutlass_gen/fpaintb_layout.py, whose numbers each template passes in.
//
// The packed weight is uint8 [N / Interleave, K * Interleave * Bits / 8]: row c holds the codes of
// columns Interleave * c .. + Interleave - 1, in lines of LineBytes bytes, each line TileRows K rows
// of every one of those columns (column i's share at i * LineBytes / Interleave). Inside a share
// the rows are stored in K order after the layout's row permutation, Bits per code, so the 32-bit
// word that holds a thread's m16n8k16 B fragment starts at a multiple of 4 bytes: the four lanes
// j = 0..3 of a column read the 16 bytes at offset(n, k) + 4 j, which cover 128 / Bits rows.
#pragma once

#include <cstdint>

namespace qgemm {
namespace fpaintb {

template <int Bits, int Interleave, int TileRows, int LineBytes>
struct PackedLayout {
  static constexpr int kBits = Bits;
  static constexpr int kInterleave = Interleave;
  static constexpr int kTileRows = TileRows;
  static constexpr int kLineBytes = LineBytes;
  static constexpr int kColumnBytes = LineBytes / Interleave;  // one column's share of a line
  static constexpr int kRunRows = 128 / Bits;                   // rows of the 16 bytes four lanes read
  static_assert(kColumnBytes * Interleave == LineBytes && kColumnBytes == TileRows * Bits / 8,
                "a line holds TileRows rows of Interleave columns");

  // Byte offset of row k (a multiple of kRunRows) of column n, for column-group rows `pitch` bytes
  // apart: the global weight (pitch = its row length) or a K slice of it in shared memory.
  __host__ __device__ static constexpr int64_t offset(int n, int k, int64_t pitch) {
    return int64_t(n / Interleave) * pitch + int64_t(k / TileRows) * LineBytes + (n % Interleave) * kColumnBytes +
           (k % TileRows) * Bits / 8;
  }
};

}  // namespace fpaintb
}  // namespace qgemm
