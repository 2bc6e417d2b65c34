// The comparison of the whole-process tests that resume or restart a run: its final weights
// against an uninterrupted run's (tests/cli/resume_test.cpp, tests/cli/launch_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/io/safetensors.h"

namespace dpcore::testing {

// Every float tensor of `a` and `b` agrees to `tolerance` relative to the tensor's largest
// magnitude: sums in another order (other replicas) change the last bits, never more. With
// `model_scale`, relative to the largest magnitude of any tensor of `a` instead: for a model
// with a parameter whose gradient is zero in exact arithmetic (BERT's attention key biases:
// softmax ignores what is added to every key), whose value is rounding noise alone.
inline void expect_same_maths(const std::string& a_path, const std::string& b_path, double tolerance = 1e-5,
                              bool model_scale = false) {
  const auto a = dpcore::io::load_safetensors(a_path), b = dpcore::io::load_safetensors(b_path);
  ASSERT_EQ(a.names(), b.names());
  double model_largest = 0;
  for (const auto& t : a.tensors()) {
    for (int64_t i = 0; t.dtype == dpcore::DType::Float32 && i < t.numel(); ++i)
      model_largest = std::max(model_largest, double(std::fabs(t.values<float>()[i])));
  }
  for (const auto& t : a.tensors()) {
    if (t.dtype != dpcore::DType::Float32) continue;
    const auto& u = b.at(t.name);
    double largest = model_scale ? model_largest : 0, worst = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      largest = std::max(largest, double(std::fabs(t.values<float>()[i])));
      worst = std::max(worst, double(std::fabs(t.values<float>()[i] - u.values<float>()[i])));
    }
    EXPECT_LE(worst, tolerance * largest) << t.name << ": " << a_path << " against " << b_path;
  }
}

}  // namespace dpcore::testing
