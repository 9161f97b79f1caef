// qgemm's Sm90 kernel layer for the W8A8 promotion mainloop with three consumer warp groups on one
// 192 x N tile (one 64-row WGMMA slice each), beside a producer warp group (TMA warp and vector warp).
//
// Why: in CUTLASS's cooperative kernel two consumer warp groups share a tile, and each waits for its
// block's WGMMAs before promoting them; both wait on the same stage, so they issue and promote together
// and the tensor cores idle while they promote (ncu on the H100: tensor pipe ~54% active at M = 4096,
// benchmarks/README.md). With three, and turns (Sm90BlockPromoteMma's AlternateWarpGroups: unit t issues
// once unit t - 2 is done), two warp groups always have WGMMAs in flight while the third promotes.
// CUTLASS 4.2's cooperative kernel cannot host a third: it asserts 256 consumer threads and sets their
// registers for two (232 each); here the producer gets 32 and each consumer 160 (64 FP32 accumulators +
// 64 int32 block temporaries + the rest), 65536 in all.
//
// The layer follows CUTLASS's cooperative kernel (sm90_gemm_tma_warpspecialized_cooperative.hpp) with
// the persistent data-parallel scheduler only (no stream-K: its fix-up is CUTLASS's, sized for its
// kernels), no C operand, and an epilogue of its own (DirectStoreEpilogue below): CUTLASS's TMA epilogue
// needs its 128- or 64-row subtiles to be whole multiples of the tiled MMA's rows, which 192 is not.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/arch/grid_dependency_control.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/sm90_tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/numeric_conversion.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "cute/tensor.hpp"
#include "qgemm/w8a8/sm90_block_promote.hpp"

namespace qgemm::w8a8 {

using namespace cute;

// The epilogue: out[r, c] = act(alpha * acc[r, c] + bias[c]) stored from the accumulator registers
// straight to global memory, two adjacent columns per store where the row's address allows. The same
// arithmetic as CUTLASS's LinCombPerColBiasEltAct with beta = 0 (fma(alpha, acc, bias), the activation
// functor, round-to-nearest conversion), so a tile's outputs equal the cooperative kernels'. Its argument
// names mirror CUTLASS's fusion arguments so that the adapter fills both alike. Outputs are a small share
// of the bytes (192 x 128 per tile against (192 + 128) x K of operands), so no shared-memory staging.
template <class ElementOutput_, template <class> class Activation_, class StrideD_>
struct DirectStoreEpilogue {
  using ElementOutput = ElementOutput_;
  using StrideD = StrideD_;
  static constexpr bool kClamp = cute::is_same_v<Activation_<float>, cutlass::epilogue::thread::Clamp<float>>;

  struct Arguments {
    struct Thread {
      float alpha = 1.f;
      float beta = 0.f;
      float const* bias_ptr = nullptr;
      typename cutlass::epilogue::thread::Clamp<float>::Arguments activation{};
    } thread{};
    ElementOutput const* ptr_C = nullptr;  // must be null: no source operand
    StrideD dC{};
    ElementOutput* ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;
  struct SharedStorage {};

  template <class TileShape>
  static constexpr int get_store_pipe_increment(TileShape) { return 1; }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_C == nullptr && args.thread.beta == 0.f && args.ptr_D != nullptr &&
           get<1>(args.dD) == 1;  // row-major D
  }

  template <class FrgAcc, class TiledMma, class TileShape>
  CUTLASS_DEVICE static void store(Params const& params, FrgAcc const& accum, TiledMma const& tiled_mma, TileShape,
                                   int thread_idx, int m0, int n0, int M, int N) {
    Tensor cC = make_identity_tensor(make_shape(size<0>(TileShape{}), size<1>(TileShape{})));
    Tensor tCcC = tiled_mma.get_slice(thread_idx).partition_C(cC);
    int64_t ldd = get<0>(params.dD);
    ElementOutput* out = params.ptr_D;
    // Pairs of adjacent columns go out as one store where every row start is aligned for it.
    bool pairs = ldd % 2 == 0 && reinterpret_cast<uintptr_t>(out) % (2 * sizeof(ElementOutput)) == 0;
    float const* bias = params.thread.bias_ptr;
    float alpha = params.thread.alpha;
    auto compute = [&](float acc, int col) {
      float v = fmaf(alpha, acc, bias ? bias[col] : 0.f);
      if constexpr (kClamp) {
        return cutlass::epilogue::thread::Clamp<float>{}(v, params.thread.activation);
      } else {
        return Activation_<float>{}(v);
      }
    };
    cutlass::NumericConverter<ElementOutput, float> convert;
    static_assert(decltype(size(accum))::value % 2 == 0, "accumulators come in column pairs");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); i += 2) {
      // WGMMA accumulators: elements 2j and 2j + 1 are adjacent columns of one row.
      int r = m0 + get<0>(tCcC(i)), c = n0 + get<1>(tCcC(i));
      if (r >= M || c >= N) continue;
      ElementOutput* dst = out + int64_t(r) * ldd + c;
      ElementOutput v0 = convert(compute(accum(i), c));
      if (c + 1 < N) {
        ElementOutput v1 = convert(compute(accum(i + 1), c + 1));
        if (pairs) {
          cutlass::Array<ElementOutput, 2> pair;
          pair[0] = v0;
          pair[1] = v1;
          *reinterpret_cast<cutlass::Array<ElementOutput, 2>*>(dst) = pair;
        } else {
          dst[0] = v0;
          dst[1] = v1;
        }
      } else {
        dst[0] = v0;
      }
    }
  }
};

template <class ProblemShape_, class CollectiveMainloop_, class CollectiveEpilogue_>
class GemmThreeConsumers {
 public:
  using ProblemShape = ProblemShape_;
  using CollectiveMainloop = CollectiveMainloop_;
  using CollectiveEpilogue = CollectiveEpilogue_;
  using TileShape = typename CollectiveMainloop::TileShape;
  using TiledMma = typename CollectiveMainloop::TiledMma;
  using ClusterShape = typename CollectiveMainloop::ClusterShape;
  using StrideA = typename CollectiveMainloop::StrideA;
  using StrideB = typename CollectiveMainloop::StrideB;
  using StrideD = typename CollectiveEpilogue::StrideD;
  using MainloopArguments = typename CollectiveMainloop::Arguments;
  using MainloopParams = typename CollectiveMainloop::Params;
  using TileScheduler = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;
  using TileSchedulerArguments = typename TileScheduler::Arguments;
  using TileSchedulerParams = typename TileScheduler::Params;
  static_assert(CollectiveMainloop::kThreeConsumers, "the mainloop must be built for three consumer warp groups");

  static constexpr uint32_t NumMmaWarpGroups = 3;
  static constexpr uint32_t NumMMAThreads = NumMmaWarpGroups * cutlass::NumThreadsPerWarpGroup;
  static_assert(size(TiledMma{}) == NumMMAThreads, "one 64-row WGMMA slice per consumer warp group");
  static constexpr uint32_t MaxThreadsPerBlock = NumMMAThreads + cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t MinBlocksPerMultiprocessor = 1;
  // 128 x 32 + 384 x 160 = 65536 registers: the whole register file.
  static constexpr uint32_t LoadRegisterRequirement = 32;
  static constexpr uint32_t MmaRegisterRequirement = 160;

  struct SharedStorage {
    struct PipelineStorage : cute::aligned_struct<16, _1> {
      alignas(16) typename CollectiveMainloop::PipelineStorage mainloop;
    } pipelines;
    struct TensorStorage : cute::aligned_struct<128, _1> {
      typename CollectiveMainloop::TensorStorage mainloop;
    } tensors;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);

  struct Arguments {
    cutlass::gemm::GemmUniversalMode mode{};
    ProblemShape problem_shape{};
    MainloopArguments mainloop{};
    typename CollectiveEpilogue::Arguments epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
    TileSchedulerArguments scheduler{};
  };

  // What the kernel reads (the mode is checked on the host: kGemm only).
  struct Params {
    ProblemShape problem_shape{};
    MainloopParams mainloop{};
    typename CollectiveEpilogue::Params epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
    TileSchedulerParams scheduler{};
  };

  static Params to_underlying_arguments(Arguments const& args, void*) {
    auto problem_shape_MNKL = append<4>(args.problem_shape, 1);
    cutlass::KernelHardwareInfo hw_info{args.hw_info.device_id, args.hw_info.sm_count, 0};
    TileSchedulerParams scheduler = TileScheduler::to_underlying_arguments(
        problem_shape_MNKL, TileShape{}, ClusterShape{}, hw_info, args.scheduler, nullptr, 1);
    return {args.problem_shape, CollectiveMainloop::to_underlying_arguments(args.problem_shape, args.mainloop, nullptr),
            args.epilogue, hw_info, scheduler};
  }

  static bool can_implement(Arguments const& args) {
    return args.mode == cutlass::gemm::GemmUniversalMode::kGemm && args.hw_info.sm_count > 0 &&
           CollectiveMainloop::can_implement(args.problem_shape, args.mainloop) &&
           CollectiveEpilogue::can_implement(args.problem_shape, args.epilogue) &&
           TileScheduler::can_implement(args.scheduler);
  }

  static size_t get_workspace_size(Arguments const&) { return 0; }

  static dim3 get_grid_shape(Params const& params) {
    TileSchedulerArguments args{};
    args.max_swizzle_size = 1 << params.scheduler.log_swizzle_size_;
    args.raster_order = params.scheduler.raster_order_ == TileScheduler::RasterOrder::AlongN
                            ? TileScheduler::RasterOrderOptions::AlongN
                            : TileScheduler::RasterOrderOptions::AlongM;
    return TileScheduler::get_grid_shape(params.scheduler, params.problem_shape, TileShape{}, ClusterShape{},
                                         params.hw_info, args);
  }

  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    enum class ProducerWarpRole { Mainloop = 0, MainloopAux = 3 };  // warps 1 and 2 have nothing to do

    SharedStorage& shared_storage = *reinterpret_cast<SharedStorage*>(smem_buf);
    int thread_idx = int(threadIdx.x);
    int lane_idx = cutlass::canonical_lane_idx();
    int warp_idx = cutlass::canonical_warp_idx_sync();
    int warp_group_idx = cutlass::canonical_warp_group_idx();  // 0: producer, 1-3: consumers
    int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;
    auto producer_warp_role = ProducerWarpRole(warp_idx % cutlass::NumWarpsPerWarpGroup);
    int lane_predicate = cute::elect_one_sync();
    uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if (warp_idx == 0 && lane_predicate) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
    }

    using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
    typename MainloopPipeline::Params pipeline_params;
    if (warp_group_idx == 0 &&
        (producer_warp_role == ProducerWarpRole::Mainloop || producer_warp_role == ProducerWarpRole::MainloopAux)) {
      pipeline_params.role = MainloopPipeline::ThreadCategory::Producer;
    }
    if (warp_group_idx > 0) {
      pipeline_params.role = MainloopPipeline::ThreadCategory::Consumer;
    }
    pipeline_params.is_leader = warp_group_thread_idx == 0;
    pipeline_params.num_consumers = NumMMAThreads;
    pipeline_params.num_producers = CollectiveMainloop::NumProducerThreadEvents;
    pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline pipeline(shared_storage.pipelines.mainloop, pipeline_params, ClusterShape{});

    // The pipeline's barriers must be initialized before any CTA of the cluster uses them.
    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }

    auto problem_shape_MNKL = append<4>(params.problem_shape, Int<1>{});
    auto blk_shape = TileShape{};
    TileScheduler scheduler{params.scheduler};
    CollectiveMainloop collective_mainloop;
    auto load_inputs = collective_mainloop.load_init(problem_shape_MNKL, params.mainloop);
    Tensor gA_mkl = get<0>(load_inputs);
    Tensor gB_nkl = get<1>(load_inputs);

    // One tile's coordinates and K tiles, as every role sees them.
    auto tile_of = [&](auto const& work) {
      auto m_coord = idx2crd(work.M_idx, shape<2>(gA_mkl));
      auto n_coord = idx2crd(work.N_idx, shape<2>(gB_nkl));
      auto l_coord = idx2crd(work.L_idx, shape<4>(gB_nkl));
      return make_coord(m_coord, n_coord, _, l_coord);
    };
    auto k_tiles = [&](auto const& work) {
      return TileScheduler::get_work_k_tile_count(work, problem_shape_MNKL, blk_shape);
    };
    auto k_tile_iterator = [&](auto const& work) {
      return cute::make_coord_iterator(idx2crd(TileScheduler::get_work_k_tile_start(work), shape<3>(gA_mkl)),
                                       shape<3>(gA_mkl));
    };

    if (warp_group_idx == 0) {
      cutlass::arch::warpgroup_reg_dealloc<LoadRegisterRequirement>();
      auto work = scheduler.initial_work_tile_info(ClusterShape{});
      auto producer_state = cutlass::make_producer_start_state<MainloopPipeline>();
      // Both producer warps walk the same tiles and stages: the TMA warp loads the operand tiles, the vector
      // warp the per-block vectors (the stage's full barrier waits for both).
      auto for_each_tile = [&](auto&& load_tile) {
        while (work.is_valid()) {
          int count = k_tiles(work);
          load_tile(tile_of(work), k_tile_iterator(work), count);
          producer_state.advance(count);
          work = get<0>(scheduler.fetch_next_work(work));
        }
      };
      if (producer_warp_role == ProducerWarpRole::Mainloop) {
        // Under programmatic launch, the previous kernel's writes are visible only after this wait.
        cutlass::arch::wait_on_dependent_grids();
        for_each_tile([&](auto const& blk_coord, auto k_tile_iter, int count) {
          collective_mainloop.load(params.mainloop, pipeline, producer_state, load_inputs, blk_coord, k_tile_iter,
                                   count, lane_idx, block_rank_in_cluster, shared_storage.tensors.mainloop);
        });
        collective_mainloop.load_tail(pipeline, producer_state);
      } else if (producer_warp_role == ProducerWarpRole::MainloopAux) {
        for_each_tile([&](auto const& blk_coord, auto k_tile_iter, int count) {
          collective_mainloop.load_auxiliary(params.mainloop, pipeline, producer_state, load_inputs, blk_coord,
                                             k_tile_iter, count, lane_idx, block_rank_in_cluster,
                                             shared_storage.tensors.mainloop);
        });
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<MmaRegisterRequirement>();
      int mma_thread_idx = thread_idx - int(cutlass::NumThreadsPerWarpGroup);
      auto work = scheduler.initial_work_tile_info(ClusterShape{});
      typename CollectiveMainloop::PipelineState consumer_state;
      TiledMma tiled_mma;
      auto [M, N, K, L] = problem_shape_MNKL;
      while (work.is_valid()) {
        auto blk_coord = tile_of(work);
        int count = k_tiles(work);
        auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(blk_shape));  // (MMA, 1, MMA_N)
        collective_mainloop.mma(pipeline, consumer_state, accumulators, count, mma_thread_idx,
                                shared_storage.tensors.mainloop, params.mainloop);
        collective_mainloop.mma_tail(pipeline, consumer_state, count);
        consumer_state.advance(count);
        CollectiveEpilogue::store(params.epilogue, accumulators, tiled_mma, blk_shape, mma_thread_idx,
                                  int(get<0>(blk_coord)) * int(size<0>(blk_shape)),
                                  int(get<1>(blk_coord)) * int(size<1>(blk_shape)), int(M), int(N));
        work = get<0>(scheduler.fetch_next_work(work));
      }
    }
#endif
  }
};

}  // namespace qgemm::w8a8
