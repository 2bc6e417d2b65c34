// Elementwise operations and the sum over flat arrays. scale on 16-bit arrays runs float's
// product on widened pieces (kernels/cpu/half/widened.h), each result rounded once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/half/widened.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void fill(int64_t n, T value, T* y) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

template <class T>
void add(int64_t n, const T* a, const T* b, T* y) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void axpy(int64_t n, T alpha, const T* x, T* y) {
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

namespace {
// y = alpha * x on one thread's range, shared by every dtype.
template <class T>
void scale_range(int64_t n, T alpha, const T* x, T* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}
}  // namespace

template <class T>
void scale(int64_t n, T alpha, const T* x, T* y) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) { scale_range(end - begin, alpha, x + begin, y + begin); });
}

template <class H>
void scale_half(int64_t n, float alpha, const H* x, H* y) {
  map_widened(n, x, static_cast<const H*>(nullptr), y,
              [alpha](int64_t count, const float* wx, const float*, float* wy) { scale_range(count, alpha, wx, wy); });
}
template void scale_half<BFloat16>(int64_t, float, const BFloat16*, BFloat16*);
template void scale_half<Float16>(int64_t, float, const Float16*, Float16*);

namespace {

// The sum is cut into blocks of this many elements; block sums are independent of the
// thread count, and are then combined pairwise, so the order is fixed for every n.
constexpr int64_t kSumBlock = 4096;
constexpr int kSumLanes = 8;

// One block, in double: kSumLanes interleaved partial sums (which the compiler can keep in
// vector registers), then combined pairwise; of the squares of x when `squares`.
template <bool squares, class T>
double block_sum(const T* x, int64_t n) {
  auto term = [](T v) { return squares ? double(v) * double(v) : double(v); };
  double lanes[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) lanes[l] += term(x[i + l]);
  for (int l = 0; i < n; ++i, ++l) lanes[l] += term(x[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

double pairwise_sum(const double* v, int64_t n) {
  if (n == 0) return 0.0;
  if (n == 1) return v[0];
  const int64_t half = n / 2;
  return pairwise_sum(v, half) + pairwise_sum(v + half, n - half);
}

// The block sums, independent of the thread count, combined pairwise.
template <bool squares, class T>
double fixed_order_sum(int64_t n, const T* x) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumBlock;
    partial[b] = block_sum<squares>(x + begin, std::min(kSumBlock, n - begin));
  }
  return pairwise_sum(partial.data(), blocks);
}

}  // namespace

template <class T>
void sum(int64_t n, const T* x, T* out) {
  out[0] = T(fixed_order_sum<false>(n, x));
}

template <class T>
void sum_of_squares(int64_t n, const T* x, T* out) {
  out[0] = T(fixed_order_sum<true>(n, x));
}

template <class T>
void unscale_and_check_finite(int64_t n, T inv_scale, T* x, T* found_inf) {
  int nonfinite = 0;
#pragma omp parallel for simd num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static) \
    reduction(| : nonfinite)
  for (int64_t i = 0; i < n; ++i) {
    nonfinite |= int(!std::isfinite(x[i]));
    x[i] *= inv_scale;
  }
  if (nonfinite) found_inf[0] = T(1);
}

#define DPCORE_INSTANTIATE(T)                                  \
  template void unscale_and_check_finite<T>(int64_t, T, T*, T*); \
  template void fill<T>(int64_t, T, T*);                       \
  template void add<T>(int64_t, const T*, const T*, T*);       \
  template void axpy<T>(int64_t, T, const T*, T*);             \
  template void scale<T>(int64_t, T, const T*, T*);            \
  template void sum<T>(int64_t, const T*, T*);                 \
  template void sum_of_squares<T>(int64_t, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
