// Emulator replacement of templates/include/qgemm/bulk.h (see ../cuda_emu.h): mbarriers kept by
// address, bulk copies that land only when a thread waits on their barrier (or at once, in the
// emulator's schedules 3 and 4), checked for alignment and for shared and readable global memory.
#pragma once

#include <cstdint>

#include "../cuda_emu.h"

namespace qgemm {
namespace bulk {

inline void init(uint64_t* bar, uint32_t arrivals) { emu::mbarrier_init(bar, arrivals); }
inline void fence_init() {}
inline void fence_proxy_async() {}
inline void arrive_expect_tx(uint64_t* bar, uint32_t bytes) { emu::mbarrier_arrive(bar, bytes); }
inline void arrive(uint64_t* bar) { emu::mbarrier_arrive(bar, 0); }
inline void wait(uint64_t* bar, uint32_t parity) { emu::mbarrier_wait(bar, parity); }
inline void copy(void* dst, void const* src, uint32_t bytes, uint64_t* bar) { emu::bulk_copy(dst, src, bytes, bar); }

}  // namespace bulk
}  // namespace qgemm
