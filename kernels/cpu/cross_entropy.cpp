// The fused log_softmax + nll loss (llm.c's fused classifier): one pass per row gives the
// loss and the gradient; the probabilities are never stored.
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"

namespace dpcore::kernels::cpu {

template <class T>
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                    T grad_scale, T* loss_sum, T* dlogits) {
  // Row losses are summed afterwards, in row order, so the total does not depend on threads.
  std::vector<double> row_loss(rows);
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * cols;
    const double lse = log_sum_exp(cols, xr);
    row_loss[r] = lse - double(xr[target[r]]);
    // d(loss_r)/d(x_j) = softmax_j - [j == target]
    for (int64_t j = 0; j < cols; ++j) {
      const double p = std::exp(double(xr[j]) - lse);
      dlogits[r * cols + j] = T(double(grad_scale) * (p - (j == target[r] ? 1.0 : 0.0)));
    }
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
  loss_sum[0] = T(total);
}

#define DPCORE_INSTANTIATE(T) \
  template void cross_entropy_forward_backward<T>(int64_t, int64_t, const T*, const int64_t*, T, T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
