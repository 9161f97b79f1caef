// Defines the ABI of abi.h for one kernel, from a family's adapter.
//
// An adapter is a struct with:
//   using Params = ...;                         // the entry's single argument
//   static int const kThreadCount;              // threads per block
//   static int const kMinBlocksPerSm;           // optional: blocks that must fit on one SM (caps registers)
//   static int plan(QgemmProblem const&, QgemmLaunch&);
//   static int make_params(QgemmProblem const&, void* workspace, Params&);
//   static __device__ void run(Params const&, char* smem);
// A translation unit may define several kernels (a bundle, each in its own namespace), so
// the exported host symbols carry the entry's name; the library-wide ones are defined
// here, once per translation unit. The device entry is named as the kernel, so profilers
// show it. Params are a __grid_constant__ argument: CUTLASS 3.x kernels
// keep their TMA descriptors in them and address them in the parameter space.
#pragma once

#include <new>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"  // CUTLASS_GRID_CONSTANT
#include "qgemm/abi.h"

namespace qgemm {
// An adapter's kMinBlocksPerSm, or 1 (no register cap beyond one block).
template <class Adapter, class = void>
struct MinBlocksPerSm {
  static constexpr int value = 1;
};
template <class Adapter>
struct MinBlocksPerSm<Adapter, std::void_t<decltype(Adapter::kMinBlocksPerSm)>> {
  static constexpr int value = Adapter::kMinBlocksPerSm;
};
}  // namespace qgemm

// The library-wide half of the ABI (abi.h), once per library.
extern "C" int qgemm_abi_version() { return QGEMM_ABI_VERSION; }
extern "C" const char* qgemm_status_string(int status) {
  if (status == QGEMM_STATUS_PARAMS_BUFFER_TOO_SMALL) return "params buffer too small";
  if (status == QGEMM_STATUS_BAD_PROBLEM) return "problem not supported by this kernel";
  return cutlassGetStatusString(static_cast<cutlass::Status>(status));
}

#define QGEMM_EXPORT_KERNEL(ENTRY, ADAPTER, SPEC_JSON)                                                   \
  extern "C" __global__ void __launch_bounds__(ADAPTER::kThreadCount,                            \
                                               qgemm::MinBlocksPerSm<ADAPTER>::value) ENTRY(     \
      CUTLASS_GRID_CONSTANT ADAPTER::Params const params) {                                           \
    extern __shared__ __align__(16) char qgemm_smem[];                                                 \
    ADAPTER::run(params, qgemm_smem);                                                                  \
  }                                                                                                    \
  static_assert(std::is_trivially_copyable<ADAPTER::Params>::value,                                    \
                "Params travel to the device as bytes");                                               \
  extern "C" const char* ENTRY##_spec_json() { return SPEC_JSON; }                                       \
  extern "C" int ENTRY##_plan(QgemmProblem const* problem, QgemmLaunch* launch) {                        \
    *launch = QgemmLaunch{};                                                                           \
    launch->block[0] = ADAPTER::kThreadCount;                                                          \
    launch->block[1] = launch->block[2] = 1;                                                           \
    launch->cluster[0] = launch->cluster[1] = launch->cluster[2] = 1;                                  \
    launch->params_bytes = sizeof(ADAPTER::Params);                                                    \
    return ADAPTER::plan(*problem, *launch);                                                           \
  }                                                                                                    \
  extern "C" int ENTRY##_make_params(QgemmProblem const* problem, void* workspace, void* params,        \
                                   uint64_t capacity) {                                                \
    if (capacity < sizeof(ADAPTER::Params)) return QGEMM_STATUS_PARAMS_BUFFER_TOO_SMALL;               \
    ADAPTER::Params* p = new (params) ADAPTER::Params();                                               \
    return ADAPTER::make_params(*problem, workspace, *p);                                              \
  }
