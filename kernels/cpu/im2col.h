// Unfolding of one image into the matrix that turns a convolution into a GEMM (Caffe's
// im2col), and its adjoint. Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/half_types.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cpu {

// The sizes the im2col convolutions (conv2d.cpp, half/conv2d_half.cpp) work in.
struct ConvDims {
  int64_t crs, pq, image_in, image_out;
  explicit ConvDims(const Conv2dShape& s)
      : crs(s.C * s.R * s.S), pq(s.P * s.Q), image_in(s.C * s.H * s.W), image_out(s.K * s.P * s.Q) {}
};

// Threads over the batch when every thread gets an image; otherwise a team of one
// (and the GEMMs split across the threads instead).
inline int batch_threads(const Conv2dShape& s) {
  const int threads = kernel_threads();
  return s.N >= threads ? threads : 1;
}

// The weight gradient's batch is cut into this many contiguous chunks (one image each in
// a smaller batch) whatever the thread count, each summed on its own, the chunks then added
// in order: the same bits on any thread count (conv2d_backward_weight).
constexpr int64_t kWeightGradChunks = 16;

// GEMMs with an inner dimension (summed over) of only P*Q output pixels run far below
// peak on the deep, low-resolution layers, so the weight gradient is taken over several
// images at once, their columns side by side: inner dimension images * P*Q >= this.
constexpr int64_t kWeightGradDepth = 256;

// Images per weight-gradient GEMM when `count` are left: enough for kWeightGradDepth
// summed pixels, at least one, at most `count`.
inline int64_t weight_grad_group(const Conv2dShape& s, int64_t count) {
  const int64_t pq = s.P * s.Q, enough = (kWeightGradDepth + pq - 1) / pq;
  return enough < 1 ? 1 : enough > count ? count : enough;
}

// col[(c*R + r)*S + s][p*Q + q] = x[c][p*stride_h - pad_h + r][q*stride_w - pad_w + s], or 0 where
// that position falls in the padding. x is one image [C,H,W]; `ld` is the row stride of
// col (>= P*Q), so the columns of several images can sit side by side.
template <class T>
void im2col(const Conv2dShape& s, const T* x, T* col, int64_t ld);

// im2col of images [n0, n0 + images) of the batch x, side by side in col (row stride
// images * P*Q).
template <class T>
void im2col_images(const Conv2dShape& s, const T* x, int64_t n0, int64_t images, T* col);

// dy of images [n0, n0 + images) as one [K, images * P*Q] matrix, the weight gradient's
// other operand: dy's own rows for one image, else copied into `scratch`, which is returned.
template <class T>
const T* dy_matrix(const Conv2dShape& s, const T* dy, int64_t n0, int64_t images, T* scratch);

// The adjoint of im2col: dx[c][h][w] = sum of the col entries that were copied from
// x[c][h][w] (overlapping windows add up). dx is one image [C,H,W] and is overwritten;
// col has row stride P*Q and is used as scratch (its padding entries are zeroed).
template <class T>
void col2im(const Conv2dShape& s, T* col, T* dx);

}  // namespace dpcore::kernels::cpu
