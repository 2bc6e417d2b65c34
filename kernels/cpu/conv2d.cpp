// conv2d as im2col + GEMM, one image at a time (Caffe's scheme), except where the direct
// stride-1 convolution of conv2d_direct.h applies (float on an AVX-512 CPU). The batch is spread over
// the OpenMP threads, each with its own im2col buffer; in the forward and backward data,
// with fewer images than threads, the GEMMs themselves are split instead (gemm_parallel,
// whose blocks follow the shape, so either way gives the same bits); the weight gradient
// shares out fixed chunks of the batch (conv2d_backward_weight below).
//
// Per image n, with col_n = im2col(x_n) of shape [C*R*S, P*Q]:
//   forward          y_n  = W[K, CRS] * col_n  + bias
//   backward data    dx_n = col2im(W^T * dy_n)
//   backward weight  dW   = sum_n dy_n[K, PQ] * col_n^T,  dbias = sum_n dy_n * ones[PQ]
// The bias rides inside the GEMMs as one more column of W and one more row of col, all
// ones: [W | b] * [col; 1] = W*col + b, and dy * [col; 1]^T = [dW | dbias]. That saves a
// separate pass over y or dy, which costs as much as the GEMM on the thin first layers.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/conv2d_direct.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/relu.h"

namespace dpcore::kernels::cpu {

namespace {

// im2col of images [n0, n0 + images) side by side in col (row stride images*PQ), plus
// the row of ones under them when `ones_row`.
template <class T>
void im2col_with_ones(const Conv2dShape& s, const T* x, int64_t n0, int64_t images, bool ones_row, T* col) {
  const ConvDims d(s);
  const int64_t ld = images * d.pq;
  im2col_images(s, x, n0, images, col);
  if (ones_row) std::fill(col + d.crs * ld, col + (d.crs + 1) * ld, T(1));
}

// The forward, with the relu (when `relu`) applied to each image's output right after its
// GEMM has written it, while it is still in cache, instead of in a second pass over the
// whole batch's output. (When the GEMMs are split across the threads instead of the batch,
// the relu of an image runs on one thread; those are batches smaller than the team.)
template <class T>
void conv2d_forward_images(const Conv2dShape& s, const T* x, const T* w, const T* bias, bool relu, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv2d_forward_applies(s)) return direct_conv2d_forward(s, x, w, bias, relu, y);
  }
  const ConvDims d(s);
  const int64_t depth = d.crs + (bias ? 1 : 0);
  std::vector<T> w_and_bias;  // [W | b], row k = w[k, :], bias[k]
  if (bias) {
    w_and_bias.resize(s.K * depth);
    for (int64_t k = 0; k < s.K; ++k) {
      std::copy_n(w + k * d.crs, d.crs, w_and_bias.data() + k * depth);
      w_and_bias[k * depth + d.crs] = bias[k];
    }
  }
  const T* w_mat = bias ? w_and_bias.data() : w;
  parallel_for_each(s.N, batch_threads(s), [&](int64_t n) {
    T* col = thread_scratch<T>(depth * d.pq, 0);
    T* y_n = y + n * d.image_out;
    im2col_with_ones(s, x, n, 1, bias != nullptr, col);
    gemm_parallel(false, false, s.K, d.pq, depth, T(1), w_mat, depth, col, d.pq, T(0), y_n, d.pq);
    if (relu) {
#pragma omp simd
      for (int64_t i = 0; i < d.image_out; ++i) y_n[i] = relu_value(y_n[i]);
    }
  });
}

}  // namespace

template <class T>
void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  conv2d_forward_images(s, x, w, bias, false, y);
}

template <class T>
void conv2d_relu_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  conv2d_forward_images(s, x, w, bias, true, y);
}

template <class T>
void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv2d_backward_data_applies(s)) return direct_conv2d_backward_data(s, dy, w, dx);
  }
  const ConvDims d(s);
  parallel_for_each(s.N, batch_threads(s), [&](int64_t n) {
    T* col = thread_scratch<T>(d.crs * d.pq, 0);
    gemm_parallel(true, false, d.crs, d.pq, s.K, T(1), w, d.crs, dy + n * d.image_out, d.pq, T(0), col, d.pq);
    col2im(s, col, dx + n * d.image_in);
  });
}

namespace {

// grad[K, depth] = the gradient [dW | dbias] (depth = CRS + 1) or dW alone (depth = CRS)
// of images [r.begin, r.end), summed over them in order, a group of images per GEMM.
template <class T>
void weight_grad_of_images(const Conv2dShape& s, const T* x, const T* dy, Range r, int64_t depth, T* grad) {
  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv2d_backward_weight_applies(s)) return direct_conv2d_weight_grad(s, x, dy, r, depth, grad);
  }
  const ConvDims d(s);
  const int64_t count = r.end - r.begin;
  if (count == 0) {
    std::fill(grad, grad + s.K * depth, T(0));
    return;
  }
  const int64_t group = weight_grad_group(s, count);
  T* col = thread_scratch<T>(depth * group * d.pq, 0);
  T* dy_group = thread_scratch<T>(s.K * group * d.pq, 1);
  for (int64_t n0 = r.begin; n0 < r.end; n0 += group) {
    const int64_t images = std::min(group, r.end - n0), ld = images * d.pq;
    im2col_with_ones(s, x, n0, images, depth > d.crs, col);
    const T* dy_mat = dy_matrix(s, dy, n0, images, dy_group);
    const T beta = n0 == r.begin ? T(0) : T(1);
    gemm(false, true, s.K, depth, ld, T(1), dy_mat, ld, col, ld, beta, grad, depth);
  }
}

}  // namespace

// Each chunk of the batch sums its images' gradient into a buffer of its own (its GEMMs one
// BLAS call each), and the buffers are then added in chunk order. The chunks depend on the
// shape alone, not on the threads, so the order of every sum does too: the same bits on any
// thread count (a pipeline stage's team of 2 threads gives one device's 16 threads' bits).
// The threads share out the chunks; a batch of fewer images than threads leaves some idle
// (splitting its GEMMs as well would cut them into more BLAS calls on every thread count).
template <class T>
void conv2d_backward_weight(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate) {
  const ConvDims d(s);
  const int64_t depth = d.crs + (dbias ? 1 : 0), size = s.K * depth;
  const int chunks = int(std::clamp<int64_t>(s.N, 1, kWeightGradChunks));  // an empty batch: one empty chunk, zeros
  T* partial = thread_scratch<T>(size_t(chunks * size), 2);  // partial + c * size: chunk c's sum
  parallel_for_each(chunks, kernel_threads(), [&](int64_t c) {
    weight_grad_of_images(s, x, dy, split_range(s.N, chunks, int(c)), depth, partial + c * size);
  });
#pragma omp parallel for num_threads(kernel_threads()) schedule(static) if (s.K > 1)
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t j = 0; j < depth; ++j) {
      T total = partial[k * depth + j];
      for (int c = 1; c < chunks; ++c) total += partial[c * size + k * depth + j];
      T& out = j < d.crs ? dw[k * d.crs + j] : dbias[k];
      out = accumulate ? out + total : total;
    }
}

#define DPCORE_INSTANTIATE(T)                                                                         \
  template void conv2d_forward<T>(const Conv2dShape&, const T*, const T*, const T*, T*);              \
  template void conv2d_relu_forward<T>(const Conv2dShape&, const T*, const T*, const T*, T*);         \
  template void conv2d_backward_data<T>(const Conv2dShape&, const T*, const T*, T*);                  \
  template void conv2d_backward_weight<T>(const Conv2dShape&, const T*, const T*, T*, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
