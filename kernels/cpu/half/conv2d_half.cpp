// conv2d with 16-bit tensors (issue 27): kernels/cpu/conv2d.cpp's im2col + GEMM data flow on
// gemm_half (16-bit operands, float32 accumulation). Every output is 16-bit and rounded
// ONCE from its float32 value, as under torch.autocast, where a convolution's output, its
// input gradient and its weight gradient all have the input's dtype:
//   forward          y_n  = rounded(W[K, CRS] * col_n + bias)
//   backward data    dx_n = rounded(col2im(W^T * dy_n)), the overlapping windows added in float32
//                    (stride 1: the forward convolution of dy with the flipped weights)
//   backward weight  dW   = rounded(sum_n dy_n[K, PQ] * col_n^T), dbias = rounded(sum_n,pq dy)
// im2col of 16-bit values is a copy, so the GEMM reads the operands exactly as stored.
// Every sum runs in an order set by the shape alone, so the bits do not depend on the
// thread count (the GEMM's own order is fixed the same way: gemm_half.h).
#include <algorithm>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::kernels::cpu {

namespace {

template <class H>
void conv2d_forward_half(const Conv2dShape& s, const H* x, const H* w, const H* bias, H* y) {
  const ConvDims d(s);
  parallel_for_each(s.N, batch_threads(s), [&](int64_t n) {
    H* col = thread_scratch<H>(size_t(d.crs * d.pq), 0);
    H* y_n = y + n * d.image_out;
    im2col(s, x + n * d.image_in, col, d.pq);
    // The bias rows first (exact: already 16-bit); the product is added to them in float32
    // and the sum rounded once (beta 1), as linear's 16-bit forward does.
    // (A loop over the bits, which GCC vectorises; std::fill_n of the struct it did not.)
    if (bias)
      for (int64_t k = 0; k < s.K; ++k) {
        const uint16_t b = bias[k].bits;
        H* row = y_n + k * d.pq;
        for (int64_t i = 0; i < d.pq; ++i) row[i].bits = b;
      }
    gemm_half<H, H>(false, false, s.K, d.pq, d.crs, 1.f, w, d.crs, 0, col, d.pq, 0, bias ? 1.f : 0.f, y_n, d.pq, 0,
                    1);
  });
}

// With stride 1 the input gradient is itself a convolution: dx[c, h, w] = sum over k, r, s
// of W[k, c, r, s] dy[k, h + pad_h - r, w + pad_w - s], which is the forward convolution of
// dy (K channels) with the weights flipped in both axes and their channels swapped,
// W'[c, k, r, s] = W[k, c, R-1-r, S-1-s], padded by R-1-pad_h and S-1-pad_w. That runs on
// the forward's path (its GEMM's 16-bit output, no float32 column matrix and col2im), each
// element still one float32 sum rounded once. Its GEMM has a row per input channel, so an
// image of few channels keeps the column path (cpu_kernels_bench's Conv2dBf16BackwardData,
// 1 thread: 1 and 3 channels 3-4x slower this way, 16 channels and more 1.4-2.3x faster).
constexpr int64_t kFewestChannelsAsForward = 16;
template <class H>
bool backward_data_as_forward(const Conv2dShape& s, const H* dy, const H* w, H* dx) {
  if (s.C < kFewestChannelsAsForward || s.stride_h != 1 || s.stride_w != 1 || s.pad_h >= s.R || s.pad_w >= s.S ||
      s.P == 0 || s.Q == 0)
    return false;
  Conv2dShape t = s;
  t.C = s.K, t.H = s.P, t.W = s.Q, t.K = s.C;
  t.pad_h = s.R - 1 - s.pad_h, t.pad_w = s.S - 1 - s.pad_w;
  t.P = s.H, t.Q = s.W;
  std::vector<H> flipped(size_t(s.w_size()));
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t q = 0; q < s.S; ++q)
          flipped[size_t(((c * s.K + k) * s.R + r) * s.S + q)] =
              w[((k * s.C + c) * s.R + (s.R - 1 - r)) * s.S + (s.S - 1 - q)];
  conv2d_forward_half(t, dy, flipped.data(), static_cast<const H*>(nullptr), dx);
  return true;
}

template <class H>
void conv2d_backward_data_half(const Conv2dShape& s, const H* dy, const H* w, H* dx) {
  if (backward_data_as_forward(s, dy, w, dx)) return;
  const ConvDims d(s);
  parallel_for_each(s.N, batch_threads(s), [&](int64_t n) {
    // The column gradient and its col2im in float32; only dx itself is rounded.
    float* col = thread_scratch<float>(size_t(d.crs * d.pq), 0);
    float* image = thread_scratch<float>(size_t(d.image_in), 1);
    gemm_half<H, float>(true, false, d.crs, d.pq, s.K, 1.f, w, d.crs, 0, dy + n * d.image_out, d.pq, 0, 0.f, col, d.pq,
                        0, 1);
    col2im(s, col, image);
    H* dx_n = dx + n * d.image_in;
    for (int64_t i = 0; i < d.image_in; ++i) dx_n[i] = from_float<H>(image[i]);
  });
}

// sum[K, CRS] = the float32 weight gradient of images [r.begin, r.end), a group of images
// per GEMM (weight_grad_group), the groups added in order (zeros for an empty range).
template <class H>
void weight_grad_of_images(const Conv2dShape& s, const H* x, const H* dy, Range r, float* sum) {
  const ConvDims d(s);
  const int64_t count = r.end - r.begin;
  if (count == 0) {
    std::fill_n(sum, s.K * d.crs, 0.f);
    return;
  }
  const int64_t group = weight_grad_group(s, count);
  H* col = thread_scratch<H>(size_t(d.crs * group * d.pq), 1);
  H* dy_group = thread_scratch<H>(size_t(s.K * group * d.pq), 2);
  for (int64_t n0 = r.begin; n0 < r.end; n0 += group) {
    const int64_t images = std::min(group, r.end - n0), ld = images * d.pq;
    im2col_images(s, x, n0, images, col);  // copies of 16-bit values: exact
    const H* dy_mat = dy_matrix(s, dy, n0, images, dy_group);
    gemm_half<H, float>(false, true, s.K, d.crs, ld, 1.f, dy_mat, ld, 0, col, ld, 0, n0 == r.begin ? 0.f : 1.f, sum,
                        d.crs, 0, 1);
  }
}

// The bias gradient's sum of channel k of dy over the images and pixels, in float32, in an
// order set by the shape: pixel i of each image into running sum i mod 16, image after
// image, then the 16 sums in order. (One running sum would be a chain of dependent adds,
// several times slower; these 16 GCC keeps in one vector register.)
template <class H>
float channel_sum(const Conv2dShape& s, const H* dy, int64_t k) {
  const ConvDims d(s);
  constexpr int64_t kLanes = 16;
  float lanes[kLanes] = {};
  const int64_t whole = d.pq / kLanes * kLanes;
  for (int64_t n = 0; n < s.N; ++n) {
    const H* row = dy + n * d.image_out + k * d.pq;
    for (int64_t i = 0; i < whole; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += to_float(row[i + l]);
    for (int64_t i = whole; i < d.pq; ++i) lanes[i - whole] += to_float(row[i]);
  }
  float total = 0.f;
  for (float lane : lanes) total += lane;
  return total;
}

// As the float32 convolution (kernels/cpu/conv2d.cpp, conv2d_backward_weight): the batch
// cut into kWeightGradChunks chunks whatever the thread count, each chunk's float32 sum in
// a buffer of its own, the threads sharing out the chunks, then the chunks added in order
// and each element rounded once: the same bits on any thread count.
template <class H>
void conv2d_backward_weight_half(const Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate) {
  const ConvDims d(s);
  const int64_t size = s.K * d.crs;
  const int chunks = int(std::clamp<int64_t>(s.N, 1, kWeightGradChunks));
  float* partial = thread_scratch<float>(size_t(chunks * size), 0);  // partial + c * size: chunk c's sum
  parallel_for_each(chunks, kernel_threads(), [&](int64_t c) {
    weight_grad_of_images(s, x, dy, split_range(s.N, chunks, int(c)), partial + c * size);
  });
#pragma omp parallel for num_threads(kernel_threads()) schedule(static) if (s.K > 1)
  for (int64_t k = 0; k < s.K; ++k) {
    for (int64_t j = 0; j < d.crs; ++j) {
      float total = partial[k * d.crs + j];
      for (int c = 1; c < chunks; ++c) total += partial[c * size + k * d.crs + j];
      H& out = dw[k * d.crs + j];
      out = from_float<H>(accumulate ? to_float(out) + total : total);
    }
    if (dbias) dbias[k] = from_float<H>((accumulate ? to_float(dbias[k]) : 0.f) + channel_sum(s, dy, k));
  }
}

}  // namespace

#define DPCORE_HALF_CONV2D(H)                                                                            \
  template <>                                                                                            \
  void conv2d_forward<H>(const Conv2dShape& s, const H* x, const H* w, const H* bias, H* y) {            \
    conv2d_forward_half(s, x, w, bias, y);                                                               \
  }                                                                                                      \
  template <>                                                                                            \
  void conv2d_backward_data<H>(const Conv2dShape& s, const H* dy, const H* w, H* dx) {                   \
    conv2d_backward_data_half(s, dy, w, dx);                                                             \
  }                                                                                                      \
  template <>                                                                                            \
  void conv2d_backward_weight<H>(const Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate) { \
    conv2d_backward_weight_half(s, x, dy, dw, dbias, accumulate);                                        \
  }
DPCORE_HALF_CONV2D(BFloat16)
DPCORE_HALF_CONV2D(Float16)
#undef DPCORE_HALF_CONV2D

}  // namespace dpcore::kernels::cpu
