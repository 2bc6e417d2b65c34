// The fused log_softmax + nll loss (llm.c's fused classifier): one pass per row gives the
// loss and the gradient; the probabilities are never stored.
#include <algorithm>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"

namespace dpcore::kernels::cpu {

template <class T>
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                    int64_t ignore_index, T grad_scale, const int64_t* divisor, T* loss, T* dlogits) {
  // The mean multiplies by the reciprocal, rounded to T once, as the engine's scale by 1/N
  // did before there was a divisor.
  const T inverse = divisor ? T(1) / T(divisor[0]) : T(1);
  const T scale = grad_scale * inverse;
  // Row losses are summed afterwards, in row order, so the total does not depend on threads.
  std::vector<double> row_loss(rows);
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] == ignore_index) {
      row_loss[r] = 0.0;
      std::fill_n(dlogits + r * cols, cols, T(0));
      continue;
    }
    const T* xr = logits + r * cols;
    const double lse = log_sum_exp(cols, xr);
    row_loss[r] = lse - double(xr[target[r]]);
    // d(loss_r)/d(x_j) = softmax_j - [j == target]
    for (int64_t j = 0; j < cols; ++j) {
      const double p = std::exp(double(xr[j]) - lse);
      dlogits[r * cols + j] = T(double(scale) * (p - (j == target[r] ? 1.0 : 0.0)));
    }
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
  loss[0] = divisor ? T(total) * inverse : T(total);
}

void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted) {
  counted[0] = rows - std::count(target, target + rows, ignore_index);
}

#define DPCORE_INSTANTIATE(T)                                                                            \
  template void cross_entropy_forward_backward<T>(int64_t, int64_t, const T*, const int64_t*, int64_t, T, \
                                                  const int64_t*, T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
