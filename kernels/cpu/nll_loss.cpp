// nll loss on log-probabilities; targets were checked by the engine. The sum runs in row
// order in double.
#include <algorithm>

#include "kernels/cpu/kernels.h"

namespace dpcore::kernels::cpu {

template <class T>
void nll_loss_forward(int64_t rows, int64_t cols, const T* logp, const int64_t* target, T* loss_sum) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total -= logp[r * cols + target[r]];
  loss_sum[0] = T(total);
}

template <class T>
void nll_loss_backward(int64_t rows, int64_t cols, T grad_per_row, const int64_t* target, T* dlogp) {
  std::fill(dlogp, dlogp + rows * cols, T(0));
  for (int64_t r = 0; r < rows; ++r) dlogp[r * cols + target[r]] = -grad_per_row;
}

#define DPCORE_INSTANTIATE(T) \
  template void nll_loss_forward<T>(int64_t, int64_t, const T*, const int64_t*, T*); \
  template void nll_loss_backward<T>(int64_t, int64_t, T, const int64_t*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
