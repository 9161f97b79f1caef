// qgemm launch ABI: the one host interface every generated kernel exports.
//
// Kernels are compiled by nvcc into a host library (.so) and a fatbin, one kernel
// per invocation or several (a bundle: the build driver compiles kernels of one
// family in one translation unit, so that they parse the headers and instantiate
// CuTe's shared templates once). The fatbin holds one `extern "C" __global__`
// entry per kernel, named as the kernel, that takes the kernel's CUTLASS Params by
// value; the library holds the CUTLASS host code that builds those Params. Python (qgemm/_abi.py mirrors the two structs below, and
// nothing of CUTLASS) fills a QgemmProblem, asks the library for the launch shape
// and the Params bytes, and launches the entry with cuLaunchKernelEx.
//
// Keep this file and qgemm/_abi.py in step; bump QGEMM_ABI_VERSION on any change.
#pragma once

#include <cstdint>

#define QGEMM_ABI_VERSION 3

// Everything a kernel needs to know about one call. Families give the slots a
// meaning in their template's header comment (e.g. ptr[0] = A, ptr[1] = B, ...).
struct QgemmProblem {
  int64_t m, n, k;        // GEMM extent (a convolution's implicit-GEMM extent)
  int64_t ext[8];         // family-specific integers (block size, slice offsets, conv shape)
  const void* ptr[16];    // device pointers, family-specific order; unused slots are null
  int64_t ld[8];          // leading dimensions in elements, family-specific order
  float scalar[8];        // family-specific scalars (clamp bounds, alpha, ...)
  int32_t sm_count;       // multiprocessors on the device, for persistent schedules
  int32_t reserved;
};

// What the launcher needs besides the Params bytes.
struct QgemmLaunch {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t cluster[3];        // thread block cluster (Sm90); {1, 1, 1} launches without one
  uint32_t smem_bytes;        // dynamic shared memory; the runtime raises the attribute
  uint32_t params_bytes;      // sizeof(Params) of the entry's single argument
  uint64_t workspace_bytes;   // zero-filled device workspace (semaphores); each family's API says
                              // whether it must be zeroed again before every launch
};

// Status codes beyond cutlass::Status (which occupies 0..kInvalid).
#define QGEMM_STATUS_PARAMS_BUFFER_TOO_SMALL 100
#define QGEMM_STATUS_BAD_PROBLEM 101

// Exported by every generated library (see abi_exports.h), once per library:
extern "C" {
int qgemm_abi_version();
const char* qgemm_status_string(int status);
}
// and once per kernel <entry> in it (host symbols carry the entry's name, so that a
// bundle's kernels share one library):
//   const char* <entry>_spec_json();   // the spec that produced the kernel
//   int <entry>_plan(const QgemmProblem* problem, QgemmLaunch* launch);
//   int <entry>_make_params(const QgemmProblem* problem, void* workspace, void* params, uint64_t capacity);
