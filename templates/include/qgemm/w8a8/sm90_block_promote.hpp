// qgemm's Sm90 mainloop for GEMMs quantized per K-block: TMA loads of the int8 operand tiles,
// warp-specialized WGMMA (s8 x s8 -> s32) over one K-block at a time, and after each block the
// "promotion" of the exact int32 block product P into FP32 register accumulators:
//
//     acc[r, c] += R0[r] * C0[c] * P[r, c]  (+ R1[r] * C1[c] + R2[r] * C2[c]   asymmetric only)
//
// R* are per-(row, block) and C* per-(column, block) vectors of the kernel's tile, staged in
// shared memory once per pipeline stage by a producer warp (cp.async), beside the operand
// tiles that TMA brings. With activations x = sx q + ox and weights w = sw q + ow per block
// (MNN's asymmetric scheme), sum_k x w over a block expands to
//     sx sw P + (sx sum(qx)) ow + ox (sw sum(qw) + block_size ow)
// so the activation side holds (sx, sx*sum(qx), ox) and the weight side (sw, ow, v) with
// v = sw sum(qw) + block_size ow. The symmetric scheme (block-INT8) keeps R0 and C0 alone.
// Which side of the tile holds the activations is a template parameter (swap-AB kernels put
// the weight's rows on the 128-row tile M and a decode batch on a narrow tile N).
//
// The CUTLASS 3.x kernel layer (GemmUniversal with the cooperative or ping-pong warp-specialized
// schedules, persistent or stream-K) drives this collective through the same interface as
// CUTLASS's own FP8 blockwise-scaling mainloop: load (TMA warp), load_auxiliary (the vector
// warp), mma and mma_tail (consumers); qgemm's own kernel layer (sm90_gemm_three_consumers.hpp) drives
// it the same way with three consumer warp groups on a 192-row tile. The kernel and the epilogue see
// FP32 accumulators: this collective publishes a TiledMma of FP32-accumulating WGMMA atoms whose
// accumulator layout is the int8 atoms' (checked below), so the epilogue and the stream-K fix-up
// work in FP32 while the mainloop's own int8 TiledMma fills int32 temporaries.
//
// The promotion is written against the temporaries' element type: for FP8 operands (FP32
// temporaries) the conversion is the identity, so the FP8 family can share this collective.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/arch/barrier.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/collective/builders/sm90_common.inl"
#include "cutlass/numeric_types.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "cute/algorithm/functional.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/cluster_sm90.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/tensor.hpp"
#include "qgemm/pdl.h"

namespace qgemm::w8a8 {

using namespace cute;

// Where one per-(index, K-block) float vector lives in global memory:
//   value(index, block) = ptr[block * block_stride + (index >> index_shift) * index_stride]
// Block-major vectors [blocks, extent] have block_stride = extent, index_stride = 1, shift 0;
// DeepSeek's weight_scale_inv [ceil(N / 128), blocks] has block_stride 1, index_stride = blocks,
// shift 7 (one value per 128 rows). A null pointer reads as zeros.
struct BlockVector {
  float const* ptr = nullptr;
  int64_t block_stride = 0;
  int64_t index_stride = 1;
  int index_shift = 0;
};

// The scheme of the block quantization, as the promotion sees it.
//   kVectors        vectors per side (1: symmetric, 3: asymmetric)
//   kActOnRows      the activations are the kernel's A operand (tile rows); false for swap-AB
//   kWeightPerTile  the weight-side scale is one value per tile and block (symmetric weights with
//                   one scale per 128 rows, and a weight tile extent dividing 128): the
//                   promotion folds it into the activation-side scale instead of reading a vector
template <int BlockSize_, bool Asymmetric_, bool ActOnRows_, bool WeightPerTile_>
struct BlockScheme {
  static constexpr int kBlockSize = BlockSize_;
  static constexpr bool kAsymmetric = Asymmetric_;
  static constexpr bool kActOnRows = ActOnRows_;
  static constexpr bool kWeightPerTile = WeightPerTile_;
  static constexpr int kVectors = Asymmetric_ ? 3 : 1;
  static_assert(BlockSize_ == 32 || BlockSize_ == 64 || BlockSize_ == 128 || BlockSize_ == 256,
                "block size must be 32, 64, 128 or 256");
  static_assert(!(Asymmetric_ && WeightPerTile_), "per-tile weight scales are a symmetric-scheme shortcut");
};

// The schedule of qgemm's own kernel layer with three consumer warp groups on one 192-row tile
// (sm90_gemm_three_consumers.hpp). Not derived from CUTLASS's cooperative tag: CUTLASS 4.2's
// cooperative kernel asserts two consumer warp groups and would otherwise be selected.
struct KernelTmaWarpSpecializedThreeConsumers {
  static constexpr int SchedulerPipelineStageCount = 0;
};

// Dispatch policy: CUTLASS's warp-specialized TMA mainloop plus the scheme.
template <int Stages_, class ClusterShape_, class KernelSchedule_, class Scheme_>
struct MainloopSm90BlockPromote
    : cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<Stages_, ClusterShape_, KernelSchedule_> {
  using Scheme = Scheme_;
};

}  // namespace qgemm::w8a8

// The kernel layer starts the producer warp that runs load_auxiliary only for policies that ask.
namespace cutlass::gemm::kernel::detail {
template <int Stages, class ClusterShape, class KernelSchedule, class Scheme>
struct HasAuxiliaryLoad<qgemm::w8a8::MainloopSm90BlockPromote<Stages, ClusterShape, KernelSchedule, Scheme>>
    : cute::true_type {};
}  // namespace cutlass::gemm::kernel::detail

namespace qgemm::w8a8 {

// int32 -> float of a block product. Exact: |P| <= 128 * 128 * 128 = 2^21 < 2^24 for a 128-deep
// block of int8 products (a 256-deep block is promoted in two 128-deep halves).
CUTLASS_DEVICE float to_float(int32_t p) { return __int2float_rn(p); }
CUTLASS_DEVICE float to_float(float p) { return p; }

// cp.async of one float, zero-filled when `valid` is false (no global access then).
CUTLASS_DEVICE void cp_async_float(float* smem, float const* gmem, bool valid) {
  uint32_t dst = cute::cast_smem_ptr_to_uint(smem);
  int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(valid ? gmem : nullptr),
               "r"(src_bytes));
}

// AlternateWarpGroups_ (cooperative only): the two consumer warp groups take turns on the tensor
// cores (two named barriers): a warp group issues a block's WGMMAs once the other's previous
// block is done, so that one promotes while the other's WGMMAs run (FlashAttention-3 orders its
// softmax against the other warp group's GEMMs the same way). Left free, both wait for the same
// stage, issue together and share the tensor cores, so they also promote together. Measured on
// the H100 (benchmarks/README.md): the asymmetric scheme, whose promotion is five FP32 operations
// per element, gains 2-5% at M = 4096; the symmetric one (two) loses 10-15%, because one warp
// group's 64 x 128 WGMMAs alone run the tensor cores at about half their rate, and strict turns
// leave them there.
//
// BlocksInFlight_: how many blocks' WGMMAs a warp group issues before it waits for the first of them
// (1: one block at a time). A 64-row decode tile's block is a few small WGMMAs whose latency, with the
// wait, the promotion and the stage's barriers, makes one block a serial step of about 240 ns (H200,
// benchmarks/README.md); a weight of few tiles leaves each CTA a long chain of such steps. With n in
// flight, the warp group issues n blocks (each into its own int32 temporary) and promotes each as it
// completes, so the blocks' latencies overlap. Every temporary is waited for inside the group: nothing
// is in flight across the loop's back edge (ptxas's C7514, below). Blocks of 128 and 256 (one
// promotion per stage) and one 64-row slice per warp group.
template <int Stages, class ClusterShape_, class KernelSchedule, class Scheme_, class TileShape_,
          class ElementOperand_ = int8_t, bool AlternateWarpGroups_ = false, int BlocksInFlight_ = 1>
struct Sm90BlockPromoteMma {
  using Scheme = Scheme_;
  using DispatchPolicy = MainloopSm90BlockPromote<Stages, ClusterShape_, KernelSchedule, Scheme>;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  using ElementA = ElementOperand_;
  using ElementB = ElementOperand_;
  using StrideA = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // K-major [M, K]
  using StrideB = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // K-major [N, K]
  using ArchTag = cutlass::arch::Sm90;

  static constexpr int kTileM = size<0>(TileShape{});
  static constexpr int kTileN = size<1>(TileShape{});
  static constexpr int kTileK = size<2>(TileShape{});
  static constexpr int kBlockSize = Scheme::kBlockSize;
  static constexpr int kVectors = Scheme::kVectors;
  static_assert(kTileK == 128, "one pipeline stage holds 128 K (one 128-byte swizzled row of int8)");
  // Promotions per stage (blocks narrower than the stage) and stages per block (256-deep blocks).
  static constexpr int kPromotionsPerStage = kBlockSize < kTileK ? kTileK / kBlockSize : 1;
  static constexpr int kStagesPerBlock = kBlockSize > kTileK ? kBlockSize / kTileK : 1;
  static constexpr int kPromotionK = kTileK / kPromotionsPerStage;  // K per promotion

  static constexpr bool kThreeConsumers = cute::is_same_v<KernelSchedule, KernelTmaWarpSpecializedThreeConsumers>;
  static constexpr bool IsCooperative =
      cute::is_base_of_v<cutlass::gemm::KernelTmaWarpSpecializedCooperative, KernelSchedule> || kThreeConsumers;
  // Consumer warp groups on one tile, one 64-row WGMMA slice each (per pass, for 256-row tiles).
  static constexpr int kConsumers = kThreeConsumers ? 3 : IsCooperative ? 2 : 1;
  static_assert(!kThreeConsumers || kTileM == 192, "three consumer warp groups: a 192-row tile");
  static constexpr bool kAlternate = AlternateWarpGroups_;
  static_assert(!kAlternate || IsCooperative, "warp groups alternate on one tile: the cooperative schedule");
  static constexpr int kBlocksInFlight = BlocksInFlight_;
  static_assert(kBlocksInFlight == 1 || kBlocksInFlight == 2 || kBlocksInFlight == 4, "1, 2 or 4 blocks in flight");
  static_assert(kBlocksInFlight == 1 || (kPromotionsPerStage == 1 && !kAlternate),
                "blocks in flight: one promotion per stage (blocks of 128 or 256), no turns");
  // Named barriers (user ids, after CUTLASS's reserved ones) of the alternation. Two warp groups:
  // "warp group 0 may issue", "warp group 1 may issue", and the start of a tile. Three: "warp group
  // g may issue its even / odd block" (ids 2g, 2g + 1; see mma()), and the start of a tile (6).
  static constexpr uint32_t kTurnBarrier0 = 0, kTurnBarrier1 = 1;
  static constexpr uint32_t kTileStartBarrier = kConsumers == 3 ? 6 : 2;
  using AtomLayoutMNK = Layout<Shape<Int<kConsumers>, _1, _1>>;

  // The int8 WGMMA the mainloop runs, and the FP32-accumulating one the kernel and the epilogue
  // see (same accumulator layout, so the FP32 accumulators the kernel allocates line up with the
  // int32 temporaries element by element).
  using TiledMmaInt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<ElementOperand_, ElementOperand_,
                           cute::conditional_t<cute::is_same_v<ElementOperand_, int8_t>, int32_t, float>,
                           TileShape, GMMA::Major::K, GMMA::Major::K>(),
      AtomLayoutMNK{}));
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<cutlass::half_t, cutlass::half_t, float, TileShape, GMMA::Major::K, GMMA::Major::K>(),
      AtomLayoutMNK{}));
  static_assert(cute::is_same_v<decltype(TiledMmaInt{}.get_layoutC_TV()), decltype(TiledMma{}.get_layoutC_TV())>,
                "the int8 and FP32 WGMMA atoms must share their accumulator layout");
  using ElementAccumulator = float;
  using ElementTemp = typename TiledMmaInt::ValTypeC;

  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<0>(ClusterShape{})));
  using SmemLayoutAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   GMMA::Major::K, ElementA, decltype(get<0>(TileShape{})), decltype(get<2>(TileShape{}))>());
  using SmemLayoutAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   GMMA::Major::K, ElementB, decltype(get<1>(TileShape{})), decltype(get<2>(TileShape{}))>());
  using SmemLayoutA = decltype(tile_to_shape(SmemLayoutAtomA{},
                                             make_shape(shape<0>(TileShape{}), shape<2>(TileShape{}), Int<Stages>{})));
  using SmemLayoutB = decltype(tile_to_shape(SmemLayoutAtomB{},
                                             make_shape(shape<1>(TileShape{}), shape<2>(TileShape{}), Int<Stages>{})));

  using MainloopPipeline = cutlass::PipelineTmaAsync<Stages>;
  using PipelineState = cutlass::PipelineState<Stages>;
  using PipelineParams = typename MainloopPipeline::Params;

  // One thread issues the TMA loads; the 32 threads of the vector warp arrive through cp.async.
  static constexpr int NumProducerThreadEvents = 33;

  // Per stage: kVectors row vectors and kVectors column vectors, one tile extent per promotion.
  static constexpr int kRowFloats = kVectors * kPromotionsPerStage * kTileM;
  static constexpr int kColFloats = kVectors * kPromotionsPerStage * kTileN;

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128> {
      cute::array_aligned<ElementA, cute::cosize_v<SmemLayoutA>> smem_A;
      cute::array_aligned<ElementB, cute::cosize_v<SmemLayoutB>> smem_B;
      CUTE_ALIGNAS(16) float rows[Stages][kRowFloats];
      CUTE_ALIGNAS(16) float cols[Stages][kColFloats];
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  static constexpr int kStageBytes = (kTileM + kTileN) * kTileK * int(sizeof(ElementA)) +
                                     (kRowFloats + kColFloats) * int(sizeof(float)) +
                                     int(sizeof(typename MainloopPipeline::SharedStorage)) / Stages;

  // Host arguments: the operands and the per-block vectors, rows (tile M side) then columns.
  struct Arguments {
    ElementA const* ptr_A;
    StrideA dA;
    ElementB const* ptr_B;
    StrideB dB;
    BlockVector rows[kVectors];
    BlockVector cols[kVectors];
  };

  struct Params {
    using TMA_A = decltype(make_tma_copy_A_sm90(
        GmemTiledCopyA{}, make_tensor(static_cast<ElementA const*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
        SmemLayoutA{}(_, _, _0{}), TileShape{}, ClusterShape{}));
    using TMA_B = decltype(make_tma_copy_B_sm90(
        GmemTiledCopyB{}, make_tensor(static_cast<ElementB const*>(nullptr), repeat_like(StrideB{}, int32_t(0)), StrideB{}),
        SmemLayoutB{}(_, _, _0{}), TileShape{}, ClusterShape{}));
    TMA_A tma_load_a;
    TMA_B tma_load_b;
    uint32_t tma_transaction_bytes = TmaTransactionBytes;
    BlockVector rows[kVectors];
    BlockVector cols[kVectors];
    int extent_rows;  // M of the kernel's problem (vectors beyond read as zero)
    int extent_cols;  // N
    int blocks;       // K / block_size
  };

  static constexpr uint32_t TmaTransactionBytes =
      uint32_t((size<0>(SmemLayoutA{}) * size<1>(SmemLayoutA{}) + size<0>(SmemLayoutB{}) * size<1>(SmemLayoutB{})) *
               sizeof(ElementA));

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    Tensor tensor_a = make_tensor(args.ptr_A, make_layout(make_shape(M, K, L), args.dA));
    Tensor tensor_b = make_tensor(args.ptr_B, make_layout(make_shape(N, K, L), args.dB));
    Params params{make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutA{}(_, _, _0{}), TileShape{}, ClusterShape{}),
                  make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, SmemLayoutB{}(_, _, _0{}), TileShape{}, ClusterShape{}),
                  TmaTransactionBytes, {}, {}, int(M), int(N), int(K) / kBlockSize};
    for (int v = 0; v < kVectors; ++v) {
      params.rows[v] = args.rows[v];
      params.cols[v] = args.cols[v];
    }
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    constexpr int kAlign = 128 / cutlass::sizeof_bits<ElementA>::value;  // 16-byte TMA rows
    return K % kBlockSize == 0 && K % kAlign == 0 && L == 1 &&
           cutlass::detail::check_alignment<kAlign>(cute::make_shape(M, K, L), args.dA) &&
           cutlass::detail::check_alignment<kAlign>(cute::make_shape(N, K, L), args.dB) &&
           args.ptr_A != nullptr && args.ptr_B != nullptr && args.rows[0].ptr != nullptr &&
           args.cols[0].ptr != nullptr;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));
    Tensor mB_nkl = params.tma_load_b.get_tma_tensor(make_shape(N, K, L));
    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});  // (BLK_M,BLK_K,m,k,l)
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});  // (BLK_N,BLK_K,n,k,l)
    return cute::make_tuple(gA_mkl, gB_nkl);
  }

  // TMA producer warp: the operand tiles of every K stage of one output tile.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    int lane_predicate = cute::elect_one_sync();
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});

    constexpr uint32_t cluster_shape_x = get<0>(ClusterShape());
    uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x};
    auto block_tma_a = params.tma_load_a.get_slice(cluster_local_block_id.y);
    auto block_tma_b = params.tma_load_b.get_slice(cluster_local_block_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = get<0>(load_inputs)(_, _, m_coord, _, l_coord);
    Tensor gB = get<1>(load_inputs)(_, _, n_coord, _, l_coord);
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);

    uint16_t mcast_mask_a = 0;
    uint16_t mcast_mask_b = 0;
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};
      for (int n = 0; n < size<1>(block_layout); ++n) {
        mcast_mask_a |= (uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{}));
      }
    }
    if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};
      for (int m = 0; m < size<0>(block_layout); ++m) {
        mcast_mask_b |= (uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{}));
      }
    }

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      int write_stage = smem_pipe_write.index();
      auto* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      if (lane_predicate) {
        copy(params.tma_load_a.with(*tma_barrier, mcast_mask_a), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, write_stage));
        copy(params.tma_load_b.with(*tma_barrier, mcast_mask_b), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, write_stage));
      }
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // Vector producer warp: the per-block row and column vectors of each stage, through cp.async
  // into the stage's shared memory (zeros past the problem's rows, columns and blocks).
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load_auxiliary(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                     cute::tuple<TensorA, TensorB> const&, BlockCoord const& blk_coord,
                                     KTileIterator k_tile_iter, int k_tile_count, int lane, uint32_t,
                                     TensorStorage& shared_tensors) {
    // The activation vectors may be the previous kernel's output (act_quant): under programmatic
    // launch, wait for it. CUTLASS 4.2's cooperative kernel waits in its TMA warp only (its ping-pong
    // kernel in this one too). In a plain launch the wait returns at once.
    qgemm::pdl::wait_for_previous_grid();
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    int row0 = int(m_coord) * kTileM;
    int col0 = int(n_coord) * kTileN;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      int stage = smem_pipe_write.index();
      int k_tile = int(*k_tile_iter);
      // The asymmetric offset terms belong to a whole block: a block spanning two stages adds
      // them on its first stage only (the second stage's R1 and R2 stay zero).
      bool first_stage_of_block = k_tile % kStagesPerBlock == 0;
      CUTLASS_PRAGMA_UNROLL
      for (int p = 0; p < kPromotionsPerStage; ++p) {
        int block = k_tile * kPromotionsPerStage / kStagesPerBlock + p;
        bool block_valid = block < params.blocks;
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < kVectors; ++v) {
          BlockVector rv = params.rows[v];
          bool load_rows = block_valid && rv.ptr != nullptr && (v == 0 || first_stage_of_block || !Scheme::kActOnRows);
          float* dst_rows = shared_tensors.rows[stage] + (v * kPromotionsPerStage + p) * kTileM;
          for (int i = lane; i < kTileM; i += 32) {
            int r = row0 + i;
            bool valid = load_rows && r < params.extent_rows;
            cp_async_float(dst_rows + i, rv.ptr + int64_t(block) * rv.block_stride +
                                             int64_t(r >> rv.index_shift) * rv.index_stride, valid);
          }
          BlockVector cv = params.cols[v];
          bool load_cols = block_valid && cv.ptr != nullptr && (v == 0 || first_stage_of_block || Scheme::kActOnRows);
          float* dst_cols = shared_tensors.cols[stage] + (v * kPromotionsPerStage + p) * kTileN;
          int col_count = (Scheme::kWeightPerTile && Scheme::kActOnRows) ? 1 : kTileN;
          for (int i = lane; i < col_count; i += 32) {
            int c = col0 + i;
            bool valid = load_cols && c < params.extent_cols;
            cp_async_float(dst_cols + i, cv.ptr + int64_t(block) * cv.block_stride +
                                             int64_t(c >> cv.index_shift) * cv.index_stride, valid);
          }
        }
      }
      pipeline.producer_commit(smem_pipe_write, cutlass::arch::cpasync_barrier_arrive_noinc);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // acc += R0 C0 P (+ R1 C1 + R2 C2) for one promotion's vectors (in shared memory). The weight
  // rows of a swap-AB kernel hold the weight's vectors; where the activations sit, their second
  // vector is sum(q) and becomes s * sum(q) here.
  template <class FrgAcc, class FrgTemp, class FrgCoord>
  CUTLASS_DEVICE static void promote(FrgAcc&& accum, FrgTemp const& temp, FrgCoord const& coord, float const* rows,
                                     float const* cols) {
    if constexpr (!Scheme::kAsymmetric) {
      if constexpr (Scheme::kWeightPerTile) {
        // One weight scale for the whole tile and block: fold it into the activation scales.
        float const* act = Scheme::kActOnRows ? rows : cols;
        float const w = Scheme::kActOnRows ? cols[0] : rows[0];
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) {
          int a = Scheme::kActOnRows ? get<0>(coord(i)) : get<1>(coord(i));
          accum(i) = fmaf(act[a] * w, to_float(temp(i)), accum(i));
        }
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) {
          int r = get<0>(coord(i)), c = get<1>(coord(i));
          accum(i) = fmaf(rows[r] * cols[c], to_float(temp(i)), accum(i));
        }
      }
    } else {
      float const* r0 = rows;
      float const* r1 = rows + kPromotionsPerStage * kTileM;
      float const* r2 = rows + 2 * kPromotionsPerStage * kTileM;
      float const* c0 = cols;
      float const* c1 = cols + kPromotionsPerStage * kTileN;
      float const* c2 = cols + 2 * kPromotionsPerStage * kTileN;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) {
        int r = get<0>(coord(i)), c = get<1>(coord(i));
        // Activation side: (s, sum(q), o) -> (s, s sum(q), o); weight side: (s, o, v).
        float ra = r0[r], rb = r1[r], rc = r2[r];
        float ca = c0[c], cb = c1[c], cc = c2[c];
        float acc = accum(i);
        acc = fmaf(ra * ca, to_float(temp(i)), acc);
        if constexpr (Scheme::kActOnRows) {
          acc = fmaf(ra * rb, cb, acc);  // (s_x sum(q_x)) o_w
          acc = fmaf(rc, cc, acc);       // o_x v_w
        } else {
          acc = fmaf(rb, ca * cb, acc);  // o_w (s_x sum(q_x))
          acc = fmaf(rc, cc, acc);       // v_w o_x
        }
        accum(i) = acc;
      }
    }
  }

  // Consumer warp groups: per stage, per promotion, the block's WGMMAs into the int32
  // temporaries, then their promotion into `accum` (FP32). The other warp group's WGMMAs (or,
  // ping-pong, the other tile's) keep the tensor cores busy while this one promotes (in turns with
  // kAlternate, above).
  // Not two temporaries (issue block i+1's WGMMAs, then promote block i): ptxas 13.0 serializes
  // every WGMMA of such a loop (C7514: "non wgmma instructions reading accumulator registers of a
  // wgmma between start and end of the pipeline stage"), and it measured 857 TOPS against ~980 on
  // the H100 at M = 4096. Copying the finished temporary to other registers before issuing the
  // next block's WGMMAs fared no better: ptxas serialized them for "non wgmma instructions defining
  // accumulator registers" (C7515) and spilled on the 128 x 16 tile. The cause of C7514 is a
  // temporary in flight across the loop's back edge: the compiler copies it there. Pairs of blocks
  // (issue both, promote the first while the second runs, nothing in flight at the back edge)
  // compile clean, but measured no faster (symmetric, 2026-11-26) and spilled (asymmetric), so the
  // overlap comes from the other warp group.
  // A 256-row tile gives each warp group two 64-row slices, each run and promoted in turn through the
  // one slice of temporaries: the operand bytes per MAC drop by a quarter (384 rows of A and B per
  // 256 x 128 outputs, against 256 per 128 x 128), which measured 7-10% faster at M = 4096 on the
  // H100 (qgemm/w8a8/heuristics.py). The asymmetric promotion's six vectors do not fit beside its
  // 128 + 64 registers (ptxas spills), so that tile is the symmetric scheme's.
  // Turns (kAlternate). Number the tile's units (one block's WGMMAs of one warp group) in issue order,
  // t = unit * kConsumers + warp group: unit t is issued once unit t - (kConsumers - 1) is done, so all
  // warp groups but one have WGMMAs in flight while that one promotes. Two warp groups: one barrier
  // each ("may issue"). Three: warp group g's units wait on barrier 2g + (unit & 1), armed by warp group
  // g + 1 when it finishes the unit two before; alternating two barriers per warp group keeps each armed
  // at most once ahead (the arrival for unit u + 2 needs unit u issued first), which one barrier would
  // not: warp group g + 1 may finish two units while g promotes.
  CUTLASS_DEVICE static void wait_turn(int warp_group, int unit) {
    constexpr uint32_t kPair = 2 * cutlass::NumThreadsPerWarpGroup;
    if constexpr (kConsumers == 2) {
      if (warp_group == 1) {
        cutlass::arch::NamedBarrier::sync(kPair, kTurnBarrier1);
      } else if (unit > 0) {
        cutlass::arch::NamedBarrier::sync(kPair, kTurnBarrier0);
      }
    } else {
      if (unit * kConsumers + warp_group >= kConsumers - 1) {
        cutlass::arch::NamedBarrier::sync(kPair, uint32_t(2 * warp_group + (unit & 1)));
      }
    }
  }

  CUTLASS_DEVICE static void pass_turn(int warp_group, int unit, int units) {
    constexpr uint32_t kPair = 2 * cutlass::NumThreadsPerWarpGroup;
    if constexpr (kConsumers == 2) {
      if (warp_group == 0) {
        cutlass::arch::NamedBarrier::arrive(kPair, kTurnBarrier1);
      } else if (unit + 1 < units) {
        cutlass::arch::NamedBarrier::arrive(kPair, kTurnBarrier0);
      }
    } else {
      int next = unit * kConsumers + warp_group + kConsumers - 1;  // the unit this one's completion frees
      if (next < units * kConsumers) {
        int owner = next % kConsumers;
        cutlass::arch::NamedBarrier::arrive(kPair, uint32_t(2 * owner + ((next / kConsumers) & 1)));
      }
    }
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});

    constexpr int MmaWarpGroups = size(TiledMmaInt{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMmaInt tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCsA = thread_mma.partition_A(sA);
    Tensor tCsB = thread_mma.partition_B(sB);
    Tensor tCrA = thread_mma.make_fragment_A(tCsA);  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(tCsB);  // (MMA,MMA_N,MMA_K,PIPE)
    constexpr int kMmaK = size<2>(tCrA);             // k32 WGMMAs per stage
    static_assert(kMmaK % kPromotionsPerStage == 0, "a promotion covers whole WGMMA k steps");
    constexpr int kMmaPerPromotion = kMmaK / kPromotionsPerStage;

    // The tile coordinates (row, column) of each accumulator this thread holds.
    Tensor cC = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    Tensor tCcC = tiled_mma.get_slice(thread_idx).partition_C(cC);
    // The int32 temporaries hold one 64-row slice of the warp group's rows: a 256-row tile gives each
    // warp group two slices (MMA_M = 2), run and promoted one after the other, so that the FP32
    // accumulators (128 per thread) and one slice's temporaries (64) fit the consumers' registers.
    constexpr int kSlicesM = decltype(size<1>(accum))::value;
    static_assert(kSlicesM == 1 || !kAlternate, "turns are counted per block: one slice per warp group");
    Tensor temp = make_fragment_like<ElementTemp>(accum(_, _0{}, _));  // (MMA, MMA_N)
    CUTE_STATIC_ASSERT_V(size(temp) * Int<kSlicesM>{} == size(accum));

    // Alternation (kAlternate): warp group 0 issues unit u once warp group 1's unit u - 1 is done,
    // and warp group 1 issues unit u once warp group 0's is done. Each barrier is armed by
    // exactly one arrive per sync, at most one ahead, and the tile starts with both warp groups met,
    // so no arrival of one tile can be taken for another's.
    [[maybe_unused]] int const units = k_tile_count * kPromotionsPerStage;
    [[maybe_unused]] int unit = 0;
    if constexpr (kAlternate) {
      cutlass::arch::NamedBarrier::sync(kConsumers * cutlass::NumThreadsPerWarpGroup, kTileStartBarrier);
    }

    clear(accum);
    warpgroup_fence_operand(accum);
    if constexpr (kBlocksInFlight > 1) {
      static_assert(kSlicesM == 1, "blocks in flight: one 64-row slice per warp group");
      // Groups of kBlocksInFlight stages: each stage's WGMMAs into its own temporary (one commit
      // each), then each promoted as soon as its batch is done, and its stage handed back.
      decltype(temp) group[kBlocksInFlight];
      PipelineState stages[kBlocksInFlight];
      CUTLASS_PRAGMA_NO_UNROLL
      for (; k_tile_count >= kBlocksInFlight; k_tile_count -= kBlocksInFlight) {
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < kBlocksInFlight; ++b) {
          stages[b] = smem_pipe_read;
          ++smem_pipe_read;
          auto barrier_token = pipeline.consumer_try_wait(stages[b]);
          pipeline.consumer_wait(stages[b], barrier_token);
          int read_stage = stages[b].index();
          tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
          warpgroup_fence_operand(group[b]);
          warpgroup_arrive();
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < kMmaK; ++k) {
            CUTLASS_PRAGMA_UNROLL
            for (int n = 0; n < size<1>(temp); ++n) {
              cute::gemm(tiled_mma, tCrA(_, _0{}, k, read_stage), tCrB(_, n, k, read_stage), group[b](_, n));
            }
            tiled_mma.accumulate_ = GMMA::ScaleOut::One;
          }
          warpgroup_commit_batch();
        }
        cute::for_each(make_int_sequence<kBlocksInFlight>{}, [&](auto b) {
          warpgroup_wait<kBlocksInFlight - 1 - decltype(b)::value>();  // batch b done, later ones may run
          warpgroup_fence_operand(group[b]);
          int read_stage = stages[b].index();
          promote(accum(_, _0{}, _), group[b], tCcC(_, _0{}, _), shared_tensors.rows[read_stage],
                  shared_tensors.cols[read_stage]);
          pipeline.consumer_release(stages[b]);
        });
      }
      // The last k_tile_count % kBlocksInFlight stages: one at a time, below.
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int read_stage = smem_pipe_read.index();
      CUTLASS_PRAGMA_UNROLL
      for (int p = 0; p < kPromotionsPerStage; ++p, ++unit) {
        if constexpr (kAlternate) {
          wait_turn(warp_group_idx, unit);
        }
        // One 64-row slice of the warp group's rows at a time (two for a 256-row tile).
        CUTLASS_PRAGMA_UNROLL
        for (int slice = 0; slice < kSlicesM; ++slice) {
          tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
          warpgroup_fence_operand(temp);
          warpgroup_arrive();
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < kMmaPerPromotion; ++k) {
            int k_block = p * kMmaPerPromotion + k;
            CUTLASS_PRAGMA_UNROLL
            for (int n = 0; n < size<1>(temp); ++n) {
              cute::gemm(tiled_mma, tCrA(_, slice, k_block, read_stage), tCrB(_, n, k_block, read_stage), temp(_, n));
            }
            tiled_mma.accumulate_ = GMMA::ScaleOut::One;
          }
          warpgroup_commit_batch();
          warpgroup_wait<0>();
          if constexpr (kAlternate) {
            // Hand the tensor cores over once this block's WGMMAs are done (not when issued: issued
            // together, two warp groups' WGMMAs share the tensor cores and finish together).
            pass_turn(warp_group_idx, unit, units);
          }
          warpgroup_fence_operand(temp);
          promote(accum(_, slice, _), temp, tCcC(_, slice, _), shared_tensors.rows[read_stage] + p * kTileM,
                  shared_tensors.cols[read_stage] + p * kTileN);
        }
      }
      // The stage's operands and vectors are all read: hand it back to the producers.
      pipeline.consumer_release(smem_pipe_read);
      ++smem_pipe_read;
    }
    warpgroup_fence_operand(accum);
  }

  // Every stage was released inside mma().
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};

}  // namespace qgemm::w8a8
