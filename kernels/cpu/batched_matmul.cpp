// Batched matmul as BLAS calls on blocks of output rows. The work items are (matrix, block
// of kRowBlock rows), numbered in order and shared out statically: a batch of small
// attention products and a single tall one keep every thread busy alike, and since the
// cut is fixed by the shape, each output element comes from the same BLAS call whatever
// the thread count (gemm_parallel cuts by the thread count instead).
#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {
// Rows of c per BLAS call: a multiple of the micro-kernels' 16, long enough for BLAS to
// reach full speed on each call.
constexpr int64_t kRowBlock = 64;
// Below this many multiply-adds in all, waking threads costs more than it saves.
constexpr double kMinParallelMacs = 1 << 20;
}  // namespace

template <class T>
void batched_matmul(const BatchedMatmulShape& s, const T* a, const T* b, T* c) {
  const int64_t blocks = (s.M + kRowBlock - 1) / kRowBlock, items = s.batch * blocks;
  const bool parallel = items > 1 && double(s.batch) * s.M * s.N * s.K >= kMinParallelMacs;
  const int threads = int(std::min<int64_t>(kernel_threads(), std::max<int64_t>(items, 1)));
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t i = item / blocks, row = (item % blocks) * kRowBlock, rows = std::min(kRowBlock, s.M - row);
    // Row `row` of op(a[i]) starts `row` rows down a, or `row` columns across it transposed.
    const T* ai = a + i * s.M * s.K + (s.trans_a ? row : row * s.K);
    gemm(s.trans_a, s.trans_b, rows, s.N, s.K, T(1), ai, s.lda(), b + i * s.K * s.N, s.ldb(), T(0),
         c + (i * s.M + row) * s.N, s.N);
  }
}

template void batched_matmul<float>(const BatchedMatmulShape&, const float*, const float*, float*);
template void batched_matmul<double>(const BatchedMatmulShape&, const double*, const double*, double*);

}  // namespace dpcore::kernels::cpu
