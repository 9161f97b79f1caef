// Emulator replacement of templates/include/qgemm/abi_exports.h (see ../cuda_emu.h): the same host
// functions, and emu_launch, which runs the kernel on the CPU emulator instead of a GPU entry.
#pragma once

#include <new>
#include <type_traits>

#include "../cuda_emu.h"
#include "cutlass/cutlass.h"
#include "qgemm/abi.h"

extern "C" const char* emu_error() { return emu::state().error.c_str(); }

// Global memory cp.async may read: [ptr, ptr + bytes). No ranges: anything.
extern "C" void emu_readable(void const* ptr, uint64_t bytes) {
  char const* p = static_cast<char const*>(ptr);
  emu::state().readable.push_back(emu::Range{p, p + bytes});
}
extern "C" void emu_clear_readable() { emu::state().readable.clear(); }
extern "C" void emu_schedule(int schedule) { emu::state().schedule = schedule; }
// Global memory an L2 prefetch may name: [ptr, ptr + bytes); bytes 0: anything.
extern "C" void emu_prefetchable(void const* ptr, uint64_t bytes) {
  char const* p = static_cast<char const*>(ptr);
  emu::state().prefetchable = bytes ? emu::Range{p, p + bytes} : emu::Range{};
}
// The last launch's L2 prefetches: bytes in all, and the most one block asked for.
extern "C" uint64_t emu_prefetched() { return emu::state().prefetched; }
extern "C" uint64_t emu_prefetched_block_max() { return emu::state().prefetched_block_max; }

extern "C" int qgemm_abi_version() { return QGEMM_ABI_VERSION; }
extern "C" const char* qgemm_status_string(int status) {
  return status == QGEMM_STATUS_BAD_PROBLEM ? "problem not supported by this kernel" : "error";
}

// Emulated libraries hold one kernel, so emu_launch needs no prefix; the ABI's own symbols do.
#define QGEMM_EXPORT_KERNEL(ENTRY, ADAPTER, SPEC_JSON)                                                 \
  extern "C" const char* ENTRY##_spec_json() { return SPEC_JSON; }                                   \
  extern "C" int ENTRY##_plan(QgemmProblem const* problem, QgemmLaunch* launch) {                    \
    *launch = QgemmLaunch{};                                                                         \
    launch->block[0] = ADAPTER::kThreadCount;                                                        \
    launch->block[1] = launch->block[2] = 1;                                                         \
    launch->cluster[0] = launch->cluster[1] = launch->cluster[2] = 1;                                \
    launch->params_bytes = sizeof(ADAPTER::Params);                                                  \
    return ADAPTER::plan(*problem, *launch);                                                         \
  }                                                                                                  \
  extern "C" int ENTRY##_make_params(QgemmProblem const* problem, void* workspace, void* params,    \
                                   uint64_t capacity) {                                              \
    if (capacity < sizeof(ADAPTER::Params)) return QGEMM_STATUS_PARAMS_BUFFER_TOO_SMALL;             \
    ADAPTER::Params* p = new (params) ADAPTER::Params();                                             \
    return ADAPTER::make_params(*problem, workspace, *p);                                            \
  }                                                                                                  \
  /* 0: ran; 1: emulation error (emu_error); otherwise the plan/make_params status + 1000. */        \
  extern "C" int emu_launch(QgemmProblem const* problem, void* workspace) {                          \
    QgemmLaunch launch;                                                                              \
    int status = ENTRY##_plan(problem, &launch);                                                     \
    if (status != 0) return 1000 + status;                                                           \
    static ADAPTER::Params params;                                                                   \
    params = ADAPTER::Params{};                                                                      \
    status = ADAPTER::make_params(*problem, workspace, params);                                      \
    if (status != 0) return 1000 + status;                                                           \
    return emu::launch(make_uint3(launch.grid[0], launch.grid[1], launch.grid[2]), int(launch.block[0]), \
                       launch.smem_bytes, [](char* smem) { ADAPTER::run(params, smem); });            \
  }
