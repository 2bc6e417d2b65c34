// How a CPU kernel written once over its storage type X reads and writes values: float and
// double as they are; bfloat16 and float16 widened exactly to float32 as they are read, and
// each result rounded once to nearest even as it is written. So a 16-bit instantiation
// computes what the float32 one computes on the widened tensor and rounds its outputs: the
// bits of float32 copies in and rounding copies out, without the copies.
// Internal to kernels/cpu and the CPU backend above it (computed_t: the type its
// statistics and parameters take beside 16-bit activations).
#pragma once

#include <type_traits>

#include "kernels/half_types.h"

namespace dpcore::kernels::cpu {

inline float value(BFloat16 v) { return to_float(v); }
inline float value(Float16 v) { return to_float(v); }
inline float value(float v) { return v; }
inline double value(double v) { return v; }

// The type a kernel computes X's values in: float for the 16-bit types, X otherwise.
template <class X>
using computed_t = decltype(value(X{}));

template <class X, class S>
X stored(S v) {
  if constexpr (std::is_same_v<X, S>) return v;
  else return from_float<X>(v);
}

}  // namespace dpcore::kernels::cpu
