// Column sums of a row-major matrix in a fixed order: the bias gradients of the linear
// layers (float32, float64 and 16-bit). Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

// Columns a thread sums at once: their double accumulators (4 KB) stay in L1.
constexpr int64_t kColumnSumBlock = 512;

// sums[j] = widen(m[0, j]) + widen(m[1, j]) + ... over the rows in order, in double. Each
// thread owns a contiguous range of columns and walks m row by row across a block of them,
// adding each row to the block's accumulators: every column still has the one sequential
// sum (the bits do not depend on the thread count), but the reads are contiguous and the
// additions of neighbouring columns independent, so they vectorise. A walk down each column
// in turn strides `cols` elements per addition: at bert-tiny's 4096 x 512 that missed the
// caches on every row and took 5x the GEMM of the weight gradient.
template <class T, class Widen>
std::vector<double> column_sums(int64_t rows, int64_t cols, const T* m, Widen widen) {
  std::vector<double> sums(size_t(cols), 0.0);
  const int parts = int(std::max<int64_t>(1, std::min<int64_t>(kernel_threads(), cols)));
#pragma omp parallel for num_threads(parts) if (parts > 1 && rows * cols >= kMinParallelElements) schedule(static)
  for (int part = 0; part < parts; ++part) {
    const Range columns = split_range(cols, parts, part);
    for (int64_t begin = columns.begin; begin < columns.end; begin += kColumnSumBlock) {
      const int64_t width = std::min(kColumnSumBlock, columns.end - begin);
      double* total = sums.data() + begin;
      for (int64_t n = 0; n < rows; ++n) {
        const T* row = m + n * cols + begin;
        for (int64_t j = 0; j < width; ++j) total[j] += widen(row[j]);
      }
    }
  }
  return sums;
}

}  // namespace dpcore::kernels::cpu
