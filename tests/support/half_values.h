// The 16-bit values of the engine-level tests, by DType (the kernel tests' typed
// counterparts are in half_backends.h): float32 values rounded to bfloat16 or float16 and
// widened back (exact), and the unit roundoff of each type (half an ulp, relative).
#pragma once

#include <vector>

#include "engine/ops.h"

namespace dpcore::testing {

inline std::vector<float> rounded_to(const std::vector<float>& v, DType half) {
  return ops::to(ops::to(Tensor::from_vector(v, {int64_t(v.size())}), half), DType::Float32).to_vector<float>();
}

inline double unit_roundoff(DType half) { return half == DType::BFloat16 ? 1.0 / 256 : 1.0 / 2048; }

}  // namespace dpcore::testing
