// softmax(x + mask) over the last dimension, a row at a time (kernels/softmax_mask.h says how
// the mask broadcasts and what causal masks): in double with the scalar libm exp for double,
// in float for float, the row held in L1 through its passes (the logits, their max in
// lanes, the exps in blocks through libmvec's vector expf at the CPU's widest vector width, with a float partial sum per lane,
// the scaling; kernels/cpu/float_blocks.h), the backward's dot product in float lanes too.
// A row is one thread's and its sums have one order: the same bits on any thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/float_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/log_softmax.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// Row r of softmax in float; yr (which may be xr) holds the logits, then the exps. Built
// for AVX-512, AVX2 and the baseline (vector_variants.h): the wide builds call libmvec's
// 16- and 8-lane expf (each within glibc's 4 ulp, their bits not always the baseline's);
// the sums keep their 16 lanes and tree at every width.
DPCORE_VECTOR_LOOP void softmax_float_row_loop(const SoftmaxShape& s, int64_t r, const float* xr, const float* mr,
                                               float* yr) {
  // The entries past `keys` are the ones causal masks: their logit is -inf.
  const int64_t keys = s.causal ? std::min(s.cols, r % s.queries + 1) : s.cols;
  if (mr) {
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) yr[j] = xr[j] + mr[j];
  } else if (yr != xr) {
    std::copy(xr, xr + keys, yr);
  }
  const float max = lane_max(keys, [yr](int64_t j) { return yr[j]; });
  std::fill(yr + keys, yr + s.cols, -INFINITY);
  // A row masked everywhere has max -inf, and -inf - -inf is NaN: the row is NaN, as in
  // PyTorch. A NaN logit makes the total NaN, whether or not the max saw it.
  for (int64_t begin = 0; begin < s.cols; begin += kFloatBlock) {
    float* block = yr + begin;
    map_block(std::min<int64_t>(kFloatBlock, s.cols - begin), block, block, block, -INFINITY,
              [max](float logit, float) { return std::exp(logit - max); });
  }
  const float inverse = 1.0f / lane_sum<float>(s.cols, [yr](int64_t j) { return yr[j]; });
#pragma omp simd
  for (int64_t j = 0; j < s.cols; ++j) yr[j] *= inverse;
}
DPCORE_VECTOR_VARIANTS(softmax_float_row,
                       (const SoftmaxShape& s, int64_t r, const float* xr, const float* mr, float* yr),
                       (s, r, xr, mr, yr))

}  // namespace

template <class T>
void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y) {
  if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(s.rows, s.cols)) schedule(static)
    for (int64_t r = 0; r < s.rows; ++r)
      softmax_float_row(s, r, x + r * s.cols, mask ? mask + softmax_mask_row(s, r) : nullptr, y + r * s.cols);
    return;
  }
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(s.rows, s.cols)) schedule(static)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    const T* mr = mask ? mask + softmax_mask_row(s, r) : nullptr;
    T* yr = y + r * s.cols;
    // A row masked everywhere has max -inf, and -inf - -inf is NaN: the row is NaN, as in PyTorch.
    double max = -INFINITY;
    for (int64_t j = 0; j < s.cols; ++j) max = std::max(max, softmax_logit<double>(s, xr, mr, r, j));
    double total = 0.0;
    for (int64_t j = 0; j < s.cols; ++j) total += std::exp(softmax_logit<double>(s, xr, mr, r, j) - max);
    const double inverse = 1.0 / total;
    for (int64_t j = 0; j < s.cols; ++j) yr[j] = T(std::exp(softmax_logit<double>(s, xr, mr, r, j) - max) * inverse);
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (rows_in_parallel(rows, cols)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    if constexpr (std::is_same_v<T, float>) {
      const float dot = lane_sum<float>(cols, [dyr, yr](int64_t j) { return dyr[j] * yr[j]; });
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
    } else {
      double dot = 0.0;
      for (int64_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
      for (int64_t j = 0; j < cols; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
    }
  }
}

#define DPCORE_INSTANTIATE(T)                                                    \
  template void softmax_forward<T>(const SoftmaxShape&, const T*, const T*, T*); \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
