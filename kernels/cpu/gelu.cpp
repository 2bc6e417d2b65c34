// gelu, both forms, in PyTorch's order of operations (aten/src/ATen/native/cpu/Activation.cpp,
// GeluKernelImpl and GeluBackwardKernelImpl), each rounded to T. Backward reads the input x.
// float runs the same formulas in blocks (kernels/cpu/float_blocks.h), with libmvec's vector
// erff, tanhf and expf at the CPU's widest vector width; double calls the scalar libm
// functions. bfloat16 and float16 run
// float's blocks on widened pieces (kernels/cpu/half/widened.h), each output rounded once:
// float's bits on the widened tensor.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/float_blocks.h"
#include "kernels/cpu/half/widened.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

template <class T>
struct GeluConstants {
  static constexpr T kAlpha = T(M_SQRT1_2);                        // 1 / sqrt(2)
  static constexpr T kNormalDensity = T(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
  static constexpr T kSqrt2OverPi = T(M_SQRT2 * M_2_SQRTPI * 0.5);     // sqrt(2 / pi)
  static constexpr T kCubic = T(0.044715);
};

template <class T>
T gelu_erf(T x) {
  return x * T(0.5) * (T(1) + std::erf(x * GeluConstants<T>::kAlpha));
}
template <class T>
T gelu_tanh(T x) {
  using C = GeluConstants<T>;
  const T inner = C::kSqrt2OverPi * (x + C::kCubic * (x * x * x));
  return T(0.5) * x * (T(1) + std::tanh(inner));
}
// d/dx of 0.5 x (1 + erf(x / sqrt 2)) = Phi(x) + x phi(x).
template <class T>
T gelu_erf_grad(T dy, T x) {
  using C = GeluConstants<T>;
  const T cdf = T(0.5) * (T(1) + std::erf(x * C::kAlpha));
  const T pdf = C::kNormalDensity * std::exp(x * x * T(-0.5));
  return dy * (cdf + x * pdf);
}
// The product rule on 0.5 x * (1 + tanh(inner)).
template <class T>
T gelu_tanh_grad(T dy, T x) {
  using C = GeluConstants<T>;
  const T x_sq = x * x, inner = C::kSqrt2OverPi * (x + C::kCubic * (x_sq * x));
  const T tanh_inner = std::tanh(inner);
  const T left = T(0.5) * x, right = T(1) + tanh_inner;
  const T left_derivative = T(0.5) * right;
  const T tanh_derivative = T(1) - tanh_inner * tanh_inner;
  const T inner_derivative = C::kSqrt2OverPi * (T(1) + T(3) * C::kCubic * x_sq);
  const T right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

// out[i] = f(a[i], b[i]) for i < n, a block at a time on the calling thread.
template <class F>
__attribute__((always_inline)) inline void map_float_range(int64_t n, const float* a, const float* b, float* out,
                                                           const F& f) {
  for (int64_t begin = 0; begin < n; begin += kFloatBlock)
    map_block(std::min<int64_t>(kFloatBlock, n - begin), a + begin, b + begin, out + begin, 0.0f, f);
}

// The four float32 maps on one thread's range, each built for AVX-512, AVX2 and the
// baseline (vector_variants.h): the wide builds call libmvec's 16- and 8-lane erff, expf
// and tanhf, where the baseline's calls its 4-lane ones, about 3x the elements a second on
// an AVX-512 CPU. Each variant is within glibc's documented 4 ulp; their bits may differ
// from one another (one CPU always runs the same one, so a run's bits do not change).
DPCORE_VECTOR_LOOP void gelu_erf_range_loop(int64_t n, const float* x, const float*, float* y) {
  map_float_range(n, x, x, y, [](float v, float) { return gelu_erf(v); });
}
DPCORE_VECTOR_LOOP void gelu_tanh_range_loop(int64_t n, const float* x, const float*, float* y) {
  map_float_range(n, x, x, y, [](float v, float) { return gelu_tanh(v); });
}
DPCORE_VECTOR_LOOP void gelu_erf_grad_range_loop(int64_t n, const float* dy, const float* x, float* dx) {
  map_float_range(n, dy, x, dx, [](float g, float v) { return gelu_erf_grad(g, v); });
}
DPCORE_VECTOR_LOOP void gelu_tanh_grad_range_loop(int64_t n, const float* dy, const float* x, float* dx) {
  map_float_range(n, dy, x, dx, [](float g, float v) { return gelu_tanh_grad(g, v); });
}
DPCORE_VECTOR_VARIANTS(gelu_erf_range, (int64_t n, const float* x, const float* unused, float* y), (n, x, unused, y))
DPCORE_VECTOR_VARIANTS(gelu_tanh_range, (int64_t n, const float* x, const float* unused, float* y), (n, x, unused, y))
DPCORE_VECTOR_VARIANTS(gelu_erf_grad_range, (int64_t n, const float* dy, const float* x, float* dx), (n, dy, x, dx))
DPCORE_VECTOR_VARIANTS(gelu_tanh_grad_range, (int64_t n, const float* dy, const float* x, float* dx), (n, dy, x, dx))

using FloatRangeFn = void (*)(int64_t, const float*, const float*, float*);

// range(n, a, b, out) over the whole arrays, split over the threads (their starts, at
// multiples of 2^14, are block starts); 16-bit arrays in widened pieces, through the same
// range function.
template <class X>
void map_float_blocks(int64_t n, const X* a, const X* b, X* out, FloatRangeFn range) {
  if constexpr (std::is_same_v<X, float>) {
    for_element_chunks(n, [&](int64_t begin, int64_t end) { range(end - begin, a + begin, b + begin, out + begin); });
  } else {
    map_widened(n, a, a == b ? nullptr : b, out, [&](int64_t count, const float* wa, const float* wb, float* wout) {
      range(count, wa, wb, wout);
    });
  }
}

}  // namespace

template <class T>
void gelu_forward(GeluApproximate form, int64_t n, const T* x, T* y) {
  if constexpr (!std::is_same_v<T, double>) {
    map_float_blocks(n, x, x, y, form == GeluApproximate::None ? gelu_erf_range : gelu_tanh_range);
  } else if (form == GeluApproximate::None) {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(x[i]);
  } else {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
  }
}

template <class T>
void gelu_backward(GeluApproximate form, int64_t n, const T* dy, const T* x, T* dx) {
  if constexpr (!std::is_same_v<T, double>) {
    map_float_blocks(n, dy, x, dx, form == GeluApproximate::None ? gelu_erf_grad_range : gelu_tanh_grad_range);
  } else if (form == GeluApproximate::None) {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = gelu_erf_grad(dy[i], x[i]);
  } else {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = gelu_tanh_grad(dy[i], x[i]);
  }
}

template void gelu_forward<float>(GeluApproximate, int64_t, const float*, float*);
template void gelu_forward<double>(GeluApproximate, int64_t, const double*, double*);
template void gelu_backward<float>(GeluApproximate, int64_t, const float*, const float*, float*);
template void gelu_backward<double>(GeluApproximate, int64_t, const double*, const double*, double*);
template void gelu_forward<BFloat16>(GeluApproximate, int64_t, const BFloat16*, BFloat16*);
template void gelu_forward<Float16>(GeluApproximate, int64_t, const Float16*, Float16*);
template void gelu_backward<BFloat16>(GeluApproximate, int64_t, const BFloat16*, const BFloat16*, BFloat16*);
template void gelu_backward<Float16>(GeluApproximate, int64_t, const Float16*, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
