// The [rows, cols] cases the log_softmax, nll_loss and cross_entropy tests share (one row
// per sample, one column per class): a single class pair, the usual 10 classes, rows that
// are not a multiple of a block's rows, long rows, and a batch of 4096.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "support/op_backends.h"

namespace dpcore::testing {

struct RowsCase {
  int64_t rows, cols;
};

inline const RowsCase kRowsCases[] = {{1, 2},  {1, 10}, {9, 13},   {13, 10}, {64, 10},  {4096, 10},
                                      {9, 70}, {64, 3}, {3, 1000}, {5, 1000}, {300, 130}};

inline std::string describe(const RowsCase& c, int threads) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + threads_label(threads);
}

// One class target in [0, cols) per row, the same for every backend.
inline std::vector<int64_t> random_targets(int64_t rows, int64_t cols) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> t(rows);
  for (auto& v : t) v = int64_t(rng() % uint64_t(cols));
  return t;
}

}  // namespace dpcore::testing
