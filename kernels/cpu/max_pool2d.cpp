// max_pool2d with PyTorch's CPU semantics, one input plane (n, c) per loop iteration.
//
// 16-bit planes (X = BFloat16 or Float16) run the same bodies on values widened as they
// are read (stored_values.h): the maximum is one of them, so the output is exact, and the
// backward adds the gradients of overlapping windows in float32 in a buffer of the
// thread's and rounds each sum once. The 2x2 planes are widened first, a plane at a time.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/error.h"
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/stored_values.h"

namespace dpcore::kernels::cpu {

// argmax is an int32 index inside the plane. (That every window holds a real element, so
// that argmax never points into the padding, is the op's rule: ops::check_max_pool2d_options.)
static void check_pool_shape(const Pool2dShape& s) {
  DPCORE_CHECK(s.H * s.W <= INT32_MAX, "max_pool2d: input plane ", s.H, "x", s.W, " is too large for int32 argmax");
}

template <class X>
static void pool_plane(const Pool2dShape& s, const X* x, X* y, int32_t* argmax) {
  using T = computed_t<X>;
  for (int64_t p = 0; p < s.P; ++p) {
    const int64_t h_begin = std::max<int64_t>(p * s.stride_h - s.pad_h, 0);
    const int64_t h_end = std::min(p * s.stride_h - s.pad_h + s.kernel_h, s.H);
    for (int64_t q = 0; q < s.Q; ++q) {
      const int64_t w_begin = std::max<int64_t>(q * s.stride_w - s.pad_w, 0);
      const int64_t w_end = std::min(q * s.stride_w - s.pad_w + s.kernel_w, s.W);
      // Padding is -inf, so it never wins: scan only the real elements. Strictly greater
      // keeps the first of equal values; NaN always replaces (a NaN anywhere gives NaN).
      T best = -std::numeric_limits<T>::infinity();
      int64_t best_index = h_begin * s.W + w_begin;
      for (int64_t h = h_begin; h < h_end; ++h)
        for (int64_t w = w_begin; w < w_end; ++w) {
          const T v = value(x[h * s.W + w]);
          if (v > best || std::isnan(v)) {
            best = v;
            best_index = h * s.W + w;
          }
        }
      y[p * s.Q + q] = stored<X>(best);
      argmax[p * s.Q + q] = int32_t(best_index);
    }
  }
}

// The reference models' pool: 2x2 windows, stride 2, no padding, so every window lies
// inside the plane and its four taps sit at fixed offsets. The same scan as pool_plane
// (row-major, strictly greater or NaN replaces), written with selects so that the loop
// over q vectorises: as a branch, "is this one bigger" is a coin toss on real activations
// that the predictor loses half the time, and the branchy scan cost more than the
// convolution it follows in a simplenet step.
//
// Outputs [q_begin, q_end) of one output row, whose windows start in row `top`. Always
// inlined: as a call, three per row, it cost 15% on 16-wide rows.
template <class T>
[[gnu::always_inline]] static inline void pool_outputs_2x2(const T* top, const T* bottom, int32_t W, int32_t row_start,
                                                           int64_t q_begin, int64_t q_end, T* y, int32_t* argmax) {
#pragma omp simd
  for (int64_t q = q_begin; q < q_end; ++q) {
    T best = top[2 * q];
    int32_t at = 0;  // offset of the winner from the window's first element
    auto consider = [&](T v, int32_t offset) {
      const bool take = v > best || v != v;
      best = take ? v : best;
      at = take ? offset : at;
    };
    consider(top[2 * q + 1], 1);
    consider(bottom[2 * q], W);
    consider(bottom[2 * q + 1], W + 1);
    y[q] = best;
    argmax[q] = row_start + int32_t(2 * q) + at;
  }
}

// One 16-byte vector of floats, the width the build targets (x86-64 without -march).
constexpr int64_t kPoolBlock = 4;

// Each row in two runs of whole vectors, so that neither leaves a scalar remainder: GCC
// compiles the remainder after a loop's last full vector back into branches, 3 of every 7
// outputs of a 7-wide row (fashioncnn's second pool), which then ran 4x slower per element
// than a 16-wide one. The second run is the row's last kPoolBlock outputs, overlapping the
// first where the width is not a multiple of the block (it writes the same values again).
// Rows narrower than a block are left to the plain loop.
template <class T>
static void pool_plane_2x2(const Pool2dShape& s, const T* x, T* y, int32_t* argmax) {
  const int32_t W = int32_t(s.W);
  for (int64_t p = 0; p < s.P; ++p) {
    const T* top = x + 2 * p * s.W;
    const T* bottom = top + s.W;
    const int32_t row_start = int32_t(2 * p) * W;
    T* y_row = y + p * s.Q;
    int32_t* argmax_row = argmax + p * s.Q;
    if (s.Q < kPoolBlock) {
      pool_outputs_2x2(top, bottom, W, row_start, 0, s.Q, y_row, argmax_row);
      continue;
    }
    const int64_t whole = s.Q - s.Q % kPoolBlock;
    pool_outputs_2x2(top, bottom, W, row_start, 0, whole, y_row, argmax_row);
    if (whole < s.Q) pool_outputs_2x2(top, bottom, W, row_start, s.Q - kPoolBlock, s.Q, y_row, argmax_row);
  }
}

// A 16-bit plane: widened into a float32 plane of the thread's, pooled by the float loop,
// the maxima rounded back, exactly. (The scan on 16-bit values widened one by one does not
// vectorise, not even built for AVX-512: it ran ten times slower than this.)
template <class H>
static void pool_half_plane_2x2(const Pool2dShape& s, const H* x, H* y, int32_t* argmax) {
  thread_local std::vector<float> x32, y32;
  x32.resize(size_t(s.H * s.W)), y32.resize(size_t(s.P * s.Q));
  cast_on_this_thread(s.H * s.W, x, x32.data());
  pool_plane_2x2(s, static_cast<const float*>(x32.data()), y32.data(), argmax);
  cast_on_this_thread(s.P * s.Q, static_cast<const float*>(y32.data()), y);
}
static void pool_plane_2x2(const Pool2dShape& s, const BFloat16* x, BFloat16* y, int32_t* argmax) {
  pool_half_plane_2x2(s, x, y, argmax);
}
static void pool_plane_2x2(const Pool2dShape& s, const Float16* x, Float16* y, int32_t* argmax) {
  pool_half_plane_2x2(s, x, y, argmax);
}

static bool is_2x2_stride_2(const Pool2dShape& s) {
  return s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0 &&
         2 * s.P <= s.H && 2 * s.Q <= s.W;
}

template <class T>
void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, int32_t* argmax) {
  check_pool_shape(s);
  const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
  const bool fixed_taps = is_2x2_stride_2(s);
#pragma omp parallel for num_threads(kernel_threads()) if (planes * in_plane >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i) {
    if (fixed_taps) pool_plane_2x2(s, x + i * in_plane, y + i * out_plane, argmax + i * out_plane);
    else pool_plane(s, x + i * in_plane, y + i * out_plane, argmax + i * out_plane);
  }
}

// dx of one plane: zeros, then dy scattered through argmax in output order, so that
// overlapping windows add up in a fixed order. 16-bit: the sums in a float32 buffer of the
// thread's, each rounded once into dx.
template <class X>
static void scatter_plane(int64_t in_plane, int64_t out_plane, const X* dy, const int32_t* argmax, X* dx) {
  if constexpr (std::is_same_v<X, computed_t<X>>) {
    std::fill(dx, dx + in_plane, X(0));
    for (int64_t j = 0; j < out_plane; ++j) dx[argmax[j]] += dy[j];
  } else {
    thread_local std::vector<float> sums;
    sums.assign(size_t(in_plane), 0.f);
    for (int64_t j = 0; j < out_plane; ++j) sums[size_t(argmax[j])] += value(dy[j]);
    cast_on_this_thread(in_plane, static_cast<const float*>(sums.data()), dx);
  }
}

template <class T>
void max_pool2d_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax, T* dx) {
  check_pool_shape(s);
  const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
#pragma omp parallel for num_threads(kernel_threads()) if (planes * in_plane >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i)
    scatter_plane(in_plane, out_plane, dy + i * out_plane, argmax + i * out_plane, dx + i * in_plane);
}

// Each plane is masked right after its scatter, while it is still in cache: the same
// values as relu_backward over the whole of dx afterwards, without that second pass.
template <class T>
void max_pool2d_relu_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax, const T* relu_y, T* dx) {
  check_pool_shape(s);
  const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
#pragma omp parallel for num_threads(kernel_threads()) if (planes * in_plane >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i) {
    T* dx_plane = dx + i * in_plane;
    const T* y_plane = relu_y + i * in_plane;
    scatter_plane(in_plane, out_plane, dy + i * out_plane, argmax + i * out_plane, dx_plane);
#pragma omp simd
    for (int64_t e = 0; e < in_plane; ++e) dx_plane[e] = relu_grad(dx_plane[e], y_plane[e]);
  }
}

template void max_pool2d_forward<float>(const Pool2dShape&, const float*, float*, int32_t*);
template void max_pool2d_forward<double>(const Pool2dShape&, const double*, double*, int32_t*);
template void max_pool2d_forward<BFloat16>(const Pool2dShape&, const BFloat16*, BFloat16*, int32_t*);
template void max_pool2d_forward<Float16>(const Pool2dShape&, const Float16*, Float16*, int32_t*);
template void max_pool2d_backward<float>(const Pool2dShape&, const float*, const int32_t*, float*);
template void max_pool2d_backward<double>(const Pool2dShape&, const double*, const int32_t*, double*);
template void max_pool2d_backward<BFloat16>(const Pool2dShape&, const BFloat16*, const int32_t*, BFloat16*);
template void max_pool2d_backward<Float16>(const Pool2dShape&, const Float16*, const int32_t*, Float16*);
template void max_pool2d_relu_backward<float>(const Pool2dShape&, const float*, const int32_t*, const float*, float*);
template void max_pool2d_relu_backward<double>(const Pool2dShape&, const double*, const int32_t*, const double*,
                                               double*);

}  // namespace dpcore::kernels::cpu
