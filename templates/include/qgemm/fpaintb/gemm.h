// FpA x IntB GEMM: qgemm's own CUTLASS 2.x-style threadblock MMA for a quantized B operand, and
// the kernel around it (stream-K work split, tile raster, epilogue).
//
//   out[M, N] = act(x[M, K] W[K, N] + bias),  W[k, n] = (u[k, n] - zero[g, n]) * scale[g, n], g = k / group_size
//
// Mainloop. A CTA computes a kTileM x kTileN output tile over a range of K tiles of kTileK rows.
// Each K tile of x, of the packed codes (cutlass_gen/fpaintb_layout.py, copied as is: one padded
// shared-memory row per column group) and of the scale and zero rows the tile spans goes to shared
// memory:
//   * arch 80: kStages-deep cp.async pipeline (CUTLASS's multistage scheme: loads of tile t +
//     kStages - 1 are issued while tile t is computed, one barrier per K tile);
//   * arch 75: two stages through registers (CUTLASS's pipelined scheme: the next tile's global
//     loads are in flight in registers while the current tile is computed, then stored).
// Out-of-range rows, columns and K are zero-filled, never read.
// Warps split the tile in M and N. Per 32 K rows a warp loads x with ldmatrix (x is kept with the
// 16-byte chunks of each row XOR-swizzled by row, so the eight rows of an 8x8 matrix hit distinct
// banks) and, per 8-column MMA tile, one 32-bit word of codes per lane: the layout's row
// permutation makes that word exactly the lane's m16n8k16 B fragment(s). The word goes through the
// lop3/prmt converters (exact u - zero), is scaled, and feeds the MMAs (FP32 accumulation).
//
// Convolution (Config::kIm2col): the same MMA is an implicit GEMM. Row m of x is output pixel
// (image, p, q), K runs over the filter taps (r, s) and input channels c (c fastest), and each
// 16-byte chunk of x a K tile needs is gathered from the NHWC input (zero where the tap falls in
// the padding or past the filter's R S C rows); the weight is the filter [Co, R, S, C] as a
// [K, N] matrix. Per-block float offsets (Config::kOffset: W = q * scale + offset with signed
// q = u - 2^(bits - 1)) are applied with one hfma2 per weight pair.
//
// Work split (stream-K, see run()): each CTA takes an equal share of the (output tile, K tile)
// iterations, so a grid sized to the GPU keeps every SM equally busy at any M. A tile shared by
// several CTAs is finished by the last of them to arrive, which adds the others' FP32 partials in
// a fixed order; nothing ever waits on another CTA.
#pragma once

#include <cstdint>
#include <cuda_fp16.h>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cutlass/arch/memory_sm75.h"  // ldsm
#include "cutlass/arch/memory_sm80.h"  // cp_async_zfill
#include "cutlass/array.h"
#include "qgemm/fpaintb/convert.h"
#include "qgemm/fpaintb/layout.h"
#include "qgemm/fpaintb/mma.h"

namespace qgemm {
namespace fpaintb {

constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Config: Act, Layout (PackedLayout), kArch, kTileM/N/K, kWarpM/N, kStages, kIm2col (x is a
// convolution's NHWC input, gathered), kOffset (float offsets added after scaling).
template <class Config>
struct DqGemm {
  using Act = typename Config::Act;
  using Layout = typename Config::Layout;
  using Convert = Converter<Act, Layout::kBits>;
  using Pair = typename Convert::Pair;
  using MmaStep = Mma<Act, Config::kArch>;

  static constexpr int kBits = Layout::kBits;
  static constexpr int kInterleave = Layout::kInterleave;
  static constexpr int kTileM = Config::kTileM, kTileN = Config::kTileN, kTileK = Config::kTileK;
  static constexpr int kWarpM = Config::kWarpM, kWarpN = Config::kWarpN;
  static constexpr int kWarpsM = kTileM / kWarpM, kWarpsN = kTileN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStages = Config::kStages;
  static constexpr bool kAsync = Config::kArch >= 80;
  static constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;
  static constexpr int kSymmetricZero = 1 << (kBits - 1);
  static constexpr bool kIm2col = Config::kIm2col, kOffset = Config::kOffset;
  static_assert(kAsync || kStages == 2, "the register pipeline of arch 75 has two stages");
  static_assert(kTileK % Layout::kTileRows == 0 && kTileK % 32 == 0, "whole lines per K tile");

  // ---- shared memory of one stage ------------------------------------------------------------
  static constexpr int kARowBytes = kTileK * 2;
  static constexpr int kABytes = kTileM * kARowBytes;
  static constexpr int kBRowBytes = kTileK * kInterleave * kBits / 8;  // one column group's codes
  static constexpr int kBPitch = kBRowBytes + 16;  // column groups 4 banks apart: conflict-free B loads
  static constexpr int kBRows = kTileN / kInterleave;
  static constexpr int kBBytes = kBRows * kBPitch;
  static constexpr int kMaxGroups = kTileK / 32;  // scale rows a K tile spans (group size >= 32)
  static constexpr int kSBytes = kMaxGroups * kTileN * 2;
  static constexpr int kZBytes = kMaxGroups * kTileN;
  static constexpr int kOBytes = kOffset ? kSBytes : 0;  // offsets: one per scale
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes + kZBytes + kOBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kABytes % 16 == 0 && kBBytes % 16 == 0 && kSBytes % 16 == 0 && kZBytes % 16 == 0, "16-byte regions");

  // ---- global -> shared copies: 16-byte chunks (8-byte for zeros), spread over the threads ----
  static constexpr int kAChunksPerRow = kTileK / 8;
  static constexpr int kAChunks = kTileM * kAChunksPerRow;
  static constexpr int kBChunksPerRow = kBRowBytes / 16;
  static constexpr int kBChunks = kBRows * kBChunksPerRow;
  static constexpr int kGroupChunks = kTileN / 8;  // 8 scales or 8 zeros per chunk
  static constexpr int kSChunks = kMaxGroups * kGroupChunks;
  static constexpr int kAPerThread = ceil_div(kAChunks, kThreads);
  static constexpr int kBPerThread = ceil_div(kBChunks, kThreads);
  static constexpr int kSPerThread = ceil_div(kSChunks, kThreads);

  struct Params {
    Act const* x;
    uint8_t const* w;
    Act const* scale;
    uint8_t const* zero;  // null: the symmetric zero 2^(bits - 1)
    Act const* offset;    // kOffset: [K / group_size, N], added after scaling (never null)
    Act const* bias;      // null: none
    Act* out;
    float* partial;       // [ctas, 2, accumulators of a tile] when a tile is split between CTAs
    int* counters;        // one per output tile, zero between launches
    int64_t ldx, ldw, ldo;
    int m, n, k;
    int group_size;
    int group_shift;  // log2(group_size) when a K tile spans several groups
    int scale_rows;   // scale rows per K tile: 1, or kTileK / group_size
    int activation;
    int tiles_m, tiles_n, raster_group;
    int k_tiles, iters_per_cta, ctas;
    // kIm2col: x is NHWC [images, in_h, in_w, in_c], m = images * out_h * out_w, k_x = R S C (k is
    // the weight's K, padded to whole layout tiles); the filter is R x filter_s.
    int in_h, in_w, in_c, out_h, out_w, filter_s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, k_x;
  };

  // Where one chunk of a K tile comes from and goes to. `active` false: the slot copies nothing
  // (beyond the region, or a row of x past M, whose products no output row uses); `valid` false:
  // zero-fill (outside W, or past K).
  struct Chunk {
    void const* src;
    int dst;  // byte offset in the stage
    bool valid, active;
  };

  // Thread t copies chunk t % kAChunksPerRow of rows t / kAChunksPerRow + i kARowStride of x (and
  // likewise for the codes), as CUTLASS's strided thread maps do: one base address per K tile,
  // constant strides between a thread's chunks.
  static constexpr int kARowStride = kThreads / kAChunksPerRow;
  static constexpr int kBRowStride = kThreads / kBChunksPerRow;
  static_assert(kThreads % kAChunksPerRow == 0 && kThreads % kBChunksPerRow == 0, "whole rows per pass");

  // kIm2col: for each x row a thread copies, where its image starts and the top-left input pixel
  // of its window (computed once per output tile; the K tiles only add the tap's offset).
  struct GatherRows {
    int image[kAPerThread], h0[kAPerThread], w0[kAPerThread];
  };
  struct NoRows {};
  using ARows = typename std::conditional<kIm2col, GatherRows, NoRows>::type;

  static __device__ ARows a_rows(Params const& p, int m0) {
    ARows rows{};
    if constexpr (kIm2col) {
      int const row0 = threadIdx.x / kAChunksPerRow;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kAPerThread; ++i) {
        int const m = m0 + row0 + i * kARowStride;
        int const q = m % p.out_w, pq = m / p.out_w;
        int const pp = pq % p.out_h, image = pq / p.out_h;
        rows.image[i] = image * p.in_h * p.in_w * p.in_c;  // < 2^31: the host checks the input's size
        rows.h0[i] = pp * p.stride_h - p.pad_h;
        rows.w0[i] = q * p.stride_w - p.pad_w;
      }
    }
    return rows;
  }

  // Visits every chunk of K tile kt once, with a compile-time slot per region (the arch-75 copier
  // keeps each slot in its own register).
  template <class Copy>
  static __device__ void for_each_chunk(Params const& p, ARows const& a_rows, int kt, int m0, int n0, Copy& copy) {
    int const t = threadIdx.x;
    int const k0 = kt * kTileK;
    if constexpr (kIm2col) {  // x gathered: one tap (r, s) and 8 channels per chunk (C % 8 == 0)
      int const ch = t % kAChunksPerRow, row0 = t / kAChunksPerRow, gk = k0 + ch * 8;
      int const tap = gk / p.in_c, c = gk - tap * p.in_c;
      int const r = tap / p.filter_s, s = tap - r * p.filter_s;
      int const dh = r * p.dil_h, dw = s * p.dil_w;
      bool const k_in = gk < p.k_x;
      int const rows = p.m - m0;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kAPerThread; ++i) {
        int const row = row0 + i * kARowStride;
        int const ih = a_rows.h0[i] + dh, iw = a_rows.w0[i] + dw;
        bool const inside = k_in && unsigned(ih) < unsigned(p.in_h) && unsigned(iw) < unsigned(p.in_w);
        Act const* src = p.x + a_rows.image[i] + (int64_t(ih) * p.in_w + iw) * p.in_c + c;
        copy.template op<16>(copy.a[i], Chunk{src, row * kARowBytes + ((ch ^ (row & 7)) * 16), inside,
                                              row < kTileM && row < rows});
      }
    } else {  // x: rows past M are not copied at all
      int const ch = t % kAChunksPerRow, row0 = t / kAChunksPerRow, gk = k0 + ch * 8;
      bool const k_in = gk < p.k;
      int const rows = p.m - m0;
      Act const* src = p.x + int64_t(m0 + row0) * p.ldx + gk;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kAPerThread; ++i) {
        int const row = row0 + i * kARowStride;
        copy.template op<16>(copy.a[i], Chunk{src + int64_t(i * kARowStride) * p.ldx,
                                              row * kARowBytes + ((ch ^ (row & 7)) * 16), k_in,
                                              row < kTileM && row < rows});
      }
    }
    {  // codes: one padded shared-memory row per column group
      int const ch = t % kBChunksPerRow, row0 = t / kBChunksPerRow;
      bool const k_in = k0 + (ch * 16 / Layout::kLineBytes) * Layout::kTileRows < p.k;
      int const groups = p.n / kInterleave - n0 / kInterleave;  // column groups left from n0
      uint8_t const* src = p.w + int64_t(n0 / kInterleave + row0) * p.ldw + int64_t(kt) * kBRowBytes + ch * 16;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kBPerThread; ++i) {
        int const row = row0 + i * kBRowStride;
        copy.template op<16>(copy.b[i], Chunk{src + int64_t(i * kBRowStride) * p.ldw,
                                              kABytes + row * kBPitch + ch * 16, k_in && row < groups, row < kBRows});
      }
    }
    // Scales and zeros: the rows of the groups this K tile spans (8 per 16-byte or 8-byte chunk).
    int const g0 = p.scale_rows == 1 ? int(int64_t(k0) / p.group_size) : k0 >> p.group_shift;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSPerThread; ++i) {
      int const c = t + i * kThreads, row = c / kGroupChunks, n = n0 + (c % kGroupChunks) * 8;
      bool const valid = n < p.n && int64_t(g0 + row) * p.group_size < p.k;
      bool const active = row < p.scale_rows && c < kSChunks;
      int64_t const at = int64_t(g0 + row) * p.n + n;
      int const cell = row * kTileN + (c % kGroupChunks) * 8;
      copy.template op<16>(copy.s[i], Chunk{p.scale + at, kABytes + kBBytes + 2 * cell, valid, active});
      if (p.zero) copy.template op<8>(copy.z[i], Chunk{p.zero + at, kABytes + kBBytes + kSBytes + cell, valid, active});
      if constexpr (kOffset) {
        copy.template op<16>(copy.o[i], Chunk{p.offset + at, kABytes + kBBytes + kSBytes + kZBytes + 2 * cell, valid,
                                              active});
      }
    }
  }

  // Arch 80: cp.async straight into the stage (zero-filling invalid chunks). The slot arrays are
  // empty placeholders.
  struct AsyncCopy {
    struct Empty {};
    Empty a[kAPerThread], b[kBPerThread], s[kSPerThread], z[kSPerThread], o[kSPerThread];
    char* stage;
    template <int Bytes>
    __device__ void op(Empty&, Chunk const& c) {
      if (!c.active) return;
      if constexpr (Bytes == 16) {
        cutlass::arch::cp_async_zfill<16, cutlass::arch::CacheOperation::Global>(stage + c.dst, c.src, c.valid);
      } else {
        cutlass::arch::cp_async_zfill<Bytes, cutlass::arch::CacheOperation::Always>(stage + c.dst, c.src, c.valid);
      }
    }
  };

  // Arch 75: loads into registers, then (a second pass over the same chunks) stores to the stage.
  struct Staging {
    uint4 a[kAPerThread], b[kBPerThread], s[kSPerThread], o[kSPerThread];
    uint2 z[kSPerThread];
  };
  struct LoadToRegisters : Staging {
    template <int Bytes, class V>
    __device__ void op(V& slot, Chunk const& c) {
      if (!c.active) return;
      slot = c.valid ? *static_cast<V const*>(c.src) : V{};
    }
  };
  struct StoreToShared {
    Staging& regs;
    char* stage;
    // The slots of `regs` stand in for the copier's own (same shapes, same visiting order).
    decltype(Staging::a)& a = regs.a;
    decltype(Staging::b)& b = regs.b;
    decltype(Staging::s)& s = regs.s;
    decltype(Staging::z)& z = regs.z;
    decltype(Staging::o)& o = regs.o;
    template <int Bytes, class V>
    __device__ void op(V& slot, Chunk const& c) {
      if (c.active) *reinterpret_cast<V*>(stage + c.dst) = slot;
    }
  };

  // ---- compute one stage ---------------------------------------------------------------------
  // One K tile of the warp's kWarpM x kWarpN product, in steps of 32 rows (one group at most:
  // group sizes are multiples of 32).
  //  * One M tile per warp (decode-sized tiles, bandwidth bound): the MMAs take the exact integers
  //    (u - zero) and each group's FP32 sum is scaled once per output column when the group (or
  //    the tile) ends: fewer instructions per code, and no rounding of the weight. A column's zero
  //    is read once per group.
  //  * Several M tiles per warp: each converted code feeds kMTiles MMAs, so it is scaled once in
  //    FP16/BF16 before them.
  static __device__ void compute(Params const& p, char const* stage, int warp_m, int warp_n,
                                 float (&acc)[kMTiles][kNTiles][4]) {
    int const lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    char const* a_smem = stage;
    char const* b_smem = stage + kABytes;
    Act const* s_smem = reinterpret_cast<Act const*>(stage + kABytes + kBBytes);
    uint8_t const* z_smem = reinterpret_cast<uint8_t const*>(stage + kABytes + kBBytes + kSBytes);
    Act const* o_smem = reinterpret_cast<Act const*>(stage + kABytes + kBBytes + kSBytes + kZBytes);
    // (An offset is not a factor of the group's sum: offset weights are always formed one by one.)
    constexpr bool kScaleAfter = kMTiles == 1 && !kOffset;
    // Steps of 32 rows per group: a tile in one group has them all (group_shift is then at least
    // log2 of the tile K, so the shifts below give row 0 throughout).
    int const group_steps = p.scale_rows == 1 ? kTileK / 32 : p.group_size / 32;

    typename Convert::Zero zero[kNTiles];
    float block[kScaleAfter ? kNTiles : 1][4];  // kScaleAfter: the current group's unscaled sums
    CUTLASS_PRAGMA_UNROLL
    for (int k32 = 0; k32 < kTileK / 32; ++k32) {
      int const k_rel = 32 * k32;
      int const srow = p.scale_rows == 1 ? 0 : k_rel >> p.group_shift;
      if (k32 % group_steps == 0) {  // a group starts: its zeros (and, scaling after, fresh sums)
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < kNTiles; ++t) {
          int const n = warp_n * kWarpN + 8 * t + g;
          zero[t] = Convert::zero(p.zero ? int(z_smem[srow * kTileN + n]) : kSymmetricZero);
          if constexpr (kScaleAfter) block[t][0] = block[t][1] = block[t][2] = block[t][3] = 0.f;
        }
      }
      // x fragments of both k16 steps of these 32 rows, for every M tile of the warp. Lanes 0-15
      // address rows 0-15 at the step's first 8 columns, lanes 16-31 the next 8: the four 8x8
      // matrices are exactly the m16n8k16 A fragment a0..a3.
      cutlass::Array<unsigned, 4> a[2][kMTiles];
      CUTLASS_PRAGMA_UNROLL
      for (int step = 0; step < 2; ++step) {
        CUTLASS_PRAGMA_UNROLL
        for (int mt = 0; mt < kMTiles; ++mt) {
          int const row = warp_m * kWarpM + 16 * mt + lane % 16;
          int const chunk = (k_rel + 16 * step) / 8 + lane / 16;
          cutlass::arch::ldsm<cutlass::layout::RowMajor, 4>(a[step][mt],
                                                             a_smem + row * kARowBytes + ((chunk ^ (row & 7)) * 16));
        }
      }
      // Per 8-column tile: the codes of these 32 rows (int4: one word holds both k16 steps; int8:
      // one word per step, 16 bytes apart) become the B fragments b[2 step], b[2 step + 1].
      CUTLASS_PRAGMA_UNROLL
      for (int t = 0; t < kNTiles; ++t) {
        int const n = warp_n * kWarpN + 8 * t + g;
        char const* words = b_smem + Layout::offset(n, k_rel, kBPitch) + 4 * j;
        Pair b[4];
        CUTLASS_PRAGMA_UNROLL
        for (int w = 0; w < 4 / Convert::kPairs; ++w) {
          Convert::convert(*reinterpret_cast<uint32_t const*>(words + 16 * w), zero[t],
                           reinterpret_cast<Pair(&)[Convert::kPairs]>(b[w * Convert::kPairs]));
        }
        if constexpr (!kScaleAfter) {
          Act const s = s_smem[srow * kTileN + n];
          Pair const scale = {s, s};
          if constexpr (kOffset) {
            Act const o = o_smem[srow * kTileN + n];
            Pair const offset = {o, o};
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < 4; ++i) b[i] = __hfma2(b[i], scale, offset);
          } else {
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < 4; ++i) b[i] = __hmul2(b[i], scale);
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int step = 0; step < 2; ++step) {
          CUTLASS_PRAGMA_UNROLL
          for (int mt = 0; mt < kMTiles; ++mt) {
            uint32_t const frag[4] = {a[step][mt][0], a[step][mt][1], a[step][mt][2], a[step][mt][3]};
            uint32_t const b0 = reinterpret_cast<uint32_t const&>(b[2 * step]);
            uint32_t const b1 = reinterpret_cast<uint32_t const&>(b[2 * step + 1]);
            if constexpr (kScaleAfter) {
              MmaStep::step(block[t], frag, b0, b1);
            } else {
              MmaStep::step(acc[mt][t], frag, b0, b1);
            }
          }
        }
      }
      if constexpr (kScaleAfter) {
        if ((k32 + 1) % group_steps == 0 || k32 + 1 == kTileK / 32) {  // the group (or the tile) ends
          // The C fragment holds columns 2j and 2j + 1 of each 8-column tile.
          CUTLASS_PRAGMA_UNROLL
          for (int t = 0; t < kNTiles; ++t) {
            int const n = warp_n * kWarpN + 8 * t + 2 * j;
            float const s0 = float(s_smem[srow * kTileN + n]), s1 = float(s_smem[srow * kTileN + n + 1]);
            acc[0][t][0] = fmaf(block[t][0], s0, acc[0][t][0]);
            acc[0][t][1] = fmaf(block[t][1], s1, acc[0][t][1]);
            acc[0][t][2] = fmaf(block[t][2], s0, acc[0][t][2]);
            acc[0][t][3] = fmaf(block[t][3], s1, acc[0][t][3]);
          }
        }
      }
    }
  }

  // ---- the mainloop over this CTA's K tiles [kt_begin, kt_end) -------------------------------
  static __device__ void mainloop(Params const& p, char* smem, int m0, int n0, int kt_begin, int kt_end, int warp_m,
                                  int warp_n, float (&acc)[kMTiles][kNTiles][4]) {
    int const tiles = kt_end - kt_begin;
    ARows const rows = a_rows(p, m0);
    if constexpr (kAsync) {
      AsyncCopy copy;
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < tiles) {
          copy.stage = smem + s * kStageBytes;
          for_each_chunk(p, rows, kt_begin + s, m0, n0, copy);
        }
        cutlass::arch::cp_async_fence();
      }
      for (int i = 0; i < tiles; ++i) {
        cutlass::arch::cp_async_wait<kStages - 2>();
        __syncthreads();  // tile i has landed for every thread; stage (i - 1) % kStages is free again
        int const next = i + kStages - 1;
        if (next < tiles) {
          copy.stage = smem + (next % kStages) * kStageBytes;
          for_each_chunk(p, rows, kt_begin + next, m0, n0, copy);
        }
        cutlass::arch::cp_async_fence();
        compute(p, smem + (i % kStages) * kStageBytes, warp_m, warp_n, acc);
      }
      cutlass::arch::cp_async_wait<0>();
    } else {
      LoadToRegisters regs;
      for_each_chunk(p, rows, kt_begin, m0, n0, regs);
      StoreToShared store{regs, smem};
      for_each_chunk(p, rows, kt_begin, m0, n0, store);
      __syncthreads();
      for (int i = 0; i < tiles; ++i) {
        bool const more = i + 1 < tiles;
        if (more) for_each_chunk(p, rows, kt_begin + i + 1, m0, n0, regs);  // in flight during compute
        compute(p, smem + (i % 2) * kStageBytes, warp_m, warp_n, acc);
        if (more) {
          store.stage = smem + ((i + 1) % 2) * kStageBytes;
          for_each_chunk(p, rows, kt_begin + i + 1, m0, n0, store);
        }
        __syncthreads();
      }
    }
  }

  // ---- the kernel ------------------------------------------------------------------------------
  // Work is the sequence of (output tile, K tile) iterations, tile-major; CTA c takes iterations
  // [c L, (c + 1) L) with L = iters_per_cta (stream-K). L = k_tiles is the data-parallel GEMM, one
  // whole tile per CTA; a smaller L spreads a tile's K over several CTAs, so a grid of exactly the
  // CTAs that fit on the GPU gets equal shares whatever the tile count. A CTA's range crosses at
  // most two tiles partially (its first and last segments, slots 0 and 1 of its partial buffer).
  static __device__ void run(Params const& p, char* smem) {
    int const warp = threadIdx.x / 32;
    int const warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
    int64_t const total = int64_t(p.tiles_m) * p.tiles_n * p.k_tiles;
    int64_t const begin = int64_t(blockIdx.x) * p.iters_per_cta;
    int64_t const end = begin + p.iters_per_cta < total ? begin + p.iters_per_cta : total;
    for (int64_t iter = begin; iter < end;) {
      int const tile = int(iter / p.k_tiles);
      int const kt_begin = int(iter % p.k_tiles);
      int64_t const left = end - iter;
      int const kt_end = left < p.k_tiles - kt_begin ? kt_begin + int(left) : p.k_tiles;
      // Tiles are numbered in groups of raster_group M tiles: the CTAs running together share
      // rows of x and columns of W in L2.
      int const per_group = p.raster_group * p.tiles_n;
      int const first_m = tile / per_group * p.raster_group;
      int const group_m = min(p.tiles_m - first_m, p.raster_group);
      int const in_group = tile % per_group;
      int const m0 = (first_m + in_group % group_m) * kTileM, n0 = in_group / group_m * kTileN;

      float acc[kMTiles][kNTiles][4] = {};
      mainloop(p, smem, m0, n0, kt_begin, kt_end, warp_m, warp_n, acc);
      bool const whole = kt_begin == 0 && kt_end == p.k_tiles;
      if (whole || fixup(p, smem, tile, iter == begin ? 0 : 1, acc)) epilogue(p, m0, n0, warp_m, warp_n, acc);
      iter += kt_end - kt_begin;
      if (iter < end) __syncthreads();  // the next segment's loads overwrite the stages
    }
  }

  static __device__ void epilogue(Params const& p, int m0, int n0, int warp_m, int warp_n,
                                  float const (&acc)[kMTiles][kNTiles][4]) {
    int const lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    int const row0 = m0 + warp_m * kWarpM + g, col0 = n0 + warp_n * kWarpN + 2 * j;
    CUTLASS_PRAGMA_UNROLL
    for (int t = 0; t < kNTiles; ++t) {
      int const col = col0 + 8 * t;
      if (col >= p.n) continue;
      float const bias0 = p.bias ? float(p.bias[col]) : 0.f, bias1 = p.bias ? float(p.bias[col + 1]) : 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < 2; ++r) {
          int const row = row0 + 16 * mt + 8 * r;
          if (row >= p.m) continue;
          float const v0 = activate(acc[mt][t][2 * r] + bias0, p.activation);
          float const v1 = activate(acc[mt][t][2 * r + 1] + bias1, p.activation);
          *reinterpret_cast<Pair*>(p.out + int64_t(row) * p.ldo + col) = Pair{Act(v0), Act(v1)};
        }
      }
    }
  }

  // A tile covered by several CTAs: publish this CTA's partial sums (in register order, 16-byte
  // stores coalesced across the CTA) and count in on the tile's counter. The last CTA to arrive
  // adds every contribution in CTA order, so the result does not depend on who finishes last,
  // resets the counter for the next launch and returns true to run the epilogue; the others
  // return false and go on with their next segment. Nothing ever waits on another CTA.
  static constexpr int kAccVectors = kMTiles * kNTiles;  // float4s of accumulators per thread

  static __device__ float4* partial_slot(Params const& p, int cta, int slot) {
    return reinterpret_cast<float4*>(p.partial) + (int64_t(cta) * 2 + slot) * kAccVectors * kThreads;
  }

  static __device__ bool fixup(Params const& p, char* smem, int tile, int slot, float (&acc)[kMTiles][kNTiles][4]) {
    float4* const acc4 = reinterpret_cast<float4*>(&acc[0][0][0]);
    float4* const mine = partial_slot(p, blockIdx.x, slot);
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < kAccVectors; ++v) __stcg(mine + v * kThreads + threadIdx.x, acc4[v]);
    int64_t const tile_begin = int64_t(tile) * p.k_tiles;
    int const first = int(tile_begin / p.iters_per_cta);
    int const last = int((tile_begin + p.k_tiles - 1) / p.iters_per_cta);
    __threadfence();  // this CTA's partial is visible device-wide before it counts itself in
    __syncthreads();  // (also: every warp is done with the stages, whose memory holds the flag)
    int* flag = reinterpret_cast<int*>(smem);
    if (threadIdx.x == 0) {
      int const arrived = atomicAdd(p.counters + tile, 1);
      *flag = arrived == last - first;
      if (*flag) p.counters[tile] = 0;  // every contributor has counted in: ready for the next launch
    }
    __syncthreads();
    if (!*flag) return false;
    __threadfence();  // order the reads of the other partials after the count
    // Sum every contribution, this CTA's own included (read back: the sum needs no second set of
    // registers), in CTA order.
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < kAccVectors; ++v) acc4[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int c = first; c <= last; ++c) {
      // A contributor that started before this tile holds it in its second slot.
      float4 const* part = partial_slot(p, c, int64_t(c) * p.iters_per_cta < tile_begin ? 1 : 0);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < kAccVectors; ++v) {
        float4 const x = __ldcg(part + v * kThreads + threadIdx.x);
        acc4[v] = make_float4(acc4[v].x + x.x, acc4[v].y + x.y, acc4[v].z + x.z, acc4[v].w + x.w);
      }
    }
    return true;
  }

  // ---- host side -------------------------------------------------------------------------------
  // Problem checks shared by plan and make_params (Python checks the same things first, with
  // messages; this is the kernel's own guard).
  // The weight [K, N] (packed, ldw bytes per column group) and its groups, for either operand A.
  static bool valid_weight(int64_t n, int64_t k, int64_t group_size, int64_t ldw) {
    bool const shape = n > 0 && k > 0 && n % 8 == 0 && k % Layout::kTileRows == 0 && n <= INT32_MAX && k <= INT32_MAX;
    bool const groups = group_size >= 32 && group_size % 32 == 0 && k % group_size == 0 &&
                        (group_size >= kTileK ? (group_size % kTileK == 0 || group_size == k)
                                              : kTileK % group_size == 0);
    return shape && groups && ldw == k * kInterleave * kBits / 8;
  }

  static bool valid(int64_t m, int64_t n, int64_t k, int64_t group_size, int64_t ldx, int64_t ldw, int64_t ldo,
                    int64_t activation, int64_t ctas, int64_t raster_group) {
    bool const strides = ldx >= k && ldx % 8 == 0 && ldo >= n && ldo % 2 == 0;
    return !kIm2col && m > 0 && m <= INT32_MAX && valid_weight(n, k, group_size, ldw) && strides &&
           activation >= 0 && activation <= kGelu && ctas >= 0 && raster_group >= 1;
  }

  // The convolution (kIm2col): x NHWC [images, in_h, in_w, in_c] under an R x S filter, output
  // [images, out_h, out_w, n] (m = images out_h out_w rows, ldo = n), the weight's K the filter's
  // R S C rows padded to whole layout tiles.
  static bool valid_conv(Params const& c, int64_t images, int64_t r, int64_t n, int64_t k, int64_t group_size,
                         int64_t ldw, int64_t activation, int64_t ctas, int64_t raster_group) {
    int64_t const rsc = r * c.filter_s * c.in_c;
    bool const input = images > 0 && c.in_h > 0 && c.in_w > 0 && c.in_c > 0 && c.in_c % 8 == 0 &&
                       images * c.in_h * c.in_w * c.in_c <= INT32_MAX;
    bool const filter = r > 0 && c.filter_s > 0 && c.pad_h >= 0 && c.pad_w >= 0 && c.stride_h > 0 && c.stride_w > 0 &&
                        c.dil_h > 0 && c.dil_w > 0 && rsc == c.k_x && k >= rsc &&
                        k < rsc + Layout::kTileRows;
    bool const output = c.out_h > 0 && c.out_w > 0 && images * c.out_h * c.out_w <= INT32_MAX;
    return kIm2col && input && filter && output && valid_weight(n, k, group_size, ldw) && activation >= 0 &&
           activation <= kRelu6 && ctas >= 0 && raster_group >= 1;
  }

  // Fills the work split of params from the problem and the CTAs asked for (0: one per output
  // tile); false if the problem is too large.
  static bool geometry(int64_t m, int64_t n, int64_t k, int64_t ctas, int64_t raster_group, Params& params) {
    params.tiles_m = int((m + kTileM - 1) / kTileM);
    params.tiles_n = int((n + kTileN - 1) / kTileN);
    params.k_tiles = int((k + kTileK - 1) / kTileK);
    int64_t const tiles = int64_t(params.tiles_m) * params.tiles_n, total = tiles * params.k_tiles;
    int64_t const iters = ctas > 0 ? (total + ctas - 1) / ctas : params.k_tiles;
    params.iters_per_cta = int(iters < INT32_MAX ? iters : INT32_MAX);
    params.ctas = int((total + params.iters_per_cta - 1) / params.iters_per_cta);  // none left idle
    params.raster_group = int(raster_group < params.tiles_m ? raster_group : params.tiles_m);
    return tiles <= INT32_MAX && (total + params.iters_per_cta - 1) / params.iters_per_cta <= INT32_MAX;
  }

  // Some tile is shared between CTAs: the partial buffer and the tile counters are needed.
  static bool split(Params const& params) { return params.iters_per_cta % params.k_tiles != 0; }

  static int64_t partial_bytes(Params const& params) {
    return split(params) ? int64_t(params.ctas) * 2 * kAccVectors * kThreads * int64_t(sizeof(float4)) : 0;
  }

  static int64_t workspace_bytes(Params const& params) {
    return split(params) ? int64_t(params.tiles_m) * params.tiles_n * int64_t(sizeof(int)) : 0;
  }
};

}  // namespace fpaintb
}  // namespace qgemm
