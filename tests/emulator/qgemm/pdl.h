// Emulator replacement of templates/include/qgemm/pdl.h (see ../cuda_emu.h): the emulator runs one
// grid at a time, so waiting for the previous one and letting the next start are no-ops; an L2
// prefetch is checked (alignment, and inside the range the test allows) and counted.
#pragma once

#include <cstdint>

#include "../cuda_emu.h"

namespace qgemm {
namespace pdl {

inline void wait_for_previous_grid() {}
inline void let_next_grid_start() {}
inline void prefetch_l2(void const* p, uint32_t bytes) { emu::prefetch_l2(p, bytes); }

}  // namespace pdl
}  // namespace qgemm
