// W8A8 GEMM quantized per K-block on Sm80/Sm75: qgemm's own 2.x-style threadblock MMA that promotes
// each K-block's exact int32 product into FP32 registers (the Sm80/Sm75 counterpart of
// sm90_block_promote.hpp, and of DeepGEMM's promotion). For K-blocks i of block_size:
//
//   asymmetric  acc[m, n] += sx[m,i] sw[n,i] P_i[m,n] + u[m,i] ow[n,i] + ox[m,i] v[n,i]
//               u = sx sum(qx), v = sw sum(qw) + block_size ow       (MNN's scheme)
//   symmetric   acc[m, n] += sx[m,i] sw[n / 128, i] P_i[m,n]          (block-INT8)
//
// with P_i = (Xq Wq^T) over block i, exact in int32, and out = act(acc + bias).
//
// Mainloop. A CTA computes a kTileM x kTileN output tile over a range of K tiles (kTileK int8
// each). Per K tile, the x rows and weight rows (both K-major int8, 16-byte chunks XOR-swizzled
// per row so an ldmatrix's eight rows hit distinct banks) and, for every K-block that ends in the
// tile, the block's row vectors (sx, and asymmetric ox, sum(qx)) and column vectors (asymmetric
// sw, ow, v; symmetric the tile's one weight scale) go to shared memory:
//   * arch 80: kStages-deep cp.async pipeline (CUTLASS's multistage scheme);
//   * arch 75: two stages through registers (CUTLASS's pipelined scheme).
// Warps split the tile in M and N. Per 32 K a warp loads its x and weight fragments with ldmatrix
// (int8 pairs read as b16: the m16n8k32 s8 fragments have the m16n8k16 f16 ones' byte layout)
// and runs m16n8k32 s8 MMAs into int32 accumulators (Sm75: four m8n8k16 per m16n8k32). When a
// K-block ends, each thread promotes its int32 fragment elements into its FP32 accumulators with
// the block's vectors from shared memory, then restarts the int32 ones. Fragment element e of the
// (m tile mt, n tile nt) accumulator sits at row 16 mt + g + 8 (e / 2), column 8 nt + 2 j + e % 2
// of the warp tile (lane = 4 g + j).
//
// Exact conversion: |P_i| <= 256 * 128 * 128 = 2^22, so float(P) = as_float(P + 0x4B400000) -
// 12582912 (1.5 * 2^23: P lands in the mantissa) is exact. The int32 accumulators start each block
// at 0x4B400000 instead of 0 (the MMAs add P to it, exactly: no int32 overflow), so the conversion
// is one float subtract: no I2F, which issues at a quarter of the FP32 rate (sm80) or less, and no
// integer add.
//
// Work split (stream-K): the work is the sequence of (output tile, K unit) iterations, a K unit
// being max(block_size, kTileK) of K, so every split falls on a block boundary: a CTA's int32
// accumulators always hold whole blocks. CTA c takes iterations [c L, (c + 1) L); a tile shared by
// several CTAs is finished by the last of them to arrive, which adds the others' FP32 partials in
// CTA order (deterministic), as in the FpA x IntB kernel (qgemm/fpaintb/gemm.h). The partial buffer
// and the tile counters are the call's own (the plan allocates them per call).
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "qgemm/w8a8/promote_mma.h"  // the warp's MMA, ldmatrix and cp.async

namespace qgemm {
namespace w8a8 {

namespace promote_detail {

constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The int32 accumulators of a block start at kBlockBias: as a float, 1.5 * 2^23 (12582912), with
// the block's product P (|P| <= 2^22) added in the mantissa.
constexpr int kBlockBias = 0x4B400000;

// P from an accumulator that started at kBlockBias: exact.
__device__ __forceinline__ float block_product(int biased) { return __int_as_float(biased) - 12582912.f; }

// Epilogue activations (a run-time choice: they touch each output once).
enum Activation : int { kClamp = 0, kSilu = 1 };

// Clamp that keeps NaN (an unquantized GEMM's NaN reaches the output): the comparisons of a NaN
// are false.
__device__ __forceinline__ float clamp_keep_nan(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

template <class Out>
struct Store;

template <>
struct Store<float> {
  __device__ static void pair(float* p, float v0, float v1) { *reinterpret_cast<float2*>(p) = make_float2(v0, v1); }
};
template <>
struct Store<__half> {
  __device__ static void pair(__half* p, float v0, float v1) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
  }
};
template <>
struct Store<__nv_bfloat16> {
  __device__ static void pair(__nv_bfloat16* p, float v0, float v1) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  }
};

}  // namespace promote_detail

// Config: Out (float, __half, __nv_bfloat16), kArch (75, 80), kTileM/N/K, kWarpM/N, kStages,
// kAsymmetric.
template <class Config>
struct PromoteGemm {
  using Out = typename Config::Out;
  using Mma = promote_detail::IntMma<Config::kArch>;

  static constexpr int kTileM = Config::kTileM, kTileN = Config::kTileN, kTileK = Config::kTileK;
  static constexpr int kWarpM = Config::kWarpM, kWarpN = Config::kWarpN;
  static constexpr int kWarpsM = kTileM / kWarpM, kWarpsN = kTileN / kWarpN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStages = Config::kStages;
  static constexpr bool kAsync = Config::kArch >= 80;
  static constexpr bool kAsymmetric = Config::kAsymmetric;
  static constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;
  static constexpr int kSteps = kTileK / 32;  // m16n8k32 steps per K tile
  static constexpr int kWeightBlockN = 128;   // symmetric weights: one scale per 128 rows
  static_assert(kAsync || kStages == 2, "the register pipeline of arch 75 has two stages");
  static_assert(kTileK == 32 || kTileK == 64 || kTileK == 128, "tile K of 32, 64 or 128 int8");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "ldmatrix.x4 loads B for two 8-column tiles");
  static_assert(kAsymmetric || kWeightBlockN % kTileN == 0, "symmetric: one weight scale per tile");

  // ---- shared memory of one stage ------------------------------------------------------------
  // Row r's 16-byte chunk c is stored at chunk c ^ ((r / kRowsPerLine) % kChunks): the eight rows
  // of an ldmatrix then cover the eight 16-byte bank groups of a 128-byte line.
  static constexpr int kChunks = kTileK / 16;
  static constexpr int kRowsPerLine = 128 / kTileK;
  static constexpr int kABytes = kTileM * kTileK;
  static constexpr int kBBytes = kTileN * kTileK;
  // Vectors of the K-blocks ending in a K tile: at most kTileK / 32 (blocks of 32).
  static constexpr int kVecBlocks = kTileK / 32;
  static constexpr int kRowVecs = kAsymmetric ? 3 : 1;  // sx, ox, sum(qx) | sx
  static constexpr int kColVecs = kAsymmetric ? 3 : 1;  // sw, ow, v | the tile's weight scale
  static constexpr int kColFloats = kAsymmetric ? kTileN : 4;  // per vector; 4: one 16-byte slot
  static constexpr int kRowVecBytes = kVecBlocks * kRowVecs * kTileM * 4;
  static constexpr int kColVecBytes = kVecBlocks * kColVecs * kColFloats * 4;
  static constexpr int kRowVecOffset = kABytes + kBBytes;
  static constexpr int kColVecOffset = kRowVecOffset + ((kRowVecBytes + 15) / 16) * 16;
  static constexpr int kStageBytes = kColVecOffset + kColVecBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kABytes % 16 == 0 && kBBytes % 16 == 0 && kStageBytes % 16 == 0, "16-byte regions");

  // ---- global -> shared copies, spread over the threads --------------------------------------
  static constexpr int kARowStride = kThreads / kChunks;  // rows between a thread's chunks
  static_assert(kThreads % kChunks == 0, "whole rows per pass");
  static constexpr int kAPerThread = promote_detail::ceil_div(kTileM * kChunks, kThreads);
  static constexpr int kBPerThread = promote_detail::ceil_div(kTileN * kChunks, kThreads);
  static constexpr int kRowItems = kVecBlocks * kRowVecs * kTileM;  // 4-byte copies (M is free)
  static constexpr int kRowPerThread = promote_detail::ceil_div(kRowItems, kThreads);
  // Asymmetric: 16-byte copies of column vectors (N a multiple of 4); symmetric: one 4-byte copy
  // of the tile's weight scale per block.
  static constexpr int kColItems = kAsymmetric ? kVecBlocks * kColVecs * (kTileN / 4) : kVecBlocks;
  static constexpr int kColPerThread = promote_detail::ceil_div(kColItems, kThreads);

  struct Params {
    int8_t const* x;     // [M, K], ldx
    int8_t const* w;     // [N, K], ldw
    float const* sx;     // [blocks, M]
    float const* ox;     // [blocks, M] (asymmetric)
    float const* qx;     // [blocks, M]: sum of the block's codes (asymmetric)
    float const* sw;     // asymmetric [blocks, N]; symmetric [ceil(N / 128), blocks]
    float const* ow;     // [blocks, N] (asymmetric)
    float const* v;      // [blocks, N]: sw sum(qw) + block_size ow (asymmetric)
    float const* bias;   // [N] or null
    Out* out;            // [M, N], ldo
    float* partial;      // [ctas, 2, accumulators of a tile] when a tile is split between CTAs
    int* counters;       // one per output tile, zero before the launch
    int64_t ldx, ldw, ldo;
    int m, n, k;
    int block_size, blocks, block_steps;  // block_steps: 32-K steps per block
    int activation;
    float lo, hi;                         // clamp bounds
    int tiles_m, tiles_n, raster_group;
    int k_tiles, unit_tiles, k_units;     // K tiles; K tiles per K unit; K units
    int iters_per_cta, ctas;
  };

  // Where one copy comes from and goes to. `active` false: the slot copies nothing; `valid` false:
  // zero-fill.
  struct Chunk {
    void const* src;
    int dst;  // byte offset in the stage
    bool valid, active;
  };

  static __device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * kTileK + ((chunk ^ ((row / kRowsPerLine) % kChunks)) * 16);
  }

  // The K-blocks whose vectors K tile kt stages: those ending in it. Returns the count (0 or more)
  // and the first block.
  static __device__ __forceinline__ int blocks_ending(Params const& p, int kt, int& first) {
    if (p.block_size >= kTileK) {
      int const end = (kt + 1) * kTileK;
      first = end / p.block_size - 1;
      return end % p.block_size == 0 ? 1 : 0;
    }
    first = kt * kTileK / p.block_size;
    return kTileK / p.block_size;
  }

  // Visits every copy of K tile kt once, with a compile-time slot per region (the arch-75 copier
  // keeps each slot in its own register).
  template <class Copy>
  static __device__ void for_each_chunk(Params const& p, int kt, int m0, int n0, Copy& copy) {
    int const t = threadIdx.x;
    int const ch = t % kChunks, row0 = t / kChunks;
    int const gk = kt * kTileK + ch * 16;
    bool const k_in = gk < p.k;  // K is a multiple of 32: a chunk is all in or all out
    {  // x: rows past M are not copied (their products reach no output)
      int8_t const* src = p.x + int64_t(m0 + row0) * p.ldx + gk;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kAPerThread; ++i) {
        int const row = row0 + i * kARowStride;
        copy.template op<16>(copy.a[i], Chunk{src + int64_t(i * kARowStride) * p.ldx, swizzle(row, ch), k_in,
                                              row < kTileM && m0 + row < p.m});
      }
    }
    {  // weight rows: rows past N likewise
      int8_t const* src = p.w + int64_t(n0 + row0) * p.ldw + gk;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kBPerThread; ++i) {
        int const row = row0 + i * kARowStride;
        copy.template op<16>(copy.b[i], Chunk{src + int64_t(i * kARowStride) * p.ldw, kABytes + swizzle(row, ch),
                                              k_in, row < kTileN && n0 + row < p.n});
      }
    }
    int first = 0;
    int const count = blocks_ending(p, kt, first);
    // Row vectors [slot][vector][row]: zero past M and past the last block (a K tile past K).
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowPerThread; ++i) {
      int const item = t + i * kThreads;
      int const slot = item / (kRowVecs * kTileM), vec = item / kTileM % kRowVecs, row = item % kTileM;
      int const block = first + slot;
      bool const valid = m0 + row < p.m && block < p.blocks;
      float const* base = vec == 0 ? p.sx : (vec == 1 ? p.ox : p.qx);  // a select, not a local array
      float const* src = base + (valid ? int64_t(block) * p.m + m0 + row : 0);
      copy.template op<4>(copy.r[i], Chunk{src, kRowVecOffset + 4 * item, valid, item < kRowItems && slot < count});
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kColPerThread; ++i) {
      int const item = t + i * kThreads;
      if constexpr (kAsymmetric) {  // [slot][vector][column], 4 columns per copy
        int const per_slot = kColVecs * (kTileN / 4);
        int const slot = item / per_slot, vec = item / (kTileN / 4) % kColVecs, col = 4 * (item % (kTileN / 4));
        int const block = first + slot;
        bool const valid = n0 + col < p.n && block < p.blocks;
        float const* base = vec == 0 ? p.sw : (vec == 1 ? p.ow : p.v);
        float const* src = base + (valid ? int64_t(block) * p.n + n0 + col : 0);
        copy.template op<16>(copy.c[i], Chunk{src, kColVecOffset + 4 * item * 4, valid,
                                              item < kColItems && slot < count});
      } else {  // the tile's weight scale, sw[n0 / 128, block], in slot [item][0]
        int const block = first + item;
        bool const valid = block < p.blocks;
        float const* src = p.sw + (valid ? int64_t(n0 / kWeightBlockN) * p.blocks + block : 0);
        copy.template op<4>(copy.c[i], Chunk{src, kColVecOffset + 16 * item, valid, item < kColItems && item < count});
      }
    }
  }

  // Arch 80: cp.async straight into the stage (zero-filling invalid copies).
  struct AsyncCopy {
    struct Empty {};
    Empty a[kAPerThread], b[kBPerThread], r[kRowPerThread], c[kColPerThread];
    char* stage;
    template <int Bytes>
    __device__ void op(Empty&, Chunk const& chunk) {
      if (!chunk.active) return;
      promote_detail::copy_async<Bytes>(stage + chunk.dst, chunk.src, chunk.valid);
    }
  };

  // Arch 75: loads into registers, then (a second pass over the same copies) stores to the stage.
  struct ColSlot {
    using type = typename std::conditional<kAsymmetric, uint4, uint32_t>::type;
  };
  struct Staging {
    uint4 a[kAPerThread], b[kBPerThread];
    uint32_t r[kRowPerThread];
    typename ColSlot::type c[kColPerThread];
  };
  struct LoadToRegisters : Staging {
    template <int Bytes, class V>
    __device__ void op(V& slot, Chunk const& chunk) {
      static_assert(sizeof(V) == Bytes, "slot and copy widths agree");
      if (!chunk.active) return;
      slot = chunk.valid ? *static_cast<V const*>(chunk.src) : V{};
    }
  };
  struct StoreToShared {
    Staging& regs;
    char* stage;
    decltype(Staging::a)& a = regs.a;
    decltype(Staging::b)& b = regs.b;
    decltype(Staging::r)& r = regs.r;
    decltype(Staging::c)& c = regs.c;
    template <int Bytes, class V>
    __device__ void op(V& slot, Chunk const& chunk) {
      if (chunk.active) *reinterpret_cast<V*>(stage + chunk.dst) = slot;
    }
  };

  // ---- promotion of one K-block ----------------------------------------------------------------
  // The block's vectors sit in slot `slot` of the stage; the int32 accumulators restart at kBlockBias.
  static __device__ __forceinline__ void promote(char const* stage, int slot, int warp_m, int warp_n,
                                                 int (&block)[kMTiles][kNTiles][4], float (&acc)[kMTiles][kNTiles][4]) {
    int const lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    float const* rows = reinterpret_cast<float const*>(stage + kRowVecOffset) + slot * kRowVecs * kTileM;
    float const* cols = reinterpret_cast<float const*>(stage + kColVecOffset) + slot * kColVecs * kColFloats;
    int const r_base = warp_m * kWarpM + g;
    if constexpr (kAsymmetric) {
      // Per row: sx, u = sx sum(qx), ox.
      float sx[kMTiles][2], u[kMTiles][2], ox[kMTiles][2];
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          int const r = r_base + 16 * mt + 8 * h;
          sx[mt][h] = rows[r];
          ox[mt][h] = rows[kTileM + r];
          u[mt][h] = sx[mt][h] * rows[2 * kTileM + r];
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int nt = 0; nt < kNTiles; ++nt) {
        int const c = warp_n * kWarpN + 8 * nt + 2 * j;
        float2 const sw = *reinterpret_cast<float2 const*>(cols + c);
        float2 const ow = *reinterpret_cast<float2 const*>(cols + kTileN + c);
        float2 const v = *reinterpret_cast<float2 const*>(cols + 2 * kTileN + c);
        CUTLASS_PRAGMA_UNROLL
        for (int mt = 0; mt < kMTiles; ++mt) {
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < 4; ++e) {
            int const h = e / 2;
            float const swe = e % 2 ? sw.y : sw.x, owe = e % 2 ? ow.y : ow.x, ve = e % 2 ? v.y : v.x;
            float a = acc[mt][nt][e];
            a = fmaf(sx[mt][h] * swe, promote_detail::block_product(block[mt][nt][e]), a);
            a = fmaf(u[mt][h], owe, a);
            a = fmaf(ox[mt][h], ve, a);
            acc[mt][nt][e] = a;
            block[mt][nt][e] = promote_detail::kBlockBias;
          }
        }
      }
    } else {
      // One weight scale for the whole tile (tile N divides 128): one factor per row.
      float const sw = cols[0];
      float s[kMTiles][2];
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        s[mt][0] = rows[r_base + 16 * mt] * sw;
        s[mt][1] = rows[r_base + 16 * mt + 8] * sw;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        CUTLASS_PRAGMA_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < 4; ++e) {
            acc[mt][nt][e] = fmaf(s[mt][e / 2], promote_detail::block_product(block[mt][nt][e]), acc[mt][nt][e]);
            block[mt][nt][e] = promote_detail::kBlockBias;
          }
        }
      }
    }
  }

  // ---- compute one stage ---------------------------------------------------------------------
  // kSteps steps of 32 K; after a step that ends a K-block, promote. `step0` is the index of the
  // tile's first 32-K step in the whole K.
  static __device__ void compute(Params const& p, char const* stage, int step0, int warp_m, int warp_n,
                                 int (&block)[kMTiles][kNTiles][4], float (&acc)[kMTiles][kNTiles][4]) {
    int const lane = threadIdx.x % 32;
    char const* a_smem = stage;
    char const* b_smem = stage + kABytes;
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kSteps; ++s) {
      // x: lanes 0-15 address rows 0-15 at the step's first 16 bytes, lanes 16-31 the next 16:
      // the four 8x8 b16 matrices are a0..a3.
      uint32_t a[kMTiles][4];
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        int const row = warp_m * kWarpM + 16 * mt + lane % 16;
        promote_detail::ldmatrix_x4(a[mt], a_smem + swizzle(row, 2 * s + lane / 16));
      }
      // Weight rows (columns of the product), two 8-column tiles per ldmatrix.x4: lane l addresses
      // matrix l / 8, row l % 8: (tile nt, k 0-15), (nt, k 16-31), (nt + 1, k 0-15), (nt + 1, k 16-31),
      // i.e. b0, b1 of tile nt and b0, b1 of tile nt + 1.
      uint32_t b[kNTiles / 2][4];
      CUTLASS_PRAGMA_UNROLL
      for (int np = 0; np < kNTiles / 2; ++np) {
        int const row = warp_n * kWarpN + 8 * (2 * np + lane / 16) + lane % 8;
        promote_detail::ldmatrix_x4(b[np], b_smem + swizzle(row, 2 * s + (lane / 8) % 2));
      }
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        CUTLASS_PRAGMA_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          Mma::step(block[mt][nt], a[mt], b[nt / 2][2 * (nt % 2)], b[nt / 2][2 * (nt % 2) + 1]);
        }
      }
      // Does a K-block end with this step? (block_steps is a power of two.)
      int const done = step0 + s + 1;
      if ((done & (p.block_steps - 1)) == 0) {
        int const slot = p.block_size >= kTileK ? 0 : (s + 1) / p.block_steps - 1;
        promote(stage, slot, warp_m, warp_n, block, acc);
      }
    }
  }

  // ---- the mainloop over this CTA's K tiles [kt_begin, kt_end) -------------------------------
  static __device__ void mainloop(Params const& p, char* smem, int m0, int n0, int kt_begin, int kt_end, int warp_m,
                                  int warp_n, float (&acc)[kMTiles][kNTiles][4]) {
    int const tiles = kt_end - kt_begin;
    int block[kMTiles][kNTiles][4];
    CUTLASS_PRAGMA_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      CUTLASS_PRAGMA_UNROLL
      for (int nt = 0; nt < kNTiles; ++nt) {
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 4; ++e) block[mt][nt][e] = promote_detail::kBlockBias;
      }
    }
    if constexpr (kAsync) {
      AsyncCopy copy;
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < tiles) {
          copy.stage = smem + s * kStageBytes;
          for_each_chunk(p, kt_begin + s, m0, n0, copy);
        }
        promote_detail::copy_async_fence();
      }
      for (int i = 0; i < tiles; ++i) {
        promote_detail::copy_async_wait<kStages - 2>();
        __syncthreads();  // tile i has landed for every thread; stage (i - 1) % kStages is free again
        int const next = i + kStages - 1;
        if (next < tiles) {
          copy.stage = smem + (next % kStages) * kStageBytes;
          for_each_chunk(p, kt_begin + next, m0, n0, copy);
        }
        promote_detail::copy_async_fence();
        compute(p, smem + (i % kStages) * kStageBytes, (kt_begin + i) * kSteps, warp_m, warp_n, block, acc);
      }
      promote_detail::copy_async_wait<0>();
    } else {
      LoadToRegisters regs;
      for_each_chunk(p, kt_begin, m0, n0, regs);
      StoreToShared store{regs, smem};
      for_each_chunk(p, kt_begin, m0, n0, store);
      __syncthreads();
      for (int i = 0; i < tiles; ++i) {
        bool const more = i + 1 < tiles;
        if (more) for_each_chunk(p, kt_begin + i + 1, m0, n0, regs);  // in flight during compute
        compute(p, smem + (i % 2) * kStageBytes, (kt_begin + i) * kSteps, warp_m, warp_n, block, acc);
        if (more) {
          store.stage = smem + ((i + 1) % 2) * kStageBytes;
          for_each_chunk(p, kt_begin + i + 1, m0, n0, store);
        }
        __syncthreads();
      }
    }
  }

  // ---- the kernel ------------------------------------------------------------------------------
  static __device__ void run(Params const& p, char* smem) {
    int const warp = threadIdx.x / 32;
    int const warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
    int64_t const total = int64_t(p.tiles_m) * p.tiles_n * p.k_units;
    int64_t const begin = int64_t(blockIdx.x) * p.iters_per_cta;
    int64_t const end = begin + p.iters_per_cta < total ? begin + p.iters_per_cta : total;
    for (int64_t iter = begin; iter < end;) {
      int const tile = int(iter / p.k_units);
      int const u_begin = int(iter % p.k_units);
      int64_t const left = end - iter;
      int const u_end = left < p.k_units - u_begin ? u_begin + int(left) : p.k_units;
      // Tiles are numbered in groups of raster_group M tiles: the CTAs running together share
      // rows of x and of the weight in L2.
      int const per_group = p.raster_group * p.tiles_n;
      int const first_m = tile / per_group * p.raster_group;
      int const group_m = min(p.tiles_m - first_m, p.raster_group);
      int const in_group = tile % per_group;
      int const m0 = (first_m + in_group % group_m) * kTileM, n0 = in_group / group_m * kTileN;

      float acc[kMTiles][kNTiles][4] = {};
      int const kt_begin = u_begin * p.unit_tiles;
      int const kt_end = min(u_end * p.unit_tiles, p.k_tiles);
      mainloop(p, smem, m0, n0, kt_begin, kt_end, warp_m, warp_n, acc);
      bool const whole = u_begin == 0 && u_end == p.k_units;
      bool const last = whole || fixup(p, smem, tile, iter == begin ? 0 : 1, m0 + warp_m * kWarpM, acc);
      if (last) epilogue(p, m0, n0, warp_m, warp_n, acc);
      iter += u_end - u_begin;
      if (iter < end) __syncthreads();  // the next segment's loads overwrite the stages
    }
  }

  static __device__ void epilogue(Params const& p, int m0, int n0, int warp_m, int warp_n,
                                  float const (&acc)[kMTiles][kNTiles][4]) {
    int const lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    int const row0 = m0 + warp_m * kWarpM + g, col0 = n0 + warp_n * kWarpN + 2 * j;
    CUTLASS_PRAGMA_UNROLL
    for (int nt = 0; nt < kNTiles; ++nt) {
      int const col = col0 + 8 * nt;
      if (col >= p.n) continue;  // N is even: col < N means col + 1 < N
      float const bias0 = p.bias ? p.bias[col] : 0.f, bias1 = p.bias ? p.bias[col + 1] : 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int mt = 0; mt < kMTiles; ++mt) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          int const row = row0 + 16 * mt + 8 * h;
          if (row >= p.m) continue;
          float v0 = acc[mt][nt][2 * h] + bias0, v1 = acc[mt][nt][2 * h + 1] + bias1;
          if (p.activation == promote_detail::kSilu) {
            v0 = v0 / (1.f + __expf(-v0));
            v1 = v1 / (1.f + __expf(-v1));
          } else {
            v0 = promote_detail::clamp_keep_nan(v0, p.lo, p.hi);
            v1 = promote_detail::clamp_keep_nan(v1, p.lo, p.hi);
          }
          promote_detail::Store<Out>::pair(p.out + int64_t(row) * p.ldo + col, v0, v1);
        }
      }
    }
  }

  // A tile covered by several CTAs: publish this CTA's FP32 partial sums (register order, 16-byte
  // stores coalesced across the CTA) and count in on the tile's counter. The last CTA to arrive adds
  // every contribution in CTA order, so the result does not depend on who finishes last, resets the
  // counter and returns true to run the epilogue; the others return false. Nothing waits.
  // Accumulators of rows past M are neither stored nor read: a decode batch of M rows on a 16-row
  // tile moves M / 16 of the tile (float4 v of a thread holds rows r and r + 8, r = warp row + 16 mt
  // + g, both past M when r is).
  static constexpr int kAccVectors = kMTiles * kNTiles;  // float4s of accumulators per thread

  static __device__ float4* partial_slot(Params const& p, int cta, int slot) {
    return reinterpret_cast<float4*>(p.partial) + (int64_t(cta) * 2 + slot) * kAccVectors * kThreads;
  }

  static __device__ bool fixup(Params const& p, char* smem, int tile, int slot, int warp_row0,
                               float (&acc)[kMTiles][kNTiles][4]) {
    float4* const acc4 = reinterpret_cast<float4*>(&acc[0][0][0]);
    float4* const mine = partial_slot(p, blockIdx.x, slot);
    int const row0 = warp_row0 + (threadIdx.x % 32) / 4;
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < kAccVectors; ++v) {
      if (row0 + 16 * (v / kNTiles) < p.m) __stcg(mine + v * kThreads + threadIdx.x, acc4[v]);
    }
    int64_t const tile_begin = int64_t(tile) * p.k_units;
    int const first = int(tile_begin / p.iters_per_cta);
    int const last = int((tile_begin + p.k_units - 1) / p.iters_per_cta);
    __threadfence();  // this CTA's partial is visible device-wide before it counts itself in
    __syncthreads();  // (also: every warp is done with the stages, whose memory holds the flag)
    int* flag = reinterpret_cast<int*>(smem);
    if (threadIdx.x == 0) {
      int const arrived = atomicAdd(p.counters + tile, 1);
      *flag = arrived == last - first;
      if (*flag) p.counters[tile] = 0;
    }
    __syncthreads();
    if (!*flag) return false;
    __threadfence();  // order the reads of the other partials after the count
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < kAccVectors; ++v) acc4[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int c = first; c <= last; ++c) {
      // A contributor that started before this tile holds it in its second slot.
      float4 const* part = partial_slot(p, c, int64_t(c) * p.iters_per_cta < tile_begin ? 1 : 0);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < kAccVectors; ++v) {
        if (row0 + 16 * (v / kNTiles) >= p.m) continue;
        float4 const x = __ldcg(part + v * kThreads + threadIdx.x);
        acc4[v] = make_float4(acc4[v].x + x.x, acc4[v].y + x.y, acc4[v].z + x.z, acc4[v].w + x.w);
      }
    }
    return true;
  }

  // ---- host side -------------------------------------------------------------------------------
  // The kernel's own guard (Python checks the same things first, with messages).
  static bool valid(int64_t m, int64_t n, int64_t k, int64_t block_size, int64_t ldx, int64_t ldw, int64_t ldo,
                    int64_t activation, int64_t ctas, int64_t raster_group) {
    bool const block = block_size == 32 || block_size == 64 || block_size == 128 || block_size == 256;
    bool const shape = m > 0 && n > 0 && k > 0 && m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX &&
                       n % 4 == 0 && block && k % block_size == 0;
    bool const strides = ldx >= k && ldx % 16 == 0 && ldw >= k && ldw % 16 == 0 && ldo >= n && ldo % 2 == 0;
    return shape && strides && (activation == promote_detail::kClamp || activation == promote_detail::kSilu) &&
           ctas >= 0 && raster_group >= 1;
  }

  // Fills the work split of params from the problem and the CTAs asked for (0: one per output
  // tile); false if the problem is too large.
  static bool geometry(int64_t m, int64_t n, int64_t k, int64_t block_size, int64_t ctas, int64_t raster_group,
                       Params& params) {
    params.tiles_m = int((m + kTileM - 1) / kTileM);
    params.tiles_n = int((n + kTileN - 1) / kTileN);
    params.k_tiles = int((k + kTileK - 1) / kTileK);
    params.unit_tiles = block_size > kTileK ? int(block_size / kTileK) : 1;
    params.k_units = (params.k_tiles + params.unit_tiles - 1) / params.unit_tiles;
    int64_t const tiles = int64_t(params.tiles_m) * params.tiles_n, total = tiles * params.k_units;
    int64_t const iters = ctas > 0 ? (total + ctas - 1) / ctas : params.k_units;
    params.iters_per_cta = int(iters < INT32_MAX ? iters : INT32_MAX);
    params.ctas = int((total + params.iters_per_cta - 1) / params.iters_per_cta);  // none left idle
    params.raster_group = int(raster_group < params.tiles_m ? raster_group : params.tiles_m);
    return tiles <= INT32_MAX && (total + params.iters_per_cta - 1) / params.iters_per_cta <= INT32_MAX;
  }

  // Some tile is shared between CTAs: the partial buffer and the tile counters are needed.
  static bool split(Params const& params) { return params.iters_per_cta % params.k_units != 0; }

  static int64_t partial_floats(Params const& params) {
    return split(params) ? int64_t(params.ctas) * 2 * kAccVectors * kThreads * 4 : 0;
  }

  static int64_t workspace_bytes(Params const& params) {
    return split(params) ? int64_t(params.tiles_m) * params.tiles_n * int64_t(sizeof(int)) : 0;
  }
};

}  // namespace w8a8
}  // namespace qgemm
