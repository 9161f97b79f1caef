// A CPU emulator of one CUDA thread block, for testing qgemm's hand-written CUDA kernels without a
// GPU (tests/test_w8a8_promote_emulated.py). Every CUDA thread is a fiber (ucontext) of one OS
// thread; the scheduler runs each fiber until it reaches a barrier: __syncthreads (all threads of
// the block) or a warp collective (all 32 lanes: ldmatrix, mma; see qgemm/w8a8/promote_mma.h here).
// cp.async copies land only when the issuing thread waits for their group, as on the GPU, so a
// read of a stage before its wait, or a missing barrier before a stage is refilled, shows up as
// wrong data. Blocks of a grid run one after another.
//
// Kernel sources compile unchanged with g++: this header defines the CUDA built-ins they use, and
// tests/emulator/ precedes templates/include/ on the include path, so its qgemm/abi_exports.h (the
// launch entry) and qgemm/w8a8/promote_mma.h (the warp primitives) replace the real ones.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_functions.h>
#include <vector_types.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif

namespace emu {

struct Copy {
  char* dst;
  std::vector<char> bytes;
};

struct Thread {
  enum State { kReady, kAtBlockBarrier, kAtWarpBarrier, kAtMbarrier, kDone };
  ucontext_t context;
  uint3 index;
  State state = kReady;
  std::vector<char> stack;
  std::vector<Copy> open;                     // cp.async copies not yet committed
  std::deque<std::vector<Copy>> committed;    // committed groups, oldest first
};

// What the lanes of a warp exchange in a collective.
struct WarpScratch {
  char const* address[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
};

struct Range {
  char const* begin;
  char const* end;
};

// An mbarrier (qgemm/bulk.h): arrivals still expected in the current phase, bytes announced and not
// yet landed, the phase number, and the bulk copies completing on it that have not landed.
struct Mbarrier {
  int arrivals = 0;
  int pending = 0;
  int64_t tx = 0;
  unsigned phase = 0;
  std::vector<Copy> copies;
};

struct State {
  uint3 block;
  std::vector<Thread> threads;
  std::vector<WarpScratch> warps;
  int current = 0;
  ucontext_t scheduler;
  std::function<void()> body;
  char* smem = nullptr;
  size_t smem_bytes = 0;
  std::map<void const*, Mbarrier> barriers;  // the block's mbarriers, by address
  uint64_t progress = 0;         // mbarrier arrivals and landed copies: a waiter may move on
  std::vector<Range> readable;  // global memory the kernel may read (cp.async sources)
  Range prefetchable{};          // global memory an L2 prefetch may name (empty: anything)
  uint64_t prefetched = 0;       // bytes asked for by L2 prefetches in the launch
  uint64_t prefetched_block = 0, prefetched_block_max = 0;  // by the current block; the most by one block
  // 0: lockstep (each warp one collective per sweep); 1, 2: skewed (each warp alone up to its next
  // __syncthreads, warps in order or reversed): a missing barrier lets one warp overwrite what
  // another still reads. 3, 4: skewed as 1, 2, with cp.async copies landing at once when issued
  // (0-2: when waited for): the GPU may land them anywhere between the two.
  int schedule = 0;
  std::string error;
};

inline State& state() {
  static State s;
  return s;
}
inline Thread& self() { return state().threads[state().current]; }
inline WarpScratch& warp() { return state().warps[self().index.x / 32]; }

inline void fail(std::string const& what) {
  if (state().error.empty()) state().error = what;
}

inline void yield(Thread::State s) {
  Thread& t = self();
  t.state = s;
  swapcontext(&t.context, &state().scheduler);
}

inline void sync_warp() { yield(Thread::kAtWarpBarrier); }

inline bool in_smem(void const* p, size_t bytes) {
  char const* c = static_cast<char const*>(p);
  return c >= state().smem && c + bytes <= state().smem + state().smem_bytes;
}

inline bool readable(void const* p, size_t bytes) {
  char const* c = static_cast<char const*>(p);
  for (Range const& r : state().readable) {
    if (c >= r.begin && c + bytes <= r.end) return true;
  }
  return state().readable.empty();
}

// qgemm::pdl::prefetch_l2 (cp.async.bulk.prefetch.L2): a 16-byte aligned address, a non-zero multiple
// of 16 bytes, inside state().prefetchable when the test set one.
inline void prefetch_l2(void const* p, uint64_t bytes) {
  char const* c = static_cast<char const*>(p);
  State& s = state();
  if (reinterpret_cast<uintptr_t>(c) % 16 || bytes == 0 || bytes % 16) {
    fail("L2 prefetch of " + std::to_string(bytes) + " bytes at an address or size not a multiple of 16");
  } else if (s.prefetchable.begin && (c < s.prefetchable.begin || c + bytes > s.prefetchable.end)) {
    fail("L2 prefetch of " + std::to_string(bytes) + " bytes at offset " +
         std::to_string(c - s.prefetchable.begin) + " outside the allowed " +
         std::to_string(s.prefetchable.end - s.prefetchable.begin) + " bytes");
  }
  s.prefetched += bytes;
  s.prefetched_block += bytes;
}

// ---- mbarriers and bulk copies (qgemm/bulk.h) ------------------------------------------------------
inline Mbarrier* mbarrier(void const* bar, char const* what) {
  State& s = state();
  auto it = s.barriers.find(bar);
  if (it == s.barriers.end()) {
    fail(std::string(what) + " on an mbarrier that was not initialized in this block");
    return nullptr;
  }
  return &it->second;
}

// The phase completes when its arrivals have come and its announced bytes have landed.
inline void mbarrier_complete(Mbarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.arrivals;
    ++state().progress;
  }
}

inline void mbarrier_init(void* bar, uint32_t arrivals) {
  if (!in_smem(bar, 8) || reinterpret_cast<uintptr_t>(bar) % 8) fail("mbarrier outside shared memory or misaligned");
  Mbarrier& b = state().barriers[bar];
  b = Mbarrier{};
  b.arrivals = b.pending = int(arrivals);
}

inline void mbarrier_arrive(void* bar, uint32_t bytes) {
  Mbarrier* b = mbarrier(bar, "arrive");
  if (!b) return;
  b->tx += bytes;
  if (--b->pending < 0) fail("more arrivals on an mbarrier than it expects");
  ++state().progress;
  mbarrier_complete(*b);
}

inline void land(Mbarrier& b) {
  for (Copy& c : b.copies) {
    std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    b.tx -= int64_t(c.bytes.size());
    ++state().progress;
  }
  b.copies.clear();
  mbarrier_complete(b);
}

// The copy reads its source when issued (the kernels copy weights, which nothing writes meanwhile) and
// lands when a thread waits on the barrier (schedules 3 and 4: at once), so a read of a stage before
// its wait sees the stale bytes run_block left there.
inline void bulk_copy(void* dst, void const* src, uint32_t bytes, void* bar) {
  Mbarrier* b = mbarrier(bar, "bulk copy");
  if (!b) return;
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16 || bytes == 0 || bytes % 16) {
    fail("bulk copy of " + std::to_string(bytes) + " bytes: addresses and size must be multiples of 16");
    return;
  }
  if (!in_smem(dst, bytes)) fail("bulk copy into memory outside the block's shared memory");
  if (!readable(src, bytes)) fail("bulk copy from global memory outside the readable ranges");
  if (!state().error.empty()) return;
  Copy c{static_cast<char*>(dst), std::vector<char>(static_cast<char const*>(src), static_cast<char const*>(src) + bytes)};
  b->copies.push_back(std::move(c));
  if (state().schedule >= 3) land(*b);
}

// Returns once the phase of this parity has completed (the current phase's parity differs).
inline void mbarrier_wait(void* bar, uint32_t parity) {
  for (;;) {
    Mbarrier* b = mbarrier(bar, "wait");
    if (!b) return;
    if ((b->phase & 1u) != (parity & 1u)) return;
    land(*b);
    if ((b->phase & 1u) != (parity & 1u)) return;
    yield(Thread::kAtMbarrier);
  }
}

inline void fiber_entry() {
  state().body();
  self().state = Thread::kDone;  // returning resumes the scheduler (uc_link)
}

// Runs one block of `threads` threads to completion; false (and state().error) on a deadlock.
inline bool run_block(uint3 block, int threads) {
  State& s = state();
  s.block = block;
  s.threads.assign(threads, Thread{});
  s.barriers.clear();
  uint64_t released_at = ~uint64_t(0);  // s.progress when mbarrier waiters were last let retry
  s.warps.assign((threads + 31) / 32, WarpScratch{});
  for (int t = 0; t < threads; ++t) {
    Thread& th = s.threads[t];
    th.index = make_uint3(unsigned(t), 0, 0);
    th.stack.resize(256 * 1024);
    getcontext(&th.context);
    th.context.uc_stack.ss_sp = th.stack.data();
    th.context.uc_stack.ss_size = th.stack.size();
    th.context.uc_link = &s.scheduler;
    makecontext(&th.context, fiber_entry, 0);
  }
  int const warps = (threads + 31) / 32;
  auto lanes_of = [&](int w) { return std::min(32, threads - 32 * w); };
  // Runs warp w's ready lanes; a warp collective that all its lanes reached is released.
  auto step_warp = [&](int w) -> bool {
    bool ran = false;
    for (int l = 0; l < lanes_of(w); ++l) {
      Thread& th = s.threads[32 * w + l];
      if (th.state != Thread::kReady) continue;
      s.current = 32 * w + l;
      swapcontext(&s.scheduler, &th.context);
      ran = true;
    }
    int waiting = 0;
    for (int l = 0; l < lanes_of(w); ++l) waiting += s.threads[32 * w + l].state == Thread::kAtWarpBarrier;
    if (waiting == lanes_of(w)) {
      for (int l = 0; l < lanes_of(w); ++l) s.threads[32 * w + l].state = Thread::kReady;
      ran = true;
    }
    return ran;
  };
  for (;;) {
    if (s.schedule == 0) {  // lockstep: every warp one collective further per sweep
      for (int w = 0; w < warps; ++w) step_warp(w);
    } else {  // skewed: each warp runs alone up to its next __syncthreads, in order or reversed
      for (int i = 0; i < warps; ++i) {
        int const w = s.schedule % 2 == 1 ? i : warps - 1 - i;
        while (step_warp(w)) {
        }
      }
    }
    int done = 0, at_block = 0, ready = 0;
    for (Thread const& th : s.threads) {
      done += th.state == Thread::kDone;
      at_block += th.state == Thread::kAtBlockBarrier;
      ready += th.state == Thread::kReady;
    }
    if (done == threads) break;
    if (ready > 0) continue;
    int at_mbarrier = 0;
    for (Thread const& th : s.threads) at_mbarrier += th.state == Thread::kAtMbarrier;
    if (at_mbarrier > 0 && s.progress != released_at) {  // something arrived or landed: waiters retry
      released_at = s.progress;
      for (Thread& th : s.threads) {
        if (th.state == Thread::kAtMbarrier) th.state = Thread::kReady;
      }
      continue;
    }
    if (at_block == threads) {
      for (Thread& th : s.threads) th.state = Thread::kReady;
      continue;
    }
    fail("deadlock: threads wait at different barriers (" + std::to_string(done) + " done, " +
         std::to_string(at_block) + " at __syncthreads, " + std::to_string(at_mbarrier) + " at mbarriers of " +
         std::to_string(threads) + ")");
    return false;
  }
  for (Thread const& th : s.threads) {
    if (!th.open.empty() || !th.committed.empty()) fail("a thread exited with cp.async copies still pending");
  }
  for (auto const& [bar, b] : s.barriers) {
    if (!b.copies.empty()) fail("a block exited with bulk copies that no thread waited for");
  }
  return true;
}

// Launches a grid of grid.x * grid.y * grid.z blocks (one after another, x fastest); 0 or 1
// (state().error says why).
inline int launch(uint3 grid, int threads, size_t smem_bytes, std::function<void(char*)> kernel) {
  State& s = state();
  s.error.clear();
  s.prefetched = s.prefetched_block_max = 0;
  std::vector<char> smem(smem_bytes + 256);
  char* base = smem.data() + (256 - reinterpret_cast<uintptr_t>(smem.data()) % 256);
  unsigned const blocks = grid.x * grid.y * grid.z;
  for (unsigned b = 0; b < blocks && s.error.empty(); ++b) {
    // Stale bytes, as a reused multiprocessor leaves them: nothing may read shared memory unwritten.
    for (size_t i = 0; i < smem_bytes; ++i) base[i] = char(0xA5 ^ (i * 7 + b));
    s.smem = base;
    s.smem_bytes = smem_bytes;
    s.body = [&] { kernel(base); };
    s.prefetched_block = 0;
    if (!run_block(make_uint3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)), threads)) break;
    s.prefetched_block_max = std::max(s.prefetched_block_max, s.prefetched_block);
  }
  return s.error.empty() ? 0 : 1;
}

}  // namespace emu

// ---- CUDA built-ins ------------------------------------------------------------------------------
#define threadIdx (emu::self().index)
#define blockIdx (emu::state().block)

inline void __syncthreads() { emu::yield(emu::Thread::kAtBlockBarrier); }
inline void __threadfence() {}
inline int atomicAdd(int* p, int v) {
  int old = *p;
  *p += v;
  return old;
}
template <class T>
inline void __stcg(T* p, T v) { *p = v; }
template <class T>
inline T __ldcg(T const* p) { return *p; }
inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline float __expf(float v) { return std::exp(v); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// Warp shuffles and votes (the lanes exchange through the warp's scratch; all 32 lanes take part).
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) == 4, "32-bit shuffles");
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  std::memcpy(&w.a[lane][0], &v, 4);
  emu::sync_warp();
  T r;
  std::memcpy(&r, &w.a[lane ^ lane_mask][0], 4);
  emu::sync_warp();
  return r;
}
inline bool __all_sync(unsigned, bool v) {
  emu::WarpScratch& w = emu::warp();
  int const lane = threadIdx.x % 32;
  w.a[lane][0] = v;
  emu::sync_warp();
  bool all = true;
  for (int l = 0; l < 32; ++l) all = all && w.a[l][0];
  emu::sync_warp();
  return all;
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <class T>
inline T __ldcs(T const* p) { return *p; }
// Host float arithmetic is IEEE round-to-nearest (SSE, no contraction at -O1 without -mfma).
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
