// Emulator replacement of templates/include/qgemm/w8a8/promote_mma.h (see ../../cuda_emu.h): the
// warp primitives computed from the PTX ISA's fragment layouts, written independently of the
// kernel, so the kernel's fragment and address arithmetic is checked against the ISA:
//   mma.m16n8k32 .s8 (PTX ISA "Matrix Fragments for mma.m16n8k32"), lane = 4 g + j:
//     A: a0 row g, k 4j..4j+3; a1 row g+8, k 4j..; a2 row g, k 16+4j..; a3 row g+8, k 16+4j..
//     B: b0 k 4j..4j+3, column g; b1 k 16+4j.., column g
//     C: c0, c1 row g, columns 2j, 2j+1; c2, c3 row g+8
//   mma.m8n8k16 .s8: A row g, k 4j..4j+3; B k 4j..4j+3, column g; C row g, columns 2j, 2j+1
//   ldmatrix.x4 (b16): lane l gives the address of row l % 8 of matrix l / 8; register i of lane t
//     holds matrix i's row t / 4, elements 2 (t % 4) and 2 (t % 4) + 1 (bytes 4 (t % 4) .. + 3)
// Element i of a register is its byte i (little-endian packing).
#pragma once

#include <cstdint>
#include <cstring>

#include "../../cuda_emu.h"

namespace qgemm {
namespace w8a8 {
namespace promote_detail {

inline int8_t byte_of(uint32_t r, int i) { return int8_t((r >> (8 * i)) & 0xFF); }

// d = c + A B over one m16n8k32 step, all lanes' fragments gathered.
inline void mma_16832(int (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  std::memcpy(w.a[lane], a, sizeof(w.a[lane]));
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  emu::sync_warp();
  int8_t A[16][32], B[32][8];
  for (int l = 0; l < 32; ++l) {
    int const g = l / 4, j = l % 4;
    for (int i = 0; i < 4; ++i) {
      A[g][4 * j + i] = byte_of(w.a[l][0], i);
      A[g + 8][4 * j + i] = byte_of(w.a[l][1], i);
      A[g][16 + 4 * j + i] = byte_of(w.a[l][2], i);
      A[g + 8][16 + 4 * j + i] = byte_of(w.a[l][3], i);
      B[4 * j + i][g] = byte_of(w.b[l][0], i);
      B[16 + 4 * j + i][g] = byte_of(w.b[l][1], i);
    }
  }
  int const g = lane / 4, j = lane % 4;
  for (int e = 0; e < 4; ++e) {
    int const row = g + 8 * (e / 2), col = 2 * j + e % 2;
    for (int k = 0; k < 32; ++k) c[e] += int(A[row][k]) * int(B[k][col]);
  }
  emu::sync_warp();
}

inline void mma_8816(int& c0, int& c1, uint32_t a, uint32_t b) {
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  w.a[lane][0] = a;
  w.b[lane][0] = b;
  emu::sync_warp();
  int8_t A[8][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    int const g = l / 4, j = l % 4;
    for (int i = 0; i < 4; ++i) {
      A[g][4 * j + i] = byte_of(w.a[l][0], i);
      B[4 * j + i][g] = byte_of(w.b[l][0], i);
    }
  }
  int const g = lane / 4, j = lane % 4;
  for (int k = 0; k < 16; ++k) {
    c0 += int(A[g][k]) * int(B[k][2 * j]);
    c1 += int(A[g][k]) * int(B[k][2 * j + 1]);
  }
  emu::sync_warp();
}

template <int Arch>
struct IntMma;

template <>
struct IntMma<80> {
  static void step(int (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) { mma_16832(c, a, b0, b1); }
};

// The kernel's own decomposition into m8n8k16 is under test: the same four calls as the real one.
template <>
struct IntMma<75> {
  static void step(int (&c)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1) {
    mma_8816(c[0], c[1], a[0], b0);
    mma_8816(c[0], c[1], a[2], b1);
    mma_8816(c[2], c[3], a[1], b0);
    mma_8816(c[2], c[3], a[3], b1);
  }
};

inline void ldmatrix_x4(uint32_t (&r)[4], void const* smem) {
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  if (reinterpret_cast<uintptr_t>(smem) % 16 || !emu::in_smem(smem, 16)) emu::fail("ldmatrix: bad address");
  w.address[lane] = static_cast<char const*>(smem);
  emu::sync_warp();
  for (int i = 0; i < 4; ++i) std::memcpy(&r[i], w.address[8 * i + lane / 4] + 4 * (lane % 4), 4);
  emu::sync_warp();
}

template <int Bytes>
inline void copy_async(void* smem, void const* src, bool valid) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if (reinterpret_cast<uintptr_t>(smem) % Bytes || !emu::in_smem(smem, Bytes)) emu::fail("cp.async: bad shared address");
  emu::Copy copy{static_cast<char*>(smem), std::vector<char>(Bytes, 0)};
  if (valid) {
    if (reinterpret_cast<uintptr_t>(src) % Bytes) emu::fail("cp.async: misaligned global address");
    if (!emu::readable(src, Bytes)) emu::fail("cp.async: reads outside the operands");
    else std::memcpy(copy.bytes.data(), src, Bytes);
  }
  if (emu::state().schedule >= 3) {
    std::memcpy(copy.dst, copy.bytes.data(), Bytes);  // landed at once
    return;
  }
  emu::self().open.push_back(std::move(copy));
}

inline void copy_async_fence() {
  emu::Thread& t = emu::self();
  t.committed.push_back(std::move(t.open));
  t.open.clear();
}

template <int Pending>
inline void copy_async_wait() {
  emu::Thread& t = emu::self();
  while (int(t.committed.size()) > Pending) {
    for (emu::Copy const& c : t.committed.front()) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    t.committed.pop_front();
  }
}

}  // namespace promote_detail
}  // namespace w8a8
}  // namespace qgemm
