// The Sm90 FpA x IntB weight layout in CuTe terms: the memory reordering atom of CUTLASS's
// cutlass/util/mixed_dtype_utils.hpp (compute_memory_reordering_atom, copied here because that
// header pulls in cuRAND, which the kernel builds do not need), tiled over the weight.
//
// The one definition both sides read is cutlass_gen/fpaintb_layout.py (Sm90WeightLayout); the
// Python packer (qgemm/fpaintb_pack.py pack_sm90) writes bytes in this order and
// tests/test_fpaintb_sm90_cpu.py compares the two element by element (it compiles a host program
// that prints this layout).
#pragma once

#include "cute/tensor.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"

namespace qgemm {
namespace fpaintb {

// Places the values one thread of a register-sourced WGMMA reads for its A fragment next to each
// other in memory (one 32-bit shared-memory load of int4 or int8 codes per k-block and thread), in
// the order ValLayout gives: the order CUTLASS's shuffle converters read
// (int4 (0, 2, 4, 6, 1, 3, 5, 7), int8 (0, 2, 1, 3)).
template <class ElementMma, class AtomLayout = cute::Layout<cute::_1>, class ValLayout = cute::Layout<cute::_1>>
constexpr auto memory_reordering_atom(AtomLayout atom_layout = {}, ValLayout val_layout = {}) {
  using namespace cute;
  using MmaAtom = decltype(SM90::GMMA::rs_op_selector<ElementMma, ElementMma, float, Shape<_64, _16, _32>>());
  using MmaTraits = MMA_Traits<MmaAtom>;
  auto mk_shape_mma = select<0, 2>(typename MmaTraits::Shape_MNK{});
  auto tv_layout_mma = typename MmaTraits::ALayout{};
  static_assert(size<1>(tv_layout_mma) % size(val_layout) == 0, "the value layout must divide the MMA's values");
  // One warp's TV layout (A is split between warps along M), inverted: (m, k) -> (thread, value).
  auto tv_tiler_warp = make_shape(Int<32>{}, size<1>(tv_layout_mma));
  auto mk_shape_warp = shape_div(mk_shape_mma, size(typename MmaTraits::ThrID{}) / Int<32>{});
  auto tv_layout_mma_warp = make_layout_like(composition(tv_layout_mma, tv_tiler_warp));
  auto mk_layout_mma_warp = right_inverse(tv_layout_mma_warp).with_shape(mk_shape_warp);
  auto mk_layout_mma_trgt = blocked_product(mk_layout_mma_warp, atom_layout);
  // Each thread's values contiguous, in val_layout's order.
  auto val_to_offset = logical_product(val_layout, size<1>(tv_layout_mma) / size(val_layout) * size(atom_layout));
  auto thr_to_offset = make_layout(size<0>(tv_layout_mma_warp));
  auto tv_to_offset = select<1, 0>(logical_product(val_to_offset, thr_to_offset));
  return composition(tv_to_offset, mk_layout_mma_trgt);
}

// The value orders of CUTLASS's fast shuffle converters (mixed_input_utils.hpp LayoutAwareConvertImpl).
template <int Bits> struct ValueShuffle;
template <> struct ValueShuffle<4> { using type = cute::Layout<cute::Shape<cute::_2, cute::_4>, cute::Stride<cute::_4, cute::_1>>; };
template <> struct ValueShuffle<8> { using type = cute::Layout<cute::Shape<cute::_2, cute::_2>, cute::Stride<cute::_2, cute::_1>>; };

template <class ElementMma, int Bits>
using ReorderAtom = decltype(memory_reordering_atom<ElementMma, cute::Layout<cute::Shape<cute::_1, cute::_1>>,
                                                    typename ValueShuffle<Bits>::type>());

// The weight [rows, K] (rows: the weight's output channels, the kernel's M after the swap) in
// that order: the atom tiled over the tensor, atoms numbered along rows first.
template <class ElementMma, int Bits>
auto reordered_weight_layout(int rows, int k) {
  return cute::tile_to_shape(ReorderAtom<ElementMma, Bits>{}, cute::make_shape(rows, k, 1));
}

}  // namespace fpaintb
}  // namespace qgemm
