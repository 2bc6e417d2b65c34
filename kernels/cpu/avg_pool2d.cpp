// avg_pool2d and global average pooling with PyTorch's semantics, one input plane (n, c)
// per loop iteration. Sums run in double: the float results are then the rounded true
// means whatever the window or plane size, and pooling is bound by memory, not by adds.
// Written once over the storage type X (kernels/cpu/stored_values.h): a 16-bit result is
// float's result rounded once more, the conversion path's bits without its float32 copies.
#include <algorithm>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/stored_values.h"

namespace dpcore::kernels::cpu {

namespace {

// A mean computed in double, stored as X: rounded to float or double as the float and double
// kernels round it, then (16-bit X) once more.
template <class X>
X rounded(double mean) {
  return stored<X>(computed_t<X>(mean));
}

// The input range [begin, end) that window o covers along one axis, clipped to the input.
struct Span {
  int64_t begin, end;
};
Span window_span(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min(start + kernel, size)};
}

// The outputs [begin, end) along one axis whose windows contain input index i.
Span windows_holding(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t outputs) {
  const int64_t shifted = i + pad;  // window o holds i when o * stride <= shifted < o * stride + kernel
  return {shifted < kernel ? 0 : (shifted - kernel) / stride + 1, std::min(shifted / stride + 1, outputs)};
}

// What the mean of the window over `rows` x `cols` divides by: the whole kernel when the
// padding counts as zeros (PyTorch's default), else only the real elements.
double divisor(const Pool2dShape& s, bool count_include_pad, Span rows, Span cols) {
  if (count_include_pad) return double(s.kernel_h * s.kernel_w);
  return double((rows.end - rows.begin) * (cols.end - cols.begin));
}

template <class X>
void average_plane(const Pool2dShape& s, bool count_include_pad, const X* x, X* y) {
  for (int64_t p = 0; p < s.P; ++p) {
    const Span rows = window_span(p, s.kernel_h, s.stride_h, s.pad_h, s.H);
    for (int64_t q = 0; q < s.Q; ++q) {
      const Span cols = window_span(q, s.kernel_w, s.stride_w, s.pad_w, s.W);
      double sum = 0.0;  // padding adds nothing
      for (int64_t h = rows.begin; h < rows.end; ++h)
        for (int64_t w = cols.begin; w < cols.end; ++w) sum += double(value(x[h * s.W + w]));
      y[p * s.Q + q] = rounded<X>(sum / divisor(s, count_include_pad, rows, cols));
    }
  }
}

// dx of one plane as a gather: each element adds dy / divisor of the windows holding it,
// in output order, and is written once.
template <class X>
void gather_plane_gradient(const Pool2dShape& s, bool count_include_pad, const X* dy, X* dx) {
  for (int64_t h = 0; h < s.H; ++h) {
    const Span ps = windows_holding(h, s.kernel_h, s.stride_h, s.pad_h, s.P);
    for (int64_t w = 0; w < s.W; ++w) {
      const Span qs = windows_holding(w, s.kernel_w, s.stride_w, s.pad_w, s.Q);
      double sum = 0.0;
      for (int64_t p = ps.begin; p < ps.end; ++p) {
        const Span rows = window_span(p, s.kernel_h, s.stride_h, s.pad_h, s.H);
        for (int64_t q = qs.begin; q < qs.end; ++q)
          sum += double(value(dy[p * s.Q + q])) /
                 divisor(s, count_include_pad, rows, window_span(q, s.kernel_w, s.stride_w, s.pad_w, s.W));
      }
      dx[h * s.W + w] = rounded<X>(sum);
    }
  }
}

}  // namespace

template <class X>
void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const X* x, X* y) {
  const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
#pragma omp parallel for num_threads(kernel_threads()) if (planes * in_plane >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i) average_plane(s, count_include_pad, x + i * in_plane, y + i * out_plane);
}

template <class X>
void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const X* dy, X* dx) {
  const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
#pragma omp parallel for num_threads(kernel_threads()) if (planes * in_plane >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i)
    gather_plane_gradient(s, count_include_pad, dy + i * out_plane, dx + i * in_plane);
}

template <class X>
void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const X* x, X* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (planes * plane_size >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i) {
    const X* plane = x + i * plane_size;
    double sum = 0.0;
    for (int64_t e = 0; e < plane_size; ++e) sum += double(value(plane[e]));
    y[i] = rounded<X>(sum / double(plane_size));
  }
}

template <class X>
void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const X* dy, X* dx) {
#pragma omp parallel for num_threads(kernel_threads()) if (planes * plane_size >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < planes; ++i)
    std::fill(dx + i * plane_size, dx + (i + 1) * plane_size, rounded<X>(double(value(dy[i])) / double(plane_size)));
}

#define DPCORE_INSTANTIATE(T)                                                              \
  template void avg_pool2d_forward<T>(const Pool2dShape&, bool, const T*, T*);             \
  template void avg_pool2d_backward<T>(const Pool2dShape&, bool, const T*, T*);            \
  template void global_avg_pool2d_forward<T>(int64_t, int64_t, const T*, T*);              \
  template void global_avg_pool2d_backward<T>(int64_t, int64_t, const T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
