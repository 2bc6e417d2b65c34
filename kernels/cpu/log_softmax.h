// The row helpers log_softmax and the fused cross_entropy share. Every row sum is
// accumulated in double and the max is subtracted before exp, so large logits (1e4) stay
// finite and float rows keep full float precision. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

// log(sum_j exp(x_j)) of one row, as max + log(sum exp(x_j - max)).
template <class T>
inline double log_sum_exp(int64_t cols, const T* x) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(x[j]));
  double total = 0.0;
  for (int64_t j = 0; j < cols; ++j) total += std::exp(double(x[j]) - max);
  return max + std::log(total);
}

inline bool rows_in_parallel(int64_t rows, int64_t cols) { return rows > 1 && rows * cols >= kMinParallelElements; }

}  // namespace dpcore::kernels::cpu
