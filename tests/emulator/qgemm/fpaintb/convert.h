// Emulator replacement of templates/include/qgemm/fpaintb/convert.h (see ../../cuda_emu.h): the
// converters computed from the packed layout's definition (cutlass_gen/fpaintb_layout.py word
// order: int4 nibbles hold e0 e2 e4 e6 e1 e3 e5 e7 from the low end, int8 bytes e0 e2 e1 e3), in
// float, written independently of the real lop3/prmt code. The Zero structs keep the real ones'
// members and meaning (the magic number plus the zero), so a kernel that builds them itself is
// checked too: the zero is read back from `low` (or `magic`).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../cuda_emu.h"

namespace qgemm {
namespace fpaintb {

template <typename T>
inline T as(uint32_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

inline uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }

template <typename Act, int Bits>
struct Converter {
  using Pair = typename std::conditional<std::is_same<Act, __half>::value, __half2, __nv_bfloat162>::type;
  static constexpr bool kHalf = std::is_same<Act, __half>::value;
  static constexpr int kPairs = 32 / Bits / 2;
  // Members as in the real header: FP16 {low = 1024 + z, high = -(64 + z) (int4)}, BF16 int4
  // {low = 128 + z}, BF16 int8 {magic = 2^23 + z}.
  struct Zero4h { Pair low, high; };
  struct Zero1 { Pair low; };
  struct ZeroF { float magic; };
  using Zero = typename std::conditional<kHalf && Bits == 4, Zero4h,
               typename std::conditional<!kHalf && Bits == 8, ZeroF, Zero1>::type>::type;

  static float zero_value(Zero4h const& z) {
    float const v = float(z.low.x) - 1024.f;
    if (float(z.low.y) - 1024.f != v || -float(z.high.x) - 64.f != v || -float(z.high.y) - 64.f != v) {
      emu::fail("int4 FP16 zero: low and high disagree");
    }
    return v;
  }
  static float zero_value(Zero1 const& z) {
    float const magic = kHalf ? 1024.f : 128.f;
    float const v = float(z.low.x) - magic;
    if (float(z.low.y) - magic != v) emu::fail("zero: the two halves disagree");
    return v;
  }
  static float zero_value(ZeroF const& z) { return z.magic - 8388608.f; }

  static Zero zero(int z) {
    Zero r;
    if constexpr (std::is_same<Zero, Zero4h>::value) {
      r.low = Pair(Act(1024.f + z), Act(1024.f + z));
      r.high = Pair(Act(-64.f - z), Act(-64.f - z));
    } else if constexpr (std::is_same<Zero, ZeroF>::value) {
      r.magic = 8388608.f + z;
    } else {
      float const magic = kHalf ? 1024.f : 128.f;
      r.low = Pair(Act(magic + z), Act(magic + z));
    }
    return r;
  }

  static void convert(uint32_t word, Zero const& z, Pair (&out)[kPairs]) {
    constexpr int n = 32 / Bits;
    static constexpr int kOrder4[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    static constexpr int kOrder8[4] = {0, 2, 1, 3};
    float e[8];
    for (int p = 0; p < n; ++p) {
      uint32_t const u = (word >> (Bits * p)) & ((1u << Bits) - 1);
      e[Bits == 4 ? kOrder4[p] : kOrder8[p]] = float(u);
    }
    float const zv = zero_value(z);
    for (int i = 0; i < kPairs; ++i) out[i] = Pair(Act(e[2 * i] - zv), Act(e[2 * i + 1] - zv));
  }
};

}  // namespace fpaintb
}  // namespace qgemm
