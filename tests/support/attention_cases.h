// The attention test cases (tests/ops/attention_test.cpp, half_attention_test.cpp): a case's
// sizes and masks, its AttentionShape, a description for the failure messages, and the
// key-padding mask both tests draw.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_shape.h"
#include "support/test_support.h"

namespace dpcore::testing {

struct AttentionCase {
  int64_t B, H, Tq, Tk, d;
  bool causal, padded;
};

inline kernels::AttentionShape shape_of(const AttentionCase& c) {
  kernels::AttentionShape s;
  s.B = c.B, s.H = c.H, s.Tq = c.Tq, s.Tk = c.Tk, s.d = c.d;
  s.scale = 1.0 / std::sqrt(double(c.d));
  s.causal = c.causal;
  return s;
}

inline std::string describe(const AttentionCase& c) {
  return "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " Tq " + std::to_string(c.Tq) + " Tk " +
         std::to_string(c.Tk) + " d " + std::to_string(c.d) + (c.causal ? ", causal" : "") +
         (c.padded ? ", padded" : "");
}

// A [B, Tk] key-padding mask of 1 (attend) and 0 (padding), made by one(bool): about one
// key in four padded, key 0 always kept (so that every row sees a key unless a test pads it
// on purpose).
template <class T, class One>
std::vector<T> padding_mask(int64_t B, int64_t Tk, One one) {
  std::vector<T> mask;
  const auto draws = random_vector<double>(size_t(B * Tk), 11, 0.0, 1.0);
  for (size_t e = 0; e < draws.size(); ++e) mask.push_back(one(int64_t(e) % Tk == 0 || draws[e] > 0.25));
  return mask;
}

}  // namespace dpcore::testing
