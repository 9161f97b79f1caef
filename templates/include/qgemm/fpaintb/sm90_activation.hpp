// The FpA x IntB epilogue activation, chosen at run time (QgemmProblem ext[1]) so that one kernel
// serves every activation of a plan: 0 none, 1 ReLU, 2 SiLU, 3 GELU (erf), the codes of the Sm80
// kernels (qgemm/fpaintb.py ACTIVATIONS). The branch is uniform across the grid.
//
// NaN passes through as in torch: ReLU keeps NaN (v < 0 is false for NaN), SiLU is v / (1 + exp(-v))
// and GELU 0.5 v (1 + erf(v / sqrt(2))), torch's formulas.
#pragma once

#include "cutlass/array.h"
#include "cutlass/cutlass.h"

namespace qgemm {
namespace fpaintb {

struct ActivationArguments {
  int kind = 0;
};

CUTLASS_HOST_DEVICE float activate(float v, int kind) {
  switch (kind) {
    case 1: return v < 0.f ? 0.f : v;
    case 2: return v / (1.f + expf(-v));
    case 3: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    default: return v;
  }
}

template <class T>
struct RuntimeActivation {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE T operator()(T const& value, Arguments const& args = Arguments()) const {
    return T(activate(float(value), args.kind));
  }
};

template <class T, int N>
struct RuntimeActivation<cutlass::Array<T, N>> {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& values,
                                                      Arguments const& args = Arguments()) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = T(activate(float(values[i]), args.kind));
    return out;
  }
};

}  // namespace fpaintb
}  // namespace qgemm
